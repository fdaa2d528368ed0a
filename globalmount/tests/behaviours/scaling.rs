//! Work that grows with the node, on hostile sizes: thousands of staged block
//! volumes, and tens of thousands of `subPath: "."` bind mounts of one
//! volume (each shows the volume's root, so each is a reference of its
//! global mount). A run must take time linear in them: four times the input
//! may take at most eight times as long (a quadratic step takes sixteen).

use std::time::{Duration, Instant};

use csi_globalmount::Report;

use crate::fixture::{FixtureNode, gm};

const EBS: &str = "ebs.csi.aws.com";

/// The fastest of three runs, so that one slow moment of a shared machine
/// does not decide the ratio.
fn run_time(node: &FixtureNode, check: impl Fn(&Report)) -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            let report = node.diagnose();
            let took = started.elapsed();
            check(&report);
            took
        })
        .min()
        .expect("three runs")
}

fn block_volumes(count: usize) -> FixtureNode {
    let node = FixtureNode::new();
    for i in 0..count {
        node.stage_block(&format!("pvc-{i:06}"), EBS, &format!("vol-{i:06}"));
    }
    node
}

fn subpath_mounts(count: usize) -> FixtureNode {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(EBS, "vol-0subpath", Some("pvc-subpath"));
    node.mount("259:1", "/", gm(&global));
    for i in 0..count {
        let subpath = node
            .layout
            .pods_dir()
            .join(format!("uid-{}", i % 100))
            .join("volume-subpaths/pvc-subpath/app")
            .join(i.to_string());
        node.mount("259:1", "/", subpath);
    }
    node
}

fn assert_linear(what: &str, small: Duration, large: Duration) {
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-3);
    eprintln!("{what}: {small:?} at N, {large:?} at 4N, ratio {ratio:.1}");
    assert!(ratio < 8.0, "{what}: {small:?} at N, {large:?} at 4N");
}

#[test]
fn a_run_over_many_block_volumes_takes_linear_time() {
    const N: usize = 4_000;
    let time = |count: usize| {
        let built = Instant::now();
        let node = block_volumes(count);
        eprintln!("{count} block volumes built in {:?}", built.elapsed());
        run_time(&node, |report| {
            assert_eq!(report.global_volumes.len(), count)
        })
    };
    assert_linear("block volumes", time(N), time(4 * N));
}

#[test]
fn a_run_over_many_subpath_mounts_of_one_volume_takes_linear_time() {
    const N: usize = 7_500;
    let time = |count: usize| {
        let built = Instant::now();
        let node = subpath_mounts(count);
        eprintln!("{count} subPath mounts built in {:?}", built.elapsed());
        run_time(&node, |report| {
            assert_eq!(report.global_volumes.len(), 1);
            assert_eq!(report.global_volumes[0].pod_refs.len(), count);
        })
    };
    assert_linear("subPath mounts", time(N), time(4 * N));
}
