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
//! per storage condition within a driver ([`rules::ConditionIdentity`], on by default, reported after
//! upstream's errors; [`rules::ConditionIdentity::InTree`] turns it off), and the wording and optional
//! writer list of the claim `healthStatus` rule ([`restriction::Restricted::ClaimHealthByNode`],
//! [`restriction::RestrictionPolicy::pvc_health_writers`]). Fields are validated on writes of
//! the `status` subresource only, as the apiserver does. [`Settings`] holds what a request is
//! decided with: the node restriction's settings and the field rules'.
//!
//! Checking a write before sending it, node restriction included, takes typed k8s-openapi
//! objects and no JSON:
//!
//! ```
//! use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, PodVolumeHealth, Volume};
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use volume_health_validation::{
//!     AdmissionRequest, Operation, Settings, UserInfo, Verdict,
//! };
//!
//! let old = Pod {
//!     metadata: ObjectMeta { name: Some("web-0".into()), ..Default::default() },
//!     spec: Some(PodSpec {
//!         node_name: Some("node1".into()),
//!         volumes: Some(vec![Volume { name: "data".into(), ..Default::default() }]),
//!         ..Default::default()
//!     }),
//!     ..Default::default()
//! };
//! let mut new = old.clone();
//! new.status = Some(PodStatus {
//!     volume_health: Some(vec![PodVolumeHealth { name: "logs".into(), ..Default::default() }]),
//!     ..Default::default()
//! });
//!
//! let settings = Settings::with_gate(true);
//! let verdict = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
//!     .with_subresource("status")
//!     .with_user(UserInfo::node("node1"))
//!     .validate(&settings)?;
//! let Verdict::Invalid(invalid) = &verdict else { panic!("a volume not in spec.volumes") };
//! assert_eq!(invalid.errors[0].to_string(), r#"status.volumeHealth[0].name: Not found: "logs""#);
//! assert_eq!(
//!     verdict.status().and_then(|s| s.message).as_deref(),
//!     Some(r#"Pod "web-0" is invalid: status.volumeHealth[0].name: Not found: "logs""#)
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A webhook reads an AdmissionReview body with [`AdmissionReview::parse`], which checks the
//! envelope and decodes of its objects only what the rules read, in the same pass as the rest of
//! the body, and decides the same way. [`validate_pod`], [`validate_pvc`] and
//! [`validate_csinode`] run the field rules alone.
//!
//! The front door is the items below; the rest is in named modules: [`rules`] (the field rules
//! by list, their limits, [`rules::ConditionIdentity`]), [`restriction`] (the node rules, their
//! texts and settings), [`admission`] (the verdict's parts and errors, drop on save's patch,
//! the response an apiserver reads), [`field`] (paths and error kinds), [`status`] (the
//! `Status` an apiserver answers with), [`identity`] (node users), [`error`] (an error and its
//! causes on one line), [`json`] (JSON read strictly, as the apiserver reads it, for other
//! documents), [`repair`] (the smallest change that makes a report valid, and for writers a
//! no-op test and transition times carried over).
//!
//! This crate selects no k8s-openapi version: the program that depends on it enables `v1_37` or
//! later, as k8s-openapi asks of libraries.

pub mod admission;
mod decode;
pub mod error;
pub mod field;
pub mod identity;
pub mod json;
mod render;
pub mod repair;
mod resource;
pub mod restriction;
pub mod rules;
pub mod status;
pub mod writer;

pub use admission::{AdmissionRequest, AdmissionReview, Settings, Verdict};
pub use field::{ErrorList, FieldError};
pub use identity::UserInfo;
pub use resource::{HealthResource, Operation};
pub use rules::{validate_csinode, validate_pod, validate_pvc};

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
