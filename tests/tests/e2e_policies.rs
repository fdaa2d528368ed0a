//! Native mode on a real kube-apiserver v1.37.2 and etcd with `CSIVolumeHealth` on and no
//! webhook: only the generated policies installed, and kube-controller-manager's admission-policy
//! status controller type-checking them. Each write of the project's own rules gets the
//! library's decision, code and message (inside the apiserver's wrapper); with drop on save
//! bound, the stored object is the webhook's patch applied; the storage condition identity rule
//! stays within its cost budget for the largest CSINode etcd stores. Slow, so ignored: `make
//! e2e` builds the binaries and runs it with `--ignored`.

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
use volume_health_tests::without_nulls;
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::{
    AdmissionRequest, HealthResource, Operation, RestrictionPolicy, UserInfo,
};
use volume_health_webhooks::policies::{self, Action};

use e2e_support::{Answer, Replay};
use volume_health_tests::cluster::{Cluster, ClusterOptions, ControllerManager, bin_dir};

/// The writer list of the suite, as `--pvc-health-writers` and the param list it.
const WRITERS: &[&str] = &[
    "system:admin",
    "alice",
    "system:serviceaccount:kube-system:monitor",
];

/// The largest CSINode status write the identity rule must check within budget: every entry
/// changed, 16 short conditions each, one duplicate at the very end (so a skipped check shows).
/// The size may grow, never shrink; etcd's request limit (1.5 MiB) allows about 2,000.
const COST_FLOOR_ENTRIES: usize = 400;

fn policy_path(kind: &str) -> String {
    let plural = match kind {
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        other => panic!("no path for {other}"),
    };
    format!("/apis/admissionregistration.k8s.io/v1/{plural}")
}

