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
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    /// use kube::Api;
    /// use volume_health_validation::writer::ClaimHealthWriter;
    /// # include!("doctest_apiserver.rs");
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let mut claim = PersistentVolumeClaim {
    /// #     metadata: ObjectMeta { name: Some("data-0".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let stored = serde_json::to_string(&claim)?;
    /// # claim.status = serde_json::from_value(serde_json::json!({"healthStatus": {
    /// #     "healthConditions": [{"status": "Degraded", "reason": "ReplicaOutOfSync"}]}}))?;
    /// # let (url, apiserver) = fake_apiserver(vec![stored, serde_json::to_string(&claim)?]).await?;
    /// // A client of the apiserver at `url` (here a stand-in on loopback).
    /// let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    /// let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    /// let mut writer = ClaimHealthWriter::new(claims, "data-0", "my-health-monitor");
    /// let degraded = VolumeHealthCondition {
    ///     status: "Degraded".into(),
    ///     reason: "ReplicaOutOfSync".into(),
    ///     message: None,
    /// };
    /// writer.report(vec![degraded], &Time("2026-03-01T10:05:00Z".parse()?)).await?;
    /// // It read the claim's status, then patched it as `my-health-monitor`.
    /// let requests = apiserver.await??;
    /// let status = "/api/v1/namespaces/default/persistentvolumeclaims/data-0/status";
    /// assert_eq!(requests[0], format!("GET {status} HTTP/1.1"));
    /// assert!(requests[1].starts_with(&format!("PATCH {status}?")));
    /// assert!(requests[1].contains("fieldManager=my-health-monitor"));
    /// # Ok(())
    /// # }
    /// ```
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
    ///
    /// What is written is [`claim_report`](super::claim_report)'s patch. After a write, the
    /// claim the apiserver returned is what the next probe is compared with.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    /// use kube::Api;
    /// use volume_health_validation::writer::{ClaimHealthWriter, Outcome};
    /// # include!("doctest_apiserver.rs");
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let mut claim = PersistentVolumeClaim {
    /// #     metadata: ObjectMeta { name: Some("data-0".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let stored = serde_json::to_string(&claim)?;
    /// # claim.status = serde_json::from_value(serde_json::json!({"healthStatus": {
    /// #     "healthConditions": [{"status": "Degraded", "reason": "ReplicaOutOfSync"}],
    /// #     "lastTransitionTime": "2026-03-01T10:05:00Z"}}))?;
    /// # // The stand-in apiserver answers the read, then the write, and nothing more.
    /// # let (url, apiserver) = fake_apiserver(vec![stored, serde_json::to_string(&claim)?]).await?;
    /// # let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    /// # let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "default");
    /// let mut writer = ClaimHealthWriter::new(claims, "data-0", "my-health-monitor");
    /// let degraded = || {
    ///     vec![VolumeHealthCondition {
    ///         status: "Degraded".into(),
    ///         reason: "ReplicaOutOfSync".into(),
    ///         message: None,
    ///     }]
    /// };
    /// let first = writer.report(degraded(), &Time("2026-03-01T10:05:00Z".parse()?)).await?;
    /// assert_eq!(first.outcome, Outcome::Written);
    /// // The same report a minute later changes nothing stored: no request is sent.
    /// let again = writer.report(degraded(), &Time("2026-03-01T10:06:00Z".parse()?)).await?;
    /// assert_eq!(again.outcome, Outcome::Unchanged);
    /// assert_eq!(apiserver.await??.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
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
