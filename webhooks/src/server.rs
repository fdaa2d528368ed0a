//! The process: TLS listener for the webhooks, plain listener for health, certificate reload,
//! connection limits and timeouts, and the drain on shutdown.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::handlers::{Settings, router};
use crate::health::{self, Readiness};
use crate::metrics::Metrics;
use crate::tls::{self, CertificateFiles, ReloadingResolver, TlsError};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Files, re-read when they change.
    Files(CertificateFiles),
    /// Generated at start; the CA is written to the path when given.
    SelfSigned {
        /// Where to write the CA certificate (PEM).
        ca_file: Option<PathBuf>,
    },
}

/// Everything the server needs; built from the command line by [`crate::config`].
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Address of both listeners.
    pub bind_address: IpAddr,
    /// TLS port of `/mutate`, `/validate`, `/authorize` (0 picks a free port).
    pub secure_port: u16,
    /// Plain-HTTP port of `/healthz`, `/readyz`, `/metrics` (0 picks a free port).
    pub health_port: u16,
    /// The serving certificate.
    pub certs: CertSource,
    /// Require client certificates signed by this CA bundle.
    pub client_ca_file: Option<PathBuf>,
    /// How often the certificate files are checked for changes.
    pub tls_reload_interval: Duration,
    /// Handler settings.
    pub settings: Settings,
    /// Time allowed for the TLS handshake and for each HTTP/1.1 request's headers (on both
    /// ports); a keep-alive connection, HTTP/1.1 or h2, that sends no new request for this long
    /// is closed.
    pub header_read_timeout: Duration,
    /// Most connections served at once on each port; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// After the drain starts, how long to keep accepting, and asking every client to
    /// reconnect, while endpoints stop routing here: at least the readiness probe's period ×
    /// failure threshold plus the time load balancers take to follow the endpoints.
    pub shutdown_delay: Duration,
    /// After that, how long the connections still open may take to close by themselves
    /// (after an answer, or at their idle timeout) before the server stops anyway.
    pub shutdown_timeout: Duration,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Certificates.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A port could not be bound, or its bound address not read.
    #[error("failed to listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// Both ports are the same: the webhooks need TLS, the health endpoints plain HTTP.
    #[error(
        "--secure-port and --health-port are both {0}: the webhooks (TLS) and /healthz, /readyz, /metrics (plain HTTP) each need their own port"
    )]
    SamePort(u16),
    /// The generated CA could not be written.
    #[error("failed to write the CA certificate to {path}")]
    WriteCa {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// Tells a running [`Server`] to stop; clones work the same server.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    drain: CancellationToken,
    abort: CancellationToken,
}

/// A signal handler could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("installing {signal} handler")]
pub struct SignalError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

impl Shutdown {
    /// A handle that nothing has triggered yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the drain described at [`Server::run`]; a second call changes nothing.
    pub fn drain(&self) {
        self.drain.cancel();
    }

    /// Ends [`Server::run`] at once, with [`Stopped::Aborted`]: connections still open are
    /// dropped.
    pub fn abort(&self) {
        self.abort.cancel();
    }

    /// A handle worked by SIGTERM and SIGINT, as Kubernetes components take them: the first
    /// starts the drain, a second aborts it.
    pub fn on_signals() -> Result<Self, SignalError> {
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|source| SignalError {
                signal: name,
                source,
            })
        };
        let mut terminate = install(SignalKind::terminate(), "SIGTERM")?;
        let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
        let shutdown = Shutdown::new();
        let handle = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! { _ = terminate.recv() => {}, _ = interrupt.recv() => {} }
            handle.drain();
            tokio::select! { _ = terminate.recv() => {}, _ = interrupt.recv() => {} }
            tracing::warn!("second signal: exiting without draining");
            handle.abort();
        });
        Ok(shutdown)
    }
}

/// How [`Server::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection closed within the drain timeout.
    Drained,
    /// The drain timeout passed with this many connections still open; they were dropped.
    TimedOut(usize),
    /// [`Shutdown::abort`]: connections still open were dropped.
    Aborted,
}

