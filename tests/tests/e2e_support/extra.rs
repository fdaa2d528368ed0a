//! Differential requests beyond the admission fixtures: no expectation is written down, the
//! apiserver's answer is compared with the library's. They probe where the two could part:
//! ratcheting of stored invalid values, CSINode never ratcheted, writes of the object itself
//! beside a stored invalid status, byte lengths, renderings of values in messages, the order of
//! errors, and more than 16 conditions.

use serde_json::{Value, json};
use volume_health_validation::{HealthResource, Operation};

use super::Replay;

fn admin() -> Value {
    json!({"username": "system:admin", "uid": "u-admin", "groups": ["system:masters", "system:authenticated"]})
}

fn node1() -> Value {
    json!({"username": "system:node:node1", "uid": "u-node1", "groups": ["system:nodes", "system:authenticated"]})
}

fn pod_with(volume_health: Option<Value>, volumes: &[&str]) -> Value {
    let volumes: Vec<Value> = volumes
        .iter()
        .map(|name| json!({"name": name, "emptyDir": {}}))
        .collect();
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foo", "namespace": "default"},
        "spec": {"nodeName": "node1", "containers": [{"name": "ctr", "image": "registry.example/app:1"}],
                 "volumes": volumes},
        "status": {"phase": "Running"}});
    if let Some(volume_health) = volume_health {
        pod["status"]["volumeHealth"] = volume_health;
    }
    pod
}

fn pod(volume_health: Option<Value>) -> Value {
    pod_with(volume_health, &["vol", "scratch"])
}

fn pvc(health_status: Option<Value>) -> Value {
    let mut pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "claim", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}});
    if let Some(health_status) = health_status {
        pvc["status"]["healthStatus"] = health_status;
    }
    pvc
}

fn csinode_with(storage_health: Option<Value>, drivers: &[&str]) -> Value {
    let drivers: Vec<Value> = drivers
        .iter()
        .map(|name| json!({"name": name, "nodeID": "node1", "topologyKeys": null}))
        .collect();
    let mut node = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node1"},
        "spec": {"drivers": drivers}});
    if let Some(storage_health) = storage_health {
        node["status"] = json!({"storageHealth": storage_health});
    }
    node
}

fn csinode(storage_health: Option<Value>) -> Value {
    csinode_with(storage_health, &["csi.example.com"])
}

/// A condition: `status`, `reason` and optional further members.
fn c(status: &str, reason: &str, more: Value) -> Value {
    let mut condition = json!({"status": status, "reason": reason});
    if let Value::Object(more) = more {
        condition.as_object_mut().unwrap().extend(more);
    }
    condition
}

fn conditions(n: u8, status: &str) -> Vec<Value> {
    (0..n)
        .map(|i| {
            c(
                status,
                &format!("Reason{}", char::from(b'A' + i)),
                json!({}),
            )
        })
        .collect()
}

fn health(conditions: Vec<Value>) -> Option<Value> {
    Some(json!({"healthConditions": conditions}))
}

struct Table(Vec<Replay>);

