//! The field rules of volume health, as kube-apiserver v1.37.2 validates a status write, plus
//! this project's one rule of its own ([`ConditionIdentity`]).
//!
//! - A claim's `status.healthStatus` ([`validate_volume_health_status`]): its conditions, at
//!   most [`MAX_HEALTH_CONDITIONS`], each with a status of [`VOLUME_HEALTH_STATUSES`], a reason
//!   in upstream's reason format and at most [`MAX_VOLUME_REASON_BYTES`], a message of at most
//!   [`MAX_VOLUME_MESSAGE_BYTES`]; no two conditions alike.
//! - A pod's `status.volumeHealth` ([`validate_pod_volume_health`]): each entry names a volume of
//!   `spec.volumes`, once; its conditions as a claim's.
//! - A CSINode's `status.storageHealth` ([`validate_storage_health`]): each entry names a CSI
//!   driver (a DNS-1123 subdomain of at most 63 bytes), once; its conditions, at most
//!   [`MAX_HEALTH_CONDITIONS`], each with a status of [`STORAGE_HEALTH_STATUSES`], an optional
//!   access mode of [`ACCESS_MODES`] and volume mode of [`VOLUME_MODES`], reason and message
//!   limits in bytes (as upstream measures them).
//!
//! On update the rules ratchet as upstream does: what is unchanged from the stored object is
//! not checked again. Errors come in Kubernetes order: handwritten checks, then declarative
//! ones, then this project's rule.
//!
//! The rules read as upstream's tags: one block per field, one line per check, over the
//! combinators of `validate.rs` (`max_items`, `unique`, `each_slice_val`, `required_value`,
//! `enum_value`, `max_bytes`, after upstream's `validate` package). Only `validate.rs` knows
//! how a list is kept, held or walked from its text.

mod conditions;
mod csinode;
pub(crate) mod names;
mod pod;
mod pvc;
mod validate;

pub use conditions::{
    ACCESS_MODES, MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES, MAX_STORAGE_REASON_BYTES,
    MAX_VOLUME_MESSAGE_BYTES, MAX_VOLUME_REASON_BYTES, STORAGE_HEALTH_STATUSES,
    VOLUME_HEALTH_STATUSES, VOLUME_MODES,
};
pub use csinode::{ConditionIdentity, validate_csinode, validate_storage_health};
pub use pod::{validate_pod, validate_pod_volume_health};
pub use pvc::{validate_pvc, validate_volume_health_status};

pub(crate) use csinode::check_storage_health;
pub(crate) use pod::check_pod_volume_health;
pub(crate) use pvc::check_volume_health_status;
pub(crate) use validate::NameSet;
