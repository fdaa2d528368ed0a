//! The admission webhooks' `matchConditions`, evaluated with a CEL interpreter.

use super::*;

pub(crate) const KUBELET: (&str, &[&str]) = (
    "system:node:node-1",
    &["system:nodes", "system:authenticated"],
);
const OTHER_KUBELET: (&str, &[&str]) = (
    "system:node:node-2",
    &["system:nodes", "system:authenticated"],
);
/// Named like a node, but not in system:nodes: not a node.
pub(crate) const NODE_NAMED_USER: (&str, &[&str]) =
    ("system:node:node-1", &["system:authenticated"]);
/// A user with no groups at all (the `groups` field is then absent).
pub(crate) const GROUPLESS_NODE_NAME: (&str, &[&str]) = ("system:node:node-1", &[]);
pub(crate) const HEALTH_MONITOR: (&str, &[&str]) = (
    "system:serviceaccount:kube-system:csi-health-monitor",
    &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
);
const RESIZER: (&str, &[&str]) = (
    "system:serviceaccount:kube-system:csi-resizer",
    &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
);
pub(crate) const ADMIN: (&str, &[&str]) = (
    "kubernetes-admin",
    &["kubeadm:cluster-admins", "system:authenticated"],
);

pub(crate) fn conditions(reasons: &[&str]) -> Value {
    Value::Array(
        reasons
            .iter()
            .map(|r| json!({"status": "Degraded", "reason": r, "message": "slow I/O"}))
            .collect(),
    )
}

/// A Pod with `status.volumeHealth` set to the given list, or without it.
pub(crate) fn pod(volume_health: Option<&[&str]>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "apps", "uid": "1"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "nginx"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    });
    if let Some(reasons) = volume_health {
        pod["status"]["volumeHealth"] = if reasons.is_empty() {
            json!([])
        } else {
            json!([{"name": "data", "healthConditions": conditions(reasons)}])
        };
    }
    pod
}

/// A PVC with `status.healthStatus` (conditions from `reasons`; `Some(&[])` is `{}`).
fn pvc(health_status: Option<&[&str]>) -> Value {
    let mut pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "apps", "uid": "2"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
    });
    if let Some(reasons) = health_status {
        pvc["status"]["healthStatus"] = if reasons.is_empty() {
            json!({})
        } else {
            json!({"healthConditions": conditions(reasons)})
        };
    }
    pvc
}

/// A CSINode: without `status` (as the kubelet creates it) for None, with an empty
/// `status` for `Some(&[])`, else with `status.storageHealth` for one driver.
fn csinode(name: &str, storage_health: Option<&[&str]>) -> Value {
    let mut node = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": name, "uid": "3"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": name, "topologyKeys": ["topology.example.com/zone"]}]},
    });
    if let Some(reasons) = storage_health {
        node["status"] = if reasons.is_empty() {
            // An empty list is left out, as the apiserver presents the object.
            json!({})
        } else {
            json!({"storageHealth": [{"name": "csi.example.com",
                "healthConditions": reasons.iter().map(|r| json!({"status": "StorageDegraded", "reason": r})).collect::<Vec<_>>()}]})
        };
    }
    node
}

