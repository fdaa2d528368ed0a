//! [`ClaimHealthWriter`]: [`claim_report`](super::claim_report) through kube-rs.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::{ClaimReport, Outcome, Reported, claim_report};

/// The health writer of one claim.
pub struct ClaimHealthWriter {
    claims: Api<PersistentVolumeClaim>,
    name: String,
    field_manager: String,
    /// The claim as the apiserver last returned it; `None` until read, and after a failed write
    /// (whose effect is unknown).
    stored: Option<PersistentVolumeClaim>,
}

impl ClaimHealthWriter {
    /// The writer of claim `name` in the namespace of `claims`, writing as `field_manager`
    /// (`managedFields` then says who wrote `status.healthStatus`, as
    /// `csi-external-health-monitor-controller` names external-health-monitor's writes). It
    /// needs `get` and `patch` on `persistentvolumeclaims/status`.
    pub fn new(
        claims: Api<PersistentVolumeClaim>,
        name: impl Into<String>,
        field_manager: impl Into<String>,
    ) -> Self {
        ClaimHealthWriter {
            claims,
            name: name.into(),
            field_manager: field_manager.into(),
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
        let ClaimReport { repairs, patch } = claim_report(&stored, conditions, now);
        let Some(patch) = patch else {
            self.stored = Some(stored);
            return Ok(Reported {
                repairs,
                outcome: Outcome::Unchanged,
            });
        };
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
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
