//! What the validating webhook answers: allowed, or denied with the `Status` the apiserver
//! would give.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;

use crate::field::ErrorList;
use crate::resource::HealthResource;
use crate::restriction::Restricted;
use crate::status::{
    FORBIDDEN_CODE, FORBIDDEN_REASON, INVALID_CODE, INVALID_REASON, forbidden_message,
    forbidden_status, invalid_message_omitting, invalid_status_omitting,
};

/// The answer of the validating webhook.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to object to.
    Allowed,
    /// A node restriction denies the request (403, checked before any field).
    Forbidden(Forbidden),
    /// Field validation failed (422).
    Invalid(Invalid),
}

impl Verdict {
    /// The `Status` of a denial; `None` when allowed. Its `code`, `reason` and `message` are
    /// [`code`](Self::code), [`reason`](Self::reason) and [`message`](Self::message).
    ///
    /// ```
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    /// use volume_health_validation::{HealthResource, Verdict};
    ///
    /// let forbidden = Verdict::Forbidden(Forbidden {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     reason: Restricted::PodOfOtherNode("node-1".into()),
    /// });
    /// let status = forbidden.status().expect("a denial");
    /// assert_eq!(status.code, forbidden.code());
    /// assert_eq!(status.reason.as_deref(), forbidden.reason());
    /// assert_eq!(status.message, forbidden.message());
    /// assert_eq!(Verdict::Allowed.status(), None);
    /// ```
    pub fn status(&self) -> Option<Status> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(forbidden) => Some(forbidden.status()),
            Verdict::Invalid(invalid) => Some(invalid.status()),
        }
    }

    /// The HTTP code of a denial, as [`status`](Self::status) puts it in the `Status`: 403 for
    /// the node restriction, 422 for field errors; `None` when allowed.
    ///
    /// ```
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    /// use volume_health_validation::{HealthResource, Verdict};
    ///
    /// let forbidden = Verdict::Forbidden(Forbidden {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     reason: Restricted::PodOfOtherNode("node-1".into()),
    /// });
    /// assert_eq!(forbidden.code(), Some(403));
    /// assert_eq!(Verdict::Allowed.code(), None);
    /// ```
    pub fn code(&self) -> Option<i32> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(_) => Some(FORBIDDEN_CODE),
            Verdict::Invalid(_) => Some(INVALID_CODE),
        }
    }

    /// The reason of a denial, as [`status`](Self::status) puts it in the `Status`:
    /// `Forbidden` or `Invalid`; `None` when allowed.
    ///
    /// ```
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    /// use volume_health_validation::{HealthResource, Verdict};
    ///
    /// let forbidden = Verdict::Forbidden(Forbidden {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     reason: Restricted::PodOfOtherNode("node-1".into()),
    /// });
    /// assert_eq!(forbidden.reason(), Some("Forbidden"));
    /// assert_eq!(Verdict::Allowed.reason(), None);
    /// ```
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(_) => Some(FORBIDDEN_REASON),
            Verdict::Invalid(_) => Some(INVALID_REASON),
        }
    }

    /// The message of a denial, as [`status`](Self::status) puts it in the `Status` (the one
    /// the apiserver prints); `None` when allowed. Built without the rest of the `Status`.
    ///
    /// ```
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    /// use volume_health_validation::{HealthResource, Verdict};
    ///
    /// let forbidden = Verdict::Forbidden(Forbidden {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     reason: Restricted::PodOfOtherNode("node-1".into()),
    /// });
    /// assert_eq!(
    ///     forbidden.message().as_deref(),
    ///     Some(r#"pods "web-0" is forbidden: node "node-1" can only update pod status for pods with spec.nodeName set to itself"#)
    /// );
    /// assert_eq!(Verdict::Allowed.message(), None);
    /// ```
    pub fn message(&self) -> Option<String> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(forbidden) => Some(forbidden.message()),
            Verdict::Invalid(invalid) => Some(invalid.message()),
        }
    }

    /// A short label for logs and metrics: `allowed`, `forbidden` or `invalid`.
    ///
    /// ```
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    /// use volume_health_validation::{HealthResource, Verdict};
    ///
    /// let forbidden = Verdict::Forbidden(Forbidden {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     reason: Restricted::PodOfOtherNode("node-1".into()),
    /// });
    /// assert_eq!(forbidden.label(), "forbidden");
    /// assert_eq!(Verdict::Allowed.label(), "allowed");
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Forbidden(_) => "forbidden",
            Verdict::Invalid(_) => "invalid",
        }
    }
}

