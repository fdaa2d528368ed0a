//! Read-only access to the node's kubelet directory.
//!
//! Every path handed to a [`NodeFs`] is a *host* path, the way kubelet and the
//! mount table spell it. An implementation may map it somewhere else (a
//! container sees the host root under a prefix), but callers never build such
//! paths themselves, so mount-table comparisons stay in host path space.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::layout::clean_path;

/// The type of a directory entry as the directory listing reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory (never a symlink to one).
    Dir,
    /// A symbolic link, not followed.
    Symlink,
    /// A regular file.
    File,
    /// Anything else: device node, socket, FIFO, or a type that could not be read.
    Other,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryInfo {
    /// The entry's name (one path segment).
    pub name: OsString,
    /// The entry's type, taken from the listing rather than from a stat of the entry.
    pub kind: EntryKind,
}

/// Read-only file access used by the listing, the pod scan and the fallback.
///
/// Nothing here can write; the trait exists so that tests run on temporary
/// trees and so that the stat-following behaviour of kubelet can be chosen
/// explicitly instead of by accident.
pub trait NodeFs {
    /// Lists a directory, sorted by the bytes of each name (Go's `os.ReadDir` order).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntryInfo>>;

    /// Reads a whole regular file of at most [`MAX_FILE_BYTES`].
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Whether `path` exists, and as what. `Ok(None)` means it does not exist.
    fn entry_kind(&self, path: &Path) -> io::Result<Option<EntryKind>>;

    /// The listing of `dir` when [`NodeFs::entry_kind`] of its entries is
    /// decided from that listing, so that a caller checking many entries of
    /// one directory lists it once instead of once per entry. `None` means
    /// ask `entry_kind` for each; the default.
    fn listing_for_existence(&self, dir: &Path) -> Option<io::Result<Vec<DirEntryInfo>>> {
        let _ = dir;
        None
    }

    /// `path` with every symbolic link resolved in host path space, as Go's
    /// `filepath.EvalSymlinks` resolves kubelet's root directory. The default
    /// resolves nothing.
    fn resolve_symlinks(&self, path: &Path) -> io::Result<PathBuf> {
        Ok(path.to_path_buf())
    }

    /// What kubelet's following `os.Stat` of `path` would see, without
    /// risking a hang here. The default does not look.
    fn probe_stat(&self, path: &Path) -> StatProbe {
        let _ = path;
        StatProbe::NotProbed
    }

    /// The modification time of a regular file, when the implementation knows it.
    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        let _ = path;
        Ok(None)
    }
}

/// The outcome of [`NodeFs::probe_stat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatProbe {
    /// The stat succeeded: kubelet's would too.
    Reachable,
    /// The stat failed (a dangling link, or a dead mount: ENOTCONN, ESTALE, EIO).
    Failed(String),
    /// The stat did not return in time (an unresponsive NFS server).
    TimedOut(Duration),
    /// A stat started by an earlier probe of the same path has not returned
    /// after this long; no second one was started.
    StillStuck(Duration),
    /// Not looked at: probing is off, or [`StatProber`]'s bound of stuck
    /// stats is reached.
    NotProbed,
}

/// How many stats may be stuck at once, over all paths, before further
/// paths go unprobed: a node with more dead mounts than this is already
/// diagnosed by the ones reported.
pub const MAX_STUCK_PROBES: usize = 32;

/// Runs the stats of [`NodeFs::probe_stat`] on helper threads, at most one
/// per path at a time, and remembers the ones that never return.
///
/// A stat on a dead NFS or FUSE mount blocks its thread for good. Without
/// memory of it, every run of the continuous mode would park one more
/// thread per dead mount until the pod hits its pid or memory limit. With
/// it, a later probe of that path answers [`StatProbe::StillStuck`] at once,
/// and the number of helper threads never exceeds the number of distinct
/// stuck paths, capped at `max_stuck`. Clones share that memory, so the
/// continuous mode keeps one prober for all its runs.
#[derive(Debug, Clone)]
pub struct StatProber {
    timeout: Duration,
    max_stuck: usize,
    outstanding: Arc<Mutex<HashMap<PathBuf, Outstanding>>>,
}

