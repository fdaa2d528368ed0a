//! The metrics port under a flood of idle half-requests, on loopback: the
//! doctor's memory stays within the DaemonSet's limit, half-requests are
//! closed by the header timeout or to make room for newer connections, and
//! the kubelet's probe is answered beside them.

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::fixture::FixtureNode;

/// Connections the flood tries to open.
const FLOOD: usize = 10_000;
/// The DaemonSet's memory limit (128Mi).
const POD_MEMORY_LIMIT_KIB: u64 = 128 * 1024;
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_CONNECTIONS: usize = 64;

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("doctor status")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

/// The soft limit on open files of this process.
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .expect("limits")
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(1024)
}

fn scrape(addr: &str) -> std::io::Result<String> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: doctor\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// Opens up to `count` connections at once, each sending a request line and
/// one header but never the blank line that ends the headers. Returns each
/// connection with when it was established.
async fn half_requests(addr: &str, count: usize) -> Vec<(tokio::net::TcpStream, Instant)> {
    let mut connecting = tokio::task::JoinSet::new();
    for _ in 0..count {
        let addr = addr.to_owned();
        connecting.spawn(async move {
            // Beyond the doctor's slots and its listen backlog, SYNs are
            // dropped; those connections are simply not made.
            let mut stream =
                tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
                    .await
                    .ok()?
                    .ok()?;
            let connected = Instant::now();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: flood\r\n")
                .await
                .ok()?;
            Some((stream, connected))
        });
    }
    let mut open = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        open.extend(joined.expect("connect task"));
    }
    open
}

/// Waits, at most `within`, for the doctor to close each connection;
/// returns how long after its connect each closed one was closed.
async fn closed_after(
    open: Vec<(tokio::net::TcpStream, Instant)>,
    within: Duration,
) -> Vec<Duration> {
    let mut reading = tokio::task::JoinSet::new();
    for (mut stream, connected) in open {
        reading.spawn(async move {
            let mut buf = [0u8; 512];
            let until_closed = async {
                // A 408 or nothing at all, then the end of the stream.
                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
            };
            tokio::time::timeout(within, until_closed)
                .await
                .ok()
                .map(|()| connected.elapsed())
        });
    }
    let mut closed = Vec::new();
    while let Some(joined) = reading.join_next().await {
        closed.extend(joined.expect("read task"));
    }
    closed
}

#[test]
fn a_flood_of_idle_half_requests_stays_within_the_pods_memory_and_times_out() {
    use std::process::Stdio;

    let node = FixtureNode::new();
    let mountinfo = node.write_mountinfo();
    let mut child = crate::cli::doctor_command(&node, &mountinfo)
        .args(["--interval", "1h", "--metrics-addr", "127.0.0.1:0"])
        .args(["--metrics-header-timeout", "1s"])
        .args(["--metrics-max-connections", &MAX_CONNECTIONS.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("doctor starts");
    let pid = child.id();
    let addr = crate::metrics_address(&mut std::io::BufReader::new(
        child.stderr.take().expect("stderr"),
    ));
    let guard = KillOnDrop(child);
    assert!(scrape(&addr).expect("scrape").starts_with("HTTP/1.1 200"));
    let rss_idle = status_kib(pid, "VmRSS:");

    // Room for the test's own files besides the flood.
    let budget = open_files_limit().saturating_sub(256);
    let attempts = FLOOD.min(budget);
    if attempts < FLOOD {
        eprintln!("the open-file limit allows {attempts} connections, not {FLOOD}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let open = runtime.block_on(half_requests(&addr, attempts));
    let established = open.len();
    let rss_flooded = status_kib(pid, "VmRSS:");
    // Every slot is taken, and more wait in the backlog.
    assert!(established > MAX_CONNECTIONS, "{established} connections");

    let closed = runtime.block_on(closed_after(open, HEADER_TIMEOUT * 5));
    // The kernel syncs its per-thread counters lazily, so the high-water
    // mark may lag a reading of the resident size taken earlier.
    let peak = status_kib(pid, "VmHWM:").max(rss_flooded);
    eprintln!(
        "{attempts} connection attempts, {established} established; doctor RSS {rss_idle} KiB idle, \
         {rss_flooded} KiB flooded, peak {peak} KiB; {} closed within {:?}",
        closed.len(),
        HEADER_TIMEOUT * 5
    );
    assert!(peak < POD_MEMORY_LIMIT_KIB, "peak RSS {peak} KiB");
    // The half-requests were closed: by the header timeout, or for newer
    // connections.
    assert!(closed.len() >= MAX_CONNECTIONS, "{} closed", closed.len());

    // The flood's connections are gone now; a normal scrape is answered.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        match scrape(&addr) {
            Ok(response) if response.starts_with("HTTP/1.1 200") => break response,
            other if Instant::now() > deadline => panic!("no answer after the flood: {other:?}"),
            _ => {}
        }
    };
    assert!(
        answer.contains("csi_globalmount_doctor_runs_total"),
        "{answer}"
    );
    drop(guard);
}

/// `GET path` with `Connection: close`, answered within `limit`: the status line.
async fn probe(addr: &str, path: &str, limit: Duration) -> Option<String> {
    tokio::time::timeout(limit, async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        String::from_utf8_lossy(&response)
            .lines()
            .next()
            .map(str::to_owned)
    })
    .await
    .ok()
    .flatten()
}

/// Every slot held by an idle socket or a half-sent request (a hundred of
/// each here, for 64 slots, and the header timeout a minute): the kubelet's
/// probe closes the oldest of them and is answered within its 1 s timeout.
#[test]
fn the_probe_is_answered_beside_idle_sockets_holding_every_slot() {
    use std::process::Stdio;

    let node = FixtureNode::new();
    let mountinfo = node.write_mountinfo();
    let mut child = crate::cli::doctor_command(&node, &mountinfo)
        .args(["--interval", "1h", "--metrics-addr", "127.0.0.1:0"])
        .args(["--metrics-header-timeout", "60s"])
        .args(["--metrics-max-connections", &MAX_CONNECTIONS.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("doctor starts");
    let addr = crate::metrics_address(&mut std::io::BufReader::new(
        child.stderr.take().expect("stderr"),
    ));
    let guard = KillOnDrop(child);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut held = Vec::new();
        for _ in 0..100 {
            held.push(
                tokio::net::TcpStream::connect(&addr)
                    .await
                    .expect("connects"),
            );
        }
        held.extend(half_requests(&addr, 100).await.into_iter().map(|(s, _)| s));
        // Let the doctor take them all in.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..3 {
            let status = probe(&addr, "/healthz", Duration::from_secs(1)).await;
            assert_eq!(
                status.as_deref(),
                Some("HTTP/1.1 200 OK"),
                "/healthz beside {} held connections",
                held.len()
            );
        }
        drop(held);
    });
    drop(guard);
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
