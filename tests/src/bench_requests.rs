//! The request bodies of the load benchmark, shaped like what a kube-apiserver sends.
//!
//! - [`pod_status_update`]: a kubelet's status update of a production-sized Pod (4 containers
//!   with env vars, probes and mounts, 8 PVC volumes plus the service account token volume,
//!   managed fields, full container statuses) with `status.volumeHealth` on 3 volumes, the old
//!   object carrying health on 2 of them; about 24 KB with both objects.
//! - [`pvc_status_update`]: the CSI external health monitor controller's status update of a
//!   bound StatefulSet claim (annotations, finalizer and managed fields as a cluster leaves
//!   them), changing its `status.healthStatus`; about 6 KB with both objects.
//! - [`csinode_status_update`]: a kubelet's status update of its CSINode with 4 drivers, each
//!   with a `storageHealth` entry.
//! - [`kubelet_csinode_status_access`]: the SubjectAccessReview of a kubelet updating its own
//!   `csinodes/status`.
//!
//! Every one of them is allowed by a server with `--feature-gates=CSIVolumeHealth=true`.

use serde_json::{Value, json};

use volume_health_test_kit::apiserver_order::apiserver_order;

/// The node the kubelet of every request runs on.
pub const NODE: &str = "node1";

const POD_UID: &str = "8c6f3c1e-5b7a-4d2e-9f10-2a4b6c8d0e13";
const CREATED: &str = "2026-07-20T11:02:17Z";
const STARTED: &str = "2026-07-20T11:02:21Z";

/// The admission review body of a kubelet's Pod status update (UPDATE of `pods/status`).
pub fn pod_status_update() -> Vec<u8> {
    let old = pod(&["data-0", "wal-0"], "2026-07-20T11:40:00Z", "28411");
    let new = pod(
        &["data-0", "wal-0", "cache-0"],
        "2026-07-20T11:45:00Z",
        "28457",
    );
    let request = json!({
        "uid": "0f8e2a8c-1d2b-4c6e-8a3f-5b7d9e1c3a42",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": "status",
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "requestSubResource": "status",
        "name": "orders-db-0",
        "namespace": "shop",
        "operation": "UPDATE",
        "userInfo": kubelet(),
        "object": new,
        "oldObject": old,
        "dryRun": false,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    });
    admission_review(request)
}

/// The service account the CSI external health monitor controller runs as.
pub const HEALTH_MONITOR: &str =
    "system:serviceaccount:kube-system:csi-external-health-monitor-controller";