/// A server with its ports bound, ready to [`run`](Server::run).
pub struct Server {
    config: ServeConfig,
    secure: Listener,
    health: Listener,
    tls: Arc<rustls::ServerConfig>,
    resolver: Arc<ReloadingResolver>,
    metrics: Metrics,
    readiness: Readiness,
    ca_pem: Option<String>,
    /// The certificate files' contents as loaded, for the watcher to compare against.
    loaded: Option<tls::PairContents>,
}

impl Server {
    /// Loads or generates the certificate and binds both ports; fails fast on either.
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        // Port 0 twice is two free ports.
        if config.secure_port == config.health_port && config.secure_port != 0 {
            return Err(ServeError::SamePort(config.secure_port));
        }
        let mut loaded = None;
        let (resolver, ca_pem) = match &config.certs {
            CertSource::Files(files) => {
                let (resolver, contents) = tls::load(files)?;
                loaded = Some(contents);
                (resolver, None)
            }
            CertSource::SelfSigned { ca_file } => {
                let generated = tls::self_signed()?;
                if let Some(path) = ca_file {
                    write_ca(path, &generated.ca_pem)?;
                }
                (
                    ReloadingResolver::new(generated.key),
                    Some(generated.ca_pem),
                )
            }
        };
        let resolver = Arc::new(resolver);
        let tls = Arc::new(tls::server_config(
            resolver.clone(),
            config.client_ca_file.as_deref(),
        )?);
        let secure =
            Listener::bind(SocketAddr::new(config.bind_address, config.secure_port)).await?;
        let health =
            Listener::bind(SocketAddr::new(config.bind_address, config.health_port)).await?;
        let metrics = Metrics::new();
        if let Some(at) = resolver.expires_at() {
            metrics.cert_expires_at(at);
        }
        Ok(Server {
            config,
            secure,
            health,
            tls,
            resolver,
            metrics,
            readiness: Readiness::ready(),
            ca_pem,
            loaded,
        })
    }

    /// The bound TLS address.
    pub fn secure_addr(&self) -> SocketAddr {
        self.secure.addr
    }

    /// The bound health address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health.addr
    }

    /// The generated CA (PEM), when the certificate was generated.
    pub fn generated_ca(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Serves until `shutdown` drains or aborts. The drain: `/readyz` fails at once, and
    /// from then on every client is asked to reconnect, HTTP/1.1 ones with `Connection: close`
    /// on each answer, h2 ones with a GOAWAY once a request has arrived on their connection. The
    /// listener keeps accepting for `shutdown_delay`, so that a reconnect that still reaches
    /// this replica is served while the endpoint leaves the load balancers; then it closes.
    /// The drain closes no connection itself: each ends after an answer that said so, at its
    /// idle timeout as at any other time, or when `shutdown_timeout` has passed since the
    /// listener closed. The health port serves until then.
    pub async fn run(self, shutdown: Shutdown) -> Stopped {
        let Server {
            config,
            secure,
            health,
            tls,
            resolver,
            metrics,
            readiness,
            ca_pem: _,
            loaded,
        } = self;
        tracing::info!(
            secure = %secure.addr,
            health = %health.addr,
            gates = %config.settings.gates,
            "serving"
        );
        let app = router(&config.settings, metrics.clone());
        let health_app = health::router(readiness.clone(), metrics.clone());
        let mut health = Port::new(health, Transport::Plain, health_app, &config);
        // The health port and the certificate watcher serve until the webhooks are drained.
        let drained = CancellationToken::new();

        let webhooks = async {
            let mut secure =
                Port::new(secure, Transport::Tls(TlsAcceptor::from(tls)), app, &config);
            secure.accept_until(shutdown.drain.cancelled()).await;
            readiness.set_not_ready();
            secure.drain();
            tracing::info!(delay = ?config.shutdown_delay, "shutdown requested: readiness failing, asking clients to reconnect, still accepting");
            secure
                .accept_until(tokio::time::sleep(config.shutdown_delay))
                .await;
            let open = secure.close(config.shutdown_timeout).await;
            drained.cancel();
            if open == 0 {
                Stopped::Drained
            } else {
                tracing::warn!(timeout = ?config.shutdown_timeout, open, "connections still open after the drain timeout");
                Stopped::TimedOut(open)
            }
        };
        let watch_certificates = async {
            if let (CertSource::Files(files), Some(loaded)) = (&config.certs, loaded) {
                let interval = config.tls_reload_interval;
                tls::watch(
                    files.clone(),
                    loaded,
                    resolver,
                    interval,
                    metrics,
                    drained.clone(),
                )
                .await;
            }
        };
        let serving = async {
            let (stopped, (), ()) = tokio::join!(
                webhooks,
                health.accept_until(drained.cancelled()),
                watch_certificates
            );
            stopped
        };
        // Returning drops every port with its connection tasks.
        let stopped = tokio::select! {
            stopped = serving => stopped,
            () = shutdown.abort.cancelled() => Stopped::Aborted,
        };
        tracing::info!(?stopped, "shut down");
        stopped
    }
}

