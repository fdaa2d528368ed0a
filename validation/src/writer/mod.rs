//! A health writer's side of the rules: what to write to a claim's `status.healthStatus` for
//! one probe of its volume, and (feature `kube`) a writer that does it through kube-rs.
//!
//! For each probe, [`claim_report`] takes the claim as stored and the conditions the driver
//! returned, and answers the JSON merge patch of the claim's `status` subresource, or none:
//!
//! 1. the conditions are repaired ([`repair::repair_volume_health_status`]): a condition the
//!    apiserver can never accept and a repeated (status, reason) are dropped, at most 16 are
//!    kept, a message over 1024 bytes is cut. A report the apiserver refuses would be retried
//!    forever; the repaired one is accepted, with or without the volume health webhooks;
//! 2. a report that changes nothing stored is not written ([`repair::unchanged`] with
//!    [`Policy::CompareMessages`], as external-health-monitor decides: a new message is a
//!    change, a new order or a repeat is not);
//! 3. `lastTransitionTime` is the stored one while the set of (status, reason) is unchanged, and
//!    the probe's time otherwise, cut to the second ([`repair::carry_transition_times`]);
//! 4. a report without conditions clears the field: `{"status": {"healthStatus": null}}`.
//!
//! `ClaimHealthWriter` (feature `kube`) runs that against a cluster: it reads the claim once,
//! then keeps what the apiserver answered to its last write as the stored claim (as an
//! informer's cache would), so a probe that changes nothing sends no request at all. It writes
//! with the field manager it is given, and tells a write the apiserver dropped (the
//! `CSIVolumeHealth` gate off) from one it stored. The feature adds kube's client without TLS;
//! a program talking to a cluster enables kube's TLS feature (`rustls-tls`) itself.

#[cfg(feature = "kube")]
mod claim;
#[cfg(test)]
mod tests;

use std::fmt;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::repair::{self, Policy, Repair};

#[cfg(feature = "kube")]
pub use claim::ClaimHealthWriter;

/// What to do with one probe: [`claim_report`]'s answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimReport {
    /// What the repair changed in the driver's report, for the monitor's log.
    pub repairs: Vec<Repair>,
    /// The merge patch of the claim's `status` subresource; `None` when the report changes
    /// nothing stored.
    pub patch: Option<Value>,
}

/// The write for one probe: `stored` is the claim as the apiserver has it, `conditions` what the
/// driver returned, `now` the probe's time.
///
/// The conditions are repaired against the stored report, as
/// [`repair_volume_health_status`](repair::repair_volume_health_status) does. A report that
/// changes nothing stored ([`Policy::CompareMessages`]) gets no patch. Otherwise
/// `lastTransitionTime` stays the stored one while the set of (status, reason) is unchanged,
/// and becomes `now`, cut to the second, when it changed. A report without conditions clears
/// the field with `null`.
///
/// ```
/// use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// use volume_health_validation::writer::claim_report;
///
/// let stored: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
///     "metadata": {"name": "data-0"},
///     "status": {"healthStatus": {
///         "healthConditions": [{"status": "Degraded", "reason": "ReplicaOutOfSync", "message": "behind"}],
///         "lastTransitionTime": "2026-03-01T10:00:00Z"}}
/// }))?;
/// let now = Time("2026-03-01T10:05:00Z".parse().expect("a time"));
/// let condition = |status: &str, reason: &str, message: &str| VolumeHealthCondition {
///     status: status.into(),
///     reason: reason.into(),
///     message: Some(message.into()),
/// };
/// // The same report: nothing to write.
/// let same = claim_report(&stored, vec![condition("Degraded", "ReplicaOutOfSync", "behind")], &now);
/// assert!(same.patch.is_none());
/// // A repeated pair is repaired, and the new report written with the probe's time.
/// let worse = vec![
///     condition("Inaccessible", "NoQuorum", "node-b and node-c unreachable"),
///     condition("Inaccessible", "NoQuorum", "node-c unreachable"),
/// ];
/// let report = claim_report(&stored, worse, &now);
/// assert_eq!(report.repairs.len(), 1);
/// let patch = report.patch.expect("a change");
/// assert_eq!(patch["status"]["healthStatus"]["lastTransitionTime"], "2026-03-01T10:05:00Z");
/// // Healthy again: the field is removed.
/// let healthy = claim_report(&stored, vec![], &now);
/// assert_eq!(healthy.patch, Some(serde_json::json!({"status": {"healthStatus": null}})));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn claim_report(
    stored: &PersistentVolumeClaim,
    conditions: Vec<VolumeHealthCondition>,
    now: &Time,
) -> ClaimReport {
    let old = stored
        .status
        .as_ref()
        .and_then(|status| status.health_status.as_ref());
    let mut health = VolumeHealthStatus {
        health_conditions: Some(conditions),
        last_transition_time: None,
    };
    // With the stored report, so that what the apiserver accepts because it is stored is kept.
    let repairs = repair::repair_volume_health_status(&mut health, old);
    if repair::unchanged(old, &health, Policy::CompareMessages) {
        return ClaimReport {
            repairs,
            patch: None,
        };
    }
    let healthy = health.health_conditions.as_ref().is_none_or(Vec::is_empty);
    let patch = if healthy {
        // `null` removes the member in a merge patch; an empty list would be stored as one.
        json!({"status": {"healthStatus": null}})
    } else {
        repair::carry_transition_times(old, &mut health, now);
        json!({"status": {"healthStatus": health}})
    };
    ClaimReport {
        repairs,
        patch: Some(patch),
    }
}

