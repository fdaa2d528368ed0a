//! KEP-1432's beta scalability bar with the kubelet's own code, through the shipped default
//! install: hollow kubelets (`VOLUME_HEALTH_SCALE_NODES`, default 100) with
//! `VOLUME_HEALTH_SCALE_CLAIMS` CSI claims and pods each (default 50), one mock driver process
//! for every node, kube-apiserver v1.37.2 with the gate on, the webhooks and the authorizer.
//!
//! Phases: the objects, the kubelets, every pod Running; the steady state
//! (`VOLUME_HEALTH_SCALE_STEADY_SECONDS`, default 600): no review, no health write; six storms
//! (every volume and the driver turn Degraded at once, then back), with the shipped
//! configuration, with none and with native mode's policies interleaved, each on pods made
//! again; then a storm where a tenth of the volumes report a duplicate pair
//! (kubernetes#142280), which the webhooks' repair stores, then the native policies', each
//! followed by a sample of pods deleted.
//!
//! What is chosen to fit two cores, against a real node:
//! - The objects are created before the kubelets start, bound as the binder would (no
//!   controller runs), so the kubelets start with their pods waiting, as after a control plane
//!   outage, not as pods scheduled one by one.
//! - The kubelets probe health at their default period (1 minute), each on its own timer: a
//!   storm reaches every node within a period, as it would when a backend fails for all.
//! - The kubelets resync every pod at their default period (1 minute), not kubemark's 10 s:
//!   each sync reads the pod's claim and volume again, so kubemark's period would put six
//!   times a real node's reads on the apiserver. A health report does not wait for a sync
//!   (the volume health manager hands it to the status manager, which writes at once).
//! - The kubelet's runtime, mounter and cAdvisor are fakes (kubemark's hollow kubelet): its
//!   volume, status and CSINode managers are the real ones, and so are its writes.
//! - The kubelets and the driver run at a lower CPU priority than the control plane: nice 10,
//!   and one CPU cgroup for them all, weighing as one process, where the test can make one.
//!   On a real cluster they run on other machines and never take a core from the apiserver.
//!
//! Run by `make scale`; the report is printed, and, when every phase passed, written to
//! `docs/benchmarks.md` with `VOLUME_HEALTH_E2E_WRITE_DOCS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use hyper::Method;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{WatchEvent, WatchParams};
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    AuditMark, Cluster, ControlPlane, HollowFleet, Identity, Periods, StatusWrite, bin_dir,
    create_namespace, create_pod, create_pod_of_claim, manifests_dir,
};
use volume_health_tests::kustomize::kustomize;
use volume_health_tests::phases::Phases;
use volume_health_tests::prom::{Scrape, all_within, quantile, quantile_bucket};

const NAMESPACE: &str = "scale";
const DRIVER: &str = "scale.csi.example.com";

/// The kubelet's default health period (`VolumeStatsAggPeriod`).
const DEFAULT_PROBE: Duration = Duration::from_secs(60);

/// The kubelet's default pod resync period (`syncFrequency`). kubemark's 10 s would have each
/// node GET its claims and volumes again six times as often as a real node does.
const RESYNC: Duration = Duration::from_secs(60);

/// The largest fleet with headroom on two cores: beyond it, the kubelets at rest take most of
/// the machine (100 take about 1.5 cores), and a storm's time is measured, not bounded.
const HEADROOM_NODES: usize = 50;

/// What answers a storm's writes besides in-tree validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Install {
    /// The default install: the webhooks (repair on) and their configurations.
    Webhooks,
    /// Native mode (`manifests/overlays/native`): the admission policies, repair on, and no
    /// webhook configuration.
    Native,
    /// Nothing of this project's admission: in-tree alone.
    Nothing,
}

impl Install {
    fn name(self) -> &'static str {
        match self {
            Install::Webhooks => "shipped configuration",
            Install::Native => "native policies",
            Install::Nothing => "no configuration",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Install::Webhooks => "shipped",
            Install::Native => "native",
            Install::Nothing => "none",
        }
    }
}

/// The storms, in order, by what answers them: each install once a repeat, every other repeat
/// in the reverse order (ABC CBA), so that what drifts in a run (the machine's other load,
/// the apiserver's caches and heap) falls on each alike.
fn rounds(repeats: usize) -> Vec<Install> {
    const ONCE: [Install; 3] = [Install::Webhooks, Install::Nothing, Install::Native];
    (0..repeats)
        .flat_map(|r| {
            let mut once = ONCE;
            if r % 2 == 1 {
                once.reverse();
            }
            once
        })
        .collect()
}

/// The pods deleted after the duplicate-pair storm, with and without the pair, are gone
/// within this (the kubelet's unmount and final status write, with the CPU busy).
const GONE_WITHIN: Duration = Duration::from_secs(120);

/// A phase's time unless it says otherwise.
const PHASE_TIMEOUT: Duration = Duration::from_secs(600);

/// The shipped Deployment's memory limit (`manifests/base/deployment.yaml`).
const REPLICA_MEMORY_LIMIT_MIB: f64 = 256.0;

/// A third of the shipped entries' `timeoutSeconds` (3 s), a bound of the admission server's
/// histogram: a replica that answered every review within it did not make a call time out.
const REPLICA_ANSWERED_WITHIN: f64 = 1.0;

struct Size {
    nodes: usize,
    claims: usize,
    steady: Duration,
    probe: Duration,
    /// How many times each install's storm runs.
    repeats: usize,
}

impl Size {
    fn from_env() -> Size {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Size {
            nodes: number("VOLUME_HEALTH_SCALE_NODES", 100) as usize,
            claims: number("VOLUME_HEALTH_SCALE_CLAIMS", 50) as usize,
            steady: Duration::from_secs(number("VOLUME_HEALTH_SCALE_STEADY_SECONDS", 600)),
            probe: Duration::from_secs(number(
                "VOLUME_HEALTH_SCALE_PROBE_SECONDS",
                DEFAULT_PROBE.as_secs(),
            )),
            repeats: number("VOLUME_HEALTH_SCALE_REPEATS", 2).max(1) as usize,
        }
    }

    fn pods(&self) -> usize {
        self.nodes * self.claims
    }

    /// Every pod, as (node, claim).
    fn each_pod(&self) -> impl Iterator<Item = (usize, usize)> + use<> {
        let claims = self.claims;
        (0..self.nodes).flat_map(move |n| (0..claims).map(move |c| (n, c)))
    }
}

fn pod_name(node: usize, claim: usize) -> String {
    format!("p{node}-{claim}")
}

fn handle(node: usize, claim: usize) -> String {
    format!("h{node}-{claim}")
}

/// The volume handle of pod `p<node>-<claim>`.
fn handle_of(pod: &str) -> Option<String> {
    Some(format!("h{}", pod.strip_prefix('p')?))
}

fn node_name(node: usize) -> String {
    format!("node-{node}")
}

/// Every volume and the node's storage healthy: no condition. `label` names the answer.
fn healthy(label: &str) -> Value {
    json!({"label": label})
}

/// Every volume and the node's storage Degraded, with `label` as the reason too.
fn degraded(label: &str) -> Value {
    json!({
        "label": label,
        "otherVolumes": [{"status": "DEGRADED", "reason": label, "message": "latency above 100 ms"}],
        "storage": [{"status": "STORAGE_DEGRADED", "reason": label, "message": "pool slow"}],
    })
}

const INOTIFY_INSTANCES: &str = "/proc/sys/fs/inotify/max_user_instances";

/// The inotify limit as it was before the test raised it, put back when dropped.
struct InotifyLimit(Option<usize>);

impl Drop for InotifyLimit {
    fn drop(&mut self) {
        if let Some(was) = self.0 {
            let _ = std::fs::write(INOTIFY_INSTANCES, was.to_string());
        }
    }
}

/// The kubelets can start only with inotify instances for each (two a kubelet; Linux's
/// default of 128 per user stops the plugin watcher after about 60). Raised for the test when
/// it is too low and this runs as root; otherwise the test says how.
fn make_room_for(kubelets: usize) -> anyhow::Result<InotifyLimit> {
    // What the kubelets take, and what the rest of the machine had room for.
    let want = 2 * kubelets + 128;
    let have: usize = std::fs::read_to_string(INOTIFY_INSTANCES)?.trim().parse()?;
    if have >= want {
        return Ok(InotifyLimit(None));
    }
    std::fs::write(INOTIFY_INSTANCES, want.to_string()).map_err(|e| {
        anyhow::anyhow!(
            "{kubelets} kubelets need {want} inotify instances, {INOTIFY_INSTANCES} allows \
             {have} and could not be raised ({e}): run `sysctl fs.inotify.max_user_instances={want}` \
             as root"
        )
    })?;
    eprintln!("raised {INOTIFY_INSTANCES} from {have} to {want} for the test");
    Ok(InotifyLimit(Some(have)))
}

