//! The request body's budget: its size, its time, the bytes held at once by all of them and by
//! each client, and which bodies are too large to decide on the async workers.
//!
//! The budget (`--max-in-flight-bytes`) is reserved as a body's bytes arrive, never ahead of
//! them, so a client that sends headers and no body holds none of it; and one client address
//! may hold at most half of it ([`PEER_SHARE`]), so one client that sends bodies and then stalls
//! cannot hold all of it: a review from another address finds room beside it. Two such
//! addresses can, so the apiserver's own reviews need a budget no other client shares. Bodies
//! wait for room first come, first served. A client with
//! a certificate from `--client-ca-file` (the apiserver, when the installs turn that on) draws
//! on a budget of its own, as large: no uncertified client, nor any number of them, can make
//! its reviews wait.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use bytes::BytesMut;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::rejection::Rejection;

/// Who sent a request, set by the server on every request (absent when a test drives the
/// router in-process): the client's address, and whether it presented a certificate from
/// `--client-ca-file` (the apiserver, when the installs turn client certificates on).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    /// The client's address.
    pub(crate) addr: IpAddr,
    /// Whether its connection carries a verified client certificate.
    pub(crate) certified: bool,
}

/// The part of `--max-in-flight-bytes` one client address may hold: a half.
const PEER_SHARE: u32 = 2;

/// The limits every request body is read within (see [`BodyBudget::read`]).
#[derive(Clone, Debug)]
pub(super) struct BodyBudget {
    max_request_bytes: usize,
    request_timeout: Duration,
    in_flight: Arc<Semaphore>,
    in_flight_kib: u32,
    /// The budget of certified clients: as large, of their own, so that no uncertified client
    /// can take it from the apiserver.
    certified: Arc<Semaphore>,
    peers: Arc<Peers>,
}

/// What each client address holds of the budget, in KiB.
#[derive(Debug, Default)]
struct Peers {
    held: Mutex<HashMap<IpAddr, u32>>,
    /// Told whenever a client's holding shrinks.
    released: Notify,
}

impl Peers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u32>> {
        // Plain counts: one left by a panicking thread is still right.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A request body, with its share of `--max-in-flight-bytes` held until the answer is made.
pub(super) struct Body_ {
    pub(super) bytes: Bytes,
    /// When the client stops waiting for the answer (its `timeout`): an answer after it is
    /// work for nothing.
    pub(super) given_up_at: Option<tokio::time::Instant>,
    _held: Held,
}

impl Body_ {
    /// Whether the client has stopped waiting for the answer.
    pub(super) fn given_up(&self) -> bool {
        self.given_up_at
            .is_some_and(|at| tokio::time::Instant::now() >= at)
    }
}

/// The `timeout` the apiserver puts in a webhook call's query (`?timeout=3s`, the entry's
/// `timeoutSeconds`, as client-go writes a duration): how long it waits for the answer.
pub(super) fn client_timeout(query: Option<&str>) -> Option<Duration> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    go_duration(value)
}

/// A duration as Go writes one: `3s`, `1.5s`, `1m30s`, `250ms`; `None` for anything else.
fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit..];
        total = total.checked_add(Duration::try_from_secs_f64(number * seconds).ok()?)?;
    }
    Some(total)
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
            certified: Arc::new(Semaphore::new(in_flight_kib as usize)),
            peers: Arc::new(Peers::default()),
        }
    }

    /// Reads a request body of at most `max_request_bytes` within `request_timeout`. The body
    /// is the only part of a request that waits on the client: after it the handlers run to
    /// their answer without waiting on anything. A body announced as too large is refused
    /// before it is read.
    ///
    /// The bytes held under `--max-in-flight-bytes` are reserved as the body arrives, never
    /// ahead of it: the buffer grows (doubling, up to the announced length) only once its bytes
    /// are here, and its growth is reserved first, within the client's share. A client that
    /// sends headers and nothing more, on one connection or on a hundred h2 streams, so holds
    /// nothing of the budget. A body that finds no room waits with its bytes left in its socket
    /// (flow control stops an h2 client); one still waiting at `--request-timeout` gets 503.
    ///
    /// `tokio::time::timeout` polls the read first and arms its timer only when the body is not
    /// complete yet, so a body that arrived with its headers, as a small review does, never
    /// touches the timer wheel.
    /// `client_timeout` is how long the client waits for the answer (see [`client_timeout`]):
    /// the body gets no longer than that either.
    pub(super) async fn read(
        &self,
        peer: Option<Peer>,
        client_timeout: Option<Duration>,
        body: Body,
    ) -> Result<Body_, Rejection> {
        let limit = self.max_request_bytes;
        let hint = body.size_hint();
        if hint.lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
            return Err(Rejection::TooLarge);
        }
        let announced = hint.exact().and_then(|n| usize::try_from(n).ok());
        let now = tokio::time::Instant::now();
        let given_up_at = client_timeout.map(|timeout| now + timeout);
        // The client stops waiting first: past its timeout the body is shed, not waited for.
        let shed = client_timeout.is_some_and(|t| t < self.request_timeout);
        let deadline =
            now + client_timeout.map_or(self.request_timeout, |t| t.min(self.request_timeout));
        // A certified client draws on its own budget, with no share to keep: it is the
        // apiserver, and no other client can make it wait.
        let certified = peer.is_some_and(|p| p.certified);
        let mut held = Held {
            budget: self.clone(),
            pool: if certified {
                self.certified.clone()
            } else {
                self.in_flight.clone()
            },
            peer: peer.filter(|p| !p.certified).map(|p| p.addr),
            permit: None,
            kib: 0,
            share_kib: 0,
            waiting: false,
        };
        let read = async {
            let mut bytes = BytesMut::new();
            let mut body = Limited::new(body, limit);
            while let Some(frame) = body.frame().await {
                let data = match frame {
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_) => continue,
                    },
                    Err(err) if err.is::<LengthLimitError>() => return Err(Rejection::TooLarge),
                    Err(err) => return Err(Rejection::Read(err)),
                };
                let needed = bytes.len() + data.len();
                if needed > bytes.capacity() {
                    // Doubling keeps the copies linear; the announced length, when there is
                    // one, is the most a body may need.
                    let capacity = needed
                        .max(bytes.capacity() * 2)
                        .max(MIN_BUFFER)
                        .min(announced.unwrap_or(limit).max(needed));
                    held.grow_to(capacity).await?;
                    bytes.reserve(capacity - bytes.len());
                }
                bytes.extend_from_slice(&data);
            }
            Ok(bytes.freeze())
        };
        match tokio::time::timeout_at(deadline, read).await {
            Ok(bytes) => Ok(Body_ {
                bytes: bytes?,
                given_up_at,
                _held: held,
            }),
            Err(_elapsed) if shed => Err(Rejection::GivenUp),
            Err(_elapsed) if held.waiting => Err(Rejection::Busy),
            Err(_elapsed) => Err(Rejection::TimedOut),
        }
    }
}

