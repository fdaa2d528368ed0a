//! The client that matters, in the shape kube-apiserver calls a webhook: HTTP/1.1 only (its
//! webhook client offers no h2), one connection per call in flight, idle connections kept for
//! reuse (client-go keeps 25 per host) and closed beyond that, and no retry of a POST whose
//! connection failed under it. Every call must be answered: the server's own limits never
//! refuse it, from one address, nor beside hostile clients when it is authenticated.

use crate::support;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use support::{Ca, Pair, Running, client_config};
use tokio::net::{TcpSocket, TcpStream};
use volume_health_webhooks::server::CertSource;

/// Idle connections client-go keeps per host (`utilnet.SetTransportDefaults`).
const IDLE_PER_HOST: usize = 25;

/// A review's body sent in two parts `hold` apart, as a call in flight for that long: the
/// apiserver's calls overlap as long as their writes wait on etcd and the other webhooks.
struct Slow {
    first: Option<Bytes>,
    rest: Option<Bytes>,
    wait: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for Slow {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(first))));
        }
        if self.wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(
            self.rest
                .take()
                .map(|rest| Ok(hyper::body::Frame::data(rest))),
        )
    }
}

/// client-go's transport, as far as the server can tell: HTTP/1.1 connections from one source
/// address, reused while idle, at most [`IDLE_PER_HOST`] kept.
struct Apiserver {
    addr: SocketAddr,
    source: [u8; 4],
    tls: Arc<rustls::ClientConfig>,
    idle: Mutex<Vec<SendRequest<Slow>>>,
    connections: AtomicUsize,
}

impl Apiserver {
    fn new(addr: SocketAddr, source: [u8; 4], tls: Arc<rustls::ClientConfig>) -> Self {
        Apiserver {
            addr,
            source,
            tls,
            idle: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
        }
    }

    async fn connect(&self) -> Result<SendRequest<Slow>, support::BoxError> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((self.source, 0)))?;
        let tcp: TcpStream = socket.connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        self.connections.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    /// One call: an idle connection if there is one, else a new one; the review's body held
    /// `hold` in the middle. No retry: a failure is the call's.
    async fn call(&self, review: &Bytes, hold: Duration) -> Result<Duration, support::BoxError> {
        let idle = self.idle.lock().unwrap().pop();
        let mut sender = match idle {
            Some(sender) if !sender.is_closed() => sender,
            _ => self.connect().await?,
        };
        sender.ready().await?;
        let half = review.len() / 2;
        let body = Slow {
            first: Some(review.slice(..half)),
            rest: Some(review.slice(half..)),
            wait: Box::pin(tokio::time::sleep(hold)),
        };
        let request = http::Request::post("/validate")
            .header(http::header::HOST, "localhost")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::CONTENT_LENGTH, review.len())
            .body(body)?;
        let started = Instant::now();
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let took = started.elapsed();
        if status != http::StatusCode::OK || !bytes.starts_with(b"{\"apiVersion\"") {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)).into());
        }
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < IDLE_PER_HOST {
            idle.push(sender);
        }
        Ok(took)
    }
}

/// What a run of `workers` callers for `run` gave: answered calls, failures, latencies sorted.
struct Run {
    answered: usize,
    failures: Vec<String>,
    latencies: Vec<Duration>,
}

impl Run {
    fn p99(&self) -> Duration {
        let i = (self.latencies.len() * 99 / 100).min(self.latencies.len().saturating_sub(1));
        self.latencies.get(i).copied().unwrap_or_default()
    }
}

async fn load(apiserver: Arc<Apiserver>, workers: usize, run: Duration, hold: Duration) -> Run {
    let review = Bytes::from(support::valid_review());
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (apiserver, review) = (apiserver.clone(), review.clone());
        tasks.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut failures = Vec::new();
            while Instant::now() < deadline {
                match apiserver.call(&review, hold).await {
                    Ok(took) => answered.push(took),
                    Err(err) => failures.push(err.to_string()),
                }
            }
            (answered, failures)
        }));
    }
    let mut result = Run {
        answered: 0,
        failures: Vec::new(),
        latencies: Vec::new(),
    };
    for task in tasks {
        let (answered, failures) = task.await.unwrap();
        result.answered += answered.len();
        result.latencies.extend(answered);
        result.failures.extend(failures);
    }
    result.latencies.sort();
    result
}

/// The configuration `serve` gets with no flags.
fn defaults() -> volume_health_webhooks::server::ServeConfig {
    use clap::Parser;
    let cli =
        volume_health_webhooks::config::Cli::try_parse_from(["volume-health-webhook", "serve"])
            .unwrap();
    let volume_health_webhooks::config::Command::Serve(args) = cli.command else {
        unreachable!("serve")
    };
    args.into_config()
}

