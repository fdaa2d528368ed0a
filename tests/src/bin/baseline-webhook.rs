//! The load benchmark's baseline: the webhook server's HTTP and TLS stack (tokio, rustls with
//! ring, hyper-util's auto builder with HTTP/1.1 and h2, an axum router) with no logic behind
//! it. Each POST body is read whole and answered with a fixed allowing review, so the
//! benchmark can quote the real server's throughput as a share of what the stack alone does.
//!
//! `baseline-webhook --tls-cert-file C --tls-private-key-file K` listens on a free port of
//! 127.0.0.1 and prints `listening on ADDR` as its first line of stdout.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The answer to every admission review.
const ADMISSION_ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}"#;
/// The answer to every access review.
const AUTHORIZATION_ANSWER: &str = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":true}}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (cert, key) = args()?;
    let chain = CertificateDer::pem_file_iter(&cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&key)?;
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
        let app = Router::new()
            .route("/mutate", post(admission))
            .route("/validate", post(admission))
            .route("/authorize", post(authorization))
            .layer(DefaultBodyLimit::max(7 * 1024 * 1024));
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

async fn admission(body: Bytes) -> impl IntoResponse {
    answer(&body, ADMISSION_ANSWER)
}

async fn authorization(body: Bytes) -> impl IntoResponse {
    answer(&body, AUTHORIZATION_ANSWER)
}

fn answer(body: &Bytes, answer: &'static str) -> impl IntoResponse + use<> {
    // Look at the body so that reading it cannot be optimized away.
    std::hint::black_box(body.len());
    ([(header::CONTENT_TYPE, "application/json")], answer)
}

fn args() -> Result<(PathBuf, PathBuf), String> {
    let mut cert = None;
    let mut key = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--tls-cert-file" => cert = Some(PathBuf::from(value)),
            "--tls-private-key-file" => key = Some(PathBuf::from(value)),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    match (cert, key) {
        (Some(cert), Some(key)) => Ok((cert, key)),
        _ => Err("usage: baseline-webhook --tls-cert-file C --tls-private-key-file K".to_owned()),
    }
}
