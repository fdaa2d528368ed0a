//! The v1.37.2 kubelet's own code as the writer: kubemark's hollow kubelet with the
//! `CSIVolumeHealth` gate on and mock CSI node plugins whose health answers change while it
//! probes them every second, on a real kube-apiserver v1.37.2 and etcd with the gate on,
//! behind the shipped configurations: the default install, the default install with every
//! admission replica down, and the same without repair (`components/no-repair`).
//!
//! Per install: the first reports and the steady state (no review, no write); every driver
//! answer of the table on a pod's volume at once (one pod each), what the kubelet wrote, what
//! was stored, how often it wrote again, and whether the pod is gone within
//! [`GONE_WITHIN`] of its deletion (kubernetes#142280); every storage answer in turn on one
//! driver's CSINode entry; the webhook's gate turned off and on while the kubelet runs; a
//! second kubelet. The apiserver's audit log tells each kubelet write's answer, and the
//! resourceVersion whether a resend wrote etcd. The measured tables must equal the ones in
//! `docs/compatibility.md` (every answer, per install) and `docs/repair.md` (what a repaired
//! report costs) (`VOLUME_HEALTH_E2E_WRITE_DOCS=1` writes them there). Slow, so ignored:
//! `make e2e` builds the binaries and runs it.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    AuditMark, Cluster, ControlPlane, HollowNode, Identity, KUBELET_PROBE_PERIOD, StatusWrite,
    bin_dir, create_namespace,
};
use volume_health_tests::phases::Phases;

const NAMESPACE: &str = "kubelet-writes";
const NODE: &str = "node1";
const OTHER_NODE: &str = "node2";
/// The driver of every pod's volume; its storage answer stays valid.
const VOLUMES: &str = "a.csi.example";
/// The driver whose storage answers the table goes through.
const STORAGE: &str = "b.csi.example";
/// A pod whose volume is healthy again is deleted and gone well within this (measured: under
/// a second); one held by a refused status write never is (kubernetes#142280).
const GONE_WITHIN: Duration = Duration::from_secs(15);
/// The first writes after an answer changed come within a probe period and a round trip; the
/// stored object's resourceVersion is read after this, to tell whether a resend wrote etcd.
const SETTLE: Duration = Duration::from_secs(3);
/// How long a pod's resends are counted once every row's first write is in: more than the
/// status manager's 10 s resync, so that a write it sends again is seen. Counted only after
/// [`SETTLE`]: the kubelet retries a refused pod status with every other pod's change too
/// (`status_manager.go`, `syncBatch`), and the rows' own first writes are such changes.
const POD_WINDOW: Duration = Duration::from_secs(13);
/// How long the kubelet's writes of a storage answer go on after it changed: the retries of a
/// refused write within its probe (10 ms to 1.25 s apart, four in all), and a probe.
const QUIET: Duration = Duration::from_secs(3);
/// How much longer a CSINode's writes are watched per storage answer: some probe ticks.
const STORAGE_WINDOW: Duration = Duration::from_secs(5);
const DOC: &str = "docs/compatibility.md";
const BEGIN: &str = "<!-- kubelet table: begin -->";
const END: &str = "<!-- kubelet table: end -->";
const REPAIR_DOC: &str = "docs/repair.md";
const COSTS_BEGIN: &str = "<!-- repaired writers: begin -->";
const COSTS_END: &str = "<!-- repaired writers: end -->";

/// The installs measured, in the table's column order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Install {
    Default,
    ReplicasDown,
    NoRepair,
}

impl Install {
    const ALL: [Install; 3] = [Install::Default, Install::ReplicasDown, Install::NoRepair];

