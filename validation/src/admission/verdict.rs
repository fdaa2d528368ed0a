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
    pub fn status(&self) -> Option<Status> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(forbidden) => Some(forbidden.status()),
            Verdict::Invalid(invalid) => Some(invalid.status()),
        }
    }

    /// The HTTP code of a denial, as [`status`](Self::status) puts it in the `Status`: 403 for
    /// the node restriction, 422 for field errors; `None` when allowed.
    pub fn code(&self) -> Option<i32> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(_) => Some(FORBIDDEN_CODE),
            Verdict::Invalid(_) => Some(INVALID_CODE),
        }
    }

    /// The reason of a denial, as [`status`](Self::status) puts it in the `Status`:
    /// `Forbidden` or `Invalid`; `None` when allowed.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(_) => Some(FORBIDDEN_REASON),
            Verdict::Invalid(_) => Some(INVALID_REASON),
        }
    }

    /// The message of a denial, as [`status`](Self::status) puts it in the `Status` (the one
    /// the apiserver prints); `None` when allowed. Built without the rest of the `Status`.
    pub fn message(&self) -> Option<String> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden(forbidden) => Some(forbidden.message()),
            Verdict::Invalid(invalid) => Some(invalid.message()),
        }
    }

    /// A short label for logs and metrics: `allowed`, `forbidden` or `invalid`.
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
    pub fn status(&self) -> Status {
        invalid_status_omitting(self.resource, &self.name, &self.errors, self.omitted)
    }

    /// The message of [`status`](Self::status).
    fn message(&self) -> String {
        invalid_message_omitting(self.resource, &self.name, &self.errors, self.omitted)
    }
}
