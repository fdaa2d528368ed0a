//! Decisions for one admission request: node restriction, then field validation, and the
//! drop-on-save decision, over the views of its objects (see [`crate::view`]).

use std::borrow::Cow;
use std::collections::HashSet;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::csinode::check_storage_health;
use crate::field::{ErrorList, Errors, MAX_REPORTED_ERRORS};
use crate::identity::Groups;
use crate::json;
use crate::pod::check_pod_volume_health;
use crate::pvc::check_volume_health_status;
use crate::resource::{HealthResource, Operation};
use crate::restriction::{RestrictionInput, RestrictionPolicy, check_restrictions};
use crate::status::{forbidden_status, invalid_status_omitting};
use crate::view::{
    ClaimView, CsiNodeView, NameView, ObjectVisitor, PodView, RawList, Walk, hash128,
};

/// `userInfo` of an admission request.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo<'a> {
    /// The username.
    #[serde(borrow, default)]
    pub username: Cow<'a, str>,
    /// The groups, as far as the rules read them.
    #[serde(default)]
    pub groups: Groups,
}

impl UserInfo<'_> {
    /// The node name when this user is a node (see [`crate::node_name`]).
    pub fn node_name(&self) -> Option<&str> {
        self.groups.node_name(&self.username)
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
        /// The errors, in Kubernetes order: all of them, or the first
        /// [`MAX_REPORTED_ERRORS`](crate::MAX_REPORTED_ERRORS).
        errors: ErrorList,
        /// How many more errors there were.
        omitted: usize,
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
            Verdict::Invalid {
                name,
                errors,
                omitted,
            } => Some(invalid_status_omitting(resource, name, errors, *omitted)),
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
    let (object, old_object) = (
        Slot::from_raw(input.object),
        Slot::from_raw(input.old_object),
    );
    validate_subject(&Subject::new(input, &object, &old_object), policy)
}

