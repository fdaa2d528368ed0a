//! What kubelet with KEP-6058 would do with the evidence: which listed
//! volumes its listing keeps, which names its pod-directory walk rebuilds,
//! and the plan for each volume.

use std::collections::HashMap;
use std::time::Duration;

use super::evidence::{Evidence, FallbackOutcome};
use super::indexes::Indexes;
use crate::discover::{GlobalVolume, VolumeMode};
use crate::fs::{EntryKind, NodeFs, StatProbe};
use crate::layout::{GLOBAL_MOUNT_DIR, unique_volume_name};
use crate::plan::{PlannedAction, plan_reconstruction};

pub(super) struct KubeletView {
    /// Per listed volume: whether kubelet's listing keeps it, or why not.
    pub(super) would_list: Vec<Result<(), String>>,
    /// The planned action by unique volume name.
    pub(super) plan_by_name: HashMap<String, PlannedAction>,
}

impl KubeletView {
    pub(super) fn build(
        fs: &(impl NodeFs + ?Sized),
        evidence: &Evidence,
        indexes: &Indexes<'_>,
    ) -> Self {
        let pod_dir_volumes = pod_dir_volumes(evidence, indexes);
        let would_list: Vec<Result<(), String>> = evidence
            .listing
            .volumes
            .iter()
            .zip(&evidence.facts)
            .map(|(v, f)| would_list(fs, v, f.mounted))
            .collect();
        let listable: Vec<GlobalVolume> = evidence
            .listing
            .volumes
            .iter()
            .zip(&would_list)
            .filter(|(_, ok)| ok.is_ok())
            .map(|(v, _)| v.clone())
            .collect();
        let plan_by_name = plan_reconstruction(true, &listable, &pod_dir_volumes)
            .into_iter()
            .map(|p| (p.unique_volume_name, p.action))
            .collect();
        Self {
            would_list,
            plan_by_name,
        }
    }
}

/// Unique names kubelet's pod-directory walk reconstructs with the gate on:
/// readable pod files, pod files recovered through the fallback, and block
/// map entries of listed volumes.
fn pod_dir_volumes(evidence: &Evidence, indexes: &Indexes<'_>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (pod, fallback) in evidence.pods.fs_volumes.iter().zip(&evidence.fallbacks) {
        match (&pod.data, fallback) {
            (Ok(data), _) => {
                names.push(unique_volume_name(data.driver_name(), data.volume_handle()))
            }
            (
                Err(_),
                Some(FallbackOutcome {
                    recovered: Some((global, _)),
                    ..
                }),
            ) => names.push(unique_volume_name(
                global.data.driver_name(),
                global.data.volume_handle(),
            )),
            _ => {}
        }
    }
    for v in evidence
        .listing
        .volumes
        .iter()
        .filter(|v| v.mode() == VolumeMode::Block)
    {
        if indexes
            .block_maps_by_name
            .contains_key(v.spec.name.as_str())
        {
            names.push(v.unique_volume_name());
        }
    }
    names
}

/// Kubelet's listing stats `globalmount` following links; a dangling link
/// or a dead mount fails there and the volume is skipped. Only those two
/// shapes can fail, so only they are probed.
fn would_list(fs: &(impl NodeFs + ?Sized), v: &GlobalVolume, mounted: bool) -> Result<(), String> {
    if v.mode() != VolumeMode::Filesystem {
        return Ok(());
    }
    let probe = mounted
        || matches!(
            fs.entry_kind(&v.device_mount_path),
            Ok(Some(EntryKind::Symlink))
        );
    if !probe {
        return Ok(());
    }
    match fs.probe_stat(&v.device_mount_path) {
        StatProbe::Failed(e) => Err(format!("stat of {GLOBAL_MOUNT_DIR} fails: {e}")),
        StatProbe::TimedOut(t) => Err(format!(
            "stat of {GLOBAL_MOUNT_DIR} did not return within {}",
            humantime::format_duration(t)
        )),
        StatProbe::StillStuck(t) => Err(format!(
            "stat of {GLOBAL_MOUNT_DIR} started {} ago has not returned",
            humantime::format_duration(Duration::from_secs(t.as_secs()))
        )),
        StatProbe::Reachable | StatProbe::NotProbed => Ok(()),
    }
}
