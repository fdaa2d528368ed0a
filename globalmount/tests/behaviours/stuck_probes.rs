//! The continuous mode over a dead mount: a stat of its `globalmount` never
//! returns. Each run must still say "kubelet would not list it" for that
//! volume only, and the helper threads must not pile up run after run.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use csi_globalmount::fs::{DirEntryInfo, EntryKind, StatProbe, StatProber};
use csi_globalmount::{HostFs, NodeFs, NodeInputs, diagnose};

use crate::fixture::{FixtureNode, NODE, gm};

const EBS: &str = "ebs.csi.aws.com";
const RUNS: usize = 100;

/// A gate that stat calls on the dead mount wait at until the test ends.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let open = self.open.lock().expect("gate");
        let _open = self.opened.wait_while(open, |open| !*open).expect("gate");
    }

    fn open(&self) {
        *self.open.lock().expect("gate") = true;
        self.opened.notify_all();
    }
}

/// The fixture's files, with a stat of `dead` that blocks as on an NFS
/// server that went away.
struct DeadMountFs {
    files: HostFs,
    prober: StatProber,
    dead: PathBuf,
    gate: Arc<Gate>,
}

impl NodeFs for DeadMountFs {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntryInfo>> {
        self.files.read_dir(path)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.files.read_file(path)
    }
    fn entry_kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        self.files.entry_kind(path)
    }
    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        self.files.modified(path)
    }
    fn probe_stat(&self, path: &Path) -> StatProbe {
        let gate = Arc::clone(&self.gate);
        let dead = path == self.dead;
        self.prober.probe(path, move || {
            if dead {
                gate.wait();
            }
            Ok(())
        })
    }
}

/// Threads of this process named as the prober names its probe threads.
fn probe_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "stat-probe")
        .count()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_dead_mount_costs_one_stuck_thread_over_a_hundred_runs() {
    let mut node = FixtureNode::new();
    let dead = node.stage_fs(EBS, "vol-0dead", None);
    let live = node.stage_fs(EBS, "vol-0live", None);
    node.mount("259:1", "/", gm(&dead));
    node.mount("259:2", "/", gm(&live));
    let gate = Arc::new(Gate::default());
    let fs = DeadMountFs {
        files: node.fs(),
        prober: StatProber::new(Duration::from_millis(50)),
        dead: gm(&dead),
        gate: Arc::clone(&gate),
    };
    let table = node.table();
    let threads_before = probe_threads();
    let rss_before = rss_kib();
    let mut most_threads = 0;
    for run in 0..RUNS {
        let inputs = NodeInputs {
            fs: &fs,
            layout: &node.layout,
            table: &table,
            mountinfo_source: "fixture".to_owned(),
            node_name: Some(NODE.to_owned()),
            node: None,
            volume_attachments: None,
        };
        let report = diagnose(&inputs).expect("diagnose");
        assert_eq!(report.global_volumes.len(), 2, "run {run}");
        for volume in &report.global_volumes {
            let is_dead = volume.device_mount_path == gm(&dead).to_string_lossy();
            assert_eq!(volume.kubelet_would_list, !is_dead, "run {run}: {volume:?}");
            let detail = volume.kubelet_would_list_detail.as_deref();
            if is_dead {
                let expected = if run == 0 {
                    "did not return within 50ms"
                } else {
                    "has not returned"
                };
                assert!(
                    detail.is_some_and(|d| d.contains(expected)),
                    "run {run}: {detail:?}"
                );
            } else {
                assert_eq!(detail, None, "run {run}");
            }
        }
        most_threads = most_threads.max(probe_threads().saturating_sub(threads_before));
    }
    let rss_after = rss_kib();
    eprintln!(
        "{RUNS} runs with a dead mount: at most {most_threads} probe threads alive, \
         RSS {rss_before} KiB before, {rss_after} KiB after"
    );
    // The stuck one, and live probes that have answered but not yet exited
    // (a few on a loaded machine); a thread per run would be a hundred.
    assert!(most_threads <= 10, "{most_threads} probe threads");
    assert_eq!(fs.prober.stuck(), 1);
    // Once the answered ones have exited, only the stuck one is left.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while probe_threads().saturating_sub(threads_before) > 1 && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    assert_eq!(probe_threads().saturating_sub(threads_before), 1);

    // Once the mount answers again, the next run probes it afresh.
    gate.open();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fs.prober.stuck() > 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(fs.prober.stuck(), 0);
    assert_eq!(fs.prober.probe(&gm(&dead), || Ok(())), StatProbe::Reachable);

    // In the same test, so that no other test's probe threads are counted above.
    the_prober_leaves_paths_unprobed_beyond_its_bound_of_stuck_stats();
}

fn the_prober_leaves_paths_unprobed_beyond_its_bound_of_stuck_stats() {
    let gate = Arc::new(Gate::default());
    let prober = StatProber::with_bound(Duration::from_millis(10), 3);
    for i in 0..3 {
        let gate = Arc::clone(&gate);
        let probe = prober.probe(Path::new(&format!("/dead/{i}")), move || {
            gate.wait();
            Ok(())
        });
        assert_eq!(probe, StatProbe::TimedOut(Duration::from_millis(10)));
    }
    // A fourth stuck path would need a fourth thread.
    assert_eq!(
        prober.probe(Path::new("/dead/3"), || Ok(())),
        StatProbe::NotProbed
    );
    assert!(matches!(
        prober.probe(Path::new("/dead/0"), || Ok(())),
        StatProbe::StillStuck(_)
    ));
    assert_eq!(prober.stuck(), 3);
    gate.open();
}
