//! The volume health webhook server: a mutating admission webhook that drops the gated fields
//! while `CSIVolumeHealth` is off, a validating admission webhook with the field rules and the
//! node restriction, and the authorization webhook for `csinodes/status`, over TLS.
//!
//! [`router`] serves the three endpoints and knows nothing of TLS, ports or signals; [`server`]
//! assembles the process.

pub mod check;
pub mod config;
pub mod enforcement;
pub mod gates;
mod handlers;
pub mod health;
pub mod metrics;
pub mod review;
pub mod server;
pub mod telemetry;
pub mod tls;

pub use handlers::{Settings, WebhookState, router};

/// An error and its sources as one line, `err: source: source`, skipping a source whose text
/// the message already contains (serde and io errors often repeat their cause).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}
