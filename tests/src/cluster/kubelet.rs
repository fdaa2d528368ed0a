//! The v1.37.2 kubelet as a writer: kubemark's hollow kubelet (`hollowkubelet`, built by
//! `tests/e2e/tools/build.sh` from kube-apiserver's module) with the `CSIVolumeHealth` gate on,
//! and mock CSI node plugins (`mockcsi`) whose health answers a test rewrites while the kubelet
//! probes them: one per driver for a [`HollowNode`], one for every node of a [`HollowFleet`]. The kubelet authenticates as `system:node:<name>`, so the
//! Node authorizer, NodeRestriction and the shipped authorizer apply to it as to a real one.
//! What it writes is the kubelet's own code: the status manager's pod status patches, the
//! volume health manager's probes and the CSINode manager's status updates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyper::Method;
use serde_json::{Value, json};

use super::cpu_group::CpuGroup;
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
            logs: cluster.dir().to_owned(),
            root,
        };
        let launcher = Launcher {
            bin,
            logs: &node.logs,
            priority: Priority::Control,
            group: None,
        };
        node.kubelet = Some(launcher.kubelet(
            &node.kubeconfig,
            name,
            node.root.path(),
            Periods {
                probe: KUBELET_PROBE_PERIOD,
                resync: KUBEMARK_SYNC_FREQUENCY,
            },
        )?);
        for driver in drivers {
            let health = node.root.path().join(format!("{driver}.json"));
            let process = launcher.driver(
                &format!("mockcsi-{name}-{driver}"),
                driver,
                &[(name, node.root.path())],
                &health,
                None,
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
            let ready = code == 200 && is_ready(&node);
            let (code, csinode) = cluster
                .api
                .send(
                    Method::GET,
                    &format!("/apis/storage.k8s.io/v1/csinodes/{}", self.name),
                    None,
                    None,
                )
                .await?;
            let registered =
                code == 200 && lists_drivers(&csinode, self.drivers.iter().map(|d| &*d.name));
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
        write_answers(&driver.health, answers)
    }

    /// [`create_pod`] on this node.
    pub async fn create_pod(
        &self,
        cluster: &Cluster,
        namespace: &str,
        pod: &str,
        driver: &str,
        handle: &str,
    ) -> Result<()> {
        create_pod(cluster, &self.name, namespace, pod, driver, handle).await
    }
}

/// The first answer of a labelled set to one node's storage or one volume.
#[derive(Clone, Debug)]
pub struct Served {
    /// The node asked.
    pub node: String,
    /// The volume's handle; empty for the node's storage.
    pub volume: String,
    /// When.
    pub at: k8s_openapi::jiff::Timestamp,
}

/// How many kubelets of a fleet start before it waits for them to be Ready: each start costs a
/// burst of CPU (registration, the first status of the node and of its pods), which a 2-core
/// machine takes in turns.
const FLEET_BATCH: usize = 10;

/// Many hollow nodes with one driver, all of whose node plugins one mock process serves (one
/// driver's node plugin would run on each node): the nodes of a scale test.
pub struct HollowFleet {
    /// The nodes' names, in order.
    pub names: Vec<String>,
    driver: String,
    health: PathBuf,
    served: PathBuf,
    // Dropped in this order: the kubelets, then the driver, then their directories. Behind
    // locks, so that a shared fleet can check them.
    kubelets: std::sync::Mutex<Vec<Process>>,
    plugin: std::sync::Mutex<Process>,
    roots: Vec<tempfile::TempDir>,
    _answers: tempfile::TempDir,
    // Removed once its processes are gone.
    cpu: Option<CpuGroup>,
}

