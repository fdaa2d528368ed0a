//! The skeleton every endpoint shares ([`serve`]): read the body, decide, log, count, answer.
//! An [`Endpoint`] decides; what it decided knows its log line and metric labels
//! ([`Reviewed`]). Each endpoint is a type, so that [`serve`] is one handler per endpoint,
//! compiled for it, and what it decided may borrow the body rather than copy it.

use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::body::{Peer, client_timeout, off_workers_when_large};
use super::rejection::{Rejection, json_response};
use super::state::WebhookState;

/// One endpoint: how it decides a body it has read.
pub(super) trait Endpoint: Send + 'static {
    /// The path, and the `endpoint` of logs and metrics.
    const NAME: &'static str;
    /// What it decided, borrowed from the body.
    type Reviewed<'b>: Reviewed;

    fn decide<'b>(state: &WebhookState, body: &'b [u8]) -> Result<Self::Reviewed<'b>, Rejection>;
}

/// A decided review: its log line, its metric labels and the answer's body.
pub(super) trait Reviewed {
    /// Logs the review; `decision` and `latency_us` as every endpoint logs them.
    fn log(&self, endpoint: &'static str, elapsed: Duration);
    /// `resource` and `operation` of the request metrics.
    fn labels(&self) -> (&'static str, &'static str);
    /// The `decision` of logs and metrics. Dashboards and alerts read these values.
    fn decision(&self) -> &'static str;
    /// The body of the 200 answer.
    fn into_body(self) -> Vec<u8>;
}

/// The skeleton of every endpoint: read the body, decide, log, count, answer.
pub(super) async fn serve<E: Endpoint>(
    State(state): State<WebhookState>,
    peer: Option<Extension<Peer>>,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    let peer = peer.map(|Extension(peer)| peer);
    let timeout = client_timeout(query.as_deref());
    let body = state.bodies.read(peer, timeout, body).await;
    off_workers_when_large(&state, body, |state, body| {
        let started = Instant::now();
        // A body that waited past its client's timeout (for the blocking pool, under load) is
        // not decided: nobody would read the answer.
        let body = body.and_then(|body| {
            if body.given_up() {
                Err(Rejection::GivenUp)
            } else {
                Ok(body)
            }
        });
        let decided = body.and_then(|body| {
            let reviewed = E::decide(state, &body.bytes)?;
            let elapsed = started.elapsed();
            reviewed.log(E::NAME, elapsed);
            let (resource, operation) = reviewed.labels();
            let decision = reviewed.decision();
            state
                .metrics
                .observe(E::NAME, resource, operation, decision, elapsed);
            Ok(json_response(StatusCode::OK, reviewed.into_body()))
        });
        decided.unwrap_or_else(|rejection| rejection.answer(&state.metrics, E::NAME, started))
    })
    .await
    .unwrap_or_else(|panicked| panicked.answer(&state.metrics, E::NAME, Instant::now()))
}
