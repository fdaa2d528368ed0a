//! Hostile clients against the server as a process, over its sockets: what they make it hold is
//! measured from `/proc` (VmHWM, the peak resident set, against VmRSS at rest), and an ordinary
//! review or probe is timed beside them. The tests of this module run one at a time: each
//! measures a process under load, and two at once would slow each other's clients.

use crate::support::{self, Process, client_config, post};

use std::sync::Arc;

use http::StatusCode;
use serde_json::Value;

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
    // The warn lines of both rejections were written before their answers.
    let lines: Vec<String> = process.logs.try_iter().collect();
    let rejected: Vec<&String> = lines
        .iter()
        .filter(|line| {
            serde_json::from_str::<Value>(line).is_ok_and(|e| e["message"] == "bad request")
        })
        .collect();
    assert_eq!(rejected.len(), 2, "{lines:?}");
    for line in rejected {
        assert!(line.len() < 2048, "a {}-byte log line", line.len());
    }
}
