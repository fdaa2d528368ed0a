//! Health condition lists: the rules shared by PVC, Pod and CSINode health.

use k8s_openapi::api::core::v1::VolumeHealthCondition;
use k8s_openapi::api::storage::v1::StorageHealthCondition;

use crate::field::{ErrorKind, ErrorList, FieldError, LengthUnit, Path};
use crate::names::{CONDITION_REASON_DETAIL, is_condition_reason};

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

/// Errors of one object, kept in two runs so that handwritten checks come first.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    pub(crate) handwritten: ErrorList,
    pub(crate) declarative: ErrorList,
}

impl Errors {
    pub(crate) fn handwritten(&mut self, path: &Path<'_>, kind: ErrorKind) {
        self.handwritten.push(FieldError::new(path, kind));
    }

    pub(crate) fn declarative(&mut self, path: &Path<'_>, kind: ErrorKind) {
        self.declarative.push(FieldError::new(path, kind));
    }

    pub(crate) fn into_list(mut self) -> ErrorList {
        self.handwritten.append(&mut self.declarative);
        self.handwritten
    }
}

/// A condition type with the (status, reason) key and the field rules of its kind: volume
/// conditions count bytes, storage conditions count characters and carry two more enums.
pub(crate) trait HealthCondition: PartialEq {
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

impl HealthCondition for VolumeHealthCondition {
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

impl HealthCondition for StorageHealthCondition {
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

/// Validates one `healthConditions` list at `path` against the same list in the old object.
///
/// Over [`MAX_HEALTH_CONDITIONS`] the list gets TooMany and nothing else. Otherwise reason format
/// (handwritten) always runs; declarative checks are skipped for a list equal to the old one and
/// for items equal to the old item with the same (status, reason).
pub(crate) fn check_conditions<C: HealthCondition>(
    path: &Path<'_>,
    new: &[C],
    old: Option<&[C]>,
    errors: &mut Errors,
) {
    let unchanged = old == Some(new);
    if new.len() > MAX_HEALTH_CONDITIONS {
        if !unchanged {
            errors.declarative(
                path,
                ErrorKind::TooMany {
                    count: new.len(),
                    max: MAX_HEALTH_CONDITIONS,
                },
            );
        }
        return;
    }
    for (i, condition) in new.iter().enumerate() {
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
    let old = old.unwrap_or_default();
    for (i, condition) in new.iter().enumerate() {
        let item = path.index(i);
        let same_key = |other: &&C| {
            other.status() == condition.status() && other.reason() == condition.reason()
        };
        // Not ratcheted per item: an unchanged copy of an old item must not let a new
        // duplicate in.
        if new[..i].iter().any(|c| same_key(&c)) {
            errors.declarative(
                &item,
                ErrorKind::Duplicate {
                    rendered: render_condition_key(condition.status(), condition.reason()),
                },
            );
        }
        if old.iter().find(same_key) == Some(condition) {
            continue;
        }
        condition.check_fields(&item, errors);
    }
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
