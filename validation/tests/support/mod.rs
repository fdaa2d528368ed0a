//! What the tests of this crate share: the order kube-apiserver writes a review's members in.

use serde_json::Value;

/// The members of an AdmissionReview's `request` in the order kube-apiserver writes them (the
/// field order of Go's `admission/v1.AdmissionRequest`): `resource` before the objects.
pub(crate) const REQUEST_MEMBER_ORDER: [&str; 15] =
    include!("../../../tests/fixtures/admission/request-member-order.json");

/// The review with its request's members in kube-apiserver's order, unknown ones after;
/// `serde_json::Value` would sort them, putting `object` before `resource`.
pub(crate) fn apiserver_order(review: &Value) -> String {
    let request = review["request"]
        .as_object()
        .expect("a review with a request");
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
        r#"{{"apiVersion":{},"kind":{},"request":{{{}}}}}"#,
        review["apiVersion"],
        review["kind"],
        members.join(",")
    )
}
