//! A request this server cannot answer with a review, and the JSON answers every endpoint
//! writes.

use std::time::Instant;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use volume_health_validation::error::{self, MAX_MESSAGE_BYTES, cut};
use volume_health_validation::status::bad_request_status;

use crate::metrics::Metrics;
use crate::review::{BadReview, PlainJson};
use crate::telemetry::HANDLERS_TARGET;

/// A request this server cannot answer with a review: an HTTP error with a `Status` body.
#[derive(Debug)]
pub(super) enum Rejection {
    /// Over `--max-request-bytes`, by its `Content-Length` or as it arrived.
    TooLarge,
    /// Not complete within `--request-timeout`.
    TimedOut,
    /// No room under `--max-in-flight-bytes` within `--request-timeout`.
    Busy,
    /// The connection failed while the body was read.
    Read(Box<dyn std::error::Error + Send + Sync>),
    /// Not a review this endpoint answers.
    BadReview(Box<dyn std::error::Error + Send + Sync>),
    /// Deciding failed.
    Panicked,
    /// Ready to be decided only after its client's `timeout`: shed, undecided.
    GivenUp,
}

impl From<BadReview> for Rejection {
    fn from(err: BadReview) -> Self {
        Rejection::BadReview(err.into())
    }
}

impl From<volume_health_authz::ReviewError> for Rejection {
    fn from(err: volume_health_authz::ReviewError) -> Self {
        Rejection::BadReview(err.into())
    }
}

impl Rejection {
    fn status(&self) -> StatusCode {
        match self {
            Rejection::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::TimedOut => StatusCode::REQUEST_TIMEOUT,
            Rejection::Busy | Rejection::GivenUp => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Read(_) | Rejection::BadReview(_) => StatusCode::BAD_REQUEST,
            Rejection::Panicked => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` of the `Status` body.
    fn reason(&self) -> &'static str {
        match self {
            Rejection::TooLarge => "RequestEntityTooLarge",
            Rejection::TimedOut | Rejection::GivenUp => "Timeout",
            Rejection::Read(_) | Rejection::BadReview(_) => "BadRequest",
            Rejection::Busy | Rejection::Panicked => "InternalError",
        }
    }

    /// The text of the answer and of the log line: at most [`MAX_MESSAGE_BYTES`], since an
    /// error about a body may quote the body (the library's messages are bounded as they are
    /// built; this bounds the whole line, whatever its parts).
    fn message(&self) -> String {
        let message = match self {
            Rejection::TooLarge => "request body is larger than --max-request-bytes".to_owned(),
            Rejection::TimedOut => "request body not received within --request-timeout".to_owned(),
            Rejection::Busy => {
                "too many request bytes in flight (--max-in-flight-bytes); try again".to_owned()
            }
            Rejection::Read(err) => {
                format!("could not read request body: {}", error::chain(&**err))
            }
            Rejection::BadReview(err) => error::chain(&**err),
            Rejection::Panicked => "the review could not be decided".to_owned(),
            Rejection::GivenUp => {
                "the client's timeout passed before the review could be decided; shed".to_owned()
            }
        };
        match cut(&message, MAX_MESSAGE_BYTES) {
            std::borrow::Cow::Borrowed(_) => message,
            cut => cut.into_owned(),
        }
    }

    /// The `decision` of the request metrics.
    fn label(&self) -> &'static str {
        match self {
            Rejection::TooLarge => "too_large",
            Rejection::TimedOut => "timeout",
            Rejection::GivenUp => "shed",
            Rejection::Read(_) | Rejection::BadReview(_) => "bad_request",
            Rejection::Busy | Rejection::Panicked => "error",
        }
    }

    /// Logs and counts the rejection like any answer, then answers it.
    pub(super) fn answer(
        self,
        metrics: &Metrics,
        endpoint: &'static str,
        started: Instant,
    ) -> Response {
        let elapsed = started.elapsed();
        let message = self.message();
        tracing::warn!(
            target: HANDLERS_TARGET,
            endpoint,
            status = self.status().as_u16(),
            error = message,
            "bad request"
        );
        metrics.observe(endpoint, "unknown", "unknown", self.label(), elapsed);
        self.into_response()
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut body = bad_request_status(self.message());
        body.code = Some(status.as_u16().into());
        body.reason = Some(self.reason().to_owned());
        json_response(status, body.to_json())
    }
}

/// An answer with a JSON body: a review's, or a rejection's `Status`.
pub(super) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
