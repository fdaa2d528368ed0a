//! The webhook handlers in-process, without TLS or sockets, next to the load benchmark's two
//! baseline routers (what `baseline-webhook` serves behind its TLS listener): one reads each
//! body and answers with a fixed review, the other also makes one strict JSON pass over the
//! body first. The differences are the CPU time the handlers add to each request, over the
//! stack and over the least any server that rejects malformed JSON must do, which is what the
//! load benchmark's throughput ratios come down to on a machine with few cores.
//!
//! `cargo bench -p volume-health-tests --bench handlers`

// Benchmark setup unwraps: a panic here is a broken fixture, reported with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use volume_health_test_kit::router_call;
use volume_health_tests::baseline::{self, BodyCheck, MAX_REQUEST_BYTES};
use volume_health_tests::bench_requests;
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

fn server() -> Router {
    let settings = Settings {
        gates: FeatureGates {
            csi_volume_health: true,
        },
        authz_deny_on_mismatch: false,
        pvc_health_writers: None,
        storage_condition_identity: Default::default(),
        enforcement_action: EnforcementAction::Deny,
        repair: false,
        max_request_bytes: MAX_REQUEST_BYTES,
        max_in_flight_bytes: 64 * MAX_REQUEST_BYTES,
        request_timeout: Duration::from_secs(10),
    };
    router(&settings, Metrics::new())
}

/// One request through `app`, answer read whole.
async fn call(app: &Router, path: &'static str, body: &Bytes) -> Bytes {
    let (status, answer) = router_call::call(app, path, body.clone()).await;
    assert!(status.is_success());
    answer
}

fn handlers(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases: [(&str, &'static str, Bytes); 5] = [
        (
            "pod status /validate",
            "/validate",
            bench_requests::pod_status_update().into(),
        ),
        (
            "pod status /mutate",
            "/mutate",
            bench_requests::pod_status_update().into(),
        ),
        (
            "PVC status /validate",
            "/validate",
            bench_requests::pvc_status_update().into(),
        ),
        (
            "CSINode status /validate",
            "/validate",
            bench_requests::csinode_status_update().into(),
        ),
        (
            "SAR /authorize",
            "/authorize",
            bench_requests::kubelet_csinode_status_access().into(),
        ),
    ];
    let server = server();
    let (plain, strict) = (
        baseline::router(BodyCheck::None),
        baseline::router(BodyCheck::StrictJson),
    );
    for (label, path, body) in &cases {
        // The answers must allow, or the benchmark measures an error path.
        let answer = runtime.block_on(call(&server, path, body));
        const ALLOWED: &[u8] = br#""allowed":true"#;
        assert!(
            answer.windows(ALLOWED.len()).any(|w| w == ALLOWED),
            "{label}: {}",
            String::from_utf8_lossy(&answer)
        );
        let mut group = c.benchmark_group(*label);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("baseline", |b| {
            b.iter(|| runtime.block_on(call(&plain, path, body)));
        });
        group.bench_function("strict JSON", |b| {
            b.iter(|| runtime.block_on(call(&strict, path, body)));
        });
        group.bench_function("server", |b| {
            b.iter(|| runtime.block_on(call(&server, path, body)));
        });
        group.finish();
    }
}

criterion_group!(benches, handlers);
criterion_main!(benches);
