//! Health conditions: volume conditions (PVC `status.healthStatus.healthConditions`, Pod
//! `status.volumeHealth[i].healthConditions`) and storage conditions (CSINode
//! `status.storageHealth[i].healthConditions`).
//!
//! Each function names the upstream code it follows: `validation.go` is
//! `pkg/apis/core/validation/validation.go`, `zz_generated` is
//! `pkg/apis/core/v1/zz_generated.validations.go` (generated from the `+k8s:` tags of
//! `k8s.io/api/core/v1/types.go`), `storage/validation.go` is
//! `pkg/apis/storage/validation/validation.go`, all of Kubernetes v1.37.2.

use std::borrow::Cow;

use super::names::{CONDITION_REASON_DETAIL, is_condition_reason};
use crate::decode::{RawList, StorageConditionView, VolumeConditionView, Walk, same_list};
use crate::field::{ErrorKind, Errors, FieldPath, LengthUnit};
use crate::render;

/// Most conditions one health entry may carry.
pub const MAX_HEALTH_CONDITIONS: usize = 16;
/// Longest volume condition reason, in bytes.
pub const MAX_VOLUME_REASON_BYTES: usize = 256;
/// Longest volume condition message, in bytes.
pub const MAX_VOLUME_MESSAGE_BYTES: usize = 1024;
/// Longest storage condition reason, in bytes.
pub const MAX_STORAGE_REASON_BYTES: usize = 256;
/// Longest storage condition message, in bytes.
pub const MAX_STORAGE_MESSAGE_BYTES: usize = 1024;

/// Supported `VolumeHealthCondition.status` values, sorted (as `validate.Enum` lists them).
pub const VOLUME_HEALTH_STATUSES: &[&str] = &["DataLoss", "Degraded", "Inaccessible"];
/// Supported `StorageHealthCondition.status` values, sorted (`sets.List`).
pub const STORAGE_HEALTH_STATUSES: &[&str] = &["StorageDegraded", "StorageUnreachable"];
/// Supported `StorageHealthCondition.accessMode` values, sorted (`sets.List`).
pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
/// Supported `StorageHealthCondition.volumeMode` values, in the order upstream's literal lists
/// them (not sorted).
pub const VOLUME_MODES: &[&str] = &["Filesystem", "Block"];

/// A `healthConditions` list as read: `None` when absent or `null`. The rules treat it as empty,
/// and an old list that is not there as an empty old list: apimachinery's ratcheting gives the
/// same answers for both.
pub(crate) type Conditions<'l, 'a, C> = Option<&'l RawList<'a, C>>;

fn count<C>(list: Conditions<'_, '_, C>) -> usize {
    list.map_or(0, RawList::len)
}

/// The items of a list of at most [`MAX_HEALTH_CONDITIONS`] (held: see [`RawList`]).
fn short_items<'l, C>(list: Conditions<'l, '_, C>) -> &'l [C] {
    list.and_then(RawList::held).unwrap_or_default()
}

fn same_key(a: &VolumeConditionView<'_>, b: &VolumeConditionView<'_>) -> bool {
    a.status == b.status && a.reason == b.reason
}

/// `validateVolumeHealthConditions` (validation.go, handwritten): the reason format of every
/// condition, whatever the list's length; never ratcheted.
pub(crate) fn check_volume_reasons(
    path: &FieldPath<'_>,
    list: Conditions<'_, '_, VolumeConditionView<'_>>,
    errors: &mut Errors,
) {
    let Some(list) = list else { return };
    list.walk(|i, condition| {
        check_reason_format(&path.index(i), &condition.reason, errors);
        Walk::Next
    });
}

/// `metav1validation.IsValidConditionReason` for a non-empty reason.
fn check_reason_format(condition: &FieldPath<'_>, reason: &str, errors: &mut Errors) {
    if !reason.is_empty() && !is_condition_reason(reason) {
        errors.handwritten(
            &condition.child("reason"),
            ErrorKind::Invalid {
                value: reason.to_owned(),
                detail: CONDITION_REASON_DETAIL,
            },
        );
    }
}

/// The declarative checks of a volume `healthConditions` list (zz_generated:
/// `Validate_VolumeHealthStatus` and `Validate_PodVolumeHealth`, field `HealthConditions`), with
/// `old` the list it is matched to in the old object.
///
/// An unchanged list is not checked. Over [`MAX_HEALTH_CONDITIONS`]: TooMany and nothing else
/// (`MaxItems(...).MarkShortCircuit()`). Then every later item whose (status, reason) repeats an
/// earlier one's is a Duplicate (`ValSliceUnique`), before any item's own errors. Each item is
/// matched to the first old item with its (status, reason) (`EachValSliceVal`): an equal one is
/// not checked, and in a changed one only the fields that changed are, so status and reason, the
/// key, never are.
pub(crate) fn check_volume_conditions<'a>(
    path: &FieldPath<'_>,
    new: Conditions<'_, 'a, VolumeConditionView<'a>>,
    old: Conditions<'_, 'a, VolumeConditionView<'a>>,
    errors: &mut Errors,
) {
    if same_list(new, old) {
        return;
    }
    let len = count(new);
    if len > MAX_HEALTH_CONDITIONS {
        errors.declarative(
            path,
            ErrorKind::TooMany {
                count: len,
                max: MAX_HEALTH_CONDITIONS,
            },
        );
        return;
    }
    let items = short_items(new);
    for (i, condition) in items.iter().enumerate() {
        if items[..i]
            .iter()
            .any(|earlier| same_key(earlier, condition))
        {
            errors.declarative(
                &path.index(i),
                ErrorKind::Duplicate {
                    rendered: render::volume_condition(condition),
                },
            );
        }
    }
    for (i, condition) in items.iter().enumerate() {
        let old = old.and_then(|old| first(old, |o| same_key(o, condition)));
        if old.as_deref() == Some(condition) {
            continue;
        }
        check_volume_condition(&path.index(i), condition, old.as_deref(), errors);
    }
}

