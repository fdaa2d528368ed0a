//! The cost of the webhook hop, measured through a real kube-apiserver v1.37.2 with the
//! shipped configurations installed, by the kubelet over kube-rs. The configurations send the
//! webhooks only writes whose answer can differ from in-tree's, so the benchmark measures
//! the writes that still pay a hop and shows that the others do not:
//!
//! - a pod's first `volumeHealth` report (not sent: drop on save's entries are installed
//!   only with the webhook's gate off, and a valid report has nothing to repair), next to the
//!   same write of a pod in the `volume-health` namespace, which the configurations'
//!   namespaceSelector leaves out; the report is cleared between rounds, untimed;
//! - a changed report of a pod whose `volumeHealth` is stored (not sent), next to the same
//!   baseline pod's changed report, and the same write of a third pod selected by the native
//!   policies' bindings (drop on save and repair with an `objectSelector`): the apiserver
//!   evaluating the policies in process; and a fourth such pod's changed report holding a
//!   duplicate pair, which the repair policy repairs;
//! - a change of a CSINode's `storageHealth` by a writer other than its node (sent to
//!   `/validate`, the storage condition identity rule). CSINode is cluster-scoped, so no
//!   namespace leaves one out: its baseline is the same write in alternating blocks with the
//!   validating configuration deleted, each block starting once the apiserver has seen the
//!   change. The kubelet's own changes, interleaved, are never sent (counted).
//!
//! The pod series are written in rotating order in every round, on the same apiserver, node
//! and connection, so that machine noise hits each alike. Prints p50 and p99 of each series,
//! the differences and ratios, and the reviews the webhooks received for each kind of write.
//!
//! Needs the e2e binaries (`VOLUME_HEALTH_E2E_BIN`) and the release server
//! (`VOLUME_HEALTH_E2E_WEBHOOK`); `make bench` builds and passes both. `--quick`: fewer writes.

// A benchmark: a failed setup step should stop the run loudly.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use volume_health_policies::{self as policies, Action};
use volume_health_tests::cluster::{
    Cluster, ControlPlane, Identity, bound_pod, create_namespace, volume_health,
};

const NODE: &str = "node-1";
const DRIVER: &str = "csi.example.com";
/// The label the native bindings select pods by.
const NATIVE_LABEL: &str = "volume-health.example/native-policies";

/// Every generated policy, and the bindings with `Deny`; the drop-on-save and repair bindings
/// select the labelled pods only.
async fn bind_native(cluster: &Cluster) {
    for object in policies::policies(&[])
        .iter()
        .chain(&policies::bindings(Action::Deny))
    {
        cluster.create_policy(object).await.unwrap();
    }
    for mut binding in policies::drop_on_save_bindings()
        .into_iter()
        .chain(policies::repair_bindings())
    {
        binding["spec"]["matchResources"] =
            json!({"objectSelector": {"matchLabels": {NATIVE_LABEL: "true"}}});
        cluster.create_policy(&binding).await.unwrap();
    }
}

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One series of timed writes.
struct Series {
    name: &'static str,
    took: Vec<Duration>,
}

impl Series {
    fn new(name: &'static str) -> Self {
        Series {
            name,
            took: Vec::new(),
        }
    }

    fn at(&self, p: f64) -> Duration {
        let mut sorted = self.took.clone();
        sorted.sort();
        percentile(&sorted, p)
    }

    fn print(&self) {
        println!(
            "  {:<50}: p50 {:.2} ms, p99 {:.2} ms",
            self.name,
            ms(self.at(0.5)),
            ms(self.at(0.99))
        );
    }

    /// What this series adds to `baseline`, at p50 and p99.
    fn compare(&self, label: &str, baseline: &Series) {
        for (name, p) in [("p50", 0.5), ("p99", 0.99)] {
            let (a, b) = (self.at(p), baseline.at(p));
            println!(
                "  {label} {name}: {:+.2} ms ({:.2}x)",
                ms(a) - ms(b),
                a.as_secs_f64() / b.as_secs_f64()
            );
        }
    }
}

/// Times one write.
async fn timed<T>(write: impl std::future::Future<Output = kube::Result<T>>) -> (T, Duration) {
    let started = Instant::now();
    let answer = write.await.unwrap();
    (answer, started.elapsed())
}

fn stored_volume_health(pod: &Pod) -> bool {
    serde_json::to_value(pod).unwrap()["status"]["volumeHealth"].is_array()
}

/// The conditions stored of a pod's first `volumeHealth` entry.
fn conditions(pod: &Pod) -> usize {
    serde_json::to_value(pod).unwrap()["status"]["volumeHealth"][0]["healthConditions"]
        .as_array()
        .map_or(0, Vec::len)
}

