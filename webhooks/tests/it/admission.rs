//! The router in-process, as kube-apiserver calls it: every recorded case, the wire contract,
//! drop-on-save patches applied to the exact JSON sent, and bad input.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use support::{apiserver_order, wire};
use tower::ServiceExt;
use volume_health_webhooks::enforcement::EnforcementAction;
use volume_health_webhooks::gates::FeatureGates;
use volume_health_webhooks::metrics::Metrics;
use volume_health_webhooks::{Settings, router};

fn settings(profile: &str) -> Settings {
    Settings {
        gates: FeatureGates {
            csi_volume_health: profile != "gate-off",
        },
        authz_deny_on_mismatch: profile == "deny-mismatch",
        pvc_health_writers: None,
        storage_condition_identity: Default::default(),
        enforcement_action: EnforcementAction::Deny,
        repair: false,
        max_request_bytes: 7 * 1024 * 1024,
        max_in_flight_bytes: 64 * 1024 * 1024,
        request_timeout: Duration::from_secs(10),
    }
}

fn app(profile: &str) -> Router {
    router(&settings(profile), Metrics::new())
}

async fn post_bytes(app: &Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let (status, bytes) = support::router_call::call(app, path, body).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
    (status, value)
}

/// POSTs `body` as its sender writes it (see [`wire`]).
async fn post(app: &Router, path: &str, body: &Value) -> (StatusCode, Value) {
    post_bytes(app, path, wire(body)).await
}

fn cases() -> Vec<Value> {
    let text = include_str!("../../../tests/fixtures/admission/cases.json");
    serde_json::from_str(text).unwrap()
}

/// Requests whose answers were recorded from a real kube-apiserver v1.37.2.
fn upstream_cases() -> Vec<Value> {
    let text = include_str!("../../../tests/fixtures/admission/upstream-v1.37.2.json");
    serde_json::from_str(text).unwrap()
}

fn case(id: &str) -> Value {
    cases().into_iter().find(|c| c["id"] == id).unwrap()
}

fn decode_patch(response: &Value) -> json_patch::Patch {
    assert_eq!(response["patchType"], "JSONPatch");
    let b64 = response["patch"]
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Checks an admission answer against a case's expectations, as the apiserver would read it.
fn check_admission(c: &Value, status: StatusCode, body: &Value) {
    let id = &c["id"];
    assert_eq!(status, StatusCode::OK, "{id}: {body}");
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{id}");
    assert_eq!(body["kind"], "AdmissionReview", "{id}");
    let r = &body["response"];
    assert_eq!(r["uid"], c["body"]["request"]["uid"], "{id}: uid echoed");
    let e = &c["expect"];
    assert_eq!(r["allowed"], e["allowed"], "{id}: {r}");
    let has_patch = r.get("patch").is_some() || r.get("patchType").is_some();
    if c["endpoint"] == "validate" {
        assert!(!has_patch, "{id}: a validating answer never patches");
    }
    if e["allowed"] == true {
        if e["patch"] == "apply" {
            let mut object = c["body"]["request"]["object"].clone();
            json_patch::patch(&mut object, &decode_patch(r)).unwrap();
            assert_eq!(object, e["result"], "{id}: patched object");
        } else {
            assert!(!has_patch, "{id}: unexpected patch {r}");
        }
        return;
    }
    let st = &r["status"];
    assert_eq!(st["code"], e["code"], "{id}: {st}");
    assert_eq!(st["reason"], e["reason"], "{id}");
    if let Some(message) = e.get("message") {
        assert_eq!(&st["message"], message, "{id}");
    }
    if e["code"] == 422 {
        assert_eq!(st["details"]["name"], e["name"], "{id}");
        let got: Vec<String> = st["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                format!(
                    "{}: {}",
                    x["field"].as_str().unwrap(),
                    x["message"].as_str().unwrap()
                )
            })
            .collect();
        let want: Vec<&str> = e["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let prefixes: Vec<&str> = e["error_prefixes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(got.len(), want.len() + prefixes.len(), "{id}: {got:?}");
        if e["ordered"] == true {
            assert_eq!(got, want, "{id}: in the apiserver's order");
        }
        for w in &want {
            assert!(got.iter().any(|g| g == w), "{id}: missing {w:?} in {got:?}");
        }
        for p in &prefixes {
            assert!(
                got.iter().any(|g| g.starts_with(p)),
                "{id}: no error starting {p:?} in {got:?}"
            );
        }
        if prefixes.is_empty() {
            let kind = e["kind"].as_str().unwrap();
            let name = e["name"].as_str().unwrap();
            let joined = if got.len() == 1 {
                got[0].clone()
            } else {
                format!("[{}]", got.join(", "))
            };
            assert_eq!(
                st["message"],
                format!("{kind} {name:?} is invalid: {joined}"),
                "{id}"
            );
        }
    }
}

/// `body` answers `review` with a bare allow: its uid and `allowed: true`, nothing else (no
/// patch, no warning, no status).
fn assert_plainly_allowed(body: &Value, review: &Value) {
    assert_eq!(
        body["response"],
        json!({"uid": review["request"]["uid"], "allowed": true})
    );
}