/// The smallest buffer a body is read into: a small review fits at once.
const MIN_BUFFER: usize = 16 * 1024;

/// What a body holds of the budget, and of its client's share; given back when dropped.
struct Held {
    budget: BodyBudget,
    /// The budget drawn on: the shared one, or the certified clients'.
    pool: Arc<Semaphore>,
    /// The client whose share is held; `None` for a certified client, which has none.
    peer: Option<IpAddr>,
    permit: Option<OwnedSemaphorePermit>,
    /// KiB of the budget held.
    kib: u32,
    /// KiB of the client's share held: as `kib`, or more while the growth waits for the budget.
    share_kib: u32,
    /// Waiting for room: at the deadline, the answer is 503, not 408.
    waiting: bool,
}

impl Held {
    /// Holds enough of the budget for a buffer of `capacity` bytes, waiting for room in the
    /// client's share, then in the budget.
    async fn grow_to(&mut self, capacity: usize) -> Result<(), Rejection> {
        // A certified client may hold its whole budget; any other, its share of the shared one.
        let share = if Arc::ptr_eq(&self.pool, &self.budget.certified) {
            self.budget.in_flight_kib
        } else {
            (self.budget.in_flight_kib / PEER_SHARE).max(1)
        };
        let want = kib(capacity).min(share);
        if want <= self.kib {
            return Ok(());
        }
        self.waiting = true;
        if let Some(peer) = self.peer {
            let peers = &self.budget.peers;
            loop {
                let released = peers.released.notified();
                tokio::pin!(released);
                // Registered before the check, so that a release between the two is seen.
                released.as_mut().enable();
                {
                    let mut held = peers.lock();
                    let total = held.entry(peer).or_default();
                    if *total - self.share_kib + want <= share {
                        *total += want - self.share_kib;
                        self.share_kib = want;
                        break;
                    }
                }
                released.await;
            }
        }
        let grown = want - self.kib;
        let more = self.pool.clone();
        // The semaphore is never closed.
        let acquired = more.acquire_many_owned(grown).await;
        let Ok(permit) = acquired else {
            return Err(Rejection::Busy);
        };
        self.waiting = false;
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.kib = want;
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(peer) = self.peer else { return };
        let peers = &self.budget.peers;
        let mut held = peers.lock();
        // What the share was given: the permit's KiB, and the growth that may have been
        // waiting for its permit when the read ended.
        let given = held.get(&peer).copied().unwrap_or(0);
        let mine = self.share_kib.min(given);
        if given == mine {
            held.remove(&peer);
        } else {
            held.insert(peer, given - mine);
        }
        drop(held);
        if mine > 0 {
            peers.released.notify_waiters();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apiservers_timeout_is_read_from_the_query() {
        let cases = [
            (Some("timeout=3s"), Some(Duration::from_secs(3))),
            (Some("a=b&timeout=1m30s"), Some(Duration::from_secs(90))),
            (Some("timeout=250ms"), Some(Duration::from_millis(250))),
            (Some("timeout=1.5s"), Some(Duration::from_millis(1500))),
            (Some("timeout=3"), None),
            (Some("timeout="), None),
            (Some("timeout=3x"), None),
            (Some("timeouts=3s"), None),
            (None, None),
        ];
        for (query, want) in cases {
            assert_eq!(client_timeout(query), want, "{query:?}");
        }
    }
}
