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
            let (new, old) = view_pair::<PodView<'_>>(input)?;
            let old_node = old
                .as_deref()
                .and_then(|o| o.spec.as_ref()?.node_name.as_deref());
            let object_name = new.as_deref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, old_node, false, policy) {
                return Ok(denied);
            }
            let Some(new) = new.as_deref() else {
                return Ok(Verdict::Allowed);
            };
            let volumes = new.spec.as_ref().and_then(|s| s.volumes.as_deref());
            let mut errors = Errors::default();
            check_pod_volume_health(
                new.volume_health(),
                old.as_deref().and_then(PodView::volume_health),
                |name| volumes.is_some_and(|v| v.iter().any(|v| v.name.as_deref() == Some(name))),
                &mut errors,
            );
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::PersistentVolumeClaims => {
            let (new, old) = view_pair::<ClaimView<'_>>(input)?;
            let new_health = new.as_deref().and_then(ClaimView::health_status);
            let old_health = old.as_deref().and_then(ClaimView::health_status);
            let changed = input.operation == Operation::Update && new_health != old_health;
            let object_name = new.as_deref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, None, changed, policy) {
                return Ok(denied);
            }
            let mut errors = Errors::default();
            check_volume_health_status(new_health, old_health, &mut errors);
            Ok(invalid_or_allowed(input, object_name, errors))
        }
        HealthResource::CsiNodes => {
            let (new, old) = view_pair::<CsiNodeView<'_>>(input)?;
            let object_name = new.as_deref().and_then(|n| n.metadata.name());
            if let Some(denied) = restrict(input, object_name, None, false, policy) {
                return Ok(denied);
            }
            let Some(new) = new.as_deref() else {
                return Ok(Verdict::Allowed);
            };
            let drivers = new.spec.as_ref().and_then(|s| s.drivers.as_deref());
            let mut errors = Errors::default();
            check_storage_health(
                new.storage_health(),
                old.as_deref().and_then(CsiNodeView::storage_health),
                |name| drivers.is_some_and(|d| d.iter().any(|d| d.name.as_deref() == Some(name))),
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
        (_, Slot::Pod(view)) => view.volume_health().is_some_and(|l| !l.is_empty()),
        (_, Slot::Claim(view)) => view.health_status().is_some(),
        (_, Slot::CsiNode(view)) => view.storage_health().is_some_and(|l| !l.is_empty()),
    })
}

/// The views of `object` and `oldObject`.
type ViewPair<'s, V> = (Option<Held<'s, V>>, Option<Held<'s, V>>);

/// The views of `object` and `oldObject`, decoded now when still raw.
fn view_pair<'s, 'a: 's, V: View<'a>>(
    input: &Subject<'s, 'a>,
) -> Result<ViewPair<'s, V>, DecodeError> {
    let kind = input.resource.kind();
    Ok((
        view(input.object, "object", kind)?,
        view(input.old_object, "oldObject", kind)?,
    ))
}

fn view<'s, 'a: 's, V: View<'a>>(
    slot: &'s Slot<'a>,
    field: &'static str,
    kind: &'static str,
) -> Result<Option<Held<'s, V>>, DecodeError> {
    match slot {
        Slot::Absent => Ok(None),
        Slot::Raw(raw) => decode_view(raw, field, kind).map(|view| Some(Held::Owned(view))),
        // A view read with the review is of the request's resource: the resource is read
        // before the objects, and only once.
        read => Ok(V::in_slot(read).map(Held::Borrowed)),
    }
}

/// A view decoded here, or borrowed from a [`Slot`].
enum Held<'s, V> {
    Borrowed(&'s V),
    Owned(V),
}

impl<V> std::ops::Deref for Held<'_, V> {
    type Target = V;

    fn deref(&self) -> &V {
        match self {
            Held::Borrowed(view) => view,
            Held::Owned(view) => view,
        }
    }
}

/// Decodes a view, through [`View::from_members`] when it can, else with serde over the whole
/// object (which also gives any error its usual position and message).
fn decode_view<'a, T: View<'a>>(
    raw: &'a RawValue,
    field: &'static str,
    kind: &'static str,
) -> Result<T, DecodeError> {
    match T::from_members(raw.get()) {
        Some(view) => Ok(view),
        None => decode(raw, field, kind),
    }
}

