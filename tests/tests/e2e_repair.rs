//! Repair on a real kube-apiserver v1.37.2 (in-tree gate on), behind the shipped configurations
//! with the base's repair entries: kubernetes#142280 replayed as the kubelet writes it (a
//! strategic merge patch of the pod's status with a terminated container and a driver's
//! duplicate (status, reason) pair), a kubelet's CSINode report with two conditions it cannot
//! tell apart, and a claim report with a 1,500-byte message. Without `--repair` the pod's and
//! the claim's are refused for ever (422), and the CSINode's is stored as in-tree stores it
//! (this project's rule never refuses a kubelet's write); with it each is stored repaired, the
//! container state with it, and the answer carries the webhook's `Warning`, the audit log the
//! annotation and `/metrics` the count.
//! Healthy writers then cost no repair review. Slow, so ignored: `make e2e`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    ControlPlane, Identity, REPAIR_ENV, Written, bound_pod, create_namespace, patch_retrying,
};
use volume_health_tests::phases::Phases;
use volume_health_tests::seeded::{self, Rng};
use volume_health_validation::repair::{repair_pvc, repair_storage_health};
use volume_health_validation::rules::ConditionIdentity;

const NS: &str = "apps";
const NODE: &str = "node1";
const DRIVER: &str = "csi.example.com";

/// PATCHes `path` as `client`, as a kubelet or a monitor sends it, retrying while the Node
/// authorizer has not yet related the node to a new pod.
async fn patch(client: &kube::Client, path: &str, content_type: &str, body: &Value) -> Written {
    patch_retrying(client, path, content_type, body)
        .await
        .unwrap()
}

const STRATEGIC: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";

fn pod_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods/web-0/status")
}

fn claim_path() -> String {
    format!("/api/v1/namespaces/{NS}/persistentvolumeclaims/claim/status")
}

fn node_path() -> String {
    format!("/apis/storage.k8s.io/v1/csinodes/{NODE}/status")
}

/// kubernetes#142280: the kubelet's pod status patch, the container terminated and the
/// driver's two conditions with one (status, reason).
fn terminated_with_duplicates() -> Value {
    json!({"status": {
        "containerStatuses": [{"name": "app", "image": "registry.example/app:1", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0,
                "reason": "Completed", "startedAt": "2026-01-01T00:00:00Z",
                "finishedAt": "2026-01-01T00:01:00Z"}}}],
        "volumeHealth": [{"name": "vol", "healthConditions": [
            {"status": "Degraded", "reason": "IOPSThrottled", "message": "first"},
            {"status": "Degraded", "reason": "IOPSThrottled", "message": "second"}]}]}})
}

fn indistinct() -> Value {
    json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]}]}})
}

fn long_message() -> Value {
    json!({"status": {"healthStatus": {"healthConditions": [
        {"status": "Inaccessible", "reason": "VolumeGone", "message": "x".repeat(1500)}]}}})
}

async fn metric(plane: &ControlPlane, name: &str, labels: &[&str]) -> f64 {
    plane.admission.metric(name, labels).await.unwrap()
}

