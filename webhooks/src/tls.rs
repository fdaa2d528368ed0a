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
    /// A pair that loads, but whose certificate a client would refuse.
    #[error("{path} is not a serving certificate to use: {why}")]
    Unservable {
        /// The certificate file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
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

    /// `ca.crt` beside the certificate, as a `kubernetes.io/tls` Secret from cert-manager or the
    /// provided-certs overlay carries it: the CA the apiserver is given to trust.
    pub fn ca(&self) -> PathBuf {
        self.cert.with_file_name("ca.crt")
    }

    /// The CA beside the certificate, when there is one.
    fn read_ca(&self) -> Result<Option<Vec<u8>>, TlsError> {
        let path = self.ca();
        match fs::read(&path) {
            Ok(pem) => Ok(Some(pem)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(TlsError::Read { path, source }),
        }
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

/// Checks that a client would accept `key`'s leaf from this server: valid now (between its
/// `notBefore` and `notAfter`), for serving (its extended key usage, when it has one, includes
/// `serverAuth` or any), and, when `server_name` is given, naming it (a DNS name of its subject
/// alternative names, `*.` wildcards matching one label, or an IP address written as text).
/// Without a `server_name` no name is checked: the server does not know by which name its
/// clients reach it (a Service's DNS name, an IP in a webhook URL).
pub fn check_servable(
    files: &CertificateFiles,
    key: &CertifiedKey,
    server_name: Option<&str>,
) -> Result<(), TlsError> {
    let unservable = |why: String| TlsError::Unservable {
        path: files.cert.clone(),
        why,
    };
    let leaf = key
        .cert
        .first()
        .ok_or_else(|| unservable("no certificate".to_owned()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|err| unservable(format!("the leaf is not X.509: {err}")))?;
    let validity = cert.validity();
    if !validity.is_valid() {
        return Err(unservable(format!(
            "valid from {} to {}, not now",
            validity.not_before, validity.not_after
        )));
    }
    let eku = cert
        .extended_key_usage()
        .map_err(|err| unservable(format!("its extended key usage does not parse: {err}")))?;
    if let Some(eku) = eku
        && !(eku.value.server_auth || eku.value.any)
    {
        return Err(unservable(
            "its extended key usage does not include serverAuth".to_owned(),
        ));
    }
    let Some(name) = server_name else {
        return Ok(());
    };
    let sans = cert
        .subject_alternative_name()
        .map_err(|err| unservable(format!("its subject alternative names do not parse: {err}")))?;
    let names = sans
        .map(|sans| sans.value.general_names.clone())
        .unwrap_or_default();
    let wanted_ip: Option<std::net::IpAddr> = name.parse().ok();
    let named = names.iter().any(|general| match general {
        x509_parser::extensions::GeneralName::DNSName(dns) => dns_matches(dns, name),
        x509_parser::extensions::GeneralName::IPAddress(bytes) => {
            wanted_ip.is_some_and(|ip| match ip {
                std::net::IpAddr::V4(v4) => *bytes == v4.octets().as_slice(),
                std::net::IpAddr::V6(v6) => *bytes == v6.octets().as_slice(),
            })
        }
        _ => false,
    });
    if named {
        Ok(())
    } else {
        Err(unservable(format!(
            "its subject alternative names do not include --tls-server-name {name:?}"
        )))
    }
}

/// Checks that `key`'s chain verifies against the CA bundle `ca_pem` (the `ca.crt` beside the
/// certificate), as a client that trusts only that CA verifies it: signatures, validity and
/// usage up to one of its certificates, for `server_name` or, without one, for the leaf's first
/// name. A pair signed by another CA would be refused by every apiserver that trusts this one.
pub fn check_trusted(
    files: &CertificateFiles,
    key: &CertifiedKey,
    ca_pem: &[u8],
    server_name: Option<&str>,
) -> Result<(), TlsError> {
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    let ca = files.ca();
    let untrusted = |why: String| TlsError::Unservable {
        path: files.cert.clone(),
        why,
    };
    let roots = roots(ca_pem, &ca, "CA")?;
    if roots.is_empty() {
        return Err(TlsError::NoCertificate(ca));
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|err| {
            untrusted(format!(
                "{} is not a CA bundle to verify with: {err}",
                ca.display()
            ))
        })?;
    let (leaf, intermediates) = key
        .cert
        .split_first()
        .ok_or_else(|| untrusted("no certificate".to_owned()))?;
    let name = match server_name {
        Some(name) => name.to_owned(),
        None => first_name(leaf).ok_or_else(|| {
            untrusted("it names no host or address a client could ask for".to_owned())
        })?,
    };
    let name = ServerName::try_from(name.as_str())
        .map_err(|err| untrusted(format!("{name:?} is not a server name: {err}")))?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|err| {
            untrusted(format!(
                "its chain does not verify against {}: {err}",
                ca.display()
            ))
        })
}

/// The CA certificates of a PEM bundle read from `path`, `what` it is in an error.
fn roots(pem: &[u8], path: &Path, what: &str) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
        roots.add(cert).map_err(|source| TlsError::Rustls {
            context: format!("{what} in {}", path.display()),
            source,
        })?;
    }
    Ok(roots)
}

/// The first DNS name or IP address of a leaf's subject alternative names, as text.
fn first_name(leaf: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let sans = cert.subject_alternative_name().ok()??;
    sans.value
        .general_names
        .iter()
        .find_map(|general| match general {
            x509_parser::extensions::GeneralName::DNSName(dns) => {
                Some(dns.trim_start_matches("*.").to_owned())
            }
            x509_parser::extensions::GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
}

/// A pair read from `files`, as it would be served: it loads, a client would accept it
/// ([`check_servable`]), and, when a CA is beside it, its chain verifies against that CA
/// ([`check_trusted`]). The same checks at startup and on every reload.
pub fn servable(
    files: &CertificateFiles,
    contents: &PairContents,
    ca_pem: Option<&[u8]>,
    server_name: Option<&str>,
) -> Result<CertifiedKey, TlsError> {
    let key = certified_key(files, &contents.0, &contents.1)?;
    check_servable(files, &key, server_name)?;
    if let Some(ca_pem) = ca_pem {
        check_trusted(files, &key, ca_pem, server_name)?;
    }
    Ok(key)
}

/// Whether the certificate's DNS name `pattern` names `host`, as a TLS client matches it: case
/// aside, equal, or a `*.` wildcard standing for exactly one leftmost label.
fn dns_matches(pattern: &str, host: &str) -> bool {
    let (pattern, host) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    let host = host.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => pattern.trim_end_matches('.') == host,
    }
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
/// The pair must be [`servable`], as a reload must: a server started on a certificate that no
/// client accepts would answer nothing while it looked up.
pub fn load(
    files: &CertificateFiles,
    server_name: Option<&str>,
) -> Result<(ReloadingResolver, PairContents), TlsError> {
    let contents = files.read()?;
    let ca = files.read_ca()?;
    let key = servable(files, &contents, ca.as_deref(), server_name)?;
    Ok((ReloadingResolver::new(key), contents))
}

/// Polls `files` every `interval` and serves a changed pair once it is [`servable`]: it parses,
/// a client would accept it (valid now, for serving, naming `server_name` when given), and its
/// chain verifies against the `ca.crt` beside it when there is one; a broken, unservable or
/// untrusted pair is logged and counted once per change, and the last good pair stays in
/// service.
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
    server_name: Option<String>,
    loaded: PairContents,
    resolver: Arc<ReloadingResolver>,
    interval: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let mut state = ReloadState::new(loaded);
    state.server_name = server_name;
    // Polls in a row that could not read the files.
    let mut unreadable = 0u32;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let files_now = files.clone();
        // File reads block; keep them off the request workers.
        let read = tokio::task::spawn_blocking(move || {
            let contents = files_now.read()?;
            Ok::<_, TlsError>((contents, files_now.read_ca()?))
        })
        .await;
        let (contents, ca) = match read {
            Ok(Ok(read)) => {
                unreadable = 0;
                read
            }
            Ok(Err(err)) => {
                // Missing files are normal for an instant during some rotations; files that
                // stay unreadable are worth a warning, once: the old pair still serves, and
                // the next rotation will not be seen.
                unreadable += 1;
                let error = volume_health_validation::error::chain(&err);
                if unreadable == 2 {
                    tracing::warn!(error = %error, "certificate files unreadable; the previous pair still serves");
                } else {
                    tracing::debug!(error = %error, "certificate files unreadable");
                }
                continue;
            }
            Err(_) => continue,
        };
        match state.observe(&files, contents, ca.as_deref()) {
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
                error = %volume_health_validation::error::chain(&err),
                "new certificate files do not load yet; checking again on the next poll"
            ),
            Reload::Broken(err) => {
                metrics.cert_reload(false);
                tracing::error!(
                    error = %volume_health_validation::error::chain(&err),
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
    /// `--tls-server-name`: the name a new certificate must carry.
    server_name: Option<String>,
}

impl ReloadState {
    fn new(loaded: PairContents) -> Self {
        ReloadState {
            last: loaded,
            unsettled: None,
            server_name: None,
        }
    }

    fn observe(
        &mut self,
        files: &CertificateFiles,
        contents: PairContents,
        ca: Option<&[u8]>,
    ) -> Reload {
        if self.last == contents {
            self.unsettled = None;
            return Reload::Unchanged;
        }
        match servable(files, &contents, ca, self.server_name.as_deref()) {
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
            let roots = roots(&read(path)?, path, "client CA")?;
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
            state.observe(&files(), old.clone(), None),
            Reload::Unchanged
        ));
        // The new certificate read with the old key, then the whole new pair.
        let torn = (new.0.clone(), old.1.clone());
        assert!(matches!(
            state.observe(&files(), torn, None),
            Reload::NotYet(_)
        ));
        assert!(matches!(
            state.observe(&files(), new.clone(), None),
            Reload::Serve(_)
        ));
        assert!(matches!(
            state.observe(&files(), new, None),
            Reload::Unchanged
        ));
    }

    #[test]
    fn a_broken_pair_is_reported_once_when_seen_twice() {
        let (good, other) = (pair(), pair());
        let mut state = ReloadState::new(good.clone());
        let broken = (other.0, good.1.clone());
        assert!(matches!(
            state.observe(&files(), broken.clone(), None),
            Reload::NotYet(_)
        ));
        assert!(matches!(
            state.observe(&files(), broken.clone(), None),
            Reload::Broken(_)
        ));
        assert!(matches!(
            state.observe(&files(), broken.clone(), None),
            Reload::Unchanged
        ));
        assert!(matches!(
            state.observe(&files(), broken, None),
            Reload::Unchanged
        ));
        // Going back to the served pair is a change too: served again, nothing reported.
        assert!(matches!(
            state.observe(&files(), good, None),
            Reload::Serve(_)
        ));
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
        assert!(matches!(
            state.observe(&files(), a, None),
            Reload::NotYet(_)
        ));
        assert!(matches!(
            state.observe(&files(), b.clone(), None),
            Reload::NotYet(_)
        ));
        assert!(matches!(
            state.observe(&files(), b, None),
            Reload::Broken(_)
        ));
    }

    /// A pair for `names`, tuned by `tune`.
    fn pair_with(names: &[&str], tune: impl FnOnce(&mut rcgen::CertificateParams)) -> PairContents {
        let key_pair = rcgen::KeyPair::generate().expect("generates");
        let mut params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .expect("valid names");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        tune(&mut params);
        let cert = params.self_signed(&key_pair).expect("signs");
        (
            cert.pem().into_bytes(),
            key_pair.serialize_pem().into_bytes(),
        )
    }

    /// A certificate a client would refuse is never served: expired, not yet valid, for
    /// clients only, or without `--tls-server-name` among its names. The old pair stays, and
    /// the failure is reported (on the second poll, as for any pair that does not load).
    #[test]
    fn a_certificate_clients_would_refuse_is_not_served() {
        let name = "volume-health-webhook.volume-health.svc";
        let good = pair_with(&[name], |_| {});
        let cases: Vec<(&str, PairContents)> = vec![
            (
                "expired",
                pair_with(&[name], |p| {
                    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
                    p.not_after = rcgen::date_time_ymd(2021, 1, 1);
                }),
            ),
            (
                "not yet valid",
                pair_with(&[name], |p| {
                    p.not_before = rcgen::date_time_ymd(2090, 1, 1);
                    p.not_after = rcgen::date_time_ymd(2091, 1, 1);
                }),
            ),
            (
                "client only",
                pair_with(&[name], |p| {
                    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
                }),
            ),
            ("another name", pair_with(&["other.example.com"], |_| {})),
        ];
        for (what, bad) in cases {
            let mut state = ReloadState::new(good.clone());
            state.server_name = Some(name.to_owned());
            assert!(
                matches!(
                    state.observe(&files(), bad.clone(), None),
                    Reload::NotYet(_)
                ),
                "{what}"
            );
            match state.observe(&files(), bad, None) {
                Reload::Broken(err) => {
                    assert!(matches!(err, TlsError::Unservable { .. }), "{what}: {err}");
                    eprintln!("{what}: {}", volume_health_validation::error::chain(&err));
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        // The same name, a wildcard for it, or no name asked: served.
        let wildcard = pair_with(&["*.volume-health.svc"], |_| {});
        for (contents, server_name) in [
            (pair_with(&[name], |_| {}), Some(name)),
            (wildcard.clone(), Some(name)),
            (wildcard, None),
            (pair_with(&["127.0.0.1"], |_| {}), Some("127.0.0.1")),
        ] {
            let mut state = ReloadState::new(good.clone());
            state.server_name = server_name.map(str::to_owned);
            assert!(matches!(
                state.observe(&files(), contents, None),
                Reload::Serve(_)
            ));
        }
        assert!(!dns_matches("*.svc", "a.b.svc"));
        assert!(dns_matches("Webhook.NS.svc", "webhook.ns.svc."));
    }
}