/// A probe whose thread has not been seen to finish.
#[derive(Debug)]
struct Outstanding {
    started: Instant,
    slot: Arc<ProbeSlot>,
}

/// Where a probe thread leaves its result.
#[derive(Debug, Default)]
struct ProbeSlot {
    /// The stat's outcome, an error as its message; `None` while it runs.
    result: Mutex<Option<Result<(), String>>>,
    done: Condvar,
}

impl ProbeSlot {
    fn is_done(&self) -> bool {
        self.result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

impl StatProber {
    /// Gives each stat `timeout`, with at most [`MAX_STUCK_PROBES`] stuck at once.
    pub fn new(timeout: Duration) -> Self {
        Self::with_bound(timeout, MAX_STUCK_PROBES)
    }

    /// Gives each stat `timeout`, with at most `max_stuck` stuck at once.
    pub fn with_bound(timeout: Duration, max_stuck: usize) -> Self {
        Self {
            timeout,
            max_stuck: max_stuck.max(1),
            outstanding: Arc::default(),
        }
    }

    /// How long each stat is given.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many probes are stuck now (their threads still blocked).
    pub fn stuck(&self) -> usize {
        let mut outstanding = self.lock();
        outstanding.retain(|_, o| !o.slot.is_done());
        outstanding.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Outstanding>> {
        self.outstanding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `stat` for `path` on a helper thread and waits for it at most
    /// the timeout, unless a stat of `path` from an earlier call is still
    /// blocked: then that is the answer, and nothing new is started.
    pub fn probe(
        &self,
        path: &Path,
        stat: impl FnOnce() -> io::Result<()> + Send + 'static,
    ) -> StatProbe {
        let slot = {
            let mut outstanding = self.lock();
            // Probes that have returned since leave no trace.
            outstanding.retain(|_, o| !o.slot.is_done());
            if let Some(earlier) = outstanding.get(path) {
                return StatProbe::StillStuck(earlier.started.elapsed());
            }
            if outstanding.len() >= self.max_stuck {
                return StatProbe::NotProbed;
            }
            let slot = Arc::new(ProbeSlot::default());
            let filled = Arc::clone(&slot);
            let spawned = std::thread::Builder::new()
                .name("stat-probe".to_owned())
                .spawn(move || {
                    let result = stat().map_err(|e| e.to_string());
                    *filled.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
                    filled.done.notify_all();
                });
            if let Err(e) = spawned {
                return StatProbe::Failed(e.to_string());
            }
            outstanding.insert(
                path.to_path_buf(),
                Outstanding {
                    started: Instant::now(),
                    slot: Arc::clone(&slot),
                },
            );
            slot
        };
        let guard = slot.result.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = slot
            .done
            .wait_timeout_while(guard, self.timeout, |result| result.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        let outcome = match guard.clone() {
            Some(Ok(())) => StatProbe::Reachable,
            Some(Err(e)) => StatProbe::Failed(e),
            // Still blocked: the entry stays, for the next probe of this path.
            None => return StatProbe::TimedOut(self.timeout),
        };
        drop(guard);
        let mut outstanding = self.lock();
        if outstanding
            .get(path)
            .is_some_and(|o| Arc::ptr_eq(&o.slot, &slot))
        {
            outstanding.remove(path);
        }
        outcome
    }
}

/// The largest file [`HostFs::read_file`] reads. A `vol_data.json` is a few
/// hundred bytes; anything past this is not one, and reading it whole would
/// let a file on the node decide the doctor's memory.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How many symbolic links a resolution follows before giving up (Linux's limit).
const MAX_SYMLINKS: usize = 40;

/// How [`HostFs::entry_kind`] decides that a path exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExistenceCheck {
    /// Look the name up in its parent's directory listing. This never enters the
    /// entry itself, so a dead NFS or FUSE mount on it cannot hang the caller.
    ParentListing,
    /// `stat(2)` the path, following symlinks and entering a mount root, exactly as
    /// kubelet's `os.Stat` does. Faithful, but it can block forever on a dead mount.
    StatFollowing,
}

/// [`NodeFs`] over the real filesystem, optionally under a prefix where the
/// host's root is visible (for example `/host` inside a container).
#[derive(Debug, Clone)]
pub struct HostFs {
    prefix: Option<PathBuf>,
    existence: ExistenceCheck,
    prober: Option<StatProber>,
}

impl HostFs {
    /// The safe default: existence is decided from the parent's listing.
    pub fn non_blocking(prefix: Option<PathBuf>) -> Self {
        Self {
            prefix,
            existence: ExistenceCheck::ParentListing,
            prober: None,
        }
    }

    /// Lets [`NodeFs::probe_stat`] stat a path on a helper thread, giving up
    /// after `timeout`. A stat stuck on a dead NFS server then costs one
    /// parked thread, never the run.
    pub fn with_stat_probe(self, timeout: Duration) -> Self {
        self.with_stat_prober(StatProber::new(timeout))
    }

    /// Like [`HostFs::with_stat_probe`], with a prober that outlives this
    /// value: runs sharing it never start a second stat of a path whose
    /// first one is still stuck.
    pub fn with_stat_prober(mut self, prober: StatProber) -> Self {
        self.prober = Some(prober);
        self
    }

    /// Kubelet's own behaviour: existence is decided by a following `stat`.
    pub fn stat_following(prefix: Option<PathBuf>) -> Self {
        Self {
            prefix,
            existence: ExistenceCheck::StatFollowing,
            prober: None,
        }
    }

    /// Where a host path is found from this process.
    pub fn access_path(&self, host_path: &Path) -> PathBuf {
        match &self.prefix {
            None => host_path.to_path_buf(),
            Some(prefix) => {
                let relative: PathBuf = host_path
                    .components()
                    .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
                    .collect();
                prefix.join(relative)
            }
        }
    }
}

impl NodeFs for HostFs {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntryInfo>> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(self.access_path(path))? {
            let entry = entry?;
            // `file_type` uses the type the listing already returned. Only on a
            // filesystem that reports DT_UNKNOWN does std fall back to lstat.
            let kind = match entry.file_type() {
                Ok(t) if t.is_symlink() => EntryKind::Symlink,
                Ok(t) if t.is_dir() => EntryKind::Dir,
                Ok(t) if t.is_file() => EntryKind::File,
                _ => EntryKind::Other,
            };
            entries.push(DirEntryInfo {
                name: entry.file_name(),
                kind,
            });
        }
        sort_by_name_bytes(&mut entries);
        Ok(entries)
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        read_regular_file(&self.access_path(path), MAX_FILE_BYTES)
    }

    fn entry_kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        match self.existence {
            ExistenceCheck::ParentListing => entry_kind_from_parent_listing(self, path),
            ExistenceCheck::StatFollowing => match std::fs::metadata(self.access_path(path)) {
                Ok(meta) if meta.is_dir() => Ok(Some(EntryKind::Dir)),
                Ok(meta) if meta.is_file() => Ok(Some(EntryKind::File)),
                Ok(_) => Ok(Some(EntryKind::Other)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    fn listing_for_existence(&self, dir: &Path) -> Option<io::Result<Vec<DirEntryInfo>>> {
        (self.existence == ExistenceCheck::ParentListing).then(|| self.read_dir(dir))
    }

    fn resolve_symlinks(&self, path: &Path) -> io::Result<PathBuf> {
        // Component by component, as EvalSymlinks does, but with absolute
        // link targets taken from the host's root rather than this process's.
        let mut resolved = PathBuf::from("/");
        let mut pending: Vec<PathBuf> = vec![clean_path(path)];
        let mut links = 0;
        while let Some(next) = pending.pop() {
            let mut components = next.components();
            let Some(component) = components.next() else {
                continue;
            };
            let rest = components.as_path().to_path_buf();
            if !rest.as_os_str().is_empty() {
                pending.push(rest);
            }
            match component {
                Component::RootDir | Component::Prefix(_) => resolved = PathBuf::from("/"),
                Component::CurDir => {}
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::Normal(name) => {
                    let candidate = resolved.join(name);
                    let meta = std::fs::symlink_metadata(self.access_path(&candidate))?;
                    if !meta.file_type().is_symlink() {
                        resolved = candidate;
                        continue;
                    }
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(io::Error::other(format!(
                            "too many levels of symbolic links resolving {}",
                            path.display()
                        )));
                    }
                    let target = std::fs::read_link(self.access_path(&candidate))?;
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    pending.push(target);
                }
            }
        }
        Ok(resolved)
    }

    fn probe_stat(&self, path: &Path) -> StatProbe {
        let Some(prober) = &self.prober else {
            return StatProbe::NotProbed;
        };
        // Absolute link targets must be read in host path space, so links are
        // resolved before the stat. Both happen on the helper thread: even the
        // lstat of a mount point asks the mounted filesystem, and may hang.
        let fs = Self {
            prober: None,
            ..self.clone()
        };
        let target = path.to_path_buf();
        prober.probe(path, move || {
            fs.resolve_symlinks(&target)
                .and_then(|resolved| std::fs::metadata(fs.access_path(&resolved)))
                .map(|_| ())
        })
    }

    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        match std::fs::symlink_metadata(self.access_path(path)) {
            Ok(meta) if meta.is_file() => meta.modified().map(Some),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Reads `path` if it is a regular file of at most `limit` bytes (see
/// [`open_regular_file`]).
pub fn read_regular_file(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular_file(path)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells a file at the limit from a larger one,
    // whatever its size said (it may grow while read).
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(bytes)
}

/// Opens `path` for reading if it is a regular file.
///
/// The last component is not followed (a link could lead anywhere on the
/// host), and the open does not wait: opening a FIFO for reading otherwise
/// blocks until a writer appears, which would stall the whole run while the
/// health check still answers. The type is then checked on the open file,
/// so it cannot change between the check and the read.
pub fn open_regular_file(path: &Path) -> io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link, not followed")
            }
            _ => e,
        })?;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        let what = if file_type.is_fifo() {
            "a FIFO"
        } else if file_type.is_dir() {
            "a directory"
        } else if file_type.is_socket() {
            "a socket"
        } else if file_type.is_block_device() || file_type.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file"),
        ));
    }
    Ok(file)
}

/// Sorts entries the way Go's `os.ReadDir` does: by the raw bytes of the name.
pub fn sort_by_name_bytes(entries: &mut [DirEntryInfo]) {
    entries.sort_by(|a, b| a.name.as_encoded_bytes().cmp(b.name.as_encoded_bytes()));
}

/// Decides whether `path` exists by listing its parent, for any [`NodeFs`].
pub fn entry_kind_from_parent_listing(
    fs: &(impl NodeFs + ?Sized),
    path: &Path,
) -> io::Result<Option<EntryKind>> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        // "/" has no parent and always exists.
        return Ok(Some(EntryKind::Dir));
    };
    match fs.read_dir(parent) {
        Ok(entries) => Ok(entries.into_iter().find(|e| e.name == name).map(|e| e.kind)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_path_maps_host_paths_under_the_prefix() {
        let fs = HostFs::non_blocking(Some(PathBuf::from("/host")));
        assert_eq!(
            fs.access_path(Path::new("/var/lib/kubelet/pods")),
            PathBuf::from("/host/var/lib/kubelet/pods")
        );
        let plain = HostFs::non_blocking(None);
        assert_eq!(
            plain.access_path(Path::new("/var/lib/kubelet")),
            PathBuf::from("/var/lib/kubelet")
        );
    }

    #[test]
    fn listing_is_sorted_by_bytes_and_reports_symlinks_as_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        std::fs::create_dir(dir.path().join("B")).unwrap();
        std::fs::write(dir.path().join("a"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("b"), dir.path().join("c")).unwrap();
        let fs = HostFs::non_blocking(None);
        let listed = fs.read_dir(dir.path()).unwrap();
        let names: Vec<_> = listed.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names, ["B", "a", "b", "c"]);
        assert_eq!(listed[1].kind, EntryKind::File);
        assert_eq!(listed[2].kind, EntryKind::Dir);
        assert_eq!(listed[3].kind, EntryKind::Symlink);
    }

    #[test]
    fn symlinks_resolve_in_host_path_space() {
        let dir = tempfile::tempdir().unwrap();
        let host = |p: &str| dir.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(host("/data/kubelet/pods")).unwrap();
        std::fs::create_dir_all(host("/var/lib")).unwrap();
        // Absolute target: taken from the host root, not this process's.
        std::os::unix::fs::symlink("/data/kubelet", host("/var/lib/kubelet")).unwrap();
        // Relative target, through a link in the middle of the path.
        std::os::unix::fs::symlink("../data", host("/var/data")).unwrap();
        let fs = HostFs::non_blocking(Some(dir.path().to_path_buf()));
        assert_eq!(
            fs.resolve_symlinks(Path::new("/var/lib/kubelet")).unwrap(),
            PathBuf::from("/data/kubelet")
        );
        assert_eq!(
            fs.resolve_symlinks(Path::new("/var/data/kubelet/pods"))
                .unwrap(),
            PathBuf::from("/data/kubelet/pods")
        );
        assert_eq!(
            fs.resolve_symlinks(Path::new("/var/lib/../lib/kubelet/"))
                .unwrap(),
            PathBuf::from("/data/kubelet")
        );
        std::os::unix::fs::symlink("loop", host("/loop")).unwrap();
        assert!(fs.resolve_symlinks(Path::new("/loop")).is_err());
        assert!(fs.resolve_symlinks(Path::new("/absent")).is_err());
    }

    #[test]
    fn the_stat_probe_sees_a_dangling_link_and_a_live_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("live")).unwrap();
        std::os::unix::fs::symlink("/gone", dir.path().join("dangling")).unwrap();
        let fs = HostFs::non_blocking(Some(dir.path().to_path_buf()))
            .with_stat_probe(Duration::from_secs(5));
        assert_eq!(fs.probe_stat(Path::new("/live")), StatProbe::Reachable);
        assert!(matches!(
            fs.probe_stat(Path::new("/dangling")),
            StatProbe::Failed(_)
        ));
        assert_eq!(
            HostFs::non_blocking(None).probe_stat(dir.path()),
            StatProbe::NotProbed
        );
    }

    #[test]
    fn read_file_reads_up_to_the_bound_and_refuses_links_fifos_and_larger_files() {
        let dir = tempfile::tempdir().unwrap();
        let fs = HostFs::non_blocking(Some(dir.path().to_path_buf()));
        let at_limit = vec![b'x'; usize::try_from(MAX_FILE_BYTES).unwrap()];
        std::fs::write(dir.path().join("small"), b"{}").unwrap();
        std::fs::write(dir.path().join("at-limit"), &at_limit).unwrap();
        std::fs::write(
            dir.path().join("past-limit"),
            [&at_limit[..], b"y"].concat(),
        )
        .unwrap();
        std::os::unix::fs::symlink(dir.path().join("small"), dir.path().join("link")).unwrap();
        std::fs::create_dir(dir.path().join("dir")).unwrap();
        assert_eq!(fs.read_file(Path::new("/small")).unwrap(), b"{}");
        assert_eq!(fs.read_file(Path::new("/at-limit")).unwrap(), at_limit);
        let refused = |name: &str| fs.read_file(Path::new(name)).unwrap_err().to_string();
        assert_eq!(refused("/past-limit"), "larger than 65536 bytes");
        assert_eq!(refused("/link"), "a symbolic link, not followed");
        assert_eq!(refused("/dir"), "a directory, not a regular file");
        assert_eq!(
            fs.read_file(Path::new("/missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn the_two_existence_checks_differ_on_a_dangling_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("globalmount");
        std::os::unix::fs::symlink(dir.path().join("gone"), &link).unwrap();
        assert_eq!(
            HostFs::non_blocking(None).entry_kind(&link).unwrap(),
            Some(EntryKind::Symlink)
        );
        assert_eq!(
            HostFs::stat_following(None).entry_kind(&link).unwrap(),
            None
        );
        assert_eq!(
            HostFs::non_blocking(None)
                .entry_kind(&dir.path().join("missing/child"))
                .unwrap(),
            None
        );
    }
}
