//! SIGTERM and SIGINT on the built binary: readiness fails at once, clients are asked to
//! reconnect (`Connection: close` on HTTP/1.1 answers, GOAWAY on h2) while the listener keeps
//! accepting for `--shutdown-delay`, in-flight requests finish, the process exits 0 within the
//! grace period; a second signal exits at once.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::{Process, assert_allowed, client_config, post, tls_connect};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn readyz(process: &Process) -> u16 {
    support::http_get(process.health, "/readyz")
        .await
        .unwrap()
        .0
}

/// Waits until `/readyz` answers `status`; how long that took.
async fn wait_readyz(process: &Process, status: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    while readyz(process).await != status {
        assert!(started.elapsed() < limit, "/readyz never answered {status}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    started.elapsed()
}

fn request(path: &str, version: http::Version) -> http::Request<Full<Bytes>> {
    let uri = if version == http::Version::HTTP_2 {
        format!("https://localhost{path}")
    } else {
        path.to_owned()
    };
    let mut builder = http::Request::post(uri).version(version);
    if version != http::Version::HTTP_2 {
        builder = builder.header(http::header::HOST, "localhost");
    }
    builder
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(support::valid_review())))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    let mut process = Process::start(
        &ca_file,
        &[
            "--shutdown-delay=2s",
            "--shutdown-timeout=5s",
            "--request-timeout=30s",
            "--header-read-timeout=30s",
        ],
    );
    let ca = std::fs::read_to_string(&ca_file).unwrap();
    let h1 = client_config(&ca, None, &[b"http/1.1"]);
    let h2 = client_config(&ca, None, &[b"h2"]);
    assert_eq!(readyz(&process).await, 200);

    // Idle keep-alive connections, one per protocol, each after one answered request.
    let stream = tls_connect(process.secure, &h1, "localhost").await.unwrap();
    let (mut keepalive_h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let keepalive_h1_closed = tokio::spawn(conn);
    let answer = keepalive_h1
        .send_request(request("/validate", http::Version::HTTP_11))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let stream = tls_connect(process.secure, &h2, "localhost").await.unwrap();
    let (mut keepalive_h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let keepalive_h2_closed = tokio::spawn(conn);
    let answer = keepalive_h2
        .send_request(request("/validate", http::Version::HTTP_2))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    // A request in flight: its handler is reading the body, half of which is sent.
    let (mut in_flight, second_half) = support::request_in_flight(process.secure, &h1).await;

    process.signal("TERM");
    let signalled = Instant::now();
    let took = wait_readyz(&process, 503, Duration::from_secs(2)).await;
    assert!(
        took < Duration::from_secs(2),
        "readiness failed after {took:?}"
    );

    // The h2 client gets a GOAWAY and its connection closes; the HTTP/1.1 client's next
    // answer tells it to reconnect, and its connection closes after it.
    let h2_end = tokio::time::timeout(Duration::from_secs(3), keepalive_h2_closed)
        .await
        .expect("the h2 connection is closed by its GOAWAY");
    assert!(h2_end.is_ok(), "{h2_end:?}");
    let answer = keepalive_h1
        .send_request(request("/validate", http::Version::HTTP_11))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.headers().get(http::header::CONNECTION).unwrap(),
        "close"
    );
    tokio::time::timeout(Duration::from_secs(3), keepalive_h1_closed)
        .await
        .expect("the HTTP/1.1 connection is closed after its answer")
        .unwrap()
        .unwrap();

    // Still accepting during the delay, for clients that reconnect and for those that have
    // not seen the endpoint change.
    let answer = post(process.secure, &h1, "/validate", support::valid_review())
        .await
        .unwrap();
    assert_allowed(&answer);
    assert!(
        signalled.elapsed() < Duration::from_secs(2),
        "the request during the delay was sent too late to prove anything"
    );

    // After the delay the listener closes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(process.secure).await.is_ok() {
        assert!(Instant::now() < deadline, "still accepting after the delay");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(signalled.elapsed() >= Duration::from_millis(1900));
    assert!(
        process.running(),
        "the in-flight request is still being waited for"
    );

    // The in-flight request completes, and its connection is closed after the answer.
    in_flight.write_all(&second_half).await.unwrap();
    in_flight.flush().await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 4096];
        loop {
            match in_flight.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection was closed after the answer");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");

    let code = process.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(code, Some(0), "exit status");
    assert!(signalled.elapsed() < Duration::from_secs(2 + 5 + 2));
}

/// SIGINT drains like SIGTERM; with nothing in flight the process exits 0 right after the
/// delay.
#[tokio::test]
async fn sigint_with_nothing_in_flight_exits_zero_after_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    let mut process = Process::start(
        &ca_file,
        &["--shutdown-delay=500ms", "--shutdown-timeout=20s"],
    );
    process.signal("INT");
    let signalled = Instant::now();
    wait_readyz(&process, 503, Duration::from_secs(2)).await;
    let code = process.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(code, Some(0));
    let took = signalled.elapsed();
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// A second signal during the drain exits at once, with a failure status.
#[tokio::test]
async fn second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    let mut process = Process::start(&ca_file, &["--shutdown-delay=60s"]);
    process.signal("TERM");
    wait_readyz(&process, 503, Duration::from_secs(2)).await;
    // Draining, not gone: the first signal is still being honoured with answers.
    let ca = std::fs::read_to_string(&ca_file).unwrap();
    let h1 = client_config(&ca, None, &[b"http/1.1"]);
    let answer = post(process.secure, &h1, "/validate", support::valid_review())
        .await
        .unwrap();
    assert_allowed(&answer);
    assert!(process.running(), "draining for 60 s");
    process.signal("TERM");
    let code = process.wait_exit(Duration::from_secs(3)).await;
    assert_eq!(code, Some(1), "exits at once, and not as a clean shutdown");
}
