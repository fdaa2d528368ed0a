//! The real-driver fixtures (`tests/fixtures/real-drivers/`) on a real kube-apiserver v1.37.2
//! (in-tree gate on) behind the shipped configurations and the release binary, repair on as
//! shipped. Each fixture's object is created, and each probe's report written to its `status`
//! as its writer writes it: a JSON merge patch, by the kubelet as `system:node:<node>` (client
//! certificate) or by the monitor with its service account's token. Every answer is compared
//! with the fixture's record: an admitted write is stored as sent, without a warning; a refused
//! one gets the recorded 422 while the server's repair is off, then is stored as recorded, with
//! the recorded warnings, once it is on again; a probe whose RPC failed leaves the stored
//! report as it was. `real_drivers.rs` checks the same records against the library. Slow, so
//! ignored: `make e2e`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use hyper::Method;
use serde_json::{Value, json};
use volume_health_tests::cluster::{ControlPlane, Identity, REPAIR_ENV, Written, patch_retrying};
use volume_health_tests::drivers::{
    Answer, Fixture, Report, Sent, Writer, fixture_files, stored_after,
};
use volume_health_tests::phases::Phases;

const MERGE: &str = "application/merge-patch+json";

/// PATCHes `path` as `client` with a merge patch, retrying while the Node authorizer has not
/// yet related a node to its new pod.
async fn patch(client: &kube::Client, path: &str, body: &Value) -> Written {
    patch_retrying(client, path, MERGE, body).await.unwrap()
}

/// The health field of an object the apiserver answered.
fn field(fixture: &Fixture, object: &Value) -> Option<Report> {
    let value = object["status"][fixture.field().unwrap()].clone();
    serde_json::from_value(value).unwrap()
}

/// Restarts the admission server with its repair as shipped (on) or off.
async fn set_repair(plane: &mut ControlPlane, on: bool) {
    let env: &[(&str, &str)] = if on { &[] } else { &[(REPAIR_ENV, "false")] };
    plane.set_webhook(true, env).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and the release binary: `make e2e`"]
async fn real_drivers_get_the_recorded_answers() {
    let mut phases = Phases::new("e2e_drivers", Duration::from_secs(180));
    let Some(mut plane) = phases.phase("control plane").run(setup()).await else {
        return phases.finish();
    };
    for path in fixture_files().unwrap() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        phases
            .phase(&name)
            .after("control plane")
            .run(replay(&mut plane, &path))
            .await;
    }
    phases.finish();
}

/// The control plane as shipped (repair on), and RBAC for the monitors' service accounts:
/// the status of claims.
async fn setup() -> anyhow::Result<ControlPlane> {
    let plane = ControlPlane::start(true, &[]).await?;
    eprintln!("logs in {}", plane.cluster.dir().display());
    let mut accounts = Vec::new();
    for path in fixture_files()? {
        if let Writer::Monitor { service_account } = Fixture::read(&path)?.writer {
            let (namespace, name) = service_account.split_once('/').unwrap();
            accounts.push(json!({"kind": "ServiceAccount", "name": name, "namespace": namespace}));
        }
    }
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "pvc-health-writer"},
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
            "verbs": ["get", "update", "patch"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "pvc-health-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pvc-health-writer"},
        "subjects": accounts});
    for (path, object) in [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            binding,
        ),
    ] {
        let (code, body) = plane
            .cluster
            .api
            .send(Method::POST, path, Some(&object), None)
            .await?;
        anyhow::ensure!(code == 201, "{path}: {code} {body}");
    }
    Ok(plane)
}

/// One fixture: its object created, each probe written as recorded and its answer compared.
async fn replay(plane: &mut ControlPlane, path: &Path) {
    let fixture = Fixture::read(path).unwrap();
    let (namespace, name) = (fixture.namespace(), fixture.name());
    let resource = fixture.resource().unwrap();
    let api = &plane.cluster.api;
    let (code, body) = api
        .send(
            Method::POST,
            "/api/v1/namespaces",
            Some(&json!({"metadata": {"name": namespace}})),
            None,
        )
        .await
        .unwrap();
    assert!(
        code == 201 || code == 409,
        "namespace {namespace}: {code} {body}"
    );
    let collection = format!("/api/v1/namespaces/{namespace}/{resource}");
    let (code, body) = api
        .send(Method::POST, &collection, Some(&fixture.object), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{collection}: {body}");
    let client = match &fixture.writer {
        Writer::Kubelet { node } => plane.cluster.client(Identity::Node(node)).await.unwrap(),
        Writer::Monitor { service_account } => {
            let (namespace, account) = service_account.split_once('/').unwrap();
            let token = plane
                .cluster
                .service_account_token(namespace, account)
                .await
                .unwrap();
            plane.cluster.client(Identity::Token(&token)).await.unwrap()
        }
    };
    let status = format!("{collection}/{name}/status");
    let mut stored = None;
    for (i, write) in fixture.writes.iter().enumerate() {
        let context = format!("write {i} ({})", write.probe);
        let answer = write.answer.as_ref().unwrap();
        match (&write.report, answer) {
            (Sent::Nothing, Answer::NotWritten) => {
                let (code, body) = plane
                    .cluster
                    .api
                    .send(Method::GET, &status, None, None)
                    .await
                    .unwrap();
                assert_eq!(code, 200, "{context}: {body}");
                assert_eq!(
                    field(&fixture, &body),
                    stored,
                    "{context}: the stored report"
                );
            }
            (Sent::Field(report), Answer::Admitted) => {
                let written =
                    patch(&client, &status, &fixture.patch(report.as_ref()).unwrap()).await;
                assert_eq!(written.code, 200, "{context}: {}", written.body);
                assert_eq!(written.warnings, Vec::<String>::new(), "{context}");
                assert_eq!(
                    &field(&fixture, &written.body),
                    report,
                    "{context}: stored as sent"
                );
            }
            (
                Sent::Field(report),
                Answer::Refused {
                    code,
                    message,
                    repaired,
                },
            ) => {
                let sent = fixture.patch(report.as_ref()).unwrap();
                set_repair(plane, false).await;
                let refused = patch(&client, &status, &sent).await;
                assert_eq!(
                    i32::from(refused.code),
                    *code,
                    "{context}: {}",
                    refused.body
                );
                assert_eq!(
                    refused.body["message"].as_str(),
                    Some(message.as_str()),
                    "{context}"
                );
                set_repair(plane, true).await;
                let written = patch(&client, &status, &sent).await;
                assert_eq!(written.code, 200, "{context}: {}", written.body);
                assert_eq!(
                    written.warnings, repaired.warnings,
                    "{context}: the warnings"
                );
                assert_eq!(
                    field(&fixture, &written.body),
                    repaired.stored,
                    "{context}: stored repaired"
                );
            }
            (report, answer) => panic!("{context}: the answer {answer:?} to {report:?}"),
        }
        stored = stored_after(stored.as_ref(), write, answer).unwrap();
    }
}
