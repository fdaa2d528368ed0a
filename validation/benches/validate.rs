//! Validation cost on the requests the webhook sees most and on the largest object the rules
//! allow, next to a baseline: parsing the same bytes without decoding anything. Both ways to
//! make a request are measured: from the two objects' JSON text, as a program checks its own
//! write, and the whole AdmissionReview read in one pass, as the webhooks read it.
//!
//! `cargo bench -p volume-health-validation --bench validate`

// Benchmark setup unwraps: a panic here is a broken fixture, reported with its location.
#![allow(clippy::unwrap_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::hint::black_box;
use volume_health_validation::{
    AdmissionRequest, AdmissionReview, HealthResource, Operation, Settings, UserInfo, Verdict,
    validate_pod,
};

/// A production-sized Pod: 4 containers with env and probes, `volumes` PVC volumes, full
/// container statuses, and volume health on the first `unhealthy` volumes with `conditions`
/// conditions of `message_len` bytes each.
fn pod(volumes: usize, unhealthy: usize, conditions: usize, message_len: usize) -> Value {
    let container = |i: usize| {
        json!({
            "name": format!("app-{i}"), "image": format!("registry.example.com/team/app-{i}:v1.2.3"),
            "ports": [{"containerPort": 8080 + i, "protocol": "TCP"}],
            "env": (0..16).map(|e| json!({"name": format!("ENV_VAR_{e}"), "value": format!("value-{e}-{}", "x".repeat(24))})).collect::<Vec<_>>(),
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            "volumeMounts": (0..volumes).map(|v| json!({"name": format!("data-{v}"), "mountPath": format!("/data/{v}")})).collect::<Vec<_>>(),
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"
        })
    };
    let status = |i: usize| {
        json!({
            "name": format!("app-{i}"), "ready": true, "restartCount": 0, "started": true,
            "image": format!("registry.example.com/team/app-{i}:v1.2.3"),
            "imageID": format!("registry.example.com/team/app-{i}@sha256:{}", "ab".repeat(32)),
            "containerID": format!("containerd://{}", "cd".repeat(32)),
            "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}},
            "lastState": {}
        })
    };
    let health: Vec<Value> = (0..unhealthy)
        .map(|v| {
            json!({
                "name": format!("data-{v}"),
                "lastTransitionTime": "2026-11-29T11:00:00Z",
                "healthConditions": (0..conditions).map(|c| json!({
                    "status": STATUSES[c % 3],
                    "reason": format!("Reason{c}"),
                    "message": "m".repeat(message_len),
                })).collect::<Vec<_>>()
            })
        })
        .collect();
    let pod_conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app-7d9f8b6c5-x2k4q", "namespace": "production", "uid": "6b1c4b0e-0000-4000-8000-000000000001",
                     "resourceVersion": "123456", "labels": {"app": "app", "pod-template-hash": "7d9f8b6c5"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-7d9f8b6c5", "uid": "6b1c4b0e-0000-4000-8000-000000000002", "controller": true}]},
        "spec": {
            "nodeName": "node1", "serviceAccountName": "app", "restartPolicy": "Always",
            "containers": (0..4).map(container).collect::<Vec<_>>(),
            "volumes": (0..volumes).map(|v| json!({"name": format!("data-{v}"), "persistentVolumeClaim": {"claimName": format!("data-{v}")}})).collect::<Vec<_>>()
        },
        "status": {
            "phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.11", "podIP": "10.244.1.23",
            "conditions": pod_conditions,
            "containerStatuses": (0..4).map(status).collect::<Vec<_>>(),
            "volumeHealth": health
        }
    })
}

const STATUSES: [&str; 3] = ["Degraded", "DataLoss", "Inaccessible"];

fn raw(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).unwrap()
}