/// The admission review body of the CSI external health monitor controller's status update of
/// a claim (UPDATE of `persistentvolumeclaims/status`): the volume went from degraded to
/// inaccessible.
pub fn pvc_status_update() -> Vec<u8> {
    let claim = |conditions: Value, transition: &str, version: &str| {
        json!({
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "metadata": {
                "name": "data-0-orders-db-0",
                "namespace": "shop",
                "uid": "5a7c9e1b-3d5f-4a6c-8e0a-2c4e6a8c0e25",
                "resourceVersion": version,
                "creationTimestamp": CREATED,
                "labels": {
                    "app.kubernetes.io/name": "orders-db",
                    "app.kubernetes.io/component": "database"
                },
                "annotations": {
                    "pv.kubernetes.io/bind-completed": "yes",
                    "pv.kubernetes.io/bound-by-controller": "yes",
                    "volume.beta.kubernetes.io/storage-provisioner": "ebs.csi.aws.com",
                    "volume.kubernetes.io/selected-node": NODE,
                    "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"
                },
                "finalizers": ["kubernetes.io/pvc-protection"],
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:pv.kubernetes.io/bind-completed": {}, "f:pv.kubernetes.io/bound-by-controller": {}, "f:volume.beta.kubernetes.io/storage-provisioner": {}, "f:volume.kubernetes.io/storage-provisioner": {}}, "f:labels": {".": {}, "f:app.kubernetes.io/component": {}, "f:app.kubernetes.io/name": {}}}, "f:spec": {"f:accessModes": {}, "f:resources": {"f:requests": {".": {}, "f:storage": {}}}, "f:storageClassName": {}, "f:volumeMode": {}, "f:volumeName": {}}}},
                    {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {"f:volume.kubernetes.io/selected-node": {}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": STARTED, "fieldsType": "FieldsV1", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:accessModes": {}, "f:capacity": {".": {}, "f:storage": {}}, "f:phase": {}}}},
                    {"manager": "csi-external-health-monitor-controller", "operation": "Update", "apiVersion": "v1", "time": transition, "fieldsType": "FieldsV1", "subresource": "status",
                     "fieldsV1": {"f:status": {"f:healthStatus": {".": {}, "f:healthConditions": {}, "f:lastTransitionTime": {}}}}}
                ]
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "100Gi"}},
                "volumeName": "pvc-5a7c9e1b-3d5f-4a6c-8e0a-2c4e6a8c0e25",
                "storageClassName": "gp3",
                "volumeMode": "Filesystem"
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "100Gi"},
                "healthStatus": {
                    "healthConditions": conditions,
                    "lastTransitionTime": transition
                }
            }
        })
    };
    let degraded = json!({
        "status": "Degraded",
        "reason": "HighLatency",
        "message": "p99 write latency above 50ms for 5 minutes"
    });
    let inaccessible = json!({
        "status": "Inaccessible",
        "reason": "VolumeNotFound",
        "message": "volume vol-0f1e2d3c4b5a69788 not found in us-east-1a"
    });
    let request = json!({
        "uid": "7d9f1b3d-5e70-4c2a-8e4b-6d8f0a2c4e61",
        "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
        "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
        "subResource": "status",
        "requestKind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
        "requestResource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
        "requestSubResource": "status",
        "name": "data-0-orders-db-0",
        "namespace": "shop",
        "operation": "UPDATE",
        "userInfo": {
            "username": HEALTH_MONITOR,
            "uid": "1c3e5a7b-9d0f-4b2d-8f6a-0e2c4a6e8b13",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            "extra": {
                "authentication.kubernetes.io/credential-id": ["JTI=3f5a7c9e-1b3d-4f60-8a2c-4e6a8c0e2b47"],
                "authentication.kubernetes.io/node-name": [NODE],
                "authentication.kubernetes.io/node-uid": ["6b1c4b0e-0000-4000-8000-00000000000a"],
                "authentication.kubernetes.io/pod-name": ["csi-ebs-controller-7f9c8d6b5-x2k4q"],
                "authentication.kubernetes.io/pod-uid": ["0a2c4e6a-8c0e-4b24-9f6a-8c0e2a4c6e81"]
            }
        },
        "object": claim(json!([degraded.clone(), inaccessible]), "2026-07-20T11:45:00Z", "28460"),
        "oldObject": claim(json!([degraded]), "2026-07-20T11:40:00Z", "28412"),
        "dryRun": false,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    });
    admission_review(request)
}

/// The admission review body of a kubelet's CSINode status update (UPDATE of
/// `csinodes/status`) with 4 drivers.
pub fn csinode_status_update() -> Vec<u8> {
    let drivers = [
        ("ebs.csi.aws.com", "i-0a1b2c3d4e5f60718"),
        ("efs.csi.aws.com", "i-0a1b2c3d4e5f60718"),
        ("csi.example.com", "node1-id"),
        ("rbd.csi.ceph.com", "node1"),
    ];
    let csinode = |reason: &str, version: &str| {
        json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": NODE,
                "uid": "3d1f0b6a-7c2e-4e58-b1a9-6f4d2c8e0a17",
                "resourceVersion": version,
                "creationTimestamp": "2026-07-01T08:00:00Z",
                "annotations": {
                    "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
                },
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": NODE,
                    "uid": "6b1c4b0e-0000-4000-8000-00000000000a"
                }]
            },
            "spec": {
                "drivers": drivers.iter().map(|(name, id)| json!({
                    "name": name,
                    "nodeID": id,
                    "topologyKeys": ["topology.kubernetes.io/zone", "topology.kubernetes.io/region"],
                    "allocatable": {"count": 25}
                })).collect::<Vec<_>>()
            },
            "status": {
                "storageHealth": drivers.iter().enumerate().map(|(i, (name, _))| json!({
                    "name": name,
                    "healthConditions": [{
                        "status": if i % 2 == 0 { "StorageDegraded" } else { "StorageUnreachable" },
                        "reason": reason,
                        "message": "backend reported a degraded storage pool",
                        "accessMode": "ReadWriteOnce",
                        "volumeMode": "Filesystem",
                        "lastTransitionTime": "2026-07-20T11:45:00Z"
                    }]
                })).collect::<Vec<_>>()
            }
        })
    };
    let request = json!({
        "uid": "4b2d6f8a-0c1e-4a3b-9d5f-7e9a1c3b5d60",
        "kind": {"group": "storage.k8s.io", "version": "v1", "kind": "CSINode"},
        "resource": {"group": "storage.k8s.io", "version": "v1", "resource": "csinodes"},
        "subResource": "status",
        "requestKind": {"group": "storage.k8s.io", "version": "v1", "kind": "CSINode"},
        "requestResource": {"group": "storage.k8s.io", "version": "v1", "resource": "csinodes"},
        "requestSubResource": "status",
        "name": NODE,
        "operation": "UPDATE",
        "userInfo": kubelet(),
        "object": csinode("PoolDegraded", "9321"),
        "oldObject": csinode("PoolFull", "9320"),
        "dryRun": false,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    });
    admission_review(request)
}

