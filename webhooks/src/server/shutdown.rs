//! How a running server is told to stop: by hand, or by SIGTERM and SIGINT.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::telemetry::SERVER_TARGET;

/// Tells a running [`Server`](super::Server) to stop; clones work the same server.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    pub(super) drain: CancellationToken,
    pub(super) abort: CancellationToken,
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

    /// Starts the drain described at [`Server::run`](super::Server::run); a second call changes
    /// nothing.
    pub fn drain(&self) {
        self.drain.cancel();
    }

    /// Ends [`Server::run`](super::Server::run) at once, with
    /// [`Stopped::Aborted`](super::Stopped::Aborted): connections still open are dropped.
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
            tracing::warn!(target: SERVER_TARGET, "second signal: exiting without draining");
            handle.abort();
        });
        Ok(shutdown)
    }
}
