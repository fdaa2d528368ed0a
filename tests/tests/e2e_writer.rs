//! The example health monitor (`examples/health-monitor`) against a real kube-apiserver v1.37.2
//! and etcd with `CSIVolumeHealth` on and no webhook: it writes as a service account with only
//! `get` and `patch` on `persistentvolumeclaims/status`, through a kube-rs client that records
//! every request it sends, and the apiserver's audit log counts the writes it received. A first
//! report is stored; the same report again sends no request; a message-only change is written
//! with the transition time kept; a report the apiserver refuses as the driver gave it
//! (a repeated (status, reason), a 1,500-byte message) is repaired, stored and its time moved;
//! the same report again sends nothing; a healthy probe writes `null`. Slow, so ignored:
//! `make e2e` builds the binaries and runs it with `--ignored`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::Method;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::client::Body;
use serde_json::{Value, json};
use volume_health_example_monitor::{ClaimHealthWriter, FIELD_MANAGER, Outcome, monitor};
use volume_health_tests::cluster::{Cluster, ClusterOptions, Identity, bin_dir, create_namespace};
use volume_health_tests::phases::Phases;
use volume_health_validation::repair::RepairKind;

const NAMESPACE: &str = "monitored";
const CLAIM: &str = "data-0";
const ACCOUNT: &str = "health-monitor";

/// Each request a kube-rs client sent: `METHOD URI BODY`.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

impl Sent {
    /// The requests sent since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// `inner`, with every request recorded in `sent` before it goes out.
fn recording(inner: kube::Client, sent: Sent) -> kube::Client {
    let namespace = inner.default_namespace().to_owned();
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (inner, sent) = (inner.clone(), sent.clone());
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await?.to_bytes();
            sent.0.lock().unwrap().push(format!(
                "{} {} {}",
                parts.method,
                parts.uri,
                String::from_utf8_lossy(&bytes)
            ));
            let response = inner
                .send(http::Request::from_parts(parts, Body::from(bytes)))
                .await?;
            Ok::<_, tower::BoxError>(response)
        }
    });
    kube::Client::new(service, namespace)
}

fn condition(status: &str, reason: &str, message: &str) -> VolumeHealthCondition {
    VolumeHealthCondition {
        status: status.into(),
        reason: reason.into(),
        message: Some(message.into()),
    }
}

/// The probe times: a minute apart, so a moved time shows at the apiserver's second precision.
fn minute(n: i64) -> Time {
    Time(Timestamp::from_second(1_772_000_000 + 60 * n).unwrap())
}

/// The claim's `status.healthStatus` as stored (`null`: none).
async fn stored(admin: &Api<PersistentVolumeClaim>) -> Value {
    let claim = admin.get_status(CLAIM).await.unwrap();
    serde_json::to_value(claim).unwrap()["status"]["healthStatus"].clone()
}