/// The SubjectAccessReview body of a kubelet updating its own `csinodes/status`.
pub fn kubelet_csinode_status_access() -> Vec<u8> {
    let review = json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {
            "resourceAttributes": {
                "namespace": "", "verb": "update", "group": "storage.k8s.io", "version": "v1",
                "resource": "csinodes", "subresource": "status", "name": NODE
            },
            "user": format!("system:node:{NODE}"),
            "groups": ["system:nodes", "system:authenticated"],
            "extra": {},
            "uid": "9f2c6a1e-3b1d-4c44-9a39-2f0f1c7b8e11"
        },
        "status": {"allowed": false}
    });
    review.to_string().into_bytes()
}

/// The review body as kube-apiserver writes it (see [`apiserver_order`]).
fn admission_review(request: Value) -> Vec<u8> {
    let review = json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": request,
    });
    apiserver_order(&review).into_bytes()
}

fn kubelet() -> Value {
    json!({
        "username": format!("system:node:{NODE}"),
        "groups": ["system:nodes", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=7d1e4c0f2a9b8e6d"]}
    })
}

const CONTAINERS: [(&str, &str); 4] = [
    ("postgres", "registry.example/postgres:16.3"),
    (
        "metrics-exporter",
        "registry.example/postgres-exporter:0.15.0",
    ),
    ("backup-agent", "registry.example/backup-agent:2.4.1"),
    ("log-shipper", "registry.example/fluent-bit:3.0.7"),
];

const CLAIMS: [&str; 8] = [
    "data-0",
    "wal-0",
    "cache-0",
    "archive-0",
    "backup-0",
    "tmp-0",
    "logs-0",
    "scratch-0",
];

/// A StatefulSet Pod on [`NODE`] with `status.volumeHealth` on the claims `health_on`.
fn pod(health_on: &[&str], probe_time: &str, resource_version: &str) -> Value {
    let containers: Vec<Value> = CONTAINERS
        .iter()
        .enumerate()
        .map(|(i, (name, image))| container(i, name, image))
        .collect();
    let mut volumes: Vec<Value> = CLAIMS
        .iter()
        .map(|claim| {
            json!({
                "name": claim,
                "persistentVolumeClaim": {"claimName": format!("{claim}-orders-db-0")}
            })
        })
        .collect();
    volumes.push(json!({
        "name": "kube-api-access-7xk2p",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    }));
    let statuses: Vec<Value> = CONTAINERS
        .iter()
        .enumerate()
        .map(|(i, (name, image))| {
            json!({
                "name": name,
                "state": {"running": {"startedAt": STARTED}},
                "lastState": {},
                "ready": true,
                "restartCount": 0,
                "image": image,
                "imageID": format!("{image}@sha256:4f2a9c1e7b3d5f8a0c6e2b4d9f1a3c5e7b9d0f2a4c6e8b1d3f5a7c9e0b2d4f6{i}"),
                "containerID": format!("containerd://{}{i}", "9b8f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a29180f7e6d5c4b3a2"),
                "started": true,
                "volumeMounts": mounts(i).into_iter().map(|mut m| { m["recursiveReadOnly"] = json!("Disabled"); m }).collect::<Vec<_>>()
            })
        })
        .collect();
    let conditions: Vec<Value> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .map(|kind| {
        json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": STARTED})
    })
    .collect();
    let volume_health: Vec<Value> = health_on
        .iter()
        .map(|claim| {
            json!({
                "name": claim,
                "healthConditions": [{
                    "status": "Degraded",
                    "reason": "HighLatency",
                    "message": "p99 write latency above 50ms for 5 minutes"
                }],
                "lastTransitionTime": probe_time
            })
        })
        .collect();
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "orders-db-0",
            "generateName": "orders-db-",
            "namespace": "shop",
            "uid": POD_UID,
            "resourceVersion": resource_version,
            "creationTimestamp": CREATED,
            "labels": {
                "app.kubernetes.io/name": "orders-db",
                "app.kubernetes.io/component": "database",
                "app.kubernetes.io/part-of": "shop",
                "apps.kubernetes.io/pod-index": "0",
                "controller-revision-hash": "orders-db-6d9f8b7c5d",
                "statefulset.kubernetes.io/pod-name": "orders-db-0"
            },
            "annotations": {
                "kubectl.kubernetes.io/default-container": "postgres",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9187"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "orders-db",
                "uid": "2e4c6a8b-0d1f-4e3a-8c5b-7d9f1b3d5e70", "controller": true,
                "blockOwnerDeletion": true
            }],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": CREATED, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:controller-revision-hash": {}}, "f:ownerReferences": {".": {}}}, "f:spec": {"f:containers": {}, "f:volumes": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": probe_time, "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}, "f:volumeHealth": {}}}}
            ]
        },
        "spec": {
            "volumes": volumes,
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "orders-db",
            "serviceAccount": "orders-db",
            "nodeName": NODE,
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999, "runAsNonRoot": true},
            "hostname": "orders-db-0",
            "subdomain": "orders-db",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": "10.0.12.7",
            "hostIPs": [{"ip": "10.0.12.7"}],
            "podIP": "10.244.3.41",
            "podIPs": [{"ip": "10.244.3.41"}],
            "startTime": CREATED,
            "containerStatuses": statuses,
            "qosClass": "Burstable",
            "volumeHealth": volume_health
        }
    })
}