/// A report of volume `vol` whose driver gave one (status, reason) twice, as in
/// kubernetes#142280: in-tree refuses it, repair keeps the first.
fn duplicate_pair(message: &str) -> Value {
    json!({"status": {"volumeHealth": [{"name": "vol", "healthConditions": [
        {"status": "Degraded", "reason": "DiskSlow", "message": message},
        {"status": "Degraded", "reason": "DiskSlow", "message": "again"}]}]}})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let (warmup, writes) = if quick { (20, 100) } else { (100, 1000) };
    let plane = ControlPlane::start(true, &[]).await.unwrap();
    let admin = plane.cluster.client(Identity::Admin).await.unwrap();
    // `volume-health` is where the server itself runs: the configurations never call it there.
    let namespaces = ["app", "volume-health"];
    for ns in namespaces {
        create_namespace(&admin, ns).await.unwrap();
        let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
        for name in ["app", "first"] {
            pods.create(&PostParams::default(), &bound_pod(name, NODE).unwrap())
                .await
                .unwrap();
        }
    }
    // The native pods: the baseline's kind, labelled for the native bindings.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "volume-health");
    for name in ["native", "repaired"] {
        let mut native_pod = bound_pod(name, NODE).unwrap();
        native_pod.metadata.labels = Some([(NATIVE_LABEL.to_owned(), "true".to_owned())].into());
        pods.create(&PostParams::default(), &native_pod)
            .await
            .unwrap();
    }
    let kubelet = plane.cluster.client(Identity::Node(NODE)).await.unwrap();
    let [hop, direct] = namespaces.map(|ns| Api::<Pod>::namespaced(kubelet.clone(), ns));
    // Each changed-report pod's volumeHealth is stored before the policies are bound: in use,
    // it is kept, as a kubelet's later reports are.
    for (pods, name) in [
        (&direct, "app"),
        (&direct, "native"),
        (&direct, "repaired"),
        (&hop, "app"),
    ] {
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(volume_health("first")),
        )
        .await
        .unwrap();
    }
    bind_native(&plane.cluster).await;
    wait_native(&pods, &direct).await;
    wait_repair(&direct).await;

    let params = PatchParams::default();
    let clear = Patch::Strategic(json!({"status": {"volumeHealth": null}}));
    let mut first = [
        Series::new("first report (not sent)"),
        Series::new("first report, namespace left out (baseline)"),
    ];
    let mut changed = [
        Series::new("changed report (not sent)"),
        Series::new("changed report, namespace left out (baseline)"),
        Series::new("changed report, native policies bound"),
        Series::new("changed report with a duplicate pair, repaired by the policies"),
    ];
    let mut reviews_of = [0.0; 2];
    for round in 0..warmup + writes {
        // Rotate which goes first, so that none always follows another.
        for which in (0..6).map(|k| (k + round) % 6) {
            let patch = if which == 5 {
                Patch::Strategic(duplicate_pair(&format!("write {round}")))
            } else {
                Patch::Strategic(volume_health(&format!("write {round}")))
            };
            let before = plane.reviews().await.unwrap();
            let took = match which {
                0 | 1 => {
                    let pods = [&hop, &direct][which];
                    let (stored, took) = timed(pods.patch_status("first", &params, &patch)).await;
                    assert!(stored_volume_health(&stored), "the first report is stored");
                    pods.patch_status("first", &params, &clear).await.unwrap();
                    if round >= warmup {
                        first[which].took.push(took);
                    }
                    took
                }
                _ => {
                    let (pods, name) = [
                        (&hop, "app"),
                        (&direct, "app"),
                        (&direct, "native"),
                        (&direct, "repaired"),
                    ][which - 2];
                    let (stored, took) = timed(pods.patch_status(name, &params, &patch)).await;
                    assert!(
                        stored_volume_health(&stored),
                        "the stored volumeHealth is kept"
                    );
                    if which == 5 {
                        assert_eq!(conditions(&stored), 1, "the pair is repaired");
                    }
                    if round >= warmup {
                        changed[which - 2].took.push(took);
                    }
                    took
                }
            };
            let _ = took;
            if round >= warmup && which == 0 {
                reviews_of[0] += plane.reviews().await.unwrap() - before;
            } else if round >= warmup && which == 2 {
                reviews_of[1] += plane.reviews().await.unwrap() - before;
            }
        }
    }
    // With the gate on, a valid report, first or changed, is never sent.
    assert_eq!(
        reviews_of[0], 0.0,
        "a valid first report was sent to the webhooks"
    );
    assert_eq!(
        reviews_of[1], 0.0,
        "a changed pod report was sent to the webhooks"
    );

    let (csinode, csinode_reviews, kubelet_reviews) =
        csinode_series(&plane, &admin, &kubelet, warmup, writes).await;
    assert_eq!(
        kubelet_reviews, 0.0,
        "a kubelet's storage report was sent to the webhooks"
    );

    println!(
        "apiserver hop: {writes} writes of each series, sequential, by the kubelet through kube-rs"
    );
    println!(
        "  reviews: {} for {writes} first reports, {} for {writes} changed pod reports, {} for {writes} CSINode changes by another writer, {} for the kubelet's",
        reviews_of[0], reviews_of[1], csinode_reviews, kubelet_reviews
    );
    for series in first.iter().chain(&changed).chain(&csinode) {
        series.print();
    }
    first[0].compare("a first report, not sent", &first[1]);
    changed[0].compare("changed report, not sent", &changed[1]);
    changed[2].compare("native policies", &changed[1]);
    changed[3].compare("a write the repair policy repairs", &changed[1]);
    csinode[0].compare(
        "hop of another writer's CSINode change (/validate)",
        &csinode[1],
    );
}

