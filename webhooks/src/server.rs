//! The process: TLS listener for the webhooks, plain listener for health, certificate reload,
//! connection limits and timeouts, and the drain on shutdown.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
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
    /// After SIGTERM, how long to keep accepting while endpoints stop routing here.
    pub shutdown_delay: Duration,
    /// After that, how long in-flight requests may take before the process exits anyway.
    pub shutdown_timeout: Duration,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Certificates.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A port could not be bound.
    #[error("failed to listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
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
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A server with its ports bound, ready to [`run`](Server::run).
pub struct Server {
    config: ServeConfig,
    secure: TcpListener,
    health: TcpListener,
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
                    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                        std::fs::create_dir_all(dir).map_err(|source| ServeError::WriteCa {
                            path: path.clone(),
                            source,
                        })?;
                    }
                    std::fs::write(path, &generated.ca_pem).map_err(|source| {
                        ServeError::WriteCa {
                            path: path.clone(),
                            source,
                        }
                    })?;
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
        let secure = bind(SocketAddr::new(config.bind_address, config.secure_port)).await?;
        let health = bind(SocketAddr::new(config.bind_address, config.health_port)).await?;
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
        self.secure
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(self.config.bind_address, self.config.secure_port))
    }

    /// The bound health address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(self.config.bind_address, self.config.health_port))
    }

    /// The generated CA (PEM), when the certificate was generated.
    pub fn generated_ca(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Serves until `shutdown` completes, then drains: `/readyz` fails at once, connections are
    /// still accepted for `shutdown_delay` so that endpoints can update, then the listener
    /// closes, in-flight requests finish and keep-alive connections are closed, within
    /// `shutdown_timeout`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
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
        let stop_background = CancellationToken::new();
        let health_addr = health
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| health_addr_string(&config));

        let health_app = health::router(readiness.clone(), metrics.clone());
        let health_stop = stop_background.clone();
        let health_task = tokio::spawn(serve_health(
            health,
            health_app,
            health_stop,
            config.header_read_timeout,
            config.max_connections,
        ));

        if let (CertSource::Files(files), Some(loaded)) = (&config.certs, loaded) {
            tokio::spawn(tls::watch(
                files.clone(),
                loaded,
                resolver,
                config.tls_reload_interval,
                metrics.clone(),
                stop_background.clone(),
            ));
        }

        let app = router(&config.settings, metrics);
        let acceptor = TlsAcceptor::from(tls);
        // Every connection task holds a slot from accept to close, so holding all the slots
        // means that every connection is closed; the drain waits for exactly that.
        let slots = u32::try_from(config.max_connections.max(1)).unwrap_or(u32::MAX);
        let limit = Arc::new(Semaphore::new(slots as usize));
        let drain = CancellationToken::new();
        tracing::info!(
            secure = %secure.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            health = %health_addr,
            gates = %config.settings.gates,
            "serving"
        );

        tokio::pin!(shutdown);
        let mut drain_at = None;
        loop {
            let delay = async {
                match drain_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut shutdown, if drain_at.is_none() => {
                    readiness.set_not_ready();
                    tracing::info!(delay = ?config.shutdown_delay, "shutdown requested: readiness failing, still accepting");
                    drain_at = Some(tokio::time::Instant::now() + config.shutdown_delay);
                }
                () = delay => break,
                accepted = accept(&secure, &limit) => {
                    let Some((stream, peer, permit)) = accepted else { continue };
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    let drain = drain.clone();
                    let header_timeout = config.header_read_timeout;
                    tokio::spawn(async move {
                        let _permit = permit;
                        let handshake = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                        let tls = tokio::select! {
                            handshake = handshake => match handshake {
                                Ok(Ok(tls)) => tls,
                                Ok(Err(err)) => {
                                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "TLS handshake timed out");
                                    return;
                                }
                            },
                            () = drain.cancelled() => return,
                        };
                        serve_connection(tls, app, drain, header_timeout).await;
                    });
                }
            }
        }
        drop(secure);
        tracing::info!("listener closed; draining in-flight requests");
        drain.cancel();
        if tokio::time::timeout(config.shutdown_timeout, limit.acquire_many(slots))
            .await
            .is_err()
        {
            tracing::warn!(timeout = ?config.shutdown_timeout, "connections still open after the drain timeout");
        }
        stop_background.cancel();
        let _ = health_task.await;
        tracing::info!("shut down");
    }
}