/// `Validate_VolumeHealthCondition` (zz_generated) of one item, `old` the item it is matched to.
fn check_volume_condition(
    path: &FieldPath<'_>,
    condition: &VolumeConditionView<'_>,
    old: Option<&VolumeConditionView<'_>>,
    errors: &mut Errors,
) {
    if old.is_none() {
        let status = path.child("status");
        if condition.status.is_empty() {
            errors.declarative(&status, ErrorKind::Required);
        } else {
            check_supported(
                &status,
                &condition.status,
                VOLUME_HEALTH_STATUSES,
                Errors::declarative,
                errors,
            );
        }
        let reason = path.child("reason");
        if condition.reason.is_empty() {
            errors.declarative(&reason, ErrorKind::Required);
        } else {
            check_bytes(
                &reason,
                &condition.reason,
                MAX_VOLUME_REASON_BYTES,
                Errors::declarative,
                errors,
            );
        }
    }
    let message = condition.message.as_deref().unwrap_or_default();
    let unchanged = old.is_some_and(|old| old.message.as_deref().unwrap_or_default() == message);
    if !unchanged {
        check_bytes(
            &path.child("message"),
            message,
            MAX_VOLUME_MESSAGE_BYTES,
            Errors::declarative,
            errors,
        );
    }
}

/// The first item of `list` that `wanted` accepts: borrowed from a held list, decoded from a
/// longer one (an old list may be longer than a new one may be).
fn first<'l, 'a, C: Clone + serde::Deserialize<'a> + crate::decode::Fingerprinted>(
    list: &'l RawList<'a, C>,
    wanted: impl Fn(&C) -> bool,
) -> Option<Cow<'l, C>> {
    if let Some(items) = list.held() {
        return items.iter().find(|item| wanted(item)).map(Cow::Borrowed);
    }
    let mut found = None;
    list.walk(|_, item| {
        if wanted(item) {
            found = Some(Cow::Owned(item.clone()));
            Walk::Stop
        } else {
            Walk::Next
        }
    });
    found
}

/// `validateStorageHealthCondition` (storage/validation.go, handwritten, never ratcheted): every
/// field in order. An empty status is NotSupported, like any other value outside the set.
pub(crate) fn check_storage_condition(
    path: &FieldPath<'_>,
    condition: &StorageConditionView<'_>,
    errors: &mut Errors,
) {
    let handwritten = Errors::handwritten;
    check_supported(
        &path.child("status"),
        &condition.status,
        STORAGE_HEALTH_STATUSES,
        handwritten,
        errors,
    );
    let reason = path.child("reason");
    if condition.reason.is_empty() {
        errors.handwritten(&reason, ErrorKind::Required);
    } else {
        check_reason_format(path, &condition.reason, errors);
        check_bytes(
            &reason,
            &condition.reason,
            MAX_STORAGE_REASON_BYTES,
            handwritten,
            errors,
        );
    }
    if let Some(message) = &condition.message {
        check_bytes(
            &path.child("message"),
            message,
            MAX_STORAGE_MESSAGE_BYTES,
            handwritten,
            errors,
        );
    }
    // Pointers upstream: set means checked, even when set to "".
    if let Some(mode) = &condition.access_mode {
        check_supported(
            &path.child("accessMode"),
            mode,
            ACCESS_MODES,
            handwritten,
            errors,
        );
    }
    if let Some(mode) = &condition.volume_mode {
        check_supported(
            &path.child("volumeMode"),
            mode,
            VOLUME_MODES,
            handwritten,
            errors,
        );
    }
}

/// This project's own rule ([`ConditionIdentity`](crate::rules::ConditionIdentity); in-tree has none, the list is `+listType=atomic`): within
/// one driver's conditions, a later condition with the same (status, reason, accessMode,
/// volumeMode) as an earlier one is a Duplicate, its value the whole condition.
pub(crate) fn check_storage_identities(
    path: &FieldPath<'_>,
    conditions: Conditions<'_, '_, StorageConditionView<'_>>,
    errors: &mut Errors,
) {
    let same_identity = |a: &StorageConditionView<'_>, b: &StorageConditionView<'_>| {
        a.status == b.status
            && a.reason == b.reason
            && a.access_mode == b.access_mode
            && a.volume_mode == b.volume_mode
    };
    let items = short_items(conditions);
    for (i, condition) in items.iter().enumerate() {
        if items[..i]
            .iter()
            .any(|earlier| same_identity(earlier, condition))
        {
            errors.own(
                &path.index(i),
                ErrorKind::Duplicate {
                    rendered: render::storage_condition(condition),
                },
            );
        }
    }
}

type Record = fn(&mut Errors, &FieldPath<'_>, ErrorKind);

/// NotSupported outside `supported`.
fn check_supported(
    path: &FieldPath<'_>,
    value: &str,
    supported: &'static [&'static str],
    record: Record,
    errors: &mut Errors,
) {
    if !supported.contains(&value) {
        record(
            errors,
            path,
            ErrorKind::NotSupported {
                value: value.to_owned(),
                supported,
            },
        );
    }
}

/// TooLong over `max` bytes (Go's `len`).
pub(crate) fn check_bytes(
    path: &FieldPath<'_>,
    value: &str,
    max: usize,
    record: Record,
    errors: &mut Errors,
) {
    if value.len() > max {
        record(
            errors,
            path,
            ErrorKind::TooLong {
                max,
                unit: LengthUnit::Bytes,
            },
        );
    }
}