/// Changes of the kubelet's CSINode's `storageHealth` by another writer (`admin`), in
/// alternating blocks with the shipped validating configuration installed and deleted;
/// answers the two series, the reviews the installed blocks cost, and those of the kubelet's
/// own changes, one after each block's writes.
async fn csinode_series(
    plane: &ControlPlane,
    admin: &kube::Client,
    kubelet: &kube::Client,
    warmup: usize,
    writes: usize,
) -> ([Series; 2], f64, f64) {
    let own: Api<CSINode> = Api::all(kubelet.clone());
    let node: CSINode = serde_json::from_value(json!({"metadata": {"name": NODE},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": NODE, "topologyKeys": []}]}}))
    .unwrap();
    own.create(&PostParams::default(), &node).await.unwrap();
    let nodes: Api<CSINode> = Api::all(admin.clone());
    let configuration = plane.validating_configuration().unwrap();
    let params = PatchParams::default();
    let mut round = 0;
    let mut write = async || {
        round += 1;
        let reason = if round % 2 == 0 {
            "PoolFull"
        } else {
            "PoolSlow"
        };
        timed(nodes.patch_status(NODE, &params, &storage_report(reason)))
            .await
            .1
    };
    for _ in 0..warmup {
        write().await;
    }
    let mut series = [
        Series::new("CSINode change by another writer, sent to /validate"),
        Series::new("CSINode change, configuration deleted (baseline)"),
    ];
    let (mut sent, mut kubelet_sent) = (0.0, 0.0);
    let blocks = 10;
    for block in 0..2 * blocks {
        let installed = block % 2 == 0;
        // Until the apiserver's watch delivers the change, a write may still go either way.
        for probe in 0.. {
            let before = plane.reviews().await.unwrap();
            write().await;
            if (plane.reviews().await.unwrap() > before) == installed {
                break;
            }
            assert!(
                probe < 200,
                "the apiserver never saw the configuration change"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = plane.reviews().await.unwrap();
        for _ in 0..writes / blocks {
            let took = write().await;
            series[usize::from(!installed)].took.push(took);
        }
        if installed {
            sent += plane.reviews().await.unwrap() - before;
            let before = plane.reviews().await.unwrap();
            let report = storage_report(&format!("Kubelet{block}"));
            own.patch_status(NODE, &params, &report).await.unwrap();
            kubelet_sent += plane.reviews().await.unwrap() - before;
            plane.delete_validating_configuration().await.unwrap();
        } else {
            plane.create_configuration(&configuration).await.unwrap();
        }
    }
    (series, sent, kubelet_sent)
}

/// A report of `DRIVER`'s storage, degraded for `reason`.
fn storage_report(reason: &str) -> Patch<Value> {
    Patch::Merge(json!({"status": {"storageHealth": [{"name": DRIVER,
        "healthConditions": [{"status": "StorageDegraded", "reason": reason}]}]}}))
}

/// Waits until the apiserver applies the drop-on-save bindings: a new volumeHealth of a
/// labelled probe pod is dropped, and the baseline pod's is not.
async fn wait_native(admin_pods: &Api<Pod>, kubelet_pods: &Api<Pod>) {
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 0.. {
        // A new pod each round: one stored before the bindings applied has the field in use.
        let name = format!("probe-{round}");
        let mut probe = bound_pod(&name, NODE).unwrap();
        probe.metadata.labels = Some([(NATIVE_LABEL.to_owned(), "true".to_owned())].into());
        admin_pods
            .create(&PostParams::default(), &probe)
            .await
            .unwrap();
        let patch = Patch::Strategic(volume_health("probe"));
        let stored = kubelet_pods
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
            .unwrap();
        if serde_json::to_value(&stored).unwrap()["status"]["volumeHealth"].is_null() {
            return;
        }
        assert!(Instant::now() < give_up, "drop on save was never applied");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Waits until the apiserver applies the repair bindings: the labelled pod's report with a
/// duplicate pair is stored repaired, not refused.
async fn wait_repair(kubelet_pods: &Api<Pod>) {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let patch = Patch::Strategic(duplicate_pair("probe"));
        let written = kubelet_pods
            .patch_status("repaired", &PatchParams::default(), &patch)
            .await;
        if written.is_ok_and(|pod| conditions(&pod) == 1) {
            return;
        }
        assert!(Instant::now() < give_up, "repair was never applied");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
