//! Decoding: how the JSON of a review, and a typed k8s-openapi object, become the values the
//! rules read. Nothing here decides anything.
//!
//! # Contract
//!
//! **What is read.** Of a review: `apiVersion`, `kind` and, of `request`, `uid`, `resource`,
//! `subResource`, `name`, `namespace`, `operation`, `userInfo` (the username, and of the groups
//! only whether `system:nodes` is one), `dryRun`, `object` and `oldObject`. Of an object, its
//! view ([`view`]): `metadata.name`; for a Pod `spec.nodeName`, the names of `spec.volumes` and
//! `status.volumeHealth`; for a claim `status.healthStatus`; for a CSINode
//! `status.storageHealth`. Everything else is checked to be JSON and skipped. Health entries and
//! conditions are read as k8s-openapi reads them: unknown members skipped, a member given twice
//! counts the last time, `null` is absent, an absent required string is `""`. A typed object is
//! read into the same views by borrowing its strings ([`typed`]), with timestamps at whole
//! seconds, as JSON carries them.
//!
//! **Strict where Kubernetes is.** An object is a JSON object wherever a struct is wanted, at
//! every depth: serde's derived structs would also read an array field by field, encoding/json
//! never does ([`json`]). A member the review names twice is an error, as a derived struct's is.
//!
//! **Bounded.** One pass over the body when `resource` comes before the objects, as the
//! apiserver writes it; otherwise, or when an object is not its kind, a second pass. Nesting is
//! bounded by serde_json's recursion limit (128). A list of more than 64 items is not held: it
//! keeps its text, its length and a keyed fingerprint, and each walk decodes it one item at a
//! time ([`RawList`]), so memory is bounded by the body however long a list is, and every step
//! is linear in it.
//!
//! **Errors.** A body that is not JSON, or not of the review's shape, is serde's error. An
//! object that is not its kind is no error of the read: it becomes a [`DecodeError`] (`failed to
//! decode object as Pod`, with serde's message as its source) that the decisions return when
//! they read that object, and only then. Drop on save still reads the gated field alone of such
//! an object.

pub(crate) mod json;
mod objects;
mod review;
mod strict;
mod typed;
mod view;

pub use objects::DecodeError;
pub(crate) use objects::Slot;
pub(crate) use review::read_review;
pub use typed::{HealthObject, Typed};
pub(crate) use typed::{typed_health_status, typed_pod_volume_health, typed_storage_health};
pub(crate) use view::{
    ClaimView, CsiNodeView, Fingerprinted, HealthStatusView, NameView, PodView,
    PodVolumeHealthView, RawList, StorageConditionView, StorageHealthView, VolumeConditionView,
    Walk, hash128, same_list,
};
