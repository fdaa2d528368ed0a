//! A sidecar that reports a volume's health on its PersistentVolumeClaim, as a CSI health
//! monitor does, and checks the write with the library before sending it: field rules, and the
//! rule that nodes never write `status.healthStatus`. A write the apiserver (with the volume
//! health webhooks) would refuse is reported here, with the apiserver's own message, and not
//! sent.
//!
//! ```text
//! cargo run -p volume-health-validation --example sidecar_pvc_status -- \
//!     <namespace> <claim> <Degraded|DataLoss|Inaccessible> <reason> [message]
//! ```
//!
//! It reads the kubeconfig (or the pod's service account) as kube-rs does; this build of the
//! example has no TLS (add kube's `rustls-tls` feature to talk to a cluster over HTTPS).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimStatus, VolumeHealthCondition, VolumeHealthStatus,
};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};

/// Who the sidecar writes as: its service account.
const USER: &str = "system:serviceaccount:kube-system:csi-health-monitor";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [namespace, claim, status, reason, rest @ ..] = args.as_slice() else {
        bail!("usage: sidecar_pvc_status <namespace> <claim> <status> <reason> [message]");
    };
    let message = rest.first().cloned();

    let client = kube::Client::try_default().await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, namespace);
    let old = claims.get_status(claim).await?;

    // The claim as it will be after the write: the old one with the new health.
    let health = VolumeHealthStatus {
        health_conditions: Some(vec![VolumeHealthCondition {
            status: status.clone(),
            reason: reason.clone(),
            message,
        }]),
        ..Default::default()
    };
    let mut new = old.clone();
    new.status
        .get_or_insert_with(PersistentVolumeClaimStatus::default)
        .health_status = Some(health.clone());

    // The write as the apiserver's admission sees it: an UPDATE of `persistentvolumeclaims/
    // status` by this sidecar.
    let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
        .with_subresource("status")
        .with_user(UserInfo::new(USER, &["system:serviceaccounts"]));
    let policy = Settings::with_gate(true);
    // A denial comes with the Status the apiserver would answer with, message and all.
    if let Some(denied) = request
        .validate(&policy)
        .context("checking the write")?
        .status()
    {
        bail!("not sent: {}", denied.message.unwrap_or_default());
    }

    let patch = Patch::Merge(json!({"status": {"healthStatus": health}}));
    claims
        .patch_status(claim, &PatchParams::default(), &patch)
        .await?;
    println!("{namespace}/{claim}: status.healthStatus written");
    Ok(())
}
