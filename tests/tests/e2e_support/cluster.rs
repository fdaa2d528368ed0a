//! etcd and kube-apiserver on loopback, with their certificates, and a small HTTPS client with
//! a client certificate (kube-rs is built without TLS in this workspace).

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Every request is bounded: a stuck apiserver fails the test instead of hanging it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A cold kube-apiserver on a loaded 2-core machine needs some 20 s to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The username of the client certificate: in `system:masters`, so it may impersonate.
pub(crate) const ADMIN: &str = "system:admin";

/// A started process, killed by its PID when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &'static str, dir: &Path, command: &mut Command) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Process { name, child, log })
    }

    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("{} exited: {status}", self.name),
            None => Ok(()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // `Child::kill` signals this child's PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// etcd and kube-apiserver, their temporary directory and an admin client.
pub(crate) struct Cluster {
    // Dropped in this order: the apiserver before its etcd, then the directory.
    apiserver: Process,
    etcd: Process,
    pub(crate) api: Api,
    pub(crate) etcd_addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A failed test shows what the servers said.
        if std::thread::panicking() {
            for process in [&self.apiserver, &self.etcd] {
                let text = std::fs::read_to_string(&process.log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(60)..].join("\n");
                eprintln!(
                    "--- last lines of {} ({}):\n{tail}",
                    process.name,
                    process.log.display()
                );
            }
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The directory of the pinned binaries: `VOLUME_HEALTH_E2E_BIN`, which `make e2e` sets.
pub(crate) fn bin_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("VOLUME_HEALTH_E2E_BIN")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("VOLUME_HEALTH_E2E_BIN is not set: run `make e2e`"))?;
    for bin in ["kube-apiserver", "etcd"] {
        if !dir.join(bin).exists() {
            bail!(
                "{} is missing: `make e2e` builds it",
                dir.join(bin).display()
            );
        }
    }
    Ok(dir)
}

struct Pki {
    ca: CertificateDer<'static>,
    admin_cert: CertificateDer<'static>,
    admin_key: PrivateKeyDer<'static>,
}

/// A CA, the apiserver's serving certificate for 127.0.0.1, an admin client certificate and the
/// service-account signing key, as files in `dir`.
fn write_pki(dir: &Path) -> Result<Pki> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "e2e CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server = server.signed_by(&server_key, &issuer)?;

    // The apiserver reads the user from the CN and the groups from the O of a client certificate.
    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::new())?;
    admin.distinguished_name.push(DnType::CommonName, ADMIN);
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin = admin.signed_by(&admin_key, &issuer)?;

    let sa_key = KeyPair::generate()?;
    std::fs::write(dir.join("ca.crt"), ca.pem())?;
    std::fs::write(dir.join("server.crt"), server.pem())?;
    std::fs::write(dir.join("server.key"), server_key.serialize_pem())?;
    std::fs::write(dir.join("sa.key"), sa_key.serialize_pem())?;
    std::fs::write(dir.join("sa.pub"), sa_key.public_key_pem())?;
    Ok(Pki {
        ca: ca.der().clone(),
        admin_cert: admin.der().clone(),
        admin_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(admin_key.serialize_der())),
    })
}

