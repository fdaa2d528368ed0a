//! Pod `status.volumeHealth`.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Pod, PodVolumeHealth};

use super::conditions::{check_volume_conditions, check_volume_reasons};
use super::validate::{Checks, Keyed, List, each, each_slice_val, unchanged_list};
use crate::decode::{PodVolumeHealthView, VolumeConditionView, typed_pod_volume_health};
use crate::field::{ErrorKind, ErrorList, Errors, FieldPath};
use crate::render;

/// Validates a pod's `status.volumeHealth`, ratcheting against `old` on update. Volume names are
/// looked up in the new pod's `spec.volumes`.
///
/// ```
/// use k8s_openapi::api::core::v1::Pod;
/// use volume_health_validation::validate_pod;
///
/// let pod: Pod = serde_json::from_value(serde_json::json!({
///     "spec": {"containers": [{"name": "app"}], "volumes": [{"name": "data", "emptyDir": {}}]},
///     "status": {"volumeHealth": [
///         {"name": "data", "healthConditions": [{"status": "Inaccessible", "reason": "NoQuorum"}]},
///         {"name": "cache", "healthConditions": [{"status": "Degraded", "reason": "Slow"}]},
///     ]}
/// }))?;
/// let errors = validate_pod(&pod, None);
/// assert_eq!(errors.len(), 1);
/// assert_eq!(errors[0].to_string(), r#"status.volumeHealth[1].name: Not found: "cache""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
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
///
/// ```
/// use k8s_openapi::api::core::v1::PodVolumeHealth;
/// use volume_health_validation::rules::validate_pod_volume_health;
///
/// let entries: Vec<PodVolumeHealth> = serde_json::from_value(serde_json::json!([
///     {"name": "data", "healthConditions": [{"status": "Degraded", "reason": "slow-disk"}]},
/// ]))?;
/// let errors = validate_pod_volume_health(Some(&entries), None, |name| name == "data");
/// assert_eq!(errors.len(), 1);
/// assert!(errors[0].to_string().starts_with("status.volumeHealth[0].healthConditions[0].reason: Invalid value: \"slow-disk\""));
/// # Ok::<(), serde_json::Error>(())
/// ```
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

/// `+k8s:listType=map`, `+k8s:listMapKey=name` on `status.volumeHealth`.
impl Keyed for PodVolumeHealthView<'_> {
    type Key<'k>
        = &'k str
    where
        Self: 'k;

    fn key(&self) -> &str {
        &self.name
    }
}

/// `status.volumeHealth` of a pods/status write: upstream's handwritten checks
/// (`validatePodVolumeHealth`, pkg/apis/core/validation/validation.go), then its declarative ones
/// (`Validate_PodStatus` and `Validate_PodVolumeHealth`, pkg/apis/core/v1/zz_generated.validations.go).
pub(crate) fn check_pod_volume_health<'a>(
    new: List<'_, 'a, PodVolumeHealthView<'a>>,
    old: List<'_, 'a, PodVolumeHealthView<'a>>,
    volume_exists: impl Fn(&str) -> bool,
    errors: &mut Errors,
) {
    let status = FieldPath::root("status");
    let path = status.child("volumeHealth");
    // validatePodVolumeHealth: handwritten, never ratcheted.
    each(&path, new, |item, entry| {
        let mut hv = Checks::handwritten(errors);
        volume_in_spec(&mut hv, &item.child("name"), &entry.name, &volume_exists);
        let conditions = entry.health_conditions.as_ref();
        check_volume_reasons(&item.child("healthConditions"), conditions, errors);
    });
    // Validate_PodStatus, field VolumeHealth: the list's Duplicates before its entries' errors.
    if unchanged_list(new, old) {
        return; // ratcheting: an unchanged list is not checked
    }
    Checks::declarative(errors).unique(&path, new, render::pod_volume_health); // +k8s:listType=map
    each_slice_val(&path, new, old, |item, entry, old| {
        pod_volume_health(item, entry, old.map(Option::as_ref), errors); // +k8s:listMapKey=name
    });
}

/// `validatePodVolumeHealth`: a named volume is an entry of `spec.volumes`, else NotFound.
fn volume_in_spec(
    hv: &mut Checks<'_>,
    path: &FieldPath<'_>,
    name: &str,
    volume_exists: impl Fn(&str) -> bool,
) {
    if !name.is_empty() && !volume_exists(name) {
        let value = name.to_owned();
        hv.report(path, ErrorKind::NotFound { value });
    }
}

/// `Validate_PodVolumeHealth` of one entry, `old` the conditions of the old entry of its name
/// when there is one: the name, the key, is then unchanged.
fn pod_volume_health<'a>(
    path: &FieldPath<'_>,
    entry: &PodVolumeHealthView<'a>,
    old: Option<List<'_, 'a, VolumeConditionView<'a>>>,
    errors: &mut Errors,
) {
    if old.is_none() {
        Checks::declarative(errors).required_value(&path.child("name"), &entry.name); // +k8s:required
    }
    let (new, old) = (entry.health_conditions.as_ref(), old.flatten());
    check_volume_conditions(&path.child("healthConditions"), new, old, errors); // the list's tags
}

fn volume_health(pod: Option<&Pod>) -> Option<&[PodVolumeHealth]> {
    pod?.status.as_ref()?.volume_health.as_deref()
}
