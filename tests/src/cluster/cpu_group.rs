//! One CPU control group for a fleet's node processes, weighing as one. On a real cluster the
//! kubelets run on other machines; here a hundred share two cores with the control plane.
//! Linux weighs each process on its own, so even at nice 10 a hundred kubelets outweigh the
//! apiserver's threads. In one group they weigh as one process at nice 0: under contention the
//! control plane keeps about a core of the two, and the kubelets still take every cycle it
//! leaves. A quarter of that weight was tried at 100 nodes and starved the kubelets: their
//! work at rest takes more than a core there, and a storm was not stored within 10 minutes.

use std::path::{Path, PathBuf};

/// The group's weight: a process at nice 0 weighs 1024 (cgroup v1 `cpu.shares`).
const SHARES: u32 = 1024;
/// The same weight on cgroup v2's scale (`cpu.weight`, 100 for nice 0).
const WEIGHT: u32 = 100;
/// Where cgroup v1 mounts its `cpu` controller.
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
/// Where a unified (v2) hierarchy is mounted, alone or beside v1.
const V2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// A CPU cgroup the test made, removed when dropped (after its processes exited).
#[derive(Debug)]
pub(crate) struct CpuGroup {
    dir: PathBuf,
    /// `cpu.shares` or `cpu.weight`, and the value written there.
    weight: (&'static str, u32),
}

impl std::fmt::Display for CpuGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (file, value) = self.weight;
        write!(
            f,
            "one CPU cgroup ({}, {file} {value}: as much as one process at nice 0)",
            self.dir.display()
        )
    }
}

impl CpuGroup {
    /// Makes group `name` with that weight, under cgroup v1's `cpu` controller or at the
    /// root of a v2 hierarchy that offers `cpu`. `None` where neither can be written (not root,
    /// a read-only mount, no `cpu` controller): the processes then run at nice 10 alone.
    pub(crate) fn create(name: &str) -> Option<Self> {
        let v1 = Path::new(V1_CPU);
        if v1.join("cpu.shares").exists() {
            return Self::make(&v1.join(name), "cpu.shares", SHARES);
        }
        V2_ROOTS.iter().map(Path::new).find_map(|root| {
            let controllers = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            if !controllers.split_whitespace().any(|c| c == "cpu") {
                std::fs::write(root.join("cgroup.subtree_control"), "+cpu").ok()?;
            }
            Self::make(&root.join(name), "cpu.weight", WEIGHT)
        })
    }

    fn make(dir: &Path, file: &'static str, weight: u32) -> Option<Self> {
        // A group left by a run stopped with a signal is taken over.
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        // Made first, so that it is removed again when the weight cannot be written.
        let group = CpuGroup {
            dir: dir.to_owned(),
            weight: (file, weight),
        };
        std::fs::write(dir.join(file), weight.to_string()).ok()?;
        Some(group)
    }

    /// Moves process `pid` (all its threads) into the group; what it starts later is born
    /// there.
    pub(crate) fn add(&self, pid: u32) -> std::io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// Where the group lives, for the report.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Emptied when its processes exit; an exiting one may still be listed for a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("could not remove the CPU group {}", self.dir.display());
    }
}
