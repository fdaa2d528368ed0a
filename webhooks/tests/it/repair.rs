//! `--repair` on `/mutate`, in-process: the kubelet's report of kubernetes#142280 (a duplicate
//! (status, reason) pair riding a pod status write with a terminated container) comes back
//! patched, with a warning, an audit annotation and a count; valid, forbidden and main-resource
//! writes, and every write with repair off, are answered as before.

use crate::support;

use axum::Router;
use base64::Engine;
use serde_json::{Value, json};
use support::wire;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

/// The suite's settings (gate on), with repair as given.
fn settings(repair: bool) -> Settings {
    Settings {
        repair,
        ..support::settings()
    }
}

async fn mutate(app: &Router, review: &Value) -> Value {
    let (status, bytes) = support::router_call::call(app, "/mutate", wire(review)).await;
    assert_eq!(status, axum::http::StatusCode::OK);
    serde_json::from_slice(&bytes).unwrap()
}

fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let patch = response["patch"].as_str()?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// A kubelet's pod status write: its container terminated, and the driver's conditions.
fn kubelet_write(conditions: Value, sub_resource: &str, user: &str) -> Value {
    let spec = json!({"nodeName": "node1", "containers": [{"name": "app", "image": "app:1"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]});
    let old = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "apps", "uid": "p-1"}, "spec": spec,
        "status": {"phase": "Running"}});
    let mut object = old.clone();
    object["status"] = json!({"phase": "Succeeded",
        "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        "volumeHealth": [{"name": "data", "healthConditions": conditions}]});
    let mut request = json!({"uid": "u-142280",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": "web-0", "namespace": "apps", "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["system:nodes", "system:authenticated"]},
        "object": object, "oldObject": old});
    if !sub_resource.is_empty() {
        request["subResource"] = json!(sub_resource);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn duplicate_pair() -> Value {
    json!([{"status": "Degraded", "reason": "IOPSThrottled", "message": "first"},
           {"status": "Degraded", "reason": "IOPSThrottled", "message": "second"}])
}

#[tokio::test]
async fn the_kubelets_duplicate_pair_is_repaired_and_the_container_state_kept() {
    let metrics = Metrics::new();
    let app = router(&settings(true), metrics.clone());
    let review = kubelet_write(duplicate_pair(), "status", "system:node:node1");
    let answer = mutate(&app, &review).await;
    let response = &answer["response"];
    assert_eq!(response["uid"], "u-142280");
    assert_eq!(response["allowed"], true);
    let patch = patch_of(response).expect("a patch");
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!([{"op": "replace", "path": "/status/volumeHealth", "value": [
            {"name": "data", "healthConditions": [
                {"status": "Degraded", "reason": "IOPSThrottled", "message": "first"}]}]}]),
        "one replace of the repaired list, which the apiserver applies in linear time"
    );
    let mut stored = review["request"]["object"].clone();
    json_patch::patch(&mut stored, &patch).unwrap();
    assert_eq!(
        stored["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(
        stored["status"]["volumeHealth"][0]["healthConditions"],
        json!([{"status": "Degraded", "reason": "IOPSThrottled", "message": "first"}])
    );
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "status.volumeHealth repaired (1): condition dropped: an earlier condition has its \
          status and reason: status.volumeHealth[0].healthConditions[1]"
        ]
    );
    assert_eq!(
        response["auditAnnotations"],
        json!({"repairs": "duplicate_condition=1"})
    );
    let text = metrics.encode();
    assert_eq!(
        support::metric(
            &text,
            r#"volume_health_webhook_repairs_total{resource="pods",repair="duplicate_condition"}"#
        ),
        1.0
    );
    assert_eq!(
        support::metric(
            &text,
            r#"volume_health_webhook_requests_total{endpoint="mutate",resource="pods",operation="UPDATE",decision="repaired"}"#
        ),
        1.0
    );
    // The repaired write needs no second repair (the apiserver may call /mutate again).
    let mut again = review.clone();
    again["request"]["object"] = stored;
    let answer = mutate(&app, &again).await;
    assert!(answer["response"].get("patch").is_none(), "{answer}");
}

#[tokio::test]
async fn one_warning_per_kind_names_at_most_five_paths() {
    let app = router(&settings(true), Metrics::new());
    let mut conditions =
        vec![json!({"status": "Degraded", "reason": "Long", "message": "é".repeat(700)})];
    conditions.extend((0..20).map(|i| json!({"status": "Degraded", "reason": format!("R{i}")})));
    conditions.push(json!({"status": "Degraded", "reason": "R0"}));
    let review = kubelet_write(Value::Array(conditions), "status", "system:node:node1");
    let response = mutate(&app, &review).await["response"].clone();
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w
                .starts_with("status.volumeHealth repaired (1): condition dropped: an earlier"))
    );
    let past = warnings
        .iter()
        .find(|w| w.contains("16 more severe or earlier conditions are kept"))
        .unwrap();
    assert!(past.contains("(5)") && !past.ends_with(" more"), "{past}");
    assert!(warnings.iter().any(|w| w.contains("message cut")));
    for warning in &warnings {
        assert!(warning.len() < 512, "bounded: {warning}");
    }
    let mut stored = review["request"]["object"].clone();
    json_patch::patch(&mut stored, &patch_of(&response).unwrap()).unwrap();
    let kept = stored["status"]["volumeHealth"][0]["healthConditions"]
        .as_array()
        .unwrap();
    assert_eq!(kept.len(), 16);
}