impl HollowFleet {
    /// Starts `count` kubelets named `<prefix>-<i>` against `cluster`, with `periods`, and one
    /// mock plugin of `driver` for all of them answering `answers`, in batches, and
    /// waits until every node is Ready with the driver registered (within `ready` a batch).
    /// The kubelets start a probe period over `count` apart, so that their probe timers are
    /// spread over the period, as on a cluster whose nodes started at different times: a
    /// storm then reaches them evenly, whenever it begins.
    pub async fn start(
        cluster: &Cluster,
        bin: &Path,
        prefix: &str,
        count: usize,
        driver: &str,
        periods: Periods,
        answers: &Value,
    ) -> Result<Self> {
        create_csi_driver(cluster, driver).await?;
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
        let dir = tempfile::Builder::new().prefix("vhf").tempdir_in("/tmp")?;
        let health = dir.path().join(format!("{driver}.json"));
        let served = dir.path().join("served.jsonl");
        write_answers(&health, answers)?;
        let roots = (0..count)
            .map(|_| tempfile::Builder::new().prefix("vhk").tempdir_in("/tmp"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let nodes: Vec<(&str, &Path)> = names
            .iter()
            .map(String::as_str)
            .zip(roots.iter().map(tempfile::TempDir::path))
            .collect();
        // Declared before the fleet: on an early return the processes go first.
        let cpu = CpuGroup::create(&format!("volume-health-{prefix}"));
        let launcher = Launcher {
            bin,
            logs: cluster.dir(),
            priority: Priority::Node,
            group: cpu.as_ref(),
        };
        let plugin = launcher.driver(
            &format!("mockcsi-{prefix}-{driver}"),
            driver,
            &nodes,
            &health,
            Some(&served),
        )?;
        let mut fleet = HollowFleet {
            names: names.clone(),
            driver: driver.to_owned(),
            health,
            served,
            kubelets: std::sync::Mutex::new(Vec::with_capacity(count)),
            plugin: std::sync::Mutex::new(plugin),
            roots,
            _answers: dir,
            cpu: None,
        };
        let mut started = 0;
        let apart = periods.probe / u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        for batch in names.chunks(FLEET_BATCH) {
            for name in batch {
                if started > 0 {
                    tokio::time::sleep(apart).await;
                }
                let root = fleet.roots[started].path().to_owned();
                let kubeconfig = cluster.kubeconfig(Identity::Node(name))?;
                let kubelet = launcher.kubelet(&kubeconfig, name, &root, periods)?;
                fleet.lock_kubelets().push(kubelet);
                started += 1;
            }
            fleet.wait_ready(cluster, started).await?;
        }
        fleet.cpu = cpu;
        Ok(fleet)
    }

    /// The CPU priority the node processes run at, for a report.
    pub fn priority(&self) -> String {
        match &self.cpu {
            Some(group) => format!("nice 10, in {group}"),
            None => "nice 10 (no CPU group could be made)".to_owned(),
        }
    }

    /// The kubelets' process IDs, to read their CPU time from `/proc`.
    pub fn kubelet_pids(&self) -> Vec<u32> {
        self.lock_kubelets().iter().map(Process::pid).collect()
    }

    fn lock_kubelets(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        self.kubelets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the first `started` nodes are Ready with the driver registered.
    async fn wait_ready(&self, cluster: &Cluster, started: usize) -> Result<()> {
        let give_up = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_running()?;
            let (_, nodes) = cluster
                .api
                .send(Method::GET, "/api/v1/nodes", None, None)
                .await?;
            let (_, csinodes) = cluster
                .api
                .send(Method::GET, "/apis/storage.k8s.io/v1/csinodes", None, None)
                .await?;
            let by_name = |list: &Value, name: &str| {
                list["items"]
                    .as_array()
                    .and_then(|items| {
                        items
                            .iter()
                            .find(|item| item["metadata"]["name"] == name)
                            .cloned()
                    })
                    .unwrap_or(Value::Null)
            };
            let waiting: Vec<&String> = self.names[..started]
                .iter()
                .filter(|name| {
                    !is_ready(&by_name(&nodes, name))
                        || !lists_drivers(&by_name(&csinodes, name), [&*self.driver].into_iter())
                })
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() > give_up {
                bail!(
                    "{} nodes not Ready with {} registered after {READY_TIMEOUT:?}: {waiting:?}",
                    waiting.len(),
                    self.driver
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Sets what the driver answers on every node from now on (see [`HollowNode::answer`]),
    /// with a `"label"` that [`served`](Self::served) finds.
    pub fn answer(&self, answers: &Value) -> Result<()> {
        write_answers(&self.health, answers)
    }

    /// When each node's storage and each volume was first answered from the answers labelled
    /// `label`: the moment its kubelet learned of them.
    pub fn served(&self, label: &str) -> Result<Vec<Served>> {
        let text = std::fs::read_to_string(&self.served).unwrap_or_default();
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["label"] == label)
            .filter_map(|line| {
                Some(Served {
                    node: line["node"].as_str()?.to_owned(),
                    volume: line["volume"].as_str()?.to_owned(),
                    at: line["at"].as_str()?.parse().ok()?,
                })
            })
            .collect())
    }

    /// Fails when a kubelet or the driver exited.
    pub fn check_running(&self) -> Result<()> {
        for kubelet in self.lock_kubelets().iter_mut() {
            kubelet.check_running()?;
        }
        self.lock_plugin().check_running()
    }

    fn lock_plugin(&self) -> std::sync::MutexGuard<'_, Process> {
        self.plugin
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Creates claim `claim` in `namespace`, bound to a new volume of `driver` whose handle is
/// `handle`, and pod `pod` on `node` mounting it as volume `vol` (the kubelet mounts, and
/// probes, only a volume a container mounts). No controller runs: the claim's status and the
/// volume's claim reference are set as the binder would.
pub async fn create_pod(
    cluster: &Cluster,
    node: &str,
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
    create_pod_of_claim(cluster, node, namespace, pod).await
}

/// Creates pod `pod` on `node` mounting claim `<pod>-data` (which [`create_pod`] made) as
/// volume `vol`: a pod made again on the same claim.
pub async fn create_pod_of_claim(
    cluster: &Cluster,
    node: &str,
    namespace: &str,
    pod: &str,
) -> Result<()> {
    let claim = format!("{pod}-data");
    expect(
        cluster
            .api
            .send(
                Method::POST,
                &format!("/api/v1/namespaces/{namespace}/pods"),
                Some(
                    &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                    "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
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

/// kubemark's pod resync period: a pod's status is resent and its volumes processed again
/// six times as often as on a real node, which the e2e suites' short phases need.
const KUBEMARK_SYNC_FREQUENCY: Duration = Duration::from_secs(10);

/// How often a kubelet probes volume health and syncs every pod.
#[derive(Clone, Copy, Debug)]
pub struct Periods {
    /// `volumeStatsAggPeriod`: volume and storage health probes (1 minute by default).
    pub probe: Duration,
    /// `syncFrequency`: every pod synced again (1 minute by default).
    pub resync: Duration,
}

/// The CPU priority a node's processes (its kubelet, its driver's plugin) run at.
#[derive(Clone, Copy, Debug)]
enum Priority {
    /// The control plane's: the e2e suites' few nodes, which leave cores to spare.
    Control,
    /// Below the control plane's: a fleet's. On a real cluster the kubelets run on other
    /// machines and never take a core from the apiserver or etcd; here a hundred share two
    /// cores with them, and at the same priority every apiserver thread would wait behind them
    /// for a time slice. Nice 10, and one CPU group for them all, weighing as one process,
    /// where the test can make one ([`CpuGroup`]): Linux weighs each process on its own, so a
    /// hundred at nice 10 alone (weight 110 each) still outweigh the apiserver's two threads
    /// (1024 each). Linux's idle policy (`SCHED_IDLE`) was tried and was worse: at 100 nodes a
    /// storm did not finish in 10 minutes.
    Node,
}

/// Starts a node's processes: the programs of `bin`, logging under `logs`, at `priority`, in
/// `group` when there is one.
struct Launcher<'a> {
    bin: &'a Path,
    logs: &'a Path,
    priority: Priority,
    group: Option<&'a CpuGroup>,
}

impl Launcher<'_> {
    /// A command that runs `program` of `bin` at this launcher's priority (`nice` execs it:
    /// its process ID is the program's).
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        match self.priority {
            Priority::Control => Command::new(program),
            Priority::Node => {
                let mut command = Command::new("nice");
                command.arg("-n").arg("10").arg(program);
                command
            }
        }
    }

    /// Starts `command` as process `name`, then moves it into the launcher's group: its first
    /// instants run outside, which costs nothing.
    fn start(&self, name: &str, command: &mut Command) -> Result<Process> {
        let process = Process::start(name, self.logs, command)?;
        if let Some(group) = self.group {
            group
                .add(process.pid())
                .with_context(|| format!("moving {name} into {}", group.path().display()))?;
        }
        Ok(process)
    }

    /// Starts the hollow kubelet of node `name`, with its files under `root`.
    fn kubelet(
        &self,
        kubeconfig: &Path,
        name: &str,
        root: &Path,
        periods: Periods,
    ) -> Result<Process> {
        self.start(
            &format!("kubelet-{name}"),
            self.command("hollowkubelet")
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .arg(format!("--name={name}"))
                .arg(format!("--root-dir={}", root.display()))
                .arg(format!("--probe-period={}ms", periods.probe.as_millis()))
                .arg(format!("--sync-frequency={}ms", periods.resync.as_millis()))
                // The volume and CSINode managers' lines, not every sync.
                .arg("--v=2")
                // One scheduler thread: a real kubelet has its node's cores, while here a
                // hundred share two, and each one's idle threads spinning for work would take
                // from all.
                .env("GOMAXPROCS", "1"),
        )
    }

    /// Starts one mock plugin of `driver` for every node in `nodes` (its name and its
    /// kubelet's root directory), answering from `health`, and saying in `served` when each
    /// answer was first given. With many nodes, it logs registrations only.
    fn driver(
        &self,
        process: &str,
        driver: &str,
        nodes: &[(&str, &Path)],
        health: &Path,
        served: Option<&Path>,
    ) -> Result<Process> {
        let mut command = self.command("mockcsi");
        command
            .arg(format!("--name={driver}"))
            .arg(format!("--health={}", health.display()));
        if let Some(served) = served {
            command.arg(format!("--served={}", served.display()));
        }
        for (name, root) in nodes {
            command.arg(format!("--node={name}={}", root.display()));
        }
        if nodes.len() > 1 {
            command.arg("--quiet");
        }
        self.start(process, &mut command)
    }
}

/// Replaces a driver's answers file: written beside and renamed, so that no probe reads half.
fn write_answers(health: &Path, answers: &Value) -> Result<()> {
    let partial = health.with_extension("json.new");
    std::fs::write(&partial, answers.to_string())?;
    std::fs::rename(&partial, health)?;
    Ok(())
}

/// Whether a Node's `Ready` condition is `True`.
fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Whether a CSINode lists every one of `drivers`.
fn lists_drivers<'a>(csinode: &Value, mut drivers: impl Iterator<Item = &'a str>) -> bool {
    let listed = csinode["spec"]["drivers"].as_array();
    drivers.all(|driver| listed.is_some_and(|listed| listed.iter().any(|d| d["name"] == driver)))
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
