//! The recorded apiserver cases (`tests/fixtures/admission/cases.json`), decided by the library
//! directly: node restriction and field validation for `validate`, drop on save for `mutate`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use serde_json::value::RawValue;
use volume_health_validation::{
    AdmissionInput, AdmissionRequest, HealthResource, Operation, REQUEST_MEMBER_ORDER, RawObjects,
    RestrictionPolicy, UserInfo, Verdict, gated_field_to_drop, validate_admission,
};

fn cases() -> Vec<Value> {
    serde_json::from_str(include_str!("../../tests/fixtures/admission/cases.json")).unwrap()
}

fn raw(v: &Value) -> Option<Box<RawValue>> {
    (!v.is_null()).then(|| serde_json::value::to_raw_value(v).unwrap())
}

/// An admission case for a resource with rules, as the raw-JSON entry points take it.
struct Recorded {
    case: Value,
    resource: HealthResource,
    operation: Operation,
    user_json: String,
    object: Option<Box<RawValue>>,
    old_object: Option<Box<RawValue>>,
}

impl Recorded {
    fn id(&self) -> &str {
        self.case["id"].as_str().unwrap()
    }

    fn request(&self) -> &Value {
        &self.case["body"]["request"]
    }

    fn input<'a>(&'a self, user: &'a UserInfo<'a>) -> AdmissionInput<'a> {
        AdmissionInput {
            resource: self.resource,
            subresource: self.request()["subResource"].as_str().unwrap_or(""),
            operation: self.operation,
            name: self.request()["name"].as_str().unwrap_or(""),
            user,
            object: self.object.as_deref(),
            old_object: self.old_object.as_deref(),
        }
    }
}

/// The recorded admission cases for resources with rules.
fn admission_cases() -> Vec<Recorded> {
    cases()
        .into_iter()
        .filter(|case| case["endpoint"] != "authorize")
        .filter_map(|case| {
            let request = &case["body"]["request"];
            let resource = HealthResource::from_group_resource(
                request["resource"]["group"].as_str().unwrap(),
                request["resource"]["resource"].as_str().unwrap(),
            )?;
            Some(Recorded {
                resource,
                operation: Operation::parse(request["operation"].as_str().unwrap()).unwrap(),
                user_json: request["userInfo"].to_string(),
                object: raw(&request["object"]),
                old_object: raw(&request["oldObject"]),
                case,
            })
        })
        .collect()
}

#[test]
fn recorded_cases() {
    let mut ran = 0;
    for recorded in admission_cases() {
        let (case, id) = (&recorded.case, recorded.id());
        let endpoint = case["endpoint"].as_str().unwrap();
        let resource = recorded.resource;
        let user: UserInfo<'_> = serde_json::from_str(&recorded.user_json).unwrap();
        let input = recorded.input(&user);
        let gate_enabled = case["profile"] != "gate-off";
        let expect = &case["expect"];
        if endpoint == "mutate" {
            let dropped = gated_field_to_drop(&input, gate_enabled).unwrap();
            assert_eq!(dropped.is_some(), expect["patch"] == "apply", "{id}");
            ran += 1;
            continue;
        }
        let policy = RestrictionPolicy {
            gate_enabled,
            pvc_health_writers: None,
        };
        let verdict = validate_admission(&input, &policy).unwrap();
        match verdict.status(resource) {
            None => assert_eq!(expect["allowed"], true, "{id}: allowed"),
            Some(status) => {
                assert_eq!(expect["allowed"], false, "{id}: {status:?}");
                assert_eq!(
                    Some(expect["code"].as_i64().unwrap() as i32),
                    status.code,
                    "{id}"
                );
                if let Some(message) = expect["message"].as_str() {
                    assert_eq!(status.message.as_deref(), Some(message), "{id}");
                }
                if let Verdict::Invalid { errors, .. } = &verdict {
                    let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    for want in expect["errors"].as_array().unwrap() {
                        assert!(
                            got.iter().any(|g| g == want.as_str().unwrap()),
                            "{id}: {got:?}"
                        );
                    }
                    for prefix in expect["error_prefixes"].as_array().unwrap() {
                        assert!(
                            got.iter().any(|g| g.starts_with(prefix.as_str().unwrap())),
                            "{id}: {got:?}"
                        );
                    }
                    let expected = expect["errors"].as_array().unwrap().len()
                        + expect["error_prefixes"].as_array().unwrap().len();
                    assert_eq!(got.len(), expected, "{id}: {got:?}");
                }
            }
        }
        ran += 1;
    }
    assert_eq!(ran, 31, "every admission case ran");
}

