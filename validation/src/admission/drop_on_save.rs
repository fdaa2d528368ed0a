//! Drop on save: the gated field the mutating webhook removes from `object` while
//! `CSIVolumeHealth` is off, and the JSON Patch (RFC 6902) that removes it.

use serde::Serialize;

use crate::resource::HealthResource;

/// The decision of drop on save for one request: remove this resource's gated field from
/// `object`. [`AdmissionRequest::gated_field_to_drop`](super::AdmissionRequest::gated_field_to_drop)
/// makes it; the webhook sends [`patch`](Self::patch), and a program that wants the object the
/// apiserver would store applies the same patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropOnSave {
    resource: HealthResource,
}

impl DropOnSave {
    pub(crate) fn new(resource: HealthResource) -> Self {
        DropOnSave { resource }
    }

    /// The resource whose field is dropped.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    /// # use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
    /// # use volume_health_validation::{AdmissionRequest, Operation};
    /// # let old = PersistentVolumeClaim::default();
    /// # let new = PersistentVolumeClaim {
    /// #     status: Some(PersistentVolumeClaimStatus {
    /// #         health_status: Some(Default::default()),
    /// #         ..Default::default()
    /// #     }),
    /// #     ..Default::default()
    /// # };
    ///
    /// // A claim's first `healthStatus`, written while the gate is off.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// let drop = request.gated_field_to_drop(false)?.expect("dropped on save");
    /// assert_eq!(drop.resource(), HealthResource::PersistentVolumeClaims);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resource(self) -> HealthResource {
        self.resource
    }

    /// The field as a JSON Pointer (RFC 6901): `/status/volumeHealth`, ...
    ///
    /// ```
    /// # use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
    /// # use volume_health_validation::{AdmissionRequest, Operation};
    /// # let old = PersistentVolumeClaim::default();
    /// # let new = PersistentVolumeClaim {
    /// #     status: Some(PersistentVolumeClaimStatus {
    /// #         health_status: Some(Default::default()),
    /// #         ..Default::default()
    /// #     }),
    /// #     ..Default::default()
    /// # };
    /// // A claim's first `healthStatus`, written while the gate is off.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// let drop = request.gated_field_to_drop(false)?.expect("dropped on save");
    /// assert_eq!(drop.pointer(), "/status/healthStatus");
    /// // It points at the field in the object as JSON.
    /// assert!(serde_json::to_value(&new)?.pointer(drop.pointer()).is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pointer(self) -> &'static str {
        self.resource.gated_pointer()
    }

    /// The field as a field path: `status.volumeHealth`, ...
    ///
    /// ```
    /// # use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
    /// # use volume_health_validation::{AdmissionRequest, Operation};
    /// # let old = PersistentVolumeClaim::default();
    /// # let new = PersistentVolumeClaim {
    /// #     status: Some(PersistentVolumeClaimStatus {
    /// #         health_status: Some(Default::default()),
    /// #         ..Default::default()
    /// #     }),
    /// #     ..Default::default()
    /// # };
    /// // A claim's first `healthStatus`, written while the gate is off.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// let drop = request.gated_field_to_drop(false)?.expect("dropped on save");
    /// assert_eq!(drop.field(), "status.healthStatus");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn field(self) -> &'static str {
        self.resource.gated_field()
    }

    /// The JSON Patch that drops the field: one `remove` at [`pointer`](Self::pointer).
    ///
    /// ```
    /// # use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
    /// # use volume_health_validation::{AdmissionRequest, Operation};
    /// # let old = PersistentVolumeClaim::default();
    /// # let new = PersistentVolumeClaim {
    /// #     status: Some(PersistentVolumeClaimStatus {
    /// #         health_status: Some(Default::default()),
    /// #         ..Default::default()
    /// #     }),
    /// #     ..Default::default()
    /// # };
    /// // A claim's first `healthStatus`, written while the gate is off.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// let drop = request.gated_field_to_drop(false)?.expect("dropped on save");
    /// assert_eq!(
    ///     serde_json::to_string(&drop.patch())?,
    ///     r#"[{"op":"remove","path":"/status/healthStatus"}]"#
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn patch(self) -> [Remove; 1] {
        [Remove {
            path: self.pointer(),
        }]
    }

    /// The warning the client is shown when the field is dropped.
    ///
    /// ```
    /// # use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimStatus};
    /// # use volume_health_validation::{AdmissionRequest, Operation};
    /// # let old = PersistentVolumeClaim::default();
    /// # let new = PersistentVolumeClaim {
    /// #     status: Some(PersistentVolumeClaimStatus {
    /// #         health_status: Some(Default::default()),
    /// #         ..Default::default()
    /// #     }),
    /// #     ..Default::default()
    /// # };
    /// // A claim's first `healthStatus`, written while the gate is off.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// let drop = request.gated_field_to_drop(false)?.expect("dropped on save");
    /// assert_eq!(
    ///     drop.warning(),
    ///     "status.healthStatus was dropped: feature gate CSIVolumeHealth is disabled"
    /// );
    /// // The answer carries it as a `Warning` header beside the patch.
    /// let mut response = request.allow_patching(&drop.patch());
    /// response.warnings.push(drop.warning());
    /// assert_eq!(response.warnings.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warning(self) -> String {
        format!(
            "{} was dropped: feature gate CSIVolumeHealth is disabled",
            self.field()
        )
    }
}

/// A JSON Patch `remove` operation: `{"op":"remove","path":...}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename = "remove")]
pub struct Remove {
    /// The JSON Pointer of the member removed.
    pub path: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_removes_the_gated_field() {
        for resource in HealthResource::ALL {
            let drop = DropOnSave::new(resource);
            assert_eq!(
                serde_json::to_string(&drop.patch()).unwrap(),
                format!(
                    r#"[{{"op":"remove","path":"/status/{}"}}]"#,
                    resource.gated_member()
                )
            );
        }
        assert_eq!(
            DropOnSave::new(HealthResource::CsiNodes).warning(),
            "status.storageHealth was dropped: feature gate CSIVolumeHealth is disabled"
        );
    }
}
