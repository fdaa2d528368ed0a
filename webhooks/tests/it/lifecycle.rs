//! The drain in process, through a `Shutdown` handle: clients are asked to reconnect
//! (`Connection: close`, GOAWAY) while the listener still accepts, `Server::run` returns once
//! the last connection has closed by itself, when the drain timeout passes, or at once on
//! abort; the binary's signals are in `shutdown.rs`.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{Ca, Running, client_config, tls_connect};
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
    config.idle_timeout = Duration::from_secs(30);
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

type H1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;
type Closed = tokio::task::JoinHandle<hyper::Result<()>>;

impl Fixture {
    /// A new HTTP/1.1 keep-alive connection, and the task that ends when it closes.
    async fn h1(&self) -> (H1, Closed) {
        let stream = tls_connect(self.server.secure, &self.client(b"http/1.1"), "localhost")
            .await
            .unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        (sender, tokio::spawn(connection))
    }

    /// A new h2 connection, and the task that ends when it closes.
    async fn h2(&self) -> (H2, Closed) {
        let stream = tls_connect(self.server.secure, &self.client(b"h2"), "localhost")
            .await
            .unwrap();
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        (sender, tokio::spawn(connection))
    }
}

/// One review on an HTTP/1.1 connection: allowed; whether the answer said `Connection: close`.
async fn review_h1(sender: &mut H1) -> bool {
    sender.ready().await.unwrap();
    let answer = sender
        .send_request(request(http::Version::HTTP_11))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let close = answer
        .headers()
        .get_all(http::header::CONNECTION)
        .iter()
        .any(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
    let body = http_body_util::BodyExt::collect(answer.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("\"allowed\":true"),
        "{body:?}"
    );
    close
}

async fn review_h2(sender: &mut H2) {
    let answer = sender
        .send_request(request(http::Version::HTTP_2))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// Waits at most 3 s for a connection to close, without an error.
async fn closes(what: &str, closed: Closed) {
    let ended = tokio::time::timeout(Duration::from_secs(3), closed).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "the {what} connection is closed: {ended:?}"
    );
}

/// The drain, for HTTP/1.1: readiness fails at once; from then on every answer carries
/// `Connection: close`, on connections opened before the drain and during it, and the
/// connection closes after it; the listener keeps accepting for the delay. The drain itself
/// closes no idle connection: one that nobody uses during the delay is still served after the
/// listener has closed. `run` waits for the request in flight and returns `Drained` once the
/// last connection has closed after its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_tells_http1_clients_on_each_answer_and_keeps_accepting() {
    let f = start(|c| {
        c.shutdown_delay = Duration::from_millis(1500);
        c.shutdown_timeout = Duration::from_secs(5);
    })
    .await;

    // Keep-alive connections before the drain: answers do not ask the client to close.
    let (mut used, used_closed) = f.h1().await;
    assert!(
        !review_h1(&mut used).await,
        "Connection: close before the drain"
    );
    let (mut idle, idle_closed) = f.h1().await;
    assert!(
        !review_h1(&mut idle).await,
        "Connection: close before the drain"
    );
    let (mut in_flight, rest) =
        support::request_in_flight(f.server.secure, &f.client(b"http/1.1")).await;

    f.server.shutdown.drain();
    let drained_at = Instant::now();
    f.wait_not_ready().await;

    // The next answer on a keep-alive connection tells its client to reconnect...
    assert!(
        review_h1(&mut used).await,
        "no Connection: close in the drain"
    );
    closes("answered HTTP/1.1", used_closed).await;
    // ... and the reconnect is accepted and served, with the same message.
    let (mut reconnect, reconnect_closed) = f.h1().await;
    assert!(
        review_h1(&mut reconnect).await,
        "no Connection: close in the drain"
    );
    closes("reconnected HTTP/1.1", reconnect_closed).await;
    assert!(
        drained_at.elapsed() < Duration::from_millis(1500),
        "the requests during the delay came too late to prove anything"
    );

    f.wait_listener_closed(Duration::from_secs(3)).await;
    assert!(drained_at.elapsed() >= Duration::from_millis(1400));
    // The idle connection was left open: its client may have been writing on it. Its next
    // request is answered, and closes it.
    assert!(
        !idle_closed.is_finished(),
        "the drain closed an idle connection"
    );
    assert!(
        review_h1(&mut idle).await,
        "no Connection: close in the drain"
    );
    closes("idle HTTP/1.1", idle_closed).await;
    // The health port still answers while the drain waits for the request in flight.
    assert_eq!(f.readyz().await, 503);
    assert!(
        !f.server.has_stopped(),
        "run waits for the request in flight"
    );

    in_flight.write_all(&rest).await.unwrap();
    in_flight.flush().await.unwrap();
    let raw = until_closed(&mut in_flight).await;
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200 ok\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");

    let health = f.server.health;
    assert_eq!(
        f.server.stopped(Duration::from_secs(3)).await,
        Stopped::Drained
    );
    assert!(drained_at.elapsed() < Duration::from_millis(1500) + Duration::from_secs(5));
    assert!(
        TcpStream::connect(health).await.is_err(),
        "the health port closes with the run"
    );
}

/// The drain, for h2: a connection that has served a request gets a GOAWAY at once and
/// closes once its streams are answered; a connection opened during the delay is served, and
/// gets its GOAWAY after its first request, while the listener still accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_sends_h2_clients_a_goaway_and_serves_their_reconnects() {
    let f = start(|c| {
        c.shutdown_delay = Duration::from_millis(1500);
        c.shutdown_timeout = Duration::from_secs(5);
    })
    .await;
    let (mut before, before_closed) = f.h2().await;
    review_h2(&mut before).await;

    f.server.shutdown.drain();
    let drained_at = Instant::now();
    f.wait_not_ready().await;
    closes("h2 connection from before the drain", before_closed).await;

    let (mut reconnect, reconnect_closed) = f.h2().await;
    review_h2(&mut reconnect).await;
    closes("h2 reconnect", reconnect_closed).await;
    assert!(
        drained_at.elapsed() < Duration::from_millis(1500),
        "the reconnect came too late to prove anything"
    );
    assert!(
        TcpStream::connect(f.server.secure).await.is_ok(),
        "the listener still accepts"
    );
    assert_eq!(
        f.server.stopped(Duration::from_secs(4)).await,
        Stopped::Drained
    );
}

/// After the listener has closed, a keep-alive connection that nobody uses ends at its idle
/// timeout, as at any other time, and then `run` returns `Drained`: the drain waits for it
/// instead of closing it under a client that may be writing on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_keep_alive_connection_ends_at_its_idle_timeout() {
    let f = start(|c| {
        c.idle_timeout = Duration::from_secs(2);
        c.shutdown_delay = Duration::from_millis(200);
        c.shutdown_timeout = Duration::from_secs(5);
    })
    .await;
    let (mut idle, idle_closed) = f.h1().await;
    assert!(!review_h1(&mut idle).await);
    let last_request = Instant::now();
    f.server.shutdown.drain();
    f.wait_listener_closed(Duration::from_secs(2)).await;
    assert!(
        !idle_closed.is_finished() && last_request.elapsed() < Duration::from_millis(1500),
        "closed before its idle timeout"
    );
    assert_eq!(
        f.server.stopped(Duration::from_secs(4)).await,
        Stopped::Drained
    );
    assert!(last_request.elapsed() >= Duration::from_millis(1900));
    // The idle timeout drops the connection as hyper does at any time, without close_notify.
    let ended = tokio::time::timeout(Duration::from_secs(1), idle_closed).await;
    assert!(matches!(ended, Ok(Ok(_))), "{ended:?}");
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
