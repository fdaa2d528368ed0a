//! The webhook handlers in-process, without TLS or sockets, next to a baseline router that
//! reads each body and answers with a fixed review (what `baseline-webhook` does behind its
//! TLS listener). The difference is the CPU time the handlers add to each request, which is
//! what the load benchmark's throughput ratio comes down to on a machine with few cores.
//!
//! `cargo bench -p volume-health-tests --bench handlers`

// Benchmark setup unwraps: a panic here is a broken fixture, reported with its location.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::DefaultBodyLimit;
use axum::http::{Request, header};
use axum::response::IntoResponse;
use axum::routing::post;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::BodyExt;
use tower::ServiceExt;
use volume_health_tests::bench_requests;
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

const MAX_REQUEST_BYTES: usize = 7 * 1024 * 1024;

fn server() -> Router {
    let settings = Settings {
        gates: FeatureGates {
            csi_volume_health: true,
        },
        authz_deny_on_mismatch: false,
        pvc_health_writers: None,
        enforcement_action: EnforcementAction::Deny,
        max_request_bytes: MAX_REQUEST_BYTES,
        max_in_flight_bytes: 64 * MAX_REQUEST_BYTES,
        request_timeout: Duration::from_secs(10),
    };
    router(&settings, Metrics::new())
}

fn baseline() -> Router {
    async fn fixed(body: Bytes) -> impl IntoResponse {
        black_box(body.len());
        (
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}"#,
        )
    }
    Router::new()
        .route("/mutate", post(fixed))
        .route("/validate", post(fixed))
        .route("/authorize", post(fixed))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
}

/// One request through `app`, answer read whole.
async fn call(app: &Router, path: &'static str, body: &Bytes) -> Bytes {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert!(response.status().is_success());
    response.into_body().collect().await.unwrap().to_bytes()
}

fn handlers(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cases: [(&str, &'static str, Bytes); 4] = [
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
    let (server, baseline) = (server(), baseline());
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
            b.iter(|| runtime.block_on(call(&baseline, path, body)));
        });
        group.bench_function("server", |b| {
            b.iter(|| runtime.block_on(call(&server, path, body)));
        });
        group.finish();
    }
}

criterion_group!(benches, handlers);
criterion_main!(benches);