#[tokio::test]
async fn every_recorded_case() {
    let mut checked = HashSet::new();
    let all = [cases(), upstream_cases()].concat();
    for c in &all {
        let app = app(c["profile"].as_str().unwrap());
        let path = format!("/{}", c["endpoint"].as_str().unwrap());
        let (status, body) = post(&app, &path, &c["body"]).await;
        if c["endpoint"] == "authorize" {
            assert_eq!(status, StatusCode::OK);
            assert_eq!(body["apiVersion"], c["body"]["apiVersion"]);
            assert_eq!(body["kind"], "SubjectAccessReview");
            let st = &body["status"];
            let decision = match (
                st["allowed"].as_bool(),
                st["denied"].as_bool().unwrap_or(false),
            ) {
                (Some(true), false) => "allow",
                (Some(false), true) => "deny",
                (Some(false), false) => "no-opinion",
                other => panic!("malformed {other:?}"),
            };
            assert_eq!(decision, c["expect"]["decision"], "{}", c["id"]);
            if decision != "allow" {
                assert_eq!(
                    st.get("reason").cloned().unwrap_or(json!("")),
                    c["expect"]["reason"]
                );
            }
        } else {
            check_admission(c, status, &body);
        }
        checked.insert(c["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(checked.len(), all.len(), "every case ran, ids unique");
}

/// With `resource` first, the objects are read in the same pass as the review; with `object`
/// first, they are read afterwards. Either way, and with the gate on or off, every answer is
/// the same, byte for byte.
#[tokio::test]
async fn member_order_does_not_change_any_answer() {
    let admission: Vec<Value> = cases()
        .into_iter()
        .filter(|c| c["endpoint"] != "authorize")
        .collect();
    assert!(!admission.is_empty());
    let mut compared = 0;
    for c in &admission {
        let path = format!("/{}", c["endpoint"].as_str().unwrap());
        for profile in ["gate-on", "gate-off"] {
            let app = app(profile);
            let ordered = apiserver_order(&c["body"]).into_bytes();
            let sorted = serde_json::to_vec(&c["body"]).unwrap();
            assert_ne!(ordered, sorted, "{}", c["id"]);
            let answer = |body: Vec<u8>| {
                let request = Request::post(path.as_str())
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap();
                let app = app.clone();
                async move {
                    let response = app.oneshot(request).await.unwrap();
                    let status = response.status();
                    (
                        status,
                        response.into_body().collect().await.unwrap().to_bytes(),
                    )
                }
            };
            assert_eq!(
                answer(ordered).await,
                answer(sorted).await,
                "{} {profile}",
                c["id"]
            );
            compared += 1;
        }
    }
    assert_eq!(compared, admission.len() * 2);
}

/// A pod status review whose new object's `volumeHealth` is not a list of entries: the one-pass
/// read fails on it, the review is read again with raw objects, and the answer is the object's
/// decode error in-band, as when `object` comes first.
#[tokio::test]
async fn an_object_that_is_not_its_kind_is_a_bad_object_in_either_order() {
    let mut c = case("pod-valid");
    c["body"]["request"]["object"]["status"]["volumeHealth"] = json!([{"name": 7}]);
    for body in [
        apiserver_order(&c["body"]).into_bytes(),
        serde_json::to_vec(&c["body"]).unwrap(),
    ] {
        let (status, answer) = post_bytes(&app("gate-on"), "/validate", body).await;
        assert_eq!(status, StatusCode::OK);
        let r = &answer["response"];
        assert_eq!(r["allowed"], false, "{answer}");
        assert_eq!(r["status"]["code"], 400, "{answer}");
        let message = r["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("failed to decode object as Pod: invalid type: integer `7`"),
            "{message}"
        );
    }
}

/// A JSON array where an object belongs, at any depth the rules read: never read field by field
/// (serde's derived structs would take `spec: ["node1"]` as `nodeName: node1`). In an object it
/// is a bad object (in-band 400), anywhere else in the review a bad request (HTTP 400), in both
/// member orders.
#[tokio::test]
async fn arrays_are_never_objects() {
    let node = |c: &mut Value| {
        c["body"]["request"]["userInfo"] =
            json!({"username": "system:node:node1", "groups": ["system:nodes"]});
    };
    type Edit = fn(&mut Value);
    let in_objects: [(&str, Edit); 6] = [
        ("object", |r| r["object"] = json!([{}, null])),
        ("oldObject.spec", |r| {
            r["oldObject"]["spec"] = json!(["node1", []])
        }),
        ("object.spec", |r| {
            r["object"]["spec"] = json!(["node1", [{"name": "v"}]])
        }),
        ("object.status", |r| {
            r["object"]["status"] = json!([[{"name": "v"}]])
        }),
        ("object.metadata", |r| {
            r["object"]["metadata"] = json!(["foo"])
        }),
        ("a volumeHealth entry", |r| {
            r["object"]["status"]["volumeHealth"] = json!([["v", []]])
        }),
    ];
    for (what, edit) in in_objects {
        let mut c = case("pod-valid");
        node(&mut c);
        edit(&mut c["body"]["request"]);
        for body in [
            apiserver_order(&c["body"]).into_bytes(),
            serde_json::to_vec(&c["body"]).unwrap(),
        ] {
            let (status, answer) = post_bytes(&app("gate-on"), "/validate", body).await;
            assert_eq!(status, StatusCode::OK, "{what}: {answer}");
            assert_eq!(answer["response"]["allowed"], false, "{what}: {answer}");
            assert_eq!(
                answer["response"]["status"]["code"], 400,
                "{what}: {answer}"
            );
        }
    }
    let elsewhere: [(&str, Edit); 4] = [
        ("the review", |b| {
            *b = json!([
                "admission.k8s.io/v1",
                "AdmissionReview",
                b["request"].clone()
            ])
        }),
        ("request", |b| {
            b["request"] = json!(["705ab4f5-6393-11e8-b7cc-42010a800000"])
        }),
        ("userInfo", |b| {
            b["request"]["userInfo"] = json!(["system:node:node1", ["system:nodes"]])
        }),
        ("resource", |b| {
            b["request"]["resource"] = json!(["", "v1", "pods"])
        }),
    ];
    for (what, edit) in elsewhere {
        let mut c = case("pod-valid");
        edit(&mut c["body"]);
        for endpoint in ["/validate", "/mutate"] {
            let (status, answer) = post(&app("gate-off"), endpoint, &c["body"]).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{what} at {endpoint}: {answer}"
            );
            assert_eq!(answer["kind"], "Status", "{what}: {answer}");
        }
    }
}

#[tokio::test]
async fn dry_run_gets_the_same_answer() {
    for id in [
        "pod-name-required",
        "drop-pod-status-new",
        "nr-pod-status-other-node",
        "pod-valid",
    ] {
        let mut c = case(id);
        c["body"]["request"]["dryRun"] = json!(true);
        let app = app(c["profile"].as_str().unwrap());
        let (status, body) = post(
            &app,
            &format!("/{}", c["endpoint"].as_str().unwrap()),
            &c["body"],
        )
        .await;
        check_admission(&c, status, &body);
    }
}

#[tokio::test]
async fn delete_connect_and_unknown_resources_are_allowed_unchanged() {
    let c = case("pod-name-required");
    for endpoint in ["/validate", "/mutate"] {
        for profile in ["gate-on", "gate-off"] {
            let app = app(profile);
            let mut delete = c["body"].clone();
            delete["request"]["operation"] = json!("DELETE");
            delete["request"]["oldObject"] = delete["request"]["object"].take();
            delete["request"]["object"] = Value::Null;
            let (status, body) = post(&app, endpoint, &delete).await;
            assert_eq!(status, StatusCode::OK);
            assert_plainly_allowed(&body, &c["body"]);

            let mut connect = c["body"].clone();
            connect["request"]["operation"] = json!("CONNECT");
            let (_, body) = post(&app, endpoint, &connect).await;
            assert_eq!(body["response"]["allowed"], true);
            assert!(body["response"].get("patch").is_none());

            let mut configmap = c["body"].clone();
            configmap["request"]["resource"] =
                json!({"group": "", "version": "v1", "resource": "configmaps"});
            configmap["request"]["kind"] =
                json!({"group": "", "version": "v1", "kind": "ConfigMap"});
            let (_, body) = post(&app, endpoint, &configmap).await;
            assert_plainly_allowed(&body, &c["body"]);
        }
    }
}

/// Every drop-on-save patch applies to the JSON exactly as sent (unknown fields, odd key
/// order, other status fields) and removes the gated field and nothing else.
#[tokio::test]
async fn patches_touch_only_the_gated_path() {
    let app = app("gate-off");
    let objects = [
        (
            "pods",
            "",
            "Pod",
            "/status/volumeHealth",
            json!({"zz": 1, "metadata": {"name": "foo", "namespace": "d", "annotations": {"a/b~c": "x"}},
                "status": {"volumeHealth": [{"name": "vol"}], "phase": "Running", "futureField": {"x": [1, 2]}},
                "spec": {"volumes": [{"name": "vol"}], "unknownSpec": true}}),
        ),
        (
            "persistentvolumeclaims",
            "",
            "PersistentVolumeClaim",
            "/status/healthStatus",
            json!({"metadata": {"name": "c", "namespace": "d"}, "status": {"healthStatus": {}, "capacity": {"storage": "1Gi"}}}),
        ),
        (
            "csinodes",
            "storage.k8s.io",
            "CSINode",
            "/status/storageHealth",
            json!({"metadata": {"name": "n"}, "spec": {"drivers": []},
                "status": {"storageHealth": [{"name": "x"}], "somethingNew": "kept"}}),
        ),
    ];
    for (resource, group, kind, pointer, object) in objects {
        for (operation, sub) in [("CREATE", ""), ("UPDATE", ""), ("UPDATE", "status")] {
            let old = if operation == "UPDATE" {
                let mut old = object.clone();
                old["status"]
                    .as_object_mut()
                    .unwrap()
                    .remove(pointer.rsplit('/').next().unwrap());
                old
            } else {
                Value::Null
            };
            let mut request = json!({
                "uid": "u-1", "kind": {"group": group, "version": "v1", "kind": kind},
                "resource": {"group": group, "version": "v1", "resource": resource},
                "name": object["metadata"]["name"], "operation": operation,
                "userInfo": {"username": "alice"}, "object": object, "oldObject": old,
            });
            if !sub.is_empty() {
                request["subResource"] = json!(sub);
            }
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            let (status, body) = post(&app, "/mutate", &review).await;
            assert_eq!(status, StatusCode::OK);
            let r = &body["response"];
            assert_eq!(r["allowed"], true);
            let patch = decode_patch(r);
            assert_eq!(patch.0.len(), 1, "one operation");
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch).unwrap();
            let mut expected = object.clone();
            expected["status"]
                .as_object_mut()
                .unwrap()
                .remove(pointer.rsplit('/').next().unwrap());
            assert_eq!(patched, expected, "{resource} {operation} {sub}");
            assert!(
                r["warnings"][0]
                    .as_str()
                    .unwrap()
                    .contains("feature gate CSIVolumeHealth is disabled")
            );
        }
    }
}

#[tokio::test]
async fn no_patch_when_nothing_is_removed() {
    let app = app("gate-off");
    let c = case("drop-pod-status-new");
    let mut review = c["body"].clone();
    for empty in [json!([]), Value::Null] {
        review["request"]["object"]["status"]["volumeHealth"] = empty;
        let (_, body) = post(&app, "/mutate", &review).await;
        assert_plainly_allowed(&body, &review);
    }
    review["request"]["object"]["status"]
        .as_object_mut()
        .unwrap()
        .remove("volumeHealth");
    let (_, body) = post(&app, "/mutate", &review).await;
    assert_plainly_allowed(&body, &review);
}

/// The project's own rule, a duplicate condition identity within one driver, is the one answer
/// in-tree does not give; `--storage-health-unique-conditions=false` gives in-tree's.
#[tokio::test]
async fn storage_condition_identity_can_be_turned_off() {
    let c = upstream_cases()
        .into_iter()
        .find(|c| c["id"] == "upstream-csinode-exact-duplicate-identity")
        .unwrap();
    let (_, body) = post(&app("gate-on"), "/validate", &c["body"]).await;
    assert_eq!(body["response"]["status"]["code"], 422);
    let in_tree = Settings {
        storage_condition_identity: volume_health_validation::rules::ConditionIdentity::InTree,
        ..settings("gate-on")
    };
    let (_, body) = post(&router(&in_tree, Metrics::new()), "/validate", &c["body"]).await;
    assert_plainly_allowed(&body, &c["body"]);
}

#[tokio::test]
async fn csinode_status_by_node_while_gated() {
    let app = app("gate-off");
    let mut review = case("nr-csinode-status-own-node-ok")["body"].clone();
    let (_, body) = post(&app, "/validate", &review).await;
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["status"]["code"], 403);
    assert_eq!(
        body["response"]["status"]["message"],
        "csinodes.storage.k8s.io \"node1\" is forbidden: CSIVolumeHealth feature gate is disabled"
    );
    review["request"]["userInfo"] =
        json!({"username": "system:admin", "groups": ["system:masters"]});
    let (_, body) = post(&app, "/validate", &review).await;
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn pvc_health_writers() {
    let mut s = settings("gate-on");
    s.pvc_health_writers = Some(HashSet::from([
        "system:serviceaccount:kube-system:health-monitor".to_owned(),
    ]));
    let app = router(&s, Metrics::new());
    let mut review = case("pvc-valid")["body"].clone();
    let (_, body) = post(&app, "/validate", &review).await;
    assert_eq!(body["response"]["status"]["code"], 403);
    assert_eq!(
        body["response"]["status"]["message"],
        "persistentvolumeclaims \"claim\" is forbidden: user \"system:admin\" is not allowed to update status.healthStatus"
    );
    review["request"]["userInfo"] = json!({"username": "system:serviceaccount:kube-system:health-monitor",
                                           "groups": ["system:serviceaccounts"]});
    let (_, body) = post(&app, "/validate", &review).await;
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn malformed_reviews_get_400_with_a_clear_message() {
    let app = app("gate-on");
    let valid = case("pod-valid")["body"].clone();
    let mut no_uid = valid.clone();
    no_uid["request"]["uid"] = json!("");
    let mut v1beta1 = valid.clone();
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut bad_op = valid.clone();
    bad_op["request"]["operation"] = json!("UPSERT");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"".to_vec(), "request body is not an AdmissionReview"),
        (b"{".to_vec(), "request body is not an AdmissionReview"),
        (
            b"\xff\xfe".to_vec(),
            "request body is not an AdmissionReview",
        ),
        (b"null".to_vec(), "request body is not an AdmissionReview"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "AdmissionReview has no request",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#
                .to_vec(),
            "request body is not an AdmissionReview",
        ),
        (
            serde_json::to_vec(&no_uid).unwrap(),
            "AdmissionReview request has no uid",
        ),
        (
            serde_json::to_vec(&v1beta1).unwrap(),
            "expected kind AdmissionReview in admission.k8s.io/v1, got \"AdmissionReview\" in \"admission.k8s.io/v1beta1\"",
        ),
        (
            serde_json::to_vec(&bad_op).unwrap(),
            "AdmissionReview request has unknown operation \"UPSERT\"",
        ),
        (
            br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{}}"#
                .to_vec(),
            "expected kind AdmissionReview",
        ),
    ];
    for endpoint in ["/validate", "/mutate"] {
        for (body, message) in &cases {
            let (status, answer) = post_bytes(&app, endpoint, body.clone()).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{endpoint} {}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(answer["code"], 400);
            assert_eq!(answer["reason"], "BadRequest");
            assert!(
                answer["message"].as_str().unwrap().starts_with(message),
                "{answer}"
            );
        }
    }
    let (status, answer) = post_bytes(&app, "/authorize", b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("SubjectAccessReview"),
        "{answer}"
    );
}