/// An object of a request, as far as it has been read: raw JSON still to decode, or the view
/// of its resource, read in the same pass as the review (see [`crate::AdmissionRequest`]).
#[derive(Default)]
pub(crate) enum Slot<'a> {
    #[default]
    Absent,
    Raw(&'a RawValue),
    Pod(PodView<'a>),
    Claim(ClaimView<'a>),
    CsiNode(CsiNodeView<'a>),
}

impl<'a> Slot<'a> {
    fn from_raw(raw: Option<&'a RawValue>) -> Self {
        raw.map_or(Slot::Absent, Slot::Raw)
    }

    /// Reads an object of `resource` as its view, in the review's pass or from its raw text.
    pub(crate) fn read<'de: 'a, D: serde::Deserializer<'de>>(
        resource: HealthResource,
        deserializer: D,
    ) -> Result<Self, D::Error> {
        fn visit<'de, V: Deserialize<'de>, D: serde::Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<V>, D::Error> {
            deserializer.deserialize_any(ObjectVisitor(PhantomData))
        }
        Ok(match resource {
            HealthResource::Pods => visit(deserializer)?.map_or(Slot::Absent, Slot::Pod),
            HealthResource::PersistentVolumeClaims => {
                visit(deserializer)?.map_or(Slot::Absent, Slot::Claim)
            }
            HealthResource::CsiNodes => visit(deserializer)?.map_or(Slot::Absent, Slot::CsiNode),
        })
    }
}

/// What the decisions read of a request; the objects in whatever state they were read.
pub(crate) struct Subject<'s, 'a> {
    pub(crate) resource: HealthResource,
    pub(crate) subresource: &'s str,
    pub(crate) operation: Operation,
    pub(crate) name: &'s str,
    pub(crate) user: &'s UserInfo<'a>,
    pub(crate) object: &'s Slot<'a>,
    pub(crate) old_object: &'s Slot<'a>,
}

impl<'s, 'a> Subject<'s, 'a> {
    fn new(input: &'s AdmissionInput<'a>, object: &'s Slot<'a>, old_object: &'s Slot<'a>) -> Self {
        Subject {
            resource: input.resource,
            subresource: input.subresource,
            operation: input.operation,
            name: input.name,
            user: input.user,
            object,
            old_object,
        }
    }
}

pub(crate) fn validate_subject(
    input: &Subject<'_, '_>,
    policy: &RestrictionPolicy,
) -> Result<Verdict, DecodeError> {
    if !covered(input.subresource) || input.operation == Operation::Connect {
        return Ok(Verdict::Allowed);
    }
    match input.resource {
        HealthResource::Pods => {
            let (new, old) = view_pair(input)?;
            let (new, old) = (new.as_pod(), old.as_pod());
            let old_node = old.and_then(|o| o.spec.as_ref()?.node_name.as_deref());
            let object_name = new.and_then(|n| n.metadata.name.as_deref());
            if let Some(denied) = restrict(input, object_name, old_node, false, policy) {
                return Ok(denied);
            }
            let Some(new) = new else {
                return Ok(Verdict::Allowed);
            };
            let volumes = NameSet::default();
            let mut errors = Errors::with_limit(MAX_REPORTED_ERRORS);
            check_pod_volume_health(
                new.volume_health(),
                old.and_then(PodView::volume_health),
                |name| volumes.contains(new.volumes(), name),
                &mut errors,
            );
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::PersistentVolumeClaims => {
            let (new, old) = view_pair(input)?;
            let (new, old) = (new.as_claim(), old.as_claim());
            let new_health = new.and_then(ClaimView::health_status);
            let old_health = old.and_then(ClaimView::health_status);
            let changed = input.operation == Operation::Update && new_health != old_health;
            let object_name = new.and_then(|n| n.metadata.name.as_deref());
            if let Some(denied) = restrict(input, object_name, None, changed, policy) {
                return Ok(denied);
            }
            let mut errors = Errors::with_limit(MAX_REPORTED_ERRORS);
            check_volume_health_status(new_health, old_health, &mut errors);
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::CsiNodes => {
            let (new, old) = view_pair(input)?;
            let (new, old) = (new.as_csinode(), old.as_csinode());
            let object_name = new.and_then(|n| n.metadata.name.as_deref());
            if let Some(denied) = restrict(input, object_name, None, false, policy) {
                return Ok(denied);
            }
            let Some(new) = new else {
                return Ok(Verdict::Allowed);
            };
            let drivers = NameSet::default();
            let mut errors = Errors::with_limit(MAX_REPORTED_ERRORS);
            check_storage_health(
                new.storage_health(),
                old.and_then(CsiNodeView::storage_health),
                |name| drivers.contains(new.drivers(), name),
                &mut errors,
            );
            Ok(invalid_or_allowed(input, object_name, errors))
        }
    }
}

/// Runs the node restriction; `Some` is the denial.
fn restrict(
    input: &Subject<'_, '_>,
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
    input: &Subject<'_, '_>,
    object_name: Option<&str>,
    errors: Errors,
) -> Verdict {
    let (errors, omitted) = errors.finish();
    if errors.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Invalid {
            name: object_name.unwrap_or(input.name).to_owned(),
            errors,
            omitted,
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
    let (object, old_object) = (
        Slot::from_raw(input.object),
        Slot::from_raw(input.old_object),
    );
    gated_field_to_drop_subject(&Subject::new(input, &object, &old_object), gate_enabled)
}

pub(crate) fn gated_field_to_drop_subject(
    input: &Subject<'_, '_>,
    gate_enabled: bool,
) -> Result<Option<&'static str>, DecodeError> {
    if gate_enabled
        || !covered(input.subresource)
        || !matches!(input.operation, Operation::Create | Operation::Update)
    {
        return Ok(None);
    }
    if matches!(input.object, Slot::Absent) || !in_use(input.resource, input.object, "object")? {
        return Ok(None);
    }
    let old_in_use = in_use(input.resource, input.old_object, "oldObject")?;
    Ok((!old_in_use).then_some(input.resource.gated_pointer()))
}

/// Whether the object uses the gated field: a claim's `healthStatus` is non-null; a list is
/// non-empty. The same test tells whether a new object carries a value worth dropping: an empty
/// list or `null` decodes to the same typed object as an absent field, so removing it would
/// change nothing. Raw objects are read for that one field only; items are skipped, not decoded.
fn in_use(
    resource: HealthResource,
    slot: &Slot<'_>,
    field: &'static str,
) -> Result<bool, DecodeError> {
    // A `Vec` of `IgnoredAny` allocates nothing, however long.
    let non_empty = |list: Option<&[_]>| list.is_some_and(|l: &[IgnoredAny]| !l.is_empty());
    let kind = resource.kind();
    Ok(match (resource, slot) {
        (_, Slot::Absent) => false,
        (HealthResource::Pods, Slot::Raw(raw)) => {
            let gated: Gated<PodGated> = decode(raw, field, kind)?;
            non_empty(gated.status.and_then(|s| s.volume_health).as_deref())
        }
        (HealthResource::PersistentVolumeClaims, Slot::Raw(raw)) => {
            let gated: Gated<ClaimGated> = decode(raw, field, kind)?;
            gated.status.is_some_and(|s| s.health_status.is_some())
        }
        (HealthResource::CsiNodes, Slot::Raw(raw)) => {
            let gated: Gated<CsiNodeGated> = decode(raw, field, kind)?;
            non_empty(gated.status.and_then(|s| s.storage_health).as_deref())
        }
        (_, Slot::Pod(view)) => view.volume_health().is_some_and(|l| l.len() > 0),
        (_, Slot::Claim(view)) => view.health_status().is_some(),
        (_, Slot::CsiNode(view)) => view.storage_health().is_some_and(|l| l.len() > 0),
    })
}

/// The names of `spec.volumes` or `spec.drivers`, hashed into a set the first time one is looked
/// up: a linear pass, then one lookup per name.
#[derive(Default)]
struct NameSet(std::cell::OnceCell<HashSet<u128>>);

impl NameSet {
    fn contains(&self, list: Option<&RawList<'_, NameView<'_>>>, name: &str) -> bool {
        // A few names, as a pod or a node has, are compared rather than hashed.
        if let Some(names) = list.map_or(Some(&[][..]), RawList::held) {
            if names.len() <= 16 {
                return names.iter().any(|item| item.name.as_deref() == Some(name));
            }
        }
        self.0
            .get_or_init(|| {
                let mut names = HashSet::new();
                if let Some(list) = list {
                    list.walk(|_, item| {
                        if let Some(name) = &item.name {
                            names.insert(hash128(&**name));
                        }
                        Walk::Next
                    });
                }
                names
            })
            .contains(&hash128(name))
    }
}

/// A slot as the decisions read it: the one read with the review, or one decoded now.
enum Held<'s, 'a> {
    Borrowed(&'s Slot<'a>),
    Decoded(Slot<'a>),
}

impl<'a> Held<'_, 'a> {
    fn slot(&self) -> &Slot<'a> {
        match self {
            Held::Borrowed(slot) => slot,
            Held::Decoded(slot) => slot,
        }
    }

    fn as_pod(&self) -> Option<&PodView<'a>> {
        match self.slot() {
            Slot::Pod(view) => Some(view),
            _ => None,
        }
    }

    fn as_claim(&self) -> Option<&ClaimView<'a>> {
        match self.slot() {
            Slot::Claim(view) => Some(view),
            _ => None,
        }
    }

    fn as_csinode(&self) -> Option<&CsiNodeView<'a>> {
        match self.slot() {
            Slot::CsiNode(view) => Some(view),
            _ => None,
        }
    }
}