async fn repairs(plane: &ControlPlane, resource: &str, repair: &str) -> f64 {
    let resource = format!(r#"resource="{resource}""#);
    let repair = format!(r#"repair="{repair}""#);
    metric(
        plane,
        "volume_health_webhook_repairs_total",
        &[&resource, &repair],
    )
    .await
}

async fn set_repair(plane: &mut ControlPlane, on: bool) {
    let value = if on { "true" } else { "false" };
    plane
        .set_webhook(true, &[(REPAIR_ENV, value)])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn repair_keeps_the_writers_flowing() {
    // Each phase is bounded: a hung step fails its phase instead of holding CI.
    let mut phases = Phases::new("e2e_repair", Duration::from_secs(180));
    let Some((mut plane, admin, kubelet)) = phases.phase("control plane").run(setup()).await else {
        return phases.finish();
    };
    phases
        .phase("first reports")
        .run(first_reports(&admin, &kubelet))
        .await;
    phases
        .phase("refused without repair")
        .after("first reports")
        .run(refused_without_repair(&admin, &kubelet))
        .await;
    phases
        .phase("repair on")
        .run(set_repair(&mut plane, true))
        .await;
    let plane = &plane;
    phases
        .phase("repaired pod")
        .after("first reports")
        .after("repair on")
        .run(repaired_pod(plane, &kubelet))
        .await;
    phases
        .phase("repaired CSINode")
        .after("first reports")
        .after("repair on")
        .run(repaired_node(plane, &kubelet))
        .await;
    phases
        .phase("repaired claim")
        .after("first reports")
        .after("repair on")
        .run(repaired_claim(plane, &admin))
        .await;
    phases
        .phase("audit annotations")
        .after("repaired pod")
        .after("repaired CSINode")
        .after("repaired claim")
        .run(audit_annotations(plane))
        .await;
    phases
        .phase("healthy writers cost no repair review")
        .after("first reports")
        .after("repair on")
        .run(healthy_writers(plane, &admin, &kubelet))
        .await;
    phases
        .phase("generated reports")
        .after("repair on")
        .run(generated(&admin, &kubelet))
        .await;
    phases
        .phase("two entries for one volume, merged")
        .after("first reports")
        .after("repair on")
        .run(merged_entries(plane, &kubelet))
        .await;
    phases
        .phase("an impossible reason, stored unhealthy")
        .after("first reports")
        .after("repair on")
        .run(impossible_reason(plane, &kubelet))
        .await;
    phases
        .phase("10,000 conditions, the 16 most severe stored")
        .after("first reports")
        .after("repair on")
        .run(ten_thousand_conditions(plane, &admin))
        .await;
    phases.finish();
}

/// With repair, a pod report with two entries for one volume, `Degraded` then `Inaccessible`:
/// one entry stored, with both conditions, not the first alone.
async fn merged_entries(plane: &ControlPlane, kubelet: &kube::Client) {
    let report = json!({"status": {"volumeHealth": [
        {"name": "vol", "healthConditions": [
            {"status": "Degraded", "reason": "IOPSThrottled", "message": "slow"}]},
        {"name": "vol", "healthConditions": [
            {"status": "Inaccessible", "reason": "PathGone", "message": "gone"}]}]}});
    let pod = patch(kubelet, &pod_path(), MERGE, &report).await;
    assert_eq!(pod.code, 200, "{}", pod.body);
    let entries = pod.body["status"]["volumeHealth"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "one entry stored: {}", pod.body);
    assert_eq!(entries[0]["name"], "vol");
    assert_eq!(
        entries[0]["healthConditions"],
        json!([{"status": "Degraded", "reason": "IOPSThrottled", "message": "slow"},
            {"status": "Inaccessible", "reason": "PathGone", "message": "gone"}]),
        "both conditions stored, in one entry"
    );
    assert!(
        pod.warnings.iter().any(|w| w.contains("entry merged")),
        "{:?}",
        pod.warnings
    );
    assert!(repairs(plane, "pods", "merged_entry").await >= 1.0);
}

/// With repair, a condition whose reason can never be stored (`slow io!`, as a driver sent
/// it to the real kubelet): stored `Degraded` with `InvalidReason`, the original in the
/// message, so the pod does not read as healthy.
async fn impossible_reason(plane: &ControlPlane, kubelet: &kube::Client) {
    let report = json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
        {"status": "Degraded", "reason": "slow io!", "message": "p99 above 2 s"}]}]}});
    let pod = patch(kubelet, &pod_path(), MERGE, &report).await;
    assert_eq!(pod.code, 200, "{}", pod.body);
    assert_eq!(
        pod.body["status"]["volumeHealth"][0]["healthConditions"],
        json!([{"status": "Degraded", "reason": "InvalidReason",
            "message": "p99 above 2 s (reason: slow io!)"}]),
        "{}",
        pod.body
    );
    assert!(repairs(plane, "pods", "replaced_reason").await >= 1.0);
}

/// With repair, a claim report of 10,000 conditions, one of them `DataLoss` at the end: stored
/// cut to 16, the `DataLoss` among them. The apiserver's answer time is printed: one `replace`
/// costs it time linear in the report.
async fn ten_thousand_conditions(plane: &ControlPlane, admin: &kube::Client) {
    let mut conditions: Vec<Value> = (0..9_999)
        .map(|i| json!({"status": "Degraded", "reason": format!("Slow{i}"), "message": "slow"}))
        .collect();
    conditions.push(json!({"status": "DataLoss", "reason": "BlocksLost", "message": "lost"}));
    let report = json!({"status": {"healthStatus": {"healthConditions": conditions}}});
    let started = std::time::Instant::now();
    let claim = patch(admin, &claim_path(), MERGE, &report).await;
    let took = started.elapsed();
    assert_eq!(claim.code, 200, "{}", claim.body);
    let stored = claim.body["status"]["healthStatus"]["healthConditions"]
        .as_array()
        .unwrap();
    assert_eq!(stored.len(), 16, "{}", claim.body);
    assert!(
        stored.iter().any(|c| c["status"] == "DataLoss"),
        "the most severe condition is kept: {}",
        claim.body
    );
    eprintln!(
        "10,000 conditions ({} bytes): stored 16, answered in {} ms",
        serde_json::to_vec(&report).unwrap().len(),
        took.as_millis()
    );
    assert!(repairs(plane, "persistentvolumeclaims", "condition_past_limit").await >= 9_984.0);
}

