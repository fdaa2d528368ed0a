//! Inputs built to cost the most per byte, or to be read one way by `check` and another by
//! kubectl or the apiserver: each is read as they read it, or refused, in memory that stays in
//! proportion to the input. Alone in its test binary: it measures the heap with its own
//! allocator, and its tests run one after another.

// Test code unwraps: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use peak_alloc::PeakAlloc;
use volume_health_check::{Checker, Options, Outcome, OutputFormat, Reporter, Summary, outcome};

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

const MIB: usize = 1024 * 1024;

/// The heap is measured process-wide.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What a run gave, and the most heap it held above what it started with.
struct Run {
    report: String,
    failures: Vec<String>,
    summary: Summary,
    outcome: Outcome,
    peak: usize,
    took: Duration,
}

fn run(input: impl Read + Send) -> Run {
    let mut out = Vec::new();
    let base = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let started = Instant::now();
    let mut checker = Checker::new(
        Options::default(),
        Reporter::new(&mut out, OutputFormat::Text, false),
    );
    checker.check_reader("-", input);
    let failures = checker.failures().iter().map(|f| f.to_string()).collect();
    let summary = checker.finish().unwrap();
    let took = started.elapsed();
    let peak = HEAP.peak_usage().saturating_sub(base);
    Run {
        report: String::from_utf8(out).unwrap(),
        failures,
        outcome: outcome(&summary),
        summary,
        peak,
        took,
    }
}

fn text(input: &str) -> Run {
    run(input.as_bytes())
}

/// A pod whose status names a volume it does not have: invalid wherever it is read.
const INVALID_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: shop}\nspec: {volumes: [{name: data}]}\nstatus: {volumeHealth: [{name: logs}]}\n";

/// `times` copies of `item` between `head` and `tail`, produced while read.
struct Repeated {
    parts: Vec<u8>,
    head: usize,
    item: usize,
    times: usize,
    done: usize,
    at: usize,
    stage: u8,
}

impl Repeated {
    fn new(head: &str, item: &str, times: usize, tail: &str) -> Self {
        let mut parts = head.as_bytes().to_vec();
        parts.extend_from_slice(item.as_bytes());
        parts.extend_from_slice(tail.as_bytes());
        Repeated {
            head: head.len(),
            item: item.len(),
            parts,
            times,
            done: 0,
            at: 0,
            stage: 0,
        }
    }

    fn len(&self) -> usize {
        self.parts.len() + self.item * self.times.saturating_sub(1)
    }
}

impl Read for Repeated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let (start, end) = match self.stage {
                0 => (0, self.head),
                1 if self.done < self.times => (self.head, self.head + self.item),
                1 => {
                    self.stage = 2;
                    self.at = 0;
                    continue;
                }
                2 => (self.head + self.item, self.parts.len()),
                _ => return Ok(0),
            };
            let part = &self.parts[start..end];
            if self.at == part.len() {
                self.at = 0;
                match self.stage {
                    0 => self.stage = 1,
                    1 => self.done += 1,
                    _ => self.stage = 3,
                }
                continue;
            }
            let n = buf.len().min(part.len() - self.at);
            buf[..n].copy_from_slice(&part[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
    }
}

#[test]
fn aliases_anchors_and_merge_keys_are_refused_before_they_cost() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let scalars = vec!["x"; 2500].join(",");
    let aliases = vec!["*a"; 2500].join(",");
    let wide = format!("a: &a [{scalars}]\nb: [{aliases}]\n");
    let mut nested = String::from("a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n");
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 10].join(",");
        nested.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let cases = [
        (
            "6 million values from 12 KiB",
            wide.as_str(),
            "anchors and aliases are not read",
        ),
        (
            "a billion from 1 KiB",
            nested.as_str(),
            "anchors and aliases are not read",
        ),
        (
            "an anchor alone",
            "kind: Pod\nmetadata: &m {name: x}\n",
            "anchors and aliases are not read",
        ),
        (
            "a merge key",
            "kind: Pod\nstatus:\n  <<: {volumeHealth: []}\n",
            "merge keys (`<<`) are not read",
        ),
        (
            "a merge key from an alias, after a valid pod",
            "kind: Pod\napiVersion: v1\nmetadata: {name: ok}\n---\nbase: &b {volumeHealth: [{name: logs}]}\nkind: Pod\nstatus: {<<: *b}\n",
            "",
        ),
    ];
    for (name, input, said) in cases {
        let run = text(input);
        assert_eq!(run.outcome, Outcome::BadInput, "{name}: {}", run.report);
        assert_eq!(run.failures.len(), 1, "{name}");
        assert!(
            run.failures[0].contains(said),
            "{name}: {}",
            run.failures[0]
        );
        assert!(
            run.peak < MIB,
            "{name}: {} KiB of heap for {} bytes",
            run.peak >> 10,
            input.len()
        );
    }
}

