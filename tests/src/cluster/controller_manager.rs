//! kube-controller-manager with only the admission-policy status controller, which type-checks
//! ValidatingAdmissionPolicies (`status.typeChecking`); the apiserver itself only compiles them.
//! A suite may add others (the PV controller, whose claim status writes a policy must never
//! refuse).

use std::process::Command;

use anyhow::{Result, bail};
use serde_json::json;

use super::{ADMIN, Cluster, Process};

/// The controller's name in kube-controller-manager v1.37 (`names.ValidatingAdmissionPolicyStatusController`).
pub const POLICY_STATUS_CONTROLLER: &str = "validatingadmissionpolicy-status-controller";
/// The PV controller, which binds claims and writes their status (`names.PersistentVolumeBinderController`).
pub const PV_BINDER_CONTROLLER: &str = "persistentvolume-binder-controller";
/// The namespace controller, which deletes a deleted namespace's objects and then the
/// namespace (`names.NamespaceController`).
pub const NAMESPACE_CONTROLLER: &str = "namespace-controller";

/// A running kube-controller-manager, stopped when dropped.
pub struct ControllerManager {
    process: Process,
}

impl ControllerManager {
    /// Starts `kube-controller-manager` from the cluster's binary directory as the admin, with
    /// only [`POLICY_STATUS_CONTROLLER`], no leader election and no serving port.
    pub fn start(cluster: &Cluster, bin: &std::path::Path) -> Result<Self> {
        Self::start_with(cluster, bin, &[POLICY_STATUS_CONTROLLER])
    }

    /// As [`start`](Self::start), with `controllers` (kube-controller-manager's names).
    pub fn start_with(
        cluster: &Cluster,
        bin: &std::path::Path,
        controllers: &[&str],
    ) -> Result<Self> {
        let binary = bin.join("kube-controller-manager");
        if !binary.exists() {
            bail!("{} is missing: `make e2e` builds it", binary.display());
        }
        let files = cluster
            .pki()
            .client("controller-manager", ADMIN, &["system:masters"])?;
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": format!("https://{}", cluster.addr),
                "certificate-authority": cluster.pki().ca_file(),
            }}],
            "users": [{"name": "kcm", "user": {
                "client-certificate": files.cert, "client-key": files.key}}],
            "contexts": [{"name": "kcm", "context": {"cluster": "e2e", "user": "kcm"}}],
            "current-context": "kcm",
        });
        let path = cluster.dir().join("kubeconfig-controller-manager.json");
        std::fs::write(&path, kubeconfig.to_string())?;
        let process = Process::start(
            "kube-controller-manager",
            cluster.dir(),
            Command::new(binary)
                .arg(format!("--kubeconfig={}", path.display()))
                .arg(format!("--controllers={}", controllers.join(",")))
                .arg("--leader-elect=false")
                .arg("--secure-port=0"),
        )?;
        Ok(ControllerManager { process })
    }

    /// Fails when the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.process.check_running()
    }
}
