//! Slow and hostile clients: the header-read timeout, the request timeout, the connection
//! limit, and hundreds of idle or half-sent connections next to a normal request.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{Ca, Running, assert_allowed, client_config, post, tls_connect};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use volume_health_webhooks::server::{CertSource, ServeConfig};

struct Fixture {
    server: Running,
    client: Arc<rustls::ClientConfig>,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

async fn start(tune: impl FnOnce(&mut ServeConfig)) -> Fixture {
    let ca = Ca::new("clients CA");
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &ca.server_pair());
    let mut config = support::config(CertSource::Files(files));
    tune(&mut config);
    Fixture {
        server: Running::start(config).await,
        client: client_config(&ca.pem, None, &[b"h2", b"http/1.1"]),
        ca_pem: ca.pem,
        _dir: dir,
    }
}

/// Reads until the server closes the connection (or 10 s pass); what it sent and how long
/// that took.
async fn until_closed(stream: &mut (impl AsyncRead + Unpin)) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    (seen, started.elapsed())
}

fn assert_cut(what: &str, took: Duration) {
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(5),
        "{what}: closed after {took:?}, expected about the 1 s header timeout"
    );
}

/// `--header-read-timeout` (1 s here) closes a connection that sends nothing over TCP, stops
/// in the TLS handshake, sends nothing after the handshake (HTTP/1.1 and h2), or stops in the
/// middle of its headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_read_timeout_cuts_slow_clients() {
    let f = start(|_| {}).await;
    let addr = f.server.secure;

    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let (_, took) = until_closed(&mut tcp).await;
    assert_cut("silent TCP", took);

    let mut tcp = TcpStream::connect(addr).await.unwrap();
    // The start of a TLS handshake record, never finished.
    tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let (_, took) = until_closed(&mut tcp).await;
    assert_cut("half a ClientHello", took);

    for alpn in [b"http/1.1".as_slice(), b"h2".as_slice()] {
        let client = client_config(&f.ca_pem, None, &[alpn]);
        let mut tls = tls_connect(addr, &client, "localhost").await.unwrap();
        let (_, took) = until_closed(&mut tls).await;
        assert_cut(&format!("silent after the handshake ({alpn:?})"), took);
    }

    let client = client_config(&f.ca_pem, None, &[b"http/1.1"]);
    let mut tls = tls_connect(addr, &client, "localhost").await.unwrap();
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    let (_, took) = until_closed(&mut tls).await;
    assert_cut("half-sent headers", took);

    // The server still answers.
    let answer = post(addr, &f.client, "/validate", support::valid_review())
        .await
        .unwrap();
    assert_allowed(&answer);
    f.server.stop().await;
}

/// A keep-alive connection that made a request and then sends nothing more is closed after
/// the idle timeout (3 s here), not the header timeout (1 s), over HTTP/1.1 and h2 alike: the
/// client, whose own idle timeout is shorter, closes it first, and an idle client still does
/// not keep its slot for ever. It answered its request first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let f = start(|c| c.idle_timeout = Duration::from_secs(3)).await;
    for alpn in [b"http/1.1".as_slice(), b"h2".as_slice()] {
        let client = client_config(&f.ca_pem, None, &[alpn]);
        let tls = tls_connect(f.server.secure, &client, "localhost")
            .await
            .unwrap();
        let io = TokioIo::new(tls);
        let request = hyper::Request::post("https://localhost/validate")
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(support::valid_review())))
            .unwrap();
        // Each sender is kept until the end: dropping it would close the connection from
        // this side.
        let mut h2_sender = None;
        let mut h1_sender = None;
        let (status, connection) = if alpn == b"h2" {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            let connection = tokio::spawn(connection);
            let response = sender.send_request(request).await.unwrap();
            let status = response.status();
            response.into_body().collect().await.unwrap();
            h2_sender = Some(sender);
            (status, connection)
        } else {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            let connection = tokio::spawn(connection);
            let mut request = request;
            *request.uri_mut() = "/validate".parse().unwrap();
            request
                .headers_mut()
                .insert("host", "localhost".parse().unwrap());
            let response = sender.send_request(request).await.unwrap();
            let status = response.status();
            response.into_body().collect().await.unwrap();
            h1_sender = Some(sender);
            (status, connection)
        };
        assert_eq!(status, 200, "{alpn:?}");
        let idle = Instant::now();
        let closed = tokio::time::timeout(Duration::from_secs(10), connection).await;
        assert!(closed.is_ok(), "{alpn:?}: still open after 10 s idle");
        let took = idle.elapsed();
        assert!(
            took >= Duration::from_millis(2500) && took < Duration::from_secs(6),
            "{alpn:?}: idle connection closed after {took:?}, expected the 3 s idle timeout"
        );
        drop((h1_sender, h2_sender));
    }
    f.server.stop().await;
}