fn container(index: usize, name: &str, image: &str) -> Value {
    let port = 5432 + index as u16 * 1000;
    let env: Vec<Value> = [
        ("POD_NAME", Some("metadata.name")),
        ("POD_NAMESPACE", Some("metadata.namespace")),
        ("POD_IP", Some("status.podIP")),
        ("PGDATA", None),
        ("PGPORT", None),
        ("LOG_LEVEL", None),
    ]
    .iter()
    .map(|(key, field)| match field {
        Some(path) => {
            json!({"name": key, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}})
        }
        None => json!({"name": key, "value": format!("{}-{index}", key.to_ascii_lowercase())}),
    })
    .collect();
    json!({
        "name": name,
        "image": image,
        "ports": [{"name": "main", "containerPort": port, "protocol": "TCP"}],
        "env": env,
        "resources": {
            "limits": {"cpu": "2", "memory": "4Gi"},
            "requests": {"cpu": "500m", "memory": "1Gi"}
        },
        "volumeMounts": mounts(index),
        "livenessProbe": {
            "tcpSocket": {"port": port},
            "initialDelaySeconds": 30, "timeoutSeconds": 5, "periodSeconds": 10,
            "successThreshold": 1, "failureThreshold": 6
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": port, "scheme": "HTTP"},
            "initialDelaySeconds": 5, "timeoutSeconds": 3, "periodSeconds": 5,
            "successThreshold": 1, "failureThreshold": 3
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}
    })
}

/// Two claims per container plus the token volume.
fn mounts(index: usize) -> Vec<Value> {
    let mut mounts: Vec<Value> = CLAIMS[index * 2..index * 2 + 2]
        .iter()
        .map(|claim| json!({"name": claim, "mountPath": format!("/var/lib/{claim}")}))
        .collect();
    mounts.push(json!({
        "name": "kube-api-access-7xk2p",
        "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
    }));
    mounts
}