    fn heading(self) -> &'static str {
        match self {
            Install::Default => "default install",
            Install::ReplicasDown => "every replica down",
            Install::NoRepair => "without repair",
        }
    }

    fn repairs(self) -> bool {
        self == Install::Default
    }

    async fn start(self) -> anyhow::Result<ControlPlane> {
        let mut plane = match self {
            Install::Default | Install::ReplicasDown => ControlPlane::start(true, &[]).await?,
            Install::NoRepair => ControlPlane::start_without_repair(true, &[]).await?,
        };
        if self == Install::ReplicasDown {
            plane.admission.stop();
        }
        Ok(plane)
    }
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!({"status": status, "reason": reason, "message": message})
}

/// A valid report: every pod's first answer, and the steady state.
fn valid() -> Vec<Value> {
    vec![condition("DEGRADED", "DiskSlow", "latency above 100 ms")]
}

/// The driver answers on a pod's volume, each after the valid first report: (row, answer).
/// The kubelet writes only when the set of (status, reason) changes, so each answer but the
/// first changes it.
fn pod_answers() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "the same (status, reason), a new message",
            vec![condition("DEGRADED", "DiskSlow", "latency above 300 ms")],
        ),
        (
            "another valid report",
            vec![condition("INACCESSIBLE", "PathMissing", "mount gone")],
        ),
        (
            "two conditions with one (status, reason) (kubernetes#142280)",
            vec![
                condition("INACCESSIBLE", "PathMissing", "mount gone"),
                condition("INACCESSIBLE", "PathMissing", "mount still gone"),
            ],
        ),
        (
            "17 conditions",
            (0..17)
                .map(|i| condition("DEGRADED", &format!("Slow{i}"), "slow"))
                .collect(),
        ),
        (
            "a reason that can never be valid (`slow io!`)",
            vec![condition("DEGRADED", "slow io!", "slow")],
        ),
        (
            "a 1025-byte message",
            vec![condition("DEGRADED", "DiskVerySlow", &"m".repeat(1025))],
        ),
        (
            "an UNKNOWN status beside a valid condition",
            vec![
                condition("UNKNOWN_VOLUME_HEALTH_TYPE", "Whatever", "?"),
                condition("DATA_LOSS", "BlocksLost", "lost"),
            ],
        ),
        ("an empty answer (healthy again)", vec![]),
    ]
}

/// The driver answers on a node's storage, in turn, each after the same valid report: (row,
/// answer). The kubelet writes only when the set of (status, reason, capability) changes, so
/// each answer changes it.
fn storage_answers() -> Vec<(&'static str, Vec<Value>)> {
    let mode = |mut c: Value, access: &str| {
        c["accessMode"] = json!(access);
        c["volumeMode"] = json!("mount");
        c
    };
    vec![
        (
            "a valid report",
            vec![condition(
                "STORAGE_DEGRADED",
                "PoolSlow",
                "pool latency high",
            )],
        ),
        (
            "two conditions the kubelet cannot tell apart",
            vec![
                condition("STORAGE_DEGRADED", "PoolDegraded", "one disk lost"),
                condition("STORAGE_DEGRADED", "PoolDegraded", "two disks lost"),
            ],
        ),
        (
            "two conditions told apart by their volume capability",
            vec![
                mode(
                    condition("STORAGE_UNREACHABLE", "PoolDown", "down"),
                    "SINGLE_NODE_WRITER",
                ),
                mode(
                    condition("STORAGE_UNREACHABLE", "PoolDown", "down"),
                    "MULTI_NODE_MULTI_WRITER",
                ),
            ],
        ),
        (
            "17 conditions",
            (0..17)
                .map(|i| condition("STORAGE_DEGRADED", &format!("Pool{i}"), "slow"))
                .collect(),
        ),
        (
            "a reason that can never be valid (`pool slow!`)",
            vec![condition("STORAGE_DEGRADED", "pool slow!", "slow")],
        ),
        (
            "a 1025-byte message",
            vec![condition(
                "STORAGE_DEGRADED",
                "PoolVerySlow",
                &"m".repeat(1025),
            )],
        ),
        (
            "an UNKNOWN status beside a valid condition",
            vec![
                condition("UNKNOWN_STORAGE_HEALTH_ERROR_TYPE", "Whatever", "?"),
                condition("STORAGE_UNREACHABLE", "PoolDown", "down"),
            ],
        ),
        ("an empty answer (healthy again)", vec![]),
    ]
}