/// A POST to `path` over HTTP/1.1 that sends half its body and stops: the connection, the
/// answer's first 12 bytes, and how long after the half they came.
async fn stalled_post(
    f: &Fixture,
    path: &str,
) -> (
    tokio_rustls::client::TlsStream<TcpStream>,
    [u8; 12],
    Duration,
) {
    let client = client_config(&f.ca_pem, None, &[b"http/1.1"]);
    let mut tls = tls_connect(f.server.secure, &client, "localhost")
        .await
        .unwrap();
    let body = support::valid_review();
    tls.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tls.write_all(&body[..body.len() / 2]).await.unwrap();
    tls.flush().await.unwrap();
    let started = Instant::now();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), tls.read_exact(&mut head))
        .await
        .expect("answered within 5 s")
        .unwrap();
    (tls, head, started.elapsed())
}

/// `--request-timeout` (1 s here) answers 408 with a `Status` to a request whose body stops
/// coming, and counts it.
#[tokio::test]
async fn request_timeout_answers_a_stalled_body_with_408() {
    let f = start(|c| c.settings.request_timeout = Duration::from_secs(1)).await;
    let (mut tls, head, took) = stalled_post(&f, "/validate").await;
    assert_eq!(&head, b"HTTP/1.1 408");
    assert!(took >= Duration::from_millis(500));
    let (rest, _) = until_closed(&mut tls).await;
    let rest = String::from_utf8(rest).unwrap();
    let (headers, body) = rest.split_once("\r\n\r\n").unwrap();
    assert!(
        headers.contains("content-type: application/json"),
        "{headers}"
    );
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(status["kind"], "Status", "{body}");
    assert_eq!(status["code"], 408, "{body}");
    assert_eq!(status["reason"], "Timeout", "{body}");
    assert_eq!(
        status["message"],
        "request body not received within --request-timeout"
    );
    const TIMEOUTS: &str = r#"volume_health_webhook_requests_total{endpoint="validate",resource="unknown",operation="unknown",decision="timeout"}"#;
    assert_eq!(support::metric(&f.server.metrics().await, TIMEOUTS), 1.0);
    f.server.stop().await;
}

/// A body announced by its `Content-Length` as larger than `--max-request-bytes` is refused with
/// 413 before any of it arrives, not after `--request-timeout`.
#[tokio::test]
async fn an_announced_oversized_body_is_refused_before_it_is_sent() {
    let f = start(|c| {
        c.settings.max_request_bytes = 64 * 1024;
        c.settings.request_timeout = Duration::from_secs(5);
    })
    .await;
    let client = client_config(&f.ca_pem, None, &[b"http/1.1"]);
    let mut tls = tls_connect(f.server.secure, &client, "localhost")
        .await
        .unwrap();
    tls.write_all(
        b"POST /authorize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 65537\r\n\r\n",
    )
    .await
    .unwrap();
    tls.flush().await.unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(2), tls.read_exact(&mut head))
        .await
        .expect("answered before the request timeout")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
    let (rest, _) = until_closed(&mut tls).await;
    let rest = String::from_utf8(rest).unwrap();
    assert!(
        rest.contains(r#""message":"request body is larger than --max-request-bytes""#),
        "{rest}"
    );
    f.server.stop().await;
}

/// Hundreds of idle and half-sent connections (TCP only, half a TLS handshake, TLS with
/// half-sent headers, idle h2) do not delay a normal request: it is answered within 2 s, with
/// the 10 s default header timeout keeping all of them open meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_idle_and_half_sent_connections_do_not_delay_a_normal_request() {
    let f = start(|c| c.header_read_timeout = Duration::from_secs(10)).await;
    let addr = f.server.secure;
    let mut held: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    for _ in 0..150 {
        held.push(Box::new(TcpStream::connect(addr).await.unwrap()));
    }
    for _ in 0..100 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            .await
            .unwrap();
        held.push(Box::new(tcp));
    }
    let h1 = client_config(&f.ca_pem, None, &[b"http/1.1"]);
    let h2 = client_config(&f.ca_pem, None, &[b"h2"]);
    for i in 0..60 {
        let client = if i % 2 == 0 { &h1 } else { &h2 };
        let mut tls = tls_connect(addr, client, "localhost").await.unwrap();
        if i % 2 == 0 {
            tls.write_all(b"POST /validate HTTP/1.1\r\nHost: loc")
                .await
                .unwrap();
            tls.flush().await.unwrap();
        }
        held.push(Box::new(tls));
    }
    assert_eq!(held.len(), 310);

    for _ in 0..5 {
        let started = Instant::now();
        let answer = post(addr, &f.client, "/validate", support::valid_review())
            .await
            .unwrap();
        let took = started.elapsed();
        assert_allowed(&answer);
        assert!(
            took < Duration::from_secs(2),
            "a normal request took {took:?}"
        );
    }
    drop(held);
    f.server.stop().await;
}