/// The request's members in the order kube-apiserver writes them, unknown ones after;
/// `serde_json::Value` would sort them, putting `object` before `resource`.
fn apiserver_order(request: &Value) -> String {
    let members = request.as_object().unwrap();
    let mut keys: Vec<&String> = members.keys().collect();
    keys.sort_by_key(|k| {
        REQUEST_MEMBER_ORDER
            .iter()
            .position(|o| o == k)
            .unwrap_or(REQUEST_MEMBER_ORDER.len())
    });
    let parts: Vec<String> = keys
        .iter()
        .map(|k| format!("{}:{}", Value::from(k.as_str()), members[k.as_str()]))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Reading a request in one pass (objects as views) or with raw objects gives the answers of
/// `validate_admission` and `gated_field_to_drop`, in either member order, with every gate and
/// policy of the recorded cases.
#[test]
fn one_pass_reading_answers_as_raw_json() {
    let mut compared = 0;
    for recorded in admission_cases() {
        let (id, request) = (recorded.id(), recorded.request());
        let (resource, operation) = (recorded.resource, recorded.operation);
        let user: UserInfo<'_> = serde_json::from_str(&recorded.user_json).unwrap();
        let input = recorded.input(&user);
        let sorted = request.to_string();
        let ordered = apiserver_order(request);
        assert!(
            ordered.find("\"resource\"") < ordered.find("\"object\""),
            "{id}"
        );
        for gate_enabled in [true, false] {
            let policy = RestrictionPolicy {
                gate_enabled,
                pvc_health_writers: None,
            };
            let want_verdict = validate_admission(&input, &policy).unwrap();
            let want_drop = gated_field_to_drop(&input, gate_enabled).unwrap();
            let one_pass: AdmissionRequest<'_> = serde_json::from_str(&ordered).unwrap();
            let raw_sorted: RawObjects<'_> = serde_json::from_str(&sorted).unwrap();
            let one_pass_sorted: AdmissionRequest<'_> = serde_json::from_str(&sorted).unwrap();
            for (how, read) in [
                ("one pass", &one_pass),
                ("raw objects", &raw_sorted.0),
                ("object before resource", &one_pass_sorted),
            ] {
                assert_eq!(read.health_resource(), Some(resource), "{id} {how}");
                assert_eq!(read.uid, request["uid"].as_str().unwrap(), "{id} {how}");
                assert_eq!(read.has_object(), recorded.object.is_some(), "{id} {how}");
                assert_eq!(
                    read.validate(operation, &policy).unwrap(),
                    want_verdict,
                    "{id} {how} gate {gate_enabled}"
                );
                assert_eq!(
                    read.gated_field_to_drop(operation, gate_enabled).unwrap(),
                    want_drop,
                    "{id} {how} gate {gate_enabled}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 31 * 2 * 3, "every admission case compared");
}

/// An object that is not its kind fails the one-pass read; the same request read with raw
/// objects yields it, and the object's decode error when a rule reads it.
#[test]
fn one_pass_reading_fails_where_an_object_is_not_its_kind() {
    let request = r#"{"uid":"u","resource":{"group":"","version":"v1","resource":"pods"},
        "subResource":"status","operation":"UPDATE","userInfo":{"username":"system:node:n1","groups":["system:nodes"]},
        "object":{"metadata":{"name":"p"},"status":{"volumeHealth":[{"name":7}]}},
        "oldObject":{"metadata":{"name":"p"},"spec":{"nodeName":"n1"}}}"#;
    assert!(serde_json::from_str::<AdmissionRequest<'_>>(request).is_err());
    let raw: RawObjects<'_> = serde_json::from_str(request).unwrap();
    let err = raw
        .0
        .validate(Operation::Update, &RestrictionPolicy::default())
        .unwrap_err();
    assert_eq!(err.to_string(), "failed to decode object as Pod");
    // serde reads an array as a struct, field by field; an object must be a JSON object, in
    // one pass as afterwards, for every decision.
    let array = request.replace(
        r#""object":{"metadata":{"name":"p"},"status":{"volumeHealth":[{"name":7}]}}"#,
        r#""object":[{},null]"#,
    );
    assert!(serde_json::from_str::<AdmissionRequest<'_>>(&array).is_err());
    let raw: RawObjects<'_> = serde_json::from_str(&array).unwrap();
    for err in [
        raw.0
            .validate(Operation::Update, &RestrictionPolicy::default())
            .unwrap_err(),
        raw.0
            .gated_field_to_drop(Operation::Update, false)
            .unwrap_err(),
    ] {
        assert_eq!(
            format!("{err}: {}", std::error::Error::source(&err).unwrap()),
            "failed to decode object as Pod: invalid type: sequence, expected a JSON object at line 1 column 1"
        );
    }
    let duplicate = serde_json::from_str::<RawObjects<'_>>(r#"{"uid":"a","uid":"b"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        duplicate.starts_with("duplicate field `uid`"),
        "{duplicate}"
    );
}
