//! A dense node, diagnosed end to end: 4,000 staged volumes, each bound into a
//! pod, plus each pod's projected token mounts, for 28,001 mount lines (the
//! shape of a node packed with small StatefulSet pods). Before the mount table
//! and the pairings were indexed this took over a minute; the bound is 10 s.
//!
//! `cargo bench -p csi-globalmount --bench dense_node` builds the tree in a
//! temporary directory once and prints the median of five diagnoses.

use std::time::{Duration, Instant};

// The test suite's tree builder: the bench measures the same trees the tests check.
use csi_globalmount::fixture::{FixtureNode, PodData, gm, mnt};

const VOLUMES: usize = 4000;
const BOUND: Duration = Duration::from_secs(10);

fn main() {
    let driver = "ebs.csi.aws.com";
    let mut node = FixtureNode::new();
    for i in 0..VOLUMES {
        let handle = format!("vol-{i:08x}");
        let global = node.stage_fs(driver, &handle, None);
        let uid = format!("uid-{i:05}");
        let pod = node.pod_fs_volume(
            &uid,
            &format!("pvc-{i}"),
            PodData::Written {
                driver,
                handle: &handle,
            },
        );
        node.bind(&format!("259:{}", i + 16), gm(&global), mnt(&pod));
        for j in 0..5 {
            let token = node.layout.pods_dir().join(&uid).join(format!(
                "volumes/kubernetes.io~projected/kube-api-access-{j}"
            ));
            node.mount_with("0:1024", "/", token, "tmpfs", "tmpfs");
        }
    }
    let mounts = node.mountinfo_text().lines().count();

    let mut runs = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let report = node.diagnose();
        runs.push(started.elapsed());
        assert_eq!(report.summary.in_use, VOLUMES, "every volume is in use");
        assert!(!report.has_findings());
    }
    runs.sort();
    let median = runs[runs.len() / 2];
    println!(
        "dense node: {VOLUMES} volumes, {mounts} mounts: median {median:?} over {} runs (min {:?}, max {:?})",
        runs.len(),
        runs[0],
        runs[runs.len() - 1]
    );
    assert!(median < BOUND, "median {median:?} is not under {BOUND:?}");
}
