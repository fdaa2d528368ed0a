//! Health condition lists: the rules shared by PVC, Pod and CSINode health.

use serde::Deserialize;

use crate::field::{ErrorKind, Errors, LengthUnit, Path};
use crate::names::{CONDITION_REASON_DETAIL, is_condition_reason};
use crate::view::{Fingerprinted, RawList, StorageConditionView, VolumeConditionView, Walk};

/// Most conditions one health entry may carry.
pub const MAX_HEALTH_CONDITIONS: usize = 16;
/// Longest volume condition reason, in bytes.
pub const MAX_VOLUME_REASON_BYTES: usize = 256;
/// Longest volume condition message, in bytes.
pub const MAX_VOLUME_MESSAGE_BYTES: usize = 1024;
/// Longest storage condition reason, in characters.
pub const MAX_STORAGE_REASON_CHARS: usize = 256;
/// Longest storage condition message, in characters.
pub const MAX_STORAGE_MESSAGE_CHARS: usize = 1024;

/// Supported `VolumeHealthCondition.status` values, sorted.
pub const VOLUME_HEALTH_STATUSES: &[&str] = &["DataLoss", "Degraded", "Inaccessible"];
/// Supported `StorageHealthCondition.status` values, sorted.
pub const STORAGE_HEALTH_STATUSES: &[&str] = &["StorageDegraded", "StorageUnreachable"];
/// Supported `StorageHealthCondition.accessMode` values, sorted.
pub const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
/// Supported `StorageHealthCondition.volumeMode` values, sorted.
pub const VOLUME_MODES: &[&str] = &["Block", "Filesystem"];

/// A condition type with the (status, reason) key and the field rules of its kind: volume
/// conditions count bytes, storage conditions count characters and carry two more enums.
pub(crate) trait HealthCondition<'a>:
    PartialEq + Clone + Deserialize<'a> + Fingerprinted
{
    /// Supported `status` values, sorted.
    const STATUSES: &'static [&'static str];
    /// What the length limits count.
    const UNIT: LengthUnit;
    /// Longest `reason`.
    const MAX_REASON: usize;
    /// Longest `message`.
    const MAX_MESSAGE: usize;

    fn status(&self) -> &str;
    fn reason(&self) -> &str;
    fn message(&self) -> Option<&str>;

    /// Declarative checks of the fields after `message`, in field order.
    fn check_more_fields(&self, _path: &Path<'_>, _errors: &mut Errors) {}

    /// Declarative checks of every field, in field order.
    fn check_fields(&self, path: &Path<'_>, errors: &mut Errors) {
        check_enum(&path.child("status"), self.status(), Self::STATUSES, errors);
        let reason = self.reason();
        let reason_path = path.child("reason");
        if reason.is_empty() {
            errors.declarative(&reason_path, ErrorKind::Required);
        } else {
            check_length(&reason_path, reason, Self::MAX_REASON, Self::UNIT, errors);
        }
        if let Some(message) = self.message() {
            check_length(
                &path.child("message"),
                message,
                Self::MAX_MESSAGE,
                Self::UNIT,
                errors,
            );
        }
        self.check_more_fields(path, errors);
    }
}

impl<'a> HealthCondition<'a> for VolumeConditionView<'a> {
    const STATUSES: &'static [&'static str] = VOLUME_HEALTH_STATUSES;
    const UNIT: LengthUnit = LengthUnit::Bytes;
    const MAX_REASON: usize = MAX_VOLUME_REASON_BYTES;
    const MAX_MESSAGE: usize = MAX_VOLUME_MESSAGE_BYTES;

    fn status(&self) -> &str {
        &self.status
    }

    fn reason(&self) -> &str {
        &self.reason
    }

    fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }
}

impl<'a> HealthCondition<'a> for StorageConditionView<'a> {
    const STATUSES: &'static [&'static str] = STORAGE_HEALTH_STATUSES;
    const UNIT: LengthUnit = LengthUnit::Characters;
    const MAX_REASON: usize = MAX_STORAGE_REASON_CHARS;
    const MAX_MESSAGE: usize = MAX_STORAGE_MESSAGE_CHARS;

    fn status(&self) -> &str {
        &self.status
    }

    fn reason(&self) -> &str {
        &self.reason
    }

    fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    fn check_more_fields(&self, path: &Path<'_>, errors: &mut Errors) {
        // Optional enums: set means checked, even when set to "".
        if let Some(mode) = &self.access_mode {
            check_supported(&path.child("accessMode"), mode, ACCESS_MODES, errors);
        }
        if let Some(mode) = &self.volume_mode {
            check_supported(&path.child("volumeMode"), mode, VOLUME_MODES, errors);
        }
    }
}

/// A `healthConditions` list as read: `None` when absent or `null`, which the rules treat as
/// empty.
pub(crate) type Conditions<'l, 'a, C> = Option<&'l RawList<'a, C>>;

