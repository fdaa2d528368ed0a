//! Properties over generated input: arbitrary JSON never panics a handler nor gets a 500,
//! whether it is the whole body or the object inside a well-formed review, and gets the same
//! answer whether the objects come before or after `resource`; every drop-on-save patch applies
//! to the object sent and removes only the gated field; answers are deterministic, byte for
//! byte.

use crate::support;

use axum::Router;
use axum::http::StatusCode;
use base64::Engine;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use support::{apiserver_order, case_body};
use volume_health_webhooks::metrics::Metrics;

const ENDPOINTS: [&str; 3] = ["/mutate", "/validate", "/authorize"];

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Nothing is written next to the sources; a failure prints its minimal input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn app(gate: bool) -> Router {
    let mut settings = support::settings();
    settings.gates.csi_volume_health = gate;
    volume_health_webhooks::router(&settings, Metrics::new())
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Keys the handlers look for, mixed with arbitrary ones.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "apiVersion", "kind", "request", "uid", "operation", "resource", "group", "object",
            "oldObject", "subResource", "userInfo", "username", "groups", "metadata", "name",
            "spec", "status", "nodeName", "volumes", "persistentVolumeClaim", "volumeHealth",
            "healthConditions", "reason", "message", "healthStatus", "storageHealth", "drivers",
            "resourceAttributes", "verb", "user", "subresource", "dryRun",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,12}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        prop::sample::select(vec![
            "admission.k8s.io/v1",
            "AdmissionReview",
            "UPDATE",
            "CREATE",
            "DELETE",
            "pods",
            "persistentvolumeclaims",
            "csinodes",
            "storage.k8s.io",
            "status",
            "Degraded",
            "DataLoss",
            "Inaccessible",
            "StorageDegraded",
            "StorageUnreachable",
            "node1",
            "system:node:node1",
            "system:nodes",
            "vol",
            "",
        ])
        .prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
    ]
}

/// Arbitrary JSON, biased towards the shapes the handlers read.
fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Checks an answer for a handler that did not panic: no 5xx, a JSON body.
fn check_sane(path: &str, status: StatusCode, body: &[u8]) -> Result<Value, TestCaseError> {
    prop_assert!(
        matches!(status.as_u16(), 200 | 400 | 413 | 422),
        "{path}: HTTP {status}: {}",
        String::from_utf8_lossy(body)
    );
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| TestCaseError::fail(format!("{path}: answer is not JSON: {e}")))?;
    Ok(value)
}

/// Review templates: one per resource and operation the rules cover, plus the node cases.
const TEMPLATES: [&str; 6] = [
    "pod-valid",
    "pvc-valid",
    "csinode-valid",
    "drop-pod-status-new",
    "nr-pod-status-other-node",
    "nr-pvc-healthstatus-added-by-node",
];

/// Where a generated value replaces part of a well-formed review.
const SLOTS: [&str; 6] = [
    "/request/object",
    "/request/oldObject",
    "/request/object/status",
    "/request/object/metadata",
    "/request/object/spec",
    "/request/userInfo",
];

