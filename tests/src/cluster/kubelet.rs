//! The v1.37.2 kubelet as a writer: kubemark's hollow kubelet (`hollowkubelet`, built by
//! `tests/e2e/tools/build.sh` from kube-apiserver's module) with the `CSIVolumeHealth` gate on,
//! and one mock CSI node plugin (`mockcsi`) per driver, whose health answers a test rewrites
//! while the kubelet probes them. The kubelet authenticates as `system:node:<name>`, so the
//! Node authorizer, NodeRestriction and the shipped authorizer apply to it as to a real one.
//! What it writes is the kubelet's own code: the status manager's pod status patches, the
//! volume health manager's probes and the CSINode manager's status updates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyper::Method;
use serde_json::{Value, json};

use super::{Cluster, Identity, Process};

/// How often the kubelet probes volume and storage health (its `VolumeStatsAggPeriod`): the
/// shortest that keeps a 2-core machine idle, so that a rewrite rate shows within seconds.
pub const KUBELET_PROBE_PERIOD: Duration = Duration::from_secs(1);

/// A node is Ready and its drivers registered within this, cold (measured: 1.3 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One mock CSI node plugin.
struct Driver {
    /// The driver's name, as its CSIDriver and volumes give it.
    name: String,
    health: PathBuf,
    process: Process,
}

/// A hollow node: the kubelet and its drivers, their files under a short root directory.
pub struct HollowNode {
    /// The node's name.
    pub name: String,
    kubelet: Option<Process>,
    drivers: Vec<Driver>,
    kubeconfig: PathBuf,
    bin: PathBuf,
    logs: PathBuf,
    // Unix socket paths must stay under 108 bytes: a directory of its own under /tmp, not the
    // cluster's. Dropped last.
    root: tempfile::TempDir,
}

impl HollowNode {
    /// Starts the kubelet of node `name` against `cluster`, then a mock plugin per driver
    /// (creating each CSIDriver, without attach, when it is missing), and waits until the
    /// node is Ready and its CSINode lists every driver. `bin` holds `hollowkubelet` and
    /// `mockcsi`.
    pub async fn start(
        cluster: &Cluster,
        bin: &Path,
        name: &str,
        drivers: &[&str],
    ) -> Result<Self> {
        for driver in drivers {
            create_csi_driver(cluster, driver).await?;
        }
        let root = tempfile::Builder::new().prefix("vhk").tempdir_in("/tmp")?;
        let mut node = HollowNode {
            name: name.to_owned(),
            kubelet: None,
            drivers: Vec::new(),
            kubeconfig: cluster.kubeconfig(Identity::Node(name))?,
            bin: bin.to_owned(),
            logs: cluster.dir().to_owned(),
            root,
        };
        node.start_kubelet()?;
        for driver in drivers {
            let health = node.root.path().join(format!("{driver}.json"));
            let process = Process::start(
                &format!("mockcsi-{name}-{driver}"),
                &node.logs,
                Command::new(bin.join("mockcsi"))
                    .arg(format!("--name={driver}"))
                    .arg(format!("--node-id={name}"))
                    .arg(format!(
                        "--endpoint={}",
                        node.root
                            .path()
                            .join("plugins")
                            .join(driver)
                            .join("csi.sock")
                            .display()
                    ))
                    .arg(format!(
                        "--registry={}",
                        node.root.path().join("plugins_registry").display()
                    ))
                    .arg(format!("--health={}", health.display())),
            )?;
            node.drivers.push(Driver {
                name: (*driver).to_owned(),
                health,
                process,
            });
        }
        node.wait_ready(cluster).await?;
        Ok(node)
    }

    fn start_kubelet(&mut self) -> Result<()> {
        let process = Process::start(
            &format!("kubelet-{}", self.name),
            &self.logs,
            Command::new(self.bin.join("hollowkubelet"))
                .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .arg(format!("--name={}", self.name))
                .arg(format!("--root-dir={}", self.root.path().display()))
                .arg(format!(
                    "--probe-period={}ms",
                    KUBELET_PROBE_PERIOD.as_millis()
                ))
                // The volume and CSINode managers' lines, not every sync.
                .arg("--v=2"),
        )?;
        self.kubelet = Some(process);
        Ok(())
    }

    /// The last lines of the kubelet's and each driver's logs, for a failed test.
    pub fn tail(&self) -> String {
        let mut tail = self.kubelet.as_ref().map(Process::tail).unwrap_or_default();
        for driver in &self.drivers {
            tail.push('\n');
            tail.push_str(&driver.process.tail());
        }
        tail
    }

