//! Native mode on a real kube-apiserver v1.37.2 and etcd with `CSIVolumeHealth` on and no
//! webhook: only the generated policies installed, and kube-controller-manager's admission-policy
//! status controller type-checking them. Each write of the project's own rules gets the
//! library's decision, code and message (inside the apiserver's wrapper), also as a `Warn`
//! binding's warning and an `Audit` binding's audit annotation; a message over 5 KiB is the
//! policy's cut of the library's; a node's write of a claim's health is refused by
//! NodeRestriction first; with drop on save bound, each resource's stored object is the
//! webhook's patch applied; the storage condition identity rule stays within its cost budget
//! for the largest CSINode the apiserver stores. Slow, so ignored: `make e2e` builds the
//! binaries and runs it with `--ignored`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

// Shared with e2e.rs, which uses all of it.
#[allow(dead_code)]
mod e2e_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use volume_health_policies::{self as policies, Action};
use volume_health_tests::without_nulls;
use volume_health_validation::restriction::RestrictionPolicy;
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::{AdmissionRequest, HealthResource, Operation, Settings, UserInfo};

use e2e_support::{Answer, Replay};
use volume_health_tests::cluster::{
    Cluster, ClusterOptions, ControllerManager, NAMESPACE_CONTROLLER, POLICY_STATUS_CONTROLLER,
    PV_BINDER_CONTROLLER, bin_dir, policy_collection,
};
use volume_health_tests::phases::Phases;

/// The writer list of the suite, as `--pvc-health-writers` and the param list it.
const WRITERS: &[&str] = &[
    "system:admin",
    "alice",
    "system:serviceaccount:kube-system:monitor",
];

/// The largest CSINode status the identity rule must check within budget: drivers with 16
/// shortest valid conditions each, every entry changed, stored with no duplicate and refused
/// with one at the very end (so a skipped check shows). The bisection finds the largest count
/// the apiserver stores (1,400 on kube-apiserver v1.37.2 beside etcd's default request limit:
/// one more and etcd refuses the request); the suite fails when it finds fewer.
const COST_FLOOR_ENTRIES: usize = 1400;
/// As [`COST_FLOOR_ENTRIES`] for drivers whose 16 conditions share one 256-byte reason, so
/// that every condition is compared field by field (274 found on the same apiserver and etcd).
const COST_FLOOR_LONG_REASON_ENTRIES: usize = 274;
/// How long a write of the largest CSINode may take, the policies evaluated.
const FLOOR_TIME: Duration = Duration::from_secs(10);

async fn create(cluster: &Cluster, object: &Value) {
    let path = match object["kind"].as_str().unwrap() {
        "ConfigMap" => format!(
            "/api/v1/namespaces/{}/configmaps",
            object["metadata"]["namespace"].as_str().unwrap()
        ),
        "Namespace" => "/api/v1/namespaces".to_owned(),
        "CSINode" => "/apis/storage.k8s.io/v1/csinodes".to_owned(),
        "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(),
        "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_owned(),
        kind => policy_collection(kind),
    };
    let (code, body) = cluster
        .api
        .send(Method::POST, &path, Some(object), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "creating {}: {body}", object["metadata"]["name"]);
}

/// The library's answer with the suite's settings: the writer list, the identity rule on.
fn library(replay: &Replay) -> Answer {
    let user_json = replay.user.to_string();
    let user: UserInfo<'_> = serde_json::from_str(&user_json).unwrap();
    let raw = |v: &Option<Value>| {
        v.as_ref()
            .map(|v| serde_json::value::to_raw_value(v).unwrap())
    };
    let (object, old_object): (Option<Box<RawValue>>, _) =
        (raw(&replay.object), raw(&replay.old_object));
    let request = AdmissionRequest::new(replay.resource, replay.operation)
        .with_subresource(replay.subresource.as_str())
        .with_name(replay.name())
        .with_user(user)
        .with_objects(object.as_deref(), old_object.as_deref());
    let policy = Settings {
        restriction: RestrictionPolicy {
            gate_enabled: true,
            pvc_health_writers: Some(
                WRITERS
                    .iter()
                    .map(|w| (*w).to_owned())
                    .collect::<HashSet<_>>(),
            ),
        },
        storage_condition_identity: ConditionIdentity::Unique,
        error_limit: None,
    };
    match request.validate(&policy).unwrap().status() {
        None => Answer::Allowed,
        Some(status) => {
            let status = serde_json::to_value(status).unwrap();
            Answer::Denied {
                code: status["code"].as_i64().unwrap(),
                message: status["message"].as_str().unwrap().to_owned(),
                causes: Vec::new(),
            }
        }
    }
}

/// The library's answer as the apiserver reports a policy's denial: wrapped, one cause (its
/// message, no field).
fn wrapped(replay: &Replay, library: &Answer) -> Answer {
    let Answer::Denied { code, message, .. } = library else {
        return Answer::Allowed;
    };
    let policy = match replay.resource {
        HealthResource::CsiNodes => policies::storage_condition_identity_name(),
        _ => policies::pvc_health_writers_name(),
    };
    let binding = policies::binding_name(&policy, Action::Deny);
    Answer::Denied {
        code: *code,
        causes: vec![format!(
            ": ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}"
        )],
        message: format!(
            "{} \"{}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}",
            replay.resource.qualified_resource(),
            replay.name()
        ),
    }
}

fn csinode(name: &str, storage: Value) -> Value {
    let mut node = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1"}]}});
    if !storage.is_null() {
        node["status"] = json!({"storageHealth": storage});
    }
    node
}

