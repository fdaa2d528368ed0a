//! Repair on a real kube-apiserver v1.37.2 (in-tree gate on), by either repairer: the webhook
//! behind the shipped configurations with the base's repair entries, or the native repair
//! policies (MutatingAdmissionPolicies) alone, with no webhook running. kubernetes#142280 is
//! replayed as the kubelet writes it (a strategic merge patch of the pod's status with a
//! terminated container and a driver's duplicate (status, reason) pair), with a kubelet's
//! CSINode report of two conditions it cannot tell apart and a claim report with a 1,500-byte
//! message. Without repair the pod's and the claim's are refused for ever (422), and the
//! CSINode's is stored as in-tree stores it (this project's rule never refuses a kubelet's
//! write); with it each is stored repaired, the container state with it. The webhook's answer
//! also carries its `Warning`, the audit log the annotation and `/metrics` the count; the
//! policies say nothing (docs/repair.md). Generated reports are stored exactly as the library
//! repairs them, by both. Slow, so ignored: `make e2e`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use volume_health_policies as policies;
use volume_health_tests::cluster::{
    Cluster, ClusterOptions, ControlPlane, Identity, REPAIR_ENV, Written, bin_dir, bound_pod,
    create_namespace, patch_retrying,
};
use volume_health_tests::phases::{Phase, Phases};
use volume_health_tests::seeded::{self, Rng};
use volume_health_validation::repair::{repair_pod, repair_pvc, repair_storage_health};
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

/// Who repairs: the webhook behind the base's repair entries, whose answers also carry a
/// warning and a count, or the native repair policies alone, which say nothing.
#[derive(Clone, Copy)]
enum Repairer<'p> {
    Webhook(&'p ControlPlane),
    Policies,
}

impl Repairer<'_> {
    /// The webhook's count of `repair` on `resource`, at least `at_least`, and its warning
    /// holding `warned` on `answer`; the policies give neither.
    async fn told(
        self,
        answer: &Written,
        warned: &str,
        resource: &str,
        repair: &str,
        at_least: f64,
    ) {
        let Repairer::Webhook(plane) = self else {
            assert!(answer.warnings.is_empty(), "{:?}", answer.warnings);
            return;
        };
        assert!(
            answer.warnings.iter().any(|w| w.contains(warned)),
            "no warning with {warned:?}: {:?}",
            answer.warnings
        );
        let counted = repairs(plane, resource, repair).await;
        assert!(counted >= at_least, "{repair}: {counted} < {at_least}");
    }
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
    let repairer = Repairer::Webhook(&plane);
    repaired_writes(&mut phases, repairer, &admin, &kubelet).await;
    phases
        .phase("audit annotations")
        .after("repaired pod")
        .after("repaired CSINode")
        .after("repaired claim")
        .run(audit_annotations(&plane))
        .await;
    phases
        .phase("10,000 conditions, the 16 most severe stored")
        .after("first reports")
        .after("repair on")
        .run(ten_thousand_conditions(&plane, &admin))
        .await;
    phases.finish();
}

/// The native repair policies alone, no webhook running: kubernetes#142280's write refused
/// before their bindings and stored repaired after, and every repaired write of the webhook's
/// suite stored as the webhook stores it. At the bound, in the costliest shapes, a write is
/// timed; past it, the policies leave a hostile list to in-tree validation at no cost of
/// their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn repair_policies_keep_the_writers_flowing() {
    let mut phases = Phases::new("e2e_repair (policies)", Duration::from_secs(180));
    let Some((cluster, admin, kubelet)) = phases.phase("control plane").run(setup_policies()).await
    else {
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
        .run(bind_repair_policies(&cluster, &admin, &kubelet))
        .await;
    repaired_writes(&mut phases, Repairer::Policies, &admin, &kubelet).await;
    phases
        .phase("at the bound: 128 cut messages, 64 entries merged")
        .after("first reports")
        .after("repair on")
        .run(at_the_bound(&admin, &kubelet))
        .await;
    phases
        .phase("past the bound: 10,000 conditions cost what in-tree costs")
        .after("first reports")
        .after("repair on")
        .run(past_the_bound(&cluster, &admin, &kubelet))
        .await;
    phases.finish();
}