fn write(
    (group, resource, sub, kind): (&'static str, &'static str, &'static str, &'static str),
    namespace: &'static str,
    operation: &'static str,
    (username, groups): (&'static str, &'static [&'static str]),
    old_object: Option<Value>,
    object: Option<Value>,
) -> AdmissionRequest {
    let name = object
        .as_ref()
        .or(old_object.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    AdmissionRequest {
        group,
        version: "v1",
        resource,
        sub_resource: sub,
        kind,
        namespace,
        name,
        operation,
        username,
        groups,
        object,
        old_object,
    }
}

const POD_STATUS: (&str, &str, &str, &str) = ("", "pods", "status", "Pod");
const POD: (&str, &str, &str, &str) = ("", "pods", "", "Pod");
const PVC: (&str, &str, &str, &str) = ("", "persistentvolumeclaims", "", "PersistentVolumeClaim");
const PVC_STATUS: (&str, &str, &str, &str) = (
    "",
    "persistentvolumeclaims",
    "status",
    "PersistentVolumeClaim",
);
const CSINODE: (&str, &str, &str, &str) = ("storage.k8s.io", "csinodes", "", "CSINode");
const CSINODE_STATUS: (&str, &str, &str, &str) =
    ("storage.k8s.io", "csinodes", "status", "CSINode");

/// What the apiserver does with one webhook configuration for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Decided without a call.
    Skip,
    /// Sent to one webhook whose failure policy is Fail.
    Fail,
    /// Sent to one webhook whose failure policy is Ignore.
    Ignore,
}

/// One write, and where the apiserver sends it: `mutate` and `validate` with the runtime
/// switch on (components/volume-health-off), `validate_on` with the gate on (the base's
/// mutating entries, repair's, never get a valid report).
struct AdmissionCase {
    what: &'static str,
    request: AdmissionRequest,
    mutate: Expect,
    validate: Expect,
    validate_on: Expect,
}

#[rustfmt::skip]
fn admission_cases() -> Vec<AdmissionCase> {
    use Expect::{Ignore, Skip};
    let case = |what, request, mutate, validate, validate_on| AdmissionCase { what, request, mutate, validate, validate_on };
    vec![
        // Pods: the kubelet's status updates are the most frequent writes in a cluster. In-tree
        // answers every rule of volumeHealth; only drop on save (a first report) is sent.
        case("kubelet updates pod status, no volume health on either side",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(None)), Some(pod(None))), Skip, Skip, Skip),
        case("kubelet adds volume health to a pod",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("kubelet changes a pod's volume health (in use: nothing to drop)",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(Some(&["Unreachable"])))), Skip, Skip, Skip),
        case("kubelet removes a pod's volume health",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(None))), Skip, Skip, Skip),
        case("kubelet updates container states of a pod with volume health (report unchanged)",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&["SlowIO"]))), Some(pod(Some(&["SlowIO"])))), Skip, Skip, Skip),
        case("another node writes volume health into a pod not bound to it (NodeRestriction's job)",
             write(POD_STATUS, "apps", "UPDATE", OTHER_KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("another node updates a pod's status without volume health (NodeRestriction's job)",
             write(POD_STATUS, "apps", "UPDATE", OTHER_KUBELET, Some(pod(None)), Some(pod(None))), Skip, Skip, Skip),
        case("an empty old volumeHealth list is not in use",
             write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(pod(Some(&[]))), Some(pod(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("a controller updates pod status without volume health",
             write(POD_STATUS, "apps", "UPDATE", ADMIN, Some(pod(None)), Some(pod(None))), Skip, Skip, Skip),
        case("volume health in the webhooks' own namespace is never sent",
             write(POD_STATUS, "volume-health", "UPDATE", KUBELET, Some(pod(None)), Some(pod(Some(&["SlowIO"])))), Skip, Skip, Skip),
        case("creating a pod (the apiserver resets its status)",
             write(POD, "apps", "CREATE", ADMIN, None, Some(pod(Some(&["SlowIO"])))), Skip, Skip, Skip),

        // PVCs: without a writer list (components/pvc-health-writers), only drop on save.
        case("the resizer updates PVC status without health status",
             write(PVC_STATUS, "apps", "UPDATE", RESIZER, Some(pvc(None)), Some(pvc(None))), Skip, Skip, Skip),
        case("the health monitor adds health status",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("the health monitor changes health status (in use: nothing to drop)",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["Unreachable"])))), Skip, Skip, Skip),
        case("the health monitor removes health status",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(None))), Skip, Skip, Skip),
        case("an empty healthStatus object counts as set",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&[])))), Ignore, Skip, Skip),
        case("an empty old healthStatus object is in use",
             write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&[]))), Some(pvc(Some(&["SlowIO"])))), Skip, Skip, Skip),
        case("a node writes health status (NodeRestriction refuses it first)",
             write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("a node updates PVC status without health status",
             write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(None)), Some(pvc(None))), Skip, Skip, Skip),
        case("creating a PVC with health status (dropped while gated; the apiserver resets status)",
             write(PVC, "apps", "CREATE", ADMIN, None, Some(pvc(Some(&["SlowIO"])))), Ignore, Skip, Skip),
        case("creating a PVC without health status (no old object)",
             write(PVC, "apps", "CREATE", ADMIN, None, Some(pvc(None))), Skip, Skip, Skip),
        case("resizing a PVC that has health status (the stored status is kept: no rule applies)",
             write(PVC, "apps", "UPDATE", ADMIN, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["SlowIO"])))), Skip, Skip, Skip),
        case("health status in the webhooks' own namespace is never sent",
             write(PVC_STATUS, "volume-health", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Skip, Skip, Skip),
        case("deleting a PVC",
             write(PVC, "apps", "DELETE", ADMIN, Some(pvc(Some(&["SlowIO"]))), None), Skip, Skip, Skip),

        // CSINodes: cluster-scoped. Only a change of storageHealth can meet the project's
        // own rule; the name rules are NodeRestriction's and the Node authorizer's. A node's
        // own change is sent only with the gate off (the switch's 403): with it on, in-tree
        // answers every rule a node's write can meet.
        case("kubelet creates its CSINode (no status at all, no old object)",
             write(CSINODE, "", "CREATE", KUBELET, None, Some(csinode("node-1", None))), Skip, Skip, Skip),
        case("kubelet registers a driver in its CSINode",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip, Skip),
        case("kubelet writes another node's CSINode (NodeRestriction's job)",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-2", None)), Some(csinode("node-2", None))), Skip, Skip, Skip),
        case("kubelet writes csinodes/status without storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&[])))), Skip, Skip, Skip),
        case("kubelet adds storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&["Flaky"])))), Ignore, Ignore, Skip),
        case("kubelet changes storage health (in use: nothing to drop)",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Down"])))), Skip, Ignore, Skip),
        case("kubelet rewrites an unchanged storage health report",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Flaky"])))), Skip, Skip, Skip),
        case("kubelet removes storage health",
             write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", None))), Skip, Ignore, Skip),
        case("kubelet creates its CSINode with storage health (dropped while gated)",
             write(CSINODE, "", "CREATE", KUBELET, None, Some(csinode("node-1", Some(&["Flaky"])))), Ignore, Skip, Skip),
        case("kubelet unregisters a driver whose storage health stays",
             write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Flaky"])))), Skip, Skip, Skip),
        case("an admin updates a CSINode that has storage health",
             write(CSINODE, "", "UPDATE", ADMIN, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Flaky"])))), Skip, Skip, Skip),
        case("an admin adds storage health",
             write(CSINODE_STATUS, "", "UPDATE", ADMIN, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&["Flaky"])))), Ignore, Ignore, Ignore),
        case("an admin updates a CSINode without storage health",
             write(CSINODE, "", "UPDATE", ADMIN, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip, Skip),
        case("a user named like a node but outside system:nodes changes storage health: not a node",
             write(CSINODE_STATUS, "", "UPDATE", NODE_NAMED_USER, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Down"])))), Skip, Ignore, Ignore),
        case("a user named like a node with no groups changes storage health: not a node",
             write(CSINODE_STATUS, "", "UPDATE", GROUPLESS_NODE_NAME, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Down"])))), Skip, Ignore, Ignore),
        case("a user named like a node but outside system:nodes is not a node",
             write(CSINODE, "", "UPDATE", NODE_NAMED_USER, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip, Skip),
        case("a user named like a node with no groups at all is not a node",
             write(CSINODE, "", "UPDATE", GROUPLESS_NODE_NAME, Some(csinode("node-1", None)), Some(csinode("node-1", None))), Skip, Skip, Skip),
        case("kubelet deletes its CSINode",
             write(CSINODE, "", "DELETE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), None), Skip, Skip, Skip),
    ]
}

/// The writer list's component: the one validating entry it adds, for claims' status.
const WRITERS_COMPONENT: &str = "components/pvc-health-writers";

/// What the writer list's entry gets: changes of healthStatus by anyone outside the list.
#[rustfmt::skip]
fn writer_cases() -> Vec<(&'static str, AdmissionRequest, Expect)> {
    use Expect::{Fail, Skip};
    vec![
        ("the listed health monitor adds health status (never sent)",
         write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Skip),
        ("the listed health monitor changes health status (never sent)",
         write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["Unreachable"])))), Skip),
        ("a user outside the list adds health status",
         write(PVC_STATUS, "apps", "UPDATE", ADMIN, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Fail),
        ("a user outside the list changes health status",
         write(PVC_STATUS, "apps", "UPDATE", ADMIN, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["Unreachable"])))), Fail),
        ("a user outside the list removes health status",
         write(PVC_STATUS, "apps", "UPDATE", ADMIN, Some(pvc(Some(&["SlowIO"]))), Some(pvc(None))), Fail),
        ("a user outside the list sets an empty healthStatus",
         write(PVC_STATUS, "apps", "UPDATE", ADMIN, Some(pvc(None)), Some(pvc(Some(&[])))), Fail),
        ("the resizer writes status, health status unchanged",
         write(PVC_STATUS, "apps", "UPDATE", RESIZER, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["SlowIO"])))), Skip),
        ("the resizer writes status without health status",
         write(PVC_STATUS, "apps", "UPDATE", RESIZER, Some(pvc(None)), Some(pvc(None))), Skip),
        ("a node adds health status (NodeRestriction refuses it before any webhook)",
         write(PVC_STATUS, "apps", "UPDATE", KUBELET, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Fail),
        ("a user without a name adds health status",
         write(PVC_STATUS, "apps", "UPDATE", ("", &[]), Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Fail),
        ("health status in the webhooks' own namespace is never sent",
         write(PVC_STATUS, "volume-health", "UPDATE", ADMIN, Some(pvc(None)), Some(pvc(Some(&["SlowIO"])))), Skip),
        ("resizing a claim (the main resource: the stored status is kept)",
         write(PVC, "apps", "UPDATE", ADMIN, Some(pvc(None)), Some(pvc(None))), Skip),
        ("a CSINode change is the base's entry's, not the writer list's",
         write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode("node-1", Some(&["Flaky"])))), Skip),
    ]
}

/// The validating configuration of an installable overlay with the writer list added.
fn with_writers() -> &'static Value {
    static RENDERED: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    let objects = RENDERED
        .get_or_init(|| render_with_components("overlays/cert-manager", &[WRITERS_COMPONENT]));
    objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .expect("a ValidatingWebhookConfiguration")
}

/// The writer list's own entry, alone in a configuration.
pub(crate) fn writers_entry() -> Value {
    let entry = array_at(with_writers(), "/webhooks")
        .iter()
        .find(|w| w["name"] == "pvc-writers.validate.volume-health.github.io")
        .expect("the component adds the writer list's entry");
    json!({"webhooks": [entry]})
}

#[test]
fn the_writer_list_entry_gets_only_changes_by_writers_outside_the_list() {
    let entry = writers_entry();
    let mut failures = Vec::new();
    for (what, request, want) in writer_cases() {
        let got = expectation(&dispatch(&entry, &request));
        if got != want {
            failures.push(format!("  {what}: {got:?} (want {want:?})"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The rest of the configuration is the base's, unchanged.
    let base = configurations(rendering("overlays/cert-manager"))[1].1;
    let mut rest = with_writers().clone();
    rest["webhooks"]
        .as_array_mut()
        .expect("webhooks")
        .retain(|w| w["name"] != "pvc-writers.validate.volume-health.github.io");
    assert_eq!(
        &rest, base,
        "the component changes nothing but its own entry"
    );
}

#[test]
fn the_writer_list_is_the_same_in_the_server_and_in_its_entry() {
    let dir = manifests_dir().join(WRITERS_COMPONENT);
    let deployment: Value = serde_yaml::from_str(
        &std::fs::read_to_string(dir.join("deployment.yaml")).expect("deployment.yaml"),
    )
    .expect("YAML");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"][0];
    assert_eq!(env["name"], "VOLUME_HEALTH_PVC_HEALTH_WRITERS");
    let listed: Vec<&str> = env["value"].as_str().expect("a list").split(',').collect();
    let entry = writers_entry();
    let expression = array_at(&entry["webhooks"][0], "/matchConditions")
        .iter()
        .find(|c| c["name"] == "writer-not-listed")
        .and_then(|c| c["expression"].as_str())
        .expect("the writer-not-listed condition");
    let in_cel: Vec<&str> = expression.split('\'').skip(1).step_by(2).collect();
    assert_eq!(
        listed, in_cel,
        "the server's list and the entry's list differ"
    );
    // Every listed user's change passes without a call, and the server allows it.
    for user in listed {
        let mut request = write(
            PVC_STATUS,
            "apps",
            "UPDATE",
            HEALTH_MONITOR,
            Some(pvc(None)),
            Some(pvc(Some(&["SlowIO"]))),
        );
        request.username = Box::leak(user.to_owned().into_boxed_str());
        assert_eq!(dispatch(&entry, &request), Dispatch::Skip, "{user}");
    }
}

/// The component that turns repair off: it removes the base's three repair entries.
const NO_REPAIR_COMPONENT: &str = "components/no-repair";

/// A Pod whose `status.volumeHealth` is `entries` (its one volume is `data`).
fn pod_reporting(entries: Value) -> Value {
    let mut pod = pod(None);
    pod["status"]["volumeHealth"] = entries;
    pod
}

/// A PVC whose `status.healthStatus.healthConditions` is `conditions`.
fn pvc_reporting(conditions: Value) -> Value {
    let mut pvc = pvc(None);
    pvc["status"]["healthStatus"] = json!({ "healthConditions": conditions });
    pvc
}

/// node-1's CSINode whose `status.storageHealth` is `entries`.
fn csinode_reporting(entries: Value) -> Value {
    let mut node = csinode("node-1", None);
    node["status"] = json!({ "storageHealth": entries });
    node
}

/// One pod entry for the volume `data`, or one CSINode entry for the driver
/// `csi.example.com`, with these conditions.
fn entry(conditions: Value) -> Value {
    json!([{"name": "data", "healthConditions": conditions}])
}
fn driver(conditions: Value) -> Value {
    json!([{"name": "csi.example.com", "healthConditions": conditions}])
}

/// A pod or claim condition with this status, reason and message.
fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"status": status, "reason": reason, "message": message})
}

/// A storage condition with these fields (an empty mode is left out).
fn storage_condition(reason: &str, access_mode: &str, volume_mode: &str) -> Value {
    let mut condition = json!({"status": "StorageDegraded", "reason": reason});
    if !access_mode.is_empty() {
        condition["accessMode"] = json!(access_mode);
    }
    if !volume_mode.is_empty() {
        condition["volumeMode"] = json!(volume_mode);
    }
    condition
}

/// `n` conditions with distinct reasons.
/// A pod with `n` volumes, `vol0` to `vol<n-1>`, and no report.
fn pod_of_volumes(n: usize) -> Value {
    let mut pod = pod(None);
    pod["spec"]["volumes"] = (0..n)
        .map(|i| json!({"name": format!("vol{i}"), "persistentVolumeClaim": {"claimName": format!("c{i}")}}))
        .collect();
    pod
}

/// The same pod with a valid report for each volume.
fn pod_of_volumes_reporting(n: usize) -> Value {
    let mut pod = pod_of_volumes(n);
    pod["status"]["volumeHealth"] = (0..n)
        .map(|i| json!({"name": format!("vol{i}"), "healthConditions": many(1)}))
        .collect();
    pod
}

/// A CSINode storage report of `n` valid drivers.
fn drivers(n: usize) -> Value {
    (0..n)
        .map(|i| json!({"name": format!("csi{i}.example.com"), "healthConditions": [storage_condition("Flaky", "", "")]}))
        .collect()
}

fn many(n: usize) -> Value {
    (0..n)
        .map(|i| condition("Degraded", &format!("Reason{i}"), "slow I/O"))
        .collect()
}

/// A message of 600 characters, `bytes` of them in UTF-8 (two-byte characters first): over
/// 1024 bytes while under 1024 characters is the case a character count gets wrong.
fn message_of(bytes: usize) -> String {
    let two_byte = bytes - 600;
    "é".repeat(two_byte) + &"a".repeat(600 - two_byte)
}

/// What the repair entries get: a status write whose gated field changed and that the cheap
/// test finds something to repair in; each is sent to one entry, which fails open.
#[rustfmt::skip]
fn repair_cases() -> Vec<(&'static str, AdmissionRequest, Expect)> {
    use Expect::{Ignore, Skip};
    let pod_write = |old: Value, new: Value| write(POD_STATUS, "apps", "UPDATE", KUBELET, Some(old), Some(new));
    let pod_report = |entries: Value| pod_write(pod(None), pod_reporting(entries));
    let pvc_report = |conditions: Value| write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc_reporting(conditions)));
    let node_report = |entries: Value| write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", None)), Some(csinode_reporting(entries)));
    let duplicate = json!([condition("Degraded", "SlowIO", "a"), condition("Degraded", "SlowIO", "b")]);
    let (long, longest) = ("R".repeat(257), "R".repeat(256));
    let (cut, whole) = (message_of(1025), message_of(1024));
    assert_eq!((cut.chars().count(), cut.len(), whole.len()), (600, 1025, 1024));
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let (long, longest, cut, whole) = (leak(long), leak(longest), leak(cut), leak(whole));
    vec![
        // Healthy writers never pay the hop.
        ("a healthy pod report changes",
         pod_write(pod(Some(&["SlowIO"])), pod(Some(&["Unreachable"]))), Skip),
        ("a healthy claim report changes",
         write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(Some(&["SlowIO"]))), Some(pvc(Some(&["Unreachable"])))), Skip),
        ("a healthy CSINode report changes",
         write(CSINODE_STATUS, "", "UPDATE", KUBELET, Some(csinode("node-1", Some(&["Flaky"]))), Some(csinode("node-1", Some(&["Down"])))), Skip),
        ("a first healthy pod report", pod_report(entry(many(1))), Skip),
        ("sixteen distinct conditions", pod_report(entry(many(16))), Skip),
        ("a 256-byte reason", pvc_report(json!([condition("Degraded", longest, "")])), Skip),
        ("a 1024-byte message of 600 characters", pvc_report(json!([condition("Degraded", "SlowIO", whole)])), Skip),
        ("a 1024-byte ASCII message", pvc_report(json!([condition("Degraded", "SlowIO", leak("m".repeat(1024)))])), Skip),
        ("a reason with a digit, a comma, a colon and an underscore",
         pvc_report(json!([condition("Inaccessible", "Lost:Path_2,Again", "")])), Skip),
        ("a report removed", pod_write(pod(Some(&["SlowIO"])), pod(None)), Skip),
        ("an empty claim report", write(PVC_STATUS, "apps", "UPDATE", HEALTH_MONITOR, Some(pvc(None)), Some(pvc(Some(&[])))), Skip),
        // An unchanged field is not the writer's: the apiserver lets a stored value stay.
        ("the kubelet writes container states beside a stored duplicate",
         pod_write(pod_reporting(entry(duplicate.clone())), pod_reporting(entry(duplicate.clone()))), Skip),
        ("the resizer writes a claim's status beside a stored duplicate",
         write(PVC_STATUS, "apps", "UPDATE", RESIZER, Some(pvc_reporting(duplicate.clone())), Some(pvc_reporting(duplicate.clone()))), Skip),
        // Something to repair.
        ("a duplicate (status, reason) pair in a pod report", pod_report(entry(duplicate.clone())), Ignore),
        ("a duplicate (status, reason) pair in a claim report", pvc_report(duplicate.clone()), Ignore),
        ("a duplicate pair added to a healthy pod report",
         pod_write(pod(Some(&["SlowIO"])), pod_reporting(entry(duplicate.clone()))), Ignore),
        ("seventeen conditions in a pod report", pod_report(entry(many(17))), Ignore),
        ("seventeen conditions in a claim report", pvc_report(many(17)), Ignore),
        ("a status no condition can have", pvc_report(json!([condition("Healthy", "SlowIO", "")])), Ignore),
        ("a condition without a status", pvc_report(json!([{"reason": "SlowIO"}])), Ignore),
        ("a condition without a reason", pod_report(entry(json!([{"status": "Degraded"}]))), Ignore),
        ("an empty reason", pvc_report(json!([condition("Degraded", "", "")])), Ignore),
        ("a reason with a space", pvc_report(json!([condition("Degraded", "Slow IO", "")])), Ignore),
        ("a reason ending in a colon", pod_report(entry(json!([condition("Degraded", "SlowIO:", "")]))), Ignore),
        ("a 257-byte reason", pvc_report(json!([condition("Degraded", long, "")])), Ignore),
        ("a 1025-byte message of 600 characters", pvc_report(json!([condition("Degraded", "SlowIO", cut)])), Ignore),
        ("a 1025-byte message in a pod report", pod_report(entry(json!([condition("Degraded", "SlowIO", cut)]))), Ignore),
        ("a pod entry naming no volume of the pod", pod_report(json!([{"name": "cache", "healthConditions": many(1)}])), Ignore),
        ("a pod entry with an empty name", pod_report(json!([{"name": "", "healthConditions": many(1)}])), Ignore),
        ("a pod entry without a name", pod_report(json!([{"healthConditions": many(1)}])), Ignore),
        ("duplicate pod entry names",
         pod_report(json!([{"name": "data", "healthConditions": many(1)}, {"name": "data"}])), Ignore),
        // Past 16 entries a changed report is sent unread: the tests that compare entries
        // with each other never run on more.
        ("sixteen valid pod entries",
         pod_write(pod_of_volumes(16), pod_of_volumes_reporting(16)), Skip),
        ("seventeen valid pod entries",
         pod_write(pod_of_volumes(17), pod_of_volumes_reporting(17)), Ignore),
        ("seventeen valid pod entries, unchanged",
         pod_write(pod_of_volumes_reporting(17), pod_of_volumes_reporting(17)), Skip),
        ("sixteen valid drivers", node_report(drivers(16)), Skip),
        ("seventeen valid drivers", node_report(drivers(17)), Ignore),
        // CSINodes.
        ("duplicate driver names",
         node_report(json!([{"name": "csi.example.com"}, {"name": "csi.example.com", "healthConditions": []}])), Ignore),
        ("a driver name no driver can have", node_report(json!([{"name": "csi_example.com"}])), Ignore),
        ("a driver name ending in a dot", node_report(json!([{"name": "csi.example."}])), Ignore),
        ("a 64-byte driver name", node_report(json!([{"name": leak("d".repeat(64))}])), Ignore),
        ("a 63-byte driver name", node_report(json!([{"name": leak("d".repeat(63))}])), Skip),
        ("a storage status no condition can have",
         node_report(driver(json!([{"status": "Degraded", "reason": "Flaky"}]))), Ignore),
        ("an access mode no volume can have",
         node_report(driver(json!([storage_condition("Flaky", "ReadWriteSometimes", "")]))), Ignore),
        ("a volume mode no volume can have",
         node_report(driver(json!([storage_condition("Flaky", "", "Object")]))), Ignore),
        ("indistinct storage conditions (same status, reason, access and volume mode)",
         node_report(driver(json!([storage_condition("Flaky", "ReadWriteOnce", "Block"), storage_condition("Flaky", "ReadWriteOnce", "Block")]))), Ignore),
        ("indistinct storage conditions without modes",
         node_report(driver(json!([storage_condition("Flaky", "", ""), storage_condition("Flaky", "", "")]))), Ignore),
        ("the same status and reason for two access modes",
         node_report(driver(json!([storage_condition("Flaky", "ReadWriteOnce", "Block"), storage_condition("Flaky", "ReadOnlyMany", "Block")]))), Skip),
        ("the same status and reason with and without an access mode",
         node_report(driver(json!([storage_condition("Flaky", "ReadWriteOnce", ""), storage_condition("Flaky", "", "")]))), Skip),
        ("a 1025-byte storage message",
         node_report(driver(json!([{"status": "StorageUnreachable", "reason": "Down", "message": cut}]))), Ignore),
        ("seventeen storage conditions",
         node_report(driver((0..17).map(|i| storage_condition(&format!("R{i}"), "", "")).collect())), Ignore),
        ("an unchanged CSINode report with duplicate drivers",
         write(CSINODE_STATUS, "", "UPDATE", KUBELET,
               Some(csinode_reporting(json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}]))),
               Some(csinode_reporting(json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}])))), Skip),
        // Only status writes, outside the webhooks' namespace.
        ("a claim's main resource with a duplicate (the stored status is kept)",
         write(PVC, "apps", "UPDATE", ADMIN, Some(pvc(None)), Some(pvc_reporting(duplicate.clone()))), Skip),
        ("a CSINode's main resource with duplicate drivers",
         write(CSINODE, "", "UPDATE", KUBELET, Some(csinode("node-1", None)),
               Some(csinode_reporting(json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}])))), Skip),
        ("a duplicate in the webhooks' own namespace",
         write(POD_STATUS, "volume-health", "UPDATE", KUBELET, Some(pod(None)), Some(pod_reporting(entry(duplicate)))), Skip),
    ]
}