fn claim(name: &str, health: Value) -> Value {
    let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if !health.is_null() {
        claim["status"] = json!({"healthStatus": health});
    }
    claim
}

fn cond(status: &str, reason: &str, extra: Value) -> Value {
    let mut c = json!({"status": status, "reason": reason});
    if let Value::Object(extra) = extra {
        c.as_object_mut().unwrap().extend(extra);
    }
    c
}

fn user(name: &str) -> Value {
    json!({"username": name, "groups": ["system:authenticated"]})
}

/// Writes of the project's own rules: storage condition identity (CSINode status) and the claim
/// health writers (PVC status).
fn requests() -> Vec<Replay> {
    let admin = || user("system:admin");
    let deg = |reason: &str, extra: Value| cond("StorageDegraded", reason, extra);
    let entry =
        |name: &str, conditions: Vec<Value>| json!({"name": name, "healthConditions": conditions});
    let status_write = |id: &str, new: Value, old: Option<Value>| {
        Replay::new(
            id.to_owned(),
            HealthResource::CsiNodes,
            Operation::Update,
            "status".to_owned(),
            admin(),
            Some(csinode("node1", new)),
            Some(csinode("node1", old.unwrap_or(Value::Null))),
        )
    };
    let rwo = json!({"accessMode": "ReadWriteOnce"});
    let rox = json!({"accessMode": "ReadOnlyMany"});
    let dup = || {
        vec![
            deg("HighLatency", json!({})),
            deg("HighLatency", json!({"message": "again"})),
        ]
    };
    let mut out = vec![
        status_write(
            "identity: same four fields",
            json!([entry("csi.example.com", dup())]),
            None,
        ),
        status_write(
            "identity: another access mode",
            json!([entry(
                "csi.example.com",
                vec![deg("HighLatency", rwo.clone()), deg("HighLatency", rox)]
            )]),
            None,
        ),
        status_write(
            "identity: access mode set and unset",
            json!([entry(
                "csi.example.com",
                vec![
                    deg("HighLatency", rwo.clone()),
                    deg("HighLatency", json!({}))
                ]
            )]),
            None,
        ),
        status_write(
            "identity: both modes the same",
            json!([entry(
                "csi.example.com",
                vec![
                    deg(
                        "Slow",
                        json!({"accessMode": "ReadWriteMany", "volumeMode": "Block"})
                    ),
                    cond("StorageUnreachable", "Slow", json!({})),
                    deg(
                        "Slow",
                        json!({"accessMode": "ReadWriteMany", "volumeMode": "Block", "lastTransitionTime": "2026-12-01T10:00:00Z"})
                    ),
                ]
            )]),
            None,
        ),
        status_write(
            "identity: two drivers, a duplicate each",
            json!([
                entry("a.example.com", dup()),
                entry(
                    "b.example.com",
                    vec![
                        deg("X", json!({})),
                        deg("Y", json!({})),
                        deg("X", json!({}))
                    ]
                )
            ]),
            None,
        ),
        status_write(
            "identity: a message JSON escapes",
            json!([entry(
                "csi.example.com",
                vec![
                    deg("R:1,2", json!({})),
                    deg(
                        "R:1,2",
                        json!({"message": "a<b>&\"c\\d\te\u{1}f\u{2028}é😀"})
                    )
                ]
            )]),
            None,
        ),
        status_write(
            "identity: ratcheted, the stored entry unchanged",
            json!([
                entry("a.example.com", dup()),
                entry("b.example.com", vec![deg("X", json!({}))])
            ]),
            Some(json!([entry("a.example.com", dup())])),
        ),
        status_write(
            "identity: ratcheted, the stored entry changed",
            json!([entry(
                "a.example.com",
                vec![
                    deg("HighLatency", json!({"message": "new"})),
                    deg("HighLatency", json!({}))
                ]
            )]),
            Some(json!([entry("a.example.com", dup())])),
        ),
        status_write(
            "identity: the entry moved, unchanged",
            json!([
                entry("b.example.com", vec![deg("X", json!({}))]),
                entry("a.example.com", dup())
            ]),
            Some(json!([
                entry("a.example.com", dup()),
                entry("b.example.com", vec![deg("Y", json!({}))])
            ])),
        ),
        status_write(
            "identity: one condition",
            json!([entry("csi.example.com", vec![deg("X", json!({}))])]),
            None,
        ),
    ];
    let health =
        |reason: &str| json!({"healthConditions": [{"status": "Degraded", "reason": reason}]});
    let claim_write = |id: &str, by: Value, new: Value, old: Value| {
        Replay::new(
            id.to_owned(),
            HealthResource::PersistentVolumeClaims,
            Operation::Update,
            "status".to_owned(),
            by,
            Some(claim("claim", new)),
            Some(claim("claim", old)),
        )
    };
    out.extend([
        claim_write("writers: a listed user adds", user("alice"), health("DiskSlow"), Value::Null),
        claim_write("writers: another user adds", user("bob"), health("DiskSlow"), Value::Null),
        claim_write("writers: another user changes", user("bob"), health("DiskFull"), health("DiskSlow")),
        claim_write("writers: another user removes", user("bob"), Value::Null, health("DiskSlow")),
        claim_write("writers: another user keeps it", user("bob"), health("DiskSlow"), health("DiskSlow")),
        claim_write("writers: a name Go quotes", user("b\"o\\b"), health("DiskSlow"), Value::Null),
        claim_write(
            "writers: a service account",
            json!({"username": "system:serviceaccount:kube-system:monitor", "groups": ["system:serviceaccounts"]}),
            health("DiskSlow"),
            Value::Null,
        ),
    ]);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, kube-controller-manager and etcd: `make e2e`"]
async fn native_policies_answer_as_the_webhooks() {
    // Each phase is bounded: a hung step fails its phase instead of holding CI.
    let mut phases = Phases::new("e2e_policies", Duration::from_secs(180));
    let started = phases
        .phase("control plane")
        .run(async {
            let bin = bin_dir()?;
            let options = ClusterOptions {
                in_tree_gate: true,
                authorizer: None,
            };
            let cluster = Cluster::start(&bin, options).await?;
            eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());
            // The PV controller writes claim status, which no policy may refuse; the
            // namespace controller finishes an uninstall's namespace deletion.
            let controller = ControllerManager::start_with(
                &cluster,
                &bin,
                &[
                    POLICY_STATUS_CONTROLLER,
                    PV_BINDER_CONTROLLER,
                    NAMESPACE_CONTROLLER,
                ],
            )?;
            anyhow::Ok((cluster, controller))
        })
        .await;
    let Some((cluster, mut controller)) = started else {
        return phases.finish();
    };
    let cluster = &cluster;

    phases
        .phase("policies installed")
        .run(install(cluster))
        .await;
    phases
        .phase("type checking")
        .after("policies installed")
        .run(type_checking(cluster, &mut controller))
        .await;
    phases
        .phase("policies enforced")
        .after("policies installed")
        .run(wait_enforced(cluster))
        .await;
    phases
        .phase("requests compared")
        .after("policies enforced")
        .run(compare(cluster))
        .await;
    phases
        .phase("writer list in the policy")
        .after("policies enforced")
        .run(writer_list_in_the_policy(cluster))
        .await;
    phases
        .phase("PV controller after an uninstall")
        .after("policies enforced")
        .run(pv_controller_after_an_uninstall(cluster))
        .await;
    phases
        .phase("node writes claim health")
        .after("policies installed")
        .run(node_writes_claim_health(cluster))
        .await;
    phases
        .phase("long messages")
        .after("policies enforced")
        .run(long_messages(cluster))
        .await;
    // The bisection writes a dozen objects of up to 1.5 MiB.
    let floor_time = Duration::from_secs(300);
    phases
        .phase("cost floor, shortest")
        .after("policies enforced")
        .timeout(floor_time)
        .run(cost_floor(cluster, Floor::Shortest))
        .await;
    // Each shape creates the floor's CSINode, which the one before deletes at its end.
    phases
        .phase("cost floor, long reasons")
        .after("cost floor, shortest")
        .timeout(floor_time)
        .run(cost_floor(cluster, Floor::LongReasons))
        .await;
    phases
        .phase("warn and audit")
        .after("policies enforced")
        .run(warn_and_audit(cluster))
        .await;
    // Its claims' status writes need the suite's writer list, which
    // writer_list_in_the_policy restores.
    phases
        .phase("drop on save")
        .after("writer list in the policy")
        .run(drop_on_save(cluster))
        .await;
    phases
        .phase("controller manager running")
        .run(async { controller.check_running() })
        .await;
    phases.finish();
}