fn write_ca(path: &std::path::Path, pem: &str) -> Result<(), ServeError> {
    let failed = |source| ServeError::WriteCa {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    std::fs::write(path, pem).map_err(failed)
}

/// A bound port and its address as bound (the port chosen for port 0).
struct Listener {
    tcp: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    async fn bind(addr: SocketAddr) -> Result<Self, ServeError> {
        let failed = |source| ServeError::Bind { addr, source };
        let tcp = TcpListener::bind(addr).await.map_err(failed)?;
        let addr = tcp.local_addr().map_err(failed)?;
        Ok(Listener { tcp, addr })
    }
}

/// What a port speaks.
#[derive(Clone)]
enum Transport {
    /// HTTP/1.1 (the health port: kubelet probes, Prometheus).
    Plain,
    /// TLS, then the protocol ALPN chose.
    Tls(TlsAcceptor),
}

/// One port: its listener, the bound on its open connections, and their tasks.
struct Port {
    listener: Listener,
    transport: Transport,
    app: Router,
    header_timeout: Duration,
    slots: Arc<Semaphore>,
    connections: JoinSet<()>,
    /// Asks every connection's client to reconnect (see [`Server::run`]). hyper-util's
    /// `GracefulShutdown` would close idle HTTP/1.1 connections at once, under a client that
    /// may be sending on one at that instant, and would take each connection over, leaving
    /// the h2 idle close no way to act on it.
    drain: CancellationToken,
}

impl Port {
    fn new(listener: Listener, transport: Transport, app: Router, config: &ServeConfig) -> Self {
        Port {
            listener,
            transport,
            app,
            header_timeout: config.header_read_timeout,
            slots: Arc::new(Semaphore::new(config.max_connections.max(1))),
            connections: JoinSet::new(),
            drain: CancellationToken::new(),
        }
    }

    /// Serves connections until `stop` completes, each in its own task; beyond
    /// `max_connections` open at once, new connections wait in the listen backlog.
    async fn accept_until(&mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                // Ended connections are collected as they end: the set holds the open ones.
                Some(_) = self.connections.join_next() => {}
                accepted = accept(&self.listener.tcp, &self.slots) => {
                    let Some((stream, peer, permit)) = accepted else { continue };
                    let transport = self.transport.clone();
                    let app = self.app.clone();
                    let header_timeout = self.header_timeout;
                    let drain = self.drain.clone();
                    self.connections.spawn(async move {
                        let _permit = permit;
                        transport.serve(stream, peer, app, header_timeout, &drain).await;
                    });
                }
            }
        }
    }

    /// Asks the client of every connection, open or still to come, to reconnect.
    fn drain(&self) {
        self.drain.cancel();
    }

    /// Closes the listener and waits at most `timeout` for the connections still open to
    /// end; how many are still open then (dropped on return).
    async fn close(self, timeout: Duration) -> usize {
        let Port {
            listener,
            mut connections,
            ..
        } = self;
        drop(listener);
        tracing::info!(
            open = connections.len(),
            "listener closed; waiting for the open connections to end"
        );
        let all_closed = async { while connections.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(timeout, all_closed).await;
        connections.len()
    }
}

