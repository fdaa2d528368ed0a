//! The recorded apiserver cases (`tests/fixtures/admission/cases.json`, and the answers recorded
//! from a real kube-apiserver v1.37.2 in `upstream-v1.37.2.json`), decided by the library
//! directly: node restriction and field validation for `validate`, drop on save for `mutate`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use serde_json::value::RawValue;
use volume_health_validation::admission::{DecodeError, Invalid, ReviewError};
use volume_health_validation::{
    AdmissionRequest, AdmissionReview, HealthResource, Operation, Settings, UserInfo, Verdict,
};

use volume_health_test_kit::apiserver_order::apiserver_order;

fn cases() -> Vec<Value> {
    [
        include_str!("../../tests/fixtures/admission/cases.json"),
        include_str!("../../tests/fixtures/admission/upstream-v1.37.2.json"),
    ]
    .iter()
    .flat_map(|text| serde_json::from_str::<Vec<Value>>(text).unwrap())
    .collect()
}

fn raw(v: &Value) -> Option<Box<RawValue>> {
    (!v.is_null()).then(|| serde_json::value::to_raw_value(v).unwrap())
}

/// An admission case for a resource with rules.
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

    /// The request made in-process from the case's objects, as a program checking its own
    /// write makes it.
    fn built<'a>(&'a self, user: &UserInfo<'a>) -> AdmissionRequest<'a> {
        AdmissionRequest::new(self.resource, self.operation)
            .with_subresource(self.request()["subResource"].as_str().unwrap_or(""))
            .with_name(self.request()["name"].as_str().unwrap_or(""))
            .with_user(user.clone())
            .with_objects(self.object.as_deref(), self.old_object.as_deref())
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

/// The recorded reviews, members in kube-apiserver's order, read and decided as the webhooks
/// do: node restriction and field validation for `validate`, drop on save for `mutate`.
#[test]
fn recorded_cases() {
    let cases = admission_cases();
    let mut ran = 0;
    for recorded in &cases {
        let (case, id) = (&recorded.case, recorded.id());
        let endpoint = case["endpoint"].as_str().unwrap();
        let body = apiserver_order(&case["body"]);
        let review = AdmissionReview::parse(&body).unwrap();
        let request = review.request;
        let gate_enabled = case["profile"] != "gate-off";
        let expect = &case["expect"];
        if endpoint == "mutate" {
            let dropped = request.gated_field_to_drop(gate_enabled).unwrap();
            assert_eq!(dropped.is_some(), expect["patch"] == "apply", "{id}");
            ran += 1;
            continue;
        }
        let policy = Settings::with_gate(gate_enabled);
        let verdict = request.validate(&policy).unwrap();
        match verdict.status() {
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
                if let Verdict::Invalid(Invalid { errors, .. }) = &verdict {
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
    assert!(!cases.is_empty(), "the fixture has admission cases");
    assert_eq!(ran, cases.len(), "every admission case ran");
}

/// A review answers the same whatever the order of its request's members: in kube-apiserver's
/// order (objects read in one pass), sorted (objects met before `resource`, read at the end),
/// and as a request made in-process from the objects, with every gate and policy of the
/// recorded cases.
#[test]
fn member_order_does_not_change_answers() {
    let cases = admission_cases();
    let mut compared = 0;
    for recorded in &cases {
        let (id, request) = (recorded.id(), recorded.request());
        let user: UserInfo<'_> = serde_json::from_str(&recorded.user_json).unwrap();
        let built = recorded.built(&user);
        let ordered = apiserver_order(&recorded.case["body"]);
        let sorted = recorded.case["body"].to_string();
        assert!(
            ordered.find("\"resource\"") < ordered.find("\"object\""),
            "{id}"
        );
        assert!(
            sorted.find("\"object\"") < sorted.find("\"resource\"") || recorded.object.is_none(),
            "{id}"
        );
        let one_pass = AdmissionReview::parse(&ordered).unwrap().request;
        let at_the_end = AdmissionReview::parse(&sorted).unwrap().request;
        for gate_enabled in [true, false] {
            let policy = Settings::with_gate(gate_enabled);
            let want_verdict = built.validate(&policy).unwrap();
            let want_drop = built.gated_field_to_drop(gate_enabled).unwrap();
            for (how, read) in [("apiserver order", &one_pass), ("sorted", &at_the_end)] {
                assert_eq!(
                    read.health_resource(),
                    Some(recorded.resource),
                    "{id} {how}"
                );
                assert_eq!(read.uid, request["uid"].as_str().unwrap(), "{id} {how}");
                assert_eq!(read.has_object(), recorded.object.is_some(), "{id} {how}");
                assert_eq!(
                    read.validate(&policy).unwrap(),
                    want_verdict,
                    "{id} {how} gate {gate_enabled}"
                );
                assert_eq!(
                    read.gated_field_to_drop(gate_enabled).unwrap(),
                    want_drop,
                    "{id} {how} gate {gate_enabled}"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(
        compared,
        cases.len() * 2 * 2,
        "every admission case compared"
    );
}

fn review(request: &str) -> String {
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
    )
}

fn decode_error(err: DecodeError) -> String {
    volume_health_validation::error::chain(&err)
}

/// An object that is not its kind is no error of the review: the decisions that read it
/// report it, in either member order, while drop on save with the gate off still reads its
/// gated field.
#[test]
fn an_object_that_is_not_its_kind_is_reported_by_the_decisions() {
    let request = r#"{"uid":"u","resource":{"group":"","version":"v1","resource":"pods"},
        "subResource":"status","operation":"UPDATE","userInfo":{"username":"system:node:n1","groups":["system:nodes"]},
        "object":{"metadata":{"name":"p"},"status":{"volumeHealth":[{"name":7}]}},
        "oldObject":{"metadata":{"name":"p"},"spec":{"nodeName":"n1"}}}"#;
    let sorted = serde_json::from_str::<Value>(&review(request))
        .unwrap()
        .to_string();
    for body in [review(request), sorted] {
        let read = AdmissionReview::parse(&body).unwrap().request;
        assert_eq!(read.uid, "u");
        let err = read.validate(&Settings::default()).unwrap_err();
        // The position is the object's own (it is decoded on its own), whatever the spacing.
        let message = decode_error(err);
        assert!(
            message.starts_with(
                "failed to decode object as Pod: invalid type: integer `7`, expected a string at line 1 column "
            ),
            "{message}"
        );
        // With the gate off, only `status.volumeHealth` is read for drop on save: a value to
        // drop. With the gate on nothing is dropped, and the object is reported as it is to
        // validation.
        assert_eq!(
            read.gated_field_to_drop(false)
                .unwrap()
                .map(|drop| drop.pointer()),
            Some("/status/volumeHealth")
        );
        assert_eq!(
            decode_error(read.gated_field_to_drop(true).unwrap_err()),
            message
        );
    }
    // serde reads an array as a struct, field by field; an object must be a JSON object, for
    // every decision.
    let array = request.replace(
        r#""object":{"metadata":{"name":"p"},"status":{"volumeHealth":[{"name":7}]}}"#,
        r#""object":[{},null]"#,
    );
    let body = review(&array);
    let read = AdmissionReview::parse(&body).unwrap().request;
    for err in [
        read.validate(&Settings::default()).unwrap_err(),
        read.gated_field_to_drop(false).unwrap_err(),
        read.gated_field_to_drop(true).unwrap_err(),
    ] {
        assert_eq!(
            decode_error(err),
            "failed to decode object as Pod: invalid type: sequence, expected a JSON object at line 1 column 1"
        );
    }
    let duplicate = AdmissionReview::parse(&review(r#"{"uid":"a","uid":"b"}"#)).unwrap_err();
    assert!(matches!(duplicate, ReviewError::Decode(_)), "{duplicate:?}");
    let duplicate = volume_health_validation::error::chain(&duplicate);
    assert!(
        duplicate.starts_with("request body is not an AdmissionReview: duplicate field `uid`"),
        "{duplicate}"
    );
    // The operation is typed when the review is read: an unknown one is no request to decide.
    let body = review(r#"{"uid":"a","operation":"PATCH"}"#);
    let err = AdmissionReview::parse(&body).unwrap_err();
    assert!(matches!(err, ReviewError::Operation(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        r#"AdmissionReview request has unknown operation "PATCH""#
    );
}