/// The views of `object` and `oldObject`, those still raw decoded now.
fn view_pair<'s, 'a>(input: &Subject<'s, 'a>) -> Result<(Held<'s, 'a>, Held<'s, 'a>), DecodeError> {
    Ok((
        held(input.resource, input.object, "object")?,
        held(input.resource, input.old_object, "oldObject")?,
    ))
}

fn held<'s, 'a>(
    resource: HealthResource,
    slot: &'s Slot<'a>,
    field: &'static str,
) -> Result<Held<'s, 'a>, DecodeError> {
    let Slot::Raw(raw) = slot else {
        // A view read with the review is of the request's resource: the resource is read
        // before the objects, and only once.
        return Ok(Held::Borrowed(slot));
    };
    json::from_str_seed(raw.get(), SlotSeed(resource))
        .map(Held::Decoded)
        .map_err(|source| DecodeError {
            field,
            kind: resource.kind(),
            source,
        })
}

/// Reads an object as the view of `resource`.
pub(crate) struct SlotSeed(pub(crate) HealthResource);

impl<'de> serde::de::DeserializeSeed<'de> for SlotSeed {
    type Value = Slot<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Slot<'de>, D::Error> {
        Slot::read(self.0, deserializer)
    }
}

/// Decodes the part of a raw object that drop-on-save reads; a non-object is refused as the
/// views refuse it.
fn decode<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    field: &'static str,
    kind: &'static str,
) -> Result<T, DecodeError> {
    json::from_str_seed(raw.get(), GatedSeed(PhantomData))
        .and_then(|gated: Option<T>| {
            // Raw slots are never `null` (that is an absent object).
            gated.ok_or_else(|| serde::de::Error::custom("null object"))
        })
        .map_err(|source| DecodeError {
            field,
            kind,
            source,
        })
}

struct GatedSeed<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> serde::de::DeserializeSeed<'de> for GatedSeed<T> {
    type Value = Option<T>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Option<T>, D::Error> {
        deserializer.deserialize_any(ObjectVisitor(PhantomData))
    }
}

/// Only the gated field of an object, its items skipped, not decoded.
#[derive(Deserialize)]
#[serde(bound = "S: Deserialize<'de>")]
struct Gated<S> {
    #[serde(default)]
    status: Option<S>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodGated {
    #[serde(default)]
    volume_health: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimGated {
    #[serde(default)]
    health_status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsiNodeGated {
    #[serde(default)]
    storage_health: Option<Vec<IgnoredAny>>,
}
