//! Serving certificates: loaded from files and reloaded when they change, or generated for
//! local use; optional client certificate verification.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// A certificate or key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate.
    #[error("no certificate in {0}")]
    NoCertificate(PathBuf),
    /// A PEM file holds no usable private key.
    #[error("no private key in {path}")]
    NoKey {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A malformed PEM section.
    #[error("malformed PEM in {path}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the key, the pair or the client CA.
    #[error("{context}")]
    Rustls {
        /// What was being done.
        context: String,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
    /// The client CA bundle is unusable.
    #[error("invalid client CA bundle {path}")]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// Certificate generation failed.
    #[error("failed to generate a self-signed certificate")]
    Generate(#[source] rcgen::Error),
}

/// The cryptography in use: ring, as one provider for every rustls object.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain file and its private key file.
#[derive(Clone, Debug)]
pub struct CertificateFiles {
    /// PEM chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl CertificateFiles {
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        Ok((read(&self.cert)?, read(&self.key)?))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses a PEM chain and key and checks that they belong together.
pub fn certified_key(
    files: &CertificateFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: files.cert.clone(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(files.cert.clone()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| TlsError::NoKey {
        path: files.key.clone(),
        source,
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|source| TlsError::Rustls {
        context: format!(
            "{} and {} are not a usable certificate and key",
            files.cert.display(),
            files.key.display()
        ),
        source,
    })
}

/// Serves whatever certificate it holds now; swapped atomically on reload, so handshakes in
/// flight keep the pair they started with.
#[derive(Debug)]
pub struct ReloadingResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ReloadingResolver {
    /// Starts with `key`.
    pub fn new(key: CertifiedKey) -> Self {
        ReloadingResolver {
            current: ArcSwap::from_pointee(key),
        }
    }

    /// Serves `key` from the next handshake on.
    pub fn replace(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }

    /// When the certificate served now expires, in seconds since the Unix epoch.
    pub fn expires_at(&self) -> Option<i64> {
        expires_at(&self.current.load())
    }
}

/// The `notAfter` of `key`'s leaf certificate, in seconds since the Unix epoch; `None` if the
/// leaf does not parse as X.509 (rustls only checked that it matches the key).
pub fn expires_at(key: &CertifiedKey) -> Option<i64> {
    let leaf = key.cert.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The contents of a certificate file and its key file, as read.
pub type PairContents = (Vec<u8>, Vec<u8>);

/// Loads `files` into a new resolver, also returning the contents loaded, for [`watch`] to
/// compare against: a change between this load and the watcher's start is then still seen.
pub fn load(files: &CertificateFiles) -> Result<(ReloadingResolver, PairContents), TlsError> {
    let (cert, key) = files.read()?;
    let resolver = ReloadingResolver::new(certified_key(files, &cert, &key)?);
    Ok((resolver, (cert, key)))
}

/// Polls `files` every `interval` and serves a changed pair once it parses; a broken pair is
/// logged and counted once per change, and the last good pair stays in service.
///
/// Polling the contents, rather than watching inodes, catches both an in-place rewrite and the
/// way kubelet updates a Secret volume (a new timestamped directory and an atomic swap of the
/// `..data` symlink), which watchers on the old inode miss.
///
/// The certificate and the key are two files, read one after the other, so a poll can catch
/// a rotation half done (the new certificate with the old key). A pair that does not load is
/// therefore only reported once the same contents are read again on the next poll; a rotation
/// caught half done loads on that poll instead and is never reported as a failure.
///
/// `loaded` is what the resolver serves now, as read from the files.
pub async fn watch(
    files: CertificateFiles,
    loaded: PairContents,
    resolver: Arc<ReloadingResolver>,
    interval: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let mut state = ReloadState::new(loaded);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let files_now = files.clone();
        // File reads block; keep them off the request workers.
        let read = tokio::task::spawn_blocking(move || files_now.read()).await;
        let contents = match read {
            Ok(Ok(contents)) => contents,
            Ok(Err(err)) => {
                // Missing files are normal for an instant during some rotations; a file that
                // stays unreadable is worth a line at debug level, the old pair still serves.
                tracing::debug!(error = %crate::error_chain(&err), "certificate files unreadable");
                continue;
            }
            Err(_) => continue,
        };
        match state.observe(&files, contents) {
            Reload::Unchanged => {}
            Reload::Serve(key) => {
                if let Some(at) = expires_at(&key) {
                    metrics.cert_expires_at(at);
                }
                resolver.replace(*key);
                metrics.cert_reload(true);
                tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
            }
            Reload::NotYet(err) => tracing::debug!(
                error = %crate::error_chain(&err),
                "new certificate files do not load yet; checking again on the next poll"
            ),
            Reload::Broken(err) => {
                metrics.cert_reload(false);
                tracing::error!(
                    error = %crate::error_chain(&err),
                    "new serving certificate is unusable; keeping the previous one"
                );
            }
        }
    }
}

/// What one poll of the certificate files calls for.
#[derive(Debug)]
enum Reload {
    /// Nothing new.
    Unchanged,
    /// A new pair to serve.
    Serve(Box<CertifiedKey>),
    /// New contents that do not load, seen for the first time: maybe a rotation caught half
    /// done; judged on the next poll.
    NotYet(TlsError),
    /// New contents that do not load, seen twice: reported, once.
    Broken(TlsError),
}

/// The watcher's memory between polls.
struct ReloadState {
    /// The contents last acted on: served, or reported as broken.
    last: PairContents,
    /// Contents that did not load on the previous poll and are not reported yet.
    unsettled: Option<PairContents>,
}

impl ReloadState {
    fn new(loaded: PairContents) -> Self {
        ReloadState {
            last: loaded,
            unsettled: None,
        }
    }

    fn observe(&mut self, files: &CertificateFiles, contents: PairContents) -> Reload {
        if self.last == contents {
            self.unsettled = None;
            return Reload::Unchanged;
        }
        match certified_key(files, &contents.0, &contents.1) {
            Ok(key) => {
                self.last = contents;
                self.unsettled = None;
                Reload::Serve(Box::new(key))
            }
            Err(err) if self.unsettled.as_ref() == Some(&contents) => {
                self.last = contents;
                self.unsettled = None;
                Reload::Broken(err)
            }
            Err(err) => {
                self.unsettled = Some(contents);
                Reload::NotYet(err)
            }
        }
    }
}

/// A generated CA and a serving certificate it signed, for local use.
pub struct SelfSigned {
    /// The CA certificate, PEM; clients verify the server with it.
    pub ca_pem: String,
    /// The serving certificate and key.
    pub key: CertifiedKey,
}

/// Generates a CA and a serving certificate for `localhost`, `127.0.0.1` and `::1`.
pub fn self_signed() -> Result<SelfSigned, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut ca_params = CertificateParams::new(Vec::new()).map_err(TlsError::Generate)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "volume-health-webhook local CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(TlsError::Generate)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate().map_err(TlsError::Generate)?;
    let mut leaf_params = CertificateParams::new(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ])
    .map_err(TlsError::Generate)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params
        .signed_by(&leaf_key, &issuer)
        .map_err(TlsError::Generate)?;

    let chain = vec![leaf.der().clone(), ca_cert.der().clone()];
    // rcgen keys serialize as PKCS#8.
    let key = CertifiedKey::from_der(chain, PrivateKeyDer::from(leaf_key), &provider()).map_err(
        |source| TlsError::Rustls {
            context: "generated certificate".to_owned(),
            source,
        },
    )?;
    Ok(SelfSigned {
        ca_pem: ca_cert.pem(),
        key,
    })
}

/// The rustls configuration: TLS 1.2 and 1.3, ALPN `h2` and `http/1.1` (the apiserver's
/// admission client speaks HTTP/1.1, its authorization client may use h2), and client
/// certificates required and verified against `client_ca` when given.
pub fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    client_ca: Option<&Path>,
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            context: "protocol versions".to_owned(),
            source,
        })?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = read(path)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|source| TlsError::Pem {
                    path: path.to_owned(),
                    source,
                })?;
                roots.add(cert).map_err(|source| TlsError::Rustls {
                    context: format!("client CA in {}", path.display()),
                    source,
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|source| TlsError::ClientCa {
                    path: path.to_owned(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> PairContents {
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("generates");
        (
            generated.cert.pem().into_bytes(),
            generated.signing_key.serialize_pem().into_bytes(),
        )
    }

    fn files() -> CertificateFiles {
        CertificateFiles {
            cert: "tls.crt".into(),
            key: "tls.key".into(),
        }
    }

    #[test]
    fn a_rotation_caught_half_done_is_not_reported() {
        let (old, new) = (pair(), pair());
        let mut state = ReloadState::new(old.clone());
        assert!(matches!(
            state.observe(&files(), old.clone()),
            Reload::Unchanged
        ));
        // The new certificate read with the old key, then the whole new pair.
        let torn = (new.0.clone(), old.1.clone());
        assert!(matches!(state.observe(&files(), torn), Reload::NotYet(_)));
        assert!(matches!(
            state.observe(&files(), new.clone()),
            Reload::Serve(_)
        ));
        assert!(matches!(state.observe(&files(), new), Reload::Unchanged));
    }

    #[test]
    fn a_broken_pair_is_reported_once_when_seen_twice() {
        let (good, other) = (pair(), pair());
        let mut state = ReloadState::new(good.clone());
        let broken = (other.0, good.1.clone());
        assert!(matches!(
            state.observe(&files(), broken.clone()),
            Reload::NotYet(_)
        ));
        assert!(matches!(
            state.observe(&files(), broken.clone()),
            Reload::Broken(_)
        ));
        assert!(matches!(
            state.observe(&files(), broken.clone()),
            Reload::Unchanged
        ));
        assert!(matches!(state.observe(&files(), broken), Reload::Unchanged));
        // Going back to the served pair is a change too: served again, nothing reported.
        assert!(matches!(state.observe(&files(), good), Reload::Serve(_)));
    }

    #[test]
    fn expiry_is_the_leafs_not_after() {
        let key_pair = rcgen::KeyPair::generate().expect("generates");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("valid name");
        params.not_after = rcgen::date_time_ymd(2031, 1, 2);
        let cert = params.self_signed(&key_pair).expect("signs");
        let contents = (
            cert.pem().into_bytes(),
            key_pair.serialize_pem().into_bytes(),
        );
        let key = certified_key(&files(), &contents.0, &contents.1).expect("loads");
        // 2031-01-02T00:00:00Z
        assert_eq!(expires_at(&key), Some(1_925_078_400));
        let resolver = ReloadingResolver::new(key);
        assert_eq!(resolver.expires_at(), Some(1_925_078_400));
        let generated = self_signed().expect("generates");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let generated_expiry = expires_at(&generated.key).expect("parses");
        assert!(generated_expiry > i64::try_from(now).expect("fits"));
    }

    #[test]
    fn garbage_then_another_garbage_is_judged_afresh() {
        let good = pair();
        let mut state = ReloadState::new(good);
        let a = (b"not a cert".to_vec(), b"not a key".to_vec());
        let b = (b"still not".to_vec(), b"not a key".to_vec());
        assert!(matches!(state.observe(&files(), a), Reload::NotYet(_)));
        assert!(matches!(
            state.observe(&files(), b.clone()),
            Reload::NotYet(_)
        ));
        assert!(matches!(state.observe(&files(), b), Reload::Broken(_)));
    }
}
