//! Mount references: which other mount points show the same directory of the
//! same device (mount-utils' `GetMountRefs`, `SearchMountPoints` and kubelet's
//! `GetReliableMountRefs`).
//!
//! A pod's bind mount of a `globalmount` and the `globalmount` itself share
//! device and root, so each is a reference of the other. That is how kubelet,
//! and this crate, tell which global mount a pod volume came from.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::fs::NodeFs;
use crate::layout::clean_path;
use crate::mountinfo::{
    ConsistentReadError, MAX_LIST_TRIES, MountInfo, MountInfoError, MountInfoSource,
    consistent_read, parse_mountinfo,
};

/// Why mount references could not be computed.
#[derive(Debug, Error)]
pub enum MountRefsError {
    /// The mount table could not be read consistently.
    #[error(transparent)]
    Read(#[from] ConsistentReadError),
    /// The mount table did not parse.
    #[error(transparent)]
    Parse(#[from] MountInfoError),
    /// No mount contains the path, not even `/`.
    #[error("failed to get root path and major:minor for {}", path.display())]
    NoEnclosingMount {
        /// The path looked up.
        path: PathBuf,
    },
    /// Whether the path exists could not be decided.
    #[error("checking {}", path.display())]
    Existence {
        /// The path looked up.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl MountRefsError {
    /// Whether retrying may help: only a torn read of a changing table.
    pub fn is_inconsistent_read(&self) -> bool {
        matches!(self, Self::Read(ConsistentReadError::Inconsistent { .. }))
    }
}

/// A parsed mount table, in file order, indexed by mount point and by
/// (root, device) so that lookups cost the same on a node with 30,000 mounts
/// as on one with 30.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountTable {
    entries: Vec<MountInfo>,
    /// Entry indexes (file order) by mount point. Ordered by path components,
    /// so everything mounted below a path follows it contiguously.
    by_mount_point: BTreeMap<PathBuf, Vec<usize>>,
    /// Entry indexes (file order) by the directory and device they show.
    by_root_and_device: HashMap<(PathBuf, i64, i64), Vec<usize>>,
}

impl MountTable {
    /// Wraps parsed entries.
    pub fn new(entries: Vec<MountInfo>) -> Self {
        let mut by_mount_point: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
        let mut by_root_and_device: HashMap<(PathBuf, i64, i64), Vec<usize>> = HashMap::new();
        for (index, entry) in entries.iter().enumerate() {
            by_mount_point
                .entry(entry.mount_point.clone())
                .or_default()
                .push(index);
            by_root_and_device
                .entry((entry.root.clone(), entry.major, entry.minor))
                .or_default()
                .push(index);
        }
        Self {
            entries,
            by_mount_point,
            by_root_and_device,
        }
    }

    /// Parses mountinfo text.
    pub fn parse(content: impl AsRef<[u8]>) -> Result<Self, MountInfoError> {
        parse_mountinfo(content).map(Self::new)
    }

    /// The entries, in file order.
    pub fn entries(&self) -> &[MountInfo] {
        &self.entries
    }

    /// Whether some mount is mounted exactly at `path`.
    pub fn is_mount_point(&self, path: &Path) -> bool {
        self.by_mount_point.contains_key(&clean_path(path))
    }

    /// The mounts exactly at `path`, in file order (the last one is visible).
    pub fn mounts_at(&self, path: &Path) -> Vec<&MountInfo> {
        self.by_mount_point
            .get(&clean_path(path))
            .map(|indexes| indexes.iter().map(|&i| &self.entries[i]).collect())
            .unwrap_or_default()
    }

    /// Mounts strictly below `path`, in file order.
    pub fn mounts_beneath(&self, path: &Path) -> Vec<&MountInfo> {
        let path = clean_path(path);
        let mut indexes: Vec<usize> = self
            .by_mount_point
            .range::<Path, _>((Bound::Excluded(path.as_path()), Bound::Unbounded))
            .take_while(|(mount_point, _)| mount_point.starts_with(&path))
            .flat_map(|(_, indexes)| indexes.iter().copied())
            .collect();
        indexes.sort_unstable();
        indexes.into_iter().map(|i| &self.entries[i]).collect()
    }

    /// Whether any mount lies at or below `path`.
    pub fn has_mounts_at_or_beneath(&self, path: &Path) -> bool {
        let path = clean_path(path);
        self.by_mount_point
            .range::<Path, _>((Bound::Included(path.as_path()), Bound::Unbounded))
            .next()
            .is_some_and(|(mount_point, _)| mount_point.starts_with(&path))
    }

    /// `SearchMountPoints`: the mount points of every other mount that shows
    /// the same directory of the same device as `path`.
    ///
    /// The enclosing mount is found scanning from the last entry, because a
    /// later mount at the same place shadows an earlier one. Its root joined
    /// with the rest of `path` names the directory on the device; every other
    /// entry (by mount ID) with that root and device is a reference, in file order.
    pub fn search_mount_points(&self, path: &Path) -> Result<Vec<PathBuf>, MountRefsError> {
        let path = clean_path(path);
        // The last entry in file order whose mount point contains `path`: the
        // latest mount on any of its ancestors, as the backward scan finds it.
        let enclosing = path
            .ancestors()
            .filter_map(|ancestor| self.by_mount_point.get(ancestor))
            .filter_map(|indexes| indexes.last().copied())
            .max();
        let Some(enclosing) = enclosing.map(|i| &self.entries[i]) else {
            return Err(MountRefsError::NoEnclosingMount { path });
        };
        let rest = path
            .strip_prefix(&enclosing.mount_point)
            .unwrap_or(Path::new(""));
        let root_on_device = clean_path(&enclosing.root.join(rest));
        let key = (root_on_device, enclosing.major, enclosing.minor);
        Ok(self
            .by_root_and_device
            .get(&key)
            .map(|indexes| {
                indexes
                    .iter()
                    .map(|&i| &self.entries[i])
                    .filter(|m| m.id != enclosing.id)
                    .map(|m| m.mount_point.clone())
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// `GetMountRefs` on a snapshot: a path that does not exist has no references.
///
/// Existence is asked of `fs`, which with [`crate::fs::HostFs::non_blocking`]
/// never enters the path, so a dead mount there cannot hang the lookup.
pub fn get_mount_refs(
    fs: &(impl NodeFs + ?Sized),
    table: &MountTable,
    path: &Path,
) -> Result<Vec<PathBuf>, MountRefsError> {
    match fs.entry_kind(path) {
        Ok(None) => Ok(Vec::new()),
        Ok(Some(_)) => table.search_mount_points(path),
        Err(source) => Err(MountRefsError::Existence {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A way to look up mount references of a path.
pub trait MountRefsLookup {
    /// The references of `path`.
    fn mount_refs(&self, path: &Path) -> Result<Vec<PathBuf>, MountRefsError>;
}

/// Lookups against one consistent snapshot of the mount table.
#[derive(Debug)]
pub struct SnapshotRefs<'a, F: NodeFs + ?Sized> {
    /// Used only to decide whether a path exists.
    pub fs: &'a F,
    /// The snapshot.
    pub table: &'a MountTable,
}

impl<F: NodeFs + ?Sized> MountRefsLookup for SnapshotRefs<'_, F> {
    fn mount_refs(&self, path: &Path) -> Result<Vec<PathBuf>, MountRefsError> {
        get_mount_refs(self.fs, self.table, path)
    }
}

/// Time, injectable so that retry loops are testable without sleeping.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
    /// Waits for `duration`.
    fn sleep(&self, duration: Duration);
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// How long to keep retrying a torn mount-table read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Give up after this long (kubelet: one minute).
    pub timeout: Duration,
    /// Wait this long between attempts (kubelet: 10 ms).
    pub step: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            step: Duration::from_millis(10),
        }
    }
}

/// Runs `attempt` until it succeeds or fails with something other than an
/// inconsistent read, or until the policy's deadline; then the last
/// inconsistent-read error is returned.
pub fn retry_inconsistent<T>(
    policy: RetryPolicy,
    clock: &(impl Clock + ?Sized),
    mut attempt: impl FnMut() -> Result<T, MountRefsError>,
) -> Result<T, MountRefsError> {
    let deadline = clock.now() + policy.timeout;
    loop {
        match attempt() {
            Err(e) if e.is_inconsistent_read() && clock.now() < deadline => {
                clock.sleep(policy.step);
            }
            other => return other,
        }
    }
}

/// Reads and parses a mount table, retrying torn reads under `policy`.
pub fn read_mount_table(
    source: &mut (impl MountInfoSource + ?Sized),
    policy: RetryPolicy,
    clock: &(impl Clock + ?Sized),
) -> Result<MountTable, MountRefsError> {
    retry_inconsistent(policy, clock, || {
        let bytes = consistent_read(source, MAX_LIST_TRIES)?;
        Ok(MountTable::parse(bytes)?)
    })
}

/// `GetReliableMountRefs`: re-reads the table for every attempt and retries
/// while the read is torn, so a busy node does not turn into "no references".
pub struct ReliableRefs<'a, F: NodeFs + ?Sized, S: MountInfoSource, C: Clock> {
    /// Used only to decide whether a path exists.
    pub fs: &'a F,
    /// The live mount table.
    pub source: std::cell::RefCell<S>,
    /// Retry bounds.
    pub policy: RetryPolicy,
    /// Time source.
    pub clock: C,
}

impl<F: NodeFs + ?Sized, S: MountInfoSource, C: Clock> MountRefsLookup
    for ReliableRefs<'_, F, S, C>
{
    fn mount_refs(&self, path: &Path) -> Result<Vec<PathBuf>, MountRefsError> {
        retry_inconsistent(self.policy, &self.clock, || {
            match self.fs.entry_kind(path) {
                Ok(None) => return Ok(Vec::new()),
                Ok(Some(_)) => {}
                Err(source) => {
                    return Err(MountRefsError::Existence {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
            let bytes = consistent_read(&mut *self.source.borrow_mut(), MAX_LIST_TRIES)?;
            MountTable::parse(bytes)?.search_mount_points(path)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::io;

    use super::*;
    use crate::testfs::MemFs;

    const GM: &str = "/var/lib/kubelet/plugins/kubernetes.io/csi/d/abc/globalmount";
    const POD: &str = "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pvc-1/mount";

    fn table(lines: &[&str]) -> MountTable {
        MountTable::parse(lines.join("\n")).unwrap()
    }

    fn bound_table() -> MountTable {
        table(&[
            "1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw",
            &format!("100 1 8:16 / {GM} rw shared:50 - ext4 /dev/sdb rw"),
            &format!("101 1 8:16 / {POD} rw shared:50 - ext4 /dev/sdb rw"),
            "102 1 8:32 / /var/lib/kubelet/pods/u2/volumes/kubernetes.io~csi/data/mount rw - ext4 /dev/sdc rw",
        ])
    }

    #[test]
    fn a_path_that_does_not_exist_has_no_refs_and_no_error() {
        let fs = MemFs::new();
        let refs = get_mount_refs(&fs, &bound_table(), Path::new(GM)).unwrap();
        assert!(refs.is_empty());
    }

    #[test]
    fn globalmount_and_its_pod_bind_mount_are_refs_of_each_other() {
        let t = bound_table();
        assert_eq!(
            t.search_mount_points(Path::new(GM)).unwrap(),
            [PathBuf::from(POD)]
        );
        assert_eq!(
            t.search_mount_points(Path::new(POD)).unwrap(),
            [PathBuf::from(GM)]
        );
        // A pod mount on another device is not a ref of either.
        let other = "/var/lib/kubelet/pods/u2/volumes/kubernetes.io~csi/data/mount";
        assert!(t.search_mount_points(Path::new(other)).unwrap().is_empty());
    }

    #[test]
    fn later_mounts_shadow_earlier_ones_at_the_same_path() {
        let t = table(&[
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
            &format!("100 1 8:16 / {GM} rw - ext4 /dev/sdb rw"),
            &format!("101 1 8:16 / {POD} rw - ext4 /dev/sdb rw"),
            &format!("102 100 8:48 / {GM} rw - ext4 /dev/sdd rw"),
            "103 1 8:48 / /mnt/other rw - ext4 /dev/sdd rw",
        ]);
        // 102 hides 100, so the refs are those of 8:48, not of 8:16.
        assert_eq!(
            t.search_mount_points(Path::new(GM)).unwrap(),
            [PathBuf::from("/mnt/other")]
        );
    }

    #[test]
    fn root_on_device_joins_the_entry_root_with_the_rest_of_the_path() {
        let t = table(&[
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
            "100 1 8:16 /vol /mnt/data rw - ext4 /dev/sdb rw",
            "101 1 8:16 /vol/sub /srv/bound rw - ext4 /dev/sdb rw",
            "102 1 8:16 /vol/sub /srv/other-device rw - ext4 /dev/sdb rw",
            "103 1 8:17 /vol/sub /srv/wrong-minor rw - ext4 /dev/sdb1 rw",
        ]);
        assert_eq!(
            t.search_mount_points(Path::new("/mnt/data/sub")).unwrap(),
            [
                PathBuf::from("/srv/bound"),
                PathBuf::from("/srv/other-device")
            ]
        );
    }

    #[test]
    fn a_plain_directory_has_no_refs_unless_that_exact_directory_is_bound() {
        let plain = "/var/lib/kubelet/pods/u3/volumes/kubernetes.io~csi/pvc-3/mount";
        let t = table(&["1 0 8:1 / / rw - ext4 /dev/sda1 rw"]);
        assert!(t.search_mount_points(Path::new(plain)).unwrap().is_empty());
        let with_bind = table(&[
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
            &format!("50 1 8:1 {plain} /mnt/alias rw - ext4 /dev/sda1 rw"),
        ]);
        assert_eq!(
            with_bind.search_mount_points(Path::new(plain)).unwrap(),
            [PathBuf::from("/mnt/alias")]
        );
    }

    #[test]
    fn no_enclosing_mount_is_an_error() {
        let t = table(&["100 1 8:16 / /mnt/data rw - ext4 /dev/sdb rw"]);
        let err = t.search_mount_points(Path::new("/elsewhere")).unwrap_err();
        assert!(
            matches!(err, MountRefsError::NoEnclosingMount { .. }),
            "{err}"
        );
        // "/mnt/database" is not inside "/mnt/data": component-wise, not by string prefix.
        assert!(t.search_mount_points(Path::new("/mnt/database")).is_err());
    }

    #[test]
    fn mount_point_and_beneath_queries() {
        let t = table(&[
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw",
            &format!("100 1 8:16 / {GM}/inner rw - ext4 /dev/sdb rw"),
        ]);
        assert!(!t.is_mount_point(Path::new(GM)));
        assert!(t.is_mount_point(Path::new(&format!("{GM}/inner"))));
        assert_eq!(t.mounts_beneath(Path::new(GM)).len(), 1);
        assert!(
            t.mounts_beneath(Path::new(&format!("{GM}/inner")))
                .is_empty()
        );
    }

    /// `SearchMountPoints` as upstream writes it: a backward scan for the
    /// enclosing mount, then a forward scan for the references.
    fn search_linear(entries: &[MountInfo], path: &Path) -> Option<Vec<PathBuf>> {
        let path = clean_path(path);
        let (enclosing, root) = entries.iter().rev().find_map(|m| {
            path.strip_prefix(&m.mount_point)
                .ok()
                .map(|rest| (m, clean_path(&m.root.join(rest))))
        })?;
        Some(
            entries
                .iter()
                .filter(|m| {
                    m.id != enclosing.id
                        && m.root == root
                        && (m.major, m.minor) == (enclosing.major, enclosing.minor)
                })
                .map(|m| m.mount_point.clone())
                .collect(),
        )
    }

    fn beneath_linear(entries: &[MountInfo], path: &Path) -> Vec<PathBuf> {
        let path = clean_path(path);
        entries
            .iter()
            .filter(|m| m.mount_point != path && m.mount_point.starts_with(&path))
            .map(|m| m.mount_point.clone())
            .collect()
    }

    proptest::proptest! {
        /// The indexes answer exactly what the scans of the whole table answer,
        /// on tables with shadowed, nested and aliased mounts.
        #[test]
        fn the_indexes_agree_with_linear_scans(
            mounts in proptest::collection::vec(
                ("(/[ab]){0,3}", "(/[ab]){0,2}", 0i64..3), 1..12
            ),
            queries in proptest::collection::vec("(/[ab]){0,4}", 1..6),
        ) {
            let mut lines = vec!["1 0 8:1 / / rw - ext4 /dev/sda1 rw".to_owned()];
            for (i, (mount_point, root, minor)) in mounts.iter().enumerate() {
                let mount_point = if mount_point.is_empty() { "/" } else { mount_point };
                let root = if root.is_empty() { "/" } else { root };
                lines.push(format!("{} 1 8:{minor} {root} {mount_point} rw - ext4 /dev/x rw", i + 2));
            }
            let table = MountTable::parse(lines.join("\n")).unwrap();
            for query in &queries {
                let query = if query.is_empty() { "/" } else { query.as_str() };
                let path = Path::new(query);
                proptest::prop_assert_eq!(
                    table.search_mount_points(path).ok(),
                    search_linear(table.entries(), path)
                );
                let beneath: Vec<PathBuf> = table
                    .mounts_beneath(path)
                    .into_iter()
                    .map(|m| m.mount_point.clone())
                    .collect();
                proptest::prop_assert_eq!(&beneath, &beneath_linear(table.entries(), path));
                proptest::prop_assert_eq!(
                    table.has_mounts_at_or_beneath(path),
                    table.is_mount_point(path) || !beneath.is_empty()
                );
            }
        }
    }

    /// A clock that advances only when slept on.
    struct FakeClock {
        start: Instant,
        elapsed: Cell<Duration>,
        sleeps: Cell<usize>,
    }

    impl FakeClock {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                elapsed: Cell::new(Duration::ZERO),
                sleeps: Cell::new(0),
            }
        }
    }

    impl Clock for FakeClock {
        fn now(&self) -> Instant {
            self.start + self.elapsed.get()
        }

        fn sleep(&self, duration: Duration) {
            self.elapsed.set(self.elapsed.get() + duration);
            self.sleeps.set(self.sleeps.get() + 1);
        }
    }

    /// A mount table that changes on every read for the first `torn_reads`
    /// reads, then settles; or that fails with an I/O error.
    struct FlakySource {
        torn_reads: usize,
        reads: usize,
        settled: String,
        io_error: bool,
    }

    impl MountInfoSource for FlakySource {
        fn read_mountinfo(&mut self) -> io::Result<Vec<u8>> {
            if self.io_error {
                return Err(io::Error::from(io::ErrorKind::PermissionDenied));
            }
            self.reads += 1;
            if self.reads <= self.torn_reads {
                Ok(format!("{}\n# torn {}", self.settled, self.reads).into_bytes())
            } else {
                Ok(self.settled.clone().into_bytes())
            }
        }

        fn describe(&self) -> String {
            "flaky".into()
        }
    }

    fn bound_text() -> String {
        [
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw".to_owned(),
            format!("100 1 8:16 / {GM} rw - ext4 /dev/sdb rw"),
            format!("101 1 8:16 / {POD} rw - ext4 /dev/sdb rw"),
        ]
        .join("\n")
    }

    fn fs_with_gm() -> MemFs {
        let mut fs = MemFs::new();
        fs.dir(GM).dir(POD);
        fs
    }

    #[test]
    fn reliable_refs_retry_torn_reads_until_the_table_settles() {
        let fs = fs_with_gm();
        let lookup = ReliableRefs {
            fs: &fs,
            // 25 torn reads exhaust the first consistent read (11 reads) and
            // the second, so two sleeps happen before success.
            source: RefCell::new(FlakySource {
                torn_reads: 25,
                reads: 0,
                settled: bound_text(),
                io_error: false,
            }),
            policy: RetryPolicy::default(),
            clock: FakeClock::new(),
        };
        assert_eq!(
            lookup.mount_refs(Path::new(GM)).unwrap(),
            [PathBuf::from(POD)]
        );
        assert_eq!(lookup.clock.sleeps.get(), 2);
    }

    #[test]
    fn reliable_refs_give_up_at_the_deadline_with_the_inconsistent_read_error() {
        let fs = fs_with_gm();
        let lookup = ReliableRefs {
            fs: &fs,
            source: RefCell::new(FlakySource {
                torn_reads: usize::MAX,
                reads: 0,
                settled: bound_text(),
                io_error: false,
            }),
            policy: RetryPolicy {
                timeout: Duration::from_millis(100),
                step: Duration::from_millis(10),
            },
            clock: FakeClock::new(),
        };
        let err = lookup.mount_refs(Path::new(GM)).unwrap_err();
        assert!(err.is_inconsistent_read(), "{err}");
        assert_eq!(lookup.clock.sleeps.get(), 10);
    }

    #[test]
    fn reliable_refs_return_other_errors_at_once() {
        let fs = fs_with_gm();
        let lookup = ReliableRefs {
            fs: &fs,
            source: RefCell::new(FlakySource {
                torn_reads: 0,
                reads: 0,
                settled: String::new(),
                io_error: true,
            }),
            policy: RetryPolicy::default(),
            clock: FakeClock::new(),
        };
        let err = lookup.mount_refs(Path::new(GM)).unwrap_err();
        assert!(
            matches!(err, MountRefsError::Read(ConsistentReadError::Io { .. })),
            "{err}"
        );
        assert_eq!(lookup.clock.sleeps.get(), 0);
    }

    #[test]
    fn read_mount_table_retries_then_parses() {
        let mut source = FlakySource {
            torn_reads: 12,
            reads: 0,
            settled: bound_text(),
            io_error: false,
        };
        let clock = FakeClock::new();
        let t = read_mount_table(&mut source, RetryPolicy::default(), &clock).unwrap();
        assert_eq!(t.entries().len(), 3);
        assert_eq!(clock.sleeps.get(), 1);
    }
}
