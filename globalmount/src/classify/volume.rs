//! Phase four: the report of each listed volume. Its class, its API
//! cross-checks and flags, whether an unstage is in progress, its owner,
//! and the operator's plan.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::SystemTime;

use super::{Diagnosis, display, mount_report, pod_uid_of, rfc3339, visible_mount};
use crate::api::{CsiDriverView, NodeView};
use crate::discover::{GlobalVolume, VolumeMode};
use crate::fs::NodeFs;
use crate::layout::BLOCK_DATA_DIR;
use crate::plan::PlannedAction;
use crate::report::{
    ApiReport, Flag, GlobalVolumeReport, OwnerReport, PodRefReport, Progress, ProgressReport,
    Signal, VolumeAttachmentReport, VolumeClass,
};
use crate::voldata::VOL_DATA_FILE;

/// The pod directories of one volume, and what they show.
struct PodDirs {
    paths: Vec<PathBuf>,
    /// One of them has an unusable `vol_data.json` (#101791).
    unreadable: bool,
    /// One of them has its `mount` mounted.
    mount_live: bool,
}

impl<F: NodeFs + ?Sized> Diagnosis<'_, F> {
    /// The report of listed volume `vi`.
    pub(super) fn volume_report(&self, vi: usize) -> GlobalVolumeReport {
        let volume = &self.evidence.listing.volumes[vi];
        let facts = &self.evidence.facts[vi];
        let node_name = self.indexes.node_name.as_deref();
        let pod_dirs = self.pod_dirs(vi);

        let in_use = match volume.mode() {
            VolumeMode::Filesystem => {
                !facts.pod_refs.is_empty() || (!facts.holds_mounts && pod_dirs.mount_live)
            }
            VolumeMode::Block => !facts.dev_mounts.is_empty() || facts.published > 0,
        };
        let mut class = if pod_dirs.unreadable {
            VolumeClass::PodDataUnreadable
        } else if in_use {
            VolumeClass::InUse
        } else if !pod_dirs.paths.is_empty() {
            VolumeClass::TrackedByPodDir
        } else if facts.holds_mounts || volume.mode() == VolumeMode::Block {
            VolumeClass::OrphanedStaged
        } else {
            VolumeClass::StagedUnmounted
        };

        let unique = volume.unique_volume_name();
        let attachment_name = node_name.map(|n| volume.attachment_name(n));
        let (api, flags) = self.api_report(vi, &unique, attachment_name.as_deref());

        let data_file = match volume.mode() {
            VolumeMode::Filesystem => volume.volume_dir.join(VOL_DATA_FILE),
            VolumeMode::Block => volume.volume_dir.join(BLOCK_DATA_DIR).join(VOL_DATA_FILE),
        };
        let staged_at = self.fs.modified(&data_file).ok().flatten();
        let progress = (class == VolumeClass::OrphanedStaged).then(|| {
            let found_va = attachment_name
                .as_deref()
                .and_then(|name| self.indexes.va_by_name.get(name));
            let (attachable, attachable_source) = attachability(
                volume,
                self.indexes.node,
                found_va.is_some(),
                self.extra.csi_drivers.as_deref(),
            );
            decide_progress(
                &unique,
                api.as_ref().and_then(|a| a.in_volumes_in_use),
                attachable,
                attachable_source,
                staged_at,
                self.extra.kubelet_started_at,
            )
        });
        if progress
            .as_ref()
            .is_some_and(|p| p.state == Progress::InProgress)
        {
            class = VolumeClass::UnstageInProgress;
        }

        let kubelet_plan = self
            .kubelet
            .plan_by_name
            .get(unique.as_str())
            .copied()
            .unwrap_or(PlannedAction::WouldSkip);
        let owner = self.owner_report(vi, &pod_dirs.paths);
        let mount = visible_mount(self.table, &volume.device_mount_path)
            .or_else(|| {
                volume
                    .staging_path
                    .as_deref()
                    .and_then(|p| visible_mount(self.table, p))
            })
            .map(mount_report);
        let would_list = &self.kubelet.would_list[vi];

        let mut report = GlobalVolumeReport {
            mode: volume.mode(),
            driver: volume.spec.driver.clone(),
            volume_handle: volume.spec.volume_handle.clone(),
            spec_vol_id: Some(volume.spec_vol_id.clone()).filter(|s| !s.is_empty()),
            spec_name: volume.spec.name.clone(),
            spec_vol_id_source: volume.spec_vol_id_source,
            unique_volume_name: unique,
            attachment_name,
            device_mount_path: display(&volume.device_mount_path),
            staging_path: volume.staging_path.as_deref().map(display),
            se_linux_mount_context: Some(volume.se_linux_mount_context.clone())
                .filter(|s| !s.is_empty()),
            mounted: facts.mounted,
            nested_mounts: facts.nested_mounts.iter().map(|p| display(p)).collect(),
            pod_refs: facts.pod_refs.iter().map(|p| display(p)).collect(),
            other_refs: facts.other_refs.iter().map(|p| display(p)).collect(),
            dev_mounts: facts.dev_mounts.iter().map(|p| display(p)).collect(),
            publish_entries: facts.publish_entries.iter().map(|p| display(p)).collect(),
            pod_dirs: pod_dirs.paths.iter().map(|p| display(p)).collect(),
            class,
            flags,
            kubelet_plan,
            api,
            staged_at: staged_at.map(rfc3339),
            kubelet_would_list: would_list.is_ok(),
            kubelet_would_list_detail: would_list.clone().err(),
            mount,
            owner,
            progress,
            operator_plan: Vec::new(),
        };
        report.operator_plan = crate::advice::volume_plan(&report, node_name, self.gate);
        report
    }

    fn pod_dirs(&self, vi: usize) -> PodDirs {
        let volume = &self.evidence.listing.volumes[vi];
        let pods = &self.evidence.pods;
        let mut dirs = PodDirs {
            paths: Vec::new(),
            unreadable: false,
            mount_live: false,
        };
        match volume.mode() {
            VolumeMode::Filesystem => {
                for &pi in &self.pairing.pods_of_volume[vi] {
                    let pod = &pods.fs_volumes[pi];
                    dirs.paths.push(pod.path.clone());
                    dirs.unreadable |= !pod.data_is_usable();
                    dirs.mount_live |= self.evidence.pod_mount_mounted[pi];
                }
            }
            VolumeMode::Block => {
                let maps = self
                    .indexes
                    .block_maps_by_name
                    .get(volume.spec.name.as_str());
                for &i in maps.into_iter().flatten() {
                    dirs.paths.push(pods.block_volumes[i].path.clone());
                }
            }
        }
        dirs
    }

    /// The API cross-checks of volume `vi` and the flags they raise; none
    /// without a Node or VolumeAttachments.
    fn api_report(
        &self,
        vi: usize,
        unique: &str,
        attachment_name: Option<&str>,
    ) -> (Option<ApiReport>, Vec<Flag>) {
        let volume = &self.evidence.listing.volumes[vi];
        let facts = &self.evidence.facts[vi];
        let node = self.indexes.node;
        let node_name = self.indexes.node_name.as_deref();
        let mut flags = Vec::new();
        if node.is_none() && !self.volume_attachments_given {
            return (None, flags);
        }
        let found_va = attachment_name.and_then(|name| self.indexes.va_by_name.get(name).copied());
        let (attachable, attachable_source) = attachability(
            volume,
            node,
            found_va.is_some(),
            self.extra.csi_drivers.as_deref(),
        );
        let attached_entry = node.and_then(|n| n.attached(unique));
        let in_volumes_in_use = node.map(|n| n.in_use(unique));
        // Kubelet reports only attachable volumes in volumesInUse; a
        // driver with attachRequired: false is never there, and is no risk.
        if in_volumes_in_use == Some(false) && attachable == Some(true) {
            flags.push(Flag::AtRisk);
        }
        let volume_attachment = match (self.volume_attachments_given, attachment_name) {
            (true, Some(name)) => {
                let node_matches = found_va.map(|va| Some(va.node_name.as_str()) == node_name);
                if node_matches == Some(false) {
                    flags.push(Flag::VolumeAttachmentNodeMismatch);
                }
                if found_va.is_some_and(|va| !va.attached) && facts.holds_mounts {
                    flags.push(Flag::VolumeAttachmentDetached);
                }
                Some(VolumeAttachmentReport {
                    name: name.to_owned(),
                    exists: found_va.is_some(),
                    attached: found_va.map(|va| va.attached),
                    node_name: found_va.map(|va| va.node_name.clone()),
                    node_matches,
                })
            }
            _ => None,
        };
        let api = ApiReport {
            in_volumes_in_use,
            in_volumes_attached: node.map(|_| attached_entry.is_some()),
            device_path: attached_entry
                .map(|a| a.device_path.clone())
                .filter(|p| !p.is_empty()),
            volume_attachment,
            attachable,
            attachable_source,
        };
        (Some(api), flags)
    }

    /// The PV, claim and pods behind volume `vi`.
    fn owner_report(&self, vi: usize, pod_dirs: &[PathBuf]) -> OwnerReport {
        let volume = &self.evidence.listing.volumes[vi];
        let facts = &self.evidence.facts[vi];
        let pv = self.indexes.owner_pv[vi].as_ref();
        let indexes = self.indexes;
        let pods_dir = self.evidence.layout.pods_dir();
        let pv_object = pv
            .and_then(|(name, _)| indexes.pv_by_name.get(name.as_str()))
            .or_else(|| {
                indexes.pv_by_identity.get(&(
                    volume.spec.driver.as_str(),
                    volume.spec.volume_handle.as_str(),
                ))
            })
            .copied();
        let claim = pv_object.and_then(|pv| pv.claim.clone());
        let mut pod_refs: Vec<PodRefReport> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut add = |uid: String, seen_in: &'static str| {
            if !seen.insert(uid.clone()) {
                return;
            }
            let known = indexes.pod_by_uid.get(uid.as_str());
            pod_refs.push(PodRefReport {
                namespace: known.map(|p| p.namespace.clone()),
                name: known.map(|p| p.name.clone()),
                uid,
                seen_in,
            });
        };
        for dir in pod_dirs {
            if let Some(uid) = pod_uid_of(&pods_dir, dir) {
                add(uid, "pod_dir");
            }
        }
        for mount in facts.pod_refs.iter().chain(&facts.dev_mounts) {
            let uid = pod_uid_of(&pods_dir, mount)
                .or_else(|| mount.file_name().map(|n| n.to_string_lossy().into_owned()));
            if let Some(uid) = uid {
                add(uid, "mount");
            }
        }
        if let (Some(claim), Some(_)) = (&claim, &self.extra.pods) {
            let node_name = indexes.node_name.as_deref();
            for pod in indexes.pods_by_claim.get(claim).into_iter().flatten() {
                if node_name.is_none_or(|n| pod.node_name == n) {
                    add(pod.uid.clone(), "claim");
                }
            }
        }
        OwnerReport {
            persistent_volume: pv.map(|(name, _)| name.clone()),
            persistent_volume_source: pv.map(|(_, source)| *source),
            claim,
            pods: pod_refs,
        }
    }
}

