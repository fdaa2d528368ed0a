//! The doctor's report: what a diagnosis found, as data. Its JSON shape is
//! the serde derive here; the renderings for people and for
//! node-problem-detector are in `text.rs` and `npd.rs`, each escaping every
//! name and value from the node ([`crate::escape`]).

use serde::Serialize;

use crate::discover::{SkipReason, SpecVolIdSource, VolumeMode};
use crate::gate::KubeletGate;
use crate::plan::PlannedAction;
use crate::podlocal::DeclineReason;

mod npd;
mod text;

/// The state of one listed global volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeClass {
    /// A pod uses it: a pod mount refers to the global mount (filesystem), or a
    /// `dev/<podUID>` bind mount or `publish/<specVolID>/<podUID>` entry exists (block).
    InUse,
    /// No pod uses it right now, but a pod directory with usable data names it,
    /// so kubelet's pod-directory walk still tracks it.
    TrackedByPodDir,
    /// Mounted, and neither a pod mount nor a pod directory refers to it: kubelet
    /// lost track of it after a restart (#121937). It is no longer reported in
    /// use, so it can be detached while staged.
    OrphanedStaged,
    /// Staged but `globalmount` holds no mount and nothing refers to it: a
    /// leftover after a reboot, or a driver without STAGE_UNSTAGE_VOLUME.
    /// KEP-6058 would register it and call the idempotent NodeUnstageVolume.
    StagedUnmounted,
    /// A pod directory that refers to it has an unreadable `vol_data.json`
    /// (#101791): kubelet cannot reconstruct that pod volume without KEP-6058.
    PodDataUnreadable,
    /// Mounted with no pod left, but kubelet still tracks it: the pod was just
    /// deleted and UnmountDevice has not finished. Every pod deletion passes
    /// through this state; `progress` names the signal that decided it.
    UnstageInProgress,
}

impl VolumeClass {
    /// Whether this state needs an operator's attention.
    pub fn is_finding(self) -> bool {
        matches!(
            self,
            Self::OrphanedStaged | Self::StagedUnmounted | Self::PodDataUnreadable
        )
    }

    /// The class code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InUse => "in_use",
            Self::TrackedByPodDir => "tracked_by_pod_dir",
            Self::OrphanedStaged => "orphaned_staged",
            Self::StagedUnmounted => "staged_unmounted",
            Self::PodDataUnreadable => "pod_data_unreadable",
            Self::UnstageInProgress => "unstage_in_progress",
        }
    }
}

/// Whether a volume no pod uses is being unstaged or was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// Kubelet still tracks it and will unstage it.
    InProgress,
    /// Kubelet no longer tracks it; nothing will unstage it.
    Lost,
    /// No signal could tell; treated as lost.
    Unknown,
}

/// The input that decided [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// `node.status.volumesInUse`: kubelet reports an attachable volume there
    /// for as long as it tracks it.
    VolumesInUse,
    /// The kubelet's start time against the time the volume was staged.
    KubeletStartTime,
    /// Nothing was available.
    None,
}

/// In progress or lost, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressReport {
    /// The verdict.
    pub state: Progress,
    /// The signal that decided it.
    pub decided_by: Signal,
    /// The evidence, in words.
    pub detail: String,
}

/// Where a volume's PersistentVolume name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerSource {
    /// `specVolID` in the volume's own `vol_data.json`.
    SpecVolId,
    /// `spec.source.persistentVolumeName` of its VolumeAttachment.
    VolumeAttachment,
    /// A PersistentVolume whose `spec.csi` names this driver and handle.
    PersistentVolume,
}

/// A pod that used a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRefReport {
    /// Pod UID.
    pub uid: String,
    /// Namespace, when a pod dump names it.
    pub namespace: Option<String>,
    /// Name, when a pod dump names it.
    pub name: Option<String>,
    /// Where it was seen: `pod_dir`, `mount` or `claim` (a pod of the dump that mounts the claim).
    pub seen_in: &'static str,
}

/// Who owns a volume, as far as the inputs tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReport {
    /// The PersistentVolume name.
    pub persistent_volume: Option<String>,
    /// Where that name came from.
    pub persistent_volume_source: Option<OwnerSource>,
    /// The bound claim, `namespace/name`, from a PersistentVolume dump.
    pub claim: Option<String>,
    /// Pods that use or last used it.
    pub pods: Vec<PodRefReport>,
}

/// A mount table entry, for identifying a mount whose data files are gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MountReport {
    /// Mount point.
    pub mount_point: String,
    /// Mount source (a device path, or `server:/export`).
    pub source: String,
    /// Filesystem type.
    pub fs_type: String,
    /// `major:minor`.
    pub device: String,
}

