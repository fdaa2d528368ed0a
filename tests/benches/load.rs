//! End-to-end load benchmark of the webhook server against two baselines on the same stack.
//!
//! Starts the release `volume-health-webhook` (gate `CSIVolumeHealth` on, logging at its
//! default level into `/dev/null`) and two baselines, all with one generated certificate:
//! `baseline-webhook` (the same tokio + rustls + hyper + axum stack answering every body with a
//! fixed review) and `baseline-webhook --strict-json` (the same, after one strict JSON pass over
//! the body: the least a server must do that answers a malformed review with 400). Then, per
//! endpoint, it drives them in rotating rounds (baseline, strict JSON, server, then strict JSON,
//! server, baseline, ...) from 32 persistent HTTP/1.1 keep-alive connections over TLS, as
//! kube-apiserver's admission client does, so that noise from other work on the machine hits
//! all three alike. It prints the server's throughput and p99 latency as ratios to both
//! baselines' (the median over the pairs of rounds that ran next to each other) with the
//! targets next to them (PASS/MISS), errors (transport failures, non-200 answers, answers that
//! do not allow), the CPU time each server and the load client spent per request, and the
//! server's peak RSS.
//!
//! A request that fails makes the run exit non-zero; a missed target does so only with
//! `BENCH_ENFORCE=1`, since a shared machine's noise alone can move a ratio past a target.
//!
//! The server binary is `VOLUME_HEALTH_WEBHOOK_BIN` when set, else `volume-health-webhook` in
//! the profile directory of this benchmark (`make bench` builds it first).

// A benchmark: a failed setup step should stop the run loudly.
#![allow(clippy::unwrap_used)]

use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper::{Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use volume_health_tests::bench_requests;

/// Concurrent keep-alive connections to each server.
const CONNECTIONS: usize = 32;
/// How long to measure.
#[derive(Clone, Copy)]
struct Plan {
    /// Measured rounds per server and endpoint.
    rounds: usize,
    /// Length of one round.
    round: Duration,
    /// Unmeasured load on each server and endpoint before the rounds.
    warmup: Duration,
}

/// The figures docs/benchmarks.md quotes.
const FULL: Plan = Plan {
    rounds: 10,
    round: Duration::from_millis(750),
    warmup: Duration::from_millis(500),
};

/// `--quick` (`make bench QUICK=1`): a smoke run, too short for figures to quote.
const QUICK: Plan = Plan {
    rounds: 3,
    round: Duration::from_millis(400),
    warmup: Duration::from_millis(200),
};

/// Least throughput of every endpoint as a share of the strict JSON baseline's.
const MIN_STRICT_RATIO: f64 = 0.95;
/// Least throughput of the endpoints marked `plain_target` as a share of the plain baseline's.
const MIN_PLAIN_RATIO: f64 = 0.8;
/// Largest p99 latency of every endpoint as a multiple of the strict JSON baseline's.
const MAX_P99_RATIO: f64 = 1.2;
/// Largest acceptable peak RSS of the server.
const RSS_TARGET_KIB: u64 = 64 * 1024;

/// Where the three servers sit in [`run`]'s arrays.
const PLAIN: usize = 0;
const STRICT: usize = 1;
const SERVER: usize = 2;
const SERVERS: usize = 3;

struct Endpoint {
    label: &'static str,
    path: &'static str,
    body: Bytes,
    /// Whether [`MIN_PLAIN_RATIO`] applies.
    plain_target: bool,
}

impl Endpoint {
    /// The whole HTTP/1.1 request, written once and sent as it is on every connection.
    fn request(&self) -> Bytes {
        let head = format!(
            "POST {} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             accept: application/json\r\ncontent-length: {}\r\n\r\n",
            self.path,
            self.body.len()
        );
        [head.as_bytes(), &self.body].concat().into()
    }
}

/// One server under load.
struct Target {
    name: &'static str,
    addr: SocketAddr,
    pid: u32,
    connections: Vec<Option<Connection>>,
}

/// What the rounds of one server on one endpoint measured.
#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
    /// Each round's own figures, in order.
    rounds: Vec<Round>,
    /// CPU time of the server process during the rounds.
    server_cpu: Duration,
    /// CPU time of this process, the load client, during the rounds.
    client_cpu: Duration,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn percentile(&mut self, p: f64) -> Duration {
        self.latencies_us.sort_unstable();
        percentile(&self.latencies_us, p)
    }

    /// CPU time per request of the server and of the client, in µs.
    fn cpu_per_request_us(&self) -> (f64, f64) {
        let per = |cpu: Duration| cpu.as_secs_f64() * 1e6 / (self.requests.max(1) as f64);
        (per(self.server_cpu), per(self.client_cpu))
    }
}

