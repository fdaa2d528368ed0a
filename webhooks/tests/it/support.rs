//! Helpers shared by the server tests: certificates, TLS clients, the server in-process or as
//! a process, and the health port.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use volume_health_webhooks::Settings;
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::server::{CertSource, ServeConfig, Server, Shutdown, Stopped};
use volume_health_webhooks::tls::CertificateFiles;

/// Any error, for helpers whose callers only check that something failed.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A certificate authority for tests.
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub(crate) pem: String,
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub(crate) struct Pair {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

impl Pair {
    /// The leaf certificate, DER, to compare with what a server presents.
    pub(crate) fn leaf_der(&self) -> Vec<u8> {
        CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .next()
            .expect("a certificate")
            .expect("valid PEM")
            .to_vec()
    }
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for `localhost` and `127.0.0.1`.
    pub(crate) fn server_pair(&self) -> Pair {
        self.leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A serving certificate like [`Ca::server_pair`] that expires at midnight UTC on the
    /// first of January of `year`.
    pub(crate) fn server_pair_expiring(&self, year: i32) -> Pair {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A client certificate, as kube-apiserver presents one.
    pub(crate) fn client_pair(&self, name: &str) -> Pair {
        self.leaf(Vec::new(), name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, sans: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose) -> Pair {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A TLS client configuration trusting `ca_pem` (one or more PEM certificates), presenting
/// `identity` when given, offering `alpn`.
pub(crate) fn client_config(
    ca_pem: &str,
    identity: Option<&Pair>,
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let builder =
        rustls::ClientConfig::builder_with_provider(volume_health_webhooks::tls::provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(pair) => {
            let chain = CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client chain");
            let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client identity")
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Connects and completes the TLS handshake, verifying the server as `server_name`.
pub(crate) async fn tls_connect(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    server_name: &str,
) -> Result<TlsStream<TcpStream>, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(server_name.to_owned())?;
    Ok(TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await?)
}

/// The certificate the server presented, DER.
pub(crate) fn peer_leaf(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

/// The protocol the handshake settled on.
pub(crate) fn alpn(stream: &TlsStream<TcpStream>) -> Option<Vec<u8>> {
    stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// An answer: status, HTTP version and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) version: http::Version,
    pub(crate) body: Bytes,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON answer")
    }
}

fn request(path: &str, body: Vec<u8>) -> Result<http::Request<Full<Bytes>>, BoxError> {
    // h2 wants the authority in the URI; HTTP/1.1 takes it from the Host header.
    Ok(http::Request::post(format!("https://localhost{path}"))
        .header(http::header::HOST, "localhost")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?)
}

/// One POST on an established connection, in the protocol ALPN chose.
pub(crate) async fn post_on(
    stream: TlsStream<TcpStream>,
    path: &str,
    body: Vec<u8>,
) -> Result<Answer, BoxError> {
    let h2 = alpn(&stream).as_deref() == Some(b"h2".as_slice());
    let io = TokioIo::new(stream);
    let response = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        let mut req = request(path, body)?;
        *req.version_mut() = http::Version::HTTP_2;
        req.headers_mut().remove(http::header::HOST);
        sender.send_request(req).await?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        let mut req = request(path, body)?;
        *req.uri_mut() = http::Uri::try_from(path)?;
        sender.send_request(req).await?
    };
    let status = response.status();
    let version = response.version();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Answer {
        status,
        version,
        body,
    })
}

/// Connects, verifies the server as `localhost`, and POSTs `body` to `path`.
pub(crate) async fn post(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
    body: Vec<u8>,
) -> Result<Answer, BoxError> {
    let stream = tls_connect(addr, config, "localhost").await?;
    post_on(stream, path, body).await
}

/// A recorded request body by case id, from the admission fixtures.
pub(crate) fn case_body(id: &str) -> Value {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("../../../tests/fixtures/admission/cases.json"))
            .expect("fixtures parse");
    cases
        .into_iter()
        .find(|c| c["id"] == id)
        .map(|c| c["body"].clone())
        .expect("case exists")
}

/// A valid pod status update, allowed with the gate on, as kube-apiserver sends it.
pub(crate) fn valid_review() -> Vec<u8> {
    wire(&case_body("pod-valid"))
}

/// Checks the answer to [`valid_review`].
pub(crate) fn assert_allowed(answer: &Answer) {
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let body = answer.json();
    assert_eq!(body["kind"], "AdmissionReview", "{body}");
    assert_eq!(
        body["response"]["uid"],
        case_body("pod-valid")["request"]["uid"],
        "{body}"
    );
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

/// Handler settings with the gate on.
pub(crate) fn settings() -> Settings {
    Settings {
        gates: FeatureGates {
            csi_volume_health: true,
        },
        authz_deny_on_mismatch: false,
        pvc_health_writers: None,
        storage_condition_identity: Default::default(),
        enforcement_action: EnforcementAction::Deny,
        repair: false,
        max_request_bytes: 7 * 1024 * 1024,
        max_in_flight_bytes: 64 * 1024 * 1024,
        request_timeout: Duration::from_secs(10),
    }
}

/// A configuration on 127.0.0.1 with free ports and short timeouts.
pub(crate) fn config(certs: CertSource) -> ServeConfig {
    ServeConfig {
        bind_address: [127, 0, 0, 1].into(),
        secure_port: 0,
        health_port: 0,
        certs,
        client_ca_file: None,
        tls_reload_interval: Duration::from_millis(200),
        tls_server_name: None,
        settings: settings(),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        max_connections: 4096,
        max_connections_per_peer: 0,
        shutdown_delay: Duration::ZERO,
        shutdown_timeout: Duration::from_secs(5),
    }
}

/// Writes `pair` into `dir` as `tls.crt` and `tls.key` and returns the files.
pub(crate) fn write_pair(dir: &Path, pair: &Pair) -> CertificateFiles {
    let files = CertificateFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.cert, &pair.cert_pem).expect("write cert");
    std::fs::write(&files.key, &pair.key_pem).expect("write key");
    files
}

/// A server's configuration serving a pair of `server_ca`'s, written into `dir`, and requiring
/// client certificates of `client_ca` (`--client-ca-file`).
pub(crate) fn config_with_client_ca(dir: &Path, server_ca: &Ca, client_ca: &Ca) -> ServeConfig {
    let files = write_pair(dir, &server_ca.server_pair());
    let client_ca_file = dir.join("client-ca.crt");
    std::fs::write(&client_ca_file, &client_ca.pem).expect("write client CA");
    let mut config = config(CertSource::Files(files));
    config.client_ca_file = Some(client_ca_file);
    config
}

/// A server running in this process.
pub(crate) struct Running {
    pub(crate) secure: SocketAddr,
    pub(crate) health: SocketAddr,
    pub(crate) shutdown: Shutdown,
    task: tokio::task::JoinHandle<Stopped>,
}

impl Running {
    pub(crate) async fn start(config: ServeConfig) -> Running {
        let server = Server::bind(config).await.expect("server binds");
        let secure = server.secure_addr();
        let health = server.health_addr();
        let shutdown = Shutdown::new();
        let task = tokio::spawn(server.run(shutdown.clone()));
        Running {
            secure,
            health,
            shutdown,
            task,
        }
    }

    /// Whether `Server::run` has returned.
    pub(crate) fn has_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits at most `limit` for `Server::run` to return; how it ended.
    pub(crate) async fn stopped(self, limit: Duration) -> Stopped {
        tokio::time::timeout(limit, self.task)
            .await
            .expect("the server stops in time")
            .expect("server task")
    }

    /// Drains, as SIGTERM does, and waits for the server to stop.
    pub(crate) async fn stop(self) -> Stopped {
        self.shutdown.drain();
        self.stopped(Duration::from_secs(10)).await
    }

    /// `/metrics` text.
    pub(crate) async fn metrics(&self) -> String {
        let (status, body) = http_get(self.health, "/metrics").await.expect("metrics");
        assert_eq!(status, 200);
        body
    }
}

/// A plain HTTP/1.1 GET with `Connection: close`: status and body.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), BoxError> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of one sample in a metrics exposition, 0 when absent.
pub(crate) fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(sample)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// The built server binary, started with JSON logs; its addresses are read from the
/// `serving` line.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) secure: SocketAddr,
    pub(crate) health: SocketAddr,
    /// Log lines after `serving`. Held even where no test reads them: the reader thread drains
    /// the pipe while it can send here, so the server never blocks on a full one.
    #[allow(dead_code)]
    pub(crate) logs: mpsc::Receiver<String>,
}

impl Process {
    /// Starts `volume-health-webhook serve` on free ports with a generated certificate whose
    /// CA is written to `ca_file`.
    // The child is waited for by `Drop`, which the lint does not follow.
    #[allow(clippy::zombie_processes)]
    pub(crate) fn start(ca_file: &Path, extra: &[&str]) -> Process {
        // `VOLUME_HEALTH_WEBHOOK_BINARY` measures another build (the release one) instead.
        let binary = std::env::var_os("VOLUME_HEALTH_WEBHOOK_BINARY")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_volume-health-webhook").into());
        let mut child = Command::new(binary)
            .args([
                "serve",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--health-port=0",
                "--log-format=json",
                "--feature-gates=CSIVolumeHealth=true",
            ])
            .arg(format!("--self-signed-ca-file={}", ca_file.display()))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("binary starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        loop {
            let line = logs
                .recv_timeout(Duration::from_secs(30))
                .expect("the server logs that it is serving");
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if event["message"] == "serving" {
                let addr = |field: &str| -> SocketAddr {
                    event[field]
                        .as_str()
                        .and_then(|a| a.parse().ok())
                        .unwrap_or_else(|| panic!("{field} address in {line}"))
                };
                let secure = addr("secure");
                let health = addr("health");
                assert_ne!(health.port(), 0, "the bound health port is logged: {line}");
                return Process {
                    child,
                    secure,
                    health,
                    logs,
                };
            }
        }
    }

    /// Sends `signal` (`TERM`, `INT`) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits at most `limit` for the process to exit; its exit code.
    pub(crate) async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status.code().unwrap_or(-1));
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process is still running.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A `/validate` request in flight: its headers sent with `Expect: 100-continue` and half
/// its body sent once the server answered `100 Continue`, which it does when a handler
/// starts reading the body. The connection and the other half.
pub(crate) async fn request_in_flight(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
) -> (TlsStream<TcpStream>, Vec<u8>) {
    let mut tls = tls_connect(addr, client, "localhost")
        .await
        .expect("connects");
    let body = valid_review();
    tls.write_all(
        format!(
            "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("sends");
    tls.flush().await.expect("sends");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.expect("reads");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 100 Continue\r\n"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let (first, rest) = body.split_at(body.len() / 2);
    tls.write_all(first).await.expect("sends");
    tls.flush().await.expect("sends");
    (tls, rest.to_vec())
}

pub(crate) use volume_health_test_kit::apiserver_order::apiserver_order;
pub(crate) use volume_health_test_kit::router_call;

/// A body as its sender writes it: an AdmissionReview as kube-apiserver does (see
/// [`apiserver_order`]), anything else as serialized.
pub(crate) fn wire(body: &Value) -> Vec<u8> {
    if body["request"].is_object() {
        apiserver_order(body).into_bytes()
    } else {
        serde_json::to_vec(body).expect("serializes")
    }
}

/// What a test's log subscriber writes.
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// A text subscriber at `level` writing here, installed for this thread.
    pub(crate) fn install(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .fmt_fields(volume_health_webhooks::telemetry::text_fields())
            .with_writer(move || writer.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // Other tests of the binary log with no subscriber: a call site they reached first, while
        // this subscriber was being installed, may have cached that nobody listens.
        tracing::callsite::rebuild_interest_cache();
        guard
    }

    /// Everything written so far, emptied.
    pub(crate) fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}
