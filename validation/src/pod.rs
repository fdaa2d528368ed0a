//! Pod `status.volumeHealth`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, PodVolumeHealth};

use crate::entries::check_entries;
use crate::field::{ErrorKind, ErrorList, Errors, Path};
use crate::view::{PodVolumeHealthView, RawList, typed_list_text};

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
    let (new, old) = (new.map(typed_list_text), old.map(typed_list_text));
    let mut errors = Errors::default();
    check_pod_volume_health(
        new.as_deref().map(RawList::read_typed).as_ref(),
        old.as_deref().map(RawList::read_typed).as_ref(),
        volume_exists,
        &mut errors,
    );
    errors.into_list()
}

pub(crate) fn check_pod_volume_health<'a>(
    new: Option<&RawList<'a, PodVolumeHealthView<'a>>>,
    old: Option<&RawList<'a, PodVolumeHealthView<'a>>>,
    volume_exists: impl Fn(&str) -> bool,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = Path::root("status");
    let list = status.child("volumeHealth");
    check_entries(
        &list,
        new,
        old,
        |path, name, errors| {
            if !volume_exists(name) {
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

fn volume_health(pod: Option<&Pod>) -> Option<&[PodVolumeHealth]> {
    pod?.status.as_ref()?.volume_health.as_deref()
}