/// How an audited write reads in the table: `200`, `200 repaired`, `422 in-tree`, `403 webhook`.
fn answer(write: &StatusWrite) -> String {
    match (write.code, write.by_webhook()) {
        (200 | 201, _) if write.repaired => "200 repaired".to_owned(),
        (200 | 201, _) => "200".to_owned(),
        (code, true) => format!("{code} webhook"),
        (code, false) => format!("{code} in-tree"),
    }
}

/// The status writes of `resource`/`name` by `node`'s kubelet after `mark`, in order.
fn kubelet_writes(
    cluster: &Cluster,
    mark: AuditMark,
    node: &str,
    resource: &str,
    name: &str,
) -> Vec<StatusWrite> {
    let writes = cluster.status_writes(mark).unwrap_or_default();
    of_object(&writes, node, resource, name).cloned().collect()
}

/// The writes of `resource`/`name` by `node`'s kubelet among `writes`, in order.
fn of_object<'a>(
    writes: &'a [StatusWrite],
    node: &'a str,
    resource: &'a str,
    name: &'a str,
) -> impl Iterator<Item = &'a StatusWrite> {
    writes
        .iter()
        .filter(move |w| w.by_node(node) && w.resource == resource && w.name == name)
}

/// "`200` ×2, `422 in-tree` ×1": each distinct answer, in order of first appearance.
fn answers(writes: &[StatusWrite]) -> String {
    if writes.is_empty() {
        return "no write".to_owned();
    }
    let mut counted: Vec<(String, usize)> = Vec::new();
    for write in writes {
        let answer = answer(write);
        match counted.iter_mut().find(|(a, _)| *a == answer) {
            Some((_, n)) => *n += 1,
            None => counted.push((answer, 1)),
        }
    }
    counted
        .iter()
        .map(|(answer, _)| answer.clone())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How often the kubelet wrote again, as a rate class that does not move with the window's
/// alignment: none, about once per status manager resync (10 s), or about once per probe.
fn rewrite_rate(writes: usize, window: Duration) -> &'static str {
    let ticks = window.as_secs_f64() / KUBELET_PROBE_PERIOD.as_secs_f64();
    match writes {
        0 => "not sent again",
        n if (n as f64) < ticks / 3.0 => "sent again every resync (10 s)",
        _ => "sent again every probe",
    }
}

/// The stored `volumeHealth` conditions of the pod's volume `vol`.
async fn stored_volume_health(cluster: &Cluster, pod: &str) -> Value {
    let (_, pod) = cluster
        .api
        .send(Method::GET, &pod_path(pod), None, None)
        .await
        .unwrap();
    pod["status"]["volumeHealth"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["name"] == "vol"))
        .map(|e| e["healthConditions"].clone())
        .unwrap_or(Value::Null)
}

/// The stored `storageHealth` conditions of `driver` on `node`'s CSINode.
async fn stored_storage_health(cluster: &Cluster, node: &str, driver: &str) -> Value {
    let (_, csinode) = cluster
        .api
        .send(
            Method::GET,
            &format!("/apis/storage.k8s.io/v1/csinodes/{node}"),
            None,
            None,
        )
        .await
        .unwrap();
    csinode["status"]["storageHealth"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["name"] == driver))
        .map(|e| e["healthConditions"].clone())
        .unwrap_or(Value::Null)
}

fn pod_path(pod: &str) -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}")
}

/// The object's `metadata.resourceVersion`: it moves only when etcd is written.
async fn resource_version(cluster: &Cluster, path: &str) -> Value {
    let (_, object) = cluster
        .api
        .send(Method::GET, path, None, None)
        .await
        .unwrap();
    object["metadata"]["resourceVersion"].clone()
}