/// What an endpoint must answer to a review with an array where an object is expected.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ArrayAnswer {
    /// In-band denial, code 400, naming the slot (`object` or `oldObject`) that is not its kind.
    BadObject(&'static str),
    /// Allowed, unchanged: no decision reads that part of the object.
    Allowed,
    /// Allowed with the gated field removed.
    Dropped,
}

/// Every place of a review where an array can stand for an object, for pods, claims and
/// CSINodes, CREATE and UPDATE, the status subresource and the object itself, through both
/// admission endpoints with the gate on and off.
///
/// `/validate` (either gate) and `/mutate` with the gate on decode each object whole and give
/// the same answer, byte for byte: a 400 naming the decode failure, except for an array in a
/// claim's or a CSINode's `spec`, which none of their rules reads. `/mutate` with the gate off
/// reads an object that is not its kind for `status.<gated field>` alone, so that the value is
/// dropped however malformed the rest is: arrays in `metadata`, `spec`, the gated field's item
/// or a claim's `healthStatus` are not read and the field is dropped; the object itself, the
/// old object or `status` as an array stop that read, and are a 400 too.
#[tokio::test]
async fn an_array_for_an_object_is_answered_by_both_endpoints_with_either_gate() {
    use ArrayAnswer::{Allowed, BadObject, Dropped};
    // Admin writes that use the gated field where the old object does not: the gate-off
    // `/mutate` drops it, no node restriction applies.
    let bases = [
        ("drop-pod-status-new", "Pod", "volumeHealth"),
        (
            "drop-pvc-status-new",
            "PersistentVolumeClaim",
            "healthStatus",
        ),
        ("csinode-valid", "CSINode", "storageHealth"),
    ];
    type Form = (&'static str, fn(&mut Value, &str), ArrayAnswer, ArrayAnswer);
    let (on, off) = (app("gate-on"), app("gate-off"));
    let mut checked = 0;
    for (id, kind, gated) in bases {
        let spec_read = kind == "Pod";
        // Each form: the array put in, the answer of the decisions that decode the objects
        // whole, and that of the gate-off `/mutate`.
        let forms: [Form; 6] = [
            (
                "object",
                |r, _| r["object"] = json!([{}]),
                BadObject("object"),
                BadObject("object"),
            ),
            (
                "oldObject",
                |r, _| r["oldObject"] = json!([{}]),
                BadObject("oldObject"),
                BadObject("oldObject"),
            ),
            (
                "object.metadata",
                |r, _| r["object"]["metadata"] = json!([{"name": "x"}]),
                BadObject("object"),
                Dropped,
            ),
            (
                "object.spec",
                |r, _| r["object"]["spec"] = json!([{}]),
                if spec_read {
                    BadObject("object")
                } else {
                    Allowed
                },
                Dropped,
            ),
            (
                "object.status",
                |r, _| {
                    let status = r["object"]["status"].take();
                    r["object"]["status"] = json!([status]);
                },
                BadObject("object"),
                BadObject("object"),
            ),
            (
                "gated item or healthStatus",
                |r, gated| {
                    let field = &mut r["object"]["status"][gated];
                    if field.is_array() {
                        field[0] = json!([{"name": "x"}]);
                    } else {
                        *field = json!([{}]);
                    }
                },
                BadObject("object"),
                Dropped,
            ),
        ];
        for operation in ["CREATE", "UPDATE"] {
            for subresource in ["status", ""] {
                for (form, apply, decoded, gate_off_mutate) in forms {
                    if operation == "CREATE" && form == "oldObject" {
                        continue; // a CREATE has no old object
                    }
                    let mut review = case(id)["body"].clone();
                    let request = &mut review["request"];
                    request["operation"] = json!(operation);
                    request["subResource"] = json!(subresource);
                    request["requestSubResource"] = json!(subresource);
                    if operation == "CREATE" {
                        request.as_object_mut().unwrap().remove("oldObject");
                    }
                    apply(request, gated);
                    let label = format!("{kind} {operation} {subresource:?} {form}");
                    let body = wire(&review);
                    let answer = |app: &Router, path: &'static str| {
                        let (app, body) = (app.clone(), body.clone());
                        async move { support::router_call::call(&app, path, body).await }
                    };
                    let validate = answer(&on, "/validate").await;
                    assert_array_answer(&validate, decoded, kind, gated, &label);
                    assert_eq!(answer(&off, "/validate").await, validate, "{label}");
                    assert_eq!(
                        answer(&on, "/mutate").await,
                        validate,
                        "{label}: /mutate with the gate on answers as /validate"
                    );
                    let mutate_off = answer(&off, "/mutate").await;
                    assert_array_answer(&mutate_off, gate_off_mutate, kind, gated, &label);
                    checked += 1;
                }
            }
        }
    }
    // 3 kinds × (6 forms for UPDATE + 5 for CREATE) × 2 subresources.
    assert_eq!(checked, 3 * 11 * 2);
}