/// A risk found by cross-checking with API objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// Staged on the node but not in `node.status.volumesInUse`: the
    /// attach/detach controller may detach it under the mount.
    AtRisk,
    /// Its VolumeAttachment says it is not attached while the node still holds mounts of it.
    VolumeAttachmentDetached,
    /// A VolumeAttachment with this node's name carries another `spec.nodeName`.
    VolumeAttachmentNodeMismatch,
}

impl Flag {
    /// The flag code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AtRisk => "at_risk",
            Self::VolumeAttachmentDetached => "volume_attachment_detached",
            Self::VolumeAttachmentNodeMismatch => "volume_attachment_node_mismatch",
        }
    }
}

/// The VolumeAttachment cross-check of one volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeAttachmentReport {
    /// `csi-<sha256(handle+driver+node)>`.
    pub name: String,
    /// Whether an object of that name was in the input. Drivers with
    /// `attachRequired: false` have none, so absence alone is no finding.
    pub exists: bool,
    /// `status.attached`, when the object exists.
    pub attached: Option<bool>,
    /// `spec.nodeName`, when the object exists.
    pub node_name: Option<String>,
    /// Whether `spec.nodeName` is this node, when the object exists.
    pub node_matches: Option<bool>,
}

/// The API cross-check of one volume; fields are null for inputs not given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiReport {
    /// In `node.status.volumesInUse`.
    pub in_volumes_in_use: Option<bool>,
    /// In `node.status.volumesAttached`.
    pub in_volumes_attached: Option<bool>,
    /// The `devicePath` of the `volumesAttached` entry.
    pub device_path: Option<String>,
    /// The VolumeAttachment check.
    pub volume_attachment: Option<VolumeAttachmentReport>,
    /// Whether the volume is attached through the attach/detach controller.
    /// Only such volumes are reported in `volumesInUse`; null when unknown.
    pub attachable: Option<bool>,
    /// What decided `attachable`: `csi_driver`, `volumes_in_use`,
    /// `volumes_attached` or `volume_attachment`.
    pub attachable_source: Option<&'static str>,
}

/// One listed global volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalVolumeReport {
    /// Filesystem or Block.
    pub mode: VolumeMode,
    /// CSI driver.
    pub driver: String,
    /// CSI volume handle.
    pub volume_handle: String,
    /// `specVolID` from the file; null for files staged before KEP-6058.
    #[serde(rename = "specVolID")]
    pub spec_vol_id: Option<String>,
    /// The PV name kubelet would use.
    pub spec_name: String,
    /// `file`, or `handle` for pre-feature files.
    #[serde(rename = "specVolIDSource")]
    pub spec_vol_id_source: SpecVolIdSource,
    /// `kubernetes.io/csi/<driver>^<handle>`.
    pub unique_volume_name: String,
    /// The VolumeAttachment name; null when the node name is unknown.
    pub attachment_name: Option<String>,
    /// Filesystem: `.../globalmount`. Block: the global map path `.../dev`.
    pub device_mount_path: String,
    /// Block: `volumeDevices/staging/<specVolID>`.
    pub staging_path: Option<String>,
    /// SELinux mount context from the file.
    pub se_linux_mount_context: Option<String>,
    /// Filesystem: `globalmount` is a mount point. Block: the staging directory is present.
    pub mounted: bool,
    /// Mounts below `globalmount` (a driver that stages into a subdirectory).
    pub nested_mounts: Vec<String>,
    /// Pod mount points that show the same device and directory.
    pub pod_refs: Vec<String>,
    /// Other mount points that show it (bind aliases of the kubelet root, for example).
    pub other_refs: Vec<String>,
    /// Block: `dev/<podUID>` bind mounts.
    pub dev_mounts: Vec<String>,
    /// Block: `publish/<specVolID>/<podUID>` entries.
    pub publish_entries: Vec<String>,
    /// Pod volume directories that name this volume.
    pub pod_dirs: Vec<String>,
    /// The state.
    pub class: VolumeClass,
    /// Risks from the API cross-check.
    pub flags: Vec<Flag>,
    /// What kubelet with CSIGlobalMountReconstruction would do after a restart.
    pub kubelet_plan: PlannedAction,
    /// The API cross-check; null when no API input was given.
    pub api: Option<ApiReport>,
    /// Modification time of the volume's `vol_data.json`, which kubelet writes
    /// just before staging (RFC 3339).
    pub staged_at: Option<String>,
    /// Whether kubelet's listing, which stats `globalmount` following links,
    /// would see it. False for a dangling link or a dead mount.
    pub kubelet_would_list: bool,
    /// Why not, when it would not.
    pub kubelet_would_list_detail: Option<String>,
    /// The mount at the device mount path, when there is one.
    pub mount: Option<MountReport>,
    /// PV, claim and pods, as far as the inputs tell.
    pub owner: OwnerReport,
    /// For a mounted volume no pod uses: in progress or lost, and the deciding signal.
    pub progress: Option<ProgressReport>,
    /// What to do, step by step, following KEP-6058. Empty when nothing is needed.
    pub operator_plan: Vec<String>,
}

