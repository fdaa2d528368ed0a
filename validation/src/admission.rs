//! Decisions for one admission request, straight from the review's raw JSON.
//!
//! A pod status review carries two whole Pods; only the handful of fields the rules read are
//! decoded (names, `spec.nodeName`, the volume and driver names, the health fields), borrowing
//! strings from the request body where JSON escapes allow.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{PodVolumeHealth, VolumeHealthStatus};
use k8s_openapi::api::storage::v1::StorageHealth;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::conditions::Errors;
use crate::csinode::check_storage_health;
use crate::field::ErrorList;
use crate::identity::node_name;
use crate::pod::check_pod_volume_health;
use crate::pvc::check_volume_health_status;
use crate::resource::{HealthResource, Operation};
use crate::restriction::{RestrictionInput, RestrictionPolicy, check_restrictions};
use crate::status::{forbidden_status, invalid_status};

/// `userInfo` of an admission request.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo<'a> {
    /// The username.
    #[serde(borrow, default)]
    pub username: Cow<'a, str>,
    /// The groups; absent when empty.
    #[serde(borrow, default)]
    pub groups: Option<Vec<Cow<'a, str>>>,
}

impl UserInfo<'_> {
    /// The node name when this user is a node (see [`node_name`]).
    pub fn node_name(&self) -> Option<&str> {
        node_name(&self.username, self.groups.as_deref().unwrap_or_default())
    }
}

/// The parts of an admission request the rules use.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionInput<'a> {
    /// The resource written.
    pub resource: HealthResource,
    /// `subResource` (`""` when absent).
    pub subresource: &'a str,
    /// The operation.
    pub operation: Operation,
    /// `name` of the request (may be empty on CREATE).
    pub name: &'a str,
    /// `userInfo`.
    pub user: &'a UserInfo<'a>,
    /// `object`, absent or `null` on DELETE.
    pub object: Option<&'a RawValue>,
    /// `oldObject`, absent or `null` on CREATE.
    pub old_object: Option<&'a RawValue>,
}

/// An object in the request could not be decoded as its kind.
#[derive(Debug, thiserror::Error)]
#[error("failed to decode {field} as {kind}")]
pub struct DecodeError {
    /// `object` or `oldObject`.
    pub field: &'static str,
    /// The kind it should have been.
    pub kind: &'static str,
    /// What serde found wrong.
    #[source]
    pub source: serde_json::Error,
}

/// The answer of the validating webhook.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to object to.
    Allowed,
    /// A node restriction denies the request (403, checked before any field).
    Forbidden {
        /// The name printed in the message.
        name: String,
        /// Why.
        reason: String,
    },
    /// Field validation failed (422).
    Invalid {
        /// The object's name.
        name: String,
        /// Every error, in Kubernetes order.
        errors: ErrorList,
    },
}

impl Verdict {
    /// The `Status` of a denial; `None` when allowed.
    pub fn status(
        &self,
        resource: HealthResource,
    ) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status> {
        match self {
            Verdict::Allowed => None,
            Verdict::Forbidden { name, reason } => Some(forbidden_status(resource, name, reason)),
            Verdict::Invalid { name, errors } => Some(invalid_status(resource, name, errors)),
        }
    }

    /// A short label for logs and metrics: `allowed`, `forbidden` or `invalid`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Forbidden { .. } => "forbidden",
            Verdict::Invalid { .. } => "invalid",
        }
    }
}

/// Whether the rules of this project cover a subresource: the object itself or `status`.
/// Others (`pods/eviction`, `pods/binding`, ...) carry other kinds and are allowed unchanged.
fn covered(subresource: &str) -> bool {
    matches!(subresource, "" | "status")
}

