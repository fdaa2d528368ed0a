//! Directory names on the node chosen to forge output: a newline followed by
//! a fake summary line, terminal escapes, a carriage return, a bidi override.
//! The text and node-problem-detector outputs show them escaped; the JSON
//! output keeps them exact (serde escapes them there).

use crate::cli::{json, run};
use crate::fixture::{FixtureNode, PodData, s};

const FORGED_SUMMARY: &str = "summary: 0 global volumes (0 in_use); 0 pod-local unreadable, 0 skipped (0 mounted); 0 findings";

fn hostile(prefix: &str) -> String {
    format!("{prefix}\n{FORGED_SUMMARY}\n\x1b[2J\x1b]0;title\x07\rpvc-\u{202e}lanigiro")
}

/// A pod volume directory and a skipped global directory with hostile names.
fn hostile_node() -> (FixtureNode, String, String) {
    let node = FixtureNode::new();
    let pod = node.pod_fs_volume("uid-evil", &hostile("pod"), PodData::Truncated);
    let skipped = node
        .layout
        .plugin_dir()
        .join(hostile("driver"))
        .join("0000");
    node.mkdir(&skipped);
    (node, s(pod), s(skipped))
}

fn no_raw_controls(output: &str) {
    for c in ['\x1b', '\r', '\x07', '\u{202e}'] {
        assert!(!output.contains(c), "{c:?} printed raw:\n{output}");
    }
}

#[test]
fn hostile_names_cannot_forge_lines_or_reach_the_terminal_in_the_text_report() {
    let (node, pod, skipped) = hostile_node();
    let output = run(&node, &["--format", "text"]);
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8(output.stdout).expect("utf-8");
    no_raw_controls(&text);
    let summaries: Vec<&str> = text.lines().filter(|l| l.starts_with("summary:")).collect();
    assert_eq!(summaries.len(), 1, "{text}");
    assert!(!summaries[0].ends_with(" 0 findings"), "{text}");
    assert!(
        !text.lines().any(|l| l.trim_start() == FORGED_SUMMARY),
        "{text}"
    );
    // Each name is shown, escaped, on its own line.
    for name in [&pod, &skipped] {
        let escaped = csi_globalmount::escape::text(name).to_string();
        assert!(escaped.contains("\\n") && escaped.contains("\\u{1b}[2J"));
        assert!(text.contains(&escaped), "{escaped} missing from\n{text}");
    }
}

#[test]
fn hostile_names_stay_one_part_of_one_node_problem_detector_line() {
    let (node, pod, _) = hostile_node();
    let output = run(&node, &["--format", "npd"]);
    assert_eq!(output.status.code(), Some(1));
    let line = String::from_utf8(output.stdout).expect("utf-8");
    no_raw_controls(&line);
    assert_eq!(line.matches('\n').count(), 1, "{line:?}");
    let line = line.trim_end_matches('\n');
    let (head, first) = line.split_once(" first: ").expect("a first finding");
    assert!(head.ends_with("pod_local_unreadable=1"), "{line}");
    assert!(!first.contains(' '), "{first}");
    assert_eq!(first, csi_globalmount::escape::npd(&pod).to_string());
}

#[test]
fn the_json_report_keeps_hostile_names_exact() {
    let (node, pod, skipped) = hostile_node();
    let report = json(&run(&node, &[]));
    assert_eq!(report["podLocal"][0]["path"], pod.as_str());
    assert_eq!(report["skipped"][0]["path"], skipped.as_str());
}