/// The repaired writes both repairers store alike, each a phase after the first reports and
/// repair on.
async fn repaired_writes(
    phases: &mut Phases,
    repairer: Repairer<'_>,
    admin: &kube::Client,
    kubelet: &kube::Client,
) {
    fn after<'a>(phases: &'a mut Phases, name: &str) -> Phase<'a> {
        phases.phase(name).after("first reports").after("repair on")
    }
    after(phases, "repaired pod")
        .run(repaired_pod(repairer, kubelet))
        .await;
    after(phases, "repaired CSINode")
        .run(repaired_node(repairer, kubelet))
        .await;
    after(phases, "repaired claim")
        .run(repaired_claim(repairer, admin))
        .await;
    after(phases, "healthy writers are left as they are")
        .run(healthy_writers(repairer, admin, kubelet))
        .await;
    after(phases, "generated reports")
        .run(generated(admin, kubelet))
        .await;
    after(phases, "two entries for one volume, merged")
        .run(merged_entries(repairer, kubelet))
        .await;
    after(phases, "an impossible reason, stored unhealthy")
        .run(impossible_reason(repairer, kubelet))
        .await;
}

/// With repair, a pod report with two entries for one volume, `Degraded` then `Inaccessible`:
/// one entry stored, with both conditions, not the first alone.
async fn merged_entries(repairer: Repairer<'_>, kubelet: &kube::Client) {
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
    repairer
        .told(&pod, "entry merged", "pods", "merged_entry", 1.0)
        .await;
}

/// With repair, a condition whose reason can never be stored (`slow io!`, as a driver sent
/// it to the real kubelet): stored `Degraded` with `InvalidReason`, the original in the
/// message, so the pod does not read as healthy.
async fn impossible_reason(repairer: Repairer<'_>, kubelet: &kube::Client) {
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
    repairer
        .told(&pod, "reason", "pods", "replaced_reason", 1.0)
        .await;
}

/// A claim report of `count` conditions, one of them `DataLoss` at the end, each message
/// `message`.
fn many_conditions(count: usize, message: &str) -> Value {
    let mut conditions: Vec<Value> = (1..count)
        .map(|i| json!({"status": "Degraded", "reason": format!("Slow{i}"), "message": message}))
        .collect();
    conditions.push(json!({"status": "DataLoss", "reason": "BlocksLost", "message": message}));
    json!({"status": {"healthStatus": {"healthConditions": conditions}}})
}

/// With repair, a claim report of 10,000 conditions, one of them `DataLoss` at the end: stored
/// cut to 16, the `DataLoss` among them. The apiserver's answer time is printed: one `replace`
/// costs it time linear in the report.
async fn ten_thousand_conditions(plane: &ControlPlane, admin: &kube::Client) {
    let report = many_conditions(10_000, "slow");
    let started = Instant::now();
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

/// The policies at their bound, in the costliest shapes, each stored as the library repairs
/// it and timed: a claim of 128 conditions whose 1,500-byte messages of two-byte characters
/// are all cut, and a pod report of 64 entries for one volume, 2 conditions each, merged.
async fn at_the_bound(admin: &kube::Client, kubelet: &kube::Client) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    let stored = claims.get_status("claim").await.unwrap();
    let report = many_conditions(policies::MAX_REPAIRED_CONDITIONS, &"é".repeat(750));
    let expected = expected_claim(&stored, &report);
    let started = Instant::now();
    let claim = patch(admin, &claim_path(), MERGE, &report).await;
    let took = started.elapsed();
    assert_eq!(claim.code, 200, "{}", claim.body);
    assert_eq!(
        as_stored(&claim.body["status"]["healthStatus"]["healthConditions"]),
        expected,
        "the claim at the bound is not stored as the library repairs it"
    );
    eprintln!(
        "at the bound: 128 claim conditions, every message cut, stored in {} ms",
        took.as_millis()
    );

    // The Node authorizer lets a kubelet read a pod, not its status subresource.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let stored = pods.get_status("web-0").await.unwrap();
    let entries: Vec<Value> = (0..policies::MAX_REPAIRED_ENTRIES)
        .map(|i| {
            json!({"name": "vol", "healthConditions": [
                {"status": "Degraded", "reason": format!("Slow{i}"), "message": "slow"},
                {"status": "Inaccessible", "reason": format!("Gone{i}"), "message": "gone"}]})
        })
        .collect();
    let report = json!({"status": {"volumeHealth": entries}});
    let expected = expected_pod(&stored, &report);
    let started = Instant::now();
    let pod = patch(kubelet, &pod_path(), MERGE, &report).await;
    let took = started.elapsed();
    assert_eq!(pod.code, 200, "{}", pod.body);
    assert_eq!(
        as_stored(&pod.body["status"]["volumeHealth"]),
        expected,
        "the pod at the bound is not stored as the library repairs it"
    );
    eprintln!(
        "at the bound: 64 entries of one volume merged, stored in {} ms",
        took.as_millis()
    );
}

