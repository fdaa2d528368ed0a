//! CSINode `status.storageHealth`.

use std::collections::HashSet;

use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};

use crate::entries::check_entries;
use crate::field::{ErrorKind, ErrorList, Errors, Path};
use crate::names::{dns1123_subdomain_errors, go_to_lower, is_csi_driver_name};
use crate::view::{RawList, StorageHealthView, typed_list_text};

/// Validates a CSINode's `status.storageHealth`, ratcheting against `old` on update. Driver names
/// are looked up in the new object's `spec.drivers`.
pub fn validate_csinode(new: &CSINode, old: Option<&CSINode>) -> ErrorList {
    let drivers: HashSet<&str> = new.spec.drivers.iter().map(|d| d.name.as_str()).collect();
    validate_storage_health(storage_health(Some(new)), storage_health(old), |name| {
        drivers.contains(name)
    })
}

/// Validates a `status.storageHealth` list. `driver_registered` tells whether a name is an
/// entry of the CSINode's `spec.drivers`.
pub fn validate_storage_health(
    new: Option<&[StorageHealth]>,
    old: Option<&[StorageHealth]>,
    driver_registered: impl Fn(&str) -> bool,
) -> ErrorList {
    let (new, old) = (new.map(typed_list_text), old.map(typed_list_text));
    let mut errors = Errors::default();
    check_storage_health(
        new.as_deref().map(RawList::read_typed).as_ref(),
        old.as_deref().map(RawList::read_typed).as_ref(),
        driver_registered,
        &mut errors,
    );
    errors.into_list()
}

pub(crate) fn check_storage_health<'a>(
    new: Option<&RawList<'a, StorageHealthView<'a>>>,
    old: Option<&RawList<'a, StorageHealthView<'a>>>,
    driver_registered: impl Fn(&str) -> bool,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = Path::root("status");
    let list = status.child("storageHealth");
    check_entries(
        &list,
        new,
        old,
        |path, name, errors| {
            // As ValidateCSIDriverName checks spec.drivers[*].name; the length limit is the
            // declarative half (see StorageHealth::check_name_declarative).
            let format_errors = dns1123_subdomain_errors(&go_to_lower(name));
            for detail in &format_errors {
                errors.handwritten(
                    path,
                    ErrorKind::Invalid {
                        value: name.to_owned(),
                        detail,
                    },
                );
            }
            if is_csi_driver_name(name) && !driver_registered(name) {
                errors.handwritten(
                    path,
                    ErrorKind::NotFound {
                        value: name.to_owned(),
                    },
                );
            }
        },
        errors,
    );
}

fn storage_health(node: Option<&CSINode>) -> Option<&[StorageHealth]> {
    node?.status.as_ref()?.storage_health.as_deref()
}