fn bench_pod_status(c: &mut Criterion, name: &str, new: &Value, old: &Value) {
    let (new_raw, old_raw) = (raw(new), raw(old));
    let bytes = new_raw.get().len() + old_raw.get().len();
    let user = UserInfo {
        username: "system:node:node1".into(),
        groups: volume_health_validation::identity::Groups::of(&[
            "system:nodes",
            "system:authenticated",
        ]),
    };
    let request = || {
        AdmissionRequest::new(HealthResource::Pods, Operation::Update)
            .with_subresource("status")
            .with_name("app-7d9f8b6c5-x2k4q")
            .with_user(user.clone())
            .with_objects(Some(&new_raw), Some(&old_raw))
    };
    let policy = Settings::with_gate(true);
    assert_eq!(request().validate(&policy).unwrap(), Verdict::Allowed);

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("baseline: parse both objects, decode nothing", |b| {
        b.iter(|| {
            let a: serde::de::IgnoredAny = serde_json::from_str(black_box(new_raw.get())).unwrap();
            let o: serde::de::IgnoredAny = serde_json::from_str(black_box(old_raw.get())).unwrap();
            black_box((a, o))
        })
    });
    group.bench_function("request from objects: validate", |b| {
        b.iter(|| black_box(request()).validate(&policy).unwrap())
    });
    group.bench_function(
        "request from objects: gated_field_to_drop (gate off)",
        |b| b.iter(|| black_box(request()).gated_field_to_drop(false).unwrap()),
    );

    // The whole review, members in kube-apiserver's order: read in one pass, objects as views,
    // then decided; next to parsing the same text without decoding anything.
    let review = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"0f8e2a8c-1d2b-4c6e-8a3f-5b7d9e1c3a42","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"subResource":"status","name":"app-7d9f8b6c5-x2k4q","namespace":"production","operation":"UPDATE","userInfo":{{"username":"system:node:node1","groups":["system:nodes","system:authenticated"]}},"object":{},"oldObject":{},"dryRun":false}}}}"#,
        new_raw.get(),
        old_raw.get()
    );
    let read = AdmissionReview::parse(&review).unwrap().request;
    assert_eq!(read.validate(&policy).unwrap(), Verdict::Allowed);
    group.bench_function("baseline: parse the review, decode nothing", |b| {
        b.iter(|| serde_json::from_str::<serde::de::IgnoredAny>(black_box(&review)).unwrap())
    });
    // What `/mutate` with the gate on does: read the review (views included), decide nothing;
    // next to a read that keeps both objects as raw text, which is all it needs.
    group.bench_function("review with raw objects", |b| {
        #[derive(serde::Deserialize)]
        struct Review<'a> {
            #[serde(borrow)]
            request: Request<'a>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Request<'a> {
            #[serde(borrow)]
            uid: &'a str,
            #[serde(borrow)]
            object: &'a RawValue,
            #[serde(borrow)]
            old_object: &'a RawValue,
        }
        b.iter(|| {
            let review: Review<'_> = serde_json::from_str(black_box(&review)).unwrap();
            black_box((
                review.request.uid,
                review.request.object,
                review.request.old_object,
            ));
        })
    });
    group.bench_function("AdmissionReview: read in one pass", |b| {
        b.iter(|| AdmissionReview::parse(black_box(&review)).unwrap())
    });
    group.bench_function("AdmissionReview: read in one pass, validate", |b| {
        b.iter(|| {
            let read = AdmissionReview::parse(black_box(&review)).unwrap();
            read.request.validate(&policy).unwrap()
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    // 8 PVC volumes, 3 of them with conditions: the kubelet's everyday pod status update.
    let new = pod(8, 3, 2, 64);
    let mut old = new.clone();
    old["status"]["volumeHealth"][0]["healthConditions"][0]["message"] = json!("earlier");
    let size = serde_json::to_vec(&new).unwrap().len() + serde_json::to_vec(&old).unwrap().len();
    println!("production pod status review: {size} bytes for both objects");
    bench_pod_status(c, "pod status, 8 volumes, 3 unhealthy", &new, &old);

    // The largest object the rules accept: 64 volumes with 16 conditions of 1 KiB messages.
    let max = pod(64, 64, 16, 1024);
    let mut max_old = max.clone();
    max_old["status"]["volumeHealth"][63]["healthConditions"][15]["message"] = json!("earlier");
    bench_pod_status(
        c,
        "pod status, 64 volumes x 16 conditions x 1 KiB",
        &max,
        &max_old,
    );

    let typed_new: k8s_openapi::api::core::v1::Pod = serde_json::from_value(max.clone()).unwrap();
    let typed_old: k8s_openapi::api::core::v1::Pod = serde_json::from_value(max_old).unwrap();
    c.bench_function("validate_pod typed, 64 volumes x 16 conditions", |b| {
        b.iter(|| validate_pod(black_box(&typed_new), Some(&typed_old)))
    });
}

criterion_group!(validation, benches);
criterion_main!(validation);