impl Cluster {
    /// Starts etcd and kube-apiserver from `bin` and waits until the apiserver is ready.
    pub(crate) async fn start(bin: &Path) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let pki = write_pki(dir.path())?;
        let (client, peer, secure) = (free_port()?, free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let etcd = Process::start(
            "etcd",
            dir.path(),
            Command::new(bin.join("etcd"))
                .arg("--name=e2e")
                .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
                .arg(format!("--listen-client-urls={etcd_url}"))
                .arg(format!("--advertise-client-urls={etcd_url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=e2e={peer_url}"))
                // Nothing here outlives the test: no fsync per write.
                .arg("--unsafe-no-fsync"),
        )?;
        let file = |name: &str| dir.path().join(name).display().to_string();
        let apiserver = Process::start(
            "kube-apiserver",
            dir.path(),
            Command::new(bin.join("kube-apiserver"))
                .arg(format!("--etcd-servers={etcd_url}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--advertise-address=127.0.0.1")
                .arg(format!("--secure-port={secure}"))
                .arg(format!("--tls-cert-file={}", file("server.crt")))
                .arg(format!("--tls-private-key-file={}", file("server.key")))
                .arg(format!("--client-ca-file={}", file("ca.crt")))
                .arg(format!("--service-account-key-file={}", file("sa.pub")))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    file("sa.key")
                ))
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                // The in-tree rules the project mirrors: the Node authorizer, NodeRestriction
                // and the gated fields' validation.
                .arg("--authorization-mode=Node,RBAC")
                .arg("--enable-admission-plugins=NodeRestriction")
                .arg("--disable-admission-plugins=ServiceAccount")
                .arg("--feature-gates=CSIVolumeHealth=true")
                .arg("--runtime-config=api/all=true")
                // Loopback only: no `kubernetes` service endpoints to reconcile.
                .arg("--endpoint-reconciler-type=none")
                .arg("--service-cluster-ip-range=10.0.0.0/24")
                // JSON in etcd, so that stored objects the API refuses today can be written
                // straight into etcd.
                .arg("--storage-media-type=application/json")
                .arg(format!("--cert-dir={}", file("certs"))),
        )?;
        let api = Api::new(SocketAddr::from((Ipv4Addr::LOCALHOST, secure)), &pki)?;
        let mut cluster = Cluster {
            apiserver,
            etcd,
            api,
            etcd_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, client)),
            dir,
        };
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            self.etcd.check_running()?;
            self.apiserver.check_running()?;
            if let Ok((200, _)) = self.api.send(Method::GET, "/readyz", None, None).await {
                return Ok(());
            }
            if Instant::now() > give_up {
                bail!("kube-apiserver was not ready after {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The temporary directory of the certificates, data and logs.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `object` under `key` straight into etcd, through its JSON gateway.
    pub(crate) async fn etcd_put(&self, key: &str, object: &Value) -> Result<()> {
        let body = serde_json::json!({
            "key": STANDARD.encode(key),
            "value": STANDARD.encode(object.to_string()),
        });
        let tcp = TcpStream::connect(self.etcd_addr).await?;
        let (status, answer) = exchange(tcp, Method::POST, "/v3/kv/put", Some(&body), &[]).await?;
        if status != 200 {
            bail!("etcd put {key}: {status} {answer}");
        }
        Ok(())
    }
}

/// Who a request is sent as: the admin itself, or a user it impersonates.
#[derive(Clone, Debug)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
}

/// An HTTPS client of the apiserver with the admin's client certificate.
pub(crate) struct Api {
    addr: SocketAddr,
    tls: TlsConnector,
}

impl Api {
    fn new(addr: SocketAddr, pki: &Pki) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca.clone())?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![pki.admin_cert.clone()], pki.admin_key.clone_key())?;
        Ok(Api {
            addr,
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Sends one request on a connection of its own; answers the status code and the JSON body
    /// (`Null` when the body is not JSON).
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        user: Option<&User>,
    ) -> Result<(u16, Value)> {
        let mut headers = Vec::new();
        if let Some(user) = user.filter(|user| user.name != ADMIN) {
            headers.push(("Impersonate-User", user.name.clone()));
            // The apiserver adds system:authenticated itself.
            for group in user.groups.iter().filter(|g| *g != "system:authenticated") {
                headers.push(("Impersonate-Group", group.clone()));
            }
        }
        let tcp = TcpStream::connect(self.addr).await?;
        let tls = self
            .tls
            .connect(ServerName::IpAddress(self.addr.ip().into()), tcp)
            .await?;
        exchange(tls, method, path, body, &headers).await
    }
}

async fn exchange<S>(
    io: S,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, String)],
) -> Result<(u16, Value)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let run = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        let driver = tokio::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("accept", "application/json");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let bytes = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let response = sender.send_request(request.body(Full::new(bytes))?).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        driver.abort();
        anyhow::Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, run)
        .await
        .map_err(|_| anyhow!("{path}: no answer within {REQUEST_TIMEOUT:?}"))?
}