/// What one round of one server measured.
struct Round {
    /// Requests per second.
    rate: f64,
    p99: Duration,
}

/// The `p` quantile of sorted latencies.
fn percentile(sorted_us: &[u32], p: f64) -> Duration {
    let Some(last) = sorted_us.len().checked_sub(1) else {
        return Duration::ZERO;
    };
    let rank = ((sorted_us.len() as f64 * p).ceil() as usize).clamp(1, last + 1) - 1;
    Duration::from_micros(u64::from(sorted_us[rank]))
}

/// The server's figure over a baseline's in each pair of rounds (the server's round `r` and
/// the baseline's round `r` ran next to each other): median, lowest and highest.
fn paired(server: &Tally, baseline: &Tally, figure: fn(&Round) -> f64) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> = server
        .rounds
        .iter()
        .zip(&baseline.rounds)
        .map(|(s, b)| figure(s) / figure(b).max(1e-9))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let Some(&lowest) = ratios.first() else {
        return (0.0, 0.0, 0.0);
    };
    let mid = ratios.len() / 2;
    let median = if ratios.len().is_multiple_of(2) {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    } else {
        ratios[mid]
    };
    (median, lowest, ratios[ratios.len() - 1])
}

/// Kills and reaps a child process when dropped, so a panic leaves nothing running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a further argument keeps only the endpoints whose label
    // contains it, as criterion's filter does (`cargo bench --bench load -- CSINode`).
    let filter = std::env::args()
        .skip(1)
        .find(|arg| !arg.starts_with("--"))
        .unwrap_or_default();
    let plan = if std::env::args().any(|arg| arg == "--quick") {
        QUICK
    } else {
        FULL
    };
    let enforce = std::env::var("BENCH_ENFORCE").is_ok_and(|v| !v.is_empty() && v != "0");
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = runtime.block_on(run(cpus, &filter, plan));
    if outcome.errors {
        println!("load benchmark: requests failed");
        std::process::exit(1);
    }
    match (outcome.missed, enforce) {
        (0, _) => {}
        (missed, true) => {
            println!("load benchmark: {missed} target(s) missed and BENCH_ENFORCE is set");
            std::process::exit(1);
        }
        (missed, false) => println!(
            "load benchmark: {missed} target(s) missed (not enforced; BENCH_ENFORCE=1 makes a miss fail the run)"
        ),
    }
}

/// How a run ended.
#[derive(Default)]
struct Outcome {
    /// A request failed.
    errors: bool,
    /// Targets missed.
    missed: usize,
}

