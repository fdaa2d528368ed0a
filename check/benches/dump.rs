//! `check` on a cluster dump, next to a plain serde_json pass over the same bytes.
//!
//! The dump is what `kubectl get pods,pvc,csinodes -A -o json` prints for a 10,000-node
//! cluster: one `List` of 100,000 pods (10 per node, each with a service-account token volume
//! and most with a claim; one in 20 reports volume health, one in 25 of those wrongly),
//! 60,000 claims (one in 10 with `status.healthStatus`) and 10,000 CSINodes (one in 10 with
//! `status.storageHealth`), indented with four spaces as kubectl indents, without managed fields
//! (kubectl's default). Rounds alternate between the two passes; medians are reported.
//!
//! `cargo bench -p volume-health-check --bench dump [-- NODES]` (default 10000).

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::de::IgnoredAny;
use serde_json::{Value, json};
use volume_health_check::{Checker, Options, OutputFormat, Reporter};

const ROUNDS: usize = 5;

fn main() {
    let nodes: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let started = Instant::now();
    let dump = generate(nodes);
    println!(
        "dump: {nodes} nodes, {} pods, {} claims, {} CSINodes, {:.1} MB, generated in {:.1?}",
        nodes * 10,
        nodes * 6,
        nodes,
        dump.len() as f64 / 1e6,
        started.elapsed()
    );

    let mut plain = Vec::new();
    let mut check = Vec::new();
    let mut refused = 0;
    for _ in 0..ROUNDS {
        plain.push(time(|| {
            let _: IgnoredAny = serde_json::from_slice(black_box(&dump)).expect("valid JSON");
        }));
        check.push(time(|| {
            let mut checker = Checker::new(
                Options::default(),
                Reporter::new(std::io::sink(), OutputFormat::Text, false),
            );
            checker.check_reader("dump.json", black_box(&dump[..]));
            let summary = checker.finish().expect("report to a sink");
            assert_eq!(summary.failed_inputs, 0);
            assert_eq!(summary.objects as usize, nodes * 17);
            refused = summary.invalid;
        }));
    }
    let mb = dump.len() as f64 / 1e6;
    let (plain, check) = (median(plain), median(check));
    let rate = |d: Duration| mb / d.as_secs_f64();
    println!("median of {ROUNDS} rounds:");
    println!(
        "  serde_json pass, IgnoredAny (baseline)  {:>8.1?}  {:>7.1} MB/s",
        plain,
        rate(plain)
    );
    println!(
        "  check                                   {:>8.1?}  {:>7.1} MB/s  {:.2} of baseline ({} objects/s, {refused} refused)",
        check,
        rate(check),
        rate(check) / rate(plain),
        (nodes as f64 * 17.0 / check.as_secs_f64()) as u64,
    );
}

