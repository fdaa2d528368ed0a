//! Reviews of the shape kube-apiserver sends, built to cost the most per byte: the server's time
//! must grow linearly with their size and its memory stay bounded by the body. The heap is that
//! of the measured answer's threads alone (see the binary's allocator); the tests of this module
//! run one after another, so that their timings do not measure each other.

use crate::support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use volume_health_test_kit::alloc::{count_this_thread, measure};
use volume_health_webhooks::metrics::Metrics;

const MIB: usize = 1024 * 1024;

/// The tests of this module run one at a time: the timings would measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn review(resource: &str, group: &str, object: Value, old: Value, groups: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1", "kind": "X"},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": "status",
        "requestKind": {"group": group, "version": "v1", "kind": "X"},
        "requestResource": {"group": group, "version": "v1", "resource": resource},
        "requestSubResource": "status",
        "name": "x", "namespace": "default", "operation": "UPDATE",
        "userInfo": {"username": "system:admin", "groups": groups},
        "object": object, "oldObject": old, "dryRun": false, "options": null}})
}

/// `count` copies of `item`.
fn many(item: Value, count: usize) -> Value {
    Value::Array(vec![item; count])
}

fn names(prefix: &str, count: usize) -> Value {
    (0..count)
        .map(|i| json!({"name": format!("{prefix}{i}")}))
        .collect()
}

/// The costly shapes, each with `n` items; every one of them is a list the apiserver would
/// forward as is.
type Shape = (&'static str, fn(usize) -> Value);

fn admins() -> Value {
    json!(["system:masters"])
}

fn shapes() -> Vec<Shape> {
    vec![
        ("claim with n empty conditions", |n| {
            review(
                "persistentvolumeclaims",
                "",
                json!({"metadata": {"name": "x"},
                "status": {"healthStatus": {"healthConditions": many(json!({}), n)}}}),
                Value::Null,
                admins(),
            )
        }),
        ("CSINode entry with n empty conditions", |n| {
            review(
                "csinodes",
                "storage.k8s.io",
                json!({"metadata": {"name": "x"},
                "spec": {"drivers": [{"name": "d"}]},
                "status": {"storageHealth": [{"name": "d", "healthConditions": many(json!({}), n)}]}}),
                Value::Null,
                admins(),
            )
        }),
        ("pod with n entries with empty names", |n| {
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"},
                "status": {"volumeHealth": many(json!({}), n)}}),
                Value::Null,
                admins(),
            )
        }),
        ("pod with n entries for volumes it does not have", |n| {
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"},
                "status": {"volumeHealth": names("v", n)}}),
                Value::Null,
                admins(),
            )
        }),
        ("valid pod with n volumes and n entries", |n| {
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"},
                "spec": {"volumes": names("v", n)}, "status": {"volumeHealth": names("v", n)}}),
                json!({"metadata": {"name": "x"}, "spec": {"volumes": names("v", n)},
                "status": {"volumeHealth": names("v", n)}}),
                admins(),
            )
        }),
        ("CSINode with n unregistered drivers", |n| {
            review(
                "csinodes",
                "storage.k8s.io",
                json!({"metadata": {"name": "x"},
                "status": {"storageHealth": names("d.example.com-", n)}}),
                Value::Null,
                admins(),
            )
        }),
        ("pod with n empty volumes", |n| {
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"},
                "spec": {"volumes": many(json!({}), n)},
                "status": {"volumeHealth": [{"name": "a"}]}}),
                Value::Null,
                admins(),
            )
        }),
        ("n empty groups", |n| {
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"}}),
                Value::Null,
                many(json!(""), n),
            )
        }),
    ]
}

