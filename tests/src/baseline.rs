//! The baselines the benchmarks measure the server against: a router with no logic behind it
//! that answers every review with a fixed allowing answer. `baseline-webhook` serves it behind
//! the server's TLS and HTTP stack for the load benchmark; the handler benchmark calls it
//! in-process.

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::IgnoredAny;

/// The largest body the baselines read, the server's default `--max-request-bytes`.
pub const MAX_REQUEST_BYTES: usize = 7 * 1024 * 1024;

/// The answer to every admission review.
const ADMISSION_ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}"#;
/// The answer to every access review.
const AUTHORIZATION_ANSWER: &str = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","status":{"allowed":true}}"#;

/// What a baseline does with a body before it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyCheck {
    /// Nothing beyond reading it whole.
    None,
    /// One strict JSON pass ([`is_json`]), answering 400 when it fails: the least any server
    /// must do that answers a malformed review with 400.
    StrictJson,
}

/// `/mutate`, `/validate` and `/authorize`, each answering a fixed allowing review after
/// `check`.
pub fn router(check: BodyCheck) -> Router {
    let admission = move |body: Bytes| async move { answer(check, &body, ADMISSION_ANSWER) };
    let authorization =
        move |body: Bytes| async move { answer(check, &body, AUTHORIZATION_ANSWER) };
    Router::new()
        .route("/mutate", post(admission))
        .route("/validate", post(admission))
        .route("/authorize", post(authorization))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
}

/// Whether `body` is one JSON value: UTF-8 checked once, then parsed by serde_json with
/// nothing decoded (`from_str` does not check the UTF-8 again).
pub fn is_json(body: &[u8]) -> bool {
    std::str::from_utf8(body).is_ok_and(|text| serde_json::from_str::<IgnoredAny>(text).is_ok())
}

fn answer(check: BodyCheck, body: &Bytes, answer: &'static str) -> Response {
    let well_formed = match check {
        BodyCheck::None => {
            // Look at the body so that reading it cannot be optimized away.
            std::hint::black_box(body.len());
            true
        }
        BodyCheck::StrictJson => is_json(body),
    };
    if well_formed {
        ([(header::CONTENT_TYPE, "application/json")], answer).into_response()
    } else {
        (StatusCode::BAD_REQUEST, "request body is not JSON").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_json_accepts_one_value_and_nothing_else() {
        for (body, expected) in [
            (
                &br#"{"kind":"AdmissionReview","request":{"uid":"a"}}"#[..],
                true,
            ),
            (b" [1, 2.5, null, \"\\u00e9\"] \n", true),
            (b"{\"a\":1", false),
            (b"{\"a\":1} {}", false),
            (b"{\"a\":1,}", false),
            (b"", false),
            (b"\"\xff\"", false),
        ] {
            assert_eq!(is_json(body), expected, "{}", String::from_utf8_lossy(body));
        }
    }
}
