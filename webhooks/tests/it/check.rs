//! `volume-health-webhook check`: it agrees with the webhook on every recorded admission case,
//! and the command behaves as documented (standard input, exit codes, environment, colour).

use crate::support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use volume_health_check::{Checker, Options, OutputFormat, Reporter};
use volume_health_validation::HealthResource;
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

fn cases() -> Vec<Value> {
    serde_json::from_str(include_str!("../../../tests/fixtures/admission/cases.json")).unwrap()
}

/// The webhook's response to a recorded review.
async fn webhook(case: &Value) -> Value {
    let gate = case["profile"] != "gate-off";
    let settings = Settings {
        gates: FeatureGates {
            csi_volume_health: gate,
        },
        authz_deny_on_mismatch: false,
        pvc_health_writers: None,
        storage_condition_identity: Default::default(),
        max_request_bytes: 7 * 1024 * 1024,
        max_in_flight_bytes: 64 * 1024 * 1024,
        enforcement_action: EnforcementAction::Deny,
        repair: false,
        request_timeout: Duration::from_secs(10),
    };
    let app = router(&settings, Metrics::new());
    let path = format!("/{}", case["endpoint"].as_str().unwrap());
    let (_, bytes) = support::router_call::call(&app, &path, support::wire(&case["body"])).await;
    let review: Value = serde_json::from_slice(&bytes).unwrap();
    review["response"].clone()
}