fn decode<'a, T: Deserialize<'a>>(
    raw: &'a RawValue,
    field: &'static str,
    kind: &'static str,
) -> Result<T, DecodeError> {
    let error = |source| DecodeError {
        field,
        kind,
        source,
    };
    // serde would also take an array for a struct, field by field; an object is a JSON object.
    if let Some(unexpected) = not_an_object(raw.get()) {
        return Err(error(serde::de::Error::invalid_type(
            unexpected,
            &EXPECTED_OBJECT,
        )));
    }
    serde_json::from_str(raw.get()).map_err(error)
}

/// What a request's objects must be.
pub(crate) const EXPECTED_OBJECT: &str = "a JSON object";

/// What the JSON text is, unless it is an object.
fn not_an_object(json: &str) -> Option<serde::de::Unexpected<'static>> {
    use serde::de::Unexpected;
    Some(match json.trim_start().as_bytes().first()? {
        b'{' => return None,
        b'[' => Unexpected::Seq,
        b'"' => Unexpected::Other("string"),
        b't' | b'f' => Unexpected::Other("boolean"),
        b'n' => Unexpected::Unit,
        _ => Unexpected::Other("number"),
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
pub(crate) struct PodView<'a> {
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
pub(crate) struct ClaimView<'a> {
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
pub(crate) struct CsiNodeView<'a> {
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

// The fast path of the views. An object in a review is a `RawValue`, so already checked to be
// valid JSON; most of its bytes (containers, managed fields, container statuses) belong to
// members no rule reads. Rather than have serde walk all of them a second time, the members a
// view reads are located by a structural scan and only their text is decoded, with the same
// types. Whenever the scan could disagree with serde (not an object, a key with an escape, a
// member twice, which serde rejects, a value of the wrong shape), the view is decoded the usual
// way, so results and errors stay exactly those of serde.

/// A view that can be assembled from the text of the members it reads.
trait View<'a>: Deserialize<'a> {
    /// The view, or `None` to fall back to serde over the whole object.
    fn from_members(json: &'a str) -> Option<Self>;

    /// The view held by a slot read with the review.
    fn in_slot<'s>(slot: &'s Slot<'a>) -> Option<&'s Self>;
}

impl<'a> View<'a> for PodView<'a> {
    fn in_slot<'s>(slot: &'s Slot<'a>) -> Option<&'s Self> {
        match slot {
            Slot::Pod(view) => Some(view),
            _ => None,
        }
    }

    fn from_members(json: &'a str) -> Option<Self> {
        let [metadata, spec, status] = members(
            json,
            0,
            [
                ("metadata", &["name"]),
                ("spec", &["nodeName", "volumes"]),
                ("status", &["volumeHealth"]),
            ],
        )?
        .0;
        let spec = match spec {
            Member::Absent | Member::Null => None,
            Member::Object([node_name, volumes]) => Some(PodSpecView {
                node_name: member(node_name)?,
                volumes: member(volumes)?,
            }),
        };
        let status = match status {
            Member::Absent | Member::Null => None,
            Member::Object([volume_health, _]) => Some(PodStatusView {
                volume_health: member(volume_health)?,
            }),
        };
        Some(PodView {
            metadata: meta_view(metadata)?,
            spec,
            status,
        })
    }
}

impl<'a> View<'a> for CsiNodeView<'a> {
    fn in_slot<'s>(slot: &'s Slot<'a>) -> Option<&'s Self> {
        match slot {
            Slot::CsiNode(view) => Some(view),
            _ => None,
        }
    }

    fn from_members(json: &'a str) -> Option<Self> {
        let [metadata, spec, status] = members(
            json,
            0,
            [
                ("metadata", &["name"]),
                ("spec", &["drivers"]),
                ("status", &["storageHealth"]),
            ],
        )?
        .0;
        let spec = match spec {
            Member::Absent | Member::Null => None,
            Member::Object([drivers, _]) => Some(CsiNodeSpecView {
                drivers: member(drivers)?,
            }),
        };
        let status = match status {
            Member::Absent | Member::Null => None,
            Member::Object([storage_health, _]) => Some(CsiNodeStatusView {
                storage_health: member(storage_health)?,
            }),
        };
        Some(CsiNodeView {
            metadata: meta_view(metadata)?,
            spec,
            status,
        })
    }
}

impl<'a> View<'a> for ClaimView<'a> {
    fn in_slot<'s>(slot: &'s Slot<'a>) -> Option<&'s Self> {
        match slot {
            Slot::Claim(view) => Some(view),
            _ => None,
        }
    }

    fn from_members(_json: &'a str) -> Option<Self> {
        // A claim is small; serde reads it whole.
        None
    }
}