/// Waits for a connection slot, then a connection. Accept errors (out of file descriptors,
/// a reset before accept) are logged and skipped after a short pause.
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = slots.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, peer)) => {
            let _ = stream.set_nodelay(true);
            Some((stream, peer, permit))
        }
        Err(err) => {
            tracing::warn!(error = %err, "accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

impl Transport {
    /// Serves one connection until it ends; once `drain` is cancelled, its client is asked to
    /// reconnect. The TLS handshake gets the header timeout, and is completed during the drain
    /// too: the client has a request to send.
    async fn serve(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        app: Router,
        header_timeout: Duration,
        drain: &CancellationToken,
    ) {
        let result = match self {
            Transport::Plain => serve_http1(TokioIo::new(stream), app, header_timeout, drain).await,
            Transport::Tls(acceptor) => {
                let handshake = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                let tls = match handshake.await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                // The protocol is the one negotiated by ALPN. Sniffing the connection preface
                // instead waits, without any timeout, for 24 bytes that a silent or slow client
                // never sends, holding a connection slot forever. HTTP/2 over TLS always uses
                // ALPN (RFC 9113, section 3.2), so no ALPN means HTTP/1.1.
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let io = TokioIo::new(tls);
                if h2 {
                    serve_h2(io, app, header_timeout, drain).await
                } else {
                    serve_http1(io, app, header_timeout, drain).await
                }
            }
        };
        if let Err(err) = result {
            tracing::debug!(%peer, error = %err, "connection ended with an error");
        }
    }
}

/// HTTP/1.1 with keep-alive. hyper's header read timeout also closes a keep-alive connection
/// that sends no next request within it.
///
/// Once `drain` is cancelled, every answer carries `Connection: close` and the connection
/// closes after it: HTTP/1.1 has no GOAWAY, and a client may write its next request on an
/// idle keep-alive connection at the very instant the server closes it, a request it will
/// not retry. So the drain never closes an idle connection; it tells the client on the next
/// answer, and the client opens a new connection for the request after.
async fn serve_http1<I>(
    io: I,
    app: Router,
    header_timeout: Duration,
    drain: &CancellationToken,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let draining = drain.clone();
    let app = tower::util::MapResponse::new(app, move |mut response: axum::response::Response| {
        if draining.is_cancelled() {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    builder
        .serve_connection(io, TowerToHyperService::new(app))
        .await
}

/// h2, closed when idle. hyper has no header read timeout in h2, and its keep-alive PINGs find
/// dead peers, not idle ones: a client that never sends the preface, or no request for a
/// while, would hold its slot until it leaves. So an h2 connection that opens no stream within
/// the header timeout is closed the same way as an HTTP/1.1 one (GOAWAY; streams in flight
/// finish), and one that never made a request is dropped one header timeout after the GOAWAY:
/// hyper's graceful close waits for a preface that may never come.
///
/// Once `drain` is cancelled, a connection gets its GOAWAY as soon as a request has arrived
/// on it, including a connection opened during the drain: h2's graceful GOAWAY (the last
/// stream id at its maximum, then the real one a PING round trip later) serves every stream
/// the client opened before it heard of it, and the client opens a new connection for the
/// next one.
async fn serve_h2<I>(
    io: I,
    app: Router,
    header_timeout: Duration,
    drain: &CancellationToken,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let request_seen = Arc::new(Notify::new());
    let seen = request_seen.clone();
    let app = app.map_request(move |request: http::Request<hyper::body::Incoming>| {
        seen.notify_one();
        request
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let connection = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(connection);
    let idle = tokio::time::sleep(header_timeout);
    tokio::pin!(idle);
    let mut any_request = false;
    let mut closing = false;
    let mut watch_idle = true;
    loop {
        tokio::select! {
            result = connection.as_mut() => return result,
            () = request_seen.notified() => {
                any_request = true;
                idle.as_mut().reset(tokio::time::Instant::now() + header_timeout);
            }
            () = drain.cancelled(), if !closing && any_request => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut idle, if watch_idle => {
                if !closing {
                    tracing::debug!("no request within the header timeout; closing the connection");
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                    idle.as_mut().reset(tokio::time::Instant::now() + header_timeout);
                } else if !any_request {
                    return Ok(());
                } else {
                    // Requests in flight finish, or get their 408 from the request timeout.
                    watch_idle = false;
                }
            }
        }
    }
}
