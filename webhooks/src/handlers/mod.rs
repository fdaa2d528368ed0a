//! The HTTP face of the webhooks: `/mutate`, `/validate` and `/authorize` as an axum `Router`,
//! with one log line and one metrics sample per request (reviews that are simply allowed are
//! logged at debug level). TLS, ports and signals live elsewhere, so tests drive this router
//! in-process.
//!
//! The three endpoints share one skeleton ([`endpoint::serve`]): read the body ([`body`]),
//! decide, log, count, answer. An endpoint ([`admission`], [`authorize`]) decides; what it
//! decided knows its log line and metric labels; a body it cannot answer is a
//! [`rejection::Rejection`], which is its own HTTP answer. The children share what they need
//! through each other, never through this module, which only assembles them.

mod admission;
mod authorize;
mod body;
mod endpoint;
mod rejection;
mod state;

use axum::Router;
use axum::routing::post;

use crate::metrics::Metrics;

pub(crate) use body::Peer;
pub use state::{Settings, WebhookState};

/// The webhook routes. Each handler reads its body itself, within `max_request_bytes` (an
/// UPDATE review carries the object twice, so axum's 2 MB default would refuse large objects the
/// apiserver accepts) and `request_timeout`.
pub fn router(settings: &Settings, metrics: Metrics) -> Router {
    let state = WebhookState::new(settings, metrics);
    Router::new()
        .route("/mutate", post(endpoint::serve::<admission::Mutate>))
        .route("/validate", post(endpoint::serve::<admission::Validate>))
        .route("/authorize", post(endpoint::serve::<authorize::Authorize>))
        .with_state(state)
}