/// Asserts `answer` is `expected` for a review of `kind` whose gated field is `gated`.
fn assert_array_answer(
    (status, body): &(StatusCode, axum::body::Bytes),
    expected: ArrayAnswer,
    kind: &str,
    gated: &str,
    label: &str,
) {
    assert_eq!(
        *status,
        StatusCode::OK,
        "{label}: the review itself is fine"
    );
    let body: Value = serde_json::from_slice(body).unwrap();
    let r = &body["response"];
    match expected {
        ArrayAnswer::BadObject(slot) => {
            assert_eq!(r["allowed"], false, "{label}: {body}");
            assert_eq!(r["status"]["code"], 400, "{label}: {body}");
            assert_eq!(r["status"]["reason"], "BadRequest", "{label}: {body}");
            let message = r["status"]["message"].as_str().unwrap();
            let prefix = format!("failed to decode {slot} as {kind}: invalid type: sequence");
            assert!(message.starts_with(&prefix), "{label}: {message}");
        }
        ArrayAnswer::Allowed => {
            assert_eq!(r["allowed"], true, "{label}: {body}");
            assert!(r.get("patch").is_none(), "{label}: {body}");
        }
        ArrayAnswer::Dropped => {
            assert_eq!(r["allowed"], true, "{label}: {body}");
            let patch = serde_json::to_value(decode_patch(r)).unwrap();
            let path = format!("/status/{gated}");
            assert_eq!(patch, json!([{"op": "remove", "path": path}]), "{label}");
        }
    }
}