/// CPU seconds a process has used, from `/proc`; 0 when it is gone.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok()?.stat().ok());
    stat.map_or(0.0, |stat| {
        (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
    })
}

/// A process's peak resident memory (`VmHWM`), in MiB; 0 when it is gone.
fn peak_memory_mib(pid: u32) -> f64 {
    let status = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok()?.status().ok());
    status
        .and_then(|status| status.vmhwm)
        .map_or(0.0, |kib| kib as f64 / 1024.0)
}

async fn apiserver_metrics(cluster: &Cluster) -> anyhow::Result<Scrape> {
    let (code, text) = cluster.api.get_text("/metrics").await?;
    anyhow::ensure!(code == 200, "/metrics: {code}");
    Ok(Scrape::parse(&text))
}

/// Requests the apiserver served between two scrapes, by resource (`resource/subresource`),
/// for `verbs`.
fn requests_by_resource(before: &Scrape, after: &Scrape, verbs: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for verb in verbs {
        for (scrape, sign) in [(after, 1.0), (before, -1.0)] {
            let by = scrape.sum_by("apiserver_request_total", &[("verb", verb)], "resource");
            for (resource, _) in by {
                let sub = scrape.sum_by(
                    "apiserver_request_total",
                    &[("verb", verb), ("resource", &resource)],
                    "subresource",
                );
                for (subresource, count) in sub {
                    let key = if subresource.is_empty() {
                        resource.clone()
                    } else {
                        format!("{resource}/{subresource}")
                    };
                    *out.entry(key).or_insert(0.0) += sign * count;
                }
            }
        }
    }
    out.retain(|_, count| *count > 0.0);
    out
}

/// A pair of the apiserver's admission plugins, mutating and validating, and the `kind` of
/// their `matchConditions` in its metrics: what an install adds to a write, measured where
/// it adds it (rules, selectors, `matchConditions`, calls or expressions), whatever it does.
struct Plugins {
    names: [&'static str; 2],
    conditions: &'static str,
}

/// The webhooks' plugins.
const WEBHOOK_PLUGINS: Plugins = Plugins {
    names: ["MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"],
    conditions: "webhook",
};

/// The admission policies' plugins (native mode).
const POLICY_PLUGINS: Plugins = Plugins {
    names: ["MutatingAdmissionPolicy", "ValidatingAdmissionPolicy"],
    conditions: "policy",
};

/// What a pair of admission plugins took for each update between two scrapes of the
/// apiserver's metrics.
#[derive(Default)]
struct PluginTime {
    /// Seconds a write spent in the two plugins, on average (their sums over one plugin's
    /// count: every write passes both).
    mean: f64,
    /// Each plugin's p99, added (the apiserver's histogram: 5 ms is its first bucket).
    p99: f64,
    /// `matchConditions` evaluated, their mean time and their p99 (a histogram whose first
    /// bucket is 1 ms): what the entries add to a write they do not call for.
    conditions: f64,
    condition_mean: f64,
    condition_p99: f64,
    /// The histogram's bucket that holds that p99: it is somewhere in it.
    condition_p99_bucket: (f64, f64),
}

fn plugin_time(plugins: &Plugins, before: &Scrape, after: &Scrape) -> PluginTime {
    let histogram = "apiserver_admission_controller_admission_duration_seconds";
    let increase =
        |name: &str, labels: &[(&str, &str)]| after.sum(name, labels) - before.sum(name, labels);
    let mut time = PluginTime::default();
    let mut writes = 0.0_f64;
    for plugin in plugins.names {
        let labels = [("name", plugin), ("operation", "UPDATE")];
        time.mean += increase(&format!("{histogram}_sum"), &labels);
        writes = writes.max(increase(&format!("{histogram}_count"), &labels));
        time.p99 += quantile(
            0.99,
            &before.buckets(histogram, &labels),
            &after.buckets(histogram, &labels),
        )
        .unwrap_or(0.0);
    }
    time.mean /= writes.max(1.0);
    let conditions = "apiserver_admission_match_condition_evaluation_seconds";
    let labels = [("kind", plugins.conditions)];
    time.conditions = increase(&format!("{conditions}_count"), &labels);
    time.condition_mean =
        increase(&format!("{conditions}_sum"), &labels) / time.conditions.max(1.0);
    let (from, to) = (
        before.buckets(conditions, &labels),
        after.buckets(conditions, &labels),
    );
    time.condition_p99 = quantile(0.99, &from, &to).unwrap_or(0.0);
    time.condition_p99_bucket = quantile_bucket(0.99, &from, &to).unwrap_or((0.0, 0.0));
    time
}

/// The native repair policies' mutations between two scrapes of the apiserver's metrics: one
/// for each write they matched (their `matchConditions` are the webhook entries'
/// `needs-repair`), as the audit log has no annotation of theirs.
fn policy_repairs(before: &Scrape, after: &Scrape) -> f64 {
    let name = "apiserver_mutating_admission_policy_check_total";
    let repairs = |scrape: &Scrape| -> f64 {
        scrape
            .sum_by(name, &[], "policy")
            .into_iter()
            .filter(|(policy, _)| policy.starts_with("volume-health-repair-"))
            .map(|(_, count)| count)
            .sum()
    };
    repairs(after) - repairs(before)
}

/// The admission server's histogram of its answer times (finer than the apiserver's).
const ANSWERS: &str = "volume_health_webhook_request_duration_seconds";

fn seconds(at: Timestamp, since: Timestamp) -> f64 {
    at.duration_since(since).as_secs_f64()
}

/// Per-second counts of `times` after `start`: the highest.
fn peak_per_second(times: impl Iterator<Item = f64>) -> usize {
    let mut per: BTreeMap<u64, usize> = BTreeMap::new();
    for t in times {
        *per.entry(t.max(0.0) as u64).or_default() += 1;
    }
    per.into_values().max().unwrap_or(0)
}

/// What a storm measured.
#[derive(Default)]
struct Storm {
    /// Seconds from the driver's change until every pod's and every CSINode's report was stored.
    pods_stored: f64,
    csinodes_stored: f64,
    /// Seconds from the driver's first new answer to a volume (or a node's storage) until the
    /// kubelet's write of it was stored: the write path, whatever the probe's phase. p50, p99
    /// and the most.
    pod_path: [f64; 3],
    csinode_path: [f64; 3],
    pod_writes: usize,
    csinode_writes: usize,
    refused: usize,
    /// Refused writes whose webhook call failed open (the apiserver went on without the
    /// answer); refused writes of an object with no stored write after them; and the longest
    /// from a refusal to the object's next stored write (the writer's resend).
    refused_failed_open: usize,
    refused_unrecovered: usize,
    recovered_within: f64,
    /// Writes repaired: by the webhooks (their audit annotation) or by the native policies
    /// (their mutations, from the apiserver's metrics).
    repaired: f64,
    peak_writes: usize,
    reviews: f64,
    peak_reviews: f64,
    /// What the apiserver took for each write (the audit log): p50, p99 and the most.
    pod_took: [f64; 3],
    csinode_took: [f64; 3],
    /// The admission server's p99 answer time over the storm, and its slowest (the bound of
    /// its histogram's bucket).
    webhook_p99: Option<f64>,
    webhook_within: Option<f64>,
    /// The apiserver's webhook calls: how many, their p99 (its coarser histogram, the hop
    /// included), and how many failed open (a timeout among them).
    calls: f64,
    call_p99: Option<f64>,
    /// The histogram's bucket that holds the calls' p99 (nothing: none).
    call_p99_bucket: (f64, f64),
    calls_within: Option<f64>,
    failed_open: f64,
    /// What the webhook admission plugins took for each write, calls or not, and what the
    /// admission policy plugins took.
    webhooks: PluginTime,
    policies: PluginTime,
    replica_cpu: f64,
    apiserver_cpu: f64,
}

impl Storm {
    /// None of the storm's writes refused. A refusal says what the webhooks' calls did
    /// meanwhile, to tell a slow replica from a slow apiserver.
    fn none_refused(&self, what: &str) -> anyhow::Result<()> {
        anyhow::ensure!(self.refused == 0, "{}", self.refusals(what));
        Ok(())
    }