/// 500 calls in flight at once from one address, each held a second, for 10 s, with the
/// server's default limits: every call answered. 500 is near kube-apiserver's in-flight
/// requests (`--max-requests-inflight` 400 and `--max-mutating-requests-inflight` 200 by
/// default), each of which may call the webhook; a per-address connection cap below that, as
/// `--max-connections-per-peer` was by default (256), failed 5 to 65 % of such calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_at_500_calls_in_flight_gets_every_call_answered() {
    let ca = Ca::new("serving CA");
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_pair(dir.path(), &ca.server_pair());
    let mut config = support::config(CertSource::Files(files));
    // The server's own defaults for its connection limits, as an install runs it.
    let defaults = defaults();
    config.max_connections = defaults.max_connections;
    config.max_connections_per_peer = defaults.max_connections_per_peer;
    let server = Running::start(config).await;
    let apiserver = Arc::new(Apiserver::new(
        server.secure,
        [127, 0, 0, 1],
        client_config(&ca.pem, None, &[b"http/1.1"]),
    ));
    let run = load(
        apiserver.clone(),
        500,
        Duration::from_secs(10),
        Duration::from_secs(1),
    )
    .await;
    eprintln!(
        "one address, 500 in flight for 10 s: {} answered, {} failed, {} connections, p99 {:?}",
        run.answered,
        run.failures.len(),
        apiserver.connections.load(Ordering::Relaxed),
        run.p99()
    );
    assert!(
        run.failures.is_empty(),
        "{:?}",
        &run.failures[..run.failures.len().min(5)]
    );
    assert!(run.answered > 2_000, "{} answered", run.answered);
    server.stop().await;
}

/// Four hostile addresses, each holding 256 half-open TLS handshakes, beside an apiserver
/// authenticated by its client certificate with 500 calls in flight: every call answered, and
/// a call beside them all answered within 100 ms at the 99th percentile. Its connections take
/// slots no other client can, and the hogs, which never send a request, make room when the
/// port is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_apiserver_is_answered_beside_four_hostile_addresses() {
    use tokio::io::AsyncWriteExt;
    let server_ca = Ca::new("serving CA");
    let client_ca = Ca::new("apiserver client CA");
    let dir = tempfile::tempdir().unwrap();
    let mut config = support::config_with_client_ca(dir.path(), &server_ca, &client_ca);
    let defaults = defaults();
    config.max_connections = defaults.max_connections;
    config.max_connections_per_peer = defaults.max_connections_per_peer;
    config.header_read_timeout = Duration::from_secs(60);
    let server = Running::start(config).await;

    let mut hogs = Vec::new();
    for pod in 2..6u8 {
        for _ in 0..256 {
            let socket = TcpSocket::new_v4().unwrap();
            socket
                .bind(SocketAddr::from(([127, 0, 0, pod], 0)))
                .unwrap();
            let Ok(mut tcp) = socket.connect(server.secure).await else {
                continue;
            };
            // A handshake begun, never finished.
            let _ = tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await;
            hogs.push(tcp);
        }
    }
    let identity: Pair = client_ca.client_pair("kube-apiserver");
    let tls = client_config(&server_ca.pem, Some(&identity), &[b"http/1.1"]);
    let apiserver = Arc::new(Apiserver::new(server.secure, [127, 0, 0, 1], tls.clone()));
    let prober = Arc::new(Apiserver::new(server.secure, [127, 0, 0, 1], tls));
    let (held, probed) = tokio::join!(
        load(
            apiserver.clone(),
            500,
            Duration::from_secs(10),
            Duration::from_secs(1)
        ),
        load(prober, 1, Duration::from_secs(10), Duration::ZERO),
    );
    eprintln!(
        "authenticated beside 1,024 hostile handshakes, 500 in flight for 10 s: {} answered, {} failed, {} connections; a call beside them: {} answered, {} failed, p99 {:?}",
        held.answered,
        held.failures.len(),
        apiserver.connections.load(Ordering::Relaxed),
        probed.answered,
        probed.failures.len(),
        probed.p99()
    );
    for run in [&held, &probed] {
        assert!(
            run.failures.is_empty(),
            "{:?}",
            &run.failures[..run.failures.len().min(5)]
        );
    }
    assert!(held.answered > 2_000, "{} answered", held.answered);
    assert!(probed.answered > 100, "{} answered", probed.answered);
    assert!(
        probed.p99() < Duration::from_millis(100),
        "p99 {:?}",
        probed.p99()
    );
    drop(hogs);
    server.stop().await;
}