/// The answer `/mutate` gives with the gate on to a pod whose `status` is an array, byte for
/// byte: the one `/validate` gives, which names the decode failure.
#[tokio::test]
async fn a_pod_status_array_is_a_bad_object_for_mutate_with_the_gate_on() {
    let mut review = case("drop-pod-status-new")["body"].clone();
    let status = review["request"]["object"]["status"].take();
    review["request"]["object"]["status"] = json!([status]);
    let (status, body) =
        support::router_call::call(&app("gate-on"), "/mutate", wire(&review)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        concat!(
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"#,
            r#""uid":"705ab4f5-6393-11e8-b7cc-42010a800023","allowed":false,"status":{"#,
            r#""apiVersion":"v1","kind":"Status","code":400,"#,
            r#""message":"failed to decode object as Pod: invalid type: sequence, expected struct "#,
            r#"PodStatusView at line 1 column 321","metadata":{},"reason":"BadRequest","#,
            r#""status":"Failure"}}}"#,
        )
    );
}

#[tokio::test]
async fn an_undecodable_object_is_denied_in_band() {
    let mut review = case("pod-valid")["body"].clone();
    review["request"]["object"]["status"]["volumeHealth"] = json!("not a list");
    for (endpoint, profile) in [
        ("/validate", "gate-on"),
        ("/mutate", "gate-on"),
        ("/mutate", "gate-off"),
    ] {
        let (status, body) = post(&app(profile), endpoint, &review).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "the review itself is fine: answer it"
        );
        assert_eq!(body["response"]["allowed"], false);
        assert_eq!(body["response"]["status"]["code"], 400);
        let message = body["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("failed to decode object as Pod: invalid type"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let mut s = settings("gate-on");
    s.max_request_bytes = 64 * 1024;
    let app = router(&s, Metrics::new());
    let mut review = case("pod-valid")["body"].clone();
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(70 * 1024)});
    for endpoint in ["/validate", "/mutate", "/authorize"] {
        let (status, body) = post(&app, endpoint, &review).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{endpoint}");
        assert_eq!(
            body["message"],
            "request body is larger than --max-request-bytes"
        );
    }
    review["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(60 * 1024)});
    let (status, _) = post(&app, "/validate", &review).await;
    assert_eq!(status, StatusCode::OK, "just under the limit");
}