/// `--max-connections`: with every slot held by a silent client, a new connection closes the
/// oldest of them and is served at once; with every slot held by a request under way, it waits
/// in the backlog, and is served, not refused, once a request ends (its 408 here).
#[tokio::test]
async fn connections_beyond_the_limit_close_the_oldest_idle_one_or_wait() {
    let f = start(|c| {
        c.max_connections = 4;
        c.header_read_timeout = Duration::from_secs(30);
        c.settings.request_timeout = Duration::from_secs(1);
    })
    .await;
    let addr = f.server.secure;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    let started = Instant::now();
    let answer = post(addr, &f.client, "/validate", support::valid_review())
        .await
        .unwrap();
    assert_allowed(&answer);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(900), "served after {took:?}");
    let (_, closed_after) = until_closed(&mut silent[0]).await;
    assert!(
        closed_after < Duration::from_secs(2),
        "the oldest silent connection is still open after {closed_after:?}"
    );
    drop(silent);
    f.server.stop().await;

    // Four requests under way hold every slot: none of them is closed for the next one.
    let f = start(|c| {
        c.max_connections = 4;
        c.header_read_timeout = Duration::from_secs(30);
        c.settings.request_timeout = Duration::from_secs(2);
    })
    .await;
    let addr = f.server.secure;
    let h1 = client_config(&f.ca_pem, None, &[b"http/1.1"]);
    let mut under_way = Vec::new();
    for _ in 0..4 {
        under_way.push(support::request_in_flight(addr, &h1).await);
    }
    let started = Instant::now();
    let answer = post(addr, &f.client, "/validate", support::valid_review())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_allowed(&answer);
    assert!(
        took >= Duration::from_millis(1000),
        "served after {took:?}: the limit did not hold"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    drop(under_way);
    f.server.stop().await;
}

/// The health port has the same `--max-connections` bound, and a probe beyond it closes the
/// oldest silent connection: it is answered at once.
#[tokio::test]
async fn health_port_connections_beyond_the_limit_close_the_oldest_idle_one() {
    let f = start(|c| {
        c.max_connections = 4;
        c.header_read_timeout = Duration::from_secs(30);
    })
    .await;
    let health = f.server.health;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(health).await.unwrap());
    }
    let started = Instant::now();
    let (status, _) = support::http_get(health, "/healthz").await.unwrap();
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert!(took < Duration::from_millis(900), "answered after {took:?}");
    let (_, closed_after) = until_closed(&mut silent[0]).await;
    assert!(closed_after < Duration::from_secs(2), "{closed_after:?}");
    f.server.stop().await;
}

/// The plain-HTTP health port has the same header timeout: a silent or half-sent client is
/// closed, and 200 of them do not delay `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_port_cuts_slow_clients_and_still_answers_probes() {
    let f = start(|_| {}).await;
    let health = f.server.health;
    let mut held = Vec::new();
    for i in 0..200 {
        let mut tcp = TcpStream::connect(health).await.unwrap();
        if i % 2 == 0 {
            tcp.write_all(b"GET /readyz HTTP/1.1\r\nHo").await.unwrap();
        }
        held.push(tcp);
    }
    let started = Instant::now();
    let (status, body) = support::http_get(health, "/readyz").await.unwrap();
    assert_eq!((status, body.as_str()), (200, "ok"));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "a probe took {took:?}");

    let (_, took) = until_closed(&mut held[0]).await;
    assert_cut("half-sent probe", took);
    let (_, took) = until_closed(&mut held[1]).await;
    assert!(
        took < Duration::from_secs(5),
        "silent client kept for {took:?}"
    );
    f.server.stop().await;
}

/// The apiserver's `?timeout=` (its entry's `timeoutSeconds`) bounds a review as
/// `--request-timeout` does, when it is shorter: a body that stops coming is shed at the
/// client's timeout, answered 503 and counted, not waited for until `--request-timeout`.
#[tokio::test]
async fn the_clients_timeout_sheds_a_stalled_body_at_that_timeout() {
    let f = start(|c| c.settings.request_timeout = Duration::from_secs(10)).await;
    let (_tls, head, took) = stalled_post(&f, "/validate?timeout=1s").await;
    assert_eq!(&head, b"HTTP/1.1 503");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
    const SHED: &str = r#"volume_health_webhook_requests_total{endpoint="validate",resource="unknown",operation="unknown",decision="shed"}"#;
    assert_eq!(support::metric(&f.server.metrics().await, SHED), 1.0);
    // A review within its timeout is answered as ever.
    let answer = post(
        f.server.secure,
        &f.client,
        "/validate?timeout=3s",
        support::valid_review(),
    )
    .await
    .unwrap();
    assert_allowed(&answer);
    f.server.stop().await;
}
