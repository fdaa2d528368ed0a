//! Every file in `examples/` gets the answer docs/development.md shows for it: each review is
//! sent to the server's router in-process, configured from the command line as `make run`
//! (gate on) or with `--feature-gates=CSIVolumeHealth=false`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use clap::Parser;
use serde_json::{Value, json};
use volume_health_test_kit::router_call::call;
use volume_health_webhooks::config::{Cli, Command};
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the repository")
        .join("examples")
}

fn read(name: &str) -> Value {
    let path = examples().join(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn settings(gate: bool) -> Settings {
    let gates = format!("--feature-gates=CSIVolumeHealth={gate}");
    let cli = Cli::try_parse_from(["volume-health-webhook", "serve", gates.as_str()])
        .expect("flags parse");
    #[allow(unreachable_patterns)] // `serve` may not stay the only subcommand.
    match cli.command {
        Command::Serve(args) => args.into_config().settings,
        _ => panic!("parsed as serve"),
    }
}

async fn answer(endpoint: &str, gate: bool, review: &Value) -> Value {
    let app = router(&settings(gate), Metrics::new());
    let body = serde_json::to_vec(review).expect("JSON");
    let (status, body) = call(&app, &format!("/{endpoint}"), body).await;
    assert_eq!(status, 200, "{endpoint}");
    serde_json::from_slice(&body).expect("a JSON answer")
}

/// (example, endpoint, gate, what the answer's `response` or `status` must hold)
fn cases() -> Vec<(&'static str, &'static str, bool, Value)> {
    vec![
        (
            "pod-status-review.json",
            "validate",
            true,
            json!({"allowed": true}),
        ),
        (
            "pod-status-review-invalid.json",
            "validate",
            true,
            json!({"allowed": false, "status": {"code": 422, "reason": "Invalid"}}),
        ),
        (
            "pvc-status-review.json",
            "validate",
            true,
            json!({"allowed": true}),
        ),
        (
            "csinode-status-review.json",
            "validate",
            true,
            json!({"allowed": true}),
        ),
        (
            "mutate-pod-status-review.json",
            "mutate",
            false,
            json!({
                "allowed": true,
                "patchType": "JSONPatch",
                "warnings": ["status.volumeHealth was dropped: feature gate CSIVolumeHealth is disabled"],
            }),
        ),
        (
            "mutate-pod-status-review.json",
            "mutate",
            true,
            json!({"allowed": true}),
        ),
        (
            "subject-access-review.json",
            "authorize",
            true,
            json!({"allowed": true}),
        ),
        (
            "subject-access-review-v1beta1.json",
            "authorize",
            true,
            json!({"allowed": true}),
        ),
    ]
}

/// Whether every member of `want` is in `got` with the same value (recursively).
fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(got), Value::Object(want)) => want
            .iter()
            .all(|(k, v)| got.get(k).is_some_and(|g| contains(g, v))),
        _ => got == want,
    }
}

#[tokio::test]
async fn every_example_gets_its_documented_answer() {
    let mut used = BTreeSet::from(["mutate-pod-status-patch.json".to_owned()]);
    for (file, endpoint, gate, want) in cases() {
        used.insert(file.to_owned());
        let review = read(file);
        let answer = answer(endpoint, gate, &review).await;
        assert_eq!(
            answer["apiVersion"], review["apiVersion"],
            "{file}: answered in the version asked"
        );
        assert_eq!(answer["kind"], review["kind"]);
        let got = if endpoint == "authorize" {
            &answer["status"]
        } else {
            assert_eq!(
                answer["response"]["uid"], review["request"]["uid"],
                "{file}"
            );
            &answer["response"]
        };
        assert!(
            contains(got, &want),
            "{file} on /{endpoint} (gate {gate}): {answer}"
        );
        match (endpoint, gate) {
            ("mutate", false) => {
                let patch = BASE64
                    .decode(got["patch"].as_str().expect("a patch"))
                    .expect("base64");
                let patch: Value = serde_json::from_slice(&patch).expect("JSON Patch");
                assert_eq!(patch, read("mutate-pod-status-patch.json"), "{file}");
            }
            _ => assert!(got.get("patch").is_none(), "{file}: no patch: {answer}"),
        }
    }
    let present: BTreeSet<String> = fs::read_dir(examples())
        .expect("examples/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    assert_eq!(present, used, "every example has its answer checked here");
    // One example for every endpoint and every resource.
    let resources: BTreeSet<&str> = cases()
        .iter()
        .map(|(file, ..)| file.split('-').next().expect("a prefix"))
        .collect();
    for resource in ["pod", "pvc", "csinode", "mutate", "subject"] {
        assert!(resources.contains(resource), "{resource}");
    }
}
