//! The process: TLS listener for the webhooks, plain listener for health, certificate reload,
//! connection limits and timeouts, and the drain on shutdown.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

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
    /// Time allowed for the TLS handshake and for each request's headers.
    pub header_read_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen backlog.
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
}

impl Server {
    /// Loads or generates the certificate and binds both ports; fails fast on either.
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        let (resolver, ca_pem) = match &config.certs {
            CertSource::Files(files) => (tls::load(files)?, None),
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
        Ok(Server {
            config,
            secure,
            health,
            tls,
            resolver,
            metrics: Metrics::new(),
            readiness: Readiness::ready(),
            ca_pem,
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

    /// The certificate resolver, to see what is served.
    pub fn resolver(&self) -> Arc<ReloadingResolver> {
        self.resolver.clone()
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
        } = self;
        let stop_background = CancellationToken::new();
        let health_addr = health
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| health_addr_string(&config));

        let health_app = health::router(readiness.clone(), metrics.clone());
        let health_stop = stop_background.clone();
        let health_task = tokio::spawn(async move {
            let served = axum::serve(health, health_app)
                .with_graceful_shutdown(health_stop.cancelled_owned())
                .await;
            if let Err(err) = served {
                tracing::error!(error = %err, "health server failed");
            }
        });

        if let CertSource::Files(files) = &config.certs {
            tokio::spawn(tls::watch(
                files.clone(),
                resolver,
                config.tls_reload_interval,
                metrics.clone(),
                stop_background.clone(),
            ));
        }

        let app = router(&config.settings, metrics);
        let acceptor = TlsAcceptor::from(tls);
        let graceful = GracefulShutdown::new();
        let limit = Arc::new(Semaphore::new(config.max_connections.max(1)));
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
                    let watcher = graceful.watcher();
                    let header_timeout = config.header_read_timeout;
                    tokio::spawn(async move {
                        let _permit = permit;
                        let tls = match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
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
                        serve_connection(tls, app, watcher, header_timeout).await;
                    });
                }
            }
        }
        drop(secure);
        tracing::info!("listener closed; draining in-flight requests");
        if tokio::time::timeout(config.shutdown_timeout, graceful.shutdown())
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

async fn serve_connection(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    app: Router,
    watcher: hyper_util::server::graceful::Watcher,
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
    let connection = builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
    if let Err(err) = watcher.watch(connection.into_owned()).await {
        tracing::debug!(error = %err, "connection ended with an error");
    }
}

/// `err: source: source ...`, as one line.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
