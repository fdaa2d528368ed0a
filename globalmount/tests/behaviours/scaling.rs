//! Work that grows with the node, on hostile sizes: thousands of staged block
//! volumes, and tens of thousands of `subPath: "."` bind mounts of one
//! volume (each shows the volume's root, so each is a reference of its
//! global mount). A run must take time linear in them: four times the input
//! may take at most eight times as long (a quadratic step takes sixteen).

use std::time::{Duration, Instant};

use csi_globalmount::Report;

use crate::fixture::{FixtureNode, gm};

const EBS: &str = "ebs.csi.aws.com";

/// CPU time this thread has used, from the scheduler's accounting; on a
/// machine shared with other work it moves only while this thread runs,
/// unlike the wall clock. The wall clock where the kernel does not tell.
fn thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// How long one run over `node` takes, and checks its report.
fn run_time(node: &FixtureNode, check: &impl Fn(&Report)) -> Duration {
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    let report = node.diagnose();
    let took = match (cpu, thread_cpu_time()) {
        (Some(before), Some(after)) => after.saturating_sub(before),
        _ => wall.elapsed(),
    };
    check(&report);
    took
}

/// The fastest of three runs at each size, the sizes taking turns, so that
/// a slow moment of a shared machine neither decides a time nor lands on one
/// size only.
fn times(
    small: &FixtureNode,
    large: &FixtureNode,
    check: impl Fn(&Report, bool),
) -> (Duration, Duration) {
    let check_small = |r: &Report| check(r, false);
    let check_large = |r: &Report| check(r, true);
    let mut best = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        best.0 = best.0.min(run_time(small, &check_small));
        best.1 = best.1.min(run_time(large, &check_large));
    }
    best
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

fn built(what: &str, count: usize, build: impl FnOnce(usize) -> FixtureNode) -> FixtureNode {
    let started = Instant::now();
    let node = build(count);
    eprintln!("{count} {what} built in {:?}", started.elapsed());
    node
}

#[test]
fn a_run_over_many_block_volumes_takes_linear_time() {
    const N: usize = 4_000;
    let small = built("block volumes", N, block_volumes);
    let large = built("block volumes", 4 * N, block_volumes);
    let (at_n, at_4n) = times(&small, &large, |report, large| {
        assert_eq!(report.global_volumes.len(), if large { 4 * N } else { N });
    });
    assert_linear("block volumes", at_n, at_4n);
}

#[test]
fn a_run_over_many_subpath_mounts_of_one_volume_takes_linear_time() {
    const N: usize = 7_500;
    let small = built("subPath mounts", N, subpath_mounts);
    let large = built("subPath mounts", 4 * N, subpath_mounts);
    let (at_n, at_4n) = times(&small, &large, |report, large| {
        assert_eq!(report.global_volumes.len(), 1);
        let count = if large { 4 * N } else { N };
        assert_eq!(report.global_volumes[0].pod_refs.len(), count);
    });
    assert_linear("subPath mounts", at_n, at_4n);
}
