//! An example health monitor for PersistentVolumeClaims: the validation library's claim health
//! writer ([`ClaimHealthWriter`], feature `kube`) fed with probe results. The library's
//! `writer` module says what each probe becomes: repaired, skipped when it changes nothing,
//! written with the stored transition time while the report is unchanged, cleared when healthy.
//!
//! The binary (`src/main.rs`) reads probe results from stdin, one JSON list of conditions per
//! line.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
pub use volume_health_validation::writer::{ClaimHealthWriter, Outcome, Reported};

/// The field manager of the monitor's writes: `managedFields` then says who wrote
/// `status.healthStatus`.
pub const FIELD_MANAGER: &str = "volume-health-example-monitor";

/// The monitor of claim `name` in the namespace of `claims`.
pub fn monitor(claims: Api<PersistentVolumeClaim>, name: &str) -> ClaimHealthWriter {
    ClaimHealthWriter::new(claims, name, FIELD_MANAGER)
}