fn time(f: impl FnOnce()) -> Duration {
    let started = Instant::now();
    f();
    started.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The dump, as kubectl prints it: `apiVersion`, `items`, `kind`, `metadata`.
fn generate(nodes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(nodes * 10 * 5_000);
    out.extend_from_slice(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [");
    let mut first = true;
    let mut item = |out: &mut Vec<u8>, value: &Value| {
        out.extend_from_slice(if first { b"\n" } else { b",\n" });
        first = false;
        let mut text = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(
            &mut text,
            serde_json::ser::PrettyFormatter::with_indent(b"    "),
        );
        serde::Serialize::serialize(value, &mut ser).expect("serialize");
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            if i > 0 {
                out.push(b'\n');
            }
            out.extend_from_slice(b"        ");
            out.extend_from_slice(line);
        }
    };
    for n in 0..nodes {
        for p in 0..10 {
            item(&mut out, &pod(n, p));
        }
    }
    for n in 0..nodes {
        for c in 0..6 {
            item(&mut out, &claim(n, c));
        }
    }
    for n in 0..nodes {
        item(&mut out, &csinode(n));
    }
    out.extend_from_slice(
        b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n",
    );
    out
}

fn pod(node: usize, index: usize) -> Value {
    let name = format!("app-{node}-{index}-7d9f8b6c5d-x{index}q2z");
    let claim = format!("data-{node}-{}", index % 6);
    let with_claim = index < 6;
    let mut volumes = vec![json!({
        "name": "kube-api-access-5xk2p",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}
            ]
        }
    })];
    if with_claim {
        volumes.push(json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}));
    }
    let mut status = json!({
        "conditions": [
            {"lastProbeTime": null, "lastTransitionTime": "2026-11-02T08:14:03Z", "status": "True", "type": "PodReadyToStartContainers"},
            {"lastProbeTime": null, "lastTransitionTime": "2026-11-02T08:13:58Z", "status": "True", "type": "Initialized"},
            {"lastProbeTime": null, "lastTransitionTime": "2026-11-02T08:14:09Z", "status": "True", "type": "Ready"},
            {"lastProbeTime": null, "lastTransitionTime": "2026-11-02T08:14:09Z", "status": "True", "type": "ContainersReady"},
            {"lastProbeTime": null, "lastTransitionTime": "2026-11-02T08:13:58Z", "status": "True", "type": "PodScheduled"}
        ],
        "containerStatuses": [{
            "containerID": format!("containerd://{:064x}", node * 10 + index),
            "image": "registry.example/shop/app:1.42.0",
            "imageID": "registry.example/shop/app@sha256:9b7c5a3c0f1e2d4b6a8c0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2b",
            "lastState": {},
            "name": "app",
            "ready": true,
            "restartCount": 0,
            "started": true,
            "state": {"running": {"startedAt": "2026-11-02T08:14:03Z"}},
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-5xk2p", "readOnly": true, "recursiveReadOnly": "Disabled"}]
        }],
        "hostIP": format!("10.0.{}.{}", node / 250, node % 250),
        "hostIPs": [{"ip": format!("10.0.{}.{}", node / 250, node % 250)}],
        "phase": "Running",
        "podIP": format!("10.{}.{}.{}", 64 + node / 6000, (node / 25) % 240, (node % 25) * 10 + index),
        "podIPs": [{"ip": format!("10.{}.{}.{}", 64 + node / 6000, (node / 25) % 240, (node % 25) * 10 + index)}],
        "qosClass": "Burstable",
        "startTime": "2026-11-02T08:13:58Z"
    });
    if with_claim && (node * 10 + index).is_multiple_of(20) {
        // One in 25 of the reports names a volume the pod does not have.
        let volume = if (node * 10 + index).is_multiple_of(500) {
            "cache"
        } else {
            "data"
        };
        status["volumeHealth"] = json!([{
            "name": volume,
            "healthConditions": [{"status": "Degraded", "reason": "IOPSThrottled", "message": "provisioned IOPS exceeded for 12m"}],
            "lastTransitionTime": "2026-11-02T09:00:00Z"
        }]);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": "2026-11-02T08:13:58Z",
            "generateName": format!("app-{node}-{index}-7d9f8b6c5d-"),
            "labels": {"app.kubernetes.io/name": "app", "app.kubernetes.io/part-of": "shop", "pod-template-hash": "7d9f8b6c5d"},
            "name": name,
            "namespace": format!("team-{}", node % 50),
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true, "kind": "ReplicaSet", "name": format!("app-{node}-{index}-7d9f8b6c5d"), "uid": format!("{:08x}-5f2e-4c1a-9d3b-{:012x}", node, index)}],
            "resourceVersion": format!("{}", 1_000_000 + node * 10 + index),
            "uid": format!("{:08x}-1c2d-4e5f-8a9b-{:012x}", node, index)
        },
        "spec": {
            "containers": [{
                "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "image": "registry.example/shop/app:1.42.0",
                "imagePullPolicy": "IfNotPresent",
                "name": "app",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "readinessProbe": {"failureThreshold": 3, "httpGet": {"path": "/readyz", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1},
                "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-5xk2p", "readOnly": true}]
            }],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "nodeName": format!("node-{node}"),
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
            ],
            "volumes": volumes
        },
        "status": status
    })
}

fn claim(node: usize, index: usize) -> Value {
    let mut status = json!({
        "accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "20Gi"},
        "phase": "Bound"
    });
    if (node * 6 + index).is_multiple_of(10) {
        status["healthStatus"] = json!({
            "healthConditions": [{"status": "Degraded", "reason": "IOPSThrottled", "message": "provisioned IOPS exceeded"}],
            "lastTransitionTime": "2026-11-02T09:00:00Z"
        });
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "annotations": {"pv.kubernetes.io/bind-completed": "yes", "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"},
            "creationTimestamp": "2026-11-02T08:13:58Z",
            "finalizers": ["kubernetes.io/pvc-protection"],
            "name": format!("data-{node}-{index}"),
            "namespace": format!("team-{}", node % 50),
            "resourceVersion": format!("{}", 2_000_000 + node * 6 + index),
            "uid": format!("{:08x}-7a6b-4c5d-9e8f-{:012x}", node, index)
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "20Gi"}},
            "storageClassName": "gp3",
            "volumeMode": "Filesystem",
            "volumeName": format!("pvc-{:08x}-7a6b-4c5d-9e8f-{:012x}", node, index)
        },
        "status": status
    })
}

fn csinode(node: usize) -> Value {
    let mut status = json!({});
    if node.is_multiple_of(10) {
        status["storageHealth"] = json!([{
            "name": "ebs.csi.aws.com",
            "healthConditions": [{"status": "StorageDegraded", "reason": "ThroughputLimited", "message": "instance EBS bandwidth saturated", "accessMode": "ReadWriteOnce", "volumeMode": "Filesystem", "lastTransitionTime": "2026-11-02T09:00:00Z"}]
        }]);
    }
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {
            "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"},
            "creationTimestamp": "2026-11-01T12:00:00Z",
            "name": format!("node-{node}"),
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": format!("node-{node}"), "uid": format!("{:08x}-0000-4000-8000-000000000000", node)}],
            "resourceVersion": format!("{}", 3_000_000 + node),
            "uid": format!("{:08x}-1111-4000-8000-000000000000", node)
        },
        "spec": {
            "drivers": [{"allocatable": {"count": 25}, "name": "ebs.csi.aws.com", "nodeID": format!("i-{:017x}", node), "topologyKeys": ["topology.ebs.csi.aws.com/zone"]}]
        },
        "status": status
    })
}
