//! SubjectAccessReview in and out, `authorization.k8s.io/v1` and `v1beta1`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use volume_health_validation::error::{MAX_QUOTED_BYTES, cut};
use volume_health_validation::identity::Groups;
use volume_health_validation::json::{self, optional_text};

use crate::decision::{AuthzPolicy, Decision, ResourceAttributes, decide};

const V1: &str = "authorization.k8s.io/v1";
const V1BETA1: &str = "authorization.k8s.io/v1beta1";

/// A body that is not a SubjectAccessReview this webhook can answer; HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not text.
    #[error("request body is not a SubjectAccessReview: not UTF-8")]
    Utf8(#[source] std::str::Utf8Error),
    /// Not JSON of the expected shape.
    #[error("request body is not a SubjectAccessReview")]
    Decode(#[source] serde_json::Error),
    /// Another apiVersion or kind.
    #[error(
        "expected kind SubjectAccessReview in {V1} or {V1BETA1}, got {kind:?} in {api_version:?}"
    )]
    Type {
        /// The body's `apiVersion`.
        api_version: String,
        /// The body's `kind`.
        kind: String,
    },
    /// No `spec`.
    #[error("SubjectAccessReview has no spec")]
    MissingSpec,
    /// Both or neither attribute sets.
    #[error("exactly one of spec.resourceAttributes and spec.nonResourceAttributes must be set")]
    Attributes,
}

/// The answer to one review, with what it was about, borrowed from the review's body.
#[derive(Clone, Debug)]
pub struct Answer<'a> {
    /// The decision.
    pub decision: Decision,
    /// The response body: the review's apiVersion and kind with `status` filled in.
    pub body: Vec<u8>,
    /// `spec.user`, for logs.
    pub user: Cow<'a, str>,
    /// `spec.resourceAttributes`, for logs and metrics; `None` for a non-resource request.
    pub resource: Option<ResourceAttributes<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubjectAccessReview<'a> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    spec: Option<Spec<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    #[serde(borrow, default, deserialize_with = "optional_text")]
    user: Option<Cow<'a, str>>,
    /// v1's name for the groups.
    #[serde(default)]
    groups: Groups,
    /// v1beta1's name for the groups.
    #[serde(default)]
    group: Groups,
    #[serde(borrow, default)]
    resource_attributes: Option<Attributes<'a>>,
    #[serde(default)]
    non_resource_attributes: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct Attributes<'a> {
    #[serde(borrow, default, deserialize_with = "optional_text")]
    verb: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "optional_text")]
    group: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "optional_text")]
    resource: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "optional_text")]
    subresource: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "optional_text")]
    name: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    api_version: &'a str,
    kind: &'static str,
    status: Status<'a>,
}

#[derive(Serialize)]
struct Status<'a> {
    allowed: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    denied: bool,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
}

/// Answers a SubjectAccessReview body.
pub fn review<'a>(body: &'a [u8], policy: &AuthzPolicy) -> Result<Answer<'a>, ReviewError> {
    // Checked once here, the text is not checked again string by string as serde reads it.
    let body = std::str::from_utf8(body).map_err(ReviewError::Utf8)?;
    // A body or member that is a JSON array where an object belongs is not a review.
    let sar: SubjectAccessReview<'_> = json::from_str(body).map_err(ReviewError::Decode)?;
    let api_version = match &*sar.api_version {
        V1 => V1,
        V1BETA1 => V1BETA1,
        _ => return Err(type_error(&sar)),
    };
    if sar.kind != "SubjectAccessReview" {
        return Err(type_error(&sar));
    }
    let spec = sar.spec.ok_or(ReviewError::MissingSpec)?;
    if spec.resource_attributes.is_some() == spec.non_resource_attributes.is_some() {
        return Err(ReviewError::Attributes);
    }
    let groups = if api_version == V1 {
        spec.groups
    } else {
        spec.group
    };
    let user = spec.user.as_deref().unwrap_or_default();
    // Moved out of the review, not copied: most strings borrow the body.
    let resource = spec.resource_attributes.map(|a| ResourceAttributes {
        verb: a.verb.unwrap_or_default(),
        group: a.group.unwrap_or_default(),
        resource: a.resource.unwrap_or_default(),
        subresource: a.subresource.unwrap_or_default(),
        name: a.name.unwrap_or_default(),
    });
    let decision = decide(user, groups, resource.as_ref(), policy);
    let response = Response {
        api_version,
        kind: "SubjectAccessReview",
        status: Status {
            allowed: decision == Decision::Allow,
            denied: matches!(decision, Decision::Deny(_)),
            reason: decision.reason(),
        },
    };
    // Strings and bools only: serializing them cannot fail.
    let body = serde_json::to_vec(&response).expect("strings and bools serialize");
    Ok(Answer {
        decision,
        body,
        user: spec.user.unwrap_or_default(),
        resource,
    })
}

/// The message quotes the body's `apiVersion` and `kind` cut short, whatever their length.
fn type_error(sar: &SubjectAccessReview<'_>) -> ReviewError {
    let quoted = |value: &str| cut(value, MAX_QUOTED_BYTES).into_owned();
    ReviewError::Type {
        api_version: quoted(&sar.api_version),
        kind: quoted(&sar.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strings of an answer are the body's own, copied only where an escape had to be
    /// decoded.
    #[test]
    fn answers_borrow_the_body() {
        let body = br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview",
            "spec":{"user":"system:node:node1","groups":["system:node\u0073"],
            "resourceAttributes":{"verb":"update","group":"storage.k8s.io","resource":"csinodes",
            "subresource":"st\u0061tus","name":"node1"}}}"#;
        let policy = AuthzPolicy {
            gate_enabled: true,
            deny_on_mismatch: false,
        };
        let answer = review(body, &policy).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.decision, Decision::Allow);
        assert!(matches!(answer.user, Cow::Borrowed("system:node:node1")));
        let resource = answer.resource.unwrap_or_default();
        for borrowed in [
            &resource.verb,
            &resource.group,
            &resource.resource,
            &resource.name,
        ] {
            assert!(matches!(borrowed, Cow::Borrowed(_)), "{borrowed:?}");
        }
        assert!(matches!(resource.subresource, Cow::Owned(ref s) if s == "status"));
    }
}
