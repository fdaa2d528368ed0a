//! The one place where decisions become the Kubernetes `Status` an apiserver returns.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

use crate::field::{FieldError, GoQuoted};
use crate::resource::HealthResource;

/// Most field errors a server reports for one object
/// ([`Settings::error_limit`](crate::Settings::error_limit)). Each entry of an
/// unbounded list can add errors, so a hostile object could otherwise make an answer many times
/// the size of its request; past this many, errors are counted, not kept, and the message says
/// how many more there were.
pub const MAX_REPORTED_ERRORS: usize = 10_000;

/// The code of a 422 Unprocessable Entity, as field validation answers.
pub(crate) const INVALID_CODE: i32 = 422;
/// The reason of a 422.
pub(crate) const INVALID_REASON: &str = "Invalid";
/// The code of a 403 Forbidden, as the node restriction answers.
pub(crate) const FORBIDDEN_CODE: i32 = 403;
/// The reason of a 403.
pub(crate) const FORBIDDEN_REASON: &str = "Forbidden";

/// The message of a 422, as `apierrors.NewInvalid` prints it:
/// `<Kind> "<name>" is invalid: <err>` for one error, `[<e1>, <e2>]` for several, each distinct
/// string once.
///
/// ```
/// use k8s_openapi::api::core::v1::{Pod, PodStatus, PodVolumeHealth};
/// use volume_health_validation::status::invalid_message;
/// use volume_health_validation::{HealthResource, validate_pod};
///
/// let entry = |name: &str| PodVolumeHealth { name: name.into(), ..Default::default() };
/// let pod = Pod {
///     status: Some(PodStatus {
///         volume_health: Some(vec![entry("logs"), entry("cache")]),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// // The pod has no volumes: each entry is an error.
/// let errors = validate_pod(&pod, None);
/// assert_eq!(
///     invalid_message(HealthResource::Pods, "web-0", &errors[..1]),
///     r#"Pod "web-0" is invalid: status.volumeHealth[0].name: Not found: "logs""#
/// );
/// // Several are bracketed, each distinct string once.
/// let twice = [errors[1].clone(), errors[1].clone()];
/// assert_eq!(
///     invalid_message(HealthResource::Pods, "web-0", &[&errors[..], &twice].concat()),
///     r#"Pod "web-0" is invalid: [status.volumeHealth[0].name: Not found: "logs", status.volumeHealth[1].name: Not found: "cache"]"#
/// );
/// ```
pub fn invalid_message(resource: HealthResource, name: &str, errors: &[FieldError]) -> String {
    invalid_message_omitting(resource, name, errors, 0)
}

/// [`invalid_message`] for the first errors of a longer list: `omitted` more are counted at the
/// end of the list, `[<e1>, ..., and 12 more errors]`.
pub(crate) fn invalid_message_omitting(
    resource: HealthResource,
    name: &str,
    errors: &[FieldError],
    omitted: usize,
) -> String {
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    // Each distinct string once, in first-seen order: a hashed set keeps this linear.
    let mut seen = HashSet::with_capacity(rendered.len());
    let mut distinct: Vec<&str> = rendered
        .iter()
        .map(String::as_str)
        .filter(|s| seen.insert(*s))
        .collect();
    let more = format!("and {omitted} more errors");
    if omitted > 0 {
        distinct.push(&more);
    }
    let aggregate = match distinct.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    };
    format!(
        "{} {} is invalid: {aggregate}",
        resource.qualified_kind(),
        GoQuoted(name)
    )
}

/// The `Status` of a 422 Unprocessable Entity for `errors` in object `name`: reason `Invalid`,
/// one cause per error.
///
/// ```
/// use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth};
/// use volume_health_validation::status::invalid_status;
/// use volume_health_validation::{HealthResource, validate_csinode};
///
/// let entry = StorageHealth { name: "Not_A_Driver".into(), ..Default::default() };
/// let node = CSINode {
///     status: Some(CSINodeStatus { storage_health: Some(vec![entry]) }),
///     ..Default::default()
/// };
/// let errors = validate_csinode(&node, None);
/// let status = invalid_status(HealthResource::CsiNodes, "node-1", &errors);
/// assert_eq!((status.code, status.reason.as_deref()), (Some(422), Some("Invalid")));
/// let details = status.details.expect("details");
/// // The kind and group name the object; each cause names its field.
/// assert_eq!(details.kind.as_deref(), Some("CSINode"));
/// assert_eq!(details.group.as_deref(), Some("storage.k8s.io"));
/// let causes = details.causes.unwrap_or_default();
/// assert_eq!(causes.len(), errors.len());
/// assert_eq!(causes[0].field.as_deref(), Some("status.storageHealth[0].name"));
/// ```
pub fn invalid_status(resource: HealthResource, name: &str, errors: &[FieldError]) -> Status {
    invalid_status_omitting(resource, name, errors, 0)
}

/// [`invalid_status`] for the first errors of a longer list, `omitted` more said in the message.
pub(crate) fn invalid_status_omitting(
    resource: HealthResource,
    name: &str,
    errors: &[FieldError],
    omitted: usize,
) -> Status {
    let causes = errors
        .iter()
        .map(|e| StatusCause {
            reason: Some(e.kind.cause_type().to_owned()),
            message: Some(e.body()),
            field: Some(e.field.clone()),
        })
        .collect();
    failure(
        INVALID_CODE,
        INVALID_REASON,
        invalid_message_omitting(resource, name, errors, omitted),
        Some(StatusDetails {
            name: Some(name.to_owned()),
            group: non_empty(resource.group()),
            kind: Some(resource.kind().to_owned()),
            causes: Some(causes),
            ..Default::default()
        }),
    )
}

