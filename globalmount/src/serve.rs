//! The continuous mode's plain-HTTP port: `/metrics` and `/healthz`.
//!
//! The port listens on every address of a node, so anything that can reach
//! the node can open connections to it. Each connection costs buffers and a
//! task, and a client that never finishes its request headers would hold
//! them for ever. So, as in the webhook server: a bounded number of
//! connections is served at once (the rest wait in the listen backlog, where
//! they cost this process nothing), the headers of each request must arrive
//! within a timeout, and a keep-alive connection with no next request within
//! it is closed.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::metrics::DoctorMetrics;

/// Default time allowed for a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Default number of connections served at once: Prometheus and the kubelet
/// probe need one or two, and each costs about 10 KiB here.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// hyper's smallest allowed read buffer; a request to this port is a few
/// hundred bytes, so a larger one only gives a slow client more to fill.
const READ_BUFFER: usize = 8192;

/// How much a port lets its clients hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Time allowed for each request's headers, and for the next request on a
    /// keep-alive connection.
    pub header_read_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The port could not be bound, or its bound address not read.
#[derive(Debug, thiserror::Error)]
#[error("failed to listen on {addr}")]
pub struct BindError {
    addr: SocketAddr,
    #[source]
    source: io::Error,
}

/// A bound metrics port.
#[derive(Debug)]
pub struct MetricsPort {
    listener: TcpListener,
    addr: SocketAddr,
}

impl MetricsPort {
    /// Binds `addr`; port 0 picks a free port.
    pub async fn bind(addr: SocketAddr) -> Result<Self, BindError> {
        let failed = |source| BindError { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        Ok(Self { listener, addr })
    }

    /// The bound address (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `app` until `stop` completes; connections still open then are dropped.
    pub async fn serve(self, app: Router, limits: ServeLimits, stop: impl Future<Output = ()>) {
        let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let mut connections = JoinSet::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                // Ended connections are collected as they end, so the set stays small.
                Some(_) = connections.join_next() => {}
                accepted = accept(&self.listener, &slots) => {
                    let Some((stream, permit)) = accepted else { continue };
                    let app = app.clone();
                    connections.spawn(async move {
                        let _permit = permit;
                        // A client that times out or goes away is its own business.
                        let _ = serve_connection(stream, app, limits.header_read_timeout).await;
                    });
                }
            }
        }
    }
}

/// Waits for a free slot, then for a connection. Accept errors (out of file
/// descriptors, a reset before accept) are skipped after a short pause.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    let permit = Arc::clone(slots).acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, permit)),
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    header_read_timeout: Duration,
) -> hyper::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(READ_BUFFER)
        .keep_alive(true);
    builder
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
        .await
}

/// `/metrics` (the OpenMetrics text of `metrics`) and `/healthz`.
pub fn router(metrics: Arc<DoctorMetrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = Arc::clone(&metrics);
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
}
