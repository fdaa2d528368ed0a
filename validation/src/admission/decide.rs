//! The decisions for one admission request: node restriction, then field validation, and the
//! drop-on-save decision, over the views of its objects. They read the request itself.

use super::AdmissionRequest;
use super::drop_on_save::DropOnSave;
use super::settings::Settings;
use super::verdict::{Forbidden, Invalid, Verdict};
use crate::decode::{ClaimView, CsiNodeView, DecodeError, PodView, Slot};
use crate::field::Errors;
use crate::resource::{HealthResource, Operation};
use crate::restriction::{Asked, Written, check_restrictions};
use crate::rules::{
    ConditionIdentity, NameSet, check_pod_volume_health, check_storage_health,
    check_volume_health_status,
};

/// Whether the rules of this project cover a subresource: the object itself or `status`.
/// Others (`pods/eviction`, `pods/binding`, ...) carry other kinds and are allowed unchanged.
fn covered(subresource: &str) -> bool {
    matches!(subresource, "" | "status")
}

/// Whether the gated fields are validated: on writes of `status` only. On a write of the object
/// itself the apiserver keeps the stored status (and resets it on CREATE), so in-tree never
/// checks them there, and stored data must never block a change of the spec.
fn validates_fields(subresource: &str) -> bool {
    subresource == "status"
}

/// The decisions of a request for `resource`, a resource with rules here.
impl AdmissionRequest<'_> {
    /// The validating webhook's decision: node restriction first, then field validation of the
    /// new object against the old one. This project's storage condition rule never refuses a
    /// node's write of its own CSINode (`kubelet_identity`: the identity a node's write is
    /// checked with; the webhook's is in-tree's, repair's the settings').
    pub(super) fn validate_health(
        &self,
        resource: HealthResource,
        settings: &Settings,
        kubelet_identity: ConditionIdentity,
    ) -> Result<Verdict, DecodeError> {
        if !covered(self.subresource()) || self.operation == Operation::Connect {
            return Ok(Verdict::Allowed);
        }
        let (new, old) = (&self.object, &self.old_object);
        match resource {
            HealthResource::Pods => {
                let (new, old) = (new.as_pod()?, old.as_pod()?);
                let old_node = old.and_then(|o| o.spec.as_ref()?.node_name.as_deref());
                let object_name = new.and_then(|n| n.metadata.name.as_deref());
                let written = Written {
                    object_name,
                    old_pod_node_name: old_node,
                    health_status_changed: false,
                };
                if let Some(denied) = self.restrict(resource, &written, settings) {
                    return Ok(denied);
                }
                let Some(new) = new.filter(|_| validates_fields(self.subresource())) else {
                    return Ok(Verdict::Allowed);
                };
                let volumes = NameSet::new(new.volumes(), new.volume_health());
                let mut errors = settings.errors();
                check_pod_volume_health(
                    new.volume_health(),
                    old.and_then(PodView::volume_health),
                    |name| volumes.contains(name),
                    &mut errors,
                );
                Ok(self.invalid_or_allowed(resource, object_name, errors))
            }
            HealthResource::PersistentVolumeClaims => {
                let (new, old) = (new.as_claim()?, old.as_claim()?);
                let new_health = new.and_then(ClaimView::health_status);
                let old_health = old.and_then(ClaimView::health_status);
                let changed = self.operation == Operation::Update && new_health != old_health;
                let object_name = new.and_then(|n| n.metadata.name.as_deref());
                let written = Written {
                    object_name,
                    old_pod_node_name: None,
                    health_status_changed: changed,
                };
                if let Some(denied) = self.restrict(resource, &written, settings) {
                    return Ok(denied);
                }
                if !validates_fields(self.subresource()) {
                    return Ok(Verdict::Allowed);
                }
                let mut errors = settings.errors();
                check_volume_health_status(new_health, old_health, &mut errors);
                Ok(self.invalid_or_allowed(resource, object_name, errors))
            }
            HealthResource::CsiNodes => {
                let (new, old) = (new.as_csinode()?, old.as_csinode()?);
                let object_name = new.and_then(|n| n.metadata.name.as_deref());
                let written = Written {
                    object_name,
                    old_pod_node_name: None,
                    health_status_changed: false,
                };
                if let Some(denied) = self.restrict(resource, &written, settings) {
                    return Ok(denied);
                }
                let Some(new) = new.filter(|_| validates_fields(self.subresource())) else {
                    return Ok(Verdict::Allowed);
                };
                // A kubelet retries a refused report four times every probe tick for as long as
                // its driver says the same: the rule is enforced on its writes by repair, not by
                // a 422.
                let identity = if self.user_info.node_name().is_some() {
                    kubelet_identity
                } else {
                    settings.storage_condition_identity
                };
                let mut errors = settings.errors();
                check_storage_health(
                    new.storage_health(),
                    old.and_then(CsiNodeView::storage_health),
                    identity,
                    &mut errors,
                );
                Ok(self.invalid_or_allowed(resource, object_name, errors))
            }
        }
    }

    /// Runs the node restriction; `Some` is the denial.
    fn restrict(
        &self,
        resource: HealthResource,
        written: &Written<'_>,
        settings: &Settings,
    ) -> Option<Verdict> {
        let asked = Asked {
            resource,
            subresource: self.subresource(),
            operation: self.operation,
            name: self.name(),
            user: &self.user_info,
        };
        let reason = check_restrictions(&asked, written, &settings.restriction).err()?;
        let name = self.name();
        Some(Verdict::Forbidden(Forbidden {
            resource,
            name: if name.is_empty() {
                written.object_name.unwrap_or_default().to_owned()
            } else {
                name.to_owned()
            },
            reason,
        }))
    }

    fn invalid_or_allowed(
        &self,
        resource: HealthResource,
        object_name: Option<&str>,
        errors: Errors,
    ) -> Verdict {
        let (errors, omitted) = errors.finish();
        if errors.is_empty() {
            Verdict::Allowed
        } else {
            Verdict::Invalid(Invalid {
                resource,
                name: object_name.unwrap_or(self.name()).to_owned(),
                errors,
                omitted,
            })
        }
    }

    /// Drop on save: the gated field to remove from `object`, or `None` when nothing is
    /// removed. With the gate off, a new value is dropped unless the old object
    /// already uses the field (present for a claim's `healthStatus`, a non-empty list
    /// otherwise). With the gate on nothing is removed, and an object that is not its kind is
    /// reported as by [`validate_health`](Self::validate_health).
    pub(super) fn gated_field_to_drop_from(
        &self,
        resource: HealthResource,
        gate_enabled: bool,
    ) -> Result<Option<DropOnSave>, DecodeError> {
        if !covered(self.subresource())
            || !matches!(self.operation, Operation::Create | Operation::Update)
        {
            return Ok(None);
        }
        let (new, old) = (&self.object, &self.old_object);
        if gate_enabled {
            for slot in [new, old] {
                if let Slot::Undecodable(bad) = slot {
                    return Err(bad.error.clone());
                }
            }
            return Ok(None);
        }
        if matches!(new, Slot::Absent) || !new.gated_in_use()? {
            return Ok(None);
        }
        Ok((!old.gated_in_use()?).then(|| DropOnSave::new(resource)))
    }
}
