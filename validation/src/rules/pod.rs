//! Pod `status.volumeHealth`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, PodVolumeHealth};

use super::conditions::{check_volume_conditions, check_volume_reasons};
use super::entries::{OldEntries, walk_names};
use crate::decode::{PodVolumeHealthView, RawList, Walk, same_list, typed_pod_volume_health};
use crate::field::{ErrorKind, ErrorList, Errors, FieldPath};
use crate::render;

/// Validates a pod's `status.volumeHealth`, ratcheting against `old` on update. Volume names are
/// looked up in the new pod's `spec.volumes`.
pub fn validate_pod(new: &Pod, old: Option<&Pod>) -> ErrorList {
    let volumes: HashSet<&str> = new
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .map(|v| v.name.as_str())
        .collect();
    validate_pod_volume_health(volume_health(Some(new)), volume_health(old), |name| {
        volumes.contains(name)
    })
}

/// Validates a `status.volumeHealth` list. `volume_exists` tells whether a name is an entry of
/// the pod's `spec.volumes`.
pub fn validate_pod_volume_health(
    new: Option<&[PodVolumeHealth]>,
    old: Option<&[PodVolumeHealth]>,
    volume_exists: impl Fn(&str) -> bool,
) -> ErrorList {
    let mut errors = Errors::default();
    check_pod_volume_health(
        new.map(typed_pod_volume_health).as_ref(),
        old.map(typed_pod_volume_health).as_ref(),
        volume_exists,
        &mut errors,
    );
    errors.into_list()
}

/// `status.volumeHealth` of a pods/status write: upstream's handwritten checks
/// (`validatePodVolumeHealth`, pkg/apis/core/validation/validation.go), then its declarative ones
/// (`Validate_PodStatus` and `Validate_PodVolumeHealth`, pkg/apis/core/v1/zz_generated.validations.go).
pub(crate) fn check_pod_volume_health<'a>(
    new: Option<&RawList<'a, PodVolumeHealthView<'a>>>,
    old: Option<&RawList<'a, PodVolumeHealthView<'a>>>,
    volume_exists: impl Fn(&str) -> bool,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = FieldPath::root("status");
    let list = status.child("volumeHealth");
    // Handwritten, never ratcheted: each entry's name, then its conditions' reasons.
    new.walk(|i, entry| {
        let item = list.index(i);
        if !entry.name.is_empty() && !volume_exists(&entry.name) {
            errors.handwritten(
                &item.child("name"),
                ErrorKind::NotFound {
                    value: entry.name.to_string(),
                },
            );
        }
        check_volume_reasons(
            &item.child("healthConditions"),
            entry.health_conditions.as_ref(),
            errors,
        );
        Walk::Next
    });
    // Declarative: an unchanged list is not checked; the list's Duplicates come before its
    // entries' errors.
    if same_list(Some(new), old) {
        return;
    }
    walk_names(new, |i, entry, first| {
        if !first {
            errors.declarative(
                &list.index(i),
                ErrorKind::Duplicate {
                    rendered: render::pod_volume_health(entry),
                },
            );
        }
    });
    // Each entry against the old entry of its name: the name, the key, is then unchanged, and
    // its conditions are checked only when they changed.
    let old = OldEntries::new(new, old);
    new.walk(|i, entry| {
        let item = list.index(i);
        let old_conditions = old.conditions(&entry.name);
        if old_conditions.is_none() && entry.name.is_empty() {
            errors.declarative(&item.child("name"), ErrorKind::Required);
        }
        check_volume_conditions(
            &item.child("healthConditions"),
            entry.health_conditions.as_ref(),
            old_conditions.flatten(),
            errors,
        );
        Walk::Next
    });
}

fn volume_health(pod: Option<&Pod>) -> Option<&[PodVolumeHealth]> {
    pod?.status.as_ref()?.volume_health.as_deref()
}