proptest! {
    #![proptest_config(config(256))]

    /// Any JSON as the whole body, and any bytes, on every endpoint, gate on and off.
    #[test]
    fn arbitrary_bodies_never_panic(value in json(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        block_on(async {
            for gate in [true, false] {
                let app = app(gate);
                for path in ENDPOINTS {
                    let (status, body) = support::router_call::call(&app, path, serde_json::to_vec(&value).unwrap()).await;
                    check_sane(path, status, &body)?;
                    let (status, body) = support::router_call::call(&app, path, bytes.clone()).await;
                    check_sane(path, status, &body)?;
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    }

    /// Any JSON as `object`, `oldObject` or a part of them inside a well-formed review: an
    /// HTTP 200 review answering the request's uid, denied only with 400, 403 or 422 (or, for
    /// a malformed `userInfo`, which belongs to the envelope, an HTTP 400).
    #[test]
    fn arbitrary_objects_in_a_well_formed_review_never_panic(
        template in prop::sample::select(TEMPLATES.to_vec()),
        slot in prop::sample::select(SLOTS.to_vec()),
        value in json(),
        gate in any::<bool>(),
    ) {
        let mut review = case_body(template);
        let uid = review["request"]["uid"].clone();
        if let Some(target) = review.pointer_mut(slot) {
            *target = value;
        }
        let app = app(gate);
        block_on(async {
            for path in ["/mutate", "/validate"] {
                let (status, body) = support::router_call::call(&app, path, serde_json::to_vec(&review).unwrap()).await;
                // With `resource` first, as the apiserver writes it, the objects are read in
                // the same pass as the review; the answer is the same, byte for byte (a bad
                // review's message names a position in the body, which moves with the order).
                let (ordered_status, ordered_body) = support::router_call::call(&app, path, apiserver_order(&review).into_bytes()).await;
                prop_assert_eq!(ordered_status, status, "{} in the apiserver's order", path);
                if status == StatusCode::OK {
                    prop_assert_eq!(&ordered_body, &body, "{} in the apiserver's order", path);
                }
                let answer = check_sane(path, status, &body)?;
                if slot == "/request/userInfo" && status == StatusCode::BAD_REQUEST {
                    // userInfo is part of the envelope: a malformed one is a bad review.
                    continue;
                }
                prop_assert_eq!(status, StatusCode::OK, "{}: {}", path, answer);
                let response = &answer["response"];
                prop_assert_eq!(&response["uid"], &uid);
                match response["allowed"].as_bool() {
                    Some(true) => {}
                    Some(false) => {
                        let code = response["status"]["code"].as_u64().unwrap_or(0);
                        prop_assert!(matches!(code, 400 | 403 | 422), "{}", answer);
                    }
                    None => prop_assert!(false, "no decision: {}", answer),
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    }

    /// Any JSON as the `spec` of a SubjectAccessReview: a decision or a 400, never a 500.
    #[test]
    fn arbitrary_access_reviews_never_panic(value in json(), spec_part in any::<bool>()) {
        let mut review = case_body("authz-status-update-own");
        if spec_part {
            review["spec"]["resourceAttributes"] = value;
        } else {
            review["spec"] = value;
        }
        block_on(async {
            let (status, body) = support::router_call::call(&app(true), "/authorize", serde_json::to_vec(&review).unwrap()).await;
            let answer = check_sane("/authorize", status, &body)?;
            if status == StatusCode::OK {
                prop_assert_eq!(&answer["kind"], "SubjectAccessReview");
                prop_assert!(answer["status"]["allowed"].is_boolean(), "{}", answer);
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// A health condition, valid or not, for the resource's list.
fn condition(statuses: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(statuses.to_vec()),
        prop::sample::select(vec!["DiskSlow", "VolumeNotFound", "bad reason", "", "R"]),
        prop::option::of(".{0,20}"),
        prop::collection::vec(("x[a-z]{0,6}", json()), 0..2),
    )
        .prop_map(|(status, reason, message, extra)| {
            let mut c = json!({"status": status, "reason": reason});
            if let Some(message) = message {
                c["message"] = json!(message);
            }
            for (k, v) in extra {
                c[k] = v;
            }
            c
        })
}

/// The gated value of a resource: a list of conditions (a claim: an object holding one), or
/// nothing, an empty list or null.
fn gated_value(resource: usize) -> BoxedStrategy<Option<Value>> {
    let pod_like = |statuses: &'static [&'static str], name: &'static str| {
        prop::collection::vec(
            (
                prop::sample::select(vec![name, "other"]),
                prop::collection::vec(condition(statuses), 0..4),
            )
                .prop_map(
                    |(name, conditions)| json!({"name": name, "healthConditions": conditions}),
                ),
            0..3,
        )
        .prop_map(Value::Array)
        .boxed()
    };
    let present = match resource {
        0 => pod_like(&["Degraded", "DataLoss", "Inaccessible", "Healthy"], "vol"),
        1 => prop::collection::vec(
            condition(&["Degraded", "DataLoss", "Inaccessible", "Healthy"]),
            0..4,
        )
        .prop_map(|c| json!({"healthConditions": c}))
        .boxed(),
        _ => pod_like(
            &["StorageDegraded", "StorageUnreachable", "Unknown"],
            "csi.example.com",
        ),
    };
    prop_oneof![
        3 => present.prop_map(Some),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!([]))),
    ]
    .boxed()
}

/// Unknown fields the apiserver might send (newer API versions): `x`-prefixed keys, so that
/// they never collide with a field the rules read, with any JSON.
fn extra_fields() -> impl Strategy<Value = Vec<(usize, String, Value)>> {
    prop::collection::vec((0usize..4, "x[a-zA-Z]{0,8}", json()), 0..4)
}

/// A resource with a new and an old gated value (no old value: a CREATE).
fn gated_pair() -> impl Strategy<Value = (usize, Option<Value>, Option<Option<Value>>)> {
    (0usize..3).prop_flat_map(|r| (Just(r), gated_value(r), prop::option::of(gated_value(r))))
}

const RESOURCES: [(&str, &str); 3] = [
    ("drop-pod-status-new", "/status/volumeHealth"),
    ("drop-pvc-status-new", "/status/healthStatus"),
    (
        "drop-csinode-preserved-when-in-use",
        "/status/storageHealth",
    ),
];

/// A review of `resource` with `new` and `old` gated values and unknown fields.
fn review(
    resource: usize,
    new: Option<Value>,
    old: Option<Option<Value>>,
    extra: Vec<(usize, String, Value)>,
) -> Value {
    let (id, pointer) = RESOURCES[resource];
    let gated_key = pointer.rsplit('/').next().unwrap();
    let mut review = case_body(id);
    let request = &mut review["request"];
    let base = request["object"].clone();
    let with = |value: Option<Value>| {
        let mut object = base.clone();
        let status = object["status"].as_object_mut().unwrap();
        status.remove(gated_key);
        if let Some(value) = value {
            status.insert(gated_key.to_owned(), value);
        }
        object
    };
    let mut object = with(new);
    for (place, key, value) in extra {
        let target = match place {
            0 => &mut object,
            1 => &mut object["metadata"],
            2 => &mut object["spec"],
            _ => &mut object["status"],
        };
        target[key] = value;
    }
    request["object"] = object;
    match old {
        Some(old) => {
            request["operation"] = json!("UPDATE");
            request["oldObject"] = with(old);
        }
        None => {
            request["operation"] = json!("CREATE");
            request.as_object_mut().unwrap().remove("oldObject");
        }
    }
    review
}

/// Whether a gated value counts as in use: a claim's `healthStatus` when present, a
/// non-empty list otherwise.
fn in_use(resource: usize, value: &Option<Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(items)) => !items.is_empty() || resource == 1,
        Some(_) => true,
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Gate off: a patch comes exactly when a new value appears that the old object did not
    /// use; it applies to the object as sent, and the result is that object without the
    /// gated field, every other byte of it (unknown fields included) kept.
    #[test]
    fn drop_on_save_patches_apply_and_change_only_the_gated_path(
        (resource, new, old) in gated_pair(),
        extra in extra_fields(),
    ) {
        let sent = review(resource, new.clone(), old.clone(), extra);
        let (_, pointer) = RESOURCES[resource];
        let (status, body) = block_on(support::router_call::call(&app(false), "/mutate", serde_json::to_vec(&sent).unwrap()));
        prop_assert_eq!(status, StatusCode::OK);
        let answer: Value = serde_json::from_slice(&body).unwrap();
        let response = &answer["response"];
        prop_assert_eq!(&response["allowed"], true, "{}", answer);
        let old_in_use = old.as_ref().is_some_and(|old| in_use(resource, old));
        let expect_patch = in_use(resource, &new) && !old_in_use;
        let object = &sent["request"]["object"];
        match response.get("patch") {
            None => prop_assert!(!expect_patch, "no patch for {}", object),
            Some(patch) => {
                prop_assert!(expect_patch, "unexpected patch for {}", object);
                prop_assert_eq!(&response["patchType"], "JSONPatch");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(patch.as_str().unwrap())
                    .unwrap();
                let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
                for op in &patch.0 {
                    prop_assert_eq!(op.path().to_string(), pointer, "{:?}", patch);
                }
                let mut patched = object.clone();
                json_patch::patch(&mut patched, &patch)
                    .map_err(|e| TestCaseError::fail(format!("patch does not apply: {e}")))?;
                let mut expected = object.clone();
                let key = pointer.rsplit('/').next().unwrap();
                expected["status"].as_object_mut().unwrap().remove(key);
                prop_assert_eq!(patched, expected);
            }
        }
    }

    /// The same review gets the same answer bytes: twice from one server, once from another.
    #[test]
    fn answers_are_deterministic(
        (resource, new, old) in gated_pair(),
        extra in extra_fields(),
        gate in any::<bool>(),
    ) {
        let body = serde_json::to_vec(&review(resource, new, old, extra)).unwrap();
        block_on(async {
            for path in ["/validate", "/mutate"] {
                let first_app = app(gate);
                let first = support::router_call::call(&first_app, path, body.clone()).await;
                let again = support::router_call::call(&first_app, path, body.clone()).await;
                let other = support::router_call::call(&app(gate), path, body.clone()).await;
                check_sane(path, first.0, &first.1)?;
                prop_assert_eq!(&first, &again, "{}", path);
                prop_assert_eq!(&first, &other, "{}", path);
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