/// The control plane, its admin and the node's kubelet, and the objects they write: a claim,
/// a pod bound to the node, the node's CSINode. The repair entries are installed; the server
/// starts with repair off.
async fn setup() -> anyhow::Result<(ControlPlane, kube::Client, kube::Client)> {
    let plane = ControlPlane::start(true, &[(REPAIR_ENV, "false")]).await?;
    eprintln!("logs in {}", plane.cluster.dir().display());
    let admin = plane.cluster.client(Identity::Admin).await?;
    let kubelet = plane.cluster.client(Identity::Node(NODE)).await?;
    create_namespace(&admin, NS).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "claim"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    pods.create(&PostParams::default(), &bound_pod("web-0", NODE)?)
        .await?;
    let nodes: Api<CSINode> = Api::all(kubelet.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NODE},
                "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE, "topologyKeys": []}]}}))?,
        )
        .await?;
    Ok((plane, admin, kubelet))
}

/// Each writer has reported before: the reports after are changes, whose first test in the
/// repair entries' matchConditions is then the one a writer's resends meet.
async fn first_reports(admin: &kube::Client, kubelet: &kube::Client) {
    for (client, path, content_type, body) in [
        (
            kubelet,
            pod_path(),
            STRATEGIC,
            json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
                {"status": "Degraded", "reason": "Slow"}]}]}}),
        ),
        (
            kubelet,
            node_path(),
            MERGE,
            json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolSlow"}]}]}}),
        ),
        (
            admin,
            claim_path(),
            MERGE,
            json!({"status": {"healthStatus": {"healthConditions": [
                {"status": "Degraded", "reason": "Slow"}]}}}),
        ),
    ] {
        let answer = patch(client, &path, content_type, &body).await;
        assert_eq!(answer.code, 200, "{path}: {}", answer.body);
    }
}

/// Without repair: each report is refused, and would be on every retry.
async fn refused_without_repair(admin: &kube::Client, kubelet: &kube::Client) {
    let pod = patch(
        kubelet,
        &pod_path(),
        STRATEGIC,
        &terminated_with_duplicates(),
    )
    .await;
    assert_eq!(pod.code, 422, "{}", pod.body);
    assert!(
        pod.body["message"]
            .as_str()
            .unwrap()
            .contains("Duplicate value"),
        "{}",
        pod.body
    );
    // This project's storage condition rule never refuses a kubelet's own report, which it
    // would retry every probe tick: without repair it is stored as in-tree stores it.
    let node = patch(kubelet, &node_path(), MERGE, &indistinct()).await;
    assert_eq!(node.code, 200, "{}", node.body);
    assert_eq!(
        node.body["status"]["storageHealth"][0]["healthConditions"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{}",
        node.body
    );
    // Back to a report of one condition, so that repair has the pair to repair below.
    let one = json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
        {"status": "StorageDegraded", "reason": "PoolLow", "message": "low"}]}]}});
    let node = patch(kubelet, &node_path(), MERGE, &one).await;
    assert_eq!(node.code, 200, "{}", node.body);
    let claim = patch(admin, &claim_path(), MERGE, &long_message()).await;
    assert_eq!(claim.code, 422, "{}", claim.body);
    assert!(
        claim.body["message"].as_str().unwrap().contains("Too long"),
        "{}",
        claim.body
    );
}