async fn send(app: &Router, body: Vec<u8>) -> (StatusCode, Value) {
    let (status, bytes) = support::router_call::call(app, "/validate", body).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Seconds to answer `body`.
async fn seconds(app: &Router, body: &[u8]) -> f64 {
    let started = Instant::now();
    let (status, answer) = send(app, body.to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    started.elapsed().as_secs_f64()
}

/// Four times the items take about four times as long, never sixteen: for each shape, the
/// ratio of the best times of `large` and `small` items, `time` answering one body. Both sizes
/// are measured in the same run, so the ratio holds on a slow or busy machine.
async fn assert_linear<F, Fut>(
    what: &str,
    shapes: Vec<Shape>,
    (small, large): (usize, usize),
    time: F,
) where
    F: Fn(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    for (shape_name, shape) in shapes {
        let one = serde_json::to_vec(&shape(small)).unwrap();
        let four = serde_json::to_vec(&shape(large)).unwrap();
        // Linear is 4 (a little more with cache effects); quadratic would be 16, in every
        // attempt. A busy moment (the binary's other tests run beside this one) can spoil one
        // attempt of a few milliseconds, so there are three.
        let mut ratios = Vec::new();
        while ratios.len() < 3 && ratios.last().is_none_or(|&ratio| ratio >= 8.0) {
            // The best of five, the sizes taken in turn: a busy moment slows a sample of
            // each size, not every sample of one.
            let (mut t1, mut t4) = (f64::MAX, f64::MAX);
            for _ in 0..5 {
                t1 = t1.min(time(one.clone()).await);
                t4 = t4.min(time(four.clone()).await);
            }
            let ratio = t4 / t1;
            eprintln!(
                "{what}{shape_name}: {small} items {:.1} ms, {large} items {:.1} ms, ratio {ratio:.1}",
                t1 * 1e3,
                t4 * 1e3
            );
            ratios.push(ratio);
        }
        assert!(
            ratios.iter().any(|&ratio| ratio < 8.0),
            "{what}{shape_name}: {large} items took {ratios:.1?} times as long as {small}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_grows_linearly_with_the_number_of_items() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = volume_health_webhooks::router(&support::settings(), Metrics::new());
    assert_linear("", shapes(), (5_000, 20_000), |body| {
        let app = app.clone();
        async move { seconds(&app, &body).await }
    })
    .await;
}

/// A runtime whose every thread is counted, the blocking pool's that answer large reviews
/// among them; no other test's is.
fn counted_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(count_this_thread)
        .enable_all()
        .build()
        .unwrap()
}

/// The most items of `shape` whose review stays within 7 MiB less `margin`, about, and that
/// review.
fn just_under_7_mib(shape: fn(usize) -> Value, margin: usize) -> (usize, Vec<u8>) {
    let per_thousand = serde_json::to_vec(&shape(1000)).unwrap().len();
    let build = |n| serde_json::to_vec(&shape(n)).unwrap();
    let mut n = (7 * MIB - margin) * 1000 / per_thousand;
    let mut body = build(n);
    while body.len() > 7 * MIB {
        n = n * (7 * MIB - margin) / body.len();
        body = build(n);
    }
    (n, body)
}

/// The heap a 7 MiB review adds while it is answered, of every shape: the body itself (twice
/// here, where a test hands the router the whole body as one buffer that is then copied), the
/// little the views keep, and an answer of at most 10,000 errors. Nothing per item.
#[test]
fn memory_is_bounded_by_the_body_not_by_its_items() {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    let runtime = counted_runtime();
    let app = volume_health_webhooks::router(&support::settings(), Metrics::new());
    // Items per shape so that each body is just under 7 MiB.
    for (what, shape) in shapes() {
        let (n, body) = just_under_7_mib(shape, 4096);
        assert!(body.len() <= 7 * MIB, "{what}: {} bytes", body.len());
        let len = body.len();
        let started = Instant::now();
        let ((status, answer), added) = measure(|| runtime.block_on(send(&app, body)));
        let elapsed = started.elapsed();
        eprintln!(
            "{what}: {n} items, {:.1} MiB body: {:.1} MiB more heap at the peak, {elapsed:?}",
            len as f64 / MIB as f64,
            added as f64 / MIB as f64
        );
        assert_eq!(status, StatusCode::OK, "{what}: {answer}");
        assert!(
            added <= 2 * len + 24 * MIB,
            "{what}: the heap grew by {added} bytes for a {len}-byte review"
        );
        assert!(elapsed < Duration::from_secs(120), "{what}: {elapsed:?}");
    }
}

/// Two large reviews under way do not hold up an ordinary one: they are decided on the blocking
/// pool, off the async workers that serve small reviews and health checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_review_is_answered_beside_two_large_ones() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = volume_health_webhooks::router(&support::settings(), Metrics::new());
    let (_, shape) = shapes()
        .into_iter()
        .find(|(what, _)| what.contains("unregistered"))
        .unwrap();
    let large = serde_json::to_vec(&shape(100_000)).unwrap();
    let ordinary = serde_json::to_vec(&shape(1)).unwrap();
    let mut under_way = Vec::new();
    for _ in 0..2 {
        let (app, body) = (app.clone(), large.clone());
        under_way.push(tokio::spawn(async move {
            let started = Instant::now();
            let (status, _) = send(&app, body).await;
            assert_eq!(status, StatusCode::OK);
            started.elapsed()
        }));
    }
    // A head start for both large reviews; that they were under way throughout is asserted below.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let (status, answer) = send(&app, ordinary).await;
    let ordinary_took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(
        under_way.iter().all(|task| !task.is_finished()),
        "the large reviews were done before the ordinary one was answered: nothing was shown"
    );
    let mut large_took = Vec::new();
    for task in under_way {
        large_took.push(task.await.unwrap());
    }
    eprintln!("ordinary review {ordinary_took:?} beside two large ones taking {large_took:?}");
    assert!(
        ordinary_took < Duration::from_secs(1),
        "the ordinary review took {ordinary_took:?} beside {large_took:?}"
    );
}

/// The shapes that cost `/mutate --repair` the most, each with `n` items: every condition a
/// duplicate (also each nested 100 deep), every message over the limit, every reason
/// impossible, a pod's entries each given twice, CSINode drivers each with 17 long conditions.
/// Each is a status write validation refuses, so each is repaired (or found too large to
/// repair).
fn repair_shapes() -> Vec<Shape> {
    fn claim(conditions: Value) -> Value {
        review(
            "persistentvolumeclaims",
            "",
            json!({"metadata": {"name": "x"},
                "status": {"healthStatus": {"healthConditions": conditions}}}),
            json!({"metadata": {"name": "x"}}),
            admins(),
        )
    }
    fn long() -> String {
        "m".repeat(1100)
    }
    vec![
        ("claim, every condition a duplicate", |n| {
            claim(many(
                json!({"status": "Degraded", "reason": "Slow", "message": "m"}),
                n,
            ))
        }),
        ("claim, every message over the limit", |n| {
            claim(
                (0..n)
                    .map(|i| json!({"status": "Degraded", "reason": format!("R{i}"), "message": long()}))
                    .collect(),
            )
        }),
        ("claim, every condition a duplicate nested 100 deep", |n| {
            // A member the views skip, as deep as the reader takes (its limit is 128).
            let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
            let deep: Value = serde_json::from_str(&deep).unwrap();
            claim(many(
                json!({"status": "Degraded", "reason": "Slow", "message": "m", "x": deep}),
                n,
            ))
        }),
        ("claim, every reason impossible", |n| {
            claim(
                (0..n)
                    .map(|i| json!({"status": "DataLoss", "reason": format!("bad reason {i}!")}))
                    .collect(),
            )
        }),
        ("pod, every entry given twice", |n| {
            let entries: Value = (0..n)
                .map(|i| {
                    json!({"name": format!("v{}", i / 2), "healthConditions": [
                        {"status": "Degraded", "reason": format!("R{i}"), "message": "m"}]})
                })
                .collect();
            review(
                "pods",
                "",
                json!({"metadata": {"name": "x"}, "spec": {"volumes": names("v", n / 2 + 1)},
                    "status": {"volumeHealth": entries}}),
                json!({"metadata": {"name": "x"}}),
                admins(),
            )
        }),
        ("CSINode, drivers of 17 long conditions", |n| {
            let conditions: Value = (0..17)
                .map(|i| json!({"status": "StorageDegraded", "reason": format!("R{i}"), "message": long()}))
                .collect();
            let drivers: Value = (0..n.div_ceil(17))
                .map(|d| json!({"name": format!("d{d}.example.com"), "healthConditions": conditions}))
                .collect();
            review(
                "csinodes",
                "storage.k8s.io",
                json!({"metadata": {"name": "x"}, "status": {"storageHealth": drivers}}),
                json!({"metadata": {"name": "x"}}),
                admins(),
            )
        }),
    ]
}

fn repairing_app() -> Router {
    let settings = volume_health_webhooks::Settings {
        repair: true,
        ..support::settings()
    };
    volume_health_webhooks::router(&settings, Metrics::new())
}

async fn mutate(app: &Router, body: Vec<u8>) -> (StatusCode, Value) {
    let (status, bytes) = support::router_call::call(app, "/mutate", body).await;
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// `/mutate --repair`: four times the items take about four times as long, never sixteen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_time_grows_linearly_with_the_number_of_items() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let app = repairing_app();
    // The largest shape (a message of 1,100 bytes per item) stays under 7 MiB.
    assert_linear("repair, ", repair_shapes(), (1_000, 4_000), |body| {
        let app = app.clone();
        async move {
            let started = Instant::now();
            let (status, answer) = mutate(&app, body).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
            assert_eq!(answer["response"]["allowed"], true, "{answer}");
            started.elapsed().as_secs_f64()
        }
    })
    .await;
}

/// `/mutate --repair` on a review just under 7 MiB of each shape: the heap it adds is the body
/// and what repair holds, less than the body again, so at most twice the body; each answer is
/// repaired, or allowed unchanged when the repair would be larger than a stored object.
#[test]
fn repair_memory_is_bounded_by_the_body() {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    let runtime = counted_runtime();
    let app = repairing_app();
    for (what, shape) in repair_shapes() {
        let (n, body) = just_under_7_mib(shape, 65536);
        let len = body.len();
        let started = Instant::now();
        let ((status, answer), added) = measure(|| runtime.block_on(mutate(&app, body)));
        let elapsed = started.elapsed();
        let patched = answer["response"]["patch"].is_string();
        eprintln!(
            "repair, {what}: {n} items, {:.1} MiB body: {:.1} MiB more heap at the peak, {elapsed:?}, {}",
            len as f64 / MIB as f64,
            added as f64 / MIB as f64,
            if patched {
                "repaired"
            } else {
                "too large to repair"
            }
        );
        assert_eq!(status, StatusCode::OK, "{what}: {answer}");
        assert_eq!(answer["response"]["allowed"], true, "{what}: {answer}");
        assert!(
            added <= 2 * len,
            "{what}: the heap grew by {added} bytes for a {len}-byte review"
        );
        assert!(elapsed < Duration::from_secs(60), "{what}: {elapsed:?}");
    }
    // Two of the costliest at once, as two hostile pods would send them: far below the
    // Deployment's limit (256Mi), which also holds the process at rest.
    let (_, shape) = repair_shapes()
        .into_iter()
        .find(|(what, _)| what.contains("every reason impossible"))
        .unwrap();
    let body = serde_json::to_vec(&shape(140_000)).unwrap();
    assert!(body.len() <= 7 * MIB);
    let len = body.len();
    let (answers, added) = measure(|| {
        runtime.block_on(async {
            let one = tokio::spawn({
                let (app, body) = (app.clone(), body.clone());
                async move { mutate(&app, body).await.0 }
            });
            let two = tokio::spawn({
                let app = app.clone();
                async move { mutate(&app, body).await.0 }
            });
            (one.await.unwrap(), two.await.unwrap())
        })
    });
    eprintln!(
        "repair, two {:.1} MiB reviews at once: {:.1} MiB more heap at the peak",
        len as f64 / MIB as f64,
        added as f64 / MIB as f64
    );
    assert_eq!(answers, (StatusCode::OK, StatusCode::OK));
    assert!(added <= 4 * len, "two at once: {added} bytes");
    assert!(added < 128 * MIB, "two at once: {added} bytes");
}