/// The mutating configuration of an installable overlay: repair is in the base.
fn with_repair() -> &'static Value {
    configurations(rendering("overlays/cert-manager"))[0].1
}

pub(crate) fn is_repair_entry(webhook: &Value) -> bool {
    str_at(webhook, "/name").ends_with(".repair.volume-health.github.io")
}

/// The repair entries, alone in a configuration.
pub(crate) fn repair_entries() -> Value {
    let entries: Vec<&Value> = array_at(with_repair(), "/webhooks")
        .iter()
        .filter(|w| is_repair_entry(w))
        .collect();
    assert_eq!(entries.len(), 3, "one repair entry per resource");
    json!({ "webhooks": entries })
}

/// Drop on save's entries, alone in a configuration: what the runtime switch adds.
pub(crate) fn drop_on_save_entries() -> Value {
    let [(_, mutating), _] = configurations(&switched()[0]);
    let entries: Vec<&Value> = array_at(mutating, "/webhooks")
        .iter()
        .filter(|w| !is_repair_entry(w))
        .collect();
    assert_eq!(entries.len(), 3, "one drop on save entry per resource");
    json!({ "webhooks": entries })
}

/// The validating entries the runtime switch adds (nodes' storage reports), alone.
pub(crate) fn switch_validating_entries() -> Value {
    let [_, (_, validating)] = configurations(&switched()[0]);
    let [_, (_, base)] = configurations(rendering(switched()[0].name));
    let entries: Vec<&Value> = array_at(validating, "/webhooks")
        .iter()
        .filter(|w| !array_at(base, "/webhooks").contains(w))
        .collect();
    assert_eq!(entries.len(), 1, "one validating entry for nodes' reports");
    json!({ "webhooks": entries })
}

