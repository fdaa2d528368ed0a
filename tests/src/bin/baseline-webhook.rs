//! The load benchmark's baselines: the webhook server's HTTP and TLS stack (tokio, rustls with
//! ring, hyper-util's auto builder with HTTP/1.1 and h2, an axum router) with no logic behind
//! it. Each POST body is read whole and answered with a fixed allowing review, so the
//! benchmark can quote the real server's throughput as a share of what the stack alone does.
//!
//! With `--strict-json` it also makes one strict JSON pass over each body (UTF-8 checked once,
//! then serde_json into `IgnoredAny`) and answers 400 when that fails: the least any server
//! must do that answers a malformed review with 400.
//!
//! `baseline-webhook --tls-cert-file C --tls-private-key-file K [--strict-json]` listens on a
//! free port of 127.0.0.1 and prints `listening on ADDR` as its first line of stdout.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use volume_health_tests::baseline::{self, BodyCheck};

/// The benchmark's baseline server: the webhook server's stack answering every review with a
/// fixed allowing answer.
#[derive(Parser)]
struct Args {
    /// Serving certificate chain (PEM).
    #[arg(long, env = "BASELINE_WEBHOOK_TLS_CERT_FILE")]
    tls_cert_file: PathBuf,
    /// Private key of the serving certificate (PEM).
    #[arg(long, env = "BASELINE_WEBHOOK_TLS_PRIVATE_KEY_FILE")]
    tls_private_key_file: PathBuf,
    /// Also parse each body as strict JSON, answering 400 when it is not.
    #[arg(long, env = "BASELINE_WEBHOOK_STRICT_JSON")]
    strict_json: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        tls_cert_file,
        tls_private_key_file,
        strict_json,
    } = Args::parse();
    let chain = CertificateDer::pem_file_iter(&tls_cert_file)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&tls_private_key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on {}", listener.local_addr()?)?;
        stdout.flush()?;
        let app = baseline::router(if strict_json {
            BodyCheck::StrictJson
        } else {
            BodyCheck::None
        });
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                // The connection settings of the real server.
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .keep_alive(true);
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .keep_alive_interval(Some(Duration::from_secs(30)));
                let _ = builder
                    .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                    .await;
            });
        }
    })
}