/// The validating webhook's decision: node restriction first, then field validation of the new object against the old one.
pub fn validate_admission(
    input: &AdmissionInput<'_>,
    policy: &RestrictionPolicy,
) -> Result<Verdict, DecodeError> {
    if !covered(input.subresource) || input.operation == Operation::Connect {
        return Ok(Verdict::Allowed);
    }
    match input.resource {
        HealthResource::Pods => {
            let (new, old) = decode_pair::<PodView<'_>>(input)?;
            let old_node = old
                .as_ref()
                .and_then(|o| o.spec.as_ref()?.node_name.as_deref());
            let object_name = new.as_ref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, old_node, false, policy) {
                return Ok(denied);
            }
            let Some(new) = &new else {
                return Ok(Verdict::Allowed);
            };
            let volumes = new.spec.as_ref().and_then(|s| s.volumes.as_deref());
            let mut errors = Errors::default();
            check_pod_volume_health(
                new.volume_health(),
                old.as_ref().and_then(PodView::volume_health),
                |name| volumes.is_some_and(|v| v.iter().any(|v| v.name.as_deref() == Some(name))),
                &mut errors,
            );
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::PersistentVolumeClaims => {
            let (new, old) = decode_pair::<ClaimView<'_>>(input)?;
            let new_health = new.as_ref().and_then(ClaimView::health_status);
            let old_health = old.as_ref().and_then(ClaimView::health_status);
            let changed = input.operation == Operation::Update && new_health != old_health;
            let object_name = new.as_ref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, None, changed, policy) {
                return Ok(denied);
            }
            let mut errors = Errors::default();
            check_volume_health_status(new_health, old_health, &mut errors);
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::CsiNodes => {
            let (new, old) = decode_pair::<CsiNodeView<'_>>(input)?;
            let object_name = new.as_ref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, None, false, policy) {
                return Ok(denied);
            }
            let Some(new) = &new else {
                return Ok(Verdict::Allowed);
            };
            let drivers = new.spec.as_ref().and_then(|s| s.drivers.as_deref());
            let mut errors = Errors::default();
            check_storage_health(
                new.storage_health(),
                old.as_ref().and_then(CsiNodeView::storage_health),
                |name| drivers.is_some_and(|d| d.iter().any(|d| d.name.as_deref() == Some(name))),
                &mut errors,
            );
            Ok(invalid_or_allowed(input, object_name, errors))
        }
    }
}

/// Runs the node restriction; `Some` is the denial.
fn restrict(
    input: &AdmissionInput<'_>,
    object_name: Option<&str>,
    old_pod_node_name: Option<&str>,
    health_status_changed: bool,
    policy: &RestrictionPolicy,
) -> Option<Verdict> {
    let target_name = match input.operation {
        Operation::Create => object_name.unwrap_or(input.name),
        _ => input.name,
    };
    let restriction = RestrictionInput {
        resource: input.resource,
        subresource: input.subresource,
        operation: input.operation,
        username: &input.user.username,
        node: input.user.node_name(),
        target_name,
        old_pod_node_name,
        health_status_changed,
    };
    let reason = check_restrictions(&restriction, policy).err()?;
    Some(Verdict::Forbidden {
        name: if input.name.is_empty() {
            object_name.unwrap_or_default().to_owned()
        } else {
            input.name.to_owned()
        },
        reason,
    })
}

fn invalid_or_allowed(
    input: &AdmissionInput<'_>,
    object_name: Option<&str>,
    errors: Errors,
) -> Verdict {
    let errors = errors.into_list();
    if errors.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Invalid {
            name: object_name.unwrap_or(input.name).to_owned(),
            errors,
        }
    }
}

/// Drop on save: the JSON Pointer of the gated field to remove from `object`, or `None`
/// when nothing is removed. With the gate off, a new value is dropped unless the old object
/// already uses the field (present for a claim's `healthStatus`, a non-empty list otherwise).
pub fn gated_field_to_drop(
    input: &AdmissionInput<'_>,
    gate_enabled: bool,
) -> Result<Option<&'static str>, DecodeError> {
    if gate_enabled
        || !covered(input.subresource)
        || !matches!(input.operation, Operation::Create | Operation::Update)
    {
        return Ok(None);
    }
    let kind = input.resource.kind();
    let Some(object) = input.object else {
        return Ok(None);
    };
    let new: GatedView = decode(object, "object", kind)?;
    if !new.in_use(input.resource) {
        return Ok(None);
    }
    let old_in_use = match input.old_object {
        Some(old) => decode::<GatedView>(old, "oldObject", kind)?.in_use(input.resource),
        None => false,
    };
    Ok((!old_in_use).then_some(input.resource.gated_pointer()))
}

