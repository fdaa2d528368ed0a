//! The project as the manifests ship it, on a real kube-apiserver v1.37.2 and etcd on
//! loopback: the webhook configurations (rules, matchConditions, failure policies, timeouts)
//! and the AuthorizationConfiguration (Node, the project's authorizer, RBAC), changed only in
//! their endpoints and certificates, in front of the release binary run with the shipped
//! arguments and environment. Kubelets write as `system:node:<name>` by client certificate,
//! the health monitor with its service account's token, through kube-rs.
//!
//! Each kind of write is made with the in-tree `CSIVolumeHealth` gate on and off and the
//! webhook's gate on and off, and who answered is read off the answer. The measured table must
//! equal the one in `docs/compatibility.md` (`VOLUME_HEALTH_E2E_WRITE_DOCS=1` writes it there
//! instead). Slow, so ignored: `make e2e` builds the binaries and runs it with `--ignored`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hyper::Method;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    Cluster, ControlPlane, Identity, REPAIR_ENV, bound_pod, create_namespace, volume_health,
};
use volume_health_tests::phases::Phases;

/// The health monitor's service account: the one writer of claims' `healthStatus`.
const MONITOR_NAMESPACE: &str = "kube-system";
const MONITOR: &str = "csi-health-monitor";
/// A service account with the same RBAC, not in the writer list.
const OTHER_WRITER: &str = "other-writer";
const DRIVER: &str = "csi.example.com";
const DOC: &str = "docs/compatibility.md";
const BEGIN: &str = "<!-- measured table: begin -->";
const END: &str = "<!-- measured table: end -->";

/// The kinds of write, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Write {
    PodValid,
    PodInvalid,
    PodOtherNode,
    PodKeepStored,
    PodUnchanged,
    PodRunning,
    PodTerminated,
    PodDelete,
    ClaimMonitor,
    ClaimMonitorChange,
    ClaimOtherWriter,
    ClaimKubelet,
    ClaimInvalid,
    CsiNodeValid,
    CsiNodeUnchanged,
    CsiNodeIndistinct,
    CsiNodeOtherNode,
    CsiNodeDriverChange,
    CsiNodeKeepStored,
    CsiNodeStaleEntry,
    ReviewOwnCsiNode,
    ReviewOtherCsiNode,
}

impl Write {
    const ALL: [Write; 22] = [
        Write::PodValid,
        Write::PodInvalid,
        Write::PodOtherNode,
        Write::PodKeepStored,
        Write::PodUnchanged,
        Write::PodRunning,
        Write::PodTerminated,
        Write::PodDelete,
        Write::ClaimMonitor,
        Write::ClaimMonitorChange,
        Write::ClaimOtherWriter,
        Write::ClaimKubelet,
        Write::ClaimInvalid,
        Write::CsiNodeValid,
        Write::CsiNodeUnchanged,
        Write::CsiNodeIndistinct,
        Write::CsiNodeOtherNode,
        Write::CsiNodeDriverChange,
        Write::CsiNodeKeepStored,
        Write::CsiNodeStaleEntry,
        Write::ReviewOwnCsiNode,
        Write::ReviewOtherCsiNode,
    ];

    /// A kubelet's or the listed health monitor's steady-state write: with the webhooks up,
    /// the apiserver must not call them for it.
    fn steady_state(self) -> bool {
        matches!(
            self,
            Write::PodKeepStored
                | Write::PodUnchanged
                | Write::PodRunning
                | Write::PodTerminated
                | Write::PodDelete
                | Write::ClaimMonitorChange
                | Write::CsiNodeUnchanged
                | Write::CsiNodeDriverChange
        )
    }

    /// Made by a kubelet: accepted whenever every replica is down.
    fn by_kubelet(self) -> bool {
        !matches!(
            self,
            Write::ClaimMonitor
                | Write::ClaimMonitorChange
                | Write::ClaimOtherWriter
                | Write::ClaimInvalid
                | Write::ReviewOwnCsiNode
                | Write::ReviewOtherCsiNode
        )
    }

