//! Hostile clients against the server as a process, over its sockets: what they make it hold is
//! measured from `/proc` (VmHWM, the peak resident set, against VmRSS at rest), and an ordinary
//! review or probe is timed beside them. The tests of this module run one at a time: each
//! measures a process under load, and two at once would slow each other's clients.

use crate::support::{self, Process, client_config, post};

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

const MIB: usize = 1024 * 1024;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn proc_status_bytes(pid: u32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    let kib: usize = line.trim().trim_end_matches("kB").trim().parse().unwrap();
    kib * 1024
}

/// The server binary with `extra` flags, and a TLS client for it.
fn start(dir: &tempfile::TempDir, extra: &[&str]) -> (Process, Arc<rustls::ClientConfig>) {
    let ca_file = dir.path().join("ca.crt");
    let process = Process::start(&ca_file, extra);
    let ca = std::fs::read_to_string(&ca_file).unwrap();
    (process, client_config(&ca, None, &[b"http/1.1"]))
}

/// A review just under 7 MiB whose `dryRun` is a string of DEL bytes: serde used to quote it
/// whole in its error, escaped to 6 bytes a byte.
fn del_review() -> Vec<u8> {
    let text = String::from_utf8(support::valid_review()).unwrap();
    let member = "\"dryRun\":false";
    let at = text.find(member).expect("dryRun in the review");
    let n = 7 * MIB - text.len() - 16;
    let mut body = Vec::with_capacity(7 * MIB);
    body.extend_from_slice(&text.as_bytes()[..at]);
    body.extend_from_slice(b"\"dryRun\":\"");
    body.resize(body.len() + n, 0x7f);
    body.push(b'"');
    body.extend_from_slice(&text.as_bytes()[at + member.len()..]);
    assert!(body.len() <= 7 * MIB);
    body
}

/// Two 7 MiB reviews whose error would quote them, at once: each answer is a short 400, each
/// log line short, and the process's peak is within twice the bodies above its resident set at
/// rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quoted_value_neither_grows_the_answer_nor_the_memory() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (process, client) = start(&dir, &[]);
    let pid = process.child.id();
    // One ordinary review first, so that what serving one takes is in the figure at rest.
    support::assert_allowed(
        &post(
            process.secure,
            &client,
            "/validate",
            support::valid_review(),
        )
        .await
        .unwrap(),
    );
    let at_rest = proc_status_bytes(pid, "VmRSS");
    let body = del_review();
    let bodies = 2 * body.len();
    let sends = (0..2).map(|_| {
        let (client, body) = (client.clone(), body.clone());
        let addr = process.secure;
        tokio::spawn(async move { post(addr, &client, "/validate", body).await.unwrap() })
    });
    for send in sends.collect::<Vec<_>>() {
        let answer = send.await.unwrap();
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
        assert!(
            answer.body.len() < 2048,
            "a {}-byte answer",
            answer.body.len()
        );
        let message = answer.json()["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("invalid type: string, expected"),
            "{message}"
        );
    }
    let peak = proc_status_bytes(pid, "VmHWM");
    eprintln!(
        "at rest {:.1} MiB, peak {:.1} MiB, bodies {:.1} MiB",
        at_rest as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        bodies as f64 / MIB as f64
    );
    assert!(
        peak.saturating_sub(at_rest) <= 2 * bodies,
        "peak {peak} bytes, {at_rest} at rest, for {bodies} bytes of bodies"
    );
    // The warn lines of both rejections were written before their answers; the thread that
    // reads the process's output passes them on.
    let mut rejected = Vec::new();
    while rejected.len() < 2 {
        let line = process
            .logs
            .recv_timeout(Duration::from_secs(10))
            .expect("a log line for each rejection");
        if serde_json::from_str::<Value>(&line).is_ok_and(|e| e["message"] == "bad request") {
            rejected.push(line);
        }
    }
    for line in rejected {
        assert!(line.len() < 2048, "a {}-byte log line", line.len());
    }
}

/// A TCP connection to `addr` from `source` (any 127.x.y.z reaches a loopback listener): a
/// client address of its own, as the apiserver's is beside a hostile pod's.
async fn connect_from(source: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A TLS connection from `source`, verified as `localhost`.
async fn tls_from(
    source: [u8; 4],
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = connect_from(source, addr).await;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(client.clone())
        .connect(name, tcp)
        .await
        .unwrap()
}

/// A body that sends `first` bytes, then nothing, never ending.
struct Stalled(Option<Bytes>);

impl hyper::body::Body for Stalled {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.0.take() {
            Some(data) => Poll::Ready(Some(Ok(hyper::body::Frame::data(data)))),
            None => Poll::Pending,
        }
    }
}

