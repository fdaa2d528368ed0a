//! Volume health (KEP-1432, feature gate `CSIVolumeHealth`) as the Kubernetes apiserver enforces
//! it, for Rust programs: the field rules of PVC `status.healthStatus`, Pod `status.volumeHealth`
//! and CSINode `status.storageHealth`, the NodeRestriction rules for writes of them, and the
//! drop-on-save decision while the gate is off.
//!
//! Validation returns data: every [`FieldError`] with its path, in the order Kubernetes reports
//! them (handwritten checks first, then declarative ones, each in field order), with ratcheting
//! on update. Error strings match Kubernetes byte for byte, so a sidecar can check a status
//! before writing it and get the answer the apiserver would give.
//!
//! Every field rule is kube-apiserver v1.37.2's in-tree one (`pkg/apis/core/validation`, the
//! declarative checks generated from `k8s.io/api/core/v1`'s tags, `pkg/apis/storage/validation`),
//! and so are the NodeRestriction texts, with two exceptions of this project's own: one identity
//! per storage condition within a driver ([`ConditionIdentity`], on by default, reported after
//! upstream's errors; [`ConditionIdentity::InTree`] turns it off), and the wording and optional
//! writer list of the claim `healthStatus` rule ([`Restricted::ClaimHealthByNode`],
//! [`RestrictionPolicy::pvc_health_writers`]). Fields are validated on writes of the `status`
//! subresource only, as the apiserver does.
//!
//! ```
//! use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, PodVolumeHealth, Volume};
//! use volume_health_validation::{HealthResource, invalid_status, validate_pod};
//!
//! let pod = Pod {
//!     metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
//!         name: Some("web-0".into()),
//!         ..Default::default()
//!     },
//!     spec: Some(PodSpec {
//!         volumes: Some(vec![Volume { name: "data".into(), ..Default::default() }]),
//!         ..Default::default()
//!     }),
//!     status: Some(PodStatus {
//!         volume_health: Some(vec![PodVolumeHealth { name: "logs".into(), ..Default::default() }]),
//!         ..Default::default()
//!     }),
//! };
//! let errors = validate_pod(&pod, None);
//! assert_eq!(errors.len(), 1);
//! assert_eq!(errors[0].to_string(), r#"status.volumeHealth[0].name: Not found: "logs""#);
//!
//! let status = invalid_status(HealthResource::Pods, "web-0", &errors);
//! assert_eq!(status.code, Some(422));
//! assert_eq!(
//!     status.message.as_deref(),
//!     Some(r#"Pod "web-0" is invalid: status.volumeHealth[0].name: Not found: "logs""#)
//! );
//! ```
//!
//! Webhooks read an AdmissionReview body with [`AdmissionReview::parse`], which decodes of its
//! objects only what the rules read, in the same pass as the rest of the body; the request then
//! decides with [`AdmissionRequest::validate`] and [`AdmissionRequest::gated_field_to_drop`]. A
//! program checks a write it is about to send the same way, with a request made in-process by
//! [`AdmissionRequest::new`] (see `examples/sidecar_pvc_status.rs`).

mod admission;
mod conditions;
mod csinode;
mod entries;
mod field;
mod identity;
pub mod json;
pub mod names;
mod objects;
mod pod;
mod pvc;
mod render;
mod request;
mod resource;
mod restriction;
mod status;
mod view;

pub use admission::{Forbidden, Invalid, Verdict};
pub use conditions::{
    ACCESS_MODES, MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES, MAX_STORAGE_REASON_BYTES,
    MAX_VOLUME_MESSAGE_BYTES, MAX_VOLUME_REASON_BYTES, STORAGE_HEALTH_STATUSES,
    VOLUME_HEALTH_STATUSES, VOLUME_MODES,
};
pub use csinode::{ConditionIdentity, validate_csinode, validate_storage_health};
pub use field::{
    ErrorKind, ErrorList, FieldError, GoQuoted, LengthUnit, MAX_REPORTED_ERRORS, Path,
};
pub use identity::{Groups, NODE_USER_PREFIX, NODES_GROUP, node_name};
pub use objects::DecodeError;
pub use pod::{validate_pod, validate_pod_volume_health};
pub use pvc::{validate_pvc, validate_volume_health_status};
pub use render::GoJson;
pub use request::{
    AdmissionRequest, AdmissionReview, GroupVersionResource, RequestError, UnknownOperation,
    UserInfo,
};
pub use resource::{HealthResource, Operation};
pub use restriction::{
    CSINODE_OTHER_NODE, CSINODE_STATUS_GATED, Restricted, RestrictionInput, RestrictionPolicy,
    check_restrictions,
};
pub use status::{
    bad_request_status, error_chain, forbidden_status, invalid_message, invalid_status,
};

#[cfg(test)]
mod tests;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The examples of `docs/library.md`, compiled and run as doc tests.
#[doc = include_str!("../../docs/library.md")]
#[cfg(doctest)]
pub struct LibraryDocDoctests;
