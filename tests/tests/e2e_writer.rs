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
use volume_health_example_monitor::{FIELD_MANAGER, Monitor, Outcome};
use volume_health_tests::cluster::{Cluster, ClusterOptions, Identity, bin_dir, create_namespace};
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
    // Bounded: a hung step fails the suite instead of holding CI.
    tokio::time::timeout(Duration::from_secs(300), monitor())
        .await
        .expect("the suite did not finish within 5 minutes");
}

async fn monitor() {
    let options = ClusterOptions {
        in_tree_gate: true,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir().unwrap(), options).await.unwrap();
    eprintln!("kube-apiserver ready; logs in {}", cluster.dir().display());

    // The claim, and the monitor's account with the two verbs it needs.
    let admin_client = cluster.client(Identity::Admin).await.unwrap();
    create_namespace(&admin_client, NAMESPACE).await.unwrap();
    let admin: Api<PersistentVolumeClaim> = Api::namespaced(admin_client, NAMESPACE);
    let claim = serde_json::from_value(json!({"metadata": {"name": CLAIM}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    admin.create(&PostParams::default(), &claim).await.unwrap();
    let token = cluster
        .service_account_token(NAMESPACE, ACCOUNT)
        .await
        .unwrap();
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
            .await
            .unwrap();
        assert_eq!(code, 201, "{path}: {body}");
    }
    let sent = Sent::default();
    let client = recording(
        cluster.client(Identity::Token(&token)).await.unwrap(),
        sent.clone(),
    );
    let mut monitor = Monitor::new(Api::namespaced(client, NAMESPACE), CLAIM);
    let status_uri =
        format!("/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{CLAIM}/status");

    // 1. The first report: the claim read once, then one PATCH with the monitor's field manager.
    let throttled = condition("Degraded", "IOPSThrottled", "throttled");
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

    // 2. The same report: no request at all.
    let reported = monitor
        .report(vec![throttled.clone()], &minute(2))
        .await
        .unwrap();
    assert_eq!(reported.outcome, Outcome::Unchanged);
    assert_eq!(sent.take(), Vec::<String>::new(), "2. the same report");
    eprintln!("2. the same report: no request");

    // 3. A new message: a change for external-health-monitor's policy, written; the set of
    // (status, reason) did not change, so the time is kept.
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

    // 4. A report the apiserver refuses as the driver gave it: a repeated pair, a 1,500-byte
    // message.
    let long = "x".repeat(1500);
    let report = vec![
        condition("Degraded", "IOPSThrottled", &long),
        condition("Degraded", "IOPSThrottled", "throttled again"),
        condition("Inaccessible", "VolumeUnreachable", "no path"),
    ];
    let raw = admin
        .patch_status(
            CLAIM,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"healthStatus": {"healthConditions": report}}})),
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
            RepairKind::DuplicateCondition,
            RepairKind::MessageCut {
                from: 1500,
                to: 1024
            }
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

    // 5. The same driver report again: repaired to what is stored, nothing sent.
    let reported = monitor.report(report, &minute(5)).await.unwrap();
    assert_eq!(reported.outcome, Outcome::Unchanged);
    assert_eq!(sent.take(), Vec::<String>::new(), "5. the same report");
    eprintln!("5. the same driver report: no request");

    // 6. Healthy: `null` clears the field.
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

    // 7. Healthy again: nothing to clear.
    let reported = monitor.report(vec![], &minute(7)).await.unwrap();
    assert_eq!(reported.outcome, Outcome::Unchanged);
    assert_eq!(sent.take(), Vec::<String>::new(), "7. healthy again");
    eprintln!("7. healthy again: no request");

    // The apiserver's side: the monitor's four writes, each stored, and nothing else.
    let writes = audited_writes(&cluster, 4).await;
    eprintln!("audit log: the monitor's status writes answered {writes:?}");
    assert_eq!(writes, [200, 200, 200, 200]);
}

/// With the gate off the apiserver drops `status.healthStatus` on save and answers 200: the
/// monitor tells that from a stored write by the claim it gets back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd: `make e2e`"]
async fn the_example_monitor_tells_a_dropped_write() {
    tokio::time::timeout(Duration::from_secs(300), dropped())
        .await
        .expect("the suite did not finish within 5 minutes");
}

async fn dropped() {
    let options = ClusterOptions {
        in_tree_gate: false,
        authorizer: None,
    };
    let cluster = Cluster::start(&bin_dir().unwrap(), options).await.unwrap();
    let client = cluster.client(Identity::Admin).await.unwrap();
    create_namespace(&client, NAMESPACE).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, NAMESPACE);
    let claim = serde_json::from_value(json!({"metadata": {"name": CLAIM}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();

    let mut monitor = Monitor::new(claims.clone(), CLAIM);
    let report = vec![condition("Degraded", "IOPSThrottled", "throttled")];
    for n in 1..=2 {
        // Nothing is stored, so the next probe writes again, and is dropped again.
        let reported = monitor.report(report.clone(), &minute(n)).await.unwrap();
        assert_eq!(reported.outcome, Outcome::Dropped, "probe {n}");
    }
    assert_eq!(stored(&claims).await, Value::Null);
    eprintln!("gate off: {}", Outcome::Dropped);
}