    fn describe(self) -> &'static str {
        match self {
            Write::PodValid => "`pods/status`: a valid `volumeHealth`, by the pod's kubelet",
            Write::PodInvalid => {
                "`pods/status`: an invalid `volumeHealth` (a reason with a space), by the pod's kubelet"
            }
            Write::PodOtherNode => "`pods/status`: `volumeHealth` by another node's kubelet",
            Write::PodKeepStored => {
                "`pods/status`: a stored `volumeHealth` changed, by the pod's kubelet"
            }
            Write::PodUnchanged => {
                "`pods/status`: the same `volumeHealth` report again, by the pod's kubelet"
            }
            Write::PodRunning => {
                "`pods/status`: the container running, `volumeHealth` stored and not in the patch, by the pod's kubelet"
            }
            Write::PodTerminated => {
                "`pods/status`: the container terminated, `volumeHealth` stored, by the pod's kubelet"
            }
            Write::PodDelete => "`pods`: deleting the pod, by its kubelet",
            Write::ClaimMonitor => {
                "`persistentvolumeclaims/status`: a valid `healthStatus`, by the health monitor (in the writer list)"
            }
            Write::ClaimMonitorChange => {
                "`persistentvolumeclaims/status`: a stored `healthStatus` changed, by the health monitor"
            }
            Write::ClaimOtherWriter => {
                "`persistentvolumeclaims/status`: a valid `healthStatus`, by a user with RBAC outside the writer list"
            }
            Write::ClaimKubelet => {
                "`persistentvolumeclaims/status`: `healthStatus` by the kubelet of a node using the claim"
            }
            Write::ClaimInvalid => {
                "`persistentvolumeclaims/status`: an invalid `healthStatus`, by the health monitor"
            }
            Write::CsiNodeValid => {
                "`csinodes/status`: a valid `storageHealth`, by the node's kubelet"
            }
            Write::CsiNodeUnchanged => {
                "`csinodes/status`: the same `storageHealth` report again, by the node's kubelet"
            }
            Write::CsiNodeIndistinct => {
                "`csinodes/status`: two conditions of one driver the kubelet cannot tell apart, by the node's kubelet"
            }
            Write::CsiNodeOtherNode => "`csinodes/status`: by another node's kubelet",
            Write::CsiNodeDriverChange => {
                "`csinodes`: a driver registered by the node's kubelet while `storageHealth` is stored"
            }
            Write::CsiNodeKeepStored => {
                "`csinodes/status`: a stored `storageHealth` changed, by the node's kubelet"
            }
            Write::CsiNodeStaleEntry => {
                "`csinodes/status`: an entry kept for a driver no longer registered, by the node's kubelet"
            }
            Write::ReviewOwnCsiNode => {
                "SubjectAccessReview: a kubelet updates its own node's `csinodes/status`"
            }
            Write::ReviewOtherCsiNode => {
                "SubjectAccessReview: a kubelet updates another node's `csinodes/status`"
            }
        }
    }
}

/// Who answered a write, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Allowed, the gated field stored as written.
    Stored,
    /// Allowed, the gated field not stored.
    Dropped,
    /// Allowed: a write that is not about a gated field.
    Accepted,
    /// A SubjectAccessReview's answer: allowed, or not (with no authorizer allowing it, or
    /// denied by one).
    Review(&'static str),
    /// Refused by a component, with the apiserver's message (not part of the table).
    Denied(u16, &'static str, String),
}

impl Outcome {
    fn cell(&self) -> String {
        match self {
            Outcome::Stored => "stored".into(),
            Outcome::Dropped => "dropped".into(),
            Outcome::Accepted => "accepted".into(),
            Outcome::Review(answer) => (*answer).into(),
            Outcome::Denied(code, by, _) => format!("{code} {by}"),
        }
    }

    /// Who refused a write, from the apiserver's `metav1.Status`.
    fn denied(status: &kube::core::Status) -> Self {
        let message = status.message.as_str();
        let by = if message.contains("failed calling webhook") {
            "webhook down"
        } else if message.contains("admission webhook \"") {
            "webhook"
        } else if status.code == 422 {
            "in-tree validation"
        } else if status.code == 403 && message.contains("User \"") {
            // The union of the authorizers' reasons; the Node authorizer's is prefixed `node: `.
            if message.contains(": node: ") {
                "Node authorizer"
            } else {
                "authorization"
            }
        } else if status.code == 403 {
            "NodeRestriction"
        } else {
            panic!("an answer no component gives: {status:?}")
        };
        Outcome::Denied(status.code, by, status.message.clone())
    }
}

/// The gates of one column, or every admission replica down (`webhook` is then the gate
/// it had while up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Gates {
    in_tree: bool,
    webhook: bool,
    down: bool,
}