/// What became of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The report changes nothing stored: no request was sent.
    Unchanged,
    /// The report was written and stored.
    Written,
    /// The volume is healthy again: `status.healthStatus` was removed.
    Cleared,
    /// The report was written, but the claim the apiserver returned has no
    /// `status.healthStatus`: the `CSIVolumeHealth` gate is off and the field is dropped on save.
    Dropped,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Unchanged => "unchanged, not written",
            Outcome::Written => "status.healthStatus written",
            Outcome::Cleared => "status.healthStatus cleared",
            Outcome::Dropped => {
                "status.healthStatus dropped on save: the CSIVolumeHealth gate appears disabled"
            }
        })
    }
}

/// One probe's result: what was repaired, and what became of the write.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    /// What the repair changed in the driver's report.
    pub repairs: Vec<Repair>,
    /// What became of the write.
    pub outcome: Outcome,
}

/// A CSI driver's report of one volume (what its `NodeGetVolumeHealth` or
/// `ControllerGetVolumeHealth` returns, as conditions), made one the apiserver accepts, with
/// what was changed: the kubelet and the health monitor store it as it is, so a driver that
/// checks here never has its report retried for ever. The repairs are [`repair`]'s, with no
/// stored report (every rule applies); a report already valid is returned unchanged.
///
/// ```
/// use k8s_openapi::api::core::v1::VolumeHealthCondition;
/// use volume_health_validation::writer::volume_report;
///
/// let condition = |status: &str, reason: &str, message: &str| VolumeHealthCondition {
///     status: status.into(),
///     reason: reason.into(),
///     message: Some(message.into()),
/// };
/// // A snake_case reason given twice (kubernetes#142280's driver).
/// let (conditions, repairs) = volume_report(vec![
///     condition("Degraded", "missing_controller", "controller 1 missing"),
///     condition("Degraded", "missing_controller", "controller 2 missing"),
/// ]);
/// assert_eq!(conditions.len(), 1);
/// assert_eq!(repairs.len(), 1, "{repairs:?}");
/// let (same, none) = volume_report(conditions.clone());
/// assert_eq!((same, none.len()), (conditions, 0));
/// ```
pub fn volume_report(
    conditions: Vec<VolumeHealthCondition>,
) -> (Vec<VolumeHealthCondition>, Vec<Repair>) {
    let mut health = VolumeHealthStatus {
        health_conditions: Some(conditions),
        last_transition_time: None,
    };
    let repairs = repair::repair_volume_health_status(&mut health, None);
    (health.health_conditions.unwrap_or_default(), repairs)
}
