//! Pod-local CSI volume directories, and the KEP-6058 fallback that recovers a
//! pod volume's identity from the global mount it is bind mounted from when
//! its own `vol_data.json` is gone or damaged (the #101791 shape).

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::fs::{EntryKind, NodeFs};
use crate::layout::{GLOBAL_MOUNT_DIR, KubeletLayout, POD_MOUNT_DIR};
use crate::mountrefs::{MountRefsError, MountRefsLookup};
use crate::voldata::{self, VolumeData};

/// A pod's filesystem CSI volume directory
/// `pods/<uid>/volumes/kubernetes.io~csi/<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFsVolume {
    /// The pod UID (directory name).
    pub pod_uid: String,
    /// The volume directory name: the PV name, or the inline volume's name.
    pub name: String,
    /// The volume directory.
    pub path: PathBuf,
    /// `<path>/mount`, the publish target.
    pub mount_path: PathBuf,
    /// The pod-local `vol_data.json`, or why kubelet could not use it.
    pub data: Result<VolumeData, String>,
}

impl PodFsVolume {
    /// Whether kubelet's pod-directory walk can reconstruct this volume unaided.
    pub fn data_is_usable(&self) -> bool {
        self.data.is_ok()
    }
}

/// A pod's block CSI volume map entry
/// `pods/<uid>/volumeDevices/kubernetes.io~csi/<name>` (a symlink to the device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodBlockVolume {
    /// The pod UID.
    pub pod_uid: String,
    /// The entry name: the PV name.
    pub name: String,
    /// The entry.
    pub path: PathBuf,
}

/// All pod-local CSI volume entries of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodScan {
    /// Filesystem volume directories, by pod then name.
    pub fs_volumes: Vec<PodFsVolume>,
    /// Block map entries, by pod then name.
    pub block_volumes: Vec<PodBlockVolume>,
    /// Directories that could not be listed, with the error.
    pub problems: Vec<(PathBuf, String)>,
}

/// Walks `<root>/pods/*/volumes/kubernetes.io~csi/*` and
/// `<root>/pods/*/volumeDevices/kubernetes.io~csi/*`.
///
/// It lists the directories that hold the pod mount points and reads the
/// `vol_data.json` beside them; it never enters a mount point.
pub fn scan_pod_volumes(fs: &(impl NodeFs + ?Sized), layout: &KubeletLayout) -> PodScan {
    let mut scan = PodScan::default();
    let pods_dir = layout.pods_dir();
    let pods = match fs.read_dir(&pods_dir) {
        Ok(pods) => pods,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return scan,
        Err(e) => {
            scan.problems.push((pods_dir, e.to_string()));
            return scan;
        }
    };
    for pod in pods.into_iter().filter(|p| p.kind == EntryKind::Dir) {
        let pod_uid = pod.name.to_string_lossy().into_owned();

        let fs_dir = layout.pod_fs_volumes_dir(&pod_uid);
        for entry in list_optional(fs, &fs_dir, &mut scan.problems) {
            if entry.kind != EntryKind::Dir {
                continue;
            }
            let path = fs_dir.join(&entry.name);
            let data = voldata::load(fs, &path)
                .map_err(|e| error_line::chain(&e))
                .and_then(|data| match data.missing_identity_keys().as_slice() {
                    [] => Ok(data),
                    missing => Err(format!(
                        "{} has no {}",
                        path.join(voldata::VOL_DATA_FILE).display(),
                        missing.join(" and no ")
                    )),
                });
            scan.fs_volumes.push(PodFsVolume {
                pod_uid: pod_uid.clone(),
                name: entry.name.to_string_lossy().into_owned(),
                mount_path: path.join(POD_MOUNT_DIR),
                path,
                data,
            });
        }

        let block_dir = layout.pod_block_volumes_dir(&pod_uid);
        for entry in list_optional(fs, &block_dir, &mut scan.problems) {
            scan.block_volumes.push(PodBlockVolume {
                pod_uid: pod_uid.clone(),
                name: entry.name.to_string_lossy().into_owned(),
                path: block_dir.join(&entry.name),
            });
        }
    }
    scan
}

fn list_optional(
    fs: &(impl NodeFs + ?Sized),
    dir: &Path,
    problems: &mut Vec<(PathBuf, String)>,
) -> Vec<crate::fs::DirEntryInfo> {
    match fs.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            problems.push((dir.to_path_buf(), e.to_string()));
            Vec::new()
        }
    }
}

/// A mount reference the fallback looked at and refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedReference {
    /// The reference (a mount point sharing the pod mount's device and root).
    pub path: PathBuf,
    /// Why it was refused.
    pub reason: String,
}

/// What the fallback recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredGlobalData {
    /// The global data directory: the parent of the accepted `globalmount`.
    pub global_data_dir: PathBuf,
    /// The accepted reference itself.
    pub reference: PathBuf,
    /// The global `vol_data.json`.
    pub data: VolumeData,
    /// References tried and refused before the accepted one.
    pub rejected: Vec<RejectedReference>,
}

/// Short codes for why the fallback declined, as they appear in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeclineReason {
    /// The pod mount has no mount references (for example after a reboot).
    NoReference,
    /// No reference is a `globalmount` with a usable `vol_data.json`.
    NoUsableReference,
    /// The mount table could not be used.
    MountRefsError,
    /// The global file names another volume.
    SpecVolIdMismatch,
}

