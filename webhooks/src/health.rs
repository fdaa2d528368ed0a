//! The plain-HTTP health port: `/healthz`, `/readyz` and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Readiness, shared between the server (which clears it on SIGTERM) and `/readyz`.
#[derive(Clone, Debug)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Ready until told otherwise.
    pub fn ready() -> Self {
        Readiness(Arc::new(AtomicBool::new(true)))
    }

    /// Fails `/readyz` from now on, so that endpoints stop sending new requests.
    pub fn set_not_ready(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Whether `/readyz` passes.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct HealthState {
    readiness: Readiness,
    metrics: Metrics,
}

/// The health routes.
pub fn router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(HealthState { readiness, metrics })
}

async fn readyz(State(state): State<HealthState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }
}

async fn metrics_text(State(state): State<HealthState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