/// An h2 connection with `streams` POSTs to `/validate` open, each having sent
/// `each` bytes of its body (as far as flow control lets it) and never ending it. The tasks
/// keep it open; dropping them closes it.
async fn h2_hog(
    h2: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    streams: usize,
    each: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    let tls = tls_from([127, 0, 0, 1], addr, h2).await;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    let mut tasks = vec![tokio::spawn(async move {
        let _ = connection.await;
    })];
    for _ in 0..streams {
        let mut sender = sender.clone();
        let request = http::Request::post("https://localhost/validate")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Stalled(Some(Bytes::from(vec![b' '; each]))))
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let _ = sender.send_request(request).await;
        }));
    }
    tasks
}

/// `/validate` of an ordinary review from `source` over HTTP/1.1: how long it took.
async fn ordinary_review(
    source: [u8; 4],
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
) -> Duration {
    let started = Instant::now();
    let tls = tls_from(source, addr, client).await;
    let answer = support::post_on(tls, "/validate", support::valid_review())
        .await
        .unwrap();
    support::assert_allowed(&answer);
    started.elapsed()
}

/// Clients that send headers and no body (five chunked, five of an announced 7 MB, and one h2
/// connection opening a hundred streams) hold nothing of the body budget: an ordinary review
/// beside them is answered within a second, where they used to hold all of
/// `--max-in-flight-bytes` and keep it waiting for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_send_no_body_hold_none_of_the_budget() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (process, client) = start(&dir, &[]);
    let h2 = client_config(
        &std::fs::read_to_string(dir.path().join("ca.crt")).unwrap(),
        None,
        &[b"h2"],
    );
    let addr = process.secure;
    let mut hogs = Vec::new();
    for i in 0..10 {
        let mut tls = tls_from([127, 0, 0, 1], addr, &client).await;
        let length = if i % 2 == 0 {
            "Transfer-Encoding: chunked".to_owned()
        } else {
            "Content-Length: 7000000".to_owned()
        };
        tls.write_all(
            format!(
                "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{length}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        tls.flush().await.unwrap();
        hogs.push(tls);
    }
    let streams = h2_hog(&h2, addr, 100, 0).await;
    // The hogs' heads are read before the review's: they queue first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let took = ordinary_review([127, 0, 0, 1], addr, &client).await;
        assert!(
            took < Duration::from_secs(1),
            "an ordinary review took {took:?}"
        );
    }
    drop(hogs);
    streams.iter().for_each(|task| task.abort());
}

/// 250 h2 connections from one client, each sending as much of a body as it may and never
/// ending it: the process stays well under the Deployment's 256Mi limit (each connection may
/// hold its flow-control window unread, and the client half of the body budget), and an
/// ordinary review from another address is answered within a second meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_and_fifty_h2_hogs_stay_under_the_memory_limit() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (process, client) = start(&dir, &[]);
    let h2 = client_config(
        &std::fs::read_to_string(dir.path().join("ca.crt")).unwrap(),
        None,
        &[b"h2"],
    );
    let pid = process.child.id();
    let addr = process.secure;
    let mut hogs = Vec::new();
    for _ in 0..250 {
        hogs.extend(h2_hog(&h2, addr, 1, MIB).await);
    }
    // Let them send what flow control allows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let took = ordinary_review([127, 0, 0, 2], addr, &client).await;
    let peak = proc_status_bytes(pid, "VmHWM");
    eprintln!(
        "250 h2 hogs: peak {:.1} MiB, ordinary review {took:?}",
        peak as f64 / MIB as f64
    );
    assert!(
        took < Duration::from_secs(1),
        "an ordinary review took {took:?}"
    );
    assert!(peak < 200 * MIB, "peak {peak} bytes with 250 h2 hogs");
    hogs.iter().for_each(|task| task.abort());
}

/// 1024 idle sockets on the health port and 1024 half-sent TLS handshakes on the webhook port
/// keep neither the probes nor a review out: each new connection closes the oldest one that has
/// no request under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_reviews_get_in_beside_a_thousand_idle_sockets() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (process, client) = start(&dir, &["--header-read-timeout=60s"]);
    let mut held = Vec::new();
    for _ in 0..1024 {
        held.push(TcpStream::connect(process.health).await.unwrap());
        let mut tls = TcpStream::connect(process.secure).await.unwrap();
        // The first bytes of a TLS record: a handshake begun, never finished.
        tls.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
            .await
            .unwrap();
        held.push(tls);
    }
    for path in ["/healthz", "/readyz"] {
        let started = Instant::now();
        let (status, _) = tokio::time::timeout(
            Duration::from_secs(1),
            support::http_get(process.health, path),
        )
        .await
        .unwrap_or_else(|_| panic!("{path} not answered within the probe's 1 s"))
        .unwrap();
        assert_eq!(status, 200, "{path}");
        eprintln!("{path} answered in {:?}", started.elapsed());
    }
    let took = ordinary_review([127, 0, 0, 2], process.secure, &client).await;
    assert!(
        took < Duration::from_secs(1),
        "an ordinary review took {took:?}"
    );
    drop(held);
}