impl Gates {
    fn tag(self) -> String {
        format!(
            "{}-{}",
            if self.in_tree { "on" } else { "off" },
            if self.down {
                "down"
            } else if self.webhook {
                "on"
            } else {
                "off"
            }
        )
    }

    fn header(self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        if self.down {
            format!("in-tree {}, every replica down", on(self.in_tree))
        } else {
            format!("in-tree {}, webhook {}", on(self.in_tree), on(self.webhook))
        }
    }
}

/// The admission server's environment beside the gate: the writer list, and the enforcement
/// action.
fn webhook_env(action: &str) -> [(&'static str, String); 2] {
    [
        (
            "VOLUME_HEALTH_PVC_HEALTH_WRITERS",
            format!("system:serviceaccount:{MONITOR_NAMESPACE}:{MONITOR}"),
        ),
        ("VOLUME_HEALTH_ENFORCEMENT_ACTION", action.to_owned()),
    ]
}

async fn set_webhook(plane: &mut ControlPlane, gate: bool, action: &str) {
    set_webhook_with(plane, gate, action, &[]).await;
}

/// As [`set_webhook`], `extra` added to the server's environment.
async fn set_webhook_with(
    plane: &mut ControlPlane,
    gate: bool,
    action: &str,
    extra: &[(&str, &str)],
) {
    let env = webhook_env(action);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.extend_from_slice(extra);
    plane.set_webhook(gate, &env).await.unwrap();
}

/// RBAC for the health monitor and the other writer: update claims' status.
async fn monitor_rbac(cluster: &Cluster) {
    let api = &cluster.api;
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "pvc-health-writer"},
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
            "verbs": ["get", "update", "patch"]}]});
    let (code, body) = api
        .send(
            Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            Some(&role),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let subjects = [MONITOR, OTHER_WRITER].map(
        |name| json!({"kind": "ServiceAccount", "name": name, "namespace": MONITOR_NAMESPACE}),
    );
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "pvc-health-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pvc-health-writer"},
        "subjects": subjects});
    let (code, body) = api
        .send(
            Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(&binding),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
}

/// The field validation errors the webhook counted on CSINodes under `action`.
async fn violations(plane: &ControlPlane, action: &str) -> f64 {
    let action = format!(r#"action="{action}""#);
    plane
        .admission
        .metric(
            "volume_health_webhook_violations_total",
            &[r#"resource="csinodes""#, &action],
        )
        .await
        .unwrap()
}

fn health_status(reason: &str) -> Value {
    json!({"status": {"healthStatus": {"healthConditions": [
        {"status": "Inaccessible", "reason": reason, "message": "volume not found"}]}}})
}

fn storage_health(conditions: Value) -> Value {
    json!({"status": {"storageHealth": [{"name": DRIVER, "healthConditions": conditions}]}})
}

fn csinode(name: &str, drivers: &[&str]) -> CSINode {
    let drivers: Vec<Value> = drivers
        .iter()
        .map(|driver| json!({"name": driver, "nodeID": name, "topologyKeys": []}))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"drivers": drivers}}))
        .unwrap()
}

/// Whether `field` of the object's status is set and not empty.
fn has_status_field(object: &impl serde::Serialize, field: &str) -> bool {
    let value = serde_json::to_value(object).unwrap();
    match &value["status"][field] {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        _ => true,
    }
}