/// The status writes of the claim by the monitor's account the audit log holds, as their
/// response codes; waits until there are `expected` of them (each event is written as its
/// request completes).
async fn audited_writes(cluster: &Cluster, expected: usize) -> Vec<i64> {
    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(cluster.audit_log()).unwrap_or_default();
        let codes: Vec<i64> = log
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| {
                event["objectRef"]["name"] == CLAIM
                    && event["objectRef"]["subresource"] == "status"
                    && event["user"]["username"] == user.as_str()
                    && event["stage"] == "ResponseComplete"
            })
            .map(|event| event["responseStatus"]["code"].as_i64().unwrap_or(0))
            .collect();
        if codes.len() >= expected || Instant::now() > give_up {
            return codes;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn the_example_monitor_writes_only_what_changed() {
    // Each phase is bounded: a hung step fails its phase instead of holding CI. Each step
    // needs the one before: the monitor remembers what it wrote.
    let mut phases = Phases::new("e2e_writer", Duration::from_secs(120));
    let Some((cluster, admin, mut monitor, sent)) =
        phases.phase("control plane").run(setup()).await
    else {
        return phases.finish();
    };
    let cluster = &cluster;
    let status_uri =
        format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{CLAIM}/status");
    let throttled = condition("Degraded", "IOPSThrottled", "throttled");
    // The report of step 4: a repeated pair, a 1,500-byte message.
    let long = "x".repeat(1500);
    let report = vec![
        condition("Degraded", "IOPSThrottled", &long),
        condition("Degraded", "IOPSThrottled", "throttled again"),
        condition("Inaccessible", "VolumeUnreachable", "no path"),
    ];

    // 1. The first report: the claim read once, then one PATCH with the monitor's field manager.
    phases
        .phase("first report")
        .run(async {
            let reported = monitor
                .report(vec![throttled.clone()], &minute(1))
                .await
                .unwrap();
            assert_eq!(reported.outcome, Outcome::Written);
            let requests = sent.take();
            eprintln!("1. first report: {requests:#?}");
            assert_eq!(requests.len(), 2, "{requests:#?}");
            assert!(requests[0].starts_with(&format!("GET {status_uri} ")));
            // The monitor's own field manager, as a query parameter of the PATCH.
            let (method, rest) = requests[1].split_once(' ').unwrap();
            let (uri, _) = rest.split_once(' ').unwrap();
            let (path, query) = uri.split_once('?').unwrap();
            assert_eq!((method, path), ("PATCH", status_uri.as_str()));
            assert!(
                query
                    .split('&')
                    .any(|pair| pair == format!("fieldManager={FIELD_MANAGER}")),
                "{query}"
            );
            assert_eq!(
                stored(&admin).await,
                json!({"healthConditions": [throttled], "lastTransitionTime": minute(1)})
            );
            let managed = admin
                .get_status(CLAIM)
                .await
                .unwrap()
                .metadata
                .managed_fields;
            let entry = managed
                .iter()
                .flatten()
                .find(|entry| entry.manager.as_deref() == Some(FIELD_MANAGER))
                .expect("the monitor's managedFields entry");
            assert_eq!(entry.subresource.as_deref(), Some("status"));
            assert_eq!(entry.operation.as_deref(), Some("Update"));
            assert!(
                entry.fields_v1.as_ref().unwrap().0["f:status"]
                    .get("f:healthStatus")
                    .is_some(),
                "{entry:?}"
            );
        })
        .await;

    // 2. The same report: no request at all.
    phases
        .phase("the same report")
        .after("first report")
        .run(async {
            let reported = monitor
                .report(vec![throttled.clone()], &minute(2))
                .await
                .unwrap();
            assert_eq!(reported.outcome, Outcome::Unchanged);
            assert_eq!(sent.take(), Vec::<String>::new(), "2. the same report");
            eprintln!("2. the same report: no request");
        })
        .await;

    // 3. A new message: a change for external-health-monitor's policy, written; the set of
    // (status, reason) did not change, so the time is kept.
    phases
        .phase("a new message")
        .after("the same report")
        .run(async {
            let harder = condition("Degraded", "IOPSThrottled", "throttled harder");
            let reported = monitor
                .report(vec![harder.clone()], &minute(3))
                .await
                .unwrap();
            assert_eq!(reported.outcome, Outcome::Written);
            let requests = sent.take();
            assert_eq!(requests.len(), 1, "{requests:#?}");
            assert!(requests[0].starts_with("PATCH "), "{requests:#?}");
            assert_eq!(
                stored(&admin).await,
                json!({"healthConditions": [harder], "lastTransitionTime": minute(1)})
            );
            eprintln!("3. a new message: one PATCH, lastTransitionTime kept");
        })
        .await;

    // 4. A report the apiserver refuses as the driver gave it: a repeated pair, a 1,500-byte
    // message.
    phases
        .phase("a refused report repaired")
        .after("a new message")
        .run(async {
            let raw = admin
                .patch_status(
                    CLAIM,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"healthStatus": {"healthConditions": report}}}),
                    ),
                )
                .await;
            let kube::Error::Api(refused) = raw.unwrap_err() else {
                panic!("an API error")
            };
            assert_eq!(refused.code, 422, "{refused:?}");
            eprintln!(
                "4. as the driver gave it: {} {}",
                refused.code, refused.message
            );
            let reported = monitor.report(report.clone(), &minute(4)).await.unwrap();
            assert_eq!(reported.outcome, Outcome::Written);
            let kinds: Vec<RepairKind> = reported.repairs.iter().map(|r| r.kind).collect();
            assert_eq!(
                kinds,
                [
                    RepairKind::MessageCut {
                        from: 1500,
                        to: 1024
                    },
                    RepairKind::DuplicateCondition,
                ],
                "{:?}",
                reported.repairs
            );
            assert_eq!(sent.take().len(), 1);
            let cut = condition("Degraded", "IOPSThrottled", &long[..1024]);
            let unreachable = condition("Inaccessible", "VolumeUnreachable", "no path");
            assert_eq!(
                stored(&admin).await,
                json!({"healthConditions": [cut, unreachable], "lastTransitionTime": minute(4)})
            );
            eprintln!(
                "4. repaired ({:?}): stored, lastTransitionTime moved",
                kinds
            );
        })
        .await;

    // 5. The same driver report again: repaired to what is stored, nothing sent.
    phases
        .phase("the same driver report")
        .after("a refused report repaired")
        .run(async {
            let reported = monitor.report(report, &minute(5)).await.unwrap();
            assert_eq!(reported.outcome, Outcome::Unchanged);
            assert_eq!(sent.take(), Vec::<String>::new(), "5. the same report");
            eprintln!("5. the same driver report: no request");
        })
        .await;

    // 6. Healthy: `null` clears the field.
    phases
        .phase("healthy")
        .after("the same driver report")
        .run(async {
            let reported = monitor.report(vec![], &minute(6)).await.unwrap();
            assert_eq!(reported.outcome, Outcome::Cleared);
            let requests = sent.take();
            assert_eq!(requests.len(), 1, "{requests:#?}");
            assert!(
                requests[0].ends_with(r#" {"status":{"healthStatus":null}}"#),
                "{}",
                requests[0]
            );
            assert_eq!(stored(&admin).await, Value::Null);
            eprintln!("6. healthy: {}", requests[0]);
        })
        .await;

    // 7. Healthy again: nothing to clear.
    phases
        .phase("healthy again")
        .after("healthy")
        .run(async {
            let reported = monitor.report(vec![], &minute(7)).await.unwrap();
            assert_eq!(reported.outcome, Outcome::Unchanged);
            assert_eq!(sent.take(), Vec::<String>::new(), "7. healthy again");
            eprintln!("7. healthy again: no request");
        })
        .await;

    // The apiserver's side: the monitor's four writes, each stored, and nothing else.
    let mut audit = phases.phase("audit log");
    for step in [
        "first report",
        "the same report",
        "a new message",
        "a refused report repaired",
        "the same driver report",
        "healthy",
        "healthy again",
    ] {
        audit = audit.after(step);
    }
    audit
        .run(async {
            let writes = audited_writes(cluster, 4).await;
            eprintln!("audit log: the monitor's status writes answered {writes:?}");
            assert_eq!(writes, [200, 200, 200, 200]);
        })
        .await;
    phases.finish();
}