#[tokio::test]
async fn wrong_method_and_path() {
    let app = app("gate-on");
    let response = app
        .clone()
        .oneshot(Request::get("/validate").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let response = app
        .oneshot(Request::post("/admit").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn requests_are_counted_by_endpoint_resource_operation_and_decision() {
    let metrics = Metrics::new();
    let app = router(&settings("gate-on"), metrics.clone());
    post(&app, "/validate", &case("pod-name-required")["body"]).await;
    post(&app, "/validate", &case("pod-valid")["body"]).await;
    post(&app, "/validate", &case("pod-valid")["body"]).await;
    post(&app, "/authorize", &case("authz-status-update-own")["body"]).await;
    post_bytes(&app, "/mutate", b"{".to_vec()).await;
    let text = metrics.encode();
    for line in [
        r#"volume_health_webhook_requests_total{endpoint="validate",resource="pods",operation="UPDATE",decision="invalid"} 1"#,
        r#"volume_health_webhook_requests_total{endpoint="validate",resource="pods",operation="UPDATE",decision="allowed"} 2"#,
        r#"volume_health_webhook_requests_total{endpoint="authorize",resource="csinodes",operation="update",decision="allow"} 1"#,
        r#"volume_health_webhook_requests_total{endpoint="mutate",resource="unknown",operation="unknown",decision="bad_request"} 1"#,
        r#"volume_health_webhook_request_duration_seconds_bucket{le="0.0001",endpoint="validate",decision="allowed"}"#,
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}

// ---------------------------------------------------------------------------------------
// --enforcement-action
// ---------------------------------------------------------------------------------------

fn app_enforcing(profile: &str, action: EnforcementAction, metrics: Metrics) -> Router {
    let mut s = settings(profile);
    s.enforcement_action = action;
    router(&s, metrics)
}

/// The answer's exact bytes.
async fn answer_bytes(app: &Router, path: &str, body: &Value) -> String {
    let (status, bytes) = support::router_call::call(app, path, wire(body)).await;
    assert_eq!(status, StatusCode::OK);
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn validation_cases() -> Vec<Value> {
    cases()
        .into_iter()
        .filter(|c| c["endpoint"] == "validate")
        .collect()
}

/// `/validate` answers of every recorded case as the server gave them before enforcement
/// actions existed. `UPDATE_GOLDEN=1 cargo test -p volume-health-webhooks --test it admission::`
/// rewrites it from the `deny` answers.
const DENY_GOLDEN: &str = "tests/golden/validate-deny.json";

/// `deny`, the default, answers every recorded case exactly as before, byte for byte.
#[tokio::test]
async fn deny_gives_the_answers_of_before_byte_for_byte() {
    let golden_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DENY_GOLDEN);
    let mut answers = serde_json::Map::new();
    for c in validation_cases() {
        let profile = c["profile"].as_str().unwrap();
        let app = app_enforcing(profile, EnforcementAction::Deny, Metrics::new());
        let answer = answer_bytes(&app, "/validate", &c["body"]).await;
        let default = answer_bytes(&self::app(profile), "/validate", &c["body"]).await;
        assert_eq!(answer, default, "{}: deny is the default", c["id"]);
        answers.insert(c["id"].as_str().unwrap().to_owned(), Value::String(answer));
    }
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        let mut golden: Value =
            serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
        golden["answers"] = Value::Object(answers.clone());
        std::fs::write(
            &golden_path,
            serde_json::to_string_pretty(&golden).unwrap() + "\n",
        )
        .unwrap();
    }
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    assert_eq!(golden["answers"], Value::Object(answers));
    assert_eq!(
        golden["answers"].as_object().unwrap().len(),
        validation_cases().len(),
        "one golden answer per recorded /validate case"
    );
}

/// The strings of a denial's errors, `<field>: <message>` of each cause, in order.
fn denial_errors(answer: &Value) -> Vec<String> {
    answer["response"]["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            format!(
                "{}: {}",
                x["field"].as_str().unwrap(),
                x["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// `warn` and `dryrun` on every recorded `/validate` case: what field validation refuses is
/// allowed, with one warning per error (`warn`) or none (`dryrun`); everything else, node
/// restriction included, is answered exactly as `deny` answers it.
#[tokio::test]
async fn warn_and_dryrun_allow_only_what_field_validation_refuses() {
    let mut refused = 0;
    for c in validation_cases() {
        let id = &c["id"];
        let profile = c["profile"].as_str().unwrap();
        let uid = &c["body"]["request"]["uid"];
        let deny = app_enforcing(profile, EnforcementAction::Deny, Metrics::new());
        let denied = answer_bytes(&deny, "/validate", &c["body"]).await;
        for action in [EnforcementAction::Warn, EnforcementAction::Dryrun] {
            let app = app_enforcing(profile, action, Metrics::new());
            let answer = answer_bytes(&app, "/validate", &c["body"]).await;
            if c["expect"]["code"] != 422 {
                assert_eq!(
                    answer, denied,
                    "{id} {action:?}: answered as deny answers it"
                );
                if c["expect"]["code"] == 403 {
                    assert!(answer.contains(r#""allowed":false"#), "{id}: {answer}");
                }
                continue;
            }
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
            assert_eq!(answer["kind"], "AdmissionReview");
            let r = &answer["response"];
            if action == EnforcementAction::Dryrun {
                assert_eq!(r, &json!({"uid": uid, "allowed": true}), "{id}: silent");
                continue;
            }
            let errors = denial_errors(&serde_json::from_str(&denied).unwrap());
            assert_eq!(
                r,
                &json!({"uid": uid, "allowed": true, "warnings": errors}),
                "{id}: the denial's strings as warnings"
            );
            // And the strings the recorded case expects of the denial.
            let warnings: Vec<&str> = r["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            let expect = &c["expect"];
            let (exact, prefixes) = (
                expect["errors"].as_array().unwrap(),
                expect["error_prefixes"].as_array().unwrap(),
            );
            assert_eq!(warnings.len(), exact.len() + prefixes.len(), "{id}");
            for want in exact {
                assert!(warnings.contains(&want.as_str().unwrap()), "{id}: {want}");
            }
            for prefix in prefixes {
                let prefix = prefix.as_str().unwrap();
                assert!(
                    warnings.iter().any(|w| w.starts_with(prefix)),
                    "{id}: {prefix}"
                );
            }
            refused += 1;
        }
    }
    assert_eq!(
        refused, 10,
        "every recorded 422 case was answered with warnings"
    );
}

/// A claim whose sixteen conditions all have a malformed reason: sixteen errors of 370-odd
/// characters each. `warn` sends nine of them cut to 256 characters, as the apiserver would
/// cut them, and a tenth that counts the other seven.
#[tokio::test]
async fn warn_cuts_long_warnings_and_counts_those_past_ten() {
    let mut review = case("pvc-valid")["body"].clone();
    review["request"]["userInfo"] = json!({"username": "system:serviceaccount:kube-system:health-monitor",
                                           "groups": ["system:serviceaccounts"]});
    let conditions: Vec<Value> = (0..16)
        .map(|i| json!({"status": "Degraded", "reason": format!("{i}Reason"), "message": "m"}))
        .collect();
    review["request"]["object"]["status"]["healthStatus"]["healthConditions"] =
        Value::Array(conditions);
    let deny = app_enforcing("gate-on", EnforcementAction::Deny, Metrics::new());
    let (_, denied) = post(&deny, "/validate", &review).await;
    let errors = denial_errors(&denied);
    assert_eq!(errors.len(), 16, "{denied}");
    assert!(errors.iter().all(|e| e.chars().count() > 256), "{errors:?}");

    let warn = app_enforcing("gate-on", EnforcementAction::Warn, Metrics::new());
    let (_, answer) = post(&warn, "/validate", &review).await;
    let r = &answer["response"];
    assert_eq!(r["allowed"], true, "{answer}");
    assert!(r.get("status").is_none(), "{answer}");
    let warnings: Vec<&str> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(warnings.len(), 10, "{warnings:#?}");
    for (warning, error) in warnings.iter().zip(&errors).take(9) {
        assert_eq!(
            *warning,
            error.chars().take(256).collect::<String>(),
            "the first 256 characters of the error"
        );
    }
    assert_eq!(warnings[9], "and 7 more validation errors, 16 in all");
    let total: usize = warnings.iter().map(|w| w.chars().count()).sum();
    assert!(total < 4096, "within the apiserver's 4096 runes: {total}");
}

/// Node restriction, and an object that cannot be read as its kind, deny in every mode.
#[tokio::test]
async fn node_restriction_and_undecodable_objects_deny_in_every_mode() {
    let mut undecodable = case("pod-valid")["body"].clone();
    undecodable["request"]["object"]["status"]["volumeHealth"] = json!("not a list");
    let mut writers = settings("gate-on");
    writers.pvc_health_writers = Some(HashSet::from(["health-monitor".to_owned()]));
    let mut invalid_by_node = case("pvc-status-enum")["body"].clone();
    invalid_by_node["request"]["userInfo"] = json!({"username": "system:node:node1", "groups": ["system:nodes", "system:authenticated"]});
    let reviews = [
        ("gate-on", undecodable, 400),
        (
            "gate-off",
            case("nr-csinode-status-own-node-ok")["body"].clone(),
            403,
        ),
        ("gate-on", invalid_by_node, 403),
        (
            "gate-on",
            case("nr-pod-status-other-node")["body"].clone(),
            403,
        ),
    ];
    for action in [
        EnforcementAction::Deny,
        EnforcementAction::Warn,
        EnforcementAction::Dryrun,
    ] {
        for (profile, review, code) in &reviews {
            let metrics = Metrics::new();
            let app = app_enforcing(profile, action, metrics.clone());
            let (_, answer) = post(&app, "/validate", review).await;
            let r = &answer["response"];
            assert_eq!(r["allowed"], false, "{action:?}: {answer}");
            assert_eq!(r["status"]["code"], *code, "{action:?}: {answer}");
            assert!(r.get("warnings").is_none(), "{answer}");
            // Counted only when field validation refuses: these stay at zero.
            let violations = metrics.encode();
            for resource in ["pods", "persistentvolumeclaims", "csinodes"] {
                let zero = format!(
                    r#"volume_health_webhook_violations_total{{resource="{resource}",action="{}"}} 0"#,
                    action.as_str()
                );
                assert!(violations.contains(&zero), "{zero}\n{violations}");
            }
        }
        let app = router(
            &Settings {
                enforcement_action: action,
                ..writers.clone()
            },
            Metrics::new(),
        );
        let (_, answer) = post(&app, "/validate", &case("pvc-valid")["body"]).await;
        assert_eq!(answer["response"]["status"]["code"], 403, "{answer}");
    }
}

/// `violations_total` counts every review that field validation refuses, by resource and
/// action, in every mode; `requests_total` tells what the answer was.
#[tokio::test]
async fn the_violations_counter_moves_in_every_mode() {
    for (action, decision) in [
        (EnforcementAction::Deny, "invalid"),
        (EnforcementAction::Warn, "warned"),
        (EnforcementAction::Dryrun, "dryrun"),
    ] {
        let metrics = Metrics::new();
        let mut per_resource = std::collections::BTreeMap::<&str, usize>::new();
        for c in validation_cases() {
            let app = app_enforcing(c["profile"].as_str().unwrap(), action, metrics.clone());
            post(&app, "/validate", &c["body"]).await;
            if c["expect"]["code"] == 422 {
                let resource = match c["body"]["request"]["resource"]["resource"].as_str() {
                    Some("pods") => "pods",
                    Some("persistentvolumeclaims") => "persistentvolumeclaims",
                    Some("csinodes") => "csinodes",
                    other => panic!("{other:?}"),
                };
                *per_resource.entry(resource).or_default() += 1;
            }
        }
        assert_eq!(per_resource.values().sum::<usize>(), 10);
        let text = metrics.encode();
        let action = action.as_str();
        for (resource, count) in &per_resource {
            let line = format!(
                r#"volume_health_webhook_violations_total{{resource="{resource}",action="{action}"}} {count}"#
            );
            assert!(text.contains(&line), "missing {line}\n{text}");
        }
        assert_eq!(
            text.matches("volume_health_webhook_violations_total{")
                .count(),
            3,
            "{text}"
        );
        let requests = format!(
            r#"volume_health_webhook_requests_total{{endpoint="validate",resource="pods",operation="UPDATE",decision="{decision}"}} "#
        );
        assert!(text.contains(&requests), "missing {requests}\n{text}");
    }
}