/// A write the node restriction refuses.
#[derive(Clone, Debug, PartialEq)]
pub struct Forbidden {
    /// The resource written.
    pub resource: HealthResource,
    /// The name printed in the message.
    pub name: String,
    /// What the restriction says.
    pub reason: Restricted,
}

impl Forbidden {
    /// The 403 `Status` the apiserver answers with.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    /// use volume_health_validation::admission::Forbidden;
    /// use volume_health_validation::restriction::Restricted;
    ///
    /// let forbidden = Forbidden {
    ///     resource: HealthResource::CsiNodes,
    ///     name: "node-2".into(),
    ///     reason: Restricted::CsiNodeOfOtherNode,
    /// };
    /// let status = forbidden.status();
    /// assert_eq!(status.code, Some(403));
    /// // The message names the resource with its group, as `admission.NewForbidden` does.
    /// assert_eq!(
    ///     status.message.as_deref(),
    ///     Some(r#"csinodes.storage.k8s.io "node-2" is forbidden: can only access CSINode with the same name as the requesting node"#)
    /// );
    /// ```
    pub fn status(&self) -> Status {
        forbidden_status(self.resource, &self.name, &self.reason.to_string())
    }

    /// The message of [`status`](Self::status).
    fn message(&self) -> String {
        forbidden_message(self.resource, &self.name, &self.reason.to_string())
    }
}

/// An object that field validation refuses.
#[derive(Clone, Debug, PartialEq)]
pub struct Invalid {
    /// The resource written.
    pub resource: HealthResource,
    /// The object's name.
    pub name: String,
    /// The errors, in Kubernetes order: all of them, or the first
    /// [`Settings::error_limit`](crate::Settings::error_limit).
    pub errors: ErrorList,
    /// How many more errors there were past that limit.
    pub omitted: usize,
}

impl Invalid {
    /// The 422 `Status` the apiserver answers with.
    ///
    /// ```
    /// use volume_health_validation::admission::Invalid;
    /// use volume_health_validation::field::{ErrorKind, FieldError, FieldPath};
    /// use volume_health_validation::HealthResource;
    ///
    /// let status = FieldPath::root("status");
    /// let entries = status.child("volumeHealth");
    /// let entry = entries.index(0);
    /// let name = entry.child("name");
    /// let invalid = Invalid {
    ///     resource: HealthResource::Pods,
    ///     name: "web-0".into(),
    ///     errors: vec![FieldError::new(&name, ErrorKind::Required)],
    ///     // Past `Settings::error_limit`, errors are counted, not kept.
    ///     omitted: 2,
    /// };
    /// let status = invalid.status();
    /// assert_eq!(status.code, Some(422));
    /// assert_eq!(
    ///     status.message.as_deref(),
    ///     Some(r#"Pod "web-0" is invalid: [status.volumeHealth[0].name: Required value, and 2 more errors]"#)
    /// );
    /// // One cause per error kept.
    /// let causes = status.details.and_then(|d| d.causes).unwrap_or_default();
    /// assert_eq!(causes[0].reason.as_deref(), Some("FieldValueRequired"));
    /// ```
    pub fn status(&self) -> Status {
        invalid_status_omitting(self.resource, &self.name, &self.errors, self.omitted)
    }

    /// The message of [`status`](Self::status).
    fn message(&self) -> String {
        invalid_message_omitting(self.resource, &self.name, &self.errors, self.omitted)
    }
}