/// Starts a `baseline-webhook` and returns it with the address it prints.
fn start_baseline(cert: &Path, key: &Path, strict_json: bool) -> (Reaped, SocketAddr) {
    let mut baseline = Reaped(
        Command::new(env!("CARGO_BIN_EXE_baseline-webhook"))
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-private-key-file")
            .arg(key)
            .args(strict_json.then_some("--strict-json"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = baseline.0.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("baseline-webhook printed {line:?}"))
        .parse::<SocketAddr>()
        .unwrap();
    (baseline, addr)
}

async fn run(cpus: usize, filter: &str, plan: Plan) -> Outcome {
    let Plan {
        rounds,
        round,
        warmup,
    } = plan;
    let dir = tempfile::tempdir().unwrap();
    let ca = write_certificate(dir.path());
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");

    let server_bin = server_binary();
    let (secure_port, health_port) = (free_port(), free_port());
    let server = Reaped(
        Command::new(&server_bin)
            .args(["serve", "--bind-address", "127.0.0.1"])
            .arg(format!("--secure-port={secure_port}"))
            .arg(format!("--health-port={health_port}"))
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-private-key-file")
            .arg(&key)
            .arg("--feature-gates=CSIVolumeHealth=true")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("starting {}: {err}", server_bin.display())),
    );
    let (plain, plain_addr) = start_baseline(&cert, &key, false);
    let (strict, strict_addr) = start_baseline(&cert, &key, true);
    wait_ready(SocketAddr::from(([127, 0, 0, 1], health_port)), &server_bin).await;

    let connector = client_tls(ca);
    let mut targets = [
        Target::connect("baseline", plain_addr, plain.0.id(), &connector).await,
        Target::connect("strict JSON", strict_addr, strict.0.id(), &connector).await,
        Target::connect(
            "server",
            SocketAddr::from(([127, 0, 0, 1], secure_port)),
            server.0.id(),
            &connector,
        )
        .await,
    ];

    let endpoints = [
        Endpoint {
            label: "pod status /validate",
            path: "/validate",
            body: bench_requests::pod_status_update().into(),
            plain_target: false,
        },
        Endpoint {
            label: "pod status /mutate",
            path: "/mutate",
            body: bench_requests::pod_status_update().into(),
            plain_target: false,
        },
        Endpoint {
            label: "PVC status /validate",
            path: "/validate",
            body: bench_requests::pvc_status_update().into(),
            plain_target: false,
        },
        Endpoint {
            label: "CSINode status /validate",
            path: "/validate",
            body: bench_requests::csinode_status_update().into(),
            plain_target: true,
        },
        Endpoint {
            label: "SAR /authorize",
            path: "/authorize",
            body: bench_requests::kubelet_csinode_status_access().into(),
            plain_target: false,
        },
    ];

    let endpoints: Vec<Endpoint> = endpoints
        .into_iter()
        .filter(|endpoint| endpoint.label.contains(filter))
        .collect();
    if endpoints.is_empty() {
        // `make bench BENCH=...` passes one filter to every benchmark.
        println!("load benchmark: no endpoint label contains {filter:?}; nothing to run");
        return Outcome::default();
    }

    println!(
        "load benchmark: {cpus} CPUs; {CONNECTIONS} keep-alive HTTP/1.1 connections over TLS per server; \
         per endpoint {rounds} rounds of {} ms per server, in rotating order, after {} ms warm-up each",
        round.as_millis(),
        warmup.as_millis()
    );
    println!("server: {}", server_bin.display());

    let mut results = Vec::new();
    for endpoint in &endpoints {
        for target in &mut targets {
            target
                .load(endpoint, warmup, &connector, &mut Tally::default())
                .await;
        }
        let mut tallies: [Tally; SERVERS] = Default::default();
        for r in 0..rounds {
            // Each round starts with the next server, so none always follows the same one.
            for i in (0..SERVERS).map(|i| (i + r) % SERVERS) {
                targets[i]
                    .load(endpoint, round, &connector, &mut tallies[i])
                    .await;
            }
        }
        results.push(tallies);
    }

    let server_rss = peak_rss_kib(server.0.id());
    let baseline_rss = peak_rss_kib(plain.0.id());
    report(&endpoints, &mut results, server_rss, baseline_rss)
}

/// Prints the tables and the targets' verdicts.
fn report(
    endpoints: &[Endpoint],
    results: &mut [[Tally; SERVERS]],
    server_rss: Option<u64>,
    baseline_rss: Option<u64>,
) -> Outcome {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mib =
        |kib: Option<u64>| kib.map_or("?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0));
    let verdict = |met: bool| if met { "PASS" } else { "MISS" };
    let mut outcome = Outcome::default();
    let mut targets = Vec::new();

    println!();
    println!(
        "throughput: requests per second, and the server's as a share of each baseline's (median of the pairs of rounds):"
    );
    println!(
        "{:<26} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>13} {:>10}",
        "endpoint",
        "body KB",
        "base",
        "strict",
        "server",
        "srv/base",
        "srv/strict",
        "round ratios",
        "target"
    );
    for (endpoint, tallies) in endpoints.iter().zip(results.iter()) {
        let [base, strict, srv] = tallies;
        let (plain_ratio, _, _) = paired(srv, base, |round| round.rate);
        let (strict_ratio, lo, hi) = paired(srv, strict, |round| round.rate);
        let strict_met = strict_ratio >= MIN_STRICT_RATIO;
        let plain_met = !endpoint.plain_target || plain_ratio >= MIN_PLAIN_RATIO;
        println!(
            "{:<26} {:>7.1} {:>9.0} {:>9.0} {:>9.0} {:>9.2} {:>10.2} {:>13} {:>10}",
            endpoint.label,
            endpoint.body.len() as f64 / 1024.0,
            base.rate(),
            strict.rate(),
            srv.rate(),
            plain_ratio,
            strict_ratio,
            format!("{lo:.2}-{hi:.2}"),
            verdict(strict_met && plain_met),
        );
        targets.push((
            strict_met,
            format!(
                "{}: throughput {strict_ratio:.2} of strict JSON's (>= {MIN_STRICT_RATIO})",
                endpoint.label
            ),
        ));
        if endpoint.plain_target {
            targets.push((
                plain_met,
                format!(
                    "{}: throughput {plain_ratio:.2} of the baseline's (>= {MIN_PLAIN_RATIO})",
                    endpoint.label
                ),
            ));
        }
    }
    println!(
        "round ratios: lowest-highest of srv/strict over the pairs of rounds; a change inside that band is noise"
    );

    println!();
    println!(
        "latency in ms over all rounds, and the server's p99 as a multiple of each baseline's (median of the pairs of rounds):"
    );
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>13} {:>8} {:>8}",
        "endpoint",
        "base p50",
        "base p99",
        "strc p50",
        "strc p99",
        "srv p50",
        "srv p99",
        "p99/base",
        "p99/strict",
        "round ratios",
        "target",
        "errors"
    );
    for (endpoint, tallies) in endpoints.iter().zip(results.iter_mut()) {
        let [p50, p99] = [0.5, 0.99].map(|p| tallies.each_mut().map(|t| t.percentile(p)));
        let errors = tallies.each_ref().map(|t| t.errors);
        let p99_us = |round: &Round| round.p99.as_secs_f64() * 1e6;
        let (plain_ratio, _, _) = paired(&tallies[SERVER], &tallies[PLAIN], p99_us);
        let (strict_ratio, lo, hi) = paired(&tallies[SERVER], &tallies[STRICT], p99_us);
        let met = strict_ratio <= MAX_P99_RATIO;
        println!(
            "{:<26} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>10.2} {:>13} {:>8} {:>8}",
            endpoint.label,
            ms(p50[PLAIN]),
            ms(p99[PLAIN]),
            ms(p50[STRICT]),
            ms(p99[STRICT]),
            ms(p50[SERVER]),
            ms(p99[SERVER]),
            plain_ratio,
            strict_ratio,
            format!("{lo:.2}-{hi:.2}"),
            verdict(met),
            format!("{}/{}/{}", errors[PLAIN], errors[STRICT], errors[SERVER]),
        );
        targets.push((
            met,
            format!(
                "{}: p99 {strict_ratio:.2}x strict JSON's (<= {MAX_P99_RATIO}x)",
                endpoint.label
            ),
        ));
        outcome.errors |= errors.iter().any(|&e| e > 0);
    }
    println!("errors: baseline/strict JSON/server");

    println!();
    println!(
        "CPU time per request in µs, of each server and of the load client while it drove that server:"
    );
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "endpoint", "base", "client", "strict", "client", "server", "client", "client/base"
    );
    let mut client_ratio_max = 0.0_f64;
    for (endpoint, tallies) in endpoints.iter().zip(results.iter()) {
        let cpu = tallies.each_ref().map(Tally::cpu_per_request_us);
        // The plain baseline does the least per request: the client must cost less than it.
        let client_ratio = cpu
            .iter()
            .map(|(server, client)| client / server.max(1e-9))
            .fold(0.0, f64::max);
        client_ratio_max = client_ratio_max.max(client_ratio);
        println!(
            "{:<26} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>12.2}",
            endpoint.label,
            cpu[PLAIN].0,
            cpu[PLAIN].1,
            cpu[STRICT].0,
            cpu[STRICT].1,
            cpu[SERVER].0,
            cpu[SERVER].1,
            client_ratio,
        );
    }
    println!(
        "client/base: the highest of the client's CPU per request over the server's it drove (below 1: the client is cheaper)"
    );
    targets.push((
        client_ratio_max < 1.0,
        format!(
            "load client: at most {client_ratio_max:.2} of the CPU per request of the server it drives (< 1)"
        ),
    ));

    println!();
    println!(
        "peak RSS (VmHWM): server {} MiB, baseline {} MiB",
        mib(server_rss),
        mib(baseline_rss)
    );
    targets.push((
        server_rss.is_some_and(|r| r <= RSS_TARGET_KIB),
        format!(
            "server peak RSS {} MiB (<= {} MiB)",
            mib(server_rss),
            RSS_TARGET_KIB / 1024
        ),
    ));

    println!();
    println!("targets:");
    for (met, line) in &targets {
        println!("{} {line}", verdict(*met));
    }
    outcome.missed = targets.iter().filter(|(met, _)| !met).count();
    outcome
}