/// With repair, kubernetes#142280's pod report: stored with the container state, repaired,
/// warned and counted.
async fn repaired_pod(plane: &ControlPlane, kubelet: &kube::Client) {
    let pod = patch(
        kubelet,
        &pod_path(),
        STRATEGIC,
        &terminated_with_duplicates(),
    )
    .await;
    assert_eq!(pod.code, 200, "{}", pod.body);
    assert_eq!(
        pod.body["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
        "the container state is stored with the repaired report"
    );
    assert_eq!(
        pod.body["status"]["volumeHealth"][0]["healthConditions"],
        json!([{"status": "Degraded", "reason": "IOPSThrottled", "message": "first"}])
    );
    assert!(
        pod.warnings
            .iter()
            .any(|w| w.contains("status.volumeHealth repaired (1)")),
        "{:?}",
        pod.warnings
    );
    assert_eq!(repairs(plane, "pods", "duplicate_condition").await, 1.0);
}

/// With repair, the CSINode report of two conditions the kubelet cannot tell apart: stored
/// repaired, warned and counted.
async fn repaired_node(plane: &ControlPlane, kubelet: &kube::Client) {
    let node = patch(kubelet, &node_path(), MERGE, &indistinct()).await;
    assert_eq!(node.code, 200, "{}", node.body);
    let conditions = node.body["status"]["storageHealth"][0]["healthConditions"]
        .as_array()
        .unwrap();
    assert_eq!(conditions.len(), 1, "{}", node.body);
    assert_eq!(conditions[0]["message"], "one");
    assert!(
        node.warnings
            .iter()
            .any(|w| w.contains("status.storageHealth repaired (1)")),
        "{:?}",
        node.warnings
    );
    assert_eq!(
        repairs(plane, "csinodes", "indistinct_condition").await,
        1.0
    );
}

/// With repair, the claim report with a 1,500-byte message: stored cut, warned and counted.
async fn repaired_claim(plane: &ControlPlane, admin: &kube::Client) {
    let claim = patch(admin, &claim_path(), MERGE, &long_message()).await;
    assert_eq!(claim.code, 200, "{}", claim.body);
    let message = claim.body["status"]["healthStatus"]["healthConditions"][0]["message"]
        .as_str()
        .unwrap();
    assert_eq!(message.len(), 1024);
    assert!(
        claim.warnings.iter().any(|w| w.contains("message cut")),
        "{:?}",
        claim.warnings
    );
    assert_eq!(
        repairs(plane, "persistentvolumeclaims", "message_cut").await,
        1.0
    );
}

/// Each repaired write is annotated in the audit log, under the entry that repaired it.
async fn audit_annotations(plane: &ControlPlane) {
    let audit = std::fs::read_to_string(plane.cluster.audit_log()).unwrap();
    for (entry, repair) in [
        (
            "pod-status.repair.volume-health.github.io",
            "duplicate_condition=1",
        ),
        (
            "csinode.repair.volume-health.github.io",
            "indistinct_condition=1",
        ),
        ("pvc.repair.volume-health.github.io", "message_cut=1"),
    ] {
        let annotation = format!(r#""{entry}/repairs":"{repair}""#);
        assert!(
            audit.contains(&annotation),
            "no {annotation} in the audit log"
        );
    }
}

/// Healthy writers cost no repair review: changed valid reports, a container state.
async fn healthy_writers(plane: &ControlPlane, admin: &kube::Client, kubelet: &kube::Client) {
    let mutate = [r#"endpoint="mutate""#];
    let before = metric(plane, "volume_health_webhook_requests_total", &mutate).await;
    let healthy = [
        (
            kubelet,
            pod_path(),
            STRATEGIC,
            json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
                {"status": "Degraded", "reason": "IOPSThrottled", "message": "still"}]}]}}),
        ),
        (
            kubelet,
            pod_path(),
            STRATEGIC,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ),
        (
            kubelet,
            node_path(),
            MERGE,
            json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
                {"status": "StorageUnreachable", "reason": "PoolGone"}]}]}}),
        ),
        (
            admin,
            claim_path(),
            MERGE,
            json!({"status": {"healthStatus": {"healthConditions": [
                {"status": "Degraded", "reason": "VolumeSlow", "message": "slow"}]}}}),
        ),
    ];
    for (client, path, content_type, body) in &healthy {
        let answer = patch(client, path, content_type, body).await;
        assert_eq!(answer.code, 200, "{path}: {}", answer.body);
        assert!(answer.warnings.is_empty(), "{path}: {:?}", answer.warnings);
    }
    let after = metric(plane, "volume_health_webhook_requests_total", &mutate).await;
    assert_eq!(
        after - before,
        0.0,
        "a healthy writer's write was sent to /mutate"
    );
}

