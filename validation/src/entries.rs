//! Lists of health entries keyed by name: Pod `status.volumeHealth` and CSINode
//! `status.storageHealth`.

use k8s_openapi::api::core::v1::{PodVolumeHealth, VolumeHealthCondition};
use k8s_openapi::api::storage::v1::{StorageHealth, StorageHealthCondition};

use crate::conditions::{Errors, HealthCondition, check_conditions, check_length};
use crate::field::{ErrorKind, GoQuoted, LengthUnit, Path};
use crate::names::CSI_DRIVER_NAME_MAX_LEN;

/// A health entry: a name that keys the list, and its conditions.
pub(crate) trait HealthEntry: PartialEq {
    type Condition: HealthCondition;
    fn name(&self) -> &str;
    fn conditions(&self) -> &[Self::Condition];
    /// Declarative checks of a non-empty name beyond Required.
    fn check_name_declarative(&self, _path: &Path<'_>, _errors: &mut Errors) {}
}

impl HealthEntry for PodVolumeHealth {
    type Condition = VolumeHealthCondition;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> &[VolumeHealthCondition] {
        self.health_conditions.as_deref().unwrap_or_default()
    }
}

impl HealthEntry for StorageHealth {
    type Condition = StorageHealthCondition;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> &[StorageHealthCondition] {
        self.health_conditions.as_deref().unwrap_or_default()
    }

    fn check_name_declarative(&self, path: &Path<'_>, errors: &mut Errors) {
        check_length(
            path,
            &self.name,
            CSI_DRIVER_NAME_MAX_LEN,
            LengthUnit::Bytes,
            errors,
        );
    }
}

/// Validates a list of named entries at `path`.
///
/// `check_name` holds the handwritten checks of a non-empty name (it must name a volume or a
/// registered driver); they run for every entry. Declarative checks are skipped for a list equal
/// to the old one and for an entry equal to the old entry of the same name.
pub(crate) fn check_entries<E: HealthEntry>(
    path: &Path<'_>,
    new: &[E],
    old: Option<&[E]>,
    check_name: impl Fn(&Path<'_>, &str, &mut Errors),
    errors: &mut Errors,
) {
    let unchanged = old == Some(new);
    let old = old.unwrap_or_default();
    for (i, entry) in new.iter().enumerate() {
        let item = path.index(i);
        let name_path = item.child("name");
        let name = entry.name();
        if !name.is_empty() {
            check_name(&name_path, name, errors);
        }
        let old_entry = old.iter().find(|o| o.name() == name);
        let entry_unchanged = unchanged || old_entry == Some(entry);
        if !unchanged && new[..i].iter().any(|e| e.name() == name) {
            errors.declarative(
                &item,
                ErrorKind::Duplicate {
                    rendered: GoQuoted(name).to_string(),
                },
            );
        }
        if !entry_unchanged {
            if name.is_empty() {
                errors.declarative(&name_path, ErrorKind::Required);
            } else {
                entry.check_name_declarative(&name_path, errors);
            }
        }
        let conditions = entry.conditions();
        // An unchanged entry ratchets all of its conditions; otherwise compare with the old
        // entry of the same name.
        let old_conditions = if entry_unchanged {
            Some(conditions)
        } else {
            old_entry.map(HealthEntry::conditions)
        };
        check_conditions(
            &item.child("healthConditions"),
            conditions,
            old_conditions,
            errors,
        );
    }
}