/// The outcome of a write that is not about a gated field.
fn accepted<K>(result: kube::Result<K>) -> Outcome {
    match result {
        Ok(_) => Outcome::Accepted,
        Err(kube::Error::Api(status)) => Outcome::denied(&status),
        Err(err) => panic!("the write failed: {err}"),
    }
}

/// A pod status patch with the container `app` in `state` (`{"running": ...}`), as the
/// kubelet writes it; it does not name `volumeHealth`.
fn container_state(state: Value) -> Value {
    json!({"status": {"containerStatuses": [{"name": "app", "image": "registry.example/app:1",
        "imageID": "", "ready": false, "restartCount": 0, "state": state}]}})
}

/// The outcome of a write answered with `result`, the gated field being `field`.
fn outcome<K: serde::Serialize>(result: kube::Result<K>, field: &str) -> Outcome {
    match result {
        Ok(object) if has_status_field(&object, field) => Outcome::Stored,
        Ok(_) => Outcome::Dropped,
        Err(kube::Error::Api(status)) => Outcome::denied(&status),
        Err(err) => panic!("the write failed: {err}"),
    }
}

/// The objects of one column, and the clients that write them.
struct Column {
    ns: String,
    node: String,
    other_node: String,
    admin: kube::Client,
    kubelet: kube::Client,
    other_kubelet: kube::Client,
    monitor: kube::Client,
    other_writer: kube::Client,
}