/// What a repaired writer costs: how often it sent the write again, and whether each resend
/// wrote etcd (a repaired resend of the same report is the same stored object).
fn cost(writes: usize, window: Duration, changed: bool) -> (&'static str, &'static str) {
    let each = match (writes, changed) {
        (0, _) => "—",
        (_, true) => "the stored object changed",
        (_, false) => "the same stored object, no etcd write",
    };
    (rewrite_rate(writes, window), each)
}

/// The pod's phase, `Gone` when it no longer exists.
async fn pod_phase(cluster: &Cluster, pod: &str) -> String {
    let (code, body) = cluster
        .api
        .send(Method::GET, &pod_path(pod), None, None)
        .await
        .unwrap();
    match code {
        404 => "Gone".to_owned(),
        _ => body["status"]["phase"].as_str().unwrap_or("").to_owned(),
    }
}

/// Polls `check` every 100 ms until it holds or `within` passes; answers how long it took.
async fn wait_for<F, Fut>(within: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Some(start.elapsed());
        }
        if start.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod_name(row: usize) -> String {
    format!("row-{row}")
}

fn handle(row: usize) -> String {
    format!("vol-{row}")
}

/// The volumes driver's answers: `volumes` for the pods, a valid storage report.
fn volumes_answer(volumes: &BTreeMap<String, Vec<Value>>) -> Value {
    json!({"volumes": volumes, "storage": [condition("STORAGE_DEGRADED", "PoolSlow", "slow")]})
}

/// What a row of the tables is about, in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Subject {
    Pod,
    Storage,
    Switch,
}

impl Subject {
    fn what(self) -> &'static str {
        match self {
            Subject::Pod => "a pod's volume",
            Subject::Storage => "the node's storage",
            Subject::Switch => "the runtime switch",
        }
    }
}

/// A row of the tables: its subject, its place among the subject's answers, its label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    subject: Subject,
    index: usize,
    label: &'static str,
}

impl Row {
    fn new(subject: Subject, index: usize, label: &'static str) -> Self {
        Row {
            subject,
            index,
            label,
        }
    }
}

/// What one install measured: a cell per row of the answers' table, and, for a repaired
/// report, how often it was sent again and what each resend cost.
#[derive(Default)]
struct Cells {
    answers: BTreeMap<Row, String>,
    costs: BTreeMap<Row, (&'static str, &'static str)>,
}