/// The control plane; the claim, and the monitor's account with the two verbs it needs; the
/// monitor, writing through a client that records its requests.
async fn setup() -> anyhow::Result<(Cluster, Api<PersistentVolumeClaim>, ClaimHealthWriter, Sent)> {
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir()?, options).await?;
    eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());
    let admin_client = cluster.client(Identity::Admin).await?;
    create_namespace(&admin_client, NAMESPACE).await?;
    let admin: Api<PersistentVolumeClaim> = Api::namespaced(admin_client, NAMESPACE);
    let claim = serde_json::from_value(json!({"metadata": {"name": CLAIM}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?;
    admin.create(&PostParams::default(), &claim).await?;
    let token = cluster.service_account_token(NAMESPACE, ACCOUNT).await?;
    for (path, object) in [
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": FIELD_MANAGER},
                "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims/status"],
                    "verbs": ["get", "patch"]}]}),
        ),
        (
            format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": FIELD_MANAGER, "namespace": NAMESPACE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": FIELD_MANAGER},
                "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT,
                    "namespace": NAMESPACE}]}),
        ),
    ] {
        let (code, body) = cluster
            .api
            .send(Method::POST, &path, Some(&object), None)
            .await?;
        assert_eq!(code, 201, "{path}: {body}");
    }
    let sent = Sent::default();
    let client = recording(cluster.client(Identity::Token(&token)).await?, sent.clone());
    let monitor = monitor(Api::namespaced(client, NAMESPACE), CLAIM);
    Ok((cluster, admin, monitor, sent))
}

/// With the gate off the apiserver drops `status.healthStatus` on save and answers 200: the
/// monitor tells that from a stored write by the claim it gets back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn the_example_monitor_tells_a_dropped_write() {
    // Each phase is bounded: a hung step fails its phase instead of holding CI.
    let mut phases = Phases::new("e2e_writer, gate off", Duration::from_secs(120));
    let Some((_cluster, claims)) = phases
        .phase("control plane")
        .run(async {
            let options = ClusterOptions {
                in_tree_gate: false,
                authorizer: None,
            };
            let cluster = Cluster::start(&bin_dir()?, options).await?;
            let client = cluster.client(Identity::Admin).await?;
            create_namespace(&client, NAMESPACE).await?;
            let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, NAMESPACE);
            let claim = serde_json::from_value(json!({"metadata": {"name": CLAIM}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))?;
            claims.create(&PostParams::default(), &claim).await?;
            anyhow::Ok((cluster, claims))
        })
        .await
    else {
        return phases.finish();
    };
    phases
        .phase("dropped writes")
        .run(async {
            let mut monitor = monitor(claims.clone(), CLAIM);
            let report = vec![condition("Degraded", "IOPSThrottled", "throttled")];
            for n in 1..=2 {
                // Nothing is stored, so the next probe writes again, and is dropped again.
                let reported = monitor.report(report.clone(), &minute(n)).await.unwrap();
                assert_eq!(reported.outcome, Outcome::Dropped, "probe {n}");
            }
            assert_eq!(stored(&claims).await, Value::Null);
            eprintln!("gate off: {}", Outcome::Dropped);
        })
        .await;
    phases.finish();
}