/// Why the pod-local fallback declined. It never guesses.
#[derive(Debug, Error)]
pub enum FallbackError {
    /// Nothing is bind mounted at the pod mount (`NoGlobalMountReference`).
    #[error("no global mount is bind mounted at {}: it has no mount references", mount_path.display())]
    NoGlobalMountReference {
        /// The pod mount point.
        mount_path: PathBuf,
    },
    /// References exist, but none is usable (`NoUsableReference`).
    #[error("no global mount is bind mounted at {}: {}", mount_path.display(), describe_rejected(rejected))]
    NoUsableReference {
        /// The pod mount point.
        mount_path: PathBuf,
        /// Every reference and why it was refused.
        rejected: Vec<RejectedReference>,
    },
    /// The mount references could not be computed.
    #[error("looking up mount references of {}", mount_path.display())]
    MountRefs {
        /// The pod mount point.
        mount_path: PathBuf,
        /// The lookup error.
        #[source]
        source: MountRefsError,
    },
    /// The global file's `specVolID` names a different volume than the pod directory.
    #[error(
        "global vol_data.json names specVolID {spec_vol_id:?}, not the pod volume {pod_volume_name:?}"
    )]
    SpecVolIdMismatch {
        /// The pod volume directory name.
        pod_volume_name: String,
        /// The `specVolID` in the global file.
        spec_vol_id: String,
    },
}

fn describe_rejected(rejected: &[RejectedReference]) -> String {
    rejected
        .iter()
        .map(|r| format!("{} ({})", r.path.display(), r.reason))
        .collect::<Vec<_>>()
        .join(", ")
}

impl FallbackError {
    /// The report code for this error.
    pub fn decline_reason(&self) -> DeclineReason {
        match self {
            Self::NoGlobalMountReference { .. } => DeclineReason::NoReference,
            Self::NoUsableReference { .. } => DeclineReason::NoUsableReference,
            Self::MountRefs { .. } => DeclineReason::MountRefsError,
            Self::SpecVolIdMismatch { .. } => DeclineReason::SpecVolIdMismatch,
        }
    }
}

/// `findGlobalMountDataFromPodMount`: follows the pod volume's `mount` to the
/// global mount it is bind mounted from and returns that mount's data.
///
/// A reference is accepted when its last segment is `globalmount` and the
/// `vol_data.json` in its parent names a driver and a handle; references are
/// tried in mount-table order. It does not require the reference to lie under
/// the plugin directory: the data file is what vouches for it.
pub fn find_global_mount_data_from_pod_mount(
    fs: &(impl NodeFs + ?Sized),
    refs: &(impl MountRefsLookup + ?Sized),
    pod_volume_dir: &Path,
) -> Result<RecoveredGlobalData, FallbackError> {
    let mount_path = pod_volume_dir.join(POD_MOUNT_DIR);
    let references = refs
        .mount_refs(&mount_path)
        .map_err(|source| FallbackError::MountRefs {
            mount_path: mount_path.clone(),
            source,
        })?;
    if references.is_empty() {
        return Err(FallbackError::NoGlobalMountReference { mount_path });
    }
    let mut rejected = Vec::new();
    for reference in references {
        if reference.file_name().is_none_or(|n| n != GLOBAL_MOUNT_DIR) {
            rejected.push(RejectedReference {
                path: reference,
                reason: format!("last segment is not {GLOBAL_MOUNT_DIR}"),
            });
            continue;
        }
        let Some(data_dir) = reference.parent().map(Path::to_path_buf) else {
            continue;
        };
        match voldata::load(fs, &data_dir) {
            Err(e) => rejected.push(RejectedReference {
                path: reference,
                reason: error_line::chain(&e),
            }),
            Ok(data) if !data.missing_identity_keys().is_empty() => {
                rejected.push(RejectedReference {
                    path: reference,
                    reason: format!(
                        "vol_data.json has no {}",
                        data.missing_identity_keys().join(" and no ")
                    ),
                });
            }
            Ok(data) => {
                return Ok(RecoveredGlobalData {
                    global_data_dir: data_dir,
                    reference,
                    data,
                    rejected,
                });
            }
        }
    }
    Err(FallbackError::NoUsableReference {
        mount_path,
        rejected,
    })
}

/// The `ConstructVolumeSpec` naming rule for recovered data: a global file
/// without `specVolID` (staged before the feature) takes the pod directory's
/// name; one whose `specVolID` names another volume is refused.
pub fn spec_name_for_recovered(
    pod_volume_name: &str,
    recovered: &VolumeData,
) -> Result<String, FallbackError> {
    match recovered.spec_vol_id() {
        "" => Ok(pod_volume_name.to_owned()),
        id if id == pod_volume_name => Ok(id.to_owned()),
        id => Err(FallbackError::SpecVolIdMismatch {
            pod_volume_name: pod_volume_name.to_owned(),
            spec_vol_id: id.to_owned(),
        }),
    }
}

/// A pod volume recovered through its global mount, with the spec name kubelet would use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredPodVolume {
    /// What the global mount provided.
    pub global: RecoveredGlobalData,
    /// The spec name after the naming rule.
    pub spec_name: String,
}

/// The whole fallback for one pod volume directory: follow the bind mount,
/// then apply the naming rule.
pub fn recover_pod_volume(
    fs: &(impl NodeFs + ?Sized),
    refs: &(impl MountRefsLookup + ?Sized),
    pod_volume_dir: &Path,
) -> Result<RecoveredPodVolume, FallbackError> {
    let global = find_global_mount_data_from_pod_mount(fs, refs, pod_volume_dir)?;
    let pod_volume_name = pod_volume_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let spec_name = spec_name_for_recovered(&pod_volume_name, &global.data)?;
    Ok(RecoveredPodVolume { global, spec_name })
}