impl Column {
    /// The objects of a column named `tag`: a namespace, a claim, pods bound to a node, and
    /// two nodes' CSINodes.
    async fn new(plane: &ControlPlane, tag: &str) -> Self {
        let cluster = &plane.cluster;
        let (node, other_node) = (format!("node-a-{tag}"), format!("node-b-{tag}"));
        let monitor = cluster
            .service_account_token(MONITOR_NAMESPACE, MONITOR)
            .await
            .unwrap();
        let other = cluster
            .service_account_token(MONITOR_NAMESPACE, OTHER_WRITER)
            .await
            .unwrap();
        let column = Column {
            ns: format!("app-{tag}"),
            admin: cluster.client(Identity::Admin).await.unwrap(),
            kubelet: cluster.client(Identity::Node(&node)).await.unwrap(),
            other_kubelet: cluster.client(Identity::Node(&other_node)).await.unwrap(),
            monitor: cluster.client(Identity::Token(&monitor)).await.unwrap(),
            other_writer: cluster.client(Identity::Token(&other)).await.unwrap(),
            node,
            other_node,
        };
        create_namespace(&column.admin, &column.ns).await.unwrap();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(column.admin.clone(), &column.ns);
        let claim = serde_json::from_value(json!({"metadata": {"name": "claim"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap();
        claims.create(&PostParams::default(), &claim).await.unwrap();
        let pods: Api<Pod> = Api::namespaced(column.admin.clone(), &column.ns);
        pods.create(
            &PostParams::default(),
            &bound_pod("app", &column.node).unwrap(),
        )
        .await
        .unwrap();
        pods.create(
            &PostParams::default(),
            &bound_pod("stored", &column.node).unwrap(),
        )
        .await
        .unwrap();
        // Each kubelet registers its node's CSINode, as at driver registration.
        for (client, name) in [
            (&column.kubelet, &column.node),
            (&column.other_kubelet, &column.other_node),
        ] {
            let nodes: Api<CSINode> = Api::all(client.clone());
            nodes
                .create(&PostParams::default(), &csinode(name, &[DRIVER]))
                .await
                .unwrap();
        }
        column
    }

    /// Stores `status` into the object at `key` in etcd, past the API (as an apiserver with
    /// the gate on would have stored it earlier), and waits until the apiserver serves it.
    async fn store_in_etcd(
        &self,
        cluster: &Cluster,
        path: &str,
        key: &str,
        status: &Value,
        field: &str,
    ) {
        let (code, mut object) = cluster
            .api
            .send(Method::GET, path, None, None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{object}");
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        for (k, v) in status["status"].as_object().unwrap() {
            object["status"][k] = v.clone();
        }
        cluster.etcd_put(key, &object).await.unwrap();
        for _ in 0..100 {
            let (_, served) = cluster
                .api
                .send(Method::GET, path, None, None)
                .await
                .unwrap();
            if !served["status"][field].is_null() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the apiserver did not serve what was written into etcd at {key}");
    }

    async fn write(&self, plane: &ControlPlane, write: Write) -> Outcome {
        let params = PatchParams::default();
        let pods = |client: &kube::Client| Api::<Pod>::namespaced(client.clone(), &self.ns);
        let claims = |client: &kube::Client| {
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), &self.ns)
        };
        let nodes = |client: &kube::Client| Api::<CSINode>::all(client.clone());
        // The Node authorizer learns of a new pod from a watch: until then it finds no
        // relation between the node and the pod or its claim.
        for attempt in 0.. {
            let answer = match write {
                Write::PodValid | Write::PodInvalid => {
                    let reason = if write == Write::PodValid {
                        "DiskSlow"
                    } else {
                        "Disk slow"
                    };
                    let patch = json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
                        {"status": "Degraded", "reason": reason}]}]}});
                    outcome(
                        pods(&self.kubelet)
                            .patch_status("app", &params, &Patch::Strategic(patch))
                            .await,
                        "volumeHealth",
                    )
                }
                Write::PodOtherNode => outcome(
                    pods(&self.other_kubelet)
                        .patch_status("app", &params, &Patch::Strategic(volume_health("x")))
                        .await,
                    "volumeHealth",
                ),
                Write::PodKeepStored => {
                    if attempt == 0 {
                        let path = format!("/api/v1/namespaces/{}/pods/stored", self.ns);
                        let key = format!("/registry/pods/{}/stored", self.ns);
                        self.store_in_etcd(
                            &plane.cluster,
                            &path,
                            &key,
                            &volume_health("before"),
                            "volumeHealth",
                        )
                        .await;
                    }
                    outcome(
                        pods(&self.kubelet)
                            .patch_status(
                                "stored",
                                &params,
                                &Patch::Strategic(volume_health("after")),
                            )
                            .await,
                        "volumeHealth",
                    )
                }
                Write::PodUnchanged => outcome(
                    pods(&self.kubelet)
                        .patch_status("stored", &params, &Patch::Strategic(volume_health("after")))
                        .await,
                    "volumeHealth",
                ),
                Write::PodRunning | Write::PodTerminated => {
                    let started = "2026-01-01T00:00:00Z";
                    let state = if write == Write::PodRunning {
                        json!({"running": {"startedAt": started}})
                    } else {
                        json!({"terminated": {"exitCode": 0, "reason": "Completed",
                            "startedAt": started, "finishedAt": "2026-01-01T00:01:00Z"}})
                    };
                    accepted(
                        pods(&self.kubelet)
                            .patch_status(
                                "stored",
                                &params,
                                &Patch::Strategic(container_state(state)),
                            )
                            .await,
                    )
                }
                Write::PodDelete => {
                    let delete = kube::api::DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    };
                    accepted(pods(&self.kubelet).delete("stored", &delete).await)
                }
                Write::ClaimMonitor
                | Write::ClaimMonitorChange
                | Write::ClaimOtherWriter
                | Write::ClaimKubelet => {
                    // Each a change: the writer list and NodeRestriction restrict changes.
                    let (client, reason) = match write {
                        Write::ClaimMonitor => (&self.monitor, "VolumeNotFound"),
                        Write::ClaimMonitorChange => (&self.monitor, "VolumeDegraded"),
                        Write::ClaimOtherWriter => (&self.other_writer, "VolumeMissing"),
                        _ => (&self.kubelet, "VolumeGone"),
                    };
                    outcome(
                        claims(client)
                            .patch_status("claim", &params, &Patch::Merge(health_status(reason)))
                            .await,
                        "healthStatus",
                    )
                }
                Write::ClaimInvalid => outcome(
                    claims(&self.monitor)
                        .patch_status("claim", &params, &Patch::Merge(health_status("Not found")))
                        .await,
                    "healthStatus",
                ),
                Write::CsiNodeValid => outcome(
                    nodes(&self.kubelet)
                        .patch_status(
                            &self.node,
                            &params,
                            &Patch::Merge(storage_health(json!([degraded()]))),
                        )
                        .await,
                    "storageHealth",
                ),
                Write::CsiNodeUnchanged => outcome(
                    nodes(&self.kubelet)
                        .patch_status(
                            &self.node,
                            &params,
                            &Patch::Merge(storage_health(json!([degraded()]))),
                        )
                        .await,
                    "storageHealth",
                ),
                Write::CsiNodeIndistinct => outcome(
                    nodes(&self.kubelet)
                        .patch_status(&self.node, &params, &Patch::Merge(indistinct()))
                        .await,
                    "storageHealth",
                ),
                Write::CsiNodeOtherNode => outcome(
                    nodes(&self.other_kubelet)
                        .patch_status(
                            &self.node,
                            &params,
                            &Patch::Merge(storage_health(json!([degraded()]))),
                        )
                        .await,
                    "storageHealth",
                ),
                Write::CsiNodeDriverChange => {
                    if attempt == 0 {
                        let path = format!("/apis/storage.k8s.io/v1/csinodes/{}", self.other_node);
                        let key = format!("/registry/csinodes/{}", self.other_node);
                        let stored = storage_health(json!([degraded()]));
                        self.store_in_etcd(&plane.cluster, &path, &key, &stored, "storageHealth")
                            .await;
                    }
                    let patch = json!({"spec": {"drivers": [
                        {"name": DRIVER, "nodeID": self.other_node, "topologyKeys": []},
                        {"name": "second.example.com", "nodeID": self.other_node, "topologyKeys": []}]}});
                    let result = nodes(&self.other_kubelet)
                        .patch(&self.other_node, &params, &Patch::Merge(patch))
                        .await;
                    outcome(result, "storageHealth")
                }
                Write::CsiNodeKeepStored => {
                    // The other node's storageHealth, stored past the API by
                    // CsiNodeDriverChange, changed by its own kubelet.
                    let changed = json!([{"status": "StorageUnreachable", "reason": "PoolGone"}]);
                    outcome(
                        nodes(&self.other_kubelet)
                            .patch_status(
                                &self.other_node,
                                &params,
                                &Patch::Merge(storage_health(changed)),
                            )
                            .await,
                        "storageHealth",
                    )
                }
                Write::CsiNodeStaleEntry => {
                    // The kubelet never removes a driver's entry when the driver unregisters.
                    let patch = json!({"status": {"storageHealth": [
                        {"name": DRIVER, "healthConditions": [degraded()]},
                        {"name": "gone.example.com", "healthConditions": [degraded()]}]}});
                    outcome(
                        nodes(&self.kubelet)
                            .patch_status(&self.node, &params, &Patch::Merge(patch))
                            .await,
                        "storageHealth",
                    )
                }
                Write::ReviewOwnCsiNode | Write::ReviewOtherCsiNode => {
                    let name = match write {
                        Write::ReviewOwnCsiNode => &self.node,
                        _ => &self.other_node,
                    };
                    self.review(plane, name).await
                }
            };
            let unrelated = matches!(answer, Outcome::Denied(403, "Node authorizer", _));
            if !unrelated || attempt == 10 || write_is_unrelated(write) {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        unreachable!()
    }

    /// The apiserver's authorizers asked whether this column's kubelet may update the
    /// `csinodes/status` of node `name`.
    async fn review(&self, plane: &ControlPlane, name: &str) -> Outcome {
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": format!("system:node:{}", self.node), "groups": ["system:nodes", "system:authenticated"],
                "resourceAttributes": {"verb": "update", "group": "storage.k8s.io", "version": "v1",
                    "resource": "csinodes", "subresource": "status", "name": name}}});
        let (code, answer) = plane
            .cluster
            .api
            .send(
                Method::POST,
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                Some(&review),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, 201, "{answer}");
        let status = &answer["status"];
        Outcome::Review(if status["allowed"] == true {
            "allowed"
        } else if status["denied"] == true {
            "denied"
        } else {
            "not allowed"
        })
    }

    /// The own-rule write as a raw request, to see the answer's warnings.
    async fn warnings(&self) -> (u16, Vec<String>) {
        let request = http::Request::patch(format!(
            "/apis/storage.k8s.io/v1/csinodes/{}/status",
            self.node
        ))
        .header("content-type", "application/merge-patch+json")
        .body(serde_json::to_vec(&indistinct()).unwrap())
        .unwrap();
        // By the admin: this project's rule never refuses (nor warns) the node's own write.
        let response = self.admin.send(request.map(Into::into)).await.unwrap();
        let warnings = response
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        (response.status().as_u16(), warnings)
    }
}