fn decode_pair<'a, T: Deserialize<'a>>(
    input: &AdmissionInput<'a>,
) -> Result<(Option<T>, Option<T>), DecodeError> {
    let kind = input.resource.kind();
    let new = input
        .object
        .map(|raw| decode(raw, "object", kind))
        .transpose()?;
    let old = input
        .old_object
        .map(|raw| decode(raw, "oldObject", kind))
        .transpose()?;
    Ok((new, old))
}

fn decode<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    field: &'static str,
    kind: &'static str,
) -> Result<T, DecodeError> {
    serde_json::from_str(raw.get()).map_err(|source| DecodeError {
        field,
        kind,
        source,
    })
}

// The views below decode what the rules read and skip the rest. `Option` everywhere: the
// apiserver omits empty fields, and `null` must read as absent.

#[derive(Deserialize, Default)]
struct MetaView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

impl MetaView<'_> {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

#[derive(Deserialize)]
struct NameView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct PodView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<PodSpecView<'a>>,
    #[serde(default)]
    status: Option<PodStatusView>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecView<'a> {
    #[serde(borrow, default)]
    node_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    volumes: Option<Vec<NameView<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatusView {
    #[serde(default)]
    volume_health: Option<Vec<PodVolumeHealth>>,
}

impl PodView<'_> {
    fn volume_health(&self) -> Option<&[PodVolumeHealth]> {
        self.status.as_ref()?.volume_health.as_deref()
    }
}

#[derive(Deserialize)]
struct ClaimView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(default)]
    status: Option<ClaimStatusView>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimStatusView {
    #[serde(default)]
    health_status: Option<VolumeHealthStatus>,
}

impl ClaimView<'_> {
    fn health_status(&self) -> Option<&VolumeHealthStatus> {
        self.status.as_ref()?.health_status.as_ref()
    }
}

#[derive(Deserialize)]
struct CsiNodeView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<CsiNodeSpecView<'a>>,
    #[serde(default)]
    status: Option<CsiNodeStatusView>,
}

#[derive(Deserialize)]
struct CsiNodeSpecView<'a> {
    #[serde(borrow, default)]
    drivers: Option<Vec<NameView<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsiNodeStatusView {
    #[serde(default)]
    storage_health: Option<Vec<StorageHealth>>,
}

impl CsiNodeView<'_> {
    fn storage_health(&self) -> Option<&[StorageHealth]> {
        self.status.as_ref()?.storage_health.as_deref()
    }
}

/// Only whether each gated field holds a value; items are skipped, not decoded.
#[derive(Deserialize, Default)]
struct GatedView {
    #[serde(default)]
    status: Option<GatedStatusView>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct GatedStatusView {
    #[serde(default)]
    health_status: Option<IgnoredAny>,
    #[serde(default)]
    volume_health: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    storage_health: Option<Vec<IgnoredAny>>,
}

impl GatedView {
    /// "In use": a claim's `healthStatus` is non-null; a list is non-empty. The same
    /// test tells whether a new object carries a value worth dropping: an empty list or `null`
    /// decodes to the same typed object as an absent field, so removing it would change nothing.
    fn in_use(&self, resource: HealthResource) -> bool {
        let Some(status) = &self.status else {
            return false;
        };
        match resource {
            HealthResource::PersistentVolumeClaims => status.health_status.is_some(),
            HealthResource::Pods => status.volume_health.as_ref().is_some_and(|l| !l.is_empty()),
            HealthResource::CsiNodes => status
                .storage_health
                .as_ref()
                .is_some_and(|l| !l.is_empty()),
        }
    }
}