/// The `Status` of a 403 Forbidden, as `admission.NewForbidden` builds it:
/// `<resource>[.<group>] "<name>" is forbidden: <reason>`.
///
/// ```
/// use volume_health_validation::HealthResource;
/// use volume_health_validation::restriction::Restricted;
/// use volume_health_validation::status::forbidden_status;
///
/// let reason = Restricted::ClaimHealthByNode("node-1".into()).to_string();
/// let status = forbidden_status(HealthResource::PersistentVolumeClaims, "data-0", &reason);
/// assert_eq!(status.code, Some(403));
/// assert_eq!(
///     status.message.as_deref(),
///     Some(r#"persistentvolumeclaims "data-0" is forbidden: node "node-1" is not allowed to update status.healthStatus"#)
/// );
/// // The details name the resource, not the kind, as upstream's do.
/// assert_eq!(status.details.and_then(|d| d.kind).as_deref(), Some("persistentvolumeclaims"));
/// ```
pub fn forbidden_status(resource: HealthResource, name: &str, reason: &str) -> Status {
    failure(
        FORBIDDEN_CODE,
        FORBIDDEN_REASON,
        forbidden_message(resource, name, reason),
        Some(StatusDetails {
            name: Some(name.to_owned()),
            group: non_empty(resource.group()),
            kind: Some(resource.resource().to_owned()),
            ..Default::default()
        }),
    )
}

/// The message of a 403, as `admission.NewForbidden` prints it:
/// `<resource>[.<group>] "<name>" is forbidden: <reason>`.
pub(crate) fn forbidden_message(resource: HealthResource, name: &str, reason: &str) -> String {
    format!(
        "{} {} is forbidden: {reason}",
        resource.qualified_resource(),
        GoQuoted(name)
    )
}

/// The `Status` of a 400 Bad Request with `message`.
///
/// ```
/// use volume_health_validation::AdmissionReview;
/// use volume_health_validation::status::bad_request_status;
///
/// let error = AdmissionReview::parse("{}").expect_err("no apiVersion, no kind");
/// let status = bad_request_status(error.to_string());
/// assert_eq!((status.code, status.reason.as_deref()), (Some(400), Some("BadRequest")));
/// assert_eq!(
///     status.message.as_deref(),
///     Some(r#"expected kind AdmissionReview in admission.k8s.io/v1, got "" in """#)
/// );
/// ```
pub fn bad_request_status(message: String) -> Status {
    failure(400, "BadRequest", message, None)
}

fn failure(code: i32, reason: &str, message: String, details: Option<StatusDetails>) -> Status {
    Status {
        status: Some("Failure".to_owned()),
        code: Some(code),
        reason: Some(reason.to_owned()),
        message: Some(message),
        details,
        ..Default::default()
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{ErrorKind, FieldPath};

    fn required(path: &str) -> FieldError {
        FieldError::new(&FieldPath::root("x"), ErrorKind::Required).at(path)
    }

    impl FieldError {
        fn at(mut self, path: &str) -> Self {
            self.field = path.to_owned();
            self
        }
    }

    #[test]
    fn one_error_is_printed_bare() {
        let errors = [required("status.volumeHealth[0].name")];
        assert_eq!(
            invalid_message(HealthResource::Pods, "foo", &errors),
            "Pod \"foo\" is invalid: status.volumeHealth[0].name: Required value"
        );
    }

    #[test]
    fn several_errors_are_bracketed_and_deduplicated() {
        let errors = [required("a"), required("b"), required("a")];
        assert_eq!(
            invalid_message(HealthResource::CsiNodes, "node1", &errors),
            "CSINode.storage.k8s.io \"node1\" is invalid: [a: Required value, b: Required value]"
        );
    }

    #[test]
    fn invalid_status_carries_details_and_causes() {
        let errors = [required("a"), required("a")];
        let status = invalid_status(HealthResource::CsiNodes, "node1", &errors);
        assert_eq!(status.code, Some(422));
        assert_eq!(status.reason.as_deref(), Some("Invalid"));
        assert_eq!(status.status.as_deref(), Some("Failure"));
        let details = status.details.unwrap();
        assert_eq!(details.name.as_deref(), Some("node1"));
        assert_eq!(details.group.as_deref(), Some("storage.k8s.io"));
        assert_eq!(details.kind.as_deref(), Some("CSINode"));
        let causes = details.causes.unwrap();
        assert_eq!(causes.len(), 2, "causes keep every error");
        assert_eq!(causes[0].reason.as_deref(), Some("FieldValueRequired"));
        assert_eq!(causes[0].message.as_deref(), Some("Required value"));
        assert_eq!(causes[0].field.as_deref(), Some("a"));
    }

    #[test]
    fn core_group_is_omitted() {
        let status = invalid_status(HealthResource::Pods, "foo", &[required("a")]);
        assert_eq!(status.details.unwrap().group, None);
    }

    #[test]
    fn forbidden_is_qualified_by_group() {
        let status = forbidden_status(HealthResource::CsiNodes, "node2", "no");
        assert_eq!(status.code, Some(403));
        assert_eq!(status.reason.as_deref(), Some("Forbidden"));
        assert_eq!(
            status.message.as_deref(),
            Some("csinodes.storage.k8s.io \"node2\" is forbidden: no")
        );
        let status = forbidden_status(HealthResource::PersistentVolumeClaims, "claim", "no");
        assert_eq!(
            status.message.as_deref(),
            Some("persistentvolumeclaims \"claim\" is forbidden: no")
        );
    }
}