/// Writes a node may never make: no retry waits for a relation.
fn write_is_unrelated(write: Write) -> bool {
    matches!(
        write,
        Write::PodOtherNode
            | Write::CsiNodeOtherNode
            | Write::ReviewOwnCsiNode
            | Write::ReviewOtherCsiNode
    )
}

/// A storage condition a driver reports.
fn degraded() -> Value {
    json!({"status": "StorageDegraded", "reason": "PoolFull"})
}

/// Two conditions the kubelet cannot tell apart (same status, reason, accessMode, volumeMode).
fn indistinct() -> Value {
    storage_health(json!([
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]))
}

/// Makes every write of a new column with `gates`, recording each answer and, with
/// `calls`, how many reviews the admission server received for it.
async fn measure(
    plane: &ControlPlane,
    gates: Gates,
    mut calls: Option<&mut BTreeMap<Write, u64>>,
    measured: &mut BTreeMap<(Write, Gates), Outcome>,
) {
    let column = Column::new(plane, &gates.tag()).await;
    for write in Write::ALL {
        let before = match calls {
            Some(_) => plane.reviews().await.unwrap(),
            None => 0.0,
        };
        let answer = column.write(plane, write).await;
        if let Some(calls) = calls.as_deref_mut() {
            // Counts are whole numbers of reviews.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            calls.insert(write, (plane.reviews().await.unwrap() - before) as u64);
        }
        let detail = match &answer {
            Outcome::Denied(.., message) => message.as_str(),
            _ => "",
        };
        eprintln!("{} {write:?}: {} {detail}", gates.header(), answer.cell());
        measured.insert((write, gates), answer);
    }
}

