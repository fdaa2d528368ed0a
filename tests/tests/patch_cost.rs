//! What kube-apiserver v1.37.2 pays to apply the repair's JSON Patch, measured with its own
//! patch library: `patchcost` (`tests/e2e/tools/kube-apiserver/patchcost`) decodes and applies
//! a patch as the mutating dispatcher does, with the json-patch the pinned k8s.io/apiserver
//! links. A claim, a pod and a CSINode whose report holds N copies of one condition, from 0.375
//! to 3 MiB: the repair's patch (one `replace` of the whole list) must cost time and memory
//! linear in the object, and give the object that one `remove` per dropped item gave, which
//! cost quadratic time (the library copies the array on each remove). Prints the table of both.
//! Needs Go's build (`tests/e2e/tools/build.sh`), so ignored: `make e2e`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use serde::Deserialize;
use serde_json::{Value, json};
use volume_health_tests::phases::Phases;

/// The objects' sizes, each twice the last: linear cost grows 8 times from first to last,
/// quadratic 64 times. The last is kube-apiserver's largest request body.
const SIZES: [usize; 4] = [384 << 10, 768 << 10, 1536 << 10, 3072 << 10];

/// The old patch is measured up to here only: at 1.5 MiB one apply takes about 2 s, at 3 MiB
/// 7 to 8 s on two cores, which would triple the suite's time for a figure the assertions do
/// not need.
const OLD_UP_TO: usize = 1536 << 10;

/// Enough runs of the new patch for a steady figure: about 0.5 s per size.
fn runs(size: usize) -> usize {
    8 * SIZES[SIZES.len() - 1] / size
}

/// A volume's condition the repair drops N - 1 copies of.
fn condition() -> Value {
    json!({"status": "Degraded", "reason": "Slow", "message": "m"})
}

/// A driver's condition, repeated the same way.
fn storage_condition() -> Value {
    json!({"status": "StorageDegraded", "reason": "Full", "message": "m"})
}

/// A resource whose report the repair cuts to its first condition.
struct Resource {
    name: &'static str,
    /// The condition the report repeats.
    condition: fn() -> Value,
    /// The object with `n` copies of the condition.
    object: fn(usize) -> Value,
    /// The field the new patch replaces whole, and its repaired value.
    field: &'static str,
    repaired: fn() -> Value,
    /// The list the old patch removed from, item by item.
    list: &'static str,
}

const CLAIM: Resource = Resource {
    name: "claim",
    condition,
    object: |n| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "claim", "namespace": "apps", "uid": "6b1c4b0e-0000-4000-8000-000000000002",
                "resourceVersion": "9"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                "volumeName": "pv-1", "storageClassName": "fast"},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"},
                "healthStatus": {"healthConditions": vec![condition(); n],
                    "lastTransitionTime": "2026-07-20T12:00:00Z"}}})
    },
    field: "/status/healthStatus/healthConditions",
    repaired: || json!([condition()]),
    list: "/status/healthStatus/healthConditions",
};

const POD: Resource = Resource {
    name: "pod",
    condition,
    object: |n| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "apps", "uid": "6b1c4b0e-0000-4000-8000-000000000001",
                "resourceVersion": "7"},
            "spec": {"nodeName": "node1", "containers": [{"name": "app", "image": "registry.example/app:1"}],
                "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": "claim"}}]},
            "status": {"phase": "Running", "qosClass": "BestEffort",
                "volumeHealth": [{"name": "vol", "healthConditions": vec![condition(); n]}]}})
    },
    field: "/status/volumeHealth",
    repaired: || json!([{"name": "vol", "healthConditions": [condition()]}]),
    list: "/status/volumeHealth/0/healthConditions",
};

const CSINODE: Resource = Resource {
    name: "CSINode",
    condition: storage_condition,
    object: |n| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "node1", "uid": "6b1c4b0e-0000-4000-8000-000000000003", "resourceVersion": "5",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node1",
                    "uid": "6b1c4b0e-0000-4000-8000-000000000004"}]},
            "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "node1", "topologyKeys": null}]},
            "status": {"storageHealth": [{"name": "csi.example.com",
                "healthConditions": vec![storage_condition(); n]}]}})
    },
    field: "/status/storageHealth",
    repaired: || json!([{"name": "csi.example.com", "healthConditions": [storage_condition()]}]),
    list: "/status/storageHealth/0/healthConditions",
};