#[tokio::test]
async fn what_repair_does_not_touch_is_answered_as_without_it() {
    let on = router(&settings(true), Metrics::new());
    let off = router(&settings(false), Metrics::new());
    let valid = json!([{"status": "Degraded", "reason": "IOPSThrottled"}]);
    let cases = [
        // Repair off: the pair goes on to in-tree validation, as today.
        (
            "repair off",
            &off,
            kubelet_write(duplicate_pair(), "status", "system:node:node1"),
        ),
        // A valid report: nothing to repair.
        (
            "valid",
            &on,
            kubelet_write(valid, "status", "system:node:node1"),
        ),
        // Another node's kubelet: refused by the node rules, not repaired.
        (
            "another node",
            &on,
            kubelet_write(duplicate_pair(), "status", "system:node:node2"),
        ),
        // The main resource: the apiserver keeps the stored status.
        (
            "main resource",
            &on,
            kubelet_write(duplicate_pair(), "", "system:node:node1"),
        ),
    ];
    for (what, app, review) in cases {
        let answer = mutate(app, &review).await;
        let response = &answer["response"];
        assert_eq!(response["allowed"], true, "{what}");
        assert!(response.get("patch").is_none(), "{what}: {answer}");
        assert!(response.get("warnings").is_none(), "{what}: {answer}");
        assert!(
            response.get("auditAnnotations").is_none(),
            "{what}: {answer}"
        );
    }
}

#[tokio::test]
async fn a_claim_and_a_csinode_are_repaired_too() {
    let metrics = Metrics::new();
    let app = router(&settings(true), metrics.clone());
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "apps"},
        "status": {"phase": "Bound", "healthStatus": {"healthConditions": [
            {"status": "Inaccessible", "reason": "VolumeGone", "message": "x".repeat(1500)}]}}});
    let node = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node1"}, "spec": {"drivers": []},
        "status": {"storageHealth": [{"name": "csi.example.com", "healthConditions": [
            {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
            {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]}]}});
    for (group, resource, kind, object, user, want) in [
        (
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            claim,
            "system:serviceaccount:kube-system:monitor",
            json!([{"op": "replace", "path": "/status/healthStatus/healthConditions", "value": [
                {"status": "Inaccessible", "reason": "VolumeGone", "message": "x".repeat(1024)}]}]),
        ),
        (
            "storage.k8s.io",
            "csinodes",
            "CSINode",
            node,
            "system:node:node1",
            json!([{"op": "replace", "path": "/status/storageHealth", "value": [
                {"name": "csi.example.com", "healthConditions": [
                    {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"}]}]}]),
        ),
    ] {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": resource},
                "subResource": "status", "name": object["metadata"]["name"],
                "operation": "UPDATE",
                "userInfo": {"username": user, "groups": ["system:nodes", "system:serviceaccounts"]},
                "object": object, "oldObject": {"apiVersion": object["apiVersion"], "kind": kind,
                    "metadata": object["metadata"], "spec": object.get("spec").cloned().unwrap_or(json!({}))}}});
        let response = mutate(&app, &review).await["response"].clone();
        let patch = patch_of(&response).unwrap_or_else(|| panic!("{resource}: {response}"));
        assert_eq!(serde_json::to_value(&patch).unwrap(), want, "{resource}");
    }
    // The CSINode's entry is its driver, which an alert names; a claim does not name its own.
    let text = metrics.encode();
    let repaired_at = support::metric(
        &text,
        r#"volume_health_webhook_driver_last_repair_timestamp_seconds{resource="csinodes",driver="csi.example.com"}"#,
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        repaired_at > now - 60.0 && repaired_at <= now,
        "{repaired_at} {now}"
    );
    assert_eq!(
        text.matches("driver_last_repair_timestamp_seconds{")
            .count(),
        1,
        "{text}"
    );
}

/// The repair's log line names what to fix: the writer (the node) and the entry (a pod's
/// volume; a CSINode's driver).
#[tokio::test]
async fn the_repair_log_line_names_the_writer_and_the_entry() {
    let logs = support::Captured::default();
    let _guard = logs.install(tracing::Level::WARN);
    let app = router(&settings(true), Metrics::new());
    let review = kubelet_write(duplicate_pair(), "status", "system:node:node1");
    // The other repair tests reach this call site at the same time with no subscriber, and
    // tracing-core can cache "nobody listens" for a call site registered while this test's
    // subscriber was installed. Once registered, a rebuild of the cache sees this subscriber.
    let mut text = String::new();
    for _ in 0..3 {
        mutate(&app, &review).await;
        text = logs.take();
        if text.contains("was repaired") {
            break;
        }
        tracing::callsite::rebuild_interest_cache();
    }
    let line = text
        .lines()
        .find(|line| line.contains("was repaired"))
        .unwrap_or_else(|| panic!("no repair line in {text:?}"));
    for field in [
        r#"user="system:node:node1""#,
        r#"entries="data""#,
        r#"name="web-0""#,
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
}