#[test]
fn nesting_is_refused_as_it_is_read() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let flow = format!("spec: {}\n", "[".repeat(400 * 1024));
    let flow_maps = format!("spec: {}\n", "{a: ".repeat(100 * 1024));
    let mut block = String::new();
    for depth in 0..2000 {
        block.push_str(&" ".repeat(depth));
        block.push_str("a:\n");
    }
    let json_deep = format!("{{\"kind\": {}", "[".repeat(400 * 1024));
    for (name, input) in [
        ("400 KiB of flow sequences", flow.as_str()),
        ("flow mappings", flow_maps.as_str()),
        ("block mappings", block.as_str()),
        ("JSON", json_deep.as_str()),
    ] {
        let run = text(input);
        assert_eq!(run.outcome, Outcome::BadInput, "{name}");
        assert!(
            run.failures[0].contains("document 1: line "),
            "{name}: {}",
            run.failures[0]
        );
        if name != "JSON" {
            assert!(
                run.failures[0].ends_with("nested more than 128 levels deep"),
                "{name}: {}",
                run.failures[0]
            );
        }
        assert!(run.peak < 2 * MIB, "{name}: {} KiB", run.peak >> 10);
        // Refused at the first levels past the limit: far from the seconds a parser that
        // scans the rest first would take (a generous bound, for a loaded debug build).
        assert!(run.took < Duration::from_secs(20), "{name}: {:?}", run.took);
    }
}

#[test]
fn long_lines_cost_what_they_weigh() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let long = "x".repeat(8 * MIB);
    for (name, input) in [
        (
            "a plain scalar",
            format!("{INVALID_POD}metadata2: {long}\n").replace("metadata2", "note"),
        ),
        (
            "a quoted scalar",
            format!("{INVALID_POD}note: \"{long}\"\n"),
        ),
        (
            "a folded block",
            format!("{INVALID_POD}note: >\n  {long}\n  {long}\n"),
        ),
    ] {
        let run = text(&input);
        assert_eq!(run.outcome, Outcome::Refused, "{name}: {:?}", run.failures);
        assert_eq!(run.summary.invalid, 1, "{name}");
        // The scalar as the scanner grows it, its JSON form and what the checks read: a few times the input.
        assert!(
            run.peak < 6 * input.len(),
            "{name}: {} MiB of heap for {} MiB",
            run.peak / MIB,
            input.len() / MIB
        );
    }
    // A key longer than YAML allows a simple key is refused, not scanned for ever.
    let run = text(&format!("{long}: 1\n"));
    assert_eq!(run.outcome, Outcome::BadInput);
}

#[test]
fn lists_of_any_size_are_read_one_item_at_a_time() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let pod = "- apiVersion: v1\n  kind: Pod\n  metadata: {name: web, namespace: shop}\n  spec: {volumes: [{name: data}]}\n  status:\n    phase: Running\n    volumeHealth: [{name: data}]\n    note: PADDING\n";
    let pod = pod.replace("PADDING", &"x".repeat(2000));
    let flow_pod = "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"web\"}, \"status\": {\"note\": \"PADDING\"}},\n";
    let flow_pod = flow_pod.replace("PADDING", &"x".repeat(2000));
    let block = Repeated::new("apiVersion: v1\nitems:\n", &pod, 8_200, "kind: List\n");
    let flow = Repeated::new("kind: List\nitems: [\n", &flow_pod, 8_200, "]\n");
    for (name, input) in [("block", block), ("flow", flow)] {
        let size = input.len();
        assert!(size > 16 * MIB, "{name}: {size}");
        let run = run(input);
        assert!(run.failures.is_empty(), "{name}: {:?}", run.failures);
        assert_eq!(run.summary.pods, 8_200, "{name}");
        assert_eq!(run.outcome, Outcome::Passed, "{name}");
        assert!(
            run.peak < 8 * MIB,
            "{name}: {} MiB of heap for a {} MiB list",
            run.peak / MIB,
            size / MIB
        );
    }
}