/// Runs every phase against `install`; answers its column of the table.
async fn measure(phases: &mut Phases, install: Install) -> Cells {
    let name = install.heading();
    let mut cells = Cells::default();
    let Some((mut plane, mut node)) = phases
        .phase(&format!("{name}: control plane and {NODE}"))
        .run(async {
            let plane = install.start().await?;
            create_namespace(&plane.cluster.client(Identity::Admin).await?, NAMESPACE).await?;
            let node =
                HollowNode::start(&plane.cluster, &bin_dir()?, NODE, &[VOLUMES, STORAGE]).await?;
            anyhow::Ok((plane, node))
        })
        .await
    else {
        return cells;
    };
    let cluster = &plane.cluster;
    let pods = pod_answers();
    let mut volumes: BTreeMap<String, Vec<Value>> =
        (0..pods.len()).map(|row| (handle(row), valid())).collect();

    let first = format!("{name}: first reports");
    phases
        .phase(&first)
        .run(async {
            node.answer(VOLUMES, &volumes_answer(&volumes))?;
            let created = Instant::now();
            for row in 0..pods.len() {
                node.create_pod(cluster, NAMESPACE, &pod_name(row), VOLUMES, &handle(row))
                    .await?;
            }
            for row in 0..pods.len() {
                let pod = pod_name(row);
                wait_for(Duration::from_secs(60), || async {
                    pod_phase(cluster, &pod).await == "Running"
                        && stored_volume_health(cluster, &pod).await[0]["reason"] == "DiskSlow"
                })
                .await
                .ok_or_else(|| {
                    anyhow::anyhow!("{pod}: not Running with its first report\n{}", node.tail())
                })?;
            }
            wait_for(Duration::from_secs(30), || async {
                !stored_storage_health(cluster, NODE, VOLUMES)
                    .await
                    .is_null()
            })
            .await
            .ok_or_else(|| anyhow::anyhow!("{VOLUMES}: no storageHealth stored"))?;
            eprintln!(
                "{name}: {} pods Running with their first reports {:?} after the first was created",
                pods.len(),
                created.elapsed()
            );
            anyhow::Ok(())
        })
        .await;

    phases
        .phase(&format!("{name}: steady state"))
        .after(&first)
        .run(async {
            let reviews = plane.reviews().await.unwrap_or(0.0);
            let mark = cluster.audit_mark();
            tokio::time::sleep(Duration::from_secs(12)).await;
            let mut writes = kubelet_writes(cluster, mark, NODE, "csinodes", NODE).len();
            for row in 0..pods.len() {
                writes += kubelet_writes(cluster, mark, NODE, "pods", &pod_name(row)).len();
            }
            assert_eq!(writes, 0, "the kubelet wrote in its steady state");
            if install != Install::ReplicasDown {
                let sent = plane.reviews().await.unwrap() - reviews;
                assert_eq!(sent, 0.0, "reviews in the kubelet's steady state");
            }
        })
        .await;

    let pod_phase_name = format!("{name}: driver answers on pods");
    phases
        .phase(&pod_phase_name)
        .after(&first)
        .timeout(Duration::from_secs(180))
        .run(async {
            let mark = cluster.audit_mark();
            for (row, (_, answer)) in pods.iter().enumerate() {
                volumes.insert(handle(row), answer.clone());
            }
            node.answer(VOLUMES, &volumes_answer(&volumes))?;
            tokio::time::sleep(SETTLE).await;
            // The audit log read once before the window and once after it, for every row.
            let (early, settled) = cluster.status_writes_after(mark)?;
            let mut versions = Vec::new();
            for row in 0..pods.len() {
                versions.push(resource_version(cluster, &pod_path(&pod_name(row))).await);
            }
            tokio::time::sleep(POD_WINDOW).await;
            let late = cluster.status_writes(settled)?;
            let mut refused = Vec::new();
            for (row, (label, _)) in pods.iter().enumerate() {
                let pod = pod_name(row);
                let changed = resource_version(cluster, &pod_path(&pod)).await != versions[row];
                let all: Vec<StatusWrite> = of_object(&early, NODE, "pods", &pod)
                    .chain(of_object(&late, NODE, "pods", &pod))
                    .cloned()
                    .collect();
                // The resends after the settle; a first write that comes late is still the
                // first, not a resend.
                let resent = of_object(&late, NODE, "pods", &pod).count();
                let again = resent.min(all.len().saturating_sub(1));
                let stored = stored_volume_health(cluster, &pod).await;
                eprintln!(
                    "{name}: {label}: {} writes ({}), {} sent again; stored {stored}",
                    all.len(),
                    answers(&all),
                    again
                );
                if all.iter().any(StatusWrite::by_webhook) {
                    refused.push(format!("{label}: {}", answers(&all)));
                }
                if install.repairs() && all.iter().any(|w| w.code != 200) {
                    refused.push(format!("{label}: {} with repair on", answers(&all)));
                }
                let key = Row::new(Subject::Pod, row, label);
                cells.answers.insert(
                    key,
                    format!("{}; {}", answers(&all), rewrite_rate(again, POD_WINDOW)),
                );
                if all.iter().any(|w| w.repaired) {
                    cells.costs.insert(key, cost(again, POD_WINDOW, changed));
                }
            }
            assert!(refused.is_empty(), "kubelet writes refused: {refused:#?}");
            anyhow::Ok(())
        })
        .await;

    phases
        .phase(&format!("{name}: pods deleted (kubernetes#142280)"))
        .after(&pod_phase_name)
        .run(async {
            for row in 0..pods.len() {
                let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/{}", pod_name(row));
                let (code, body) = cluster.api.send(Method::DELETE, &path, None, None).await?;
                anyhow::ensure!(code == 200, "deleting {path}: {code} {body}");
            }
            let deleted = Instant::now();
            let mut stuck = Vec::new();
            for (row, (label, _)) in pods.iter().enumerate() {
                let pod = pod_name(row);
                let left = GONE_WITHIN.saturating_sub(deleted.elapsed());
                let gone =
                    wait_for(left, || async { pod_phase(cluster, &pod).await == "Gone" }).await;
                let key = Row::new(Subject::Pod, row, label);
                let cell = cells.answers.entry(key).or_default();
                match gone {
                    Some(_) => cell.push_str("; gone when deleted"),
                    None => {
                        cell.push_str("; stays Terminating");
                        stuck.push(*label);
                    }
                }
                eprintln!(
                    "{name}: {label}: {:?} after the deletion: {}",
                    deleted.elapsed(),
                    pod_phase(cluster, &pod).await
                );
            }
            // Without repair (or with every replica down, in-tree's answer), kubernetes#142280's
            // kin, which in-tree refuses, hold their pods: the table shows it.
            anyhow::ensure!(
                !install.repairs() || stuck.is_empty(),
                "pods not gone within {GONE_WITHIN:?} of their deletion: {stuck:?}"
            );
            anyhow::Ok(())
        })
        .await;

    let storage_phase = format!("{name}: driver answers on storage");
    phases
        .phase(&storage_phase)
        .after(&first)
        .timeout(Duration::from_secs(180))
        .run(async {
            let began = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs_f64();
            let mut refused = Vec::new();
            for (row, (label, answer)) in storage_answers().iter().enumerate() {
                // Each answer after the same valid report, once the last answer's writes are
                // over: a refused one is retried within its probe for up to 1.6 s.
                node.answer(STORAGE, &json!({"storage": valid_storage("Separator")}))?;
                wait_for(Duration::from_secs(10), || async {
                    stored_storage_health(cluster, NODE, STORAGE).await[0]["reason"] == "Separator"
                })
                .await
                .ok_or_else(|| anyhow::anyhow!("{STORAGE}: the valid report was not stored"))?;
                tokio::time::sleep(QUIET).await;
                let mark = cluster.audit_mark();
                node.answer(STORAGE, &json!({"storage": answer}))?;
                tokio::time::sleep(SETTLE).await;
                let csinode = format!("/apis/storage.k8s.io/v1/csinodes/{NODE}");
                let version = resource_version(cluster, &csinode).await;
                tokio::time::sleep(STORAGE_WINDOW).await;
                let changed = resource_version(cluster, &csinode).await != version;
                let all = kubelet_writes(cluster, mark, NODE, "csinodes", NODE);
                let again = all.len().saturating_sub(1);
                let stored = stored_storage_health(cluster, NODE, STORAGE).await;
                eprintln!(
                    "{name}: storage {label}: {} writes ({}), {} sent again; stored {stored}",
                    all.len(),
                    answers(&all),
                    again
                );
                if all.iter().any(StatusWrite::by_webhook) {
                    refused.push(format!("{label}: {}", answers(&all)));
                }
                let key = Row::new(Subject::Storage, row, label);
                if all.iter().any(|w| w.repaired) {
                    cells
                        .costs
                        .insert(key, cost(again, SETTLE + STORAGE_WINDOW, changed));
                }
                cells.answers.insert(
                    key,
                    format!(
                        "{}; {}",
                        answers(&all),
                        rewrite_rate(again, SETTLE + STORAGE_WINDOW)
                    ),
                );
            }
            assert!(
                refused.is_empty(),
                "kubelet writes refused by the webhooks: {refused:#?}"
            );
            // A repaired report names its driver for the repairs alert.
            if install.repairs() {
                let driver = format!(r#"driver="{STORAGE}""#);
                let repaired_at = plane
                    .admission
                    .metric(
                        "volume_health_webhook_driver_last_repair_timestamp_seconds",
                        &[r#"resource="csinodes""#, &driver],
                    )
                    .await?;
                anyhow::ensure!(
                    repaired_at >= began.floor(),
                    "{STORAGE}'s repairs are not in the metric ({repaired_at}, phase began {began})"
                );
            }
            node.check_running()?;
            anyhow::Ok(())
        })
        .await;

    if install == Install::Default {
        phases
            .phase(&format!("{name}: a second kubelet"))
            .after(&first)
            .run(async {
                let other = HollowNode::start(cluster, &bin_dir()?, OTHER_NODE, &[VOLUMES]).await?;
                let mark = cluster.audit_mark();
                other.answer(VOLUMES, &json!({"storage": valid_storage("Node2Pool")}))?;
                node.answer(VOLUMES, &json!({"storage": valid_storage("Node1Pool")}))?;
                wait_for(Duration::from_secs(10), || async {
                    stored_storage_health(cluster, OTHER_NODE, VOLUMES).await[0]["reason"]
                        == "Node2Pool"
                        && stored_storage_health(cluster, NODE, VOLUMES).await[0]["reason"]
                            == "Node1Pool"
                })
                .await
                .ok_or_else(|| {
                    anyhow::anyhow!("each node's report was not stored on its own CSINode")
                })?;
                let writes: Vec<StatusWrite> = [
                    (NODE, NODE),
                    (OTHER_NODE, OTHER_NODE),
                    (NODE, OTHER_NODE),
                    (OTHER_NODE, NODE),
                ]
                .iter()
                .flat_map(|(user, csinode)| {
                    kubelet_writes(cluster, mark, user, "csinodes", csinode)
                })
                .collect();
                anyhow::ensure!(
                    writes.iter().all(|w| w.code == 200),
                    "a kubelet's write refused: {}",
                    answers(&writes)
                );
                anyhow::Ok(())
            })
            .await;
    }

    if install == Install::Default {
        phases
            .phase(&format!("{name}: the runtime switch turned off and on"))
            .after(&first)
            .run(runtime_switch(&mut plane, &node, &mut cells))
            .await;
    }

    cells
}

/// The webhook's gate turned off (drop on save) while the kubelet runs, then on again: a
/// changed storage report of a driver whose entry is stored, and a new pod's first report.
async fn runtime_switch(
    plane: &mut ControlPlane,
    node: &HollowNode,
    cells: &mut Cells,
) -> anyhow::Result<()> {
    plane.set_webhook(false, &[]).await?;
    let cluster = &plane.cluster;
    let mark = cluster.audit_mark();
    let (pod, volume) = ("switched", "vol-switched");
    node.answer(
        VOLUMES,
        &json!({"volumes": {volume: valid()}, "storage": valid_storage("SwitchedOff")}),
    )?;
    node.create_pod(cluster, NAMESPACE, pod, VOLUMES, volume)
        .await?;
    wait_for(Duration::from_secs(30), || async {
        pod_phase(cluster, pod).await == "Running"
    })
    .await
    .ok_or_else(|| anyhow::anyhow!("{pod}: not Running"))?;
    tokio::time::sleep(SETTLE).await;
    let settled = cluster.audit_mark();
    tokio::time::sleep(POD_WINDOW).await;
    let stored = |value: &Value| {
        if value.is_null() {
            "not stored"
        } else {
            "stored"
        }
    };
    let report = stored_storage_health(cluster, NODE, VOLUMES).await;
    let changed = report[0]["reason"] == "SwitchedOff";
    let writes = kubelet_writes(cluster, mark, NODE, "csinodes", NODE);
    let again = kubelet_writes(cluster, settled, NODE, "csinodes", NODE);
    cells.answers.insert(
        Row::new(
            Subject::Switch,
            0,
            "the webhook's gate off: a changed storage report",
        ),
        format!(
            "{} ({}); {}",
            answers(&writes),
            if changed { "stored" } else { "not stored" },
            rewrite_rate(again.len(), POD_WINDOW)
        ),
    );
    let health = stored_volume_health(cluster, pod).await;
    let writes = kubelet_writes(cluster, mark, NODE, "pods", pod);
    let again = kubelet_writes(cluster, settled, NODE, "pods", pod);
    cells.answers.insert(
        Row::new(
            Subject::Switch,
            1,
            "the webhook's gate off: a new pod's first report",
        ),
        format!(
            "{} ({}); {}",
            answers(&writes),
            stored(&health),
            rewrite_rate(again.len(), POD_WINDOW)
        ),
    );
    eprintln!("the webhook's gate off: storage {report}, pod {health}");

    plane.set_webhook(true, &[]).await?;
    let cluster = &plane.cluster;
    let on = Instant::now();
    wait_for(Duration::from_secs(30), || async {
        stored_storage_health(cluster, NODE, VOLUMES).await[0]["reason"] == "SwitchedOff"
            && !stored_volume_health(cluster, pod).await.is_null()
    })
    .await
    .ok_or_else(|| anyhow::anyhow!("the reports were not stored once the gate was on again"))?;
    eprintln!(
        "the webhook's gate on again: both reports stored {:?} later",
        on.elapsed()
    );
    Ok(())
}

/// A valid storage report whose reason is `reason`.
fn valid_storage(reason: &str) -> Vec<Value> {
    vec![condition("STORAGE_DEGRADED", reason, "slow")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver, etcd and hollow kubelets: `make e2e`"]
async fn the_real_kubelet_is_never_refused_by_the_default_install() {
    let started = Instant::now();
    let mut phases = Phases::new("e2e_kubelet", Duration::from_secs(120));
    let mut columns = Vec::new();
    for install in Install::ALL {
        columns.push((install, measure(&mut phases, install).await));
    }
    let rows: std::collections::BTreeSet<Row> = columns
        .iter()
        .flat_map(|(_, cells)| cells.answers.keys().copied())
        .collect();
    let mut table = String::new();
    write!(table, "| the driver answers | ").unwrap();
    let headings: Vec<&str> = columns.iter().map(|(i, _)| i.heading()).collect();
    writeln!(table, "{} |", headings.join(" | ")).unwrap();
    writeln!(table, "|---|{}", "---|".repeat(columns.len())).unwrap();
    for row in &rows {
        let cells: Vec<&str> = columns
            .iter()
            .map(|(_, cells)| cells.answers.get(row).map_or("—", String::as_str))
            .collect();
        let (what, label) = (row.subject.what(), row.label);
        writeln!(table, "| {what}: {label} | {} |", cells.join(" | ")).unwrap();
    }
    // What each repaired report costs, with the default install.
    let mut costs = String::from(
        "| the driver answers (repaired) | sent again | each resend |\n|---|---|---|\n",
    );
    if let Some((_, cells)) = columns.iter().find(|(i, _)| *i == Install::Default) {
        for (row, (rate, each)) in &cells.costs {
            let (what, label) = (row.subject.what(), row.label);
            writeln!(costs, "| {what}: {label} | {rate} | {each} |").unwrap();
        }
    }
    if phases.all_passed() {
        volume_health_tests::documented(DOC, BEGIN, END, &table);
        volume_health_tests::documented(REPAIR_DOC, COSTS_BEGIN, COSTS_END, &costs);
    } else {
        eprintln!("{table}\n{costs}");
    }
    eprintln!("e2e_kubelet: {:?}", started.elapsed());
    phases.finish();
}