/// `patchcost`'s answer for one patch.
#[derive(Debug, Deserialize)]
struct Cost {
    ns_per_apply: u64,
    min_ns_per_apply: u64,
    bytes_per_apply: u64,
    result_bytes: usize,
    result_sha256: String,
    object_bytes: usize,
    patch_bytes: usize,
}

/// `patchcost` in `VOLUME_HEALTH_E2E_BIN`, where `tests/e2e/tools/build.sh` puts it.
fn patchcost() -> Result<PathBuf> {
    let dir = std::env::var_os("VOLUME_HEALTH_E2E_BIN")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("VOLUME_HEALTH_E2E_BIN is not set: run `make e2e`"))?;
    let tool = dir.join("patchcost");
    if !tool.exists() {
        bail!("{} is missing: `make e2e` builds it", tool.display());
    }
    Ok(tool)
}

/// Applies `patch` to `object` `runs` times in a process of its own, so that the heap a slow
/// patch leaves does not change the next one's garbage collection.
fn cost(tool: &Path, object: &Value, patch: &Value, runs: usize) -> Result<Cost> {
    let input = serde_json::to_vec(&json!({"object": object, "patch": patch, "runs": runs}))?;
    let mut child = Command::new(tool)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", tool.display()))?;
    // patchcost reads the whole document before it writes: no pipe fills while this one writes.
    child
        .stdin
        .take()
        .context("patchcost's stdin")?
        .write_all(&input)?;
    let output = child.wait_with_output()?;
    ensure!(
        output.status.success(),
        "patchcost failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    serde_json::from_slice(&output.stdout).context("patchcost's answer")
}

/// The number of conditions that makes the object `size` bytes, or just under.
fn conditions_for(resource: &Resource, size: usize) -> Result<usize> {
    let len = |n| serde_json::to_vec(&(resource.object)(n)).map(|v| v.len());
    let one = len(1)?;
    // Each further condition adds itself and a comma.
    let each = serde_json::to_vec(&(resource.condition)())?.len() + 1;
    ensure!(one <= size, "{} is larger than {size} bytes", resource.name);
    Ok(1 + (size - one) / each)
}

/// The repair's patch: the whole list, repaired, in one `replace`.
fn new_patch(resource: &Resource) -> Value {
    json!([{"op": "replace", "path": resource.field, "value": (resource.repaired)()}])
}

/// The patch the webhook sent before: one `remove` per dropped item, the last first so that
/// each index still names the item it meant.
fn old_patch(resource: &Resource, n: usize) -> Value {
    (1..n)
        .rev()
        .map(|i| json!({"op": "remove", "path": format!("{}/{i}", resource.list)}))
        .collect()
}

/// One size's figures: the new patch's, and the old one's where it was measured.
struct Row {
    size: usize,
    conditions: usize,
    new: Cost,
    old: Option<Cost>,
}

fn measure(tool: &Path, resource: &Resource) -> Result<()> {
    // The object the repair leaves, serialized: its length must be the patched result's, in any
    // order of keys.
    let repaired_len = serde_json::to_vec(&(resource.object)(1))?.len();
    let mut rows = Vec::new();
    for size in SIZES {
        let n = conditions_for(resource, size)?;
        let object = (resource.object)(n);
        let new = cost(tool, &object, &new_patch(resource), runs(size))
            .with_context(|| format!("the new patch at {size} bytes"))?;
        ensure!(
            new.result_bytes == repaired_len,
            "{}: the new patch at {size} bytes gives {} bytes, not the {repaired_len} of the \
             object with one condition",
            resource.name,
            new.result_bytes
        );
        let old = if size <= OLD_UP_TO {
            let old = cost(tool, &object, &old_patch(resource, n), 1)
                .with_context(|| format!("the old patch at {size} bytes"))?;
            ensure!(
                old.result_sha256 == new.result_sha256,
                "{}: at {size} bytes the old patch gives {} bytes (sha256 {}), the new one {} \
                 (sha256 {})",
                resource.name,
                old.result_bytes,
                old.result_sha256,
                new.result_bytes,
                new.result_sha256
            );
            Some(old)
        } else {
            None
        };
        rows.push(Row {
            size,
            conditions: n,
            new,
            old,
        });
    }
    print_table(resource, &rows);

    let (first, last) = (&rows[0], &rows[rows.len() - 1]);
    let size_ratio = last.new.object_bytes as f64 / first.new.object_bytes as f64;
    // The fastest apply: the mean of a few runs moves with whatever else the machine runs.
    let time_ratio = last.new.min_ns_per_apply as f64 / first.new.min_ns_per_apply as f64;
    let bytes_ratio = last.new.bytes_per_apply as f64 / first.new.bytes_per_apply as f64;
    eprintln!(
        "{}: new patch, objects x{size_ratio:.1}: time x{time_ratio:.1}, bytes x{bytes_ratio:.1} \
         (linear 8, quadratic 64)",
        resource.name
    );
    // Twice linear: room for a noisy machine, far below quadratic.
    ensure!(
        time_ratio <= 16.0,
        "{}: the new patch's time grows x{time_ratio:.1} for objects x{size_ratio:.1}",
        resource.name
    );
    ensure!(
        bytes_ratio <= 16.0,
        "{}: the new patch's allocations grow x{bytes_ratio:.1} for objects x{size_ratio:.1}",
        resource.name
    );
    // The baseline shows the measure tells quadratic from linear: its allocations are
    // counted, not timed, so the bound holds on any machine.
    let old: Vec<&Cost> = rows.iter().filter_map(|row| row.old.as_ref()).collect();
    let (old_first, old_last) = (old[0], old[old.len() - 1]);
    let old_size_ratio = old_last.object_bytes as f64 / old_first.object_bytes as f64;
    let old_bytes_ratio = old_last.bytes_per_apply as f64 / old_first.bytes_per_apply as f64;
    eprintln!(
        "{}: old patch, objects x{old_size_ratio:.1}: bytes x{old_bytes_ratio:.1} (linear \
         {old_size_ratio:.0}, quadratic {:.0})",
        resource.name,
        old_size_ratio * old_size_ratio
    );
    ensure!(
        old_bytes_ratio > 2.0 * old_size_ratio,
        "{}: the old patch's allocations grow only x{old_bytes_ratio:.1} for objects \
         x{old_size_ratio:.1}: the measure no longer sees its quadratic cost",
        resource.name
    );
    Ok(())
}

fn print_table(resource: &Resource, rows: &[Row]) {
    eprintln!(
        "{}: {:>9} {:>9} {:>6} | {:>9} {:>14} {:>14} | {:>6} {:>12} {:>12} {:>12}",
        resource.name,
        "MiB",
        "object",
        "items",
        "old patch",
        "old ns/apply",
        "old B/apply",
        "patch",
        "new ns/apply",
        "new min ns",
        "new B/apply"
    );
    for row in rows {
        let old = |field: fn(&Cost) -> String| {
            row.old.as_ref().map_or_else(|| "not run".to_owned(), field)
        };
        eprintln!(
            "{}: {:>9} {:>9} {:>6} | {:>9} {:>14} {:>14} | {:>6} {:>12} {:>12} {:>12}",
            resource.name,
            format!("~{}", row.size as f64 / f64::from(1 << 20)),
            row.new.object_bytes,
            row.conditions,
            old(|c| c.patch_bytes.to_string()),
            old(|c| c.ns_per_apply.to_string()),
            old(|c| c.bytes_per_apply.to_string()),
            row.new.patch_bytes,
            row.new.ns_per_apply,
            row.new.min_ns_per_apply,
            row.new.bytes_per_apply
        );
    }
}

#[tokio::test]
#[ignore = "runs patchcost, which tests/e2e/tools/build.sh builds with Go: `make e2e`"]
async fn the_repair_patch_costs_the_apiserver_linear_time() {
    let mut phases = Phases::new("patch_cost", Duration::from_secs(120));
    let Some(tool) = phases.phase("patchcost").run(async { patchcost() }).await else {
        return phases.finish();
    };
    for resource in [&CLAIM, &POD, &CSINODE] {
        phases
            .phase(resource.name)
            .run(async { measure(&tool, resource) })
            .await;
    }
    phases.finish();
}