/// RBAC that lets every user write claim status, and the generated policies, with the suite's
/// writer list, and their Deny bindings.
async fn install(cluster: &Cluster) {
    // RBAC lets every user write claim status: the policy, not the authorizer, answers.
    create(
        cluster,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "claim-status-writer"},
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
            "verbs": ["get", "update", "patch"]}]}),
    )
    .await;
    create(cluster, &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "claim-status-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "claim-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]})).await;
    for object in policies::policies(WRITERS)
        .iter()
        .chain(&policies::bindings(Action::Deny))
    {
        create(cluster, object).await;
    }
}

/// Each write of [`requests`] gets the library's answer, wrapped as the apiserver reports a
/// policy's denial.
async fn compare(cluster: &Cluster) {
    let (mut agree, mut differ) = (0, Vec::new());
    let requests = requests();
    for (index, replay) in requests.iter().enumerate() {
        let want = wrapped(replay, &library(replay));
        let got = replay.apiserver(cluster, index).await.unwrap();
        if got == want {
            agree += 1;
            eprintln!("ok   {}", replay.id);
        } else {
            eprintln!(
                "DIFF {}\n     apiserver {got:?}\n     library   {want:?}",
                replay.id
            );
            differ.push(replay.id.clone());
        }
    }
    eprintln!(
        "{} requests compared: {agree} agree, {} differ",
        requests.len(),
        differ.len()
    );
    assert!(differ.is_empty(), "policy answers differ: {differ:?}");
    assert!(
        requests.iter().any(|r| library(r) != Answer::Allowed),
        "some request is refused"
    );
}