    /// In a storm of writes that need repair: every refused write's call failed open while
    /// the admission server answered every review within [`REPLICA_ANSWERED_WITHIN`] (the
    /// apiserver ran out of time, not the replica), and its object's next write was stored.
    /// A saturated apiserver can stall past any timeout; losing a write to it is what must
    /// not happen.
    fn refusals_recovered(&self, what: &str) -> anyhow::Result<()> {
        let replica_in_time = self
            .webhook_within
            .is_some_and(|within| within <= REPLICA_ANSWERED_WITHIN);
        anyhow::ensure!(
            self.refused == 0
                || (self.refused_failed_open == self.refused
                    && self.refused_unrecovered == 0
                    && replica_in_time),
            "{}",
            self.refusals(what)
        );
        Ok(())
    }

    /// The refusals in a sentence of the report: none, or those the apiserver gave up on.
    fn refused_summary(&self) -> String {
        if self.refused == 0 {
            return "none refused".to_owned();
        }
        format!(
            "{} refused after the apiserver gave up on their webhook call while the admission \
             server answered every review within {} (each stored at its writer's resend, at \
             most {:.0} s later)",
            self.refused,
            ms(self.webhook_within),
            self.recovered_within
        )
    }

    /// What a storm's refusals were, and what the webhooks' calls did meanwhile: a slow
    /// replica told from a slow apiserver.
    fn refusals(&self, what: &str) -> String {
        format!(
            "{} {what} refused ({} after their webhook call failed open, {} with no stored \
             write after them); the apiserver's webhook calls: {:.0} failed open, p99 {}; \
             the admission server's p99 answer {}, all within {}",
            self.refused,
            self.refused_failed_open,
            self.refused_unrecovered,
            self.failed_open,
            ms(self.call_p99),
            ms(self.webhook_p99),
            ms(self.webhook_within)
        )
    }

    fn stored(&self) -> f64 {
        self.pods_stored.max(self.csinodes_stored)
    }

    /// What the webhooks' entries add to a write at the p99, where the apiserver adds it:
    /// their conditions, and their calls when there are any.
    fn added_p99(&self) -> f64 {
        self.webhooks.condition_p99 + self.call_p99.unwrap_or(0.0)
    }

    /// Where the apiserver's histograms put that p99: above the first bound, at most the
    /// second (they have buckets, and interpolation places it inside one).
    fn added_p99_bucket(&self) -> (f64, f64) {
        let (conditions, calls) = (self.webhooks.condition_p99_bucket, self.call_p99_bucket);
        (conditions.0 + calls.0, conditions.1 + calls.1)
    }

    /// The longest write path: every report stored that long after its kubelet learned of it.
    fn longest_path(&self) -> f64 {
        self.pod_path[2].max(self.csinode_path[2])
    }
}

/// p50, p99 and the most of `values` (nearest rank); zeros when empty.
fn spread(mut values: Vec<f64>) -> [f64; 3] {
    if values.is_empty() {
        return [0.0; 3];
    }
    values.sort_by(f64::total_cmp);
    let rank =
        |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    [rank(0.5), rank(0.99), values[values.len() - 1]]
}

/// The storms that passed with `install`.
fn measured(storms: &[(Install, Option<(Storm, Storm)>)], install: Install) -> Vec<&Storm> {
    storms
        .iter()
        .filter(|(with, _)| *with == install)
        .filter_map(|(_, storm)| storm.as_ref().map(|(storm, _)| storm))
        .collect()
}

/// The bar on what the entries add to a write at the p99: a tenth of the pod status writes'
/// p99 with no configuration (the mean of its storms').
fn added_bar(none: &[&Storm]) -> f64 {
    mean(none.iter().map(|s| s.pod_took[1])) * 0.10
}

/// The mean of `values`; 0 when there are none.
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, count) = values.fold((0.0, 0.0), |(s, c), v| (s + v, c + 1.0));
    if count > 0.0 { sum / count } else { 0.0 }
}

/// The world the phases share.
struct Scale {
    size: Size,
    plane: ControlPlane,
    /// Native mode's objects, as `kubectl apply -k manifests/overlays/native` creates them.
    native: Vec<Value>,
}

impl Scale {
    fn cluster(&self) -> &Cluster {
        &self.plane.cluster
    }

    /// Takes `from`'s install away and puts `to`'s in its place, as an operator would.
    async fn switch(&self, from: Install, to: Install) -> anyhow::Result<()> {
        if from == to {
            return Ok(());
        }
        let (cluster, admission) = (self.cluster(), &self.plane.admission);
        match from {
            Install::Webhooks => admission.uninstall_configurations(cluster, &[]).await?,
            Install::Native => {
                for object in &self.native {
                    cluster.delete_policy(object).await?;
                }
            }
            Install::Nothing => {}
        }
        match to {
            Install::Webhooks => admission.install_configurations(cluster, &[]).await?,
            Install::Native => {
                for object in &self.native {
                    cluster.create_policy(object).await?;
                }
            }
            Install::Nothing => {}
        }
        // The apiserver's webhook and policy managers learn it through watches.
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(())
    }

    async fn reviews(&self) -> f64 {
        self.plane.reviews().await.unwrap_or(0.0)
    }

    fn replica_cpu(&self) -> f64 {
        self.plane.admission.pid().map_or(0.0, cpu_seconds)
    }