/// `check`'s report on the case's object, over its old object, as its user.
fn check(case: &Value) -> Value {
    let request = &case["body"]["request"];
    let user = &request["userInfo"];
    let options = Options {
        gate_enabled: case["profile"] != "gate-off",
        user: Some(user["username"].as_str().unwrap().to_owned()),
        groups: user["groups"]
            .as_array()
            .map(|g| g.iter().map(|g| g.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default(),
        ..Options::default()
    };
    let mut out = Vec::new();
    let mut checker = Checker::new(options, Reporter::new(&mut out, OutputFormat::Json, false));
    let old = serde_json::to_vec(&request["oldObject"]).unwrap();
    assert!(checker.load_old_reader("old.json", &old[..]));
    let object = serde_json::to_vec(&request["object"]).unwrap();
    assert!(checker.check_reader("object.json", &object[..]));
    checker.finish().unwrap();
    let report: Value = serde_json::from_slice(&out).unwrap();
    let objects = report["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 1, "{report}");
    assert_eq!(objects[0]["old"], true, "paired with its old object");
    objects[0].clone()
}

#[tokio::test]
async fn check_agrees_with_the_webhook_on_every_recorded_case() {
    // The admission cases of resources with rules: check has nothing to say of others.
    let admission: Vec<Value> = cases()
        .into_iter()
        .filter(|case| {
            let request = &case["body"]["request"];
            case["endpoint"] != "authorize"
                && HealthResource::from_group_resource(
                    request["resource"]["group"].as_str().unwrap(),
                    request["resource"]["resource"].as_str().unwrap(),
                )
                .is_some()
        })
        .collect();
    assert!(!admission.is_empty());
    let mut compared = 0;
    for case in &admission {
        let case = case.clone();
        let id = case["id"].as_str().unwrap();
        let (answer, report) = (webhook(&case).await, check(&case));
        if case["endpoint"] == "mutate" {
            // The mutating webhook patches exactly when check reports a field dropped.
            assert_eq!(answer["allowed"], true, "{id}");
            let patched = answer.get("patch").is_some();
            let dropped = !report["dropped"].as_array().unwrap().is_empty();
            assert_eq!(dropped, patched, "{id}: {report}");
        } else {
            assert_eq!(report["allowed"], answer["allowed"], "{id}: {report}");
            if answer["allowed"] == false {
                assert_eq!(report["code"], answer["status"]["code"], "{id}");
                assert_eq!(report["message"], answer["status"]["message"], "{id}");
                let causes: Vec<(&Value, &Value)> = answer["status"]["details"]["causes"]
                    .as_array()
                    .map(|c| c.iter().map(|c| (&c["field"], &c["message"])).collect())
                    .unwrap_or_default();
                let errors: Vec<(&Value, &Value)> = report["errors"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| (&e["field"], &e["message"]))
                    .collect();
                assert_eq!(errors, causes, "{id}");
            }
        }
        compared += 1;
    }
    assert_eq!(compared, admission.len(), "every recorded admission case");
}

fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_volume-health-webhook"));
    // The tests' environment must not choose for them.
    for (name, _) in std::env::vars() {
        if name.starts_with("VOLUME_HEALTH_") || name == "NO_COLOR" || name == "CLICOLOR_FORCE" {
            command.env_remove(name);
        }
    }
    command
}

/// Runs `check` with `args`, `stdin` on standard input.
fn run(command: &mut Command, stdin: &str) -> (i32, String, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    (
        status.code().unwrap(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "shop"},
  "spec": {"nodeName": "node-1", "volumes": [{"name": "data"}]},
  "status": {"volumeHealth": [{"name": "VOLUME", "healthConditions": [{"status": "Degraded", "reason": "IOPSThrottled"}]}]}}"#;

fn pod(volume: &str) -> String {
    POD.replace("VOLUME", volume)
}

/// What `check` says when it waits on a terminal.
const WAITING: &str = "check: reading objects (YAML or JSON) from standard input";

#[test]
fn standard_input_and_exit_codes() {
    // 0: everything passes; no PATH reads standard input, silently from a pipe.
    let (code, stdout, stderr) = run(bin().arg("check"), &pod("data"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stderr.contains(WAITING), "{stderr}");
    assert_eq!(
        stdout,
        "checked 1 object: 1 pod, 0 claims, 0 CSINodes; 0 invalid; 0 skipped\n"
    );
    // 1: something would be refused; `-` is standard input.
    let list = format!(
        r#"{{"kind": "List", "items": [{}, {}]}}"#,
        pod("data"),
        pod("logs")
    );
    let (code, stdout, _) = run(bin().args(["check", "-"]), &list);
    assert_eq!(code, 1);
    assert_eq!(
        stdout,
        "Pod/shop/web-0: status.volumeHealth[0].name: Not found: \"logs\"\n\
         checked 2 objects: 2 pods, 0 claims, 0 CSINodes; 1 invalid; 0 skipped\n"
    );
    // Piped: no colour.
    assert!(!stdout.contains('\x1b'));
    // 2: not JSON, with where.
    let (code, _, stderr) = run(
        bin().arg("check"),
        "{\"kind\": \"Pod\",\n  \"metadata\": }\n",
    );
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        "error: -: document 1: line 2 column 15: expected value\n"
    );
    // 2: nothing of a checked kind was read (an empty pipe, only other kinds): never a pass.
    for (input, skipped) in [
        ("", 0),
        (
            "{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": []}",
            0,
        ),
        (
            "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}",
            1,
        ),
    ] {
        let (code, stdout, stderr) = run(bin().arg("check"), input);
        assert_eq!(code, 2, "{input:?}: {stdout}");
        assert!(
            stderr.contains(&format!(
                "no Pod, PersistentVolumeClaim or CSINode was read ({skipped} objects of other kinds skipped)"
            )),
            "{input:?}: {stderr}"
        );
    }
    // What was skipped is named, with why.
    let (code, _, stderr) = run(
        bin().arg("check"),
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}",
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("note: -: nothing checked, skipped 1 ConfigMap (v1): only Pods, PersistentVolumeClaims and CSINodes (storage.k8s.io) are checked\n"),
        "{stderr}"
    );
    let (_, _, stderr) = run(bin().arg("check"), "");
    assert!(stderr.contains("note: -: no object in it\n"), "{stderr}");
    // The examples are AdmissionReviews and SubjectAccessReviews: each file is named.
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let (code, _, stderr) = run(bin().args(["check", examples]), "");
    assert_eq!(code, 2, "{stderr}");
    let mut named = 0;
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let line = format!("note: {}: nothing checked, skipped ", path.display());
            assert!(stderr.contains(&line), "{line}\n{stderr}");
            named += 1;
        }
    }
    assert!(named > 3);
    assert!(
        stderr.contains(" AdmissionReview (admission.k8s.io/v1)"),
        "{stderr}"
    );
    // 2: bad usage.
    let (code, _, stderr) = run(bin().args(["check", "--as-group", "system:nodes"]), "");
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(bin().args(["check", "no-such-file.json"]), "");
    assert_eq!(code, 2);
    assert!(stderr.starts_with("error: no-such-file.json: "), "{stderr}");
    let (code, _, stderr) = run(bin().args(["check", "--old", "-", "-"]), "");
    assert_eq!(code, 2);
    assert!(stderr.contains("standard input"), "{stderr}");
}