impl GlobalVolumeReport {
    /// Whether this volume needs attention.
    pub fn is_finding(&self) -> bool {
        self.class.is_finding() || !self.flags.is_empty()
    }
}

/// How a pod volume directory was paired with a listed volume, strongest
/// evidence first (the order is used to pick the best pairing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedBy {
    /// The fallback followed the pod mount to this volume's global mount.
    Fallback,
    /// The pod mount and the global mount (or a mount below it) share device and directory.
    MountReference,
    /// The pod's own `vol_data.json` names this driver and handle.
    PodData,
    /// Nothing is mounted at the pod mount any more and its name equals the
    /// volume's spec name: the after-reboot pair KEP-6058 cannot recover.
    Name,
    /// The global mount holds nothing (a driver without STAGE_UNSTAGE_VOLUME
    /// mounts straight into the pod) and the pod mount of the same name is mounted.
    NameWithoutStaging,
}

/// What the fallback recovered for a pod-local directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveredReport {
    /// The global data directory.
    pub global_data_dir: String,
    /// The accepted mount reference.
    pub reference: String,
    /// Driver from the global file.
    pub driver: String,
    /// Handle from the global file.
    pub volume_handle: String,
    /// `specVolID` from the global file, if any.
    #[serde(rename = "specVolID")]
    pub spec_vol_id: Option<String>,
    /// The spec name after the naming rule.
    pub spec_name: String,
    /// Whether the global directory is also a listed volume.
    pub listed: bool,
}

/// A pod volume directory whose `vol_data.json` kubelet cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLocalReport {
    /// Pod UID.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// Volume directory name.
    pub volume_name: String,
    /// The directory.
    pub path: String,
    /// Why the pod-local file is unusable.
    pub voldata_error: String,
    /// Whether `mount` is still a mount point.
    pub pod_mount_mounted: bool,
    /// What the KEP-6058 fallback recovers; null when it declines.
    pub recovered_from: Option<RecoveredReport>,
    /// Why the fallback declines; null when it recovers.
    pub decline_reason: Option<DeclineReason>,
    /// Detail for the decline.
    pub decline_detail: Option<String>,
    /// The listed volume this directory belongs to (its device mount path).
    pub paired_global_volume: Option<String>,
    /// How the pairing was made.
    pub paired_by: Option<PairedBy>,
}

/// An entry of the global directories that kubelet's listing would skip.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkipReport {
    /// The entry.
    pub path: String,
    /// The reason code.
    pub reason: SkipReason,
    /// Detail.
    pub detail: String,
    /// For identity mismatches: the path the file's identity implies.
    pub expected: Option<String>,
    /// Whether something is mounted at or below the entry. A mounted entry
    /// that kubelet will not list is never cleaned up by it, so it is a finding.
    pub mounted: bool,
    /// The mount at the entry's `globalmount` (or the entry), when mounted.
    pub mount: Option<MountReport>,
    /// `volumesAttached` entries whose `devicePath` is that mount's source:
    /// the way to name a mount whose data files are gone.
    pub attached_device_path_matches: Vec<String>,
    /// Pod mount points that share the mount's device and directory.
    pub pod_refs: Vec<String>,
    /// Pod volume directories of the same name (legacy `pv/<name>` layout).
    pub pod_dirs: Vec<String>,
    /// What to do, when the entry is mounted.
    pub operator_plan: Vec<String>,
}

/// Counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Listed volumes.
    pub global_volumes: usize,
    /// Class `in_use`.
    pub in_use: usize,
    /// Class `tracked_by_pod_dir`.
    pub tracked_by_pod_dir: usize,
    /// Class `orphaned_staged`.
    pub orphaned_staged: usize,
    /// Class `staged_unmounted`.
    pub staged_unmounted: usize,
    /// Class `pod_data_unreadable`.
    pub pod_data_unreadable: usize,
    /// Class `unstage_in_progress`.
    pub unstage_in_progress: usize,
    /// Volumes flagged `at_risk`.
    pub at_risk: usize,
    /// Pod-local directories with unusable data.
    pub pod_local_unreadable: usize,
    /// Skipped entries.
    pub skipped: usize,
    /// Skipped entries with something mounted at or below them.
    pub mounted_skipped: usize,
    /// Items needing attention: volumes with a finding class or a flag,
    /// pod-local entries, and mounted skipped entries.
    pub findings: usize,
}

