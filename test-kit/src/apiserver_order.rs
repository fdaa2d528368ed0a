//! AdmissionReview bodies as kube-apiserver writes them: `serde_json::Value` sorts an object's
//! members, which would put `object` before `resource`, so a review built as a `Value` is
//! written here in the field order of Go's `admission/v1` structs instead.

use serde_json::Value;

/// The members of an AdmissionReview's `request` in the order kube-apiserver writes them (the
/// field order of Go's `admission/v1.AdmissionRequest`): `resource` before the objects.
pub const REQUEST_MEMBER_ORDER: [&str; 15] =
    include!("../../tests/fixtures/admission/request-member-order.json");

/// `review` (an AdmissionReview with a `request` object) written as kube-apiserver writes it:
/// `kind`, `apiVersion`, then `request` with its members in [`REQUEST_MEMBER_ORDER`], members
/// it does not name after them.
pub fn apiserver_order(review: &Value) -> String {
    let request = review["request"]
        .as_object()
        .expect("an AdmissionReview with a request");
    let mut keys: Vec<&String> = request.keys().collect();
    keys.sort_by_key(|k| {
        REQUEST_MEMBER_ORDER
            .iter()
            .position(|o| o == k)
            .unwrap_or(REQUEST_MEMBER_ORDER.len())
    });
    let members: Vec<String> = keys
        .iter()
        .map(|k| format!("{}:{}", Value::from(k.as_str()), request[k.as_str()]))
        .collect();
    format!(
        r#"{{"kind":{},"apiVersion":{},"request":{{{}}}}}"#,
        review["kind"],
        review["apiVersion"],
        members.join(",")
    )
}
