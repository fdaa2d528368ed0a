//! The continuous mode's plain-HTTP port: `/metrics` and `/healthz`.
//!
//! The port listens on every address of a node, so anything that can reach
//! the node can open connections to it. Each connection costs buffers and a
//! task, and a client that never finishes its request headers would hold
//! them for ever. So, as in the webhook server: a bounded number of
//! connections is served at once, the headers of each request must arrive
//! within a timeout, and a keep-alive connection with no next request within
//! it is closed. A full port does not keep the kubelet's probe out: a new
//! connection closes the oldest one with no request under way (idle, or
//! still sending its headers); only with every slot answering a request does
//! it wait in the listen backlog, where it costs this process nothing.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
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
    /// Most connections served at once. With all taken, a new one closes the
    /// oldest with no request under way; with none such, it waits in the
    /// listen backlog.
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
        let table = Arc::new(Table::default());
        let mut connections = JoinSet::new();
        tokio::pin!(stop);
        loop {
            // Ended connections are collected here, not raced against an accept, so that a
            // connection accepted and waiting for its slot is never dropped.
            while connections.try_join_next().is_some() {}
            let stream = tokio::select! {
                () = &mut stop => return,
                Some(_) = connections.join_next() => continue,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    // Out of file descriptors, a reset before accept: skipped after a pause.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let permit = tokio::select! {
                () = &mut stop => return,
                permit = slot(&slots, &table) => permit,
            };
            let app = app.clone();
            let entry = table.enter();
            connections.spawn(async move {
                let _permit = permit;
                let served = serve_connection(stream, app, limits.header_read_timeout, &entry.1);
                tokio::select! {
                    // A client that times out or goes away is its own business.
                    _ = served => {}
                    () = entry.1.evict.notified() => {}
                }
                drop(entry);
            });
        }
    }
}

/// How long a connection waiting for a slot waits before looking again for one to close.
const EVICT_RETRY: Duration = Duration::from_millis(50);

/// A slot for a connection that is here: closes the oldest connection with no
/// request under way when none is free (only then, never ahead of a
/// connection); with none such, waits for one to end or turn idle.
async fn slot(slots: &Arc<Semaphore>, table: &Table) -> OwnedSemaphorePermit {
    loop {
        if let Ok(permit) = Arc::clone(slots).try_acquire_owned() {
            return permit;
        }
        let wait = if table.evict_oldest_idle() {
            // The closed connection's task ends at once and frees its slot.
            Duration::MAX
        } else {
            EVICT_RETRY
        };
        // The semaphore is never closed.
        if let Ok(Ok(permit)) = tokio::time::timeout(wait, Arc::clone(slots).acquire_owned()).await
        {
            return permit;
        }
    }
}

/// A connection as the table sees it.
#[derive(Default)]
struct Connection {
    /// Requests under way, from their head to their answer.
    in_flight: AtomicUsize,
    /// Closes the connection to make room.
    evict: Notify,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Table {
    open: Mutex<(u64, BTreeMap<u64, Arc<Connection>>)>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, BTreeMap<u64, Arc<Connection>>)> {
        // Plain entries: a table left by a panicking thread is still right.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enter(self: &Arc<Self>) -> Entry {
        let mut open = self.lock();
        let id = open.0;
        open.0 += 1;
        let connection = Arc::new(Connection::default());
        open.1.insert(id, Arc::clone(&connection));
        Entry(id, connection, Arc::clone(self))
    }

    /// Closes the oldest connection with no request under way; whether there was one.
    fn evict_oldest_idle(&self) -> bool {
        let mut open = self.lock();
        let oldest = open
            .1
            .iter()
            .find(|(_, c)| c.in_flight.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id);
        let Some(connection) = oldest.and_then(|id| open.1.remove(&id)) else {
            return false;
        };
        // Stored if the task is not waiting yet: it sees it when it does.
        connection.evict.notify_one();
        true
    }
}

/// A connection in the [`Table`]; leaves it when dropped.
struct Entry(u64, Arc<Connection>, Arc<Table>);

impl Drop for Entry {
    fn drop(&mut self) {
        self.2.lock().1.remove(&self.0);
    }
}

async fn serve_connection(
    stream: TcpStream,
    app: Router,
    header_read_timeout: Duration,
    connection: &Arc<Connection>,
) -> hyper::Result<()> {
    let app = TowerToHyperService::new(app);
    let connection = Arc::clone(connection);
    // Each request is counted from its head to its answer: a connection with one under way is
    // never closed to make room.
    let counted = hyper::service::service_fn(move |request| {
        let under_way = UnderWay::start(Arc::clone(&connection));
        let answer = hyper::service::Service::call(&app, request);
        async move {
            let answer = answer.await;
            drop(under_way);
            answer
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(READ_BUFFER)
        .keep_alive(true);
    builder
        .serve_connection(TokioIo::new(stream), counted)
        .await
}

/// A request under way on a connection.
struct UnderWay(Arc<Connection>);

impl UnderWay {
    fn start(connection: Arc<Connection>) -> Self {
        connection.in_flight.fetch_add(1, Ordering::AcqRel);
        UnderWay(connection)
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
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
