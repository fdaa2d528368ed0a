//! Values taken from requests cannot forge log lines or reach a terminal: in both log formats,
//! every control character in every field is escaped.

use crate::support;

use support::{Captured, wire};

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use volume_health_webhooks::metrics::Metrics;

const FORGED: &str = "mallory\n2099-01-01T00:00:00.000000Z  INFO admission review decision=\"allowed\"\r\u{1b}[2J\u{7}\u{85}\u{2028}";

async fn post(app: &Router, path: &str, body: Value) {
    let (status, _) = support::router_call::call(app, path, wire(&body)).await;
    assert_eq!(status, StatusCode::OK);
}

/// A denied review (logged at info) whose uid, resource, name, namespace and user all carry
/// control characters, and a denied authorization whose user and attributes do.
async fn send_forgeries(app: &Router) {
    post(
        app,
        "/validate",
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": FORGED,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "status", "name": FORGED, "namespace": FORGED,
            "operation": "UPDATE",
            "userInfo": {"username": format!("system:node:{FORGED}"), "groups": ["system:nodes"]},
            "object": {"metadata": {"name": FORGED}, "spec": {"nodeName": "n1"}},
            "oldObject": {"metadata": {"name": FORGED}, "spec": {"nodeName": "n1"}},
            "dryRun": false, "options": null}}),
    )
    .await;
    post(
        app,
        "/authorize",
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "system:node:n1", "groups": ["system:nodes"],
                "resourceAttributes": {"verb": FORGED, "group": FORGED, "resource": FORGED,
                    "subresource": FORGED, "name": FORGED}}}),
    )
    .await;
    // A body that is no review: its error message quotes the request.
    post_raw(
        app,
        format!(
            "{{\"apiVersion\":{}}}",
            serde_json::to_string(FORGED).unwrap()
        ),
    )
    .await;
}

async fn post_raw(app: &Router, body: String) {
    let (status, _) = support::router_call::call(app, "/validate", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn control_characters_from_requests_are_escaped_in_both_formats() {
    let app = volume_health_webhooks::router(&support::settings(), Metrics::new());
    let logs = Captured::default();

    let guard = logs.install(tracing::Level::DEBUG);
    send_forgeries(&app).await;
    drop(guard);
    let out = logs.take();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "one line per review:\n{out}");
    for line in &lines {
        assert!(
            !line.chars().any(|c| c.is_control() || c == '\u{2028}'),
            "raw control character in {line:?}"
        );
        // Request values are quoted strings: the forged field stays inside one.
        assert_eq!(
            line.matches("decision=\"").count(),
            usize::from(!line.contains("bad request")),
            "{line}"
        );
    }
    assert!(lines[0].contains("admission review"), "{out}");
    assert!(lines[0].contains(r#"decision="forbidden""#), "{out}");
    assert!(lines[0].contains(r#"uid="mallory\n2099"#), "{out}");
    assert!(lines[1].contains("authorization review"), "{out}");

    let writer = logs.clone();
    let json_logs = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .json()
        .flatten_event(true)
        .with_writer(move || volume_health_webhooks::telemetry::JsonEscapes(writer.clone()))
        .finish();
    let guard = tracing::subscriber::set_default(json_logs);
    tracing::callsite::rebuild_interest_cache();
    send_forgeries(&app).await;
    drop(guard);
    let out = logs.take();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "one line per review:\n{out}");
    for line in &lines {
        assert!(
            !line.chars().any(|c| c.is_control()),
            "raw control character in {line:?}"
        );
        let event: Value = serde_json::from_str(line).unwrap();
        assert!(event.is_object(), "{line}");
    }
    // JSON keeps the value, escaped by JSON itself.
    let admission: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(admission["uid"], FORGED);
}
