//! `check` in-process over the fixtures in `tests/fixtures` (see its README): every input form,
//! both report forms, `--old` pairing, identities, the gate off, and bad input, against the
//! reports checked in under `tests/golden`. `UPDATE_GOLDEN=1 cargo test -p volume-health-check`
//! rewrites them; review the diff.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::Value;
use volume_health_check::{
    Checker, Options, Outcome, OutputFormat, Reporter, Summary, outcome, sources,
};

const DUMP: &str = "tests/fixtures/cluster/dump.json";
const OLD: &str = "tests/fixtures/cluster/old.json";

/// The report, the counts and the exit status of checking `paths` (over `old`).
fn run(paths: &[&str], old: &[&str], options: Options, format: OutputFormat) -> Run {
    let mut out = Vec::new();
    let mut checker = Checker::new(options, Reporter::new(&mut out, format, false));
    if !old.is_empty() {
        for source in sources(old).unwrap() {
            checker.load_old(&source);
        }
    }
    for source in sources(paths).unwrap() {
        checker.check_source(&source);
    }
    let failures: Vec<String> = checker.failures().iter().map(|f| f.to_string()).collect();
    let summary = checker.finish().unwrap();
    Run {
        report: String::from_utf8(out).unwrap(),
        failures,
        outcome: outcome(&summary),
        summary,
    }
}

struct Run {
    report: String,
    failures: Vec<String>,
    summary: Summary,
    outcome: Outcome,
}

/// Compares with `tests/golden/<name>`, or writes it with `UPDATE_GOLDEN=1`.
fn golden(name: &str, actual: &str) {
    let path = Path::new("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual, expected,
        "{name} differs (UPDATE_GOLDEN=1 rewrites it)"
    );
}

fn node(name: &str) -> Options {
    Options {
        user: Some(format!("system:node:{name}")),
        groups: vec!["system:nodes".to_owned(), "system:authenticated".to_owned()],
        ..Options::default()
    }
}

#[test]
fn a_cluster_dump_in_text() {
    let run = run(&[DUMP], &[], Options::default(), OutputFormat::Text);
    golden("dump.txt", &run.report);
    assert_eq!(run.outcome, Outcome::Refused);
    assert_eq!(run.outcome.code(), 1);
    assert_eq!(
        (run.summary.pods, run.summary.claims, run.summary.csinodes),
        (3, 3, 2)
    );
    assert_eq!(run.summary.invalid, 3);
    assert!(run.failures.is_empty());
}

#[test]
fn a_cluster_dump_in_json() {
    let run = run(&[DUMP], &[], Options::default(), OutputFormat::Json);
    golden("dump.json", &run.report);
    let report: Value = serde_json::from_str(&run.report).unwrap();
    let objects = report["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 8, "every object checked is in the report");
    let web_1 = objects.iter().find(|o| o["name"] == "web-1").unwrap();
    assert_eq!(web_1["kind"], "Pod");
    assert_eq!(web_1["namespace"], "shop");
    assert_eq!(web_1["allowed"], false);
    assert_eq!(web_1["code"], 422);
    assert_eq!(web_1["errors"][0]["field"], "status.volumeHealth[0].name");
    assert_eq!(web_1["errors"][0]["type"], "FieldValueNotFound");
    assert_eq!(web_1["errors"][0]["message"], "Not found: \"logs\"");
    assert_eq!(web_1["errors"][1]["type"], "FieldValueNotSupported");
    assert_eq!(
        web_1["errors"][1]["detail"],
        "supported values: \"DataLoss\", \"Degraded\", \"Inaccessible\""
    );
    assert!(
        web_1["message"]
            .as_str()
            .unwrap()
            .starts_with("Pod \"web-1\" is invalid: [status.volumeHealth[0].name: Not found")
    );
    let csinode = objects.iter().find(|o| o["name"] == "node-1").unwrap();
    assert_eq!(csinode.get("namespace"), None, "cluster-scoped");
    assert_eq!(csinode["allowed"], true);
    assert_eq!(report["summary"]["invalid"], 3);
    assert_eq!(report["failedInputs"], Value::Array(vec![]));
}

#[test]
fn old_objects_ratchet_what_was_already_there() {
    let run = run(&[DUMP], &[OLD], Options::default(), OutputFormat::Text);
    golden("dump-over-old.txt", &run.report);
    // web-1's unsupported status was already in the old pod and is kept; its volume name is a
    // handwritten check and is never ratcheted, nor is any CSINode check (node-2's volume mode).
    // data-web-1's duplicate was already there.
    assert!(
        run.report
            .contains("Pod/shop/web-1: status.volumeHealth[0].name: Not found")
    );
    assert!(
        !run.report
            .contains("Pod/shop/web-1: status.volumeHealth[1]")
    );
    assert!(run.report.contains(
        "CSINode/node-2: status.storageHealth[0].healthConditions[0].volumeMode: Unsupported value"
    ));
    assert!(!run.report.contains("data-web-1"));
    assert_eq!(run.summary.invalid, 2);
    let json = self::run(&[DUMP], &[OLD], Options::default(), OutputFormat::Json);
    let report: Value = serde_json::from_str(&json.report).unwrap();
    let paired: Vec<&str> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["old"] == true)
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(paired, ["web-1", "data-web-1", "node-2"]);
}