fn count<C>(list: Conditions<'_, '_, C>) -> usize {
    list.map_or(0, RawList::len)
}

/// Equal item for item; absent and empty are the same list.
fn same_list<C: PartialEq + Fingerprinted>(
    a: Conditions<'_, '_, C>,
    b: Conditions<'_, '_, C>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => count(a) == 0 && count(b) == 0,
    }
}

/// Validates one `healthConditions` list at `path` against the same list in the old object
/// (`old` is `None` when there is nothing to ratchet against).
///
/// Over [`MAX_HEALTH_CONDITIONS`] the list gets TooMany and nothing else, and its items are never
/// materialized. Otherwise reason format (handwritten) always runs; declarative checks are
/// skipped for a list equal to the old one and for items equal to the old item with the same
/// (status, reason).
pub(crate) fn check_conditions<'a, C: HealthCondition<'a>>(
    path: &Path<'_>,
    new: Conditions<'_, 'a, C>,
    old: Option<Conditions<'_, 'a, C>>,
    errors: &mut Errors,
) {
    let unchanged = old.is_some_and(|old| same_list(old, new));
    let len = count(new);
    if len > MAX_HEALTH_CONDITIONS {
        if !unchanged {
            errors.declarative(
                path,
                ErrorKind::TooMany {
                    count: len,
                    max: MAX_HEALTH_CONDITIONS,
                },
            );
        }
        return;
    }
    let items = new.and_then(RawList::held).unwrap_or_default();
    for (i, condition) in items.iter().enumerate() {
        let reason = condition.reason();
        if !reason.is_empty() && !is_condition_reason(reason) {
            let item = path.index(i);
            errors.handwritten(
                &item.child("reason"),
                ErrorKind::Invalid {
                    value: reason.to_owned(),
                    detail: CONDITION_REASON_DETAIL,
                },
            );
        }
    }
    if unchanged {
        return;
    }
    // The old list's items, when it is short enough to hold; a longer one is walked per item.
    let old = old.flatten();
    let old_items = old.and_then(RawList::held);
    for (i, condition) in items.iter().enumerate() {
        let item = path.index(i);
        let same_key = |other: &C| {
            other.status() == condition.status() && other.reason() == condition.reason()
        };
        // Not ratcheted per item: an unchanged copy of an old item must not let a new
        // duplicate in. At most 16 items, so the scan stays small.
        if items[..i].iter().any(same_key) {
            errors.declarative(
                &item,
                ErrorKind::Duplicate {
                    rendered: render_condition_key(condition.status(), condition.reason()),
                },
            );
        }
        let ratchets = match (old_items, old) {
            (Some(old_items), _) => old_items.iter().find(|c| same_key(c)) == Some(condition),
            (None, Some(old)) => first_is(old, same_key, condition),
            (None, None) => false,
        };
        if ratchets {
            continue;
        }
        condition.check_fields(&item, errors);
    }
}

/// Whether the first item of `list` that `wanted` accepts equals `condition`. For an old list too
/// long to hold: walked once per new item, of which there are at most 16.
fn first_is<'a, C: HealthCondition<'a>>(
    list: &RawList<'a, C>,
    wanted: impl Fn(&C) -> bool,
    condition: &C,
) -> bool {
    let mut equal = false;
    list.walk(|_, item| {
        if wanted(item) {
            equal = item == condition;
            Walk::Stop
        } else {
            Walk::Next
        }
    });
    equal
}

fn render_condition_key(status: &str, reason: &str) -> String {
    format!(
        "{{\"status\":{},\"reason\":{}}}",
        serde_json::Value::from(status),
        serde_json::Value::from(reason)
    )
}

/// Required when empty, else NotSupported outside `supported`.
fn check_enum(
    path: &Path<'_>,
    value: &str,
    supported: &'static [&'static str],
    errors: &mut Errors,
) {
    if value.is_empty() {
        errors.declarative(path, ErrorKind::Required);
    } else {
        check_supported(path, value, supported, errors);
    }
}

fn check_supported(
    path: &Path<'_>,
    value: &str,
    supported: &'static [&'static str],
    errors: &mut Errors,
) {
    if !supported.contains(&value) {
        errors.declarative(
            path,
            ErrorKind::NotSupported {
                value: value.to_owned(),
                supported,
            },
        );
    }
}

pub(crate) fn check_length(
    path: &Path<'_>,
    value: &str,
    max: usize,
    unit: LengthUnit,
    errors: &mut Errors,
) {
    // Bytes bound characters from above, so most values skip the character count.
    if value.len() > max && length(value, unit) > max {
        errors.declarative(path, ErrorKind::TooLong { max, unit });
    }
}

fn length(value: &str, unit: LengthUnit) -> usize {
    match unit {
        LengthUnit::Bytes => value.len(),
        LengthUnit::Characters => value.chars().count(),
    }
}