#[test]
fn what_kubectl_and_the_apiserver_read_differently_is_read_as_they_do_or_refused() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let refused = Outcome::BadInput;
    let checked = Outcome::Refused;
    let cases: &[(&str, String, Outcome)] = &[
        (
            "`items:` at column 0 inside a quoted string",
            format!("{INVALID_POD}description: \"a\nitems:\n- kind: Pod\n  metadata: {{name: ok}}\"\n"),
            checked,
        ),
        (
            "`---` inside a block scalar is not a document",
            format!("{INVALID_POD}description: |\n  ---\n  kind: ConfigMap\n"),
            checked,
        ),
        (
            "a Pod with an `items` sequence, items first",
            format!("items: []\n{INVALID_POD}"),
            refused,
        ),
        (
            "a Pod with an `items` sequence, kind first",
            format!("{INVALID_POD}items: [{{kind: Pod}}]\n"),
            refused,
        ),
        (
            "JSON: a Pod with an `items` array",
            r#"{"apiVersion": "v1", "items": [], "kind": "Pod", "metadata": {"name": "bad"}, "spec": {"volumes": []}, "status": {"volumeHealth": [{"name": "logs"}]}}"#.to_owned(),
            refused,
        ),
        (
            "a duplicate `kind`",
            format!("{INVALID_POD}kind: ConfigMap\n"),
            refused,
        ),
        (
            "a duplicate deep in the status",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nstatus: {volumeHealth: [{name: logs}], volumeHealth: []}\n".to_owned(),
            refused,
        ),
        (
            "JSON: a duplicate `kind` after the header",
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}, "kind": "Pod", "status": {"volumeHealth": [{"name": "logs"}]}}"#.to_owned(),
            refused,
        ),
        (
            "JSON: a duplicate deep in a list item, spelt with an escape",
            r#"{"kind": "List", "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}, "status": {"volumeHealth": [{"name": "logs"}], "volume\u0048ealth": []}}]}"#.to_owned(),
            refused,
        ),
        (
            "JSON: two `items`",
            r#"{"kind": "List", "items": [], "items": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"}, "status": {"volumeHealth": [{"name": "logs"}]}}]}"#.to_owned(),
            refused,
        ),
        (
            "a merge key",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nstatus:\n  <<: {volumeHealth: [{name: logs}]}\n".to_owned(),
            refused,
        ),
        (
            "`y` is true, as kubectl reads it, so no name",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: y}\n".to_owned(),
            refused,
        ),
        (
            "a UTF-8 byte order mark",
            format!("\u{feff}{INVALID_POD}"),
            checked,
        ),
        (
            "JSON after a byte order mark",
            "\u{feff}{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"bad\"}, \"status\": {\"volumeHealth\": [{\"name\": \"logs\"}]}}".to_owned(),
            checked,
        ),
    ];
    for (name, input, want) in cases {
        let run = text(input);
        assert_eq!(
            run.outcome, *want,
            "{name}: {}{:?}",
            run.report, run.failures
        );
        if *want == checked {
            assert_eq!(run.summary.invalid, 1, "{name}");
        }
    }
}

#[test]
fn names_reach_the_terminal_escaped_and_the_report_stays_small() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let pod = |name: &str, namespace: &str, volumes: usize| {
        let health: Vec<String> = (0..volumes)
            .map(|i| format!(r#"{{"name": "missing-{i}"}}"#))
            .collect();
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"volumes": []},
            "status": {"volumeHealth": serde_json::from_str::<serde_json::Value>(&format!("[{}]", health.join(","))).unwrap()},
        })
        .to_string()
    };
    // Escape sequences and a forged line.
    let forged = pod(
        "x\u{1b}[2J\u{1b}]0;owned\u{7}\ncheckeded 9 objects: 9 pods; 0 invalid",
        "shop\r",
        1,
    );
    let run = text(&forged);
    assert!(!run.report.contains('\u{1b}'), "{:?}", run.report);
    assert!(!run.report.contains('\r'));
    assert_eq!(run.report.lines().count(), 2, "{}", run.report);
    assert!(
        run.report.starts_with(
            "Pod/shop\\u{d}/x\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\u{a}checkeded 9 objects"
        ),
        "{}",
        run.report
    );
    // A 1 MiB name on 10,000 errors: the name is cut, the errors past the first ones counted.
    let huge = pod(&"n".repeat(MIB), "shop", 10_000);
    let run = text(&huge);
    assert_eq!(run.summary.invalid, 1);
    assert!(
        run.report.len() < 64 * 1024,
        "{} bytes of report for {} bytes of input",
        run.report.len(),
        huge.len()
    );
    assert!(
        run.report.contains("...[1048320 more bytes]"),
        "{}",
        &run.report[..400]
    );
    assert!(
        run.report
            .contains(": 9968 more errors (-o json lists them all)\n")
    );
    // Bidirectional controls cannot reverse what the terminal shows.
    let reversed = pod("bidi\u{202e}evil\u{2066}x\u{2069}\u{200f}", "shop", 1);
    let run = text(&reversed);
    assert!(
        run.report
            .starts_with("Pod/shop/bidi\\u{202e}evil\\u{2066}x\\u{2069}\\u{200f}: "),
        "{}",
        run.report
    );
    // A file name from the command line is escaped too.
    let failure = volume_health_check::Failure {
        file: "a\u{1b}[31m.yaml".to_owned(),
        position: None,
        message: "bad\nerror: forged".to_owned(),
    };
    assert_eq!(
        failure.to_string(),
        "a\\u{1b}[31m.yaml: bad\\u{a}error: forged"
    );
}