#[test]
fn a_node_identity_adds_the_node_rules() {
    let run = run(&[DUMP], &[], node("node-1"), OutputFormat::Text);
    golden("dump-as-node-1.txt", &run.report);
    assert_eq!(run.summary.forbidden, 4);
    assert_eq!(run.outcome, Outcome::Refused);
    // A node name without the nodes group is no node: only the field rules apply.
    let not_a_node = Options {
        groups: vec!["system:authenticated".to_owned()],
        ..node("node-1")
    };
    let plain = self::run(&[DUMP], &[], not_a_node, OutputFormat::Text);
    assert_eq!(plain.summary.forbidden, 0);
    assert_eq!(plain.summary.invalid, 3);
}

#[test]
fn with_the_gate_off_the_report_says_what_is_dropped() {
    let options = Options {
        gate_enabled: false,
        ..Options::default()
    };
    let run = run(&[DUMP], &[], options.clone(), OutputFormat::Text);
    golden("dump-gate-off.txt", &run.report);
    // Dropping is silent: nothing is refused.
    assert_eq!(run.outcome, Outcome::Passed);
    assert_eq!(run.summary.dropped, 6);
    // A field the old object already uses is kept, and validated (with ratcheting).
    let over_old = self::run(&[DUMP], &[OLD], options.clone(), OutputFormat::Json);
    let report: Value = serde_json::from_str(&over_old.report).unwrap();
    let web_1 = &report["objects"][1];
    assert_eq!(web_1["name"], "web-1");
    assert_eq!(web_1["dropped"], Value::Array(vec![]));
    assert_eq!(web_1["allowed"], false);
    // A node may not write csinodes/status while the gate is off.
    let node = Options {
        gate_enabled: false,
        ..node("node-1")
    };
    let as_node = self::run(&[DUMP], &[], node, OutputFormat::Text);
    assert!(
        as_node
            .report
            .contains("CSINode/node-1: csinodes.storage.k8s.io \"node-1\" is forbidden: CSIVolumeHealth feature gate is disabled"),
        "{}",
        as_node.report
    );
}

#[test]
fn a_directory_of_manifests() {
    let run = run(
        &["tests/fixtures/manifests"],
        &[],
        Options::default(),
        OutputFormat::Json,
    );
    golden("manifests.json", &run.report);
    let report: Value = serde_json::from_str(&run.report).unwrap();
    let files: Vec<(&str, &str)> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["file"].as_str().unwrap(), o["name"].as_str().unwrap()))
        .collect();
    // Recursively, in name order; README.txt is not read.
    assert_eq!(
        files,
        [
            ("tests/fixtures/manifests/app.yaml", "web-canary"),
            ("tests/fixtures/manifests/nodes/node-3.json", "node-3"),
            (
                "tests/fixtures/manifests/storage/claims.yml",
                "data-web-canary"
            ),
            (
                "tests/fixtures/manifests/storage/claims.yml",
                "logs-web-canary"
            ),
        ]
    );
    assert_eq!(report["objects"][0]["document"], 2);
    assert_eq!(report["objects"][0]["line"], 10);
    // The ConfigMap and the Service.
    assert_eq!(run.summary.skipped, 2);
    assert_eq!(run.summary.invalid, 1);
}

#[test]
fn bad_input_names_the_file_document_line_and_column() {
    let run = run(
        &["tests/fixtures/bad"],
        &[],
        Options::default(),
        OutputFormat::Text,
    );
    let mut text = run.failures.join("\n");
    text.push('\n');
    text.push_str(&run.report);
    golden("bad.txt", &text);
    assert_eq!(run.outcome, Outcome::BadInput);
    assert_eq!(run.outcome.code(), 2);
    assert_eq!(
        run.failures[0],
        "tests/fixtures/bad/missing-comma.json: document 1: line 17 column 17: expected `,` or `}`"
    );
    assert!(
        run.failures[1]
            .starts_with("tests/fixtures/bad/unclosed-flow.yaml: document 2: line 11 column 5: "),
        "{}",
        run.failures[1]
    );
}