impl Target {
    async fn connect(
        name: &'static str,
        addr: SocketAddr,
        pid: u32,
        connector: &TlsConnector,
    ) -> Self {
        let mut connections = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let connection = Connection::open(addr, connector)
                .await
                .unwrap_or_else(|err| panic!("connecting to the {name} at {addr}: {err}"));
            connections.push(Some(connection));
        }
        Target {
            name,
            addr,
            pid,
            connections,
        }
    }

    /// Drives every connection for `length`, adding to `tally`.
    async fn load(
        &mut self,
        endpoint: &Endpoint,
        length: Duration,
        connector: &TlsConnector,
        tally: &mut Tally,
    ) {
        let (server_cpu, client_cpu) = (cpu_time(self.pid), cpu_time(std::process::id()));
        let request = endpoint.request();
        let started = Instant::now();
        let deadline = started + length;
        let workers: Vec<_> = self
            .connections
            .drain(..)
            .map(|connection| {
                tokio::spawn(drive(
                    connection,
                    self.addr,
                    connector.clone(),
                    endpoint.path,
                    request.clone(),
                    deadline,
                ))
            })
            .collect();
        let before = tally.requests;
        let first_latency = tally.latencies_us.len();
        for worker in workers {
            let (sender, done) = worker.await.unwrap();
            self.connections.push(sender);
            tally.requests += done.requests;
            tally.errors += done.errors;
            tally.latencies_us.extend(done.latencies_us);
        }
        let elapsed = started.elapsed();
        tally.server_cpu += cpu_time(self.pid).saturating_sub(server_cpu);
        tally.client_cpu += cpu_time(std::process::id()).saturating_sub(client_cpu);
        tally.elapsed += elapsed;
        let mut latencies_us = tally.latencies_us[first_latency..].to_vec();
        latencies_us.sort_unstable();
        tally.rounds.push(Round {
            rate: (tally.requests - before) as f64 / elapsed.as_secs_f64(),
            p99: percentile(&latencies_us, 0.99),
        });
        if tally.errors > 0 && tally.requests == before {
            eprintln!("{}: every request of a round failed", self.name);
        }
    }
}