    /// Fails when the kubelet or a driver exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(kubelet) = &mut self.kubelet {
            kubelet.check_running()?;
        }
        for driver in &mut self.drivers {
            driver.process.check_running()?;
        }
        Ok(())
    }

    async fn wait_ready(&mut self, cluster: &Cluster) -> Result<()> {
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_running()?;
            let (code, node) = cluster
                .api
                .send(
                    Method::GET,
                    &format!("/api/v1/nodes/{}", self.name),
                    None,
                    None,
                )
                .await?;
            let ready = code == 200
                && node["status"]["conditions"]
                    .as_array()
                    .is_some_and(|conditions| {
                        conditions
                            .iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    });
            let (code, csinode) = cluster
                .api
                .send(
                    Method::GET,
                    &format!("/apis/storage.k8s.io/v1/csinodes/{}", self.name),
                    None,
                    None,
                )
                .await?;
            let registered = code == 200
                && self.drivers.iter().all(|driver| {
                    csinode["spec"]["drivers"].as_array().is_some_and(|listed| {
                        listed.iter().any(|d| d["name"] == driver.name.as_str())
                    })
                });
            if ready && registered {
                return Ok(());
            }
            if Instant::now() > give_up {
                let tail = self.kubelet.as_ref().map(Process::tail).unwrap_or_default();
                bail!(
                    "node {} not Ready with its drivers registered after {READY_TIMEOUT:?} \
                     (Ready: {ready}, drivers registered: {registered})\n{tail}",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sets what `driver` answers from now on: `{"volumes": {<handle>: [conditions]},
    /// "storage": [conditions]}` (see `mockcsi`). Written beside and renamed, so that no probe
    /// reads half of it.
    pub fn answer(&self, driver: &str, answers: &Value) -> Result<()> {
        let driver = self
            .drivers
            .iter()
            .find(|d| d.name == driver)
            .with_context(|| format!("node {} has no driver {driver}", self.name))?;
        let partial = driver.health.with_extension("json.new");
        std::fs::write(&partial, answers.to_string())?;
        std::fs::rename(&partial, &driver.health)?;
        Ok(())
    }

    /// Creates claim `claim` in `namespace`, bound to a new volume of `driver` whose handle is
    /// `handle`, and pod `pod` on this node mounting it as volume `vol` (the kubelet mounts, and
    /// probes, only a volume a container mounts). No controller runs:
    /// the claim's status and the volume's claim reference are set as the binder would.
    pub async fn create_pod(
        &self,
        cluster: &Cluster,
        namespace: &str,
        pod: &str,
        driver: &str,
        handle: &str,
    ) -> Result<()> {
        let api = &cluster.api;
        let claim = format!("{pod}-data");
        let volume = format!("pv-{namespace}-{pod}");
        let claims = format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims");
        let created = expect(
            api.send(
                Method::POST,
                &claims,
                Some(&json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": volume,
                        "storageClassName": "",
                        "resources": {"requests": {"storage": "1Gi"}}}})),
                None,
            )
            .await?,
            201,
            "creating the claim",
        )?;
        expect(
            api.send(
                Method::POST,
                "/api/v1/persistentvolumes",
                Some(&json!({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": volume},
                    "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                        "storageClassName": "",
                        "csi": {"driver": driver, "volumeHandle": handle},
                        "claimRef": {"namespace": namespace, "name": claim,
                            "uid": created["metadata"]["uid"]}}})),
                None,
            )
            .await?,
            201,
            "creating the volume",
        )?;
        let mut bound = created;
        bound["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "1Gi"}});
        expect(
            api.send(
                Method::PUT,
                &format!("{claims}/{claim}/status"),
                Some(&bound),
                None,
            )
            .await?,
            200,
            "binding the claim",
        )?;
        expect(
            api.send(
                Method::POST,
                &format!("/api/v1/namespaces/{namespace}/pods"),
                Some(
                    &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                    "spec": {"nodeName": self.name, "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "app", "image": "registry.example/app:1",
                            "volumeMounts": [{"name": "vol", "mountPath": "/data"}]}],
                        "volumes": [{"name": "vol",
                            "persistentVolumeClaim": {"claimName": claim}}]}}),
                ),
                None,
            )
            .await?,
            201,
            "creating the pod",
        )?;
        Ok(())
    }
}

/// Creates CSIDriver `name` without attach (no VolumeAttachment: no attach controller runs),
/// unless it exists.
async fn create_csi_driver(cluster: &Cluster, name: &str) -> Result<()> {
    let (code, body) = cluster
        .api
        .send(
            Method::POST,
            "/apis/storage.k8s.io/v1/csidrivers",
            Some(
                &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                "metadata": {"name": name},
                "spec": {"attachRequired": false, "podInfoOnMount": false}}),
            ),
            None,
        )
        .await?;
    if code != 201 && code != 409 {
        bail!("creating CSIDriver {name}: {code} {body}");
    }
    Ok(())
}

fn expect((code, body): (u16, Value), want: u16, what: &str) -> Result<Value> {
    if code != want {
        bail!("{what}: {code} {body}");
    }
    Ok(body)
}
