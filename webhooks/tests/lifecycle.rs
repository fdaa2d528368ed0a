//! The drain in process, through a `Shutdown` handle: `Server::run` returns once in-flight
//! requests are answered, when the drain timeout passes, or at once on abort; the binary's
//! signals are in `shutdown.rs`.

// Test code unwraps: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{Ca, Running, assert_allowed, client_config, post, tls_connect};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use volume_health_webhooks::server::{CertSource, ServeConfig, Stopped};

struct Fixture {
    server: Running,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

async fn start(tune: impl FnOnce(&mut ServeConfig)) -> Fixture {
    let ca = Ca::new("lifecycle CA");
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &ca.server_pair());
    let mut config = support::config(CertSource::Files(files));
    // Long enough that only the drain closes connections here.
    config.header_read_timeout = Duration::from_secs(30);
    config.settings.request_timeout = Duration::from_secs(30);
    tune(&mut config);
    Fixture {
        server: Running::start(config).await,
        ca_pem: ca.pem,
        _dir: dir,
    }
}

impl Fixture {
    fn client(&self, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
        client_config(&self.ca_pem, None, &[alpn])
    }

    async fn readyz(&self) -> u16 {
        support::http_get(self.server.health, "/readyz")
            .await
            .unwrap()
            .0
    }

    /// Waits until `/readyz` fails, as it should at once after the drain starts.
    async fn wait_not_ready(&self) {
        let started = Instant::now();
        while self.readyz().await != 503 {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "/readyz still passes"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the TLS port refuses connections.
    async fn wait_listener_closed(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while TcpStream::connect(self.server.secure).await.is_ok() {
            assert!(Instant::now() < deadline, "still accepting");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Reads until the server closes the connection, at most 5 s.
async fn until_closed(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection is still open");
    seen
}

fn request(version: http::Version) -> http::Request<Full<Bytes>> {
    let builder = if version == http::Version::HTTP_2 {
        http::Request::post("https://localhost/validate").version(version)
    } else {
        http::Request::post("/validate").header(http::header::HOST, "localhost")
    };
    builder
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(support::valid_review())))
        .unwrap()
}

/// The drain: readiness fails at once; new connections are still served during the delay;
/// then the listener closes, idle keep-alive connections (HTTP/1.1 and h2) are closed, and
/// `run` waits for the request in flight, answers it, and returns `Drained`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_returns_once_requests_in_flight_are_answered() {
    let f = start(|c| {
        c.shutdown_delay = Duration::from_millis(500);
        c.shutdown_timeout = Duration::from_secs(5);
    })
    .await;

    // Idle keep-alive connections, one per protocol, each after one answered request.
    let stream = tls_connect(f.server.secure, &f.client(b"http/1.1"), "localhost")
        .await
        .unwrap();
    let (mut h1, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let h1_closed = tokio::spawn(connection);
    let answer = h1.send_request(request(http::Version::HTTP_11)).await;
    assert_eq!(answer.unwrap().status(), 200);
    let stream = tls_connect(f.server.secure, &f.client(b"h2"), "localhost")
        .await
        .unwrap();
    let (mut h2, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let h2_closed = tokio::spawn(connection);
    let answer = h2.send_request(request(http::Version::HTTP_2)).await;
    assert_eq!(answer.unwrap().status(), 200);

    let (mut in_flight, rest) =
        support::request_in_flight(f.server.secure, &f.client(b"http/1.1")).await;

    f.server.shutdown.drain();
    let drained_at = Instant::now();
    f.wait_not_ready().await;
    // Still served during the delay, for clients that have not seen the endpoints change.
    let answer = post(
        f.server.secure,
        &f.client(b"http/1.1"),
        "/validate",
        support::valid_review(),
    )
    .await
    .unwrap();
    assert_allowed(&answer);
    assert!(
        drained_at.elapsed() < Duration::from_millis(500),
        "the request during the delay came too late to prove anything"
    );

    f.wait_listener_closed(Duration::from_secs(3)).await;
    assert!(drained_at.elapsed() >= Duration::from_millis(450));
    for (protocol, closed) in [("HTTP/1.1", h1_closed), ("h2", h2_closed)] {
        let ended = tokio::time::timeout(Duration::from_secs(3), closed).await;
        assert!(
            matches!(ended, Ok(Ok(Ok(())))),
            "the idle {protocol} connection is closed: {ended:?}"
        );
    }
    drop((h1, h2));
    // The health port still answers while the drain waits for the request in flight.
    assert_eq!(f.readyz().await, 503);
    assert!(
        !f.server.has_stopped(),
        "run waits for the request in flight"
    );

    in_flight.write_all(&rest).await.unwrap();
    in_flight.flush().await.unwrap();
    let raw = until_closed(&mut in_flight).await;
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");

    let health = f.server.health;
    assert_eq!(
        f.server.stopped(Duration::from_secs(3)).await,
        Stopped::Drained
    );
    assert!(drained_at.elapsed() < Duration::from_millis(500) + Duration::from_secs(5));
    assert!(
        TcpStream::connect(health).await.is_err(),
        "the health port closes with the run"
    );
}

/// A request that is still in flight when the drain timeout passes does not hold the run:
/// `run` returns `TimedOut` and the connection is dropped unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_ends_the_run_and_drops_what_is_still_open() {
    let f = start(|c| {
        c.shutdown_delay = Duration::ZERO;
        c.shutdown_timeout = Duration::from_millis(500);
    })
    .await;
    let (mut in_flight, _rest) =
        support::request_in_flight(f.server.secure, &f.client(b"http/1.1")).await;
    f.server.shutdown.drain();
    let drained_at = Instant::now();
    assert_eq!(
        f.server.stopped(Duration::from_secs(3)).await,
        Stopped::TimedOut(1)
    );
    let took = drained_at.elapsed();
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(until_closed(&mut in_flight).await.is_empty(), "no answer");
}

/// Abort ends the run at once, during the delay as before the drain, dropping what is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_ends_the_run_at_once() {
    for drain_first in [true, false] {
        let f = start(|c| c.shutdown_delay = Duration::from_secs(60)).await;
        let (mut in_flight, _rest) =
            support::request_in_flight(f.server.secure, &f.client(b"http/1.1")).await;
        if drain_first {
            f.server.shutdown.drain();
            f.wait_not_ready().await;
        }
        assert!(!f.server.has_stopped(), "serving until told otherwise");
        f.server.shutdown.abort();
        assert_eq!(
            f.server.stopped(Duration::from_secs(1)).await,
            Stopped::Aborted
        );
        assert!(until_closed(&mut in_flight).await.is_empty(), "no answer");
    }
}
