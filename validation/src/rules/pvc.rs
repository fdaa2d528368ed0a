//! PersistentVolumeClaim `status.healthStatus`.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthStatus};

use super::conditions::{check_volume_conditions, check_volume_reasons};
use crate::decode::{HealthStatusView, typed_health_status};
use crate::field::{ErrorList, Errors, FieldPath};

/// Validates a claim's `status.healthStatus`, ratcheting against `old` on update.
///
/// ```
/// use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
/// use k8s_openapi::api::core::v1::{VolumeHealthCondition, VolumeHealthStatus};
/// use volume_health_validation::validate_pvc;
///
/// let claim = PersistentVolumeClaim {
///     status: Some(PersistentVolumeClaimStatus {
///         health_status: Some(VolumeHealthStatus {
///             health_conditions: Some(vec![VolumeHealthCondition {
///                 status: "Healthy".into(),
///                 reason: "VolumeNotFound".into(),
///                 message: None,
///             }]),
///             ..Default::default()
///         }),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// let errors = validate_pvc(&claim, None);
/// assert_eq!(
///     errors[0].to_string(),
///     r#"status.healthStatus.healthConditions[0].status: Unsupported value: "Healthy": supported values: "DataLoss", "Degraded", "Inaccessible""#
/// );
/// ```
pub fn validate_pvc(new: &PersistentVolumeClaim, old: Option<&PersistentVolumeClaim>) -> ErrorList {
    validate_volume_health_status(health_status(Some(new)), health_status(old))
}

/// Validates a `VolumeHealthStatus` found at `status.healthStatus`; `old` is the stored one on
/// update, whose unchanged conditions are not checked again (ratcheting, as in-tree).
///
/// ```
/// use k8s_openapi::api::core::v1::VolumeHealthStatus;
/// use volume_health_validation::rules::validate_volume_health_status;
///
/// let status = |message: &str| -> Result<VolumeHealthStatus, serde_json::Error> {
///     serde_json::from_value(serde_json::json!({"healthConditions": [
///         {"status": "Unknown", "reason": "Legacy", "message": message}]}))
/// };
/// // A status the field does not allow is refused on a new report...
/// let stored = status("from before")?;
/// assert_eq!(validate_volume_health_status(Some(&stored), None).len(), 1);
/// // ...and kept writable while stored: only the message changed.
/// let update = status("still there")?;
/// assert!(validate_volume_health_status(Some(&update), Some(&stored)).is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn validate_volume_health_status(
    new: Option<&VolumeHealthStatus>,
    old: Option<&VolumeHealthStatus>,
) -> ErrorList {
    let mut errors = Errors::default();
    check_volume_health_status(
        new.map(typed_health_status).as_ref(),
        old.map(typed_health_status).as_ref(),
        &mut errors,
    );
    errors.into_list()
}

/// `status.healthStatus` of a persistentvolumeclaims/status write: upstream's handwritten check
/// (`validateVolumeHealthStatus`, pkg/apis/core/validation/validation.go), then its declarative
/// ones (`Validate_VolumeHealthStatus`, pkg/apis/core/v1/zz_generated.validations.go). An old
/// claim without `healthStatus` leaves nothing to ratchet against, as an empty list does.
pub(crate) fn check_volume_health_status<'a>(
    new: Option<&HealthStatusView<'a>>,
    old: Option<&HealthStatusView<'a>>,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = FieldPath::root("status");
    let health = status.child("healthStatus");
    let path = health.child("healthConditions");
    let conditions = new.health_conditions.as_ref();
    check_volume_reasons(&path, conditions, errors); // validateVolumeHealthStatus
    let old = old.and_then(|old| old.health_conditions.as_ref());
    check_volume_conditions(&path, conditions, old, errors); // Validate_VolumeHealthStatus
}

fn health_status(claim: Option<&PersistentVolumeClaim>) -> Option<&VolumeHealthStatus> {
    claim?.status.as_ref()?.health_status.as_ref()
}
