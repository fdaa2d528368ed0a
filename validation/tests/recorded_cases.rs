//! The recorded apiserver cases (`tests/fixtures/admission/cases.json`), decided by the library
//! directly: node restriction and field validation for `validate`, drop on save for `mutate`.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use serde_json::Value;
use serde_json::value::RawValue;
use volume_health_validation::{
    AdmissionInput, HealthResource, Operation, RestrictionPolicy, UserInfo, Verdict,
    gated_field_to_drop, validate_admission,
};

fn cases() -> Vec<Value> {
    serde_json::from_str(include_str!("../../tests/fixtures/admission/cases.json")).unwrap()
}

fn raw(v: &Value) -> Option<Box<RawValue>> {
    (!v.is_null()).then(|| serde_json::value::to_raw_value(v).unwrap())
}

#[test]
fn recorded_cases() {
    let mut ran = 0;
    for case in cases() {
        let endpoint = case["endpoint"].as_str().unwrap();
        if endpoint == "authorize" {
            continue;
        }
        let id = case["id"].as_str().unwrap();
        let request = &case["body"]["request"];
        let Some(resource) = HealthResource::from_group_resource(
            request["resource"]["group"].as_str().unwrap(),
            request["resource"]["resource"].as_str().unwrap(),
        ) else {
            continue;
        };
        let user_json = request["userInfo"].to_string();
        let user: UserInfo<'_> = serde_json::from_str(&user_json).unwrap();
        let (object, old_object) = (raw(&request["object"]), raw(&request["oldObject"]));
        let input = AdmissionInput {
            resource,
            subresource: request["subResource"].as_str().unwrap_or(""),
            operation: Operation::parse(request["operation"].as_str().unwrap()).unwrap(),
            name: request["name"].as_str().unwrap_or(""),
            user: &user,
            object: object.as_deref(),
            old_object: old_object.as_deref(),
        };
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