/// Past the bound the policies leave a write to in-tree validation: a claim report of 10,000
/// conditions is refused (422) with the policies bound as without them, and costs the
/// apiserver no more. Five writes each way, alternated; the medians are printed.
async fn past_the_bound(cluster: &Cluster, admin: &kube::Client, kubelet: &kube::Client) {
    let report = many_conditions(10_000, "slow");
    let (mut bound, mut unbound) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for with in [true, false] {
            if !with {
                unbind_repair_policies(cluster, admin, kubelet).await;
            }
            let started = Instant::now();
            let claim = patch(admin, &claim_path(), MERGE, &report).await;
            let took = started.elapsed();
            assert_eq!(claim.code, 422, "{}", claim.body);
            if with {
                bound.push(took);
            } else {
                unbound.push(took);
                create_all(cluster, &policies::repair_bindings()).await;
                await_repair_policies(admin, kubelet, true).await;
            }
        }
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (with, without) = (median(&mut bound), median(&mut unbound));
    eprintln!(
        "past the bound: 10,000 conditions refused in {} ms (median) with the policies bound, \
         {} ms without",
        with.as_millis(),
        without.as_millis()
    );
    // The policies stop at a size: their share is far below the write's own cost.
    assert!(
        with < without * 2,
        "the bound policies cost {with:?} against {without:?}"
    );
}

async fn create_all(cluster: &Cluster, objects: &[Value]) {
    for object in objects {
        cluster.create_policy(object).await.unwrap();
    }
}

/// The repair bindings deleted, then awaited gone.
async fn unbind_repair_policies(cluster: &Cluster, admin: &kube::Client, kubelet: &kube::Client) {
    for binding in policies::repair_bindings() {
        cluster.delete_policy(&binding).await.unwrap();
    }
    await_repair_policies(admin, kubelet, false).await;
}

/// The repair policies and their bindings created, then awaited.
async fn bind_repair_policies(cluster: &Cluster, admin: &kube::Client, kubelet: &kube::Client) {
    create_all(cluster, &policies::repair_policies()).await;
    create_all(cluster, &policies::repair_bindings()).await;
    await_repair_policies(admin, kubelet, true).await;
}