#[test]
fn every_json_form() {
    let pod = |name: &str, volume: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}"}},
                "spec": {{"volumes": [{{"name": "data"}}]}},
                "status": {{"volumeHealth": [{{"name": "{volume}"}}]}}}}"#
        )
    };
    let (good, bad) = (pod("good", "data"), pod("bad", "other"));
    let cases = [
        ("one object", good.clone(), 1, 0),
        ("objects one after the other", format!("{good}\n{bad}\n{good}"), 3, 1),
        ("a List", format!(r#"{{"apiVersion": "v1", "items": [{good}, {bad}], "kind": "List"}}"#), 2, 1),
        ("a PodList", format!(r#"{{"kind": "PodList", "apiVersion": "v1", "items": [{bad}, {bad}]}}"#), 2, 2),
        ("an array", format!("[{good}, {bad}]"), 2, 1),
        ("YAML", "apiVersion: v1\nkind: Pod\nmetadata: {name: why}\nstatus:\n  volumeHealth:\n  - name: data\n".to_owned(), 1, 1),
        ("nothing", "\n".to_owned(), 0, 0),
    ];
    for (name, input, objects, invalid) in cases {
        let mut checker = Checker::new(
            Options::default(),
            Reporter::new(std::io::sink(), OutputFormat::Text, false),
        );
        assert!(checker.check_reader("-", input.as_bytes()), "{name}");
        let summary = checker.finish().unwrap();
        assert_eq!(
            (summary.objects, summary.invalid),
            (objects, invalid),
            "{name}"
        );
    }
}

#[test]
fn objects_of_other_groups_are_skipped() {
    let input = r#"{"apiVersion": "example.com/v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"volumeHealth": [{"name": ""}]}}
{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n"}, "status": {"storageHealth": [{"name": ""}]}}"#;
    let mut checker = Checker::new(
        Options::default(),
        Reporter::new(std::io::sink(), OutputFormat::Text, false),
    );
    checker.check_reader("-", input.as_bytes());
    let summary = checker.finish().unwrap();
    assert_eq!(
        (summary.skipped, summary.csinodes, summary.invalid),
        (1, 1, 1)
    );
}

#[test]
fn missing_paths_are_errors() {
    let err = sources(&["tests/fixtures/no-such-file.yaml"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tests/fixtures/no-such-file.yaml: "),
        "{err}"
    );
}

#[test]
fn objects_without_the_field_get_the_librarys_answer() {
    // `check` answers these without calling the library; the library agrees, gate on or off.
    use serde_json::value::RawValue;
    use volume_health_check::{Finding, decide};
    use volume_health_validation::{HealthResource, Settings, UserInfo};
    let objects = [
        (
            HealthResource::Pods,
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "node-1", "volumes": [{"name": "data"}]}, "status": {"phase": "Running"}}"#,
        ),
        (
            HealthResource::PersistentVolumeClaims,
            r#"{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "status": {"phase": "Bound"}}"#,
        ),
        (
            HealthResource::CsiNodes,
            r#"{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n"}, "spec": {"drivers": []}}"#,
        ),
    ];
    let old = RawValue::from_string(r#"{"metadata": {"name": "x"}}"#.to_owned()).unwrap();
    for gate_enabled in [true, false] {
        let policy = Settings {
            error_limit: Some(volume_health_validation::status::MAX_REPORTED_ERRORS),
            ..Settings::with_gate(gate_enabled)
        };
        for (resource, text) in objects {
            let raw = RawValue::from_string(text.to_owned()).unwrap();
            let finding = decide(resource, "x", &raw, &old, &UserInfo::default(), &policy);
            assert_eq!(finding, Finding::default(), "{text}");
        }
    }
}

/// `--repair`: the dump's refused objects as `/mutate` would repair them, each repair reported,
/// and the repaired objects checked: nothing is left refused, and the run still fails (1) with
/// the count of each kind, so an audit job notices the drivers to fix.
#[test]
fn repair_reports_what_mutate_would_change_and_checks_the_result() {
    let options = Options {
        repair: true,
        ..Options::default()
    };
    let text = run(&[DUMP], &[], options.clone(), OutputFormat::Text);
    golden("dump-repair.txt", &text.report);
    let plain = run(&[DUMP], &[], Options::default(), OutputFormat::Text);
    assert!(plain.summary.invalid > 0, "the dump has objects to repair");
    assert_eq!(text.summary.repaired, plain.summary.invalid);
    assert_eq!(text.summary.invalid, 0, "{}", text.report);
    assert_eq!(text.outcome, Outcome::Refused);
    assert_eq!(text.outcome.code(), 1);
    assert_eq!(
        text.summary.repairs.values().sum::<u64>(),
        4,
        "{:?}",
        text.summary.repairs
    );
    assert!(
        text.report.contains("3 repaired (duplicate_condition=1, "),
        "{}",
        text.report
    );
    assert!(text.report.contains(": repaired: "), "{}", text.report);
    let json = run(&[DUMP], &[], options, OutputFormat::Json);
    golden("dump-repair.json", &json.report);
    let report: Value = serde_json::from_str(&json.report).unwrap();
    let repaired: Vec<&Value> = report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o.get("repaired").is_some())
        .collect();
    assert_eq!(repaired.len() as u64, text.summary.repaired);
    for object in repaired {
        assert_eq!(object["allowed"], true, "{object}");
        for repair in object["repaired"].as_array().unwrap() {
            assert!(
                repair["path"].as_str().unwrap().starts_with("status."),
                "{repair}"
            );
            assert!(!repair["repair"].as_str().unwrap().is_empty());
        }
    }
}