/// Waits for the status controller's type checking of every validating policy and fails on any
/// warning.
async fn type_checking(cluster: &Cluster, controller: &mut ControllerManager) {
    let names = [
        policies::storage_condition_identity_name(),
        policies::pvc_health_writers_name(),
    ];
    let give_up = Instant::now() + Duration::from_secs(120);
    for name in names {
        loop {
            controller.check_running().unwrap();
            let path = format!("{}/{name}", policy_collection("ValidatingAdmissionPolicy"));
            let (_, policy) = cluster
                .api
                .send(Method::GET, &path, None, None)
                .await
                .unwrap();
            let checking = &policy["status"]["typeChecking"];
            if !checking.is_null() {
                let warnings = checking["expressionWarnings"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                eprintln!("type checking of {name}: {} warnings", warnings.len());
                assert!(warnings.is_empty(), "{name}: {warnings:#?}");
                break;
            }
            assert!(
                Instant::now() < give_up,
                "{name} was never type-checked: {policy}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Waits until the apiserver enforces the policies: their objects reach it through a watch.
async fn wait_enforced(cluster: &Cluster) {
    let probe = &requests()[0];
    let want = wrapped(probe, &library(probe));
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 1000.. {
        let got = probe.apiserver(cluster, round).await.unwrap();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the policies were never enforced: {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The shapes of the largest CSINode status.
#[derive(Clone, Copy, Debug)]
enum Floor {
    /// 16 shortest valid conditions a driver, their reasons one letter each, all different:
    /// the most drivers that fit.
    Shortest,
    /// 16 conditions a driver with one 256-byte reason, told apart by status and modes: every
    /// condition's reason repeats an earlier one's, so each is compared field by field.
    LongReasons,
}

impl Floor {
    /// The count of drivers at least as large as the largest stored object of this shape (the
    /// suite fails when it finds fewer).
    fn entries(self) -> usize {
        match self {
            Floor::Shortest => COST_FLOOR_ENTRIES,
            Floor::LongReasons => COST_FLOOR_LONG_REASON_ENTRIES,
        }
    }
}

/// A CSINode status of `entries` drivers of `shape` with the shortest valid names, the
/// reasons starting at letter `offset` (so that two offsets differ in every condition); with
/// `last_duplicate`, the last driver's last condition repeats the one before it.
fn floor_health(shape: Floor, entries: usize, offset: usize, last_duplicate: bool) -> Value {
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let letter = |k: usize| LETTERS[k % LETTERS.len()] as char;
    let name = |i: usize| -> String {
        let n = ALNUM.len();
        let mut name = Vec::new();
        let (mut i, mut width) = (i, 1);
        while i >= n.pow(width) {
            i -= n.pow(width);
            width += 1;
        }
        for _ in 0..width {
            name.push(ALNUM[i % n]);
            i /= n;
        }
        String::from_utf8(name).unwrap()
    };
    let condition = |j: usize| -> Value {
        match shape {
            Floor::Shortest => {
                json!({"status": "StorageDegraded", "reason": letter(j + offset).to_string()})
            }
            Floor::LongReasons => {
                let status = ["StorageDegraded", "StorageUnreachable"][j / 8];
                let mut c =
                    json!({"status": status, "reason": letter(offset).to_string().repeat(256)});
                let access = [
                    None,
                    Some("ReadWriteOnce"),
                    Some("ReadOnlyMany"),
                    Some("ReadWriteMany"),
                ];
                if let Some(mode) = access[j % 4] {
                    c["accessMode"] = json!(mode);
                }
                if let Some(mode) = [None, Some("Block")][(j / 4) % 2] {
                    c["volumeMode"] = json!(mode);
                }
                c
            }
        }
    };
    (0..entries)
        .map(|i| {
            let mut conditions: Vec<Value> = (0..16).map(condition).collect();
            if last_duplicate && i == entries - 1 {
                conditions[15] = conditions[14].clone();
            }
            json!({"name": name(i), "healthConditions": conditions})
        })
        .collect()
}

/// The name of the cost floor's CSINode.
const FLOOR_NODE: &str = "floor";

/// Writes the floor's status ([`floor_health`]) over the stored one: the answer, its time, the
/// old object and the object written.
async fn put_floor(
    cluster: &Cluster,
    shape: Floor,
    entries: usize,
    offset: usize,
    last_duplicate: bool,
    reversed: bool,
) -> (u16, Value, Duration, Value, Value) {
    let api = &cluster.api;
    let path = format!("/apis/storage.k8s.io/v1/csinodes/{FLOOR_NODE}");
    let (code, old) = api.send(Method::GET, &path, None, None).await.unwrap();
    assert_eq!(code, 200, "{old}");
    let mut new = old.clone();
    let mut health = floor_health(shape, entries, offset, last_duplicate);
    if reversed {
        health.as_array_mut().unwrap().reverse();
    }
    new["status"] = json!({"storageHealth": health});
    let started = Instant::now();
    let (code, body) = api
        .send(Method::PUT, &format!("{path}/status"), Some(&new), None)
        .await
        .unwrap();
    (code, body, started.elapsed(), old, new)
}

/// Whether an answer is the store refusing an object over its size limits: etcd's request
/// limit, or the apiserver's etcd client's message limit (2 MiB) before it.
fn too_large(code: u16, body: &Value) -> bool {
    let message = body["message"].as_str().unwrap_or_default();
    code == 413
        || message.contains("etcdserver: request is too large")
        || message.contains("trying to send message larger than max")
}

/// The storage condition identity rule within its cost budget for the largest CSINode the
/// apiserver stores: in-tree validation bounds each driver's conditions (16) but not the
/// drivers, so the store's request limit (etcd's default, 1.5 MiB; the suite's etcd sets none)
/// is the bound. The largest count of drivers with 16 shortest valid conditions each whose
/// status is stored, every entry changed against the stored one, is found by bisection with
/// the policy bound; at that size a write with no duplicate is stored, and one with a duplicate
/// in the last driver gets the library's answer, each within [`FLOOR_TIME`].
async fn cost_floor(cluster: &Cluster, shape: Floor) {
    create(cluster, &csinode(FLOOR_NODE, Value::Null)).await;
    let put = |entries, offset, last_duplicate| {
        put_floor(cluster, shape, entries, offset, last_duplicate, false)
    };
    // Bisection: `stored` drivers were stored, `refused` were over the store's limit.
    let floor = shape.entries();
    let (mut stored, mut refused) = (floor / 2, 2 * floor);
    let (code, body, ..) = put(refused, 0, false).await;
    assert!(too_large(code, &body), "{refused} drivers: {code} {body}");
    let mut offset = 0;
    while refused - stored > 1 {
        let entries = (stored + refused) / 2;
        offset += 1;
        let (code, body, took, ..) = put(entries, offset, false).await;
        eprintln!("cost floor {shape:?}: {entries} drivers: {code} in {took:?}");
        match code {
            200 => stored = entries,
            _ if too_large(code, &body) => refused = entries,
            _ => panic!("{entries} drivers, no duplicate: {code} {body}"),
        }
    }
    let largest = stored;
    // Stored at that size, then every entry changed: no duplicate, stored.
    let (code, body, ..) = put(largest, offset + 1, false).await;
    assert_eq!(code, 200, "{body}");
    let (code, body, took, old, new) = put(largest, offset + 2, false).await;
    let bytes = new.to_string().len();
    eprintln!(
        "cost floor {shape:?}: {largest} drivers x 16 conditions ({bytes} bytes), every entry changed, no duplicate: {code} in {took:?}"
    );
    assert_eq!(
        code, 200,
        "the largest object is checked within budget: {body}"
    );
    assert!(took < FLOOR_TIME, "{took:?}");
    // Then with one duplicate in the last driver: the library's answer, within budget.
    let (code, body, took, _, new) = put(largest, offset + 3, true).await;
    let replay = Replay::new(
        "cost floor".to_owned(),
        HealthResource::CsiNodes,
        Operation::Update,
        "status".to_owned(),
        user("system:admin"),
        Some(new),
        Some(old),
    );
    // The old object is the one stored before the write, as the apiserver passes it.
    let want = wrapped(&replay, &library(&replay));
    eprintln!(
        "cost floor {shape:?}: the same with a duplicate in the last driver: {code} in {took:?}"
    );
    assert_eq!(
        e2e_support::answer(code, &body),
        want,
        "the duplicate is found"
    );
    assert!(took < FLOOR_TIME, "{took:?}");
    // The entries in the reverse order, every one changed: none is at its old position, each
    // old entry is looked up by name.
    let (code, body, took, ..) = put_floor(cluster, shape, largest, offset + 4, false, true).await;
    eprintln!("cost floor {shape:?}: the same reversed, no duplicate: {code} in {took:?}");
    assert_eq!(code, 200, "looked up by name within budget: {body}");
    assert!(took < FLOOR_TIME, "{took:?}");
    assert!(
        largest >= floor,
        "the largest stored object of {shape:?} shrank: {largest} drivers, not {floor}"
    );
    // The next shape starts from a CSINode of its own.
    let path = format!("/apis/storage.k8s.io/v1/csinodes/{FLOOR_NODE}");
    let (code, body) = cluster
        .api
        .send(Method::DELETE, &path, None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    while cluster
        .api
        .send(Method::GET, &path, None, None)
        .await
        .unwrap()
        .0
        != 404
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
/// The member of `status` that is `resource`'s gated field.
fn status_field(resource: HealthResource) -> &'static str {
    let field = resource.gated_field();
    field.strip_prefix("status.").unwrap_or(field)
}

/// The collection of `resource`'s objects of the drop-on-save case, in namespace `ns`.
fn drop_collection(resource: HealthResource, ns: &str) -> String {
    match resource {
        HealthResource::Pods => format!("/api/v1/namespaces/{ns}/pods"),
        HealthResource::PersistentVolumeClaims => {
            format!("/api/v1/namespaces/{ns}/persistentvolumeclaims")
        }
        HealthResource::CsiNodes => "/apis/storage.k8s.io/v1/csinodes".to_owned(),
    }
}

/// An object of `resource` without its gated field, and two valid values of the field.
fn drop_object(resource: HealthResource, name: &str) -> (Value, Value, Value) {
    match resource {
        HealthResource::Pods => (
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}],
                    "volumes": [{"name": "vol", "emptyDir": {}}]}}),
            json!([{"name": "vol", "healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]}]),
            json!([{"name": "vol", "healthConditions": [
                {"status": "Degraded", "reason": "DiskFull", "message": "changed"}]}]),
        ),
        HealthResource::PersistentVolumeClaims => (
            claim(name, Value::Null),
            json!({"healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]}),
            json!({"healthConditions": [
                {"status": "Degraded", "reason": "DiskFull", "message": "changed"}]}),
        ),
        HealthResource::CsiNodes => (
            csinode(name, Value::Null),
            json!([{"name": "csi.example.com", "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolFull"}]}]),
            json!([{"name": "csi.example.com", "healthConditions": [
                {"status": "StorageUnreachable", "reason": "PoolGone", "message": "changed"}]}]),
        ),
    }
}

/// The object's name in the drop-on-save case: CSINodes are cluster-wide.
fn drop_name(resource: HealthResource, name: &str) -> String {
    format!("{}-{name}", resource.resource())
}

/// Creates an object of `resource` named `name`, with its gated field set to `value` through
/// the status subresource unless `value` is null; answers the stored object.
async fn create_with_field(
    cluster: &Cluster,
    resource: HealthResource,
    ns: &str,
    name: &str,
    value: &Value,
) -> Value {
    let api = &cluster.api;
    let collection = drop_collection(resource, ns);
    let (object, ..) = drop_object(resource, name);
    let (code, created) = api
        .send(Method::POST, &collection, Some(&object), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{created}");
    if value.is_null() {
        return created;
    }
    let mut status = created.clone();
    status["status"][status_field(resource)] = value.clone();
    let (code, stored) = api
        .send(
            Method::PUT,
            &format!("{collection}/{name}/status"),
            Some(&status),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code, 200, "{stored}");
    stored
}

/// Drop on save: with the mutating policies bound, each write's stored gated field is the
/// webhook's patch applied to what was written, for every resource: a new field dropped, a
/// stored one kept (and changed).
async fn drop_on_save(cluster: &Cluster) {
    let ns = "drop";
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    let api = &cluster.api;
    // Stored before the policies are bound: "in use".
    for resource in HealthResource::ALL {
        let (_, first, _) = drop_object(resource, "");
        for (name, with) in [("fresh", false), ("in-use", true)] {
            let value = if with { first.clone() } else { Value::Null };
            create_with_field(cluster, resource, ns, &drop_name(resource, name), &value).await;
        }
    }
    for binding in policies::drop_on_save_bindings() {
        create(cluster, &binding).await;
    }
    for resource in HealthResource::ALL {
        wait_dropping(cluster, resource, ns).await;
    }
    for resource in HealthResource::ALL {
        let field = status_field(resource);
        let collection = drop_collection(resource, ns);
        let (_, _, changed) = drop_object(resource, "");
        for case in ["fresh", "in-use"] {
            let name = drop_name(resource, case);
            let (_, current) = api
                .send(Method::GET, &format!("{collection}/{name}"), None, None)
                .await
                .unwrap();
            let mut new = current.clone();
            new["status"][field] = changed.clone();
            let object = serde_json::value::to_raw_value(&new).unwrap();
            let old = serde_json::value::to_raw_value(&current).unwrap();
            let request = AdmissionRequest::new(resource, Operation::Update)
                .with_subresource("status")
                .with_name(&name)
                .with_objects(Some(&object), Some(&old));
            let mut want = new.clone();
            let pointer = request
                .gated_field_to_drop(false)
                .unwrap()
                .map(|drop| drop.pointer());
            if pointer.is_some() {
                want["status"]
                    .as_object_mut()
                    .unwrap()
                    .remove(resource.gated_member());
            }
            let (code, stored) = api
                .send(
                    Method::PUT,
                    &format!("{collection}/{name}/status"),
                    Some(&new),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(code, 200, "{stored}");
            assert_eq!(
                without_nulls(&stored["status"][field]),
                without_nulls(&want["status"][field]),
                "drop on save {name}"
            );
            assert_eq!(
                pointer.is_some(),
                case == "fresh",
                "the webhook drops only the new field"
            );
            if case == "in-use" {
                assert_eq!(
                    without_nulls(&stored["status"][field]),
                    without_nulls(&changed),
                    "a field in use is written"
                );
            }
            eprintln!(
                "ok   drop on save: {} {case} ({})",
                resource.resource(),
                if pointer.is_some() { "dropped" } else { "kept" }
            );
        }
    }
}

/// Waits until the apiserver applies the drop-on-save binding of `resource`: a new value on
/// an object of its own is dropped.
async fn wait_dropping(cluster: &Cluster, resource: HealthResource, ns: &str) {
    let (_, first, _) = drop_object(resource, "");
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        // A new object each round: one stored before the binding applied has the field in use.
        let name = drop_name(resource, &format!("probe-{round}"));
        let stored = create_with_field(cluster, resource, ns, &name, &first).await;
        if stored["status"].get(status_field(resource)).is_none() {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "drop on save of {} was never applied",
            resource.resource()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Deletes the validating bindings with `from` and creates those with `to`.
async fn swap_bindings(cluster: &Cluster, from: Action, to: Action) {
    for binding in policies::bindings(from) {
        cluster.delete_policy(&binding).await.unwrap();
    }
    for binding in policies::bindings(to) {
        create(cluster, &binding).await;
    }
}

/// Replaces a stored policy or binding with `object`, as an apply would.
async fn replace(cluster: &Cluster, object: &Value) {
    let path = format!(
        "{}/{}",
        policy_collection(object["kind"].as_str().unwrap()),
        object["metadata"]["name"].as_str().unwrap()
    );
    let (code, current) = cluster
        .api
        .send(Method::GET, &path, None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{current}");
    let mut object = object.clone();
    object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (code, body) = cluster
        .api
        .send(Method::PUT, &path, Some(&object), None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
}

/// A write of the identity rule's CSINode `name` with two conditions of one identity, the
/// second with `message`: the replay of it against the stored object.
async fn duplicate_write(cluster: &Cluster, name: &str, message: &str) -> (Replay, Value) {
    let path = format!("/apis/storage.k8s.io/v1/csinodes/{name}");
    let (code, old) = cluster
        .api
        .send(Method::GET, &path, None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{old}");
    let mut new = old.clone();
    new["status"] = json!({"storageHealth": [{"name": "csi.example.com", "healthConditions": [
        cond("StorageDegraded", "HighLatency", json!({})),
        cond("StorageDegraded", "HighLatency", json!({"message": message}))]}]});
    let replay = Replay::new(
        format!("{name}: {message}"),
        HealthResource::CsiNodes,
        Operation::Update,
        "status".to_owned(),
        user("system:admin"),
        Some(new.clone()),
        Some(old),
    );
    (replay, new)
}

/// Go's quoting of a warning's text in a `Warning` header (`299 - "<text>"`).
fn warning_header(text: &str) -> String {
    format!(
        "299 - \"{}\"",
        text.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

/// The library's message of a denial.
fn library_message(replay: &Replay) -> String {
    match library(replay) {
        Answer::Denied { message, .. } => message,
        Answer::Allowed => panic!("{}: the library allows it", replay.id),
    }
}

/// The Warn bindings: the write is stored (200) and the library's message comes back in a
/// `Warning` header; then the Audit bindings: stored, no warning, and the apiserver's audit
/// log records the library's message for the write. The Deny bindings are restored after.
async fn warn_and_audit(cluster: &Cluster) {
    let name = "warned";
    create(cluster, &csinode(name, Value::Null)).await;
    let path = format!("/apis/storage.k8s.io/v1/csinodes/{name}/status");
    let identity = policies::storage_condition_identity_name();

    swap_bindings(cluster, Action::Deny, Action::Warn).await;
    let binding = policies::binding_name(&identity, Action::Warn);
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        // A new message each round: an entry equal to the stored one is not checked.
        let (replay, new) = duplicate_write(cluster, name, &format!("warn {round}")).await;
        let (code, warnings, body) = cluster
            .api
            .send_warned(Method::PUT, &path, Some(&new), None)
            .await
            .unwrap();
        if code == 200 && !warnings.is_empty() {
            let want = warning_header(&format!(
                "Validation failed for ValidatingAdmissionPolicy '{identity}' with binding '{binding}': {}",
                library_message(&replay)
            ));
            assert_eq!(warnings, vec![want], "the warning is the library's message");
            eprintln!("ok   warn binding: 200 with {}", warnings[0]);
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the Warn binding was never applied: {code} {warnings:?} {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    swap_bindings(cluster, Action::Warn, Action::Audit).await;
    let binding = policies::binding_name(&identity, Action::Audit);
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        let message = format!("audit {round}");
        let (replay, new) = duplicate_write(cluster, name, &message).await;
        let (code, warnings, body) = cluster
            .api
            .send_warned(Method::PUT, &path, Some(&new), None)
            .await
            .unwrap();
        assert!(
            code == 200 || code == 422,
            "{code} {body}: stored, or refused while the Warn binding's removal is not yet seen"
        );
        if code == 200 && warnings.is_empty() {
            let audit = audit_annotation(cluster, name, &message).await;
            if let Some(failures) = audit {
                let want = json!([{
                    "message": library_message(&replay),
                    "policy": identity,
                    "binding": binding,
                    "expressionIndex": 0,
                    "validationActions": ["Audit"],
                }]);
                assert_eq!(
                    failures, want,
                    "the audit annotation is the library's message"
                );
                eprintln!("ok   audit binding: 200, no warning, audit annotation {failures}");
                break;
            }
        }
        assert!(
            Instant::now() < give_up,
            "the Audit binding was never applied: {code} {warnings:?} {body}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    swap_bindings(cluster, Action::Audit, Action::Deny).await;
    wait_enforced(cluster).await;
}

/// The `validation.policy.admission.k8s.io/validation_failure` annotation of the audit event
/// of the status write of CSINode `name` whose request carried `message`, once it is logged.
async fn audit_annotation(cluster: &Cluster, name: &str, message: &str) -> Option<Value> {
    let key = "validation.policy.admission.k8s.io/validation_failure";
    for _ in 0..20 {
        let log = std::fs::read_to_string(cluster.audit_log()).unwrap_or_default();
        let mut events = log
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| {
                event["objectRef"]["name"] == name
                    && event["objectRef"]["subresource"] == "status"
                    && event["stage"] == "ResponseComplete"
            });
        // Metadata level has no request body: the event is the last write's.
        if let Some(event) = events.next_back() {
            let request_uri = event["requestURI"].as_str().unwrap_or_default().to_owned();
            assert!(request_uri.ends_with("/status"), "{event}");
            if let Some(failures) = event["annotations"][key].as_str() {
                let failures: Value = serde_json::from_str(failures).unwrap();
                if failures[0]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(message))
                {
                    return Some(failures);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// A node (the kubelet's identity) changing a claim's `status.healthStatus`: refused with
/// 403, as the library refuses it, but by NodeRestriction, which runs in the mutating phase,
/// before any validating policy (or webhook): its message, not the library's.
async fn node_writes_claim_health(cluster: &Cluster) {
    let health = json!({"healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]});
    let replay = Replay::new(
        "writers: a node adds".to_owned(),
        HealthResource::PersistentVolumeClaims,
        Operation::Update,
        "status".to_owned(),
        json!({"username": "system:node:node1", "groups": ["system:nodes", "system:authenticated"]}),
        Some(claim("claim", health)),
        Some(claim("claim", Value::Null)),
    );
    let library = library(&replay);
    let got = replay.apiserver(cluster, 3000).await.unwrap();
    eprintln!(
        "node writes a claim's healthStatus:\n     apiserver {got:?}\n     library   {library:?}"
    );
    assert_eq!(library.code(), Some(403), "the library refuses the node");
    assert_eq!(got.code(), Some(403), "the apiserver refuses the node");
    assert!(
        library
            .message()
            .ends_with("node \"node1\" is not allowed to update status.healthStatus"),
        "{library:?}"
    );
    assert!(
        got.message().contains(
            "is not allowed to update fields other than status.quantity and status.conditions"
        ),
        "NodeRestriction answers first: {got:?}"
    );
}

/// A change of a claim's health by `username`, in a namespace of its own (`index`).
fn claim_health_write(username: &str) -> Replay {
    let health = json!({"healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]});
    Replay::new(
        format!("writers: {username} adds"),
        HealthResource::PersistentVolumeClaims,
        Operation::Update,
        "status".to_owned(),
        user(username),
        Some(claim("claim", health)),
        Some(claim("claim", Value::Null)),
    )
}

/// Writes `replay` (each round in a new namespace from `index`) until `done` holds for the
/// answer, which the apiserver's policy informers reach through a watch.
async fn answer_until(
    cluster: &Cluster,
    replay: &Replay,
    index: &mut usize,
    what: &str,
    done: impl Fn(&Answer) -> bool,
) -> Answer {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        *index += 1;
        let got = replay.apiserver(cluster, *index).await.unwrap();
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < give_up, "{what}: still {got:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The writer list is the policy's own: written again with only alice, bob is refused and alice
/// writes; the suite's list is restored after.
async fn writer_list_in_the_policy(cluster: &Cluster) {
    let mut index = 5000;
    replace(cluster, &policies::pvc_health_writers(&["alice"])).await;
    let outsider = claim_health_write("bob");
    let refused = answer_until(cluster, &outsider, &mut index, "alice's list", |a| {
        a.message()
            .contains("user \"bob\" is not allowed to update status.healthStatus")
    })
    .await;
    eprintln!("ok   writer list [alice]: bob is refused: {refused:?}");
    index += 1;
    assert_eq!(
        claim_health_write("alice")
            .apiserver(cluster, index)
            .await
            .unwrap(),
        Answer::Allowed,
        "alice is listed"
    );
    eprintln!("ok   writer list [alice]: alice writes");

    replace(cluster, &policies::pvc_health_writers(WRITERS)).await;
    let admin = claim_health_write(WRITERS[0]);
    answer_until(cluster, &admin, &mut index, "the suite's list again", |a| {
        *a == Answer::Allowed
    })
    .await;
}

/// An uninstall of the webhooks deletes namespace `volume-health`; native mode keeps nothing
/// there, so the PV controller still binds a new claim (its status write is matched by the
/// writer list's policy, whose answer never depends on an object that can go missing).
async fn pv_controller_after_an_uninstall(cluster: &Cluster) {
    let namespace = format!("/api/v1/namespaces/{}", policies::NAMESPACE);
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": policies::NAMESPACE}}),
    )
    .await;
    let (code, body) = cluster
        .api
        .send(Method::DELETE, &namespace, None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let give_up = Instant::now() + Duration::from_secs(60);
    while cluster
        .api
        .send(Method::GET, &namespace, None, None)
        .await
        .unwrap()
        .0
        != 404
    {
        assert!(Instant::now() < give_up, "the namespace was never deleted");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("ok   namespace {} deleted", policies::NAMESPACE);

    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "pv-binding"}}),
    )
    .await;
    let (code, body) = cluster
        .api
        .send(
            Method::POST,
            "/api/v1/persistentvolumes",
            Some(&json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pv-binding"},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "manual", "hostPath": {"path": "/tmp/pv-binding"}}})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let mut new_claim = claim("bound", Value::Null);
    new_claim["spec"]["storageClassName"] = json!("manual");
    let claims = "/api/v1/namespaces/pv-binding/persistentvolumeclaims";
    let (code, body) = cluster
        .api
        .send(Method::POST, claims, Some(&new_claim), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, stored) = cluster
            .api
            .send(Method::GET, &format!("{claims}/bound"), None, None)
            .await
            .unwrap();
        if stored["status"]["phase"] == "Bound" {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the PV controller never bound the claim: {stored}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("ok   the PV controller bound a new claim (its status write accepted)");
}

/// A denial whose message is over 5 KiB: the library lists every duplicate; the policy lists
/// the first [`policies::MAX_LISTED_DUPLICATES`] and, when that is still over
/// [`policies::MAX_MESSAGE_BYTES`], keeps its first quarter of that many characters. The
/// apiserver's message is the policy's inside the wrapper.
async fn long_messages(cluster: &Cluster) {
    for (index, text) in [
        (3100, "m".repeat(1000)),
        // Each `<` is 6 bytes in the rendered JSON.
        (3101, "<".repeat(1024)),
    ] {
        let conditions = |count: usize| -> Value {
            json!([{"name": "csi.example.com", "healthConditions": (0..count)
                .map(|_| cond("StorageDegraded", "HighLatency", json!({"message": text})))
                .collect::<Vec<_>>()}])
        };
        let replay = |count: usize| {
            Replay::new(
                format!("long message: {count} conditions"),
                HealthResource::CsiNodes,
                Operation::Update,
                "status".to_owned(),
                user("system:admin"),
                Some(csinode("node1", conditions(count))),
                Some(csinode("node1", Value::Null)),
            )
        };
        let full = replay(16);
        let library_full = library_message(&full);
        assert!(
            library_full.len() > policies::MAX_MESSAGE_BYTES,
            "{}",
            library_full.len()
        );
        // The first duplicates: those of the first conditions.
        let listed = library_message(&replay(policies::MAX_LISTED_DUPLICATES + 1));
        let cut = if listed.len() > policies::MAX_MESSAGE_BYTES {
            listed
                .chars()
                .take(policies::MAX_MESSAGE_BYTES / 4)
                .collect()
        } else {
            listed.clone()
        };
        let Answer::Denied { code, .. } = library(&full) else {
            panic!("allowed")
        };
        let want = wrapped(
            &full,
            &Answer::Denied {
                code,
                message: cut.clone(),
                causes: Vec::new(),
            },
        );
        let got = full.apiserver(cluster, index).await.unwrap();
        eprintln!(
            "long message: library {} bytes (15 duplicates), policy {} bytes ({} listed{}), apiserver {} bytes",
            library_full.len(),
            cut.len(),
            policies::MAX_LISTED_DUPLICATES,
            if cut.len() < listed.len() {
                ", cut"
            } else {
                ""
            },
            got.message().len()
        );
        assert_eq!(got, want, "the policy's cut of the message");
        assert!(
            library_full.starts_with(&cut[..cut.len().min(200)]),
            "the same beginning"
        );
    }
}
