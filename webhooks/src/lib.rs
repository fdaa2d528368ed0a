//! The volume health webhook server: a mutating admission webhook that drops the gated fields
//! while `CSIVolumeHealth` is off, a validating admission webhook with the field rules and the
//! node restriction, and the authorization webhook for `csinodes/status`, over TLS.
//!
//! [`router`] serves the three endpoints and knows nothing of TLS, ports or signals; [`server`]
//! assembles the process.

pub mod audit;
pub mod check;
pub mod config;
pub mod enforcement;
pub mod gates;
mod handlers;
pub mod health;
pub mod metrics;
pub mod parse;
pub mod review;
pub mod server;
pub mod telemetry;
pub mod tls;
pub mod verify;

pub use handlers::{Settings, WebhookState, router};
