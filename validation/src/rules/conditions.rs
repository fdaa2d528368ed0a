//! Health conditions: volume conditions (PVC `status.healthStatus.healthConditions`, Pod
//! `status.volumeHealth[i].healthConditions`) and storage conditions (CSINode
//! `status.storageHealth[i].healthConditions`).
//!
//! Each block names the upstream code it follows, and each check the tag or function:
//! `validation.go` is `pkg/apis/core/validation/validation.go`, `zz_generated` is
//! `pkg/apis/core/v1/zz_generated.validations.go` (generated from the `+k8s:` tags of
//! `k8s.io/api/core/v1/types.go`), `storage/validation.go` is
//! `pkg/apis/storage/validation/validation.go`, all of Kubernetes v1.37.2.

use super::names::{CONDITION_REASON_DETAIL, is_condition_reason};
use super::validate::{Checks, Keyed, List, changed, each, each_slice_val, unchanged_list};
use crate::decode::{StorageConditionView, VolumeConditionView};
use crate::field::{ErrorKind, Errors, FieldPath};
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

/// `+k8s:listMapKey=status`, `+k8s:listMapKey=reason` on `healthConditions`.
impl Keyed for VolumeConditionView<'_> {
    type Key<'k>
        = (&'k str, &'k str)
    where
        Self: 'k;

    fn key(&self) -> (&str, &str) {
        (&self.status, &self.reason)
    }
}

/// This project's condition identity ([`ConditionIdentity`](crate::rules::ConditionIdentity)):
/// (status, reason, accessMode, volumeMode), as the kubelet tells conditions apart.
impl Keyed for StorageConditionView<'_> {
    type Key<'k>
        = (&'k str, &'k str, Option<&'k str>, Option<&'k str>)
    where
        Self: 'k;

    fn key(&self) -> Self::Key<'_> {
        let (access, volume) = (self.access_mode.as_deref(), self.volume_mode.as_deref());
        (&self.status, &self.reason, access, volume)
    }
}

/// `validateVolumeHealthConditions` (validation.go, handwritten, never ratcheted): the reason
/// format of every condition, whatever the list's length.
pub(crate) fn check_volume_reasons(
    path: &FieldPath<'_>,
    list: List<'_, '_, VolumeConditionView<'_>>,
    errors: &mut Errors,
) {
    let mut hv = Checks::handwritten(errors);
    each(path, list, |item, condition| {
        reason_format(&mut hv, item, &condition.reason); // IsValidConditionReason
    });
}

/// `metav1validation.IsValidConditionReason` of a non-empty reason: Invalid with its detail.
fn reason_format(checks: &mut Checks<'_>, condition: &FieldPath<'_>, reason: &str) {
    if !reason.is_empty() && !is_condition_reason(reason) {
        let value = reason.to_owned();
        let detail = CONDITION_REASON_DETAIL;
        checks.report(
            &condition.child("reason"),
            ErrorKind::Invalid { value, detail },
        );
    }
}

/// A volume `healthConditions` list's tags (zz_generated: `Validate_VolumeHealthStatus` and
/// `Validate_PodVolumeHealth`, field `HealthConditions`), `old` the list it is matched to in
/// the old object. The list's errors come before its items' errors.
pub(crate) fn check_volume_conditions<'a>(
    path: &FieldPath<'_>,
    new: List<'_, 'a, VolumeConditionView<'a>>,
    old: List<'_, 'a, VolumeConditionView<'a>>,
    errors: &mut Errors,
) {
    let mut dv = Checks::declarative(errors);
    if unchanged_list(new, old) {
        return; // ratcheting: an unchanged list is not checked
    }
    if !dv.max_items(path, new, MAX_HEALTH_CONDITIONS) {
        return; // +k8s:maxItems=16, MarkShortCircuit
    }
    dv.unique(path, new, render::volume_condition); // +k8s:listType=map
    each_slice_val(path, new, old, |item, condition, old| {
        volume_condition(&mut dv, item, condition, old); // +k8s:listMapKey=status, reason
    });
}

/// `Validate_VolumeHealthCondition` (zz_generated) of one item, each field ratcheted against
/// `old`, the old item with its key: status and reason, the key, are then unchanged.
fn volume_condition(
    dv: &mut Checks<'_>,
    path: &FieldPath<'_>,
    condition: &VolumeConditionView<'_>,
    old: Option<&VolumeConditionView<'_>>,
) {
    let (status, reason) = (&*condition.status, &*condition.reason);
    let message = condition.message.as_deref().unwrap_or_default();
    let old_message = old.map(|old| old.message.as_deref().unwrap_or_default());
    // status: +k8s:required, +k8s:enum
    if changed(status, old.map(|old| &*old.status)) {
        let path = path.child("status");
        if dv.required_value(&path, status) {
            dv.enum_value(&path, status, VOLUME_HEALTH_STATUSES);
        }
    }
    // reason: +k8s:required, +k8s:maxBytes=256
    if changed(reason, old.map(|old| &*old.reason)) {
        let path = path.child("reason");
        if dv.required_value(&path, reason) {
            dv.max_bytes(&path, reason, MAX_VOLUME_REASON_BYTES);
        }
    }
    // message: +k8s:optional, +k8s:maxBytes=1024
    if changed(message, old_message) {
        dv.max_bytes(&path.child("message"), message, MAX_VOLUME_MESSAGE_BYTES);
    }
}

/// `validateStorageHealthCondition` (storage/validation.go, handwritten, never ratcheted):
/// every field in order. Upstream's optional fields are pointers: set means checked, even
/// when set to "".
pub(crate) fn check_storage_condition(
    hv: &mut Checks<'_>,
    path: &FieldPath<'_>,
    condition: &StorageConditionView<'_>,
) {
    let (status, reason) = (&*condition.status, &*condition.reason);
    // status: sets.List of the supported ones, "" among the unsupported
    hv.enum_value(&path.child("status"), status, STORAGE_HEALTH_STATUSES);
    // reason: field.Required, IsValidConditionReason, field.TooLong
    let reason_path = path.child("reason");
    if hv.required_value(&reason_path, reason) {
        reason_format(hv, path, reason);
        hv.max_bytes(&reason_path, reason, MAX_STORAGE_REASON_BYTES);
    }
    if let Some(message) = &condition.message {
        hv.max_bytes(&path.child("message"), message, MAX_STORAGE_MESSAGE_BYTES);
    }
    if let Some(mode) = &condition.access_mode {
        hv.enum_value(&path.child("accessMode"), mode, ACCESS_MODES);
    }
    if let Some(mode) = &condition.volume_mode {
        hv.enum_value(&path.child("volumeMode"), mode, VOLUME_MODES);
    }
}

/// This project's own rule ([`ConditionIdentity`](crate::rules::ConditionIdentity); in-tree has
/// none, the list is `+listType=atomic`): within one driver's conditions, a later condition
/// with the identity of an earlier one is a Duplicate, its value the whole condition.
pub(crate) fn check_storage_identities(
    path: &FieldPath<'_>,
    conditions: List<'_, '_, StorageConditionView<'_>>,
    errors: &mut Errors,
) {
    Checks::own(errors).unique(path, conditions, render::storage_condition);
}