/// `metadata`: absent is the default; `null` is left to serde, which refuses it.
fn meta_view(metadata: Member<'_>) -> Option<MetaView<'_>> {
    match metadata {
        Member::Absent => Some(MetaView::default()),
        Member::Null => None,
        Member::Object([name, _]) => Some(MetaView {
            name: member(name)?,
        }),
    }
}

/// An `Option<T>` member with `#[serde(default)]`: `None` when absent, else decoded from its
/// text as serde would inside the object. The outer `None` asks for the fallback.
fn member<'a, T: Deserialize<'a>>(text: Option<&'a str>) -> Option<Option<T>> {
    match text {
        None => Some(None),
        Some(text) => serde_json::from_str(text).ok(),
    }
}

/// A member of an object whose own members (up to two) are looked for.
#[derive(Clone, Copy)]
enum Member<'a> {
    Absent,
    Null,
    /// The text of the inner members looked for, when present.
    Object([Option<&'a str>; 2]),
}

/// In the object at `at` of `json` (valid JSON), the members named in `wanted`, each an object
/// whose members named in its list are located in the same pass; and where the object ends.
/// `None` when the text is not an object, a key holds an escape, a wanted member appears twice,
/// or a wanted member is neither an object nor `null`.
fn members<'a, const N: usize>(
    json: &'a str,
    at: usize,
    wanted: [(&str, &[&str]); N],
) -> Option<([Member<'a>; N], usize)> {
    let mut found = [Member::Absent; N];
    let mut seen = [false; N];
    let end = scan_object(json, at, |key, value| {
        let Some(slot) = wanted.iter().position(|(name, _)| name.as_bytes() == key) else {
            return value_end(json.as_bytes(), value);
        };
        if seen[slot] {
            return None;
        }
        seen[slot] = true;
        if json.as_bytes().get(value..value + 4) == Some(b"null") {
            found[slot] = Member::Null;
            return Some(value + 4);
        }
        let inner_names = wanted[slot].1;
        let mut inner = [None; 2];
        let mut inner_seen = [false; 2];
        let end = scan_object(json, value, |key, value| {
            let end = value_end(json.as_bytes(), value)?;
            if let Some(i) = inner_names.iter().position(|name| name.as_bytes() == key) {
                if inner_seen[i] {
                    return None;
                }
                inner_seen[i] = true;
                inner[i] = Some(json.get(value..end)?);
            }
            Some(end)
        })?;
        found[slot] = Member::Object(inner);
        Some(end)
    })?;
    Some((found, end))
}

/// Walks the members of the object at `at`: `visit` gets each key (raw, without escapes) and
/// where its value starts, and returns where the value ends. Returns the end of the object;
/// `None` when the text there is not an object, a key holds an escape, or `visit` gives up.
fn scan_object(
    json: &str,
    at: usize,
    mut visit: impl FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    let bytes = json.as_bytes();
    let mut at = skip_whitespace(bytes, at);
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_whitespace(bytes, at);
        match bytes.get(at)? {
            b'}' => return Some(at + 1),
            b',' => {
                at += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(bytes, at + 1)?;
        let key = bytes.get(at + 1..key_end)?;
        if key.contains(&b'\\') {
            return None;
        }
        at = skip_whitespace(bytes, key_end + 1);
        if bytes.get(at) != Some(&b':') {
            return None;
        }
        at = skip_whitespace(bytes, at + 1);
        at = visit(key, at)?;
    }
}

fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(at) {
        at += 1;
    }
    at
}

/// The end (exclusive) of the valid JSON value starting at `at`.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => Some(string_end(bytes, at + 1)? + 1),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = at;
            loop {
                match bytes.get(at)? {
                    b'"' => at = string_end(bytes, at + 1)?,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            // A number or a literal: up to the next delimiter.
            let len = bytes
                .get(at..)?
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                .unwrap_or(bytes.len() - at);
            Some(at + len)
        }
    }
}

/// The index of the quote closing the string whose contents start at `at`.
fn string_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        at = quote_or_backslash(bytes, at)?;
        if bytes[at] == b'"' {
            return Some(at);
        }
        // An escape: the backslash and the character after it (the rest of `\uXXXX` is hex).
        at += 2;
    }
}

/// The first `"` or `\` at or after `at`.
fn quote_or_backslash(bytes: &[u8], at: usize) -> Option<usize> {
    memchr::memchr2(b'"', b'\\', bytes.get(at..)?).map(|i| at + i)
}