/// Sends `request` (to `path`) over one connection, one at a time, until `deadline`;
/// reconnects after a transport error.
async fn drive(
    mut connection: Option<Connection>,
    addr: SocketAddr,
    connector: TlsConnector,
    path: &'static str,
    request: Bytes,
    deadline: Instant,
) -> (Option<Connection>, Tally) {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let Some(open) = connection.as_mut() else {
            match Connection::open(addr, &connector).await {
                Ok(new) => connection = Some(new),
                Err(err) => {
                    tally.errors += 1;
                    eprintln!("reconnecting to {addr}: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            continue;
        };
        let sent = Instant::now();
        match open.exchange(&request).await {
            Ok((status, body)) => {
                tally.requests += 1;
                tally
                    .latencies_us
                    .push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
                if status != 200 || !allows(body) {
                    tally.errors += 1;
                    if tally.errors == 1 {
                        eprintln!(
                            "{addr}{path}: unexpected answer {status}: {}",
                            String::from_utf8_lossy(body)
                        );
                    }
                }
            }
            Err(err) => {
                tally.errors += 1;
                eprintln!("{addr}{path}: {err}");
                connection = None;
            }
        }
    }
    (connection, tally)
}

/// Whether an AdmissionReview or SubjectAccessReview answer allows the request.
fn allows(body: &[u8]) -> bool {
    const ALLOWED: &[u8] = br#""allowed":true"#;
    body.windows(ALLOWED.len()).any(|w| w == ALLOWED)
}

/// One keep-alive HTTP/1.1 connection over TLS, as lean as a client can be: the request is
/// written from ready bytes, and only the answer's status and `content-length` are parsed, so
/// that the client costs less CPU per request than the servers it measures.
struct Connection {
    stream: TlsStream<TcpStream>,
    /// Bytes read and not yet used up.
    read: Vec<u8>,
    /// How many bytes at the start of `read` the last answer took.
    answered: usize,
}

impl Connection {
    async fn open(addr: SocketAddr, connector: &TlsConnector) -> io::Result<Self> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost").map_err(io::Error::other)?;
        let stream = connector.connect(name, tcp).await?;
        Ok(Connection {
            stream,
            read: Vec::with_capacity(16 * 1024),
            answered: 0,
        })
    }

    /// Sends `request` and reads its answer: the status code and the body.
    async fn exchange(&mut self, request: &[u8]) -> io::Result<(u16, &[u8])> {
        self.read.drain(..self.answered);
        self.answered = 0;
        self.stream.write_all(request).await?;
        self.stream.flush().await?;
        let (head, status, length) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut answer = httparse::Response::new(&mut headers);
            let parsed = answer
                .parse(&self.read)
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
            if let httparse::Status::Complete(head) = parsed {
                let length = answer
                    .headers
                    .iter()
                    .find(|header| header.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|header| {
                        std::str::from_utf8(header.value)
                            .ok()?
                            .parse::<usize>()
                            .ok()
                    })
                    .ok_or_else(|| {
                        io::Error::new(io::ErrorKind::InvalidData, "answer without content-length")
                    })?;
                break (head, answer.code.unwrap_or_default(), length);
            }
            self.fill().await?;
        };
        while self.read.len() < head + length {
            self.fill().await?;
        }
        self.answered = head + length;
        Ok((status, &self.read[head..self.answered]))
    }

    async fn fill(&mut self) -> io::Result<()> {
        self.read.reserve(16 * 1024);
        match self.stream.read_buf(&mut self.read).await? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }
}