/// The measured table, as markdown: a column per gate setting, then the reviews sent with
/// both gates on.
fn table(
    measured: &BTreeMap<(Write, Gates), Outcome>,
    columns: &[Gates],
    calls: &BTreeMap<Write, u64>,
) -> String {
    let mut out = String::from("| write |");
    for gates in columns {
        write!(out, " {} |", gates.header()).unwrap();
    }
    out.push_str(" reviews sent (both gates on) |\n|---|");
    out.push_str(&"---|".repeat(columns.len() + 1));
    out.push('\n');
    for write in Write::ALL {
        write!(out, "| {} |", write.describe()).unwrap();
        for gates in columns {
            write!(out, " {} |", measured[&(write, *gates)].cell()).unwrap();
        }
        writeln!(out, " {} |", calls[&write]).unwrap();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn shipped_configuration_answers_on_a_real_control_plane() {
    // Each phase is bounded: a hung step fails its phase instead of holding CI.
    let mut phases = Phases::new("e2e_shipped", Duration::from_secs(300));
    let started = Instant::now();
    let mut measured = BTreeMap::new();
    let mut calls = BTreeMap::new();
    let mut columns = Vec::new();
    let mut down_columns = Vec::new();
    // The phases that measure a column of the table.
    let mut measuring = Vec::new();
    for in_tree in [true, false] {
        let start = format!(
            "in-tree {}: control plane",
            if in_tree { "on" } else { "off" }
        );
        let mut plane = phases
            .phase(&start)
            .run(async {
                let env = webhook_env("deny");
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let plane = ControlPlane::start(in_tree, &env).await?;
                monitor_rbac(&plane.cluster).await;
                eprintln!(
                    "in-tree gate {in_tree}: control plane ready after {:?}; logs in {}",
                    started.elapsed(),
                    plane.cluster.dir().display()
                );
                anyhow::Ok(plane)
            })
            .await;
        for webhook in [true, false] {
            let gates = Gates {
                in_tree,
                webhook,
                down: false,
            };
            phases
                .phase(&gates.header())
                .after(&start)
                .run(async {
                    let plane = plane.as_mut().unwrap();
                    set_webhook(plane, webhook, "deny").await;
                    // With both gates on, count the reviews the apiserver sends for each write.
                    let count = in_tree && webhook;
                    measure(plane, gates, count.then_some(&mut calls), &mut measured).await;
                })
                .await;
            columns.push(gates);
            measuring.push(gates.header());
        }
        if in_tree {
            // The project's own rule under each enforcement action, in-tree gate on.
            for action in ["warn", "dryrun"] {
                phases
                    .phase(&format!("in-tree on: {action}"))
                    .after(&start)
                    .run(async {
                        let plane = plane.as_mut().unwrap();
                        // Repair, on in the install, would store the write repaired before the
                        // rule saw it: off here, so that the rule's answer under each action
                        // is what is measured.
                        set_webhook_with(plane, true, action, &[(REPAIR_ENV, "false")]).await;
                        let before = violations(plane, action).await;
                        let column = Column::new(plane, action).await;
                        let (code, warnings) = column.warnings().await;
                        let after = violations(plane, action).await;
                        eprintln!(
                            "{action}: {code}, warnings {warnings:?}, violations {before} -> {after}"
                        );
                        assert_eq!(code, 200, "{action}: the write is allowed");
                        assert_eq!(after - before, 1.0, "{action}: the violation is counted");
                        match action {
                            "warn" => assert!(
                                warnings.iter().any(|w| w.contains("storageHealth")),
                                "warn: the errors come back as warnings: {warnings:?}"
                            ),
                            _ => assert!(warnings.is_empty(), "dryrun: no warning: {warnings:?}"),
                        }
                    })
                    .await;
            }
            // The outage drill: the shipped configurations, every admission replica stopped
            // (the apiserver finds nothing listening), the same writes.
            let gates = Gates {
                in_tree,
                webhook: true,
                down: true,
            };
            phases
                .phase(&gates.header())
                .after(&start)
                .run(async {
                    let plane = plane.as_mut().unwrap();
                    set_webhook(plane, true, "deny").await;
                    plane.admission.stop();
                    measure(plane, gates, None, &mut measured).await;
                })
                .await;
            down_columns.push(gates);
            measuring.push(gates.header());
        }
    }
    columns.extend(down_columns);

    let mut documented = phases.phase("the measured table");
    for phase in &measuring {
        documented = documented.after(phase);
    }
    documented
        .run(async {
            volume_health_tests::documented(DOC, BEGIN, END, &table(&measured, &columns, &calls))
        })
        .await;
    let down = Gates {
        in_tree: true,
        webhook: true,
        down: true,
    };
    phases
        .phase("no kubelet or listed monitor waits on a replica")
        .after(&down.header())
        .run(async {
            for ((write, gates), answer) in &measured {
                if gates.down && (write.by_kubelet() || *write == Write::ClaimMonitorChange) {
                    assert!(
                        !matches!(answer, Outcome::Denied(_, "webhook down", _)),
                        "{write:?} was refused while every replica was down: {answer:?}"
                    );
                }
            }
        })
        .await;
    let counted = Gates {
        in_tree: true,
        webhook: true,
        down: false,
    };
    phases
        .phase("steady-state writes never reach the webhooks")
        .after(&counted.header())
        .run(async {
            for write in Write::ALL.into_iter().filter(|w| w.steady_state()) {
                assert_eq!(calls[&write], 0, "{write:?} was sent to the webhooks");
            }
        })
        .await;
    eprintln!("e2e_shipped: {:?}", started.elapsed());
    phases.finish();
}