/// Attachability, from the strongest input that tells.
fn attachability(
    volume: &GlobalVolume,
    node: Option<&NodeView>,
    volume_attachment_found: bool,
    csi_drivers: Option<&[CsiDriverView]>,
) -> (Option<bool>, Option<&'static str>) {
    let unique = volume.unique_volume_name();
    if let Some(drivers) = csi_drivers {
        // No CSIDriver object means attachRequired's default: true.
        let required = drivers
            .iter()
            .find(|d| d.name == volume.spec.driver)
            .is_none_or(|d| d.attach_required);
        return (Some(required), Some("csi_driver"));
    }
    if node.is_some_and(|n| n.in_use(&unique)) {
        return (Some(true), Some("volumes_in_use"));
    }
    if node.is_some_and(|n| n.attached(&unique).is_some()) {
        return (Some(true), Some("volumes_attached"));
    }
    if volume_attachment_found {
        return (Some(true), Some("volume_attachment"));
    }
    (None, None)
}
/// In progress or lost, for a mounted volume no pod uses.
fn decide_progress(
    unique: &str,
    in_volumes_in_use: Option<bool>,
    attachable: Option<bool>,
    attachable_source: Option<&str>,
    staged_at: Option<SystemTime>,
    kubelet_started_at: Option<SystemTime>,
) -> ProgressReport {
    if in_volumes_in_use == Some(true) {
        return ProgressReport {
            state: Progress::InProgress,
            decided_by: Signal::VolumesInUse,
            detail: format!(
                "kubelet still reports {unique} in node.status.volumesInUse: it tracks the volume and will unstage it"
            ),
        };
    }
    if in_volumes_in_use == Some(false) && attachable == Some(true) {
        return ProgressReport {
            state: Progress::Lost,
            decided_by: Signal::VolumesInUse,
            detail: format!(
                "the volume is attachable (by {}) but not in node.status.volumesInUse: kubelet no longer tracks it",
                attachable_source.unwrap_or("the inputs")
            ),
        };
    }
    if let (Some(staged), Some(started)) = (staged_at, kubelet_started_at) {
        return if staged > started {
            ProgressReport {
                state: Progress::InProgress,
                decided_by: Signal::KubeletStartTime,
                detail: format!(
                    "staged at {}, after kubelet started at {}: the running kubelet staged it and still tracks it",
                    rfc3339(staged),
                    rfc3339(started)
                ),
            }
        } else {
            ProgressReport {
                state: Progress::Lost,
                decided_by: Signal::KubeletStartTime,
                detail: format!(
                    "staged at {}, before kubelet started at {}, and no pod directory is left to rebuild it from",
                    rfc3339(staged),
                    rfc3339(started)
                ),
            }
        };
    }
    ProgressReport {
        state: Progress::Unknown,
        decided_by: Signal::None,
        detail: "no signal tells an unstage in progress from a lost volume; give the Node JSON (volumesInUse) or the kubelet's start time".to_owned(),
    }
}
