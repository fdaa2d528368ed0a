//! What a kubelet with `CSIGlobalMountReconstruction` enabled would register
//! at startup, computed offline from a listing and a pod scan.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Serialize;

use crate::discover::{GlobalVolume, VolumeMode};

/// What kubelet would do with one volume after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlannedAction {
    /// Only the global listing knows it: registered with its device mount
    /// uncertain, so that it is reported in use and later unstaged.
    WouldRegisterUncertain,
    /// A block volume: registered through the block mapper, not as a device mount.
    WouldRegisterViaMapper,
    /// The pod-directory walk reconstructs it, and the listing does not have it.
    FromPodDir,
    /// Neither path registers it: kubelet's stat of `globalmount` fails (a
    /// dangling link, a dead mount), so the listing skips it, and no pod
    /// directory names it.
    WouldSkip,
}

impl PlannedAction {
    /// The action code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WouldRegisterUncertain => "would_register_uncertain",
            Self::WouldRegisterViaMapper => "would_register_via_mapper",
            Self::FromPodDir => "from_pod_dir",
            Self::WouldSkip => "would_skip",
        }
    }
}

/// One volume kubelet would put into its actual state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedVolume {
    /// `kubernetes.io/csi/<driver>^<handle>`.
    pub unique_volume_name: String,
    /// How it gets there.
    pub action: PlannedAction,
    /// The device mount path registered, when the listing provides it.
    pub device_mount_path: Option<PathBuf>,
}

/// Plans reconstruction. `pod_dir_volumes` are the unique names the pod
/// directory walk reconstructs. Each unique name appears once. Kubelet runs
/// the listing first and the pod walk then finds the volume already in its
/// actual state, so a volume found both ways keeps the listing's entry.
/// With the gate off, nothing comes from the listing.
pub fn plan_reconstruction(
    gate_enabled: bool,
    listed: &[GlobalVolume],
    pod_dir_volumes: &[String],
) -> Vec<PlannedVolume> {
    let mut seen = BTreeSet::new();
    let mut plan = Vec::new();
    if gate_enabled {
        for volume in listed {
            let name = volume.unique_volume_name();
            if !seen.insert(name.clone()) {
                continue;
            }
            let action = match volume.mode() {
                VolumeMode::Filesystem => PlannedAction::WouldRegisterUncertain,
                VolumeMode::Block => PlannedAction::WouldRegisterViaMapper,
            };
            plan.push(PlannedVolume {
                unique_volume_name: name,
                action,
                device_mount_path: Some(volume.device_mount_path.clone()),
            });
        }
    }
    for name in pod_dir_volumes {
        if !seen.insert(name.clone()) {
            continue;
        }
        let device_mount_path = listed
            .iter()
            .find(|v| gate_enabled && &v.unique_volume_name() == name)
            .map(|v| v.device_mount_path.clone());
        plan.push(PlannedVolume {
            unique_volume_name: name.clone(),
            action: PlannedAction::FromPodDir,
            device_mount_path,
        });
    }
    plan
}