/// The whole report for one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The kubelet root, in host path space, with symbolic links resolved as
    /// kubelet resolves them.
    pub kubelet_root: String,
    /// The root as given, when it differs from `kubeletRoot`.
    pub kubelet_root_given: Option<String>,
    /// When kubelet started, when given (RFC 3339).
    pub kubelet_started_at: Option<String>,
    /// The node, when known.
    pub node_name: Option<String>,
    /// Whether kubelet has KEP-6058's feature gate: plans offer it only when it does.
    pub kubelet_gate: KubeletGate,
    /// Where the mount table was read from.
    pub mountinfo_source: String,
    /// Listed volumes: filesystem first, then block.
    pub global_volumes: Vec<GlobalVolumeReport>,
    /// Pod-local directories with unusable `vol_data.json`.
    pub pod_local: Vec<PodLocalReport>,
    /// Entries kubelet's listing would skip.
    pub skipped: Vec<SkipReport>,
    /// Problems that did not stop the run.
    pub warnings: Vec<String>,
    /// Counts.
    pub summary: Summary,
}

impl Report {
    /// Whether anything needs attention (the doctor then exits 1).
    pub fn has_findings(&self) -> bool {
        self.summary.findings > 0
    }

    /// Recomputes the summary from the entries.
    pub fn summarize(&mut self) {
        let count = |class: VolumeClass| {
            self.global_volumes
                .iter()
                .filter(|v| v.class == class)
                .count()
        };
        let mounted_skipped = self.skipped.iter().filter(|s| s.mounted).count();
        self.summary = Summary {
            global_volumes: self.global_volumes.len(),
            in_use: count(VolumeClass::InUse),
            tracked_by_pod_dir: count(VolumeClass::TrackedByPodDir),
            orphaned_staged: count(VolumeClass::OrphanedStaged),
            staged_unmounted: count(VolumeClass::StagedUnmounted),
            pod_data_unreadable: count(VolumeClass::PodDataUnreadable),
            unstage_in_progress: count(VolumeClass::UnstageInProgress),
            at_risk: self
                .global_volumes
                .iter()
                .filter(|v| v.flags.contains(&Flag::AtRisk))
                .count(),
            pod_local_unreadable: self.pod_local.len(),
            skipped: self.skipped.len(),
            mounted_skipped,
            findings: self
                .global_volumes
                .iter()
                .filter(|v| v.is_finding())
                .count()
                + self.pod_local.len()
                + mounted_skipped,
        };
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::discover::{SpecVolIdSource, VolumeMode};

    /// A summarized report of the volumes of `classes`, for the renderings' tests.
    pub(crate) fn report_of(classes: &[VolumeClass]) -> Report {
        let mut report = Report {
            kubelet_root: "/var/lib/kubelet".into(),
            kubelet_root_given: None,
            kubelet_started_at: None,
            node_name: None,
            kubelet_gate: KubeletGate::default(),
            mountinfo_source: "test".into(),
            global_volumes: classes.iter().map(|class| volume(*class)).collect(),
            pod_local: Vec::new(),
            skipped: Vec::new(),
            warnings: Vec::new(),
            summary: Summary::default(),
        };
        report.summarize();
        report
    }

    pub(crate) fn volume(class: VolumeClass) -> GlobalVolumeReport {
        GlobalVolumeReport {
            mode: VolumeMode::Filesystem,
            driver: "d".into(),
            volume_handle: "h".into(),
            spec_vol_id: None,
            spec_name: "h".into(),
            spec_vol_id_source: SpecVolIdSource::Handle,
            unique_volume_name: "kubernetes.io/csi/d^h".into(),
            attachment_name: None,
            device_mount_path: "/var/lib/kubelet/plugins/kubernetes.io/csi/d/x/globalmount".into(),
            staging_path: None,
            se_linux_mount_context: None,
            mounted: true,
            nested_mounts: Vec::new(),
            pod_refs: Vec::new(),
            other_refs: Vec::new(),
            dev_mounts: Vec::new(),
            publish_entries: Vec::new(),
            pod_dirs: Vec::new(),
            class,
            flags: Vec::new(),
            kubelet_plan: PlannedAction::WouldRegisterUncertain,
            api: None,
            staged_at: None,
            kubelet_would_list: true,
            kubelet_would_list_detail: None,
            mount: None,
            owner: OwnerReport {
                persistent_volume: Some("pvc-1".into()),
                persistent_volume_source: Some(OwnerSource::PersistentVolume),
                claim: None,
                pods: Vec::new(),
            },
            progress: None,
            operator_plan: Vec::new(),
        }
    }
}