/// A write of each resource that only repair changes, sent as a dry run until all three come
/// back repaired (`bound`) or all three as in-tree answers them. The apiserver's informers
/// take each policy and binding on its own, so one resource's answer says nothing of the
/// others'; a dry run leaves the stored objects alone.
async fn await_repair_policies(admin: &kube::Client, kubelet: &kube::Client, bound: bool) {
    let dry = |path: String| format!("{path}?dryRun=All");
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let claim = patch(admin, &dry(claim_path()), MERGE, &long_message()).await;
        let pod = patch(
            kubelet,
            &dry(pod_path()),
            STRATEGIC,
            &terminated_with_duplicates(),
        )
        .await;
        let node = patch(kubelet, &dry(node_path()), MERGE, &indistinct()).await;
        // Each probe: repaired (true), answered as in-tree answers it (false), or neither.
        let refused_unless_repaired = |code: u16| match code {
            200 => Some(true),
            422 => Some(false),
            _ => None,
        };
        let node_state = match node.body["status"]["storageHealth"][0]["healthConditions"]
            .as_array()
            .map(Vec::len)
        {
            Some(1) if node.code == 200 => Some(true),
            Some(2) if node.code == 200 => Some(false),
            _ => None,
        };
        let states = [
            refused_unless_repaired(claim.code),
            refused_unless_repaired(pod.code),
            node_state,
        ];
        if states.iter().all(|&state| state == Some(bound)) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the repair policies never answered all three writes as {}: claim {}, pod {}, \
             CSINode {}",
            if bound { "bound" } else { "unbound" },
            claim.body,
            pod.body,
            node.body
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The claim, the pod bound to the node and the node's CSINode the suites write.
async fn create_objects(admin: &kube::Client, kubelet: &kube::Client) -> anyhow::Result<()> {
    create_namespace(admin, NS).await?;
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
    Ok(())
}

/// The control plane, its admin and the node's kubelet, and the objects they write. The
/// repair entries are installed; the server starts with repair off.
async fn setup() -> anyhow::Result<(ControlPlane, kube::Client, kube::Client)> {
    let plane = ControlPlane::start(true, &[(REPAIR_ENV, "false")]).await?;
    eprintln!("logs in {}", plane.cluster.dir().display());
    let admin = plane.cluster.client(Identity::Admin).await?;
    let kubelet = plane.cluster.client(Identity::Node(NODE)).await?;
    create_objects(&admin, &kubelet).await?;
    Ok((plane, admin, kubelet))
}

/// etcd and kube-apiserver alone (the in-tree gate on, Node and RBAC authorization), their
/// admin and the node's kubelet, and the objects they write; no webhook, no policy yet.
async fn setup_policies() -> anyhow::Result<(Cluster, kube::Client, kube::Client)> {
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir()?, options).await?;
    eprintln!("logs in {}", cluster.dir().display());
    let admin = cluster.client(Identity::Admin).await?;
    let kubelet = cluster.client(Identity::Node(NODE)).await?;
    create_objects(&admin, &kubelet).await?;
    Ok((cluster, admin, kubelet))
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

/// With repair, kubernetes#142280's pod report: stored with the container state, repaired.
async fn repaired_pod(repairer: Repairer<'_>, kubelet: &kube::Client) {
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
    repairer
        .told(
            &pod,
            "status.volumeHealth repaired (1)",
            "pods",
            "duplicate_condition",
            1.0,
        )
        .await;
}

/// With repair, the CSINode report of two conditions the kubelet cannot tell apart: stored
/// repaired.
async fn repaired_node(repairer: Repairer<'_>, kubelet: &kube::Client) {
    let node = patch(kubelet, &node_path(), MERGE, &indistinct()).await;
    assert_eq!(node.code, 200, "{}", node.body);
    let conditions = node.body["status"]["storageHealth"][0]["healthConditions"]
        .as_array()
        .unwrap();
    assert_eq!(conditions.len(), 1, "{}", node.body);
    assert_eq!(conditions[0]["message"], "one");
    repairer
        .told(
            &node,
            "status.storageHealth repaired (1)",
            "csinodes",
            "indistinct_condition",
            1.0,
        )
        .await;
}

/// With repair, the claim report with a 1,500-byte message: stored cut.
async fn repaired_claim(repairer: Repairer<'_>, admin: &kube::Client) {
    let claim = patch(admin, &claim_path(), MERGE, &long_message()).await;
    assert_eq!(claim.code, 200, "{}", claim.body);
    let message = claim.body["status"]["healthStatus"]["healthConditions"][0]["message"]
        .as_str()
        .unwrap();
    assert_eq!(message.len(), 1024);
    repairer
        .told(
            &claim,
            "message cut",
            "persistentvolumeclaims",
            "message_cut",
            1.0,
        )
        .await;
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

/// Healthy writers' writes are stored as they are sent, with no warning; behind the webhook
/// they cost no repair review: changed valid reports, a container state.
async fn healthy_writers(repairer: Repairer<'_>, admin: &kube::Client, kubelet: &kube::Client) {
    let mutate = [r#"endpoint="mutate""#];
    let reviews = async || match repairer {
        Repairer::Webhook(plane) => {
            metric(plane, "volume_health_webhook_requests_total", &mutate).await
        }
        Repairer::Policies => 0.0,
    };
    let before = reviews().await;
    let pod_report = json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
        {"status": "Degraded", "reason": "IOPSThrottled", "message": "still"}]}]}});
    let node_report = json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": [
        {"status": "StorageUnreachable", "reason": "PoolGone"}]}]}});
    let claim_report = json!({"status": {"healthStatus": {"healthConditions": [
        {"status": "Degraded", "reason": "VolumeSlow", "message": "slow"}]}}});
    let healthy = [
        (
            kubelet,
            pod_path(),
            STRATEGIC,
            pod_report,
            "/status/volumeHealth",
        ),
        (
            kubelet,
            pod_path(),
            STRATEGIC,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            "/status/volumeHealth",
        ),
        (
            kubelet,
            node_path(),
            MERGE,
            node_report,
            "/status/storageHealth",
        ),
        (
            admin,
            claim_path(),
            MERGE,
            claim_report,
            "/status/healthStatus",
        ),
    ];
    let mut last: Option<Value> = None;
    for (client, path, content_type, body, field) in &healthy {
        let answer = patch(client, path, content_type, body).await;
        assert_eq!(answer.code, 200, "{path}: {}", answer.body);
        assert!(answer.warnings.is_empty(), "{path}: {:?}", answer.warnings);
        // The report as sent, or, for the container state, the report before it.
        let sent = body.pointer(field).cloned().or_else(|| last.clone());
        assert_eq!(
            answer.body.pointer(field).map(as_stored),
            sent.as_ref().map(as_stored),
            "{path}: a healthy report was changed"
        );
        last = answer.body.pointer(field).cloned();
    }
    assert_eq!(
        reviews().await - before,
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

/// The claim's `healthConditions` as the library repairs `report` over `stored`, as stored.
fn expected_claim(stored: &PersistentVolumeClaim, report: &Value) -> Value {
    let mut claim = serde_json::to_value(stored).unwrap();
    claim["status"]["healthStatus"] = report["status"]["healthStatus"].clone();
    let mut expected: PersistentVolumeClaim = serde_json::from_value(claim).unwrap();
    repair_pvc(&mut expected, Some(stored));
    as_stored(
        &serde_json::to_value(&expected).unwrap()["status"]["healthStatus"]["healthConditions"],
    )
}

/// The pod's `volumeHealth` as the library repairs `report` over `stored`, as stored.
fn expected_pod(stored: &Pod, report: &Value) -> Value {
    let mut pod = serde_json::to_value(stored).unwrap();
    pod["status"]["volumeHealth"] = report["status"]["volumeHealth"].clone();
    let mut expected: Pod = serde_json::from_value(pod).unwrap();
    repair_pod(&mut expected, Some(stored));
    as_stored(&serde_json::to_value(&expected).unwrap()["status"]["volumeHealth"])
}

/// Conditions of a claim or a pod entry, valid and not.
fn volume_conditions(rng: &mut Rng, count: usize) -> Vec<Value> {
    (0..count)
        .map(|_| {
            json!({"status": rng.pick(&["Degraded", "DataLoss", "Inaccessible", "Unknown"]),
                "reason": rng.pick(&["Slow", "Gone", "Slow", "bad reason", "A:B", "9Lives"]),
                "message": message(rng)})
        })
        .collect()
}

/// Reports of the shapes writers send, valid and not, written with repair on through the real
/// apiserver: every one is stored, and stored exactly as the library repairs it against the
/// stored object. Merge patches, which replace the whole list.
async fn generated(admin: &kube::Client, kubelet: &kube::Client) {
    let seed = seeded::seed();
    eprintln!("generated reports: seed {seed} (VOLUME_HEALTH_E2E_SEED replays it)");
    let mut rng = Rng::new(seed);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    // The Node authorizer lets a kubelet read a pod, not its status subresource.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let nodes: Api<CSINode> = Api::all(kubelet.clone());
    let (mut repaired, rounds) = (0, 60);
    for round in 0..rounds {
        let context = format!("seed {seed}, round {round}");
        // A claim report.
        let count = rng.below(20);
        let report = json!({"status": {"healthStatus": {"healthConditions": volume_conditions(&mut rng, count)}}});
        let stored = claims.get_status("claim").await.unwrap();
        let expected = expected_claim(&stored, &report);
        repaired += usize::from(
            expected != as_stored(&report["status"]["healthStatus"]["healthConditions"]),
        );
        let answer = patch(admin, &claim_path(), MERGE, &report).await;
        assert_eq!(answer.code, 200, "{context}: {report}: {}", answer.body);
        assert_eq!(
            as_stored(&answer.body["status"]["healthStatus"]["healthConditions"]),
            expected,
            "{context}: the claim is not stored as the library repairs it"
        );

        // A pod report: entries of the pod's volume, twice at times, of no volume and unnamed.
        let entries: Vec<Value> = (0..rng.below(4))
            .map(|_| {
                let count = rng.below(10);
                let mut entry = json!({"healthConditions": volume_conditions(&mut rng, count)});
                let name = rng.pick(&["vol", "vol", "gone", ""]);
                if !name.is_empty() {
                    entry["name"] = json!(name);
                }
                entry
            })
            .collect();
        let report = json!({"status": {"volumeHealth": entries}});
        let stored = pods.get_status("web-0").await.unwrap();
        let expected = expected_pod(&stored, &report);
        repaired += usize::from(expected != as_stored(&report["status"]["volumeHealth"]));
        let answer = patch(kubelet, &pod_path(), MERGE, &report).await;
        assert_eq!(answer.code, 200, "{context}: {report}: {}", answer.body);
        assert_eq!(
            as_stored(&answer.body["status"]["volumeHealth"]),
            expected,
            "{context}: the pod is not stored as the library repairs it"
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
        3 * rounds
    );
    assert!(
        repaired > rounds,
        "the generator made too few reports to repair"
    );
}