    /// Creates every claim, volume and pod, `CONCURRENT` pods at a time.
    async fn create_objects(&self) -> anyhow::Result<()> {
        const CONCURRENT: usize = 16;
        let cluster = self.cluster();
        futures::stream::iter(self.size.each_pod())
            .map(|(n, c)| async move {
                create_pod(
                    cluster,
                    &node_name(n),
                    NAMESPACE,
                    &pod_name(n, c),
                    DRIVER,
                    &handle(n, c),
                )
                .await
            })
            .buffer_unordered(CONCURRENT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Waits until every pod of the namespace is `Running`, then for the kubelets' first
    /// writes to settle (a probe, and the status manager's resync).
    async fn wait_running(&self, fleet: &HollowFleet) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let pods = self.size.pods();
        self.watch_pods_until(
            |phases| phases.len() == pods && phases.values().all(|p| p == "Running"),
            started + Duration::from_secs(1500),
        )
        .await?;
        fleet.check_running()?;
        let took = started.elapsed();
        tokio::time::sleep(self.size.probe + Duration::from_secs(15)).await;
        Ok(took)
    }

    /// Deletes every pod and makes it again on its claim: pods that never reported, as before
    /// the first storm (a pod keeps its `volumeHealth` entries once it has one). Prints how
    /// long each step took, so that a slow phase shows which step was slow.
    async fn make_pods_again(&self, fleet: &HollowFleet) -> anyhow::Result<()> {
        const CONCURRENT: usize = 16;
        let cluster = self.cluster();
        let started = Instant::now();
        futures::stream::iter(self.size.each_pod())
            .map(|(n, c)| async move {
                let path = format!("/api/v1/namespaces/{NAMESPACE}/pods/{}", pod_name(n, c));
                let (code, body) = cluster.api.send(Method::DELETE, &path, None, None).await?;
                anyhow::ensure!(code == 200, "deleting {path}: {code} {body}");
                anyhow::Ok(())
            })
            .buffer_unordered(CONCURRENT)
            .try_collect::<Vec<()>>()
            .await?;
        self.watch_pods_until(
            BTreeMap::is_empty,
            Instant::now() + Duration::from_secs(900),
        )
        .await?;
        let gone = started.elapsed();
        fleet.check_running()?;
        futures::stream::iter(self.size.each_pod())
            .map(|(n, c)| async move {
                create_pod_of_claim(cluster, &node_name(n), NAMESPACE, &pod_name(n, c)).await
            })
            .buffer_unordered(CONCURRENT)
            .try_collect::<Vec<()>>()
            .await?;
        let made = started.elapsed() - gone;
        let running = self.wait_running(fleet).await?;
        eprintln!(
            "{} pods deleted and gone in {gone:.0?}, made again in {made:.0?}, all Running {running:.0?} later",
            self.size.pods()
        );
        Ok(())
    }

    /// Watches the namespace's pods (their phases, by name) until `done` holds, checked
    /// once the watch has sent every pod that existed when it began. One watch, not a list
    /// asked again and again: listing thousands of pods is what saturates the apiserver.
    async fn watch_pods_until(
        &self,
        done: impl Fn(&BTreeMap<String, String>) -> bool,
        give_up: Instant,
    ) -> anyhow::Result<()> {
        let client = self.cluster().client(Identity::Admin).await?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, NAMESPACE);
        loop {
            // A watch that ends (its timeout, an expired version) starts again with every pod
            // the watch cache holds: version "0" is served from it at once, where a consistent
            // read waits for a cache that a saturated apiserver lets fall behind etcd.
            let mut phases: BTreeMap<String, String> = BTreeMap::new();
            let mut listed = false;
            let params = WatchParams::streaming_lists().timeout(120);
            let mut events = pods.watch(&params, "0").await?.boxed();
            while let Some(event) = events.try_next().await? {
                match event {
                    WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
                        phases.insert(pod.metadata.name.unwrap_or_default(), phase);
                    }
                    WatchEvent::Deleted(pod) => {
                        phases.remove(&pod.metadata.name.unwrap_or_default());
                    }
                    WatchEvent::Bookmark(bookmark) => {
                        listed |= bookmark
                            .metadata
                            .annotations
                            .contains_key("k8s.io/initial-events-end");
                    }
                    WatchEvent::Error(status) => {
                        eprintln!("watching pods: {}", status.message);
                        break;
                    }
                }
                if listed && done(&phases) {
                    return Ok(());
                }
                anyhow::ensure!(
                    Instant::now() < give_up,
                    "gave up watching pods: {} of them, {} Running",
                    phases.len(),
                    phases.values().filter(|p| *p == "Running").count()
                );
            }
            anyhow::ensure!(Instant::now() < give_up, "gave up watching pods");
        }
    }

    /// The answer turned to `answers` for every node: waits until every pod and every CSINode
    /// has a write from its kubelet that `stored` accepts, and measures the storm.
    async fn storm(
        &self,
        fleet: &HollowFleet,
        answers: &Value,
        pods_expected: &BTreeSet<String>,
    ) -> anyhow::Result<Storm> {
        let label = answers["label"].as_str().unwrap_or_default().to_owned();
        let cluster = self.cluster();
        let webhook = Scrape::parse(&self.plane.admission.scrape().await?);
        let apiserver_before = apiserver_metrics(cluster).await?;
        let reviews = self.reviews().await;
        let (replica, apiserver) = (self.replica_cpu(), cpu_seconds(cluster.apiserver_pid()));
        let mark = cluster.audit_mark();
        let start = Timestamp::now();
        fleet.answer(answers)?;
        let bound = self.storm_bound();
        let give_up = Instant::now() + bound;
        let mut writes: Vec<StatusWrite> = Vec::new();
        let mut cursor = mark;
        let mut pods_seen = BTreeSet::new();
        let mut nodes_seen = BTreeSet::new();
        let mut peak_reviews = 0.0_f64;
        let mut last_reviews = reviews;
        let mut last_sample = Instant::now();
        while pods_seen.len() < pods_expected.len() || nodes_seen.len() < self.size.nodes {
            anyhow::ensure!(
                Instant::now() < give_up,
                "after {bound:?}: {} of {} pods and {} of {} CSINodes stored",
                pods_seen.len(),
                pods_expected.len(),
                nodes_seen.len(),
                self.size.nodes
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now_reviews = self.reviews().await;
            let rate = (now_reviews - last_reviews) / last_sample.elapsed().as_secs_f64();
            peak_reviews = peak_reviews.max(rate);
            (last_reviews, last_sample) = (now_reviews, Instant::now());
            let (more, next) = cluster.status_writes_after(cursor)?;
            cursor = next;
            for write in more
                .into_iter()
                .filter(|w| w.user.starts_with("system:node:"))
            {
                if write.stored() {
                    match write.resource.as_str() {
                        "pods" if pods_expected.contains(&write.name) => {
                            pods_seen.insert(write.name.clone());
                        }
                        "csinodes" => {
                            nodes_seen.insert(write.name.clone());
                        }
                        _ => {}
                    }
                }
                writes.push(write);
            }
        }
        let webhook_after = Scrape::parse(&self.plane.admission.scrape().await?);
        let apiserver_after = apiserver_metrics(cluster).await?;
        let calls = "apiserver_admission_webhook_admission_duration_seconds";
        let fail_open = "apiserver_admission_webhook_fail_open_count";
        let (calls_before, calls_after) = (
            apiserver_before.buckets(calls, &[]),
            apiserver_after.buckets(calls, &[]),
        );
        let (answers_before, answers_after) = (
            webhook.buckets(ANSWERS, &[]),
            webhook_after.buckets(ANSWERS, &[]),
        );
        let first_stored = |resource: &str| {
            let mut first: BTreeMap<&str, f64> = BTreeMap::new();
            for w in writes
                .iter()
                .filter(|w| w.resource == resource && w.stored())
            {
                first.entry(&w.name).or_insert_with(|| seconds(w.at, start));
            }
            first.into_values().fold(0.0, f64::max)
        };
        let took = |resource: &str| {
            spread(
                writes
                    .iter()
                    .filter(|w| w.resource == resource)
                    .map(|w| w.took.as_secs_f64())
                    .collect(),
            )
        };
        // The write path: from the driver's first new answer to the write stored.
        let served: BTreeMap<(String, String), Timestamp> = fleet
            .served(&label)?
            .into_iter()
            .map(|s| ((s.node, s.volume), s.at))
            .collect();
        let path = |resource: &str, key: &dyn Fn(&StatusWrite) -> Option<(String, String)>| {
            let mut first: BTreeMap<&str, f64> = BTreeMap::new();
            for w in writes
                .iter()
                .filter(|w| w.resource == resource && w.stored())
            {
                let Some(at) = key(w).and_then(|k| served.get(&k)) else {
                    continue;
                };
                first
                    .entry(&w.name)
                    .or_insert_with(|| seconds(w.at, *at).max(0.0));
            }
            spread(first.into_values().collect())
        };
        let pod_path = path("pods", &|w| {
            let node = w.user.strip_prefix("system:node:")?.to_owned();
            Some((node, handle_of(&w.name)?))
        });
        let csinode_path = path("csinodes", &|w| Some((w.name.clone(), String::new())));
        // What the storm cost, taken before any wait for a resend below.
        let (reviews, replica_cpu, apiserver_cpu) = (
            self.reviews().await - reviews,
            self.replica_cpu() - replica,
            cpu_seconds(cluster.apiserver_pid()) - apiserver,
        );
        // A refusal, and how long until its object's next write was stored (none: never).
        // The storm ends with its last first report, so a refusal late in it is resent after
        // that: its writer's resend is awaited before it counts as lost. On a saturated
        // apiserver a kubelet's resend came up to 151 s after its refusal (100 nodes), so the
        // wait is five resyncs. Only a refusal after its call failed open can be forgiven
        // ([`Storm::refusals_recovered`]), so a storm with any other refusal, or none, does
        // not wait.
        let mut stored_at: BTreeMap<(String, String), Vec<Timestamp>> = BTreeMap::new();
        for w in writes.iter().filter(|w| w.stored()) {
            stored_at
                .entry((w.resource.clone(), w.name.clone()))
                .or_default()
                .push(w.at);
        }
        let next_stored = |stored_at: &BTreeMap<(String, String), Vec<Timestamp>>,
                           r: &StatusWrite| {
            stored_at
                .get(&(r.resource.clone(), r.name.clone()))
                .and_then(|times| {
                    // In the order answered: the first stored after the refusal.
                    let after = times.partition_point(|&at| at <= r.at);
                    times.get(after).map(|&at| seconds(at, r.at))
                })
        };
        let resend_by = Instant::now() + 5 * RESYNC;
        let refused_writes = writes.iter().filter(|r| !r.stored());
        let forgivable = refused_writes.clone().all(|r| r.failed_open);
        while forgivable
            && Instant::now() < resend_by
            && refused_writes
                .clone()
                .any(|r| next_stored(&stored_at, r).is_none())
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (more, next) = cluster.status_writes_after(cursor)?;
            cursor = next;
            for w in more.into_iter().filter(StatusWrite::stored) {
                stored_at
                    .entry((w.resource, w.name))
                    .or_default()
                    .push(w.at);
            }
        }
        let refusals: Vec<(&StatusWrite, Option<f64>)> = refused_writes
            .map(|r| (r, next_stored(&stored_at, r)))
            .collect();
        Ok(Storm {
            pods_stored: first_stored("pods"),
            csinodes_stored: first_stored("csinodes"),
            pod_path,
            csinode_path,
            pod_writes: writes.iter().filter(|w| w.resource == "pods").count(),
            csinode_writes: writes.iter().filter(|w| w.resource == "csinodes").count(),
            refused: refusals.len(),
            refused_failed_open: refusals.iter().filter(|(r, _)| r.failed_open).count(),
            refused_unrecovered: refusals.iter().filter(|(_, next)| next.is_none()).count(),
            recovered_within: refusals
                .iter()
                .filter_map(|&(_, next)| next)
                .fold(0.0, f64::max),
            repaired: writes.iter().filter(|w| w.repaired).count() as f64
                + policy_repairs(&apiserver_before, &apiserver_after),
            peak_writes: peak_per_second(writes.iter().map(|w| seconds(w.at, start))),
            reviews,
            peak_reviews,
            pod_took: took("pods"),
            csinode_took: took("csinodes"),
            webhook_p99: quantile(0.99, &answers_before, &answers_after),
            webhook_within: all_within(&answers_before, &answers_after),
            calls: apiserver_after.sum(&format!("{calls}_count"), &[])
                - apiserver_before.sum(&format!("{calls}_count"), &[]),
            call_p99: quantile(0.99, &calls_before, &calls_after),
            call_p99_bucket: quantile_bucket(0.99, &calls_before, &calls_after)
                .unwrap_or((0.0, 0.0)),
            calls_within: all_within(&calls_before, &calls_after),
            failed_open: apiserver_after.sum(fail_open, &[]) - apiserver_before.sum(fail_open, &[]),
            webhooks: plugin_time(&WEBHOOK_PLUGINS, &apiserver_before, &apiserver_after),
            policies: plugin_time(&POLICY_PLUGINS, &apiserver_before, &apiserver_after),
            replica_cpu,
            apiserver_cpu,
        })
    }

    /// How long one storm may take to be stored. Up to 50 nodes, two periods (every kubelet
    /// probes within one, and writes on a busy machine) and a minute. Beyond, two cores are
    /// saturated by the kubelets at rest, so the storm's time is what is measured, against
    /// the storm with no configuration; ten periods only catch a run that cannot keep up.
    fn storm_bound(&self) -> Duration {
        if self.size.nodes <= HEADROOM_NODES {
            2 * self.size.probe + Duration::from_secs(60)
        } else {
            10 * self.size.probe
        }
    }

    /// A phase of one storm and its way back (or the rewrites after it): longer than both
    /// storms' bounds, so that a storm not stored fails with its own count, not a timeout.
    fn storm_phase_timeout(&self) -> Duration {
        (2 * self.storm_bound() + Duration::from_secs(120)).max(PHASE_TIMEOUT)
    }

    /// Every answer Degraded, with a duplicate pair (kubernetes#142280) on each volume of
    /// `duplicated`: waits until every pod of `expected` and every CSINode has a stored write,
    /// none refused but for a call the apiserver gave up on and its write's resend stored
    /// ([`Storm::refusals_recovered`]), then measures for a minute what the kubelets keep
    /// sending.
    async fn pair_storm(
        &self,
        fleet: &HollowFleet,
        label: &str,
        duplicated: &BTreeSet<(usize, usize)>,
        expected: &BTreeSet<String>,
    ) -> anyhow::Result<(Storm, Rewrite)> {
        let mut answers = degraded(label);
        let pair = json!([
            {"status": "DEGRADED", "reason": "IOPSThrottled", "message": format!("{label}: first")},
            {"status": "DEGRADED", "reason": "IOPSThrottled", "message": format!("{label}: second")}]);
        answers["volumes"] = duplicated
            .iter()
            .map(|&(n, c)| (handle(n, c), pair.clone()))
            .collect::<serde_json::Map<_, _>>()
            .into();
        let storm = self.storm(fleet, &answers, expected).await?;
        storm.refusals_recovered("writes")?;
        // The kubelets send a repaired status again at every resync: the rate they keep.
        let cluster = self.cluster();
        let window = Duration::from_secs(60);
        let before = apiserver_metrics(cluster).await?;
        let reviews = self.reviews().await;
        let apiserver = cpu_seconds(cluster.apiserver_pid());
        let replica = self.replica_cpu();
        let mark = cluster.audit_mark();
        tokio::time::sleep(window).await;
        let again = cluster
            .status_writes(mark)?
            .into_iter()
            .filter(|w| w.resource == "pods" && w.user.starts_with("system:node:"))
            .collect::<Vec<_>>();
        let after = apiserver_metrics(cluster).await?;
        let rewrite = Rewrite {
            per_minute: again.len() as f64 * 60.0 / window.as_secs_f64(),
            repaired: again.iter().filter(|w| w.repaired).count() as f64
                + policy_repairs(&before, &after),
            reviews_per_second: (self.reviews().await - reviews) / window.as_secs_f64(),
            apiserver_cpu: (cpu_seconds(cluster.apiserver_pid()) - apiserver)
                / window.as_secs_f64(),
            replica_cpu: (self.replica_cpu() - replica) / window.as_secs_f64(),
        };
        Ok((storm, rewrite))
    }

    /// Deletes `pods` and waits until each is gone (the kubelet's unmount and final status
    /// write), within [`GONE_WITHIN`]: how long that took.
    async fn delete_and_wait(&self, pods: &[String]) -> anyhow::Result<Duration> {
        let api = &self.cluster().api;
        let path = |pod: &str| format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}");
        for pod in pods {
            let (code, body) = api.send(Method::DELETE, &path(pod), None, None).await?;
            anyhow::ensure!(code == 200, "deleting {pod}: {code} {body}");
        }
        let deleted = Instant::now();
        let mut left = pods.to_vec();
        while !left.is_empty() && deleted.elapsed() < GONE_WITHIN {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut still = Vec::new();
            for pod in left {
                let (code, _) = api.send(Method::GET, &path(&pod), None, None).await?;
                if code != 404 {
                    still.push(pod);
                }
            }
            left = still;
        }
        anyhow::ensure!(
            left.is_empty(),
            "not gone {GONE_WITHIN:?} after deletion: {left:?}"
        );
        Ok(deleted.elapsed())
    }

    /// A quiet window of `length`: the kubelets' writes and reads, the webhook's reviews.
    async fn steady(&self, fleet: &HollowFleet, length: Duration) -> anyhow::Result<Steady> {
        let cluster = self.cluster();
        let before = apiserver_metrics(cluster).await?;
        let reviews = self.reviews().await;
        let mark: AuditMark = cluster.audit_mark();
        let kubelets_cpu = || {
            fleet
                .kubelet_pids()
                .into_iter()
                .map(cpu_seconds)
                .sum::<f64>()
        };
        let cpu = (kubelets_cpu(), cpu_seconds(cluster.apiserver_pid()));
        tokio::time::sleep(length).await;
        let after = apiserver_metrics(cluster).await?;
        let health_writes = cluster
            .status_writes(mark)?
            .into_iter()
            .filter(|w| w.user.starts_with("system:node:"))
            .fold(BTreeMap::new(), |mut by, w| {
                *by.entry(format!("{}/status", w.resource)).or_insert(0usize) += 1;
                by
            });
        Ok(Steady {
            minutes: length.as_secs_f64() / 60.0,
            kubelets_cpu: kubelets_cpu() - cpu.0,
            apiserver_cpu: cpu_seconds(cluster.apiserver_pid()) - cpu.1,
            reviews: self.reviews().await - reviews,
            health_writes,
            writes: requests_by_resource(&before, &after, &["PUT", "PATCH", "POST", "DELETE"]),
            reads: requests_by_resource(&before, &after, &["GET", "LIST"]),
        })
    }
}