/// The plain-HTTP health port, HTTP/1.1 only (kubelet probes, Prometheus), with the same
/// header-read timeout and connection bound as the webhooks: a client that connects and sends
/// nothing is closed instead of holding a file descriptor for as long as it likes, and beyond
/// `max_connections` new connections wait in the backlog. Until `stop`.
async fn serve_health(
    listener: TcpListener,
    app: Router,
    stop: CancellationToken,
    header_timeout: Duration,
    max_connections: usize,
) {
    let limit = Arc::new(Semaphore::new(max_connections.max(1)));
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = accept(&listener, &limit) => accepted,
        };
        let Some((stream, _peer, permit)) = accepted else {
            continue;
        };
        let app = app.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let connection =
                builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(err) = result {
                tracing::debug!(error = %err, "health connection ended with an error");
            }
        });
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

fn health_addr_string(config: &ServeConfig) -> String {
    SocketAddr::new(config.bind_address, config.health_port).to_string()
}

/// Waits for a connection slot, then a connection. Accept errors (out of file descriptors,
/// a reset before accept) are logged and skipped after a short pause.
async fn accept(
    listener: &TcpListener,
    limit: &Arc<Semaphore>,
) -> Option<(
    tokio::net::TcpStream,
    SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let permit = limit.clone().acquire_owned().await.ok()?;
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

/// Serves one TLS connection until the client closes it or, once `drain` is cancelled, until
/// its in-flight requests are answered (idle keep-alive connections close at once).
async fn serve_connection(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    app: Router,
    drain: CancellationToken,
    header_timeout: Duration,
) {
    // The protocol is the one negotiated by ALPN. Sniffing the connection preface instead (the
    // auto builder's default) waits, without any timeout, for 24 bytes that a silent or slow
    // client never sends, holding a connection slot forever. HTTP/2 over TLS always uses ALPN
    // (RFC 9113, section 3.2), so no ALPN means HTTP/1.1.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut builder = if h2 {
        builder.http2_only()
    } else {
        builder.http1_only()
    };
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    // hyper bounds the time to read HTTP/1.1 headers, which also closes a keep-alive connection
    // that sends no next request, but has no such bound in HTTP/2: a client that never sends
    // the preface, or no request for a while, would hold its slot until it leaves. An h2
    // connection that sends no new request within the header timeout is closed the same way
    // (GOAWAY; streams in flight finish).
    let requests = Arc::new(AtomicU64::new(0));
    let counter = requests.clone();
    let service = app.map_request(move |request: http::Request<hyper::body::Incoming>| {
        // Calls come one at a time from this connection's task.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        request
    });
    let connection = builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(service));
    tokio::pin!(connection);
    let idle_deadline = tokio::time::sleep(header_timeout);
    tokio::pin!(idle_deadline);
    let mut requests_seen = 0;
    let mut closing = false;
    let mut watch_idle = h2;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            () = drain.cancelled(), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut idle_deadline, if watch_idle => {
                let next = tokio::time::Instant::now() + header_timeout;
                let requests = requests.load(Ordering::Relaxed);
                if requests != requests_seen {
                    requests_seen = requests;
                    idle_deadline.as_mut().reset(next);
                    continue;
                }
                if closing {
                    if requests == 0 {
                        // Not even a first request: the client may never have sent the
                        // preface, and gets no more time than that.
                        return;
                    }
                    // Requests in flight finish, or get their 408 from the request timeout.
                    watch_idle = false;
                    continue;
                }
                tracing::debug!("no request within the header timeout; closing the connection");
                closing = true;
                connection.as_mut().graceful_shutdown();
                idle_deadline.as_mut().reset(next);
            }
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, "connection ended with an error");
    }
}
