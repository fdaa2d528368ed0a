//! CSINode `status.storageHealth`.
//!
//! Upstream's rules are all handwritten (`ValidateCSINodeStatusUpdate` and `validateStorageHealth`
//! in pkg/apis/storage/validation/validation.go of Kubernetes v1.37.2): one pass over the entries
//! in field order, never ratcheted. This project adds one rule of its own
//! ([`ConditionIdentity`]), reported after upstream's errors.

use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};

use super::conditions::{
    MAX_HEALTH_CONDITIONS, check_bytes, check_storage_condition, check_storage_identities,
};
use super::entries::{OldEntries, walk_names};
use super::names::{CSI_DRIVER_NAME_MAX_LEN, dns1123_subdomain_errors, go_to_lower};
use crate::decode::{RawList, StorageHealthView, Walk, same_list, typed_storage_health};
use crate::field::{ErrorKind, ErrorList, Errors, FieldPath, GoQuoted};

/// Whether two conditions of one driver may share (status, reason, accessMode, volumeMode): this
/// project's own rule. In-tree Kubernetes v1.37.2 accepts such duplicates (the list
/// is `+listType=atomic`); the kubelet tells conditions apart by these four fields, so the
/// rule never refuses two conditions a kubelet keeps apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConditionIdentity {
    /// A later condition with the identity of an earlier one in the same entry is a Duplicate.
    /// Ratcheted per entry: an entry whose conditions equal those of the old entry of its name
    /// is not checked, so one driver's stored report never blocks another driver's.
    #[default]
    Unique,
    /// No such rule: exactly in-tree's answers.
    InTree,
}

impl ConditionIdentity {
    /// [`Unique`](Self::Unique) when `unique`, as a `--storage-health-unique-conditions` flag
    /// reads.
    pub fn unique_if(unique: bool) -> Self {
        if unique {
            ConditionIdentity::Unique
        } else {
            ConditionIdentity::InTree
        }
    }
}

/// Validates a CSINode's `status.storageHealth` with every rule, this project's
/// [`ConditionIdentity::Unique`] included; `old` is the stored CSINode on update.
pub fn validate_csinode(new: &CSINode, old: Option<&CSINode>) -> ErrorList {
    validate_storage_health(
        storage_health(Some(new)),
        storage_health(old),
        ConditionIdentity::Unique,
    )
}

/// Validates a `status.storageHealth` list; `old` is the stored one on update.
pub fn validate_storage_health(
    new: Option<&[StorageHealth]>,
    old: Option<&[StorageHealth]>,
    identity: ConditionIdentity,
) -> ErrorList {
    let mut errors = Errors::default();
    check_storage_health(
        new.map(typed_storage_health).as_ref(),
        old.map(typed_storage_health).as_ref(),
        identity,
        &mut errors,
    );
    errors.into_list()
}

pub(crate) fn check_storage_health<'a>(
    new: Option<&RawList<'a, StorageHealthView<'a>>>,
    old: Option<&RawList<'a, StorageHealthView<'a>>>,
    identity: ConditionIdentity,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = FieldPath::root("status");
    let list = status.child("storageHealth");
    // ValidateCSINodeStatusUpdate: a name seen before, then the entry itself.
    walk_names(new, |i, entry, first| {
        let item = list.index(i);
        if !first {
            errors.handwritten(
                &item,
                ErrorKind::Duplicate {
                    rendered: GoQuoted(&entry.name).to_string(),
                },
            );
        }
        check_entry(&item, entry, errors);
    });
    if identity == ConditionIdentity::InTree {
        return;
    }
    let old = OldEntries::new(new, old);
    new.walk(|i, entry| {
        let conditions = entry.health_conditions.as_ref();
        // One condition cannot repeat another; over the limit the entry has its TooMany.
        if !(2..=MAX_HEALTH_CONDITIONS).contains(&conditions.map_or(0, RawList::len)) {
            return Walk::Next;
        }
        let unchanged = old
            .conditions(&entry.name)
            .is_some_and(|old| same_list(conditions, old));
        if !unchanged {
            let item = list.index(i);
            check_storage_identities(&item.child("healthConditions"), conditions, errors);
        }
        Walk::Next
    });
}

/// `validateStorageHealth`: the name as `ValidateCSIDriverName` checks `spec.drivers[*].name`
/// (TooLong before Invalid; the Invalid value is the name as written), then the conditions,
/// of which more than [`MAX_HEALTH_CONDITIONS`] get TooMany and nothing more.
fn check_entry(item: &FieldPath<'_>, entry: &StorageHealthView<'_>, errors: &mut Errors) {
    let name = &*entry.name;
    let name_path = item.child("name");
    if name.is_empty() {
        errors.handwritten(&name_path, ErrorKind::Required);
    } else {
        check_bytes(
            &name_path,
            name,
            CSI_DRIVER_NAME_MAX_LEN,
            Errors::handwritten,
            errors,
        );
        for detail in dns1123_subdomain_errors(&go_to_lower(name)) {
            errors.handwritten(
                &name_path,
                ErrorKind::Invalid {
                    value: name.to_owned(),
                    detail,
                },
            );
        }
    }
    let Some(conditions) = &entry.health_conditions else {
        return;
    };
    let path = item.child("healthConditions");
    if conditions.len() > MAX_HEALTH_CONDITIONS {
        errors.handwritten(
            &path,
            ErrorKind::TooMany {
                count: conditions.len(),
                max: MAX_HEALTH_CONDITIONS,
            },
        );
        return;
    }
    conditions.walk(|j, condition| {
        check_storage_condition(&path.index(j), condition, errors);
        Walk::Next
    });
}

fn storage_health(node: Option<&CSINode>) -> Option<&[StorageHealth]> {
    node?.status.as_ref()?.storage_health.as_deref()
}