#[test]
fn the_repair_entries_get_only_changed_reports_with_something_to_repair() {
    let entries = repair_entries();
    let mut failures = Vec::new();
    for (what, request, want) in repair_cases() {
        let got = expectation(&dispatch(&entries, &request));
        if got != want {
            failures.push(format!("  {what}: {got:?} (want {want:?})"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Turning repair off removes exactly these entries.
    let without = render_with_components("overlays/cert-manager", &[NO_REPAIR_COMPONENT]);
    let without = without
        .iter()
        .find(|o| o["kind"] == "MutatingWebhookConfiguration")
        .expect("a MutatingWebhookConfiguration");
    let mut rest = with_repair().clone();
    rest["webhooks"]
        .as_array_mut()
        .expect("webhooks")
        .retain(|w| !is_repair_entry(w));
    assert_eq!(
        &rest, without,
        "{NO_REPAIR_COMPONENT} removes the repair entries and nothing else"
    );
}

fn expectation(dispatch: &Dispatch) -> Expect {
    match dispatch {
        Dispatch::Skip => Expect::Skip,
        Dispatch::Call(calls) => {
            assert_eq!(
                calls.len(),
                1,
                "a request must reach at most one webhook of a configuration, reached {calls:?}"
            );
            match calls[0].1.as_str() {
                "Fail" => Expect::Fail,
                "Ignore" => Expect::Ignore,
                other => panic!("unexpected failure policy {other}"),
            }
        }
    }
}

#[test]
fn admission_match_conditions_send_only_the_requests_that_matter() {
    let cases = admission_cases();
    let mut failures = Vec::new();
    // The runtime switch on: drop on save's entries beside repair's, and the node's own
    // storage changes sent to /validate.
    for rendering in switched() {
        let [(_, mutating), (_, validating)] = configurations(rendering);
        for case in &cases {
            let mutate = expectation(&dispatch(mutating, &case.request));
            let validate = expectation(&dispatch(validating, &case.request));
            if (mutate, validate) != (case.mutate, case.validate) {
                failures.push(format!(
                    "  {} with the switch: {}: mutate {mutate:?} (want {:?}), validate {validate:?} (want {:?})",
                    rendering.name, case.what, case.mutate, case.validate
                ));
            }
        }
    }
    // The gate on: no valid report reaches repair's entries
    // (the_repair_entries_get_only_changed_reports_with_something_to_repair).
    for rendering in rendered() {
        let [(_, mutating), (_, validating)] = configurations(rendering);
        for case in &cases {
            let mutate = expectation(&dispatch(mutating, &case.request));
            let validate = expectation(&dispatch(validating, &case.request));
            if (mutate, validate) != (Expect::Skip, case.validate_on) {
                failures.push(format!(
                    "  {}: {}: mutate {mutate:?} (want Skip), validate {validate:?} (want {:?})",
                    rendering.name, case.what, case.validate_on
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Every entry any install can hold: the base's configurations, then each component's
/// entries alone (the writer list, repair, the switch's drop on save and validating entry).
fn every_entry() -> Vec<(&'static str, Value)> {
    let [(mutating, base_mutating), (validating, base_validating)] =
        configurations(rendering("base"));
    vec![
        (mutating, base_mutating.clone()),
        (validating, base_validating.clone()),
        ("writer list", writers_entry()),
        ("repair", repair_entries()),
        ("drop on save", drop_on_save_entries()),
        ("the switch's validating", switch_validating_entries()),
    ]
}

#[test]
fn admission_cases_cover_every_webhook_and_both_decisions() {
    // The table must exercise each webhook entry, so a broken entry cannot hide.
    let configurations = every_entry();
    let requests: Vec<AdmissionRequest> = admission_cases()
        .into_iter()
        .map(|c| c.request)
        .chain(writer_cases().into_iter().map(|(_, request, _)| request))
        .chain(repair_cases().into_iter().map(|(_, request, _)| request))
        .collect();
    for (what, configuration) in &configurations {
        for webhook in array_at(configuration, "/webhooks") {
            let name = str_at(webhook, "/name");
            let single = json!({"webhooks": [webhook]});
            let (mut sent, mut skipped) = (false, false);
            for request in requests.iter().filter(|r| rules_match(webhook, r)) {
                match dispatch(&single, request) {
                    Dispatch::Skip => skipped = true,
                    Dispatch::Call(_) => sent = true,
                }
            }
            assert!(
                sent && skipped,
                "{what} webhook {name}: the table must contain requests it gets and requests it does not"
            );
        }
    }
}

/// An object whose gated field holds every part the repair tests read, absent somewhere:
/// conditions without a status, a reason, a message or a mode, entries without a name or
/// conditions. The first entry and its first conditions are valid, so that every test of the
/// entries runs over the ragged ones before one finds something to repair.
fn ragged(resource: &str) -> Value {
    let mut conditions = match resource {
        "csinodes" => json!([
            {"status": "StorageDegraded", "reason": "Flaky", "accessMode": "ReadWriteOnce"},
            {"status": "StorageDegraded", "reason": "Flaky", "volumeMode": "Block"},
            {"status": "StorageDegraded", "reason": "Flaky"},
        ]),
        _ => json!([{"status": "Degraded", "reason": "SlowIO", "message": ""}]),
    };
    let array = conditions.as_array_mut().expect("conditions");
    array.extend([
        json!({}),
        json!({"status": "Degraded"}),
        json!({"reason": "SlowIO"}),
    ]);
    match resource {
        "pods" => pod_reporting(
            json!([{"name": "data", "healthConditions": conditions}, {"name": ""}, {}]),
        ),
        "persistentvolumeclaims" => pvc_reporting(conditions),
        _ => csinode_reporting(
            json!([{"name": "csi.example.com", "healthConditions": conditions}, {"name": ""}, {}]),
        ),
    }
}

#[test]
fn match_conditions_never_error_whatever_the_object_shape() {
    // An expression error invokes the failure policy (Fail rejects the write), so every
    // condition must evaluate cleanly for every operation a webhook's rules admit, every
    // user shape and every object shape: null (no old object on CREATE), no status, an
    // empty status, a status with the gated field, no spec, a ragged gated field. The new
    // object is null only on DELETE, which no entry's rules admit.
    // The base suffices: the overlays change nothing but the CA of the webhooks
    // (overlays_change_only_how_the_apiserver_trusts_the_webhooks).
    let users = [
        KUBELET,
        NODE_NAMED_USER,
        GROUPLESS_NODE_NAME,
        ADMIN,
        ("", &[][..]),
    ];
    let mut evaluated = 0;
    {
        for (_, configuration) in &every_entry() {
            for webhook in array_at(configuration, "/webhooks") {
                let single = json!({"webhooks": [webhook]});
                for &(group, resource, sub) in GATED {
                    let kind = match resource {
                        "pods" => "Pod",
                        "persistentvolumeclaims" => "PersistentVolumeClaim",
                        _ => "CSINode",
                    };
                    let with_field = match resource {
                        "pods" => pod(Some(&["SlowIO"])),
                        "persistentvolumeclaims" => pvc(Some(&["SlowIO"])),
                        _ => csinode("node-1", Some(&["Flaky"])),
                    };
                    let mut without_status = with_field.clone();
                    without_status
                        .as_object_mut()
                        .expect("object")
                        .remove("status");
                    let mut empty_status = with_field.clone();
                    empty_status["status"] = json!({});
                    let mut without_spec = with_field.clone();
                    without_spec.as_object_mut().expect("object").remove("spec");
                    let shapes = [
                        None,
                        Some(without_status),
                        Some(empty_status),
                        Some(with_field),
                        Some(without_spec),
                        Some(ragged(resource)),
                    ];
                    let namespace = if group.is_empty() { "apps" } else { "" };
                    for operation in ["CREATE", "UPDATE"] {
                        for user in users {
                            for old in &shapes {
                                for new in shapes.iter().filter(|s| s.is_some()) {
                                    let request = write(
                                        (group, resource, sub, kind),
                                        namespace,
                                        operation,
                                        user,
                                        old.clone(),
                                        new.clone(),
                                    );
                                    if rules_match(webhook, &request) {
                                        // dispatch panics on any evaluation error.
                                        dispatch(&single, &request);
                                        evaluated += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(evaluated > 0, "no request reached a webhook's conditions");
}

#[test]
fn match_conditions_use_only_cel_that_kubernetes_and_the_interpreter_share() {
    // The comprehension macros, whose first argument binds a variable; bytes() and matches()
    // for the repair entries' byte counts and names (the interpreter's "regex" feature).
    const MACROS: &[&str] = &["exists", "filter"];
    const FUNCTIONS: &[&str] = &["has", "size", "startsWith", "matches", "bytes"];
    let check = |origin: &str, expression: &str, roots: &[&str], request_fields: &[&str]| {
        let found = identifiers(expression);
        let bound: Vec<&str> = found
            .windows(2)
            .filter(|w| w[0].role == Role::Call && MACROS.contains(&w[0].name.as_str()))
            .map(|w| w[1].name.as_str())
            .collect();
        for name in &bound {
            assert!(
                !roots.contains(name),
                "{origin}: a macro variable shadows {name} in {expression}"
            );
        }
        for identifier in &found {
            if identifier.role == Role::Root && bound.contains(&identifier.name.as_str()) {
                continue;
            }
            match identifier.role {
                Role::Call => assert!(
                    FUNCTIONS.contains(&identifier.name.as_str())
                        || MACROS.contains(&identifier.name.as_str()),
                    "{origin}: function {} in {expression}",
                    identifier.name
                ),
                Role::Root => {
                    assert!(
                        roots.contains(&identifier.name.as_str())
                            || ["null", "true", "false", "in"].contains(&identifier.name.as_str()),
                        "{origin}: unknown variable {} in {expression}",
                        identifier.name
                    );
                    if identifier.name == "request" {
                        assert!(
                            request_fields.contains(&identifier.path.as_str()),
                            "{origin}: request.{} is not a field of the typed request variable",
                            identifier.path
                        );
                    }
                }
                Role::Member => {}
            }
        }
    };
    let writers = writers_entry();
    let repairs = repair_entries();
    let configurations = rendered()
        .iter()
        .chain(switched())
        .flat_map(|rendering| {
            configurations(rendering)
                .into_iter()
                .map(move |(_, c)| (rendering.name, c))
        })
        .chain([(WRITERS_COMPONENT, &writers), ("repair", &repairs)]);
    {
        for (name, configuration) in configurations {
            for webhook in array_at(configuration, "/webhooks") {
                for condition in array_at(webhook, "/matchConditions") {
                    let origin = format!("{name} {}", webhook["name"]);
                    check(
                        &origin,
                        str_at(condition, "/expression"),
                        &["object", "oldObject", "request"],
                        ADMISSION_REQUEST_FIELDS,
                    );
                }
            }
        }
    }
    let authorizer = volume_health_authorizer();
    for condition in array_at(&authorizer, "/webhook/matchConditions") {
        check(
            "authorizer",
            str_at(condition, "/expression"),
            &["request"],
            ACCESS_REVIEW_FIELDS,
        );
    }
}