/// A client that trusts `ca` and offers only HTTP/1.1, like the apiserver's admission client.
fn client_tls(ca: CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// Writes `tls.crt` (a `localhost` certificate and its CA) and `tls.key` into `dir`, as the
/// server's own `--self-signed-ca-file` would generate them; returns the CA.
fn write_certificate(dir: &Path) -> CertificateDer<'static> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "load benchmark CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), leaf.pem() + &ca.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), leaf_key.serialize_pem()).unwrap();
    ca.der().clone()
}

/// The server binary: `VOLUME_HEALTH_WEBHOOK_BIN`, else next to this benchmark's profile
/// directory (`<target>/release/deps/load-*` → `<target>/release/volume-health-webhook`).
fn server_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("VOLUME_HEALTH_WEBHOOK_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the benchmark runs from <target>/<profile>/deps");
    let path = profile_dir.join("volume-health-webhook");
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build --release -p volume-health-webhooks` \
         (or set VOLUME_HEALTH_WEBHOOK_BIN)",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `GET /readyz` on the health port until it answers 200.
async fn wait_ready(health: SocketAddr, bin: &Path) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        if readyz(health).await == Some(StatusCode::OK) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{} did not become ready on {health}; run it by hand to see its log",
            bin.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn readyz(health: SocketAddr) -> Option<StatusCode> {
    let tcp = TcpStream::connect(health).await.ok()?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(tcp)).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let request = Request::get("/readyz")
        .header(header::HOST, health.to_string())
        .body(Empty::<Bytes>::new())
        .ok()?;
    Some(sender.send_request(request).await.ok()?.status())
}

/// Peak resident set size of a process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    procfs::process::Process::new(i32::try_from(pid).ok()?)
        .ok()?
        .status()
        .ok()?
        .vmhwm
}

/// User and system CPU time of a process, all its threads (`/proc/<pid>/stat`, counted in clock
/// ticks).
fn cpu_time(pid: u32) -> Duration {
    let stat = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok()?.stat().ok())
        .unwrap_or_else(|| panic!("reading /proc/{pid}/stat"));
    let ticks = stat.utime + stat.stime;
    Duration::from_secs_f64(ticks as f64 / procfs::ticks_per_second() as f64)
}
