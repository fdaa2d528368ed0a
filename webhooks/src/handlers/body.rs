//! The request body's budget: its size, its time, the bytes held at once by all of them, and
//! which bodies are too large to decide on the async workers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use bytes::BytesMut;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::rejection::Rejection;

/// The limits every request body is read within (see [`BodyBudget::read`]).
#[derive(Clone, Debug)]
pub(super) struct BodyBudget {
    max_request_bytes: usize,
    request_timeout: Duration,
    in_flight: Arc<Semaphore>,
    in_flight_kib: u32,
}

/// A request body, with its share of `--max-in-flight-bytes` held until the answer is made.
pub(super) struct Body_ {
    pub(super) bytes: Bytes,
    _held: OwnedSemaphorePermit,
}

/// Bodies larger than this are decided on the blocking pool, so that a large review never holds
/// up the async workers that serve small reviews and health checks.
const BLOCKING_BODY_BYTES: usize = 256 * 1024;

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

impl BodyBudget {
    /// `--max-request-bytes`, `--max-in-flight-bytes` and `--request-timeout`.
    pub(super) fn new(
        max_request_bytes: usize,
        max_in_flight_bytes: usize,
        request_timeout: Duration,
    ) -> Self {
        let in_flight_kib = kib(max_in_flight_bytes);
        BodyBudget {
            max_request_bytes,
            request_timeout,
            in_flight: Arc::new(Semaphore::new(in_flight_kib as usize)),
            in_flight_kib,
        }
    }

    /// Reads a request body of at most `max_request_bytes` within `request_timeout`. The body
    /// is the only part of a request that waits on the client: after it the handlers run to
    /// their answer without waiting on anything. A body announced as too large is refused
    /// before it is read.
    ///
    /// Before reading, the body's length (announced, or else the limit) is reserved under
    /// `--max-in-flight-bytes`, so the bytes held at once stay bounded whatever the clients
    /// send.
    ///
    /// `tokio::time::timeout` polls the read first and arms its timer only when the body is not
    /// complete yet, so a body that arrived with its headers, as a small review does, never
    /// touches the timer wheel.
    pub(super) async fn read(&self, body: Body) -> Result<Body_, Rejection> {
        let limit = self.max_request_bytes;
        let hint = body.size_hint();
        if hint.lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
            return Err(Rejection::TooLarge);
        }
        let announced = hint
            .exact()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(limit);
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let reserve = self
            .in_flight
            .clone()
            .acquire_many_owned(kib(announced).min(self.in_flight_kib));
        let held = match tokio::time::timeout_at(deadline, reserve).await {
            Ok(Ok(held)) => held,
            // The semaphore is never closed; no room in time is the one way to get here.
            Ok(Err(_)) | Err(_) => return Err(Rejection::Busy),
        };
        let read = async {
            let mut bytes = BytesMut::with_capacity(announced);
            let mut body = Limited::new(body, limit);
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => {
                        if let Ok(data) = frame.into_data() {
                            bytes.extend_from_slice(&data);
                        }
                    }
                    Err(err) if err.is::<LengthLimitError>() => return Err(Rejection::TooLarge),
                    Err(err) => return Err(Rejection::Read(err)),
                }
            }
            Ok(bytes.freeze())
        };
        match tokio::time::timeout_at(deadline, read).await {
            Ok(bytes) => Ok(Body_ {
                bytes: bytes?,
                _held: held,
            }),
            Err(_elapsed) => Err(Rejection::TimedOut),
        }
    }
}

/// Answers `body` with `answer`: right here when it is small, on the blocking pool when it is
/// large, so that a large review never holds up the async workers that serve small reviews and
/// health checks. [`Rejection::Panicked`] when `answer` panicked on the pool.
pub(super) async fn off_workers_when_large<S: Clone + Send + Sync + 'static>(
    state: &S,
    body: Result<Body_, Rejection>,
    answer: fn(&S, Result<Body_, Rejection>) -> Response,
) -> Result<Response, Rejection> {
    if !matches!(&body, Ok(body) if body.bytes.len() > BLOCKING_BODY_BYTES) {
        return Ok(answer(state, body));
    }
    let pool_state = state.clone();
    tokio::task::spawn_blocking(move || answer(&pool_state, body))
        .await
        .map_err(|_panicked| Rejection::Panicked)
}