/// What a quiet window measured.
struct Steady {
    minutes: f64,
    /// CPU seconds of every kubelet together, and of the apiserver.
    kubelets_cpu: f64,
    apiserver_cpu: f64,
    reviews: f64,
    /// The kubelets' status writes of pods and CSINodes (the audit log).
    health_writes: BTreeMap<String, usize>,
    /// Every write and read the apiserver served, by resource.
    writes: BTreeMap<String, f64>,
    reads: BTreeMap<String, f64>,
}

impl Steady {
    fn per_minute(&self, count: f64) -> f64 {
        count / self.minutes
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or("—".to_owned(), |v| format!("{:.0} ms", v * 1000.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale: needs the e2e tools and most of a machine for about an hour; `make scale`"]
async fn kep_1432_beta_scale_bar() {
    let size = Size::from_env();
    let mut phases = Phases::new("scale", PHASE_TIMEOUT);
    let mut report = String::new();
    let Some(scale) = phases
        .phase("control plane")
        .run(async {
            let limit = make_room_for(size.nodes)?;
            let plane = ControlPlane::start(true, &[]).await?;
            create_namespace(&plane.cluster.client(Identity::Admin).await?, NAMESPACE).await?;
            anyhow::Ok((plane, limit))
        })
        .await
    else {
        return phases.finish();
    };
    let (scale, _inotify) = scale;
    let native = kustomize(&manifests_dir().join("overlays/native"));
    let scale = Scale {
        size,
        plane: scale,
        native,
    };
    let size = &scale.size;
    let (nodes, claims, pods) = (size.nodes, size.claims, size.pods());
    let _ = writeln!(
        report,
        "{nodes} hollow kubelets × {claims} CSI claims and pods ({pods} in all), health probed \
         every {} s, one mock driver process; kube-apiserver v1.37.2 with the \
         gate on and the authorizer; the default install (webhooks with repair), native mode's \
         policies (repair on) or neither; steady states of {} s.\n",
        size.probe.as_secs(),
        size.steady.as_secs()
    );

    let created = phases
        .phase("claims, volumes and pods created")
        .timeout(Duration::from_secs(1800))
        .run(async {
            let started = Instant::now();
            scale.create_objects().await?;
            let took = started.elapsed();
            eprintln!("{pods} pods with their claims and volumes in {took:.0?}");
            anyhow::Ok(took)
        })
        .await;
    let Some(_) = created else {
        return phases.finish();
    };

    let Some(fleet) = phases
        .phase("kubelets Ready")
        .timeout(Duration::from_secs(1800))
        .run(async {
            let started = Instant::now();
            let fleet = HollowFleet::start(
                scale.cluster(),
                &bin_dir()?,
                "node",
                nodes,
                DRIVER,
                Periods {
                    probe: scale.size.probe,
                    resync: RESYNC,
                },
                &healthy("Start"),
            )
            .await?;
            eprintln!("{nodes} kubelets Ready in {:.0?}", started.elapsed());
            let _ = writeln!(report, "- the node processes at {}.", fleet.priority());
            anyhow::Ok(fleet)
        })
        .await
    else {
        return phases.finish();
    };

    phases
        .phase("every pod Running")
        .timeout(Duration::from_secs(1800))
        .run(async {
            let took = scale.wait_running(&fleet).await?;
            let _ = writeln!(
                report,
                "- every pod Running {:.0} s after the last kubelet was Ready.",
                took.as_secs_f64()
            );
            anyhow::Ok(())
        })
        .await;

    let all_pods: BTreeSet<String> = scale.size.each_pod().map(|(n, c)| pod_name(n, c)).collect();
    let steady_timeout = scale.size.steady + Duration::from_secs(120);
    // A storm and its way back: every report stored each time, never refused.
    let storm_and_back = |label: String| {
        let (scale, fleet, all_pods) = (&scale, &fleet, &all_pods);
        async move {
            let storm = scale.storm(fleet, &degraded(&label), all_pods).await?;
            storm.none_refused("writes")?;
            let back = scale
                .storm(fleet, &healthy(&format!("{label}Back")), all_pods)
                .await?;
            back.none_refused("writes back")?;
            anyhow::Ok((storm, back))
        }
    };
    let steady_window = |with: bool| {
        let (scale, fleet) = (&scale, &fleet);
        async move {
            let steady = scale.steady(fleet, scale.size.steady).await?;
            anyhow::ensure!(
                !with || steady.reviews == 0.0,
                "{} reviews in the steady state",
                steady.reviews
            );
            anyhow::ensure!(
                steady.health_writes.is_empty(),
                "health writes in the steady state: {:?}",
                steady.health_writes
            );
            anyhow::Ok(steady)
        }
    };

    // The storms, each install's interleaved with the others': what drifts in a run (the
    // machine's other load, the apiserver's caches and heap, a storm's place) falls on each.
    // Each storm is every pod's first report: pods are made again before it.
    let mut steady_before = None;
    let mut steady_after = None;
    let mut steady_none = None;
    let mut storms: Vec<(Install, Option<(Storm, Storm)>)> = Vec::new();
    let mut ready = "every pod Running".to_owned();
    let mut storm_phases: Vec<String> = Vec::new();
    let rounds = rounds(scale.size.repeats);
    for (round, &install) in rounds.iter().enumerate() {
        if round > 0 {
            let name = format!(
                "pods made again for storm {}, {}",
                round + 1,
                install.name()
            );
            let installed = rounds[round - 1];
            phases
                .phase(&name)
                .after(&ready)
                .timeout(Duration::from_secs(1800))
                .run(async {
                    scale.make_pods_again(&fleet).await?;
                    scale.switch(installed, install).await
                })
                .await;
            ready = name;
        }
        match (round, install) {
            (0, _) => {
                steady_before = phases
                    .phase("steady state, shipped configuration, before a storm")
                    .after(&ready)
                    .timeout(steady_timeout)
                    .run(steady_window(true))
                    .await;
            }
            (_, Install::Nothing) if steady_none.is_none() => {
                steady_none = phases
                    .phase("steady state, no configuration, before a storm")
                    .after(&ready)
                    .timeout(steady_timeout)
                    .run(steady_window(false))
                    .await;
            }
            _ => {}
        }
        let label = format!("Storm{}", round + 1);
        let name = format!("storm {}, {}", round + 1, install.name());
        let storm = phases
            .phase(&name)
            .after(&ready)
            .timeout(scale.storm_phase_timeout())
            .run(async {
                let (storm, back) = storm_and_back(label.clone()).await?;
                // A storm compares only if its install was there to match each write.
                let conditions = match install {
                    Install::Webhooks => storm.webhooks.conditions,
                    Install::Native => storm.policies.conditions,
                    Install::Nothing => f64::INFINITY,
                };
                anyhow::ensure!(
                    conditions > 0.0,
                    "no condition evaluated in a storm with the {}",
                    install.name()
                );
                anyhow::Ok((storm, back))
            })
            .await;
        storms.push((install, storm));
        storm_phases.push(name);
        if round == 0 {
            steady_after = phases
                .phase("steady state, shipped configuration, after a storm")
                .after(&ready)
                .timeout(steady_timeout)
                .run(steady_window(true))
                .await;
        }
    }

    // A tenth of the volumes report a duplicate pair (the first of every ten pods of a node),
    // repaired by the webhooks, then by the native policies; after each, a sample of pods
    // with and without the pair is deleted, on five nodes each time.
    let duplicated: BTreeSet<(usize, usize)> = (0..nodes)
        .flat_map(|n| (0..claims).step_by(10).map(move |c| (n, c)))
        .collect();
    let mut expected = all_pods.clone();
    let mut previous = rounds[rounds.len() - 1];
    let mut after = ready.clone();
    let mut pairs: Vec<(Install, Option<(Storm, Rewrite)>)> = Vec::new();
    for (turn, repairer) in [Install::Webhooks, Install::Native].into_iter().enumerate() {
        let name = format!(
            "storm with duplicate pairs, repaired by the {}",
            repairer.name()
        );
        let label = format!("StormPairs{}", turn + 1);
        let storm = phases
            .phase(&name)
            .after(&after)
            .timeout(scale.storm_phase_timeout())
            .run(async {
                scale.switch(previous, repairer).await?;
                scale
                    .pair_storm(&fleet, &label, &duplicated, &expected)
                    .await
            })
            .await;
        pairs.push((repairer, storm));
        previous = repairer;
        let sample: Vec<String> = (turn * 5..((turn + 1) * 5).min(nodes))
            .flat_map(|n| [pod_name(n, 0), pod_name(n, 1.min(claims - 1))])
            .collect();
        let deleted = format!(
            "pods with and without the pair deleted, {}",
            repairer.name()
        );
        phases
            .phase(&deleted)
            .after(&name)
            .timeout(GONE_WITHIN + Duration::from_secs(120))
            .run(async {
                let took = scale.delete_and_wait(&sample).await?;
                let _ = writeln!(
                    report,
                    "- Repaired by the {}: {} pods deleted, half of them with a repaired \
                     duplicate pair, all gone {:.0} s after the deletion.",
                    repairer.name(),
                    sample.len(),
                    took.as_secs_f64()
                );
                anyhow::Ok(())
            })
            .await;
        for pod in &sample {
            expected.remove(pod);
        }
        after = deleted;
    }
    let peak_memory = scale.plane.admission.pid().map_or(0.0, peak_memory_mib);

    write_report(
        &mut report,
        &scale.size,
        [
            steady_before.as_ref(),
            steady_after.as_ref(),
            steady_none.as_ref(),
        ],
        &storms,
        &pairs,
        peak_memory,
    );
    eprintln!("\n{report}");
    let mut bounds = phases.phase("the storm within bounds");
    for name in &storm_phases {
        bounds = bounds.after(name);
    }
    bounds
        .run(async {
            let shipped = measured(&storms, Install::Webhooks);
            let none = measured(&storms, Install::Nothing);
            let native = measured(&storms, Install::Native);
            let two_periods = 2.0 * scale.size.probe.as_secs_f64();
            for storm in &shipped {
                anyhow::ensure!(
                    scale.size.nodes > HEADROOM_NODES || storm.stored() <= two_periods,
                    "a storm took {:.0} s with the shipped configuration",
                    storm.stored()
                );
                // A call that failed open is a rule skipped: the timeout must hold the storm.
                anyhow::ensure!(
                    storm.failed_open == 0.0,
                    "{} webhook calls failed open in a storm",
                    storm.failed_open
                );
            }
            // From each kubelet's probe: the storm's own time, without the probes' phases.
            let path = |storms: &[&Storm]| mean(storms.iter().map(|s| s.longest_path()));
            for (install, storms) in [(Install::Webhooks, &shipped), (Install::Native, &native)] {
                anyhow::ensure!(
                    path(storms) <= path(&none) * 1.10 + 1.0,
                    "every report stored {:.1} s after its probe with the {}, {:.1} s with none \
                     (the storms' mean)",
                    path(storms),
                    install.name(),
                    path(&none)
                );
            }
            // What the webhooks add to a write, where the apiserver adds it (their conditions,
            // and their calls if any), in the worst shipped storm, against the apiserver's own
            // p99 for the pods' status writes.
            // The histograms place a p99 in a bucket: the bar is broken when the whole bucket
            // is above it, and the report says when the bucket straddles it.
            let bar = added_bar(&none);
            for storm in &shipped {
                let (above, _) = storm.added_p99_bucket();
                anyhow::ensure!(
                    above < bar,
                    "the webhooks add more than {} to a write's p99 ({} by interpolation), \
                     against a bar of {} (a tenth of the pod status writes' p99 with none)",
                    ms(Some(above)),
                    ms(Some(storm.added_p99())),
                    ms(Some(bar))
                );
            }
            anyhow::ensure!(
                peak_memory < REPLICA_MEMORY_LIMIT_MIB,
                "the replica's peak memory {peak_memory:.0} MiB is not under its limit"
            );
            anyhow::Ok(())
        })
        .await;
    fleet.check_running().ok();
    // A failed run's report is printed, not written: the page keeps the last run that passed.
    if std::env::var_os("VOLUME_HEALTH_E2E_WRITE_DOCS").is_some() && phases.all_passed() {
        write_docs(&report);
    }
    drop(fleet);
    phases.finish();
}

/// What the kubelets keep sending once a tenth of the volumes report a duplicate pair.
struct Rewrite {
    per_minute: f64,
    repaired: f64,
    reviews_per_second: f64,
    apiserver_cpu: f64,
    replica_cpu: f64,
}

fn write_report(
    report: &mut String,
    size: &Size,
    steady: [Option<&Steady>; 3],
    storms: &[(Install, Option<(Storm, Storm)>)],
    pairs: &[(Install, Option<(Storm, Rewrite)>)],
    peak_memory: f64,
) {
    let nodes = size.nodes as f64;
    let _ = writeln!(report);
    let _ = writeln!(
        report,
        "| steady state, per minute | shipped, before a storm | shipped, after a storm | \
         none, before a storm |"
    );
    let _ = writeln!(report, "|---|---|---|---|");
    let row = |report: &mut String, what: &str, f: &dyn Fn(&Steady) -> String| {
        let cells: Vec<String> = steady.iter().map(|s| s.map_or("—".to_owned(), f)).collect();
        let _ = writeln!(report, "| {what} | {} |", cells.join(" | "));
    };
    row(report, "reviews", &|s| {
        format!("{:.0}", s.per_minute(s.reviews))
    });
    for resource in ["pods/status", "csinodes/status"] {
        row(report, &format!("kubelets' {resource} writes"), &|s| {
            let count = s.health_writes.get(resource).copied().unwrap_or(0);
            format!("{:.1}", s.per_minute(count as f64))
        });
    }
    for resource in ["leases", "nodes/status"] {
        row(report, &format!("{resource} writes, per node"), &|s| {
            let count = s.writes.get(resource).copied().unwrap_or(0.0);
            format!("{:.1}", s.per_minute(count) / nodes)
        });
    }
    for resource in [
        "pods",
        "csinodes",
        "nodes",
        "persistentvolumeclaims",
        "persistentvolumes",
    ] {
        row(
            report,
            &format!("{resource} reads (GET, LIST), per node"),
            &|s| {
                let count = s.reads.get(resource).copied().unwrap_or(0.0);
                format!("{:.1}", s.per_minute(count) / nodes)
            },
        );
    }
    row(report, "CPU seconds: a kubelet", &|s| {
        format!("{:.2}", s.per_minute(s.kubelets_cpu) / nodes)
    });
    row(report, "CPU seconds: the apiserver", &|s| {
        format!("{:.1}", s.per_minute(s.apiserver_cpu))
    });
    let _ = writeln!(report);
    let headers: Vec<String> = storms
        .iter()
        .enumerate()
        .map(|(i, (install, _))| format!("{}: {}", i + 1, install.short()))
        .collect();
    let _ = writeln!(
        report,
        "| storm: every answer Degraded at once | {} |",
        headers.join(" | ")
    );
    let _ = writeln!(report, "|---|{}", "---|".repeat(storms.len()));
    let row = |report: &mut String, what: &str, f: &dyn Fn(&Storm, &Storm) -> String| {
        let cells: Vec<String> = storms
            .iter()
            .map(|(_, s)| {
                s.as_ref()
                    .map_or("—".to_owned(), |(storm, back)| f(storm, back))
            })
            .collect();
        let _ = writeln!(report, "| {what} | {} |", cells.join(" | "));
    };
    let secs = |v: f64| format!("{v:.1} s");
    row(
        report,
        "every report stored after (pods, CSINodes)",
        &|s, _| format!("{}, {}", secs(s.pods_stored), secs(s.csinodes_stored)),
    );
    row(report, "from each probe: p50, p99, most (pods)", &|s, _| {
        format!(
            "{}, {}, {}",
            secs(s.pod_path[0]),
            secs(s.pod_path[1]),
            secs(s.pod_path[2])
        )
    });
    row(
        report,
        "from each probe: p50, p99, most (CSINodes)",
        &|s, _| {
            format!(
                "{}, {}, {}",
                secs(s.csinode_path[0]),
                secs(s.csinode_path[1]),
                secs(s.csinode_path[2])
            )
        },
    );
    row(
        report,
        "kubelets' writes (pods/status, csinodes/status), refused",
        &|s, _| format!("{}, {}, {}", s.pod_writes, s.csinode_writes, s.refused),
    );
    row(report, "peak writes per second", &|s, _| {
        s.peak_writes.to_string()
    });
    row(report, "reviews (peak per second)", &|s, _| {
        format!("{:.0} ({:.0})", s.reviews, s.peak_reviews)
    });
    row(report, "pods/status PATCH p50, p99 (apiserver)", &|s, _| {
        format!("{}, {}", ms(Some(s.pod_took[0])), ms(Some(s.pod_took[1])))
    });
    row(
        report,
        "csinodes/status PUT p50, p99 (apiserver)",
        &|s, _| {
            format!(
                "{}, {}",
                ms(Some(s.csinode_took[0])),
                ms(Some(s.csinode_took[1]))
            )
        },
    );
    row(report, "the admission server's p99 answer", &|s, _| {
        ms(s.webhook_p99)
    });
    row(
        report,
        "the apiserver's webhook calls: count, p99, all within, failed open",
        &|s, _| {
            format!(
                "{:.0}, {}, {}, {:.0}",
                s.calls,
                ms(s.call_p99),
                ms(s.calls_within),
                s.failed_open
            )
        },
    );
    for (plugins, time) in [
        ("webhook", (|s| &s.webhooks) as fn(&Storm) -> &PluginTime),
        ("policy", |s| &s.policies),
    ] {
        row(
            report,
            &format!("the {plugins} admission plugins, a write: mean, p99"),
            &|s, _| format!("{:.0} µs, {}", time(s).mean * 1e6, ms(Some(time(s).p99))),
        );
        row(
            report,
            &format!("{plugins} matchConditions evaluated: count, mean, p99"),
            &|s, _| {
                format!(
                    "{:.0}, {:.0} µs, {}",
                    time(s).conditions,
                    time(s).condition_mean * 1e6,
                    ms(Some(time(s).condition_p99))
                )
            },
        );
    }
    row(report, "CPU: the replica, the apiserver", &|s, _| {
        format!("{:.1} s, {:.0} s", s.replica_cpu, s.apiserver_cpu)
    });
    row(
        report,
        "back to healthy: every report stored after",
        &|_, back| secs(back.stored()),
    );
    let _ = writeln!(report);
    let shipped = measured(storms, Install::Webhooks);
    let none = measured(storms, Install::Nothing);
    let native = measured(storms, Install::Native);
    let means = |storms: &[&Storm], f: fn(&Storm) -> f64| mean(storms.iter().map(|s| f(s)));
    let bar = added_bar(&none);
    let worst = shipped
        .iter()
        .map(|s| s.added_p99_bucket())
        .fold((0.0, 0.0), |(a, b), (c, d)| {
            (f64::max(a, c), f64::max(b, d))
        });
    // An install's storms against none's, on their means, with its plugins' time.
    let against_none = |storms: &[&Storm], plugins: &str, time: fn(&Storm) -> &PluginTime| {
        format!(
            "every report stored {:.1} s against {:.1} s after its probe; pods/status p99 {} \
             against {}; the {plugins} {:.0} µs against {:.0} µs a write (p99 {} against {})",
            means(storms, Storm::longest_path),
            means(&none, Storm::longest_path),
            ms(Some(means(storms, |s| s.pod_took[1]))),
            ms(Some(means(&none, |s| s.pod_took[1]))),
            mean(storms.iter().map(|s| time(s).mean)) * 1e6,
            mean(none.iter().map(|s| time(s).mean)) * 1e6,
            ms(Some(mean(storms.iter().map(|s| time(s).p99)))),
            ms(Some(mean(none.iter().map(|s| time(s).p99)))),
        )
    };
    let _ = writeln!(
        report,
        "- The storms' means, shipped configuration against none: {}. What the entries add \
         to a write, in the worst shipped storm: {} at the p99 (their conditions and calls; \
         the histograms' bucket: over {}, at most {}), against a bar of {} (a tenth of the \
         pods/status p99 with none): {}.",
        against_none(&shipped, "webhook admission plugins", |s| &s.webhooks),
        ms(Some(
            shipped.iter().map(|s| s.added_p99()).fold(0.0, f64::max)
        )),
        ms(Some(worst.0)),
        ms(Some(worst.1)),
        ms(Some(bar)),
        if worst.1 <= bar {
            "within it"
        } else if worst.0 >= bar {
            "above it"
        } else {
            "the histograms cannot tell"
        },
    );
    let _ = writeln!(
        report,
        "- The native policies' storms against none: {}. What the policies' conditions add to \
         a write, in the worst native storm: {} at the p99.",
        against_none(&native, "admission policy plugins", |s| &s.policies),
        ms(Some(
            native
                .iter()
                .map(|s| s.policies.condition_p99)
                .fold(0.0, f64::max)
        )),
    );
    let _ = writeln!(
        report,
        "- One replica's peak memory: {peak_memory:.0} MiB (its limit: \
         {REPLICA_MEMORY_LIMIT_MIB:.0} MiB)."
    );
    for (repairer, pair) in pairs {
        let Some((storm, rewrite)) = pair else {
            continue;
        };
        let _ = writeln!(
            report,
            "- A tenth of the volumes report a duplicate pair (kubernetes#142280), repaired by \
             the {}: every report stored {:.0} s after the change, {:.0} writes repaired, {}; \
             the apiserver's webhook calls {:.0}, p99 {}, all within {}, {:.0} failed \
             open. The kubelets then send each repaired pod status again at every resync: \
             {:.0} pod status writes a minute ({:.0} of them repaired), {:.1} reviews a second, \
             the apiserver {:.0} % of a core, the replica {:.1} % of a core.",
            repairer.name(),
            storm.stored(),
            storm.repaired,
            storm.refused_summary(),
            storm.calls,
            ms(storm.call_p99),
            ms(storm.calls_within),
            storm.failed_open,
            rewrite.per_minute,
            rewrite.repaired,
            rewrite.reviews_per_second,
            rewrite.apiserver_cpu * 100.0,
            rewrite.replica_cpu * 100.0
        );
    }
}

/// Writes the report into `docs/benchmarks.md`, between its scale markers.
fn write_docs(report: &str) {
    let path = volume_health_tests::repository().join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).expect("docs/benchmarks.md");
    let (begin, end) = ("<!-- scale report: begin -->", "<!-- scale report: end -->");
    let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
        panic!("docs/benchmarks.md has no {begin} … {end}");
    };
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let dated = format!(
        "{begin}\nMeasured {} on {machine} cores.\n\n{report}{end}",
        Timestamp::now().strftime("%Y-%m-%d")
    );
    let text = format!("{}{dated}{}", &text[..a], &text[b + end.len()..]);
    std::fs::write(&path, text).expect("writes docs/benchmarks.md");
}

#[test]
fn each_install_storms_as_often_and_as_early_as_the_others() {
    use Install::{Native, Nothing, Webhooks};
    assert_eq!(rounds(1), [Webhooks, Nothing, Native]);
    assert_eq!(
        rounds(2),
        [Webhooks, Nothing, Native, Native, Nothing, Webhooks]
    );
    // Over two repeats, each install's places add up alike: a drift along the run falls on
    // each the same.
    let places = |install: Install| -> usize {
        rounds(2)
            .iter()
            .enumerate()
            .filter(|(_, i)| **i == install)
            .map(|(place, _)| place)
            .sum()
    };
    assert_eq!(places(Webhooks), places(Nothing));
    assert_eq!(places(Nothing), places(Native));
}

/// A repair storm's refusals pass only when the apiserver, not the replica, ran out of time
/// and the writer's resend was stored.
#[test]
fn a_repair_storm_forgives_only_a_stalled_apiserver_whose_write_came_back() {
    let storm = |refused, failed_open, unrecovered, within| Storm {
        refused,
        refused_failed_open: failed_open,
        refused_unrecovered: unrecovered,
        webhook_within: within,
        ..Storm::default()
    };
    let cases = [
        ("none refused", storm(0, 0, 0, None), true),
        (
            "failed open, fast replica, resent",
            storm(1, 1, 0, Some(0.01)),
            true,
        ),
        (
            "at the bound",
            storm(2, 2, 0, Some(REPLICA_ANSWERED_WITHIN)),
            true,
        ),
        ("refused with an answer", storm(1, 0, 0, Some(0.01)), false),
        ("one of two failed open", storm(2, 1, 0, Some(0.01)), false),
        ("never stored after", storm(1, 1, 1, Some(0.01)), false),
        ("slow replica", storm(1, 1, 0, Some(2.5)), false),
        ("no answer measured", storm(1, 1, 0, None), false),
    ];
    for (name, storm, passes) in cases {
        let result = storm.refusals_recovered("writes");
        assert_eq!(result.is_ok(), passes, "{name}: {result:?}");
        assert!(
            storm.none_refused("writes").is_ok() == (storm.refused == 0),
            "{name}"
        );
    }
}
