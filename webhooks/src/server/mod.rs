//! The process: TLS listener for the webhooks, plain listener for health, certificate reload,
//! and the order of the drain on shutdown. Each connection is served by `connections` (limits,
//! timeouts, TLS, HTTP/1.1 and h2, and how a client is asked to reconnect); a [`Shutdown`],
//! worked by hand or by signals, starts the drain.

mod connections;
mod shutdown;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use self::connections::{Limits, Listener, Port, Timeouts, Transport};
use crate::handlers::{Settings, router};
use crate::health::{self, Readiness};
use crate::metrics::Metrics;
use crate::tls::{self, CertificateFiles, ReloadingResolver, TlsError};

pub use self::shutdown::{Shutdown, SignalError};

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
    /// The name clients reach the server by; a reloaded certificate that does not name it is
    /// not served. `None`: no name is checked.
    pub tls_server_name: Option<String>,
    /// Handler settings.
    pub settings: Settings,
    /// Time allowed for the TLS handshake and for each request's head, from its first byte (on
    /// both ports).
    pub header_read_timeout: Duration,
    /// A keep-alive connection, HTTP/1.1 or h2, with no request for this long after its last
    /// answer is closed; longer than the apiserver's own 90 s, so that the client closes first.
    pub idle_timeout: Duration,
    /// Most connections served at once on each port. With all taken, the oldest that has not yet sent a whole request head is closed for a new
    /// one; with none such, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Most connections of one client address on each port (0: none); beyond it, its oldest
    /// that has not yet sent a whole request head is closed for the new one, or, with none
    /// such, the new one is.
    pub max_connections_per_peer: usize,
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
                let (resolver, contents) = tls::load(files, config.tls_server_name.as_deref())?;
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
        if !config.settings.gates.csi_volume_health {
            // Off is Kubernetes' default for an alpha gate, and drop on save acts only on what
            // the apiserver sends: its entries are installed with the switch, not with the base.
            tracing::warn!(
                "CSIVolumeHealth is off: /mutate drops new values of the gated fields and nodes may not \
                 write csinodes/status; the apiserver sends drop on save only through the entries of \
                 components/volume-health-off (the chart: featureGates.CSIVolumeHealth=false)"
            );
        }
        let app = router(&config.settings, metrics.clone());
        let health_app = health::router(readiness.clone(), metrics.clone());
        let timeouts = Timeouts {
            header: config.header_read_timeout,
            idle: config.idle_timeout,
        };
        let limits = Limits {
            connections: config.max_connections,
            per_peer: config.max_connections_per_peer,
        };
        let port = |listener, transport, app| Port::new(listener, transport, app, timeouts, limits);
        let mut health = port(health, Transport::Plain, health_app);
        // The health port and the certificate watcher serve until the webhooks are drained.
        let drained = CancellationToken::new();

        let webhooks = async {
            let mut secure = port(secure, Transport::Tls(TlsAcceptor::from(tls)), app);
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
                    config.tls_server_name.clone(),
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

async fn bind(addr: SocketAddr) -> Result<Listener, ServeError> {
    Listener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}
