//! An example health monitor for PersistentVolumeClaims, written with kube-rs and the
//! validation library's `repair` module: what a CSI health monitor does with each probe of a
//! volume.
//!
//! For each probe, [`plan`] takes the claim as stored and the conditions the driver returned,
//! and answers the JSON merge patch of the claim's `status` subresource, or none:
//!
//! 1. the conditions are repaired ([`repair::repair_volume_health_status`]): a condition the
//!    apiserver can never accept and a repeated (status, reason) are dropped, at most 16 are
//!    kept, a message over 1024 bytes is cut. A report the apiserver refuses would be retried
//!    forever; the repaired one is accepted, with or without the volume health webhooks;
//! 2. a report that changes nothing stored is not written ([`repair::unchanged`] with
//!    [`Policy::CompareMessages`], as external-health-monitor decides: a new message is a
//!    change, a new order or a repeat is not);
//! 3. `lastTransitionTime` is the stored one while the set of (status, reason) is unchanged, and
//!    the probe's time otherwise ([`repair::carry_transition_times`]);
//! 4. a report without conditions clears the field: `{"status": {"healthStatus": null}}`.
//!
//! [`Monitor`] runs that against a cluster: it reads the claim once, then keeps what the
//! apiserver answered to its last write as the stored claim (as an informer's cache would), so
//! a probe that changes nothing sends no request at all. It writes with its own field manager,
//! [`FIELD_MANAGER`], and tells a write the apiserver dropped (the `CSIVolumeHealth` gate off)
//! from one it stored.
//!
//! The binary (`src/main.rs`) reads probe results from stdin, one JSON list of conditions per
//! line.

#[cfg(test)]
mod tests;

use std::fmt;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use volume_health_validation::repair::{self, Policy, Repair};

/// The field manager of the monitor's writes, as `csi-external-health-monitor-controller` is
/// external-health-monitor's: `managedFields` then says who wrote `status.healthStatus`.
pub const FIELD_MANAGER: &str = "volume-health-example-monitor";

/// What to do with one probe.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// What the repair changed in the driver's report, for the monitor's log.
    pub repairs: Vec<Repair>,
    /// The merge patch of the claim's `status` subresource; `None` when the report changes
    /// nothing stored.
    pub patch: Option<Value>,
}

/// The write for one probe: `stored` is the claim as the apiserver has it, `conditions` what the
/// driver returned, `now` the probe's time.
pub fn plan(
    stored: &PersistentVolumeClaim,
    conditions: Vec<VolumeHealthCondition>,
    now: &Time,
) -> Plan {
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
        return Plan {
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
    Plan {
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

/// The health monitor of one claim.
pub struct Monitor {
    claims: Api<PersistentVolumeClaim>,
    name: String,
    /// The claim as the apiserver last returned it; `None` until read, and after a failed write
    /// (whose effect is unknown).
    stored: Option<PersistentVolumeClaim>,
}

impl Monitor {
    /// The monitor of claim `name` in the namespace of `claims`.
    pub fn new(claims: Api<PersistentVolumeClaim>, name: impl Into<String>) -> Self {
        Monitor {
            claims,
            name: name.into(),
            stored: None,
        }
    }

    /// Reports one probe's conditions, at `now`: reads the claim when it is not known yet, then
    /// writes the report unless it changes nothing.
    pub async fn report(
        &mut self,
        conditions: Vec<VolumeHealthCondition>,
        now: &Time,
    ) -> kube::Result<Reported> {
        let stored = match self.stored.take() {
            Some(stored) => stored,
            None => self.claims.get_status(&self.name).await?,
        };
        let Plan { repairs, patch } = plan(&stored, conditions, now);
        let Some(patch) = patch else {
            self.stored = Some(stored);
            return Ok(Reported {
                repairs,
                outcome: Outcome::Unchanged,
            });
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let clearing = patch["status"]["healthStatus"].is_null();
        let saved = self
            .claims
            .patch_status(&self.name, &params, &Patch::Merge(&patch))
            .await?;
        let kept = saved
            .status
            .as_ref()
            .is_some_and(|status| status.health_status.is_some());
        self.stored = Some(saved);
        let outcome = match (clearing, kept) {
            (true, _) => Outcome::Cleared,
            (false, true) => Outcome::Written,
            (false, false) => Outcome::Dropped,
        };
        Ok(Reported { repairs, outcome })
    }
}