#[test]
fn flags_and_their_environment_variables() {
    // The node rules for an identity given as kubectl spells it.
    let (code, stdout, _) = run(
        bin().args([
            "check",
            "--as",
            "system:node:node-2",
            "--as-group",
            "system:nodes",
        ]),
        &pod("data"),
    );
    assert_eq!(code, 1);
    assert!(
        stdout.starts_with("Pod/shop/web-0: pods \"web-0\" is forbidden: node \"node-2\" can only update pod status for pods with spec.nodeName set to itself\n"),
        "{stdout}"
    );
    // The same from the environment.
    let (code, _, _) = run(
        bin()
            .arg("check")
            .env("VOLUME_HEALTH_CHECK_AS", "system:node:node-2")
            .env("VOLUME_HEALTH_CHECK_AS_GROUP", "system:nodes"),
        &pod("data"),
    );
    assert_eq!(code, 1);
    // Gate off: what drop on save removes; nothing refused.
    let (code, stdout, _) = run(
        bin()
            .arg("check")
            .env("VOLUME_HEALTH_CHECK_FEATURE_GATES", "CSIVolumeHealth=false"),
        &pod("logs"),
    );
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("Pod/shop/web-0: status.volumeHealth: dropped on save"),
        "{stdout}"
    );
    // The storage condition identity rule, on by default, off as in-tree.
    let csinode = r#"{"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node-1"}, "spec": {"drivers": []},
        "status": {"storageHealth": [{"name": "csi.example.com", "healthConditions": [
            {"status": "StorageDegraded", "reason": "PoolFull"},
            {"status": "StorageDegraded", "reason": "PoolFull"}]}]}}"#;
    let (code, stdout, _) = run(bin().arg("check"), csinode);
    assert_eq!(code, 1);
    assert!(
        stdout.starts_with(
            "CSINode/node-1: status.storageHealth[0].healthConditions[1]: Duplicate value: "
        ),
        "{stdout}"
    );
    let (code, _, _) = run(
        bin().args(["check", "--storage-health-unique-conditions=false"]),
        csinode,
    );
    assert_eq!(code, 0);
    let (code, _, _) = run(
        bin()
            .arg("check")
            .env("VOLUME_HEALTH_CHECK_STORAGE_HEALTH_UNIQUE_CONDITIONS", "0"),
        csinode,
    );
    assert_eq!(code, 0);
    let (code, _, stderr) = run(bin().args(["check", "--feature-gates", "Bogus=true"]), "");
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unrecognized feature gate: Bogus"),
        "{stderr}"
    );
    // JSON report.
    let (code, stdout, _) = run(bin().args(["check", "-o", "json"]), &pod("logs"));
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["objects"][0]["errors"][0]["type"],
        "FieldValueNotFound"
    );
    assert_eq!(report["summary"]["invalid"], 1);
    let (_, stdout, _) = run(
        bin().arg("check").env("VOLUME_HEALTH_CHECK_OUTPUT", "json"),
        &pod("data"),
    );
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).unwrap()["summary"]["objects"],
        1
    );
    // Colour when forced (a terminal gets it without asking).
    let (_, stdout, _) = run(bin().arg("check").env("CLICOLOR_FORCE", "1"), &pod("logs"));
    assert!(stdout.contains("\x1b[31m"), "{stdout:?}");
}

/// On a terminal, `check` with no file says that it reads standard input (util-linux's
/// `script` gives it one).
#[test]
fn a_terminal_on_standard_input_is_told_what_is_awaited() {
    let command = format!("{} check", env!("CARGO_BIN_EXE_volume-health-webhook"));
    // A check left waiting would hang the suite: coreutils' timeout ends it (exit 124).
    let mut script = Command::new("timeout");
    script.args(["60", "script", "-q", "-e", "-c", &command, "/dev/null"]);
    for (name, _) in std::env::vars() {
        if name.starts_with("VOLUME_HEALTH_") {
            script.env_remove(name);
        }
    }
    // A terminal hands over a line at its end: the object ends with one.
    let (code, output, _) = run(&mut script, &format!("{}\n", pod("data")));
    assert_eq!(code, 0, "{output}");
    assert!(output.contains(WAITING), "{output}");
    assert!(output.contains("checked 1 object"), "{output}");
}