impl Table {
    fn status(&mut self, id: &str, resource: HealthResource, new: Value, old: Value) {
        self.push(
            id,
            resource,
            Operation::Update,
            "status",
            admin(),
            Some(new),
            Some(old),
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        id: &str,
        resource: HealthResource,
        operation: Operation,
        subresource: &str,
        user: Value,
        new: Option<Value>,
        old: Option<Value>,
    ) {
        self.0.push(Replay::new(
            id.to_owned(),
            resource,
            operation,
            subresource.to_owned(),
            user,
            new,
            old,
        ));
    }
}

/// The differential requests.
pub(crate) fn requests() -> Vec<Replay> {
    use HealthResource::{CsiNodes as N, PersistentVolumeClaims as C, Pods as P};
    let none = json!({});
    let mut t = Table(Vec::new());

    // A kubelet's shapes: conditions told apart by access mode; a stale entry of a driver
    // that is no longer registered.
    t.push(
        "kubelet-scoped-same-reason",
        N,
        Operation::Update,
        "status",
        node1(),
        Some(csinode(Some(
            json!([{"name": "csi.example.com", "healthConditions": [
            c("StorageDegraded", "HighLatency", json!({"accessMode": "ReadWriteOnce"})),
            c("StorageDegraded", "HighLatency", json!({"accessMode": "ReadOnlyMany"}))]}]),
        ))),
        Some(csinode(None)),
    );
    let stale = json!({"name": "b.example.com", "healthConditions": [c("StorageDegraded", "PoolFull", none.clone())]});
    t.push(
        "kubelet-stale-entry",
        N,
        Operation::Update,
        "status",
        node1(),
        Some(csinode_with(
            Some(json!([stale, {"name": "a.example.com", "healthConditions": [c("StorageUnreachable", "Down", none.clone())]}])),
            &["a.example.com"],
        )),
        Some(csinode_with(Some(json!([stale])), &["a.example.com"])),
    );

    // Ratcheting of stored invalid values.
    t.status(
        "ratchet-pvc-message-only",
        C,
        pvc(health(vec![c("Bogus", "R", json!({"message": "b"}))])),
        pvc(health(vec![c("Bogus", "R", json!({"message": "a"}))])),
    );
    t.status(
        "ratchet-pod-empty-name-kept",
        P,
        pod(Some(
            json!([{"name": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
        )),
        pod(Some(json!([{"name": ""}]))),
    );
    t.status(
        "ratchet-pvc-message-too-long-on-stored-invalid",
        C,
        pvc(health(vec![c(
            "Bogus",
            "R",
            json!({"message": "m".repeat(1025)}),
        )])),
        pvc(health(vec![c("Bogus", "R", none.clone())])),
    );
    t.status(
        "ratchet-pvc-stored-invalid-key-changed",
        C,
        pvc(health(vec![c("Bogus", "S", none.clone())])),
        pvc(health(vec![c("Bogus", "R", none.clone())])),
    );
    t.status(
        "ratchet-pod-not-found-never-ratcheted",
        P,
        pod(Some(
            json!([{"name": "gone", "lastTransitionTime": "2026-01-01T00:00:00Z"}]),
        )),
        pod(Some(json!([{"name": "gone"}]))),
    );
    let mut seventeen = conditions(17, "Degraded");
    seventeen[2] = c("Degraded", "bad reason", none.clone());
    t.status(
        "ratchet-pvc-17-unchanged-stored",
        C,
        pvc(Some(
            json!({"healthConditions": seventeen, "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        )),
        pvc(health(seventeen.clone())),
    );
    t.status(
        "ratchet-pvc-17-to-18",
        C,
        pvc(health(conditions(18, "Degraded"))),
        pvc(health(conditions(17, "Degraded"))),
    );
    t.status(
        "ratchet-pod-stored-duplicate-changed-list",
        P,
        pod(Some(json!([{"name": "vol"}, {"name": "vol", "lastTransitionTime": "2026-01-01T00:00:00.7Z"}]))),
        pod(Some(json!([{"name": "vol"}, {"name": "vol"}]))),
    );
    t.status(
        "ratchet-pod-stored-invalid-plus-new-condition",
        P,
        pod(Some(json!([{"name": "vol", "healthConditions": [c("Bogus", "R", none.clone()), c("Degraded", "", none.clone())]}]))),
        pod(Some(json!([{"name": "vol", "healthConditions": [c("Bogus", "R", none.clone())]}]))),
    );
    t.status(
        "ratchet-pvc-unchanged-plus-new-duplicate",
        C,
        pvc(health(vec![
            c("Degraded", "A", none.clone()),
            c("Degraded", "A", none.clone()),
        ])),
        pvc(health(vec![c("Degraded", "A", none.clone())])),
    );
    t.status(
        "ratchet-pod-conditions-new-item",
        P,
        pod(Some(json!([{"name": "vol", "healthConditions": [c("Degraded", "X", none.clone()), c("Nope", "Y", none.clone())]}]))),
        pod(Some(json!([{"name": "vol", "healthConditions": [c("Degraded", "X", none.clone())]}]))),
    );
    t.status(
        "ratchet-pvc-health-status-nil-to-empty",
        C,
        pvc(Some(json!({}))),
        pvc(None),
    );
    let bad = health(vec![c("Degraded", "bad reason", none.clone())]);
    t.status(
        "ratchet-pvc-stored-invalid-removed",
        C,
        pvc(None),
        pvc(bad.clone()),
    );

    // CSINode is never ratcheted: stored invalid data fails again unchanged.
    let invalid =
        json!([{"name": "csi.example.com", "healthConditions": [c("", "R", none.clone())]}]);
    t.status(
        "csinode-unchanged-invalid",
        N,
        csinode(Some(invalid.clone())),
        csinode(Some(invalid)),
    );
    let duplicate = json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}]);
    t.status(
        "csinode-unchanged-duplicate-driver",
        N,
        csinode(Some(duplicate.clone())),
        csinode(Some(duplicate)),
    );
    let same_identity = json!({"name": "csi.example.com", "healthConditions": [
        c("StorageDegraded", "PoolFull", none.clone()), c("StorageDegraded", "PoolFull", none.clone())]});
    t.status(
        "csinode-stored-same-identity-other-driver",
        N,
        csinode(Some(
            json!([same_identity, {"name": "b.example.com", "healthConditions": [
            c("StorageUnreachable", "Down", none.clone())]}]),
        )),
        csinode(Some(json!([same_identity]))),
    );

    // Writes of the object itself beside a stored invalid status.
    let mut labelled = pvc(bad.clone());
    labelled["metadata"]["labels"] = json!({"app": "web"});
    t.push(
        "main-pvc-stored-invalid",
        C,
        Operation::Update,
        "",
        admin(),
        Some(labelled),
        Some(pvc(bad)),
    );
    let gone = Some(json!([{"name": "gone", "healthConditions": [c("Bogus", "R", none.clone())]}]));
    let mut labelled = pod(gone.clone());
    labelled["metadata"]["labels"] = json!({"app": "web"});
    t.push(
        "main-pod-stored-invalid",
        P,
        Operation::Update,
        "",
        admin(),
        Some(labelled),
        Some(pod(gone)),
    );
    let pool_full = Some(
        json!([{"name": "b.example.com", "healthConditions": [c("StorageDegraded", "PoolFull", none.clone())]}]),
    );
    t.push(
        "main-csinode-unregister-driver",
        N,
        Operation::Update,
        "",
        node1(),
        Some(csinode_with(pool_full.clone(), &["a.example.com"])),
        Some(csinode_with(pool_full, &["a.example.com", "b.example.com"])),
    );

    // Lengths in bytes.
    let one = |conditions: Vec<Value>| {
        csinode(Some(
            json!([{"name": "csi.example.com", "healthConditions": conditions}]),
        ))
    };
    let drivers = |entries: Value| csinode(Some(entries));
    t.status(
        "bytes-message",
        N,
        one(vec![c(
            "StorageDegraded",
            "PoolFull",
            json!({"message": "é".repeat(600)}),
        )]),
        csinode(None),
    );
    t.status(
        "bytes-reason-257",
        N,
        one(vec![c("StorageDegraded", &"a".repeat(257), none.clone())]),
        csinode(None),
    );
    t.status(
        "bytes-reason-invalid-and-long",
        N,
        one(vec![c(
            "StorageDegraded",
            &format!("A{}", "é".repeat(200)),
            none.clone(),
        )]),
        csinode(None),
    );
    t.status(
        "csinode-empty-status-absent",
        N,
        one(vec![json!({"reason": "PoolFull"})]),
        csinode(None),
    );

    // More than 16 conditions, with an invalid one among them.
    let mut seventeen = conditions(17, "Degraded");
    seventeen[3] = c("Degraded", "bad reason", none.clone());
    t.status(
        "many-pvc-17-with-bad-reason",
        C,
        pvc(health(seventeen.clone())),
        pvc(None),
    );
    t.status(
        "many-pod-17-with-bad-reason",
        P,
        pod(Some(
            json!([{"name": "vol", "healthConditions": seventeen}]),
        )),
        pod(None),
    );
    let mut seventeen = conditions(17, "StorageDegraded");
    seventeen[3] = c("StorageDegraded", "bad reason", none.clone());
    t.status("many-csinode-17", N, one(seventeen), csinode(None));

    // The order of errors.
    t.status(
        "order-pod-duplicate-before-items",
        P,
        pod(Some(json!([{"name": "vol", "healthConditions": [c("Bogus", "R", none.clone())]}, {"name": "vol"}]))),
        pod(None),
    );
    t.status(
        "order-condition-duplicate-before-items",
        C,
        pvc(health(vec![
            c("Degraded", "R", json!({"message": "x".repeat(1025)})),
            c("Degraded", "R", none.clone()),
        ])),
        pvc(None),
    );
    t.status(
        "order-csinode-one-pass",
        N,
        drivers(json!([{"name": "a.example.com", "healthConditions": [c("StorageDegraded", &"r".repeat(300), none.clone())]}, {"name": "Bad_Name"}])),
        csinode(None),
    );
    t.status(
        "order-pod-not-found-and-reasons",
        P,
        pod(Some(
            json!([{"name": "vol", "healthConditions": [c("", "1bad", none.clone())]},
            {"name": "missing", "healthConditions": [c("Degraded", "", none.clone())]}]),
        )),
        pod(None),
    );
    t.status(
        "csinode-driver-64-underscore",
        N,
        drivers(json!([{"name": format!("{}_", "a".repeat(63))}])),
        csinode(None),
    );
    t.status(
        "csinode-driver-name-254",
        N,
        drivers(json!([{"name": "a".repeat(254)}])),
        csinode(None),
    );
    t.status(
        "csinode-duplicate-driver-with-errors",
        N,
        drivers(json!([{"name": "a.example.com"}, {"name": "a.example.com", "healthConditions": [c("Bad", "R", none.clone())]}])),
        csinode(None),
    );
    t.status(
        "csinode-duplicate-empty-names",
        N,
        drivers(json!([{"name": ""}, {"name": ""}])),
        csinode(None),
    );
    t.status(
        "csinode-upper-case-name",
        N,
        drivers(json!([{"name": "CSI.Example.com"}])),
        csinode(None),
    );
    t.status(
        "csinode-kelvin-sign-name",
        N,
        drivers(json!([{"name": "\u{212a}elvin.example.com"}])),
        csinode(None),
    );
    t.status(
        "csinode-all-fields-invalid",
        N,
        one(vec![json!({"status": "Bad", "reason": "1x", "message": "m".repeat(1025), "accessMode": "X", "volumeMode": "Y"})]),
        csinode(None),
    );
    t.status(
        "csinode-last-transition-fraction",
        N,
        one(vec![c(
            "StorageDegraded",
            "R",
            json!({"lastTransitionTime": "2026-07-20T12:00:00.5Z"}),
        )]),
        csinode(None),
    );
    t.status(
        "pvc-three-duplicates",
        C,
        pvc(health(vec![
            c("Degraded", "A", none.clone()),
            c("Degraded", "A", none.clone()),
            c("Degraded", "A", none.clone()),
        ])),
        pvc(None),
    );
    t.status(
        "pvc-empty-message",
        C,
        pvc(health(vec![c("Degraded", "A", json!({"message": ""}))])),
        pvc(None),
    );
    t.status("pvc-empty-list", C, pvc(health(Vec::new())), pvc(None));
    t.status(
        "pvc-status-and-reason-empty",
        C,
        pvc(health(vec![c("", "", none.clone())])),
        pvc(None),
    );

    // Renderings of values in messages.
    t.status(
        "render-pod-duplicate-with-conditions-and-time",
        P,
        pod(Some(json!([{"name": "vol"}, {"name": "vol", "healthConditions": [c("Degraded", "R", json!({"message": "m"}))],
            "lastTransitionTime": "2026-07-20T14:00:00+02:00"}]))),
        pod(None),
    );
    t.status(
        "render-pvc-duplicate-with-message",
        C,
        pvc(health(vec![
            c("Degraded", "A", none.clone()),
            c("Degraded", "A", json!({"message": "m<&>"})),
        ])),
        pvc(None),
    );
    t.status(
        "render-pod-two-empty-names",
        P,
        pod(Some(json!([{"name": ""}, {"name": ""}]))),
        pod(None),
    );
    for (id, status) in [
        ("render-status-html", "A<B&C"),
        ("render-status-control", "a\u{1}"),
        ("render-status-delete", "a\u{7f}"),
        ("render-status-line-separator", "a\u{2028}b\u{e9}"),
    ] {
        t.status(
            id,
            C,
            pvc(health(vec![c(status, "X", none.clone())])),
            pvc(None),
        );
    }
    t.status(
        "render-access-mode",
        N,
        one(vec![c(
            "StorageDegraded",
            "X",
            json!({"accessMode": "<x>", "volumeMode": ""}),
        )]),
        csinode(None),
    );
    t.status(
        "render-reason",
        C,
        pvc(health(vec![c(
            "Degraded",
            "a<\u{1}\u{e9}\u{200b}",
            none.clone(),
        )])),
        pvc(None),
    );
    t.status(
        "render-not-found",
        P,
        pod(Some(json!([{"name": "x\u{1}<"}]))),
        pod(None),
    );

    // A node creating another node's CSINode.
    let mut other = csinode(None);
    other["metadata"]["name"] = json!("node2");
    t.push(
        "restriction-csinode-other-node-create",
        N,
        Operation::Create,
        "",
        node1(),
        Some(other),
        None,
    );
    t.0
}
