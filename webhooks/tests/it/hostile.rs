//! Hostile bodies against the router: deep nesting, 100,000 conditions, huge strings and
//! invalid UTF-8 get a clear 400, 413 or 422 (over HTTP or in the review's status), never a
//! panic and never a 500.

use crate::support;

use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use support::case_body;
use volume_health_webhooks::metrics::Metrics;

const ENDPOINTS: [&str; 3] = ["/mutate", "/validate", "/authorize"];

fn app() -> Router {
    volume_health_webhooks::router(&support::settings(), Metrics::new())
}

fn gate_off_app() -> Router {
    let mut settings = support::settings();
    settings.gates.csi_volume_health = false;
    volume_health_webhooks::router(&settings, Metrics::new())
}

async fn send(app: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let (status, bytes) = support::router_call::call(app, path, body).await;
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        panic!(
            "{path}: {status}: not JSON: {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

/// A clear refusal: an HTTP 400/413/422 with a `Status` body, or (admission) an HTTP 200
/// review denied with a 400/413/422 status; the code, for the caller to narrow down.
fn assert_clear_refusal(what: &str, status: StatusCode, body: &Value) -> u16 {
    if status == StatusCode::OK {
        let response = &body["response"];
        assert_eq!(response["allowed"], false, "{what}: {body}");
        let code = response["status"]["code"].as_u64().unwrap_or(0) as u16;
        assert!(matches!(code, 400 | 413 | 422), "{what}: {body}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: no message: {body}");
        code
    } else {
        assert!(
            matches!(status.as_u16(), 400 | 413 | 422),
            "{what}: HTTP {status}: {body}"
        );
        assert_eq!(body["kind"], "Status", "{what}: {body}");
        assert_eq!(body["code"], status.as_u16(), "{what}: {body}");
        assert!(
            !body["message"].as_str().unwrap_or_default().is_empty(),
            "{what}: {body}"
        );
        status.as_u16()
    }
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn deeply_nested_bodies_are_refused_with_400() {
    let app = app();
    for depth in [200, 100_000] {
        for path in ENDPOINTS {
            let (status, body) = send(&app, path, nested(depth).into_bytes()).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{path} depth {depth}: {body}"
            );
            assert_clear_refusal(path, status, &body);
            // The same nesting under a field of an otherwise well-formed envelope.
            let text = format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","extra":{}}}}}"#,
                nested(depth)
            );
            let (status, body) = send(&app, path, text.into_bytes()).await;
            assert_clear_refusal(path, status, &body);
        }
    }
}

/// Deep nesting inside `object`: in a field the rules read it is refused in the review; in a
/// field they do not own it changes nothing (the apiserver decoded the object already).
#[tokio::test]
async fn deeply_nested_objects_are_refused_or_ignored_never_crash() {
    for app in [app(), gate_off_app()] {
        for (id, read_field) in [
            (
                "pod-valid",
                "/request/object/status/volumeHealth/0/healthConditions/0/reason",
            ),
            (
                "pvc-valid",
                "/request/object/status/healthStatus/healthConditions/0/reason",
            ),
            (
                "csinode-valid",
                "/request/object/status/storageHealth/0/healthConditions/0/reason",
            ),
        ] {
            let template = case_body(id);
            let template_text = serde_json::to_string(&template).unwrap();
            for path in ["/mutate", "/validate"] {
                let (_, plain) = send(&app, path, template_text.clone().into_bytes()).await;

                let unknown = template_text.replacen(
                    r#""status":{"#,
                    &format!(r#""status":{{"deep":{},"#, nested(50_000)),
                    1,
                );
                assert_ne!(unknown, template_text);
                let (status, body) = send(&app, path, unknown.into_bytes()).await;
                assert_eq!(status, StatusCode::OK, "{id} {path}: {body}");
                assert_eq!(body, plain, "{id} {path}: an unknown field changes nothing");

                let mut read = template.clone();
                *read.pointer_mut(read_field).unwrap() = json!("PLACEHOLDER");
                let read = serde_json::to_string(&read).unwrap().replacen(
                    r#""PLACEHOLDER""#,
                    &nested(50_000),
                    1,
                );
                let (status, body) = send(&app, path, read.into_bytes()).await;
                let what = format!("{id} {path} nested reason");
                // The mutating webhook may answer without reading the reason.
                let mutate_allowed = path == "/mutate" && body["response"]["allowed"] == true;
                if !mutate_allowed {
                    assert_clear_refusal(&what, status, &body);
                }
            }
        }
    }
}

/// 100,000 conditions in one list: TooMany, quickly, for each resource.
#[tokio::test]
async fn a_hundred_thousand_conditions_get_too_many_quickly() {
    let app = app();
    for (id, pointer, status) in [
        (
            "pod-valid",
            "/request/object/status/volumeHealth/0/healthConditions",
            "Degraded",
        ),
        (
            "pvc-valid",
            "/request/object/status/healthStatus/healthConditions",
            "Degraded",
        ),
        (
            "csinode-valid",
            "/request/object/status/storageHealth/0/healthConditions",
            "StorageDegraded",
        ),
    ] {
        let mut review = case_body(id);
        let conditions: Vec<Value> = (0..100_000)
            .map(|i| json!({"status": status, "reason": format!("Reason{i}")}))
            .collect();
        *review.pointer_mut(pointer).unwrap() = Value::Array(conditions);
        let bytes = serde_json::to_vec(&review).unwrap();
        assert!(bytes.len() < 7 * 1024 * 1024, "fits the body limit");
        // The yardstick: reading the same bytes without decoding anything, timed in the same
        // build on the same (possibly loaded) machine.
        let started = Instant::now();
        let _: serde::de::IgnoredAny = serde_json::from_slice(&bytes).unwrap();
        let parse = started.elapsed();
        let started = Instant::now();
        let (code, body) = send(&app, "/validate", bytes).await;
        let took = started.elapsed();
        assert_eq!(code, StatusCode::OK, "{id}: {body}");
        assert_eq!(assert_clear_refusal(id, code, &body), 422);
        let message = body["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("Too many: 100000: must have at most 16 items"),
            "{id}: {message}"
        );
        let causes = body["response"]["status"]["details"]["causes"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(
            causes <= 2,
            "{id}: one error for the list, not one per item: {causes}"
        );
        // About 0.3 s in a debug build and 60 ms in a release build (4 MB body included): a
        // small multiple of merely reading the body, whatever the machine's load.
        eprintln!("{id}: {took:?} to answer, {parse:?} to read");
        assert!(
            took < parse * 25 + Duration::from_millis(100),
            "{id}: took {took:?}, reading the body took {parse:?}"
        );
        if !cfg!(debug_assertions) {
            assert!(took < Duration::from_secs(1), "{id}: took {took:?}");
        }
    }
}

#[tokio::test]
async fn huge_strings_get_422_or_413() {
    let app = app();
    // A 1 MiB reason: too long, and the answer does not echo a megabyte back.
    let mut review = case_body("pod-valid");
    *review
        .pointer_mut("/request/object/status/volumeHealth/0/healthConditions/0/reason")
        .unwrap() = json!("R".repeat(1 << 20));
    let (status, body) = send(&app, "/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(assert_clear_refusal("1 MiB reason", status, &body), 422);
    assert!(
        serde_json::to_vec(&body).unwrap().len() < 64 * 1024,
        "answer size"
    );
    // A 1 MiB message on a claim.
    let mut review = case_body("pvc-valid");
    *review
        .pointer_mut("/request/object/status/healthStatus/healthConditions/0/message")
        .unwrap() = json!("m".repeat(1 << 20));
    let (status, body) = send(&app, "/validate", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(assert_clear_refusal("1 MiB message", status, &body), 422);
    // An 8 MiB string anywhere: over the body limit.
    for path in ENDPOINTS {
        let mut review = case_body("pod-valid");
        review["request"]["object"]["metadata"]["annotations"] =
            json!({"big": "x".repeat(8 << 20)});
        let (status, body) = send(&app, path, serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert_clear_refusal(path, status, &body);
    }
}

#[tokio::test]
async fn invalid_utf8_gets_400() {
    let app = app();
    // In the envelope, in the object, and in a key.
    for (where_, from, to) in [
        ("uid", "705ab4f5", "705ab4f5\u{1}"),
        ("reason", "DiskSlow", "Disk\u{1}Slow"),
        ("key", "\"phase\"", "\"ph\u{1}ase\""),
    ] {
        let text = serde_json::to_string(&case_body("pod-valid"))
            .unwrap()
            .replacen(from, to, 1);
        // A raw byte that is never valid UTF-8 where the marker is.
        let bytes: Vec<u8> = text
            .into_bytes()
            .into_iter()
            .map(|b| if b == 1 { 0xff } else { b })
            .collect();
        assert!(std::str::from_utf8(&bytes).is_err(), "{where_}");
        for path in ENDPOINTS {
            let (status, body) = send(&app, path, bytes.clone()).await;
            assert_eq!(
                assert_clear_refusal(&format!("{where_} {path}"), status, &body),
                400
            );
        }
    }
    let mut bytes = serde_json::to_vec(&case_body("authz-status-update-own")).unwrap();
    let at = bytes.windows(5).position(|w| w == b"node1").unwrap();
    bytes[at] = 0xc3;
    let (status, body) = send(&app, "/authorize", bytes).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_clear_refusal("authorize", status, &body);
}

/// `text` with the value of the first member `key` (written `from`) replaced by a string of `n`
/// DEL bytes (0x7f): valid JSON, and the character Rust's `Debug` escapes the longest
/// (`\u{7f}`, 6 bytes a byte).
fn with_del_string(text: &str, key: &str, from: &str, n: usize) -> Vec<u8> {
    let member = format!("\"{key}\":{from}");
    let at = text
        .find(&member)
        .unwrap_or_else(|| panic!("{member} in the body"))
        + key.len()
        + 3;
    let mut body = Vec::with_capacity(text.len() + n);
    body.extend_from_slice(&text.as_bytes()[..at]);
    body.push(b'"');
    body.resize(body.len() + n, 0x7f);
    body.push(b'"');
    body.extend_from_slice(&text.as_bytes()[at + from.len()..]);
    body
}

/// A value of the wrong type is refused by its type, never quoted: the answer to a 6 MiB
/// string where a bool, an object or a list belongs is a few hundred bytes, on every endpoint,
/// and so is one quoting a huge apiVersion, kind or operation.
#[tokio::test]
async fn error_text_does_not_quote_the_body() {
    let app = app();
    let n = 6 << 20;
    let review = serde_json::to_string(&case_body("pod-valid")).unwrap();
    let sar = serde_json::to_string(&case_body("authz-status-update-own")).unwrap();
    let resource_attributes = format!(
        "{}",
        json!(case_body("authz-status-update-own")["spec"]["resourceAttributes"])
    );
    let object_status = format!(
        "{}",
        json!(case_body("pod-valid")["request"]["object"]["status"])
    );
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "dryRun",
            "/validate",
            with_del_string(&review, "dryRun", "false", n),
        ),
        (
            "dryRun",
            "/mutate",
            with_del_string(&review, "dryRun", "false", n),
        ),
        (
            "resourceAttributes",
            "/authorize",
            with_del_string(&sar, "resourceAttributes", &resource_attributes, n),
        ),
        (
            "object.status",
            "/validate",
            with_del_string(&review, "status", &object_status, n),
        ),
        (
            "apiVersion",
            "/validate",
            with_del_string(&review, "apiVersion", "\"admission.k8s.io/v1\"", n),
        ),
        (
            "apiVersion",
            "/authorize",
            with_del_string(&sar, "apiVersion", "\"authorization.k8s.io/v1\"", n),
        ),
        (
            "operation",
            "/validate",
            with_del_string(&review, "operation", "\"UPDATE\"", n),
        ),
    ];
    for (what, path, body) in cases {
        let (status, bytes) = support::router_call::call(&app, path, body).await;
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        let code = assert_clear_refusal(what, status, &answer);
        assert_eq!(code, 400, "{what} {path}: {answer}");
        assert!(
            bytes.len() < 2048,
            "{what} {path}: a {}-byte answer: {}",
            bytes.len(),
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        );
        let message = answer["message"]
            .as_str()
            .or(answer["response"]["status"]["message"].as_str())
            .unwrap();
        // A value quoted by a message is cut short; a value of the wrong type is not quoted.
        if !matches!(what, "apiVersion" | "operation") {
            assert!(
                !message.contains('\u{7f}') && !message.contains("u{7f}"),
                "{what} {path}: {message}"
            );
            assert!(
                message.contains("invalid type: string, expected"),
                "{what} {path}: {message}"
            );
        }
    }
}
