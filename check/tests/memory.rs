//! A dump far larger than any object is checked in memory bounded by the largest object: the
//! process's peak resident set grows by a few MiB over a 64 MiB `List` that is generated as it
//! is read, never held whole. (Its own test binary, so no other test shares the process.)

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::io::Read;

use volume_health_check::{Checker, Options, OutputFormat, Reporter};

/// `{"apiVersion": "v1", "items": [pod, pod, ...], "kind": "List"}`, produced while read.
struct Dump {
    pods: usize,
    next: usize,
    pending: Vec<u8>,
    at: usize,
    ended: bool,
}

impl Dump {
    fn new(pods: usize) -> Self {
        Dump {
            pods,
            next: 0,
            pending: b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n".to_vec(),
            at: 0,
            ended: false,
        }
    }

    fn refill(&mut self) {
        self.pending.clear();
        self.at = 0;
        if self.next == self.pods {
            if !self.ended {
                self.pending
                    .extend_from_slice(b"\n    ],\n    \"kind\": \"List\"\n}\n");
                self.ended = true;
            }
            return;
        }
        let n = self.next;
        self.next += 1;
        if n > 0 {
            self.pending.extend_from_slice(b",\n");
        }
        // One pod in ten reports volume health, one in a thousand of those wrongly.
        let health = match n % 10 {
            0 if n.is_multiple_of(10_000) => r#", "volumeHealth": [{"name": "cache"}]"#,
            0 => {
                r#", "volumeHealth": [{"name": "data", "healthConditions": [{"status": "Degraded", "reason": "IOPSThrottled"}]}]"#
            }
            _ => "",
        };
        let padding = "x".repeat(1500);
        self.pending.extend_from_slice(
            format!(
                r#"        {{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "web-{n}", "namespace": "shop", "annotations": {{"note": "{padding}"}}}},
            "spec": {{"nodeName": "node-{}", "volumes": [{{"name": "data", "persistentVolumeClaim": {{"claimName": "data-{n}"}}}}]}},
            "status": {{"phase": "Running"{health}}}}}"#,
                n % 1000
            )
            .as_bytes(),
        );
    }
}

impl Read for Dump {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pending.len() {
            self.refill();
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// The peak resident set of this process so far, in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn memory_is_bounded_by_the_largest_object_not_the_input() {
    let pods = 40_000;
    let mut bytes = 0;
    let mut sizing = Dump::new(pods);
    let mut chunk = vec![0; 1 << 16];
    while let Ok(n @ 1..) = sizing.read(&mut chunk) {
        bytes += n;
    }
    assert!(bytes > 64 << 20, "the dump is {bytes} bytes");

    let before = peak_kib();
    let mut checker = Checker::new(
        Options::default(),
        Reporter::new(std::io::sink(), OutputFormat::Text, false),
    );
    assert!(checker.check_reader("dump.json", Dump::new(pods)));
    let summary = checker.finish().unwrap();
    let grown = peak_kib().saturating_sub(before);
    assert_eq!(summary.pods, pods as u64);
    assert_eq!(summary.invalid, 4);
    assert!(
        grown < 16 << 10,
        "peak resident set grew by {grown} KiB over a {} MiB input",
        bytes >> 20
    );
}