async fn create(cluster: &Cluster, object: &Value) {
    let path = match object["kind"].as_str().unwrap() {
        "ConfigMap" => format!(
            "/api/v1/namespaces/{}/configmaps",
            object["metadata"]["namespace"].as_str().unwrap()
        ),
        "Namespace" => "/api/v1/namespaces".to_owned(),
        "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(),
        "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".to_owned(),
        kind => policy_path(kind),
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
    let policy = RestrictionPolicy {
        gate_enabled: true,
        pvc_health_writers: Some(
            WRITERS
                .iter()
                .map(|w| (*w).to_owned())
                .collect::<HashSet<_>>(),
        ),
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
    tokio::time::timeout(Duration::from_secs(900), native())
        .await
        .expect("the suite did not finish within 15 minutes");
}

async fn native() {
    let bin = bin_dir().unwrap();
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin, options).await.unwrap();
    eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());
    let mut controller = ControllerManager::start(&cluster, &bin).unwrap();

    create(
        &cluster,
        &json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": policies::NAMESPACE}}),
    )
    .await;
    create(&cluster, &policies::writers_param(WRITERS)).await;
    // RBAC lets every user write claim status: the policy, not the authorizer, answers.
    create(
        &cluster,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "claim-status-writer"},
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
            "verbs": ["get", "update", "patch"]}]}),
    )
    .await;
    create(&cluster, &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "claim-status-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "claim-status-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]})).await;
    for object in policies::policies()
        .iter()
        .chain(&policies::bindings(Action::Deny))
    {
        create(&cluster, object).await;
    }

    type_checking(&cluster, &mut controller).await;
    wait_enforced(&cluster).await;

    let (mut agree, mut differ) = (0, Vec::new());
    let requests = requests();
    for (index, replay) in requests.iter().enumerate() {
        let want = wrapped(replay, &library(replay));
        let got = replay.apiserver(&cluster, index).await.unwrap();
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

    cost_floor(&cluster).await;
    drop_on_save(&cluster).await;
    controller.check_running().unwrap();
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
            let path = format!("{}/{name}", policy_path("ValidatingAdmissionPolicy"));
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

/// The largest status write of the floor is checked, not skipped: its one duplicate is found.
async fn cost_floor(cluster: &Cluster) {
    let entries = |reason: &str, last_dup: bool| -> Value {
        (0..COST_FLOOR_ENTRIES)
            .map(|i| {
                let mut conditions: Vec<Value> = (0..16)
                    .map(|j| json!({"status": "StorageDegraded", "reason": format!("{reason}{j}")}))
                    .collect();
                if last_dup && i == COST_FLOOR_ENTRIES - 1 {
                    conditions[15]["reason"] = conditions[14]["reason"].clone();
                }
                json!({"name": format!("d{i}.example.com"), "healthConditions": conditions})
            })
            .collect()
    };
    let replay = Replay::new(
        "cost floor".to_owned(),
        HealthResource::CsiNodes,
        Operation::Update,
        "status".to_owned(),
        user("system:admin"),
        Some(csinode("node1", entries("B", true))),
        Some(csinode("node1", entries("A", false))),
    );
    let body = replay.object.as_ref().unwrap().to_string().len();
    let want = wrapped(&replay, &library(&replay));
    let started = Instant::now();
    let got = replay.apiserver(cluster, 9999).await.unwrap();
    eprintln!(
        "cost floor: {COST_FLOOR_ENTRIES} entries x 16 conditions, {body} bytes, answered in {:?}",
        started.elapsed()
    );
    assert_eq!(got, want, "the largest object is checked within budget");
}

/// Drop on save: with the mutating policies bound, each write's stored gated field is the
/// webhook's patch applied to what was written.
async fn drop_on_save(cluster: &Cluster) {
    let ns = "drop";
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    let api = &cluster.api;
    let claims = format!("/api/v1/namespaces/{ns}/persistentvolumeclaims");
    let health = json!({"healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]});
    // Stored before the policies are bound: "in use".
    for (name, with) in [("fresh", false), ("in-use", true)] {
        let (code, created) = api
            .send(Method::POST, &claims, Some(&claim(name, Value::Null)), None)
            .await
            .unwrap();
        assert_eq!(code, 201, "{created}");
        if with {
            let mut status = created.clone();
            status["status"]["healthStatus"] = health.clone();
            let (code, body) = api
                .send(
                    Method::PUT,
                    &format!("{claims}/{name}/status"),
                    Some(&status),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(code, 200, "{body}");
        }
    }
    for binding in policies::drop_on_save_bindings() {
        create(cluster, &binding).await;
    }
    wait_dropping(cluster, &claims, &health).await;
    for name in ["fresh", "in-use"] {
        let (_, current) = api
            .send(Method::GET, &format!("{claims}/{name}"), None, None)
            .await
            .unwrap();
        let mut new = current.clone();
        new["status"]["healthStatus"] = json!({"healthConditions": [
            {"status": "Degraded", "reason": "DiskFull", "message": "changed"}]});
        let object = serde_json::value::to_raw_value(&new).unwrap();
        let old = serde_json::value::to_raw_value(&current).unwrap();
        let request =
            AdmissionRequest::new(HealthResource::PersistentVolumeClaims, Operation::Update)
                .with_subresource("status")
                .with_name(name)
                .with_objects(Some(&object), Some(&old));
        let mut want = new.clone();
        let pointer = request.gated_field_to_drop(false).unwrap();
        if let Some(pointer) = pointer {
            let (parent, field) = pointer.rsplit_once('/').unwrap();
            want.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .remove(field);
        }
        let (code, stored) = api
            .send(
                Method::PUT,
                &format!("{claims}/{name}/status"),
                Some(&new),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, 200, "{stored}");
        assert_eq!(
            without_nulls(&stored["status"]["healthStatus"]),
            without_nulls(&want["status"]["healthStatus"]),
            "drop on save {name}"
        );
        assert_eq!(
            pointer.is_some(),
            name == "fresh",
            "the webhook drops only the new field"
        );
        eprintln!(
            "ok   drop on save: {name} ({})",
            if pointer.is_some() { "dropped" } else { "kept" }
        );
    }
}

/// Waits until the apiserver applies the drop-on-save bindings, on a claim of its own.
async fn wait_dropping(cluster: &Cluster, claims: &str, health: &Value) {
    let api = &cluster.api;
    let (code, created) = api
        .send(
            Method::POST,
            claims,
            Some(&claim("probe", Value::Null)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code, 201, "{created}");
    let path = format!("{claims}/probe/status");
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, mut current) = api
            .send(Method::GET, &format!("{claims}/probe"), None, None)
            .await
            .unwrap();
        if let Some(status) = current["status"].as_object_mut() {
            // Not in use: a new value is what drop on save removes.
            status.remove("healthStatus");
        }
        let (code, body) = api
            .send(Method::PUT, &path, Some(&current), None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{body}");
        let mut new = body.clone();
        new["status"]["healthStatus"] = health.clone();
        let (code, stored) = api
            .send(Method::PUT, &path, Some(&new), None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{stored}");
        if stored["status"].get("healthStatus").is_none() {
            return;
        }
        assert!(Instant::now() < give_up, "drop on save was never applied");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