/// A list as the apiserver stores it: empty strings and empty lists left out (Go's
/// `omitempty`), and an absent list empty.
fn as_stored(value: &Value) -> Value {
    match value {
        Value::Null => json!([]),
        Value::Array(items) => Value::Array(items.iter().map(as_stored).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(_, v)| !matches!(v, Value::Null) && *v != "" && *v != &json!([]))
                .map(|(k, v)| (k.clone(), as_stored(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A message: empty, short, at the limit, over it, or over it in two-byte characters.
fn message(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => String::new(),
        1 => "slow I/O".to_owned(),
        2 => "m".repeat(1024),
        3 => "m".repeat(1025),
        4 => "é".repeat(600),
        _ => "x".repeat(1500),
    }
}

/// Reports of the shapes writers send, valid and not, written with repair on through the real
/// apiserver: every one is stored, and stored exactly as the library repairs it (claims and
/// CSINodes, whose merge patches replace the whole list; pods are the replay's above and the
/// library's property test).
async fn generated(admin: &kube::Client, kubelet: &kube::Client) {
    let seed = seeded::seed();
    eprintln!("generated reports: seed {seed} (VOLUME_HEALTH_E2E_SEED replays it)");
    let mut rng = Rng::new(seed);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    let nodes: Api<CSINode> = Api::all(kubelet.clone());
    let (mut repaired, rounds) = (0, 60);
    for round in 0..rounds {
        let context = format!("seed {seed}, round {round}");
        // A claim report.
        let count = rng.below(20);
        let conditions: Vec<Value> = (0..count)
            .map(|_| {
                json!({"status": rng.pick(&["Degraded", "DataLoss", "Inaccessible", "Unknown"]),
                    "reason": rng.pick(&["Slow", "Gone", "Slow", "bad reason", "A:B", "9Lives"]),
                    "message": message(&mut rng)})
            })
            .collect();
        let stored = claims.get_status("claim").await.unwrap();
        let report = json!({"status": {"healthStatus": {"healthConditions": conditions}}});
        let mut expected: PersistentVolumeClaim = serde_json::from_value({
            let mut claim = serde_json::to_value(&stored).unwrap();
            claim["status"]["healthStatus"] = report["status"]["healthStatus"].clone();
            claim
        })
        .unwrap();
        repaired += usize::from(!repair_pvc(&mut expected, Some(&stored)).is_empty());
        let answer = patch(admin, &claim_path(), MERGE, &report).await;
        assert_eq!(answer.code, 200, "{context}: {report}: {}", answer.body);
        assert_eq!(
            as_stored(&answer.body["status"]["healthStatus"]["healthConditions"]),
            as_stored(
                &serde_json::to_value(&expected).unwrap()["status"]["healthStatus"]["healthConditions"]
            ),
            "{context}: the claim is not stored as the library repairs it"
        );

        // A CSINode report: entries of two drivers and a bad name, conditions scoped by mode.
        let entries: Vec<Value> = (0..1 + rng.below(3))
            .map(|_| {
                let conditions: Vec<Value> = (0..rng.below(19))
                    .map(|_| {
                        let mut condition = json!({
                            "status": rng.pick(&["StorageDegraded", "StorageUnreachable", "Lost"]),
                            "reason": rng.pick(&["PoolFull", "PoolFull", "Pool Gone", "Slow"]),
                            "message": message(&mut rng)});
                        let mode = rng.pick(&["", "ReadWriteOnce", "ReadOnlyMany", "Sometimes"]);
                        if !mode.is_empty() {
                            condition["accessMode"] = json!(mode);
                        }
                        condition
                    })
                    .collect();
                json!({"name": rng.pick(&[DRIVER, DRIVER, "second.example.com", "Bad_Name"]),
                    "healthConditions": conditions})
            })
            .collect();
        let stored = nodes.get_status(NODE).await.unwrap();
        let mut expected: Vec<StorageHealth> =
            serde_json::from_value(Value::Array(entries.clone())).unwrap();
        let old = stored
            .status
            .as_ref()
            .and_then(|s| s.storage_health.as_deref());
        repaired += usize::from(
            !repair_storage_health(&mut expected, old, ConditionIdentity::Unique).is_empty(),
        );
        let report = json!({"status": {"storageHealth": entries}});
        let answer = patch(kubelet, &node_path(), MERGE, &report).await;
        assert_eq!(answer.code, 200, "{context}: {report}: {}", answer.body);
        assert_eq!(
            as_stored(&answer.body["status"]["storageHealth"]),
            as_stored(&serde_json::to_value(&expected).unwrap()),
            "{context}: the CSINode is not stored as the library repairs it"
        );
    }
    eprintln!(
        "generated reports: {} written, {repaired} repaired, all stored as the library repairs them",
        2 * rounds
    );
    assert!(
        repaired > rounds / 2,
        "the generator made too few reports to repair"
    );
}
