//! What an operator does about each finding: short, reviewable steps that
//! follow KEP-6058.
//!
//! The KEP rejects defensive unmounting: only the driver's NodeUnstageVolume
//! releases everything staging set up (device maps, iSCSI or NVMe sessions,
//! locks), and only kubelet knows when no pod needs the volume any more. So no
//! plan here ever unmounts or removes anything by hand; each keeps the volume
//! attached until the driver has unstaged it.

use crate::discover::{SkipReason, VolumeMode};
use crate::gate::{GATE, KubeletGate};
use crate::report::{Flag, GlobalVolumeReport, Progress, SkipReport, VolumeClass};

/// Never do this; the last step of every plan says so.
const NO_MANUAL_CLEANUP: &str = "Do not umount the path or rm -rf the directory by hand: \
     only the driver's NodeUnstageVolume releases what staging set up, and kubelet must \
     still see the directory to finish its own bookkeeping.";

fn cordon(node: Option<&str>) -> String {
    format!(
        "Cordon the node so that no new pod lands while you act: kubectl cordon {}",
        node.unwrap_or("<node>")
    )
}

fn keep_attachment(volume: &GlobalVolumeReport) -> String {
    match &volume.attachment_name {
        Some(name) => format!(
            "Keep the volume attached until it is unstaged: do not delete VolumeAttachment {name} \
             and do not force-detach the disk."
        ),
        None => "Keep the volume attached until it is unstaged: do not delete its \
                 VolumeAttachment and do not force-detach the disk."
            .to_owned(),
    }
}

fn staging_path(volume: &GlobalVolumeReport) -> &str {
    volume
        .staging_path
        .as_deref()
        .unwrap_or(&volume.device_mount_path)
}

/// The driver's call that releases a staged volume, with its exact arguments.
fn unstage_call(volume: &GlobalVolumeReport) -> String {
    format!(
        "the driver's NodeUnstageVolume with volume_id {:?} and staging_target_path {}",
        volume.volume_handle,
        staging_path(volume)
    )
}

/// Only a kubelet that has the gate is told to restart with it: one without refuses to
/// start (crate::gate).
fn unstage(volume: &GlobalVolumeReport, gate: &KubeletGate) -> String {
    if gate.has() {
        format!(
            "Have it unstaged: restart kubelet with --feature-gates={GATE}=true (it registers \
             the volume as uncertain and calls NodeUnstageVolume itself), or call {}.",
            unstage_call(volume)
        )
    } else {
        format!(
            "Have it unstaged: call {} ({}).",
            unstage_call(volume),
            gate.why_not()
        )
    }
}

fn check_then_uncordon(volume: &GlobalVolumeReport, node: Option<&str>) -> String {
    format!(
        "Run the doctor again: {} must be gone from the report before you uncordon ({}).",
        volume.unique_volume_name,
        node.map_or("kubectl uncordon <node>".to_owned(), |n| format!(
            "kubectl uncordon {n}"
        ))
    )
}

/// The steps for one listed volume; empty when it needs nothing.
pub(crate) fn volume_plan(
    volume: &GlobalVolumeReport,
    node: Option<&str>,
    gate: &KubeletGate,
) -> Vec<String> {
    let mut steps = Vec::new();
    let at_risk = volume.flags.contains(&Flag::AtRisk);
    match volume.class {
        VolumeClass::InUse | VolumeClass::TrackedByPodDir if !at_risk => {}
        VolumeClass::UnstageInProgress => {
            steps.push(format!(
                "Nothing to do yet: kubelet is unstaging it ({}). Run the doctor again in a few \
                 minutes; if it is still here, treat it as orphaned_staged.",
                volume.progress.as_ref().map_or("", |p| p.detail.as_str())
            ));
        }
        VolumeClass::OrphanedStaged => {
            if let Some(p) = volume
                .progress
                .as_ref()
                .filter(|p| p.state == Progress::Unknown)
            {
                steps.push(format!(
                    "First tell an unstage in progress from a lost volume: {}. An unstage in \
                     progress disappears within minutes.",
                    p.detail
                ));
            }
            steps.push(keep_attachment(volume));
            steps.push(cordon(node));
            steps.push(unstage(volume, gate));
            steps.push(check_then_uncordon(volume, node));
        }
        VolumeClass::StagedUnmounted => {
            steps.push(
                "Left over after a reboot (or a driver without STAGE_UNSTAGE_VOLUME): nothing is \
                 mounted, but the driver may still hold the volume on this node."
                    .to_owned(),
            );
            steps.push(keep_attachment(volume));
            steps.push(unstage(volume, gate));
            if !volume.pod_dirs.is_empty() {
                steps.push(
                    "Its pod directories outlived the reboot, so NodeUnpublishVolume was never \
                     called for them: check the driver's per-pod state before reusing the volume \
                     elsewhere."
                        .to_owned(),
                );
            }
        }
        VolumeClass::PodDataUnreadable => {
            steps.push(format!(
                "A pod directory of this volume has an unusable vol_data.json ({}). Kubelet \
                 without CSIGlobalMountReconstruction cannot rebuild it and will neither \
                 unpublish nor unstage the volume.",
                volume.pod_dirs.join(", ")
            ));
            steps.push(keep_attachment(volume));
            if gate.has() {
                steps.push(format!(
                    "Restart kubelet with --feature-gates={GATE}=true: it recovers the identity \
                     from the global mount while the pod mount is still bound (see \
                     podLocal[].recoveredFrom)."
                ));
            } else {
                // What works with any kubelet: the driver's own calls, pod first.
                steps.push(cordon(node));
                // The publish targets: a filesystem volume's pod mount, a block volume's
                // publish entry.
                let targets: Vec<String> = match volume.mode {
                    VolumeMode::Filesystem => volume
                        .pod_dirs
                        .iter()
                        .map(|d| format!("{d}/mount"))
                        .collect(),
                    VolumeMode::Block => volume.publish_entries.clone(),
                };
                let unpublish: Vec<String> = targets
                    .iter()
                    .map(|target| {
                        format!(
                            "NodeUnpublishVolume with volume_id {:?} and target_path {target}",
                            volume.volume_handle
                        )
                    })
                    .collect();
                steps.push(format!(
                    "Delete the pods of these directories, then call the driver's {}, then {} \
                     ({}).",
                    unpublish.join(", its "),
                    unstage_call(volume),
                    gate.why_not()
                ));
                steps.push(check_then_uncordon(volume, node));
            }
            if gate.has() && (!volume.mounted || volume.pod_refs.is_empty()) {
                steps.push(
                    "After a reboot the pod mount is no longer bound and the fallback declines: \
                     kubelet then unstages the volume without calling NodeUnpublishVolume for \
                     that pod, so check the driver's per-pod state."
                        .to_owned(),
                );
            }
        }
        VolumeClass::InUse | VolumeClass::TrackedByPodDir => {}
    }
    if at_risk {
        steps.push(format!(
            "{} is not in node.status.volumesInUse, the attach/detach controller's only guard: \
             it may detach the disk under the mount. {}",
            volume.unique_volume_name,
            keep_attachment(volume)
        ));
        // Without the gate, kubelet cannot rebuild an unreadable pod directory: the steps
        // above have the driver release it instead.
        let rebuilds = match volume.class {
            VolumeClass::InUse | VolumeClass::TrackedByPodDir => true,
            VolumeClass::PodDataUnreadable => gate.has(),
            _ => false,
        };
        if rebuilds {
            // A pod still needs it: never unstage, have kubelet track it again.
            let restart = if gate.has() {
                format!("Restart kubelet with --feature-gates={GATE}=true")
            } else {
                "Restart kubelet".to_owned()
            };
            steps.push(format!(
                "A pod still uses it: do not unstage it. {restart} so that it rebuilds its \
                 state and reports the volume in volumesInUse again, then run the doctor again."
            ));
        }
    }
    if volume.flags.contains(&Flag::VolumeAttachmentDetached) {
        steps.push(
            "Its VolumeAttachment says detached while the node still holds mounts: stop the \
             pods that use it and check the driver's node state before anything else writes \
             to it."
                .to_owned(),
        );
    }
    if volume.flags.contains(&Flag::VolumeAttachmentNodeMismatch) {
        steps.push(
            "Its VolumeAttachment names another node: the volume may be attached twice; stop \
             the writers on one side before anything else."
                .to_owned(),
        );
    }
    if volume.mode == VolumeMode::Block && !steps.is_empty() {
        steps.push(format!(
            "Block volume: the staging path is {}; the global map path is {}.",
            volume.staging_path.as_deref().unwrap_or("-"),
            volume.device_mount_path
        ));
    }
    if !steps.is_empty() {
        steps.push(NO_MANUAL_CLEANUP.to_owned());
    }
    steps
}

/// The steps for a skipped entry that still holds mounts; empty otherwise.
pub(crate) fn skip_plan(skip: &SkipReport, node: Option<&str>) -> Vec<String> {
    if !skip.mounted {
        return Vec::new();
    }
    let mut steps = Vec::new();
    match skip.reason {
        SkipReason::LegacyPvLayout => steps.push(format!(
            "Staged in the pv/<name>/globalmount layout that kubelet used through 1.23; newer \
             kubelets never list it, so nothing will unstage it.{}",
            if skip.pod_dirs.is_empty() {
                String::new()
            } else {
                format!(" Pod directories of this PV: {}.", skip.pod_dirs.join(", "))
            }
        )),
        _ => steps.push(format!(
            "Kubelet's listing skips this entry ({}) while something is mounted there, so no \
             kubelet will unstage it.",
            skip.reason.as_str()
        )),
    }
    if let Some(mount) = &skip.mount {
        let named = if skip.attached_device_path_matches.is_empty() {
            String::new()
        } else {
            format!(
                "; volumesAttached names this device as {}",
                skip.attached_device_path_matches.join(", ")
            )
        };
        steps.push(format!(
            "Identify it by its mount: source {} ({}, device {}){named}.",
            mount.source, mount.fs_type, mount.device
        ));
    }
    steps.push(
        "Keep the volume attached: do not delete its VolumeAttachment and do not force-detach \
         the disk."
            .to_owned(),
    );
    steps.push(cordon(node));
    if !skip.pod_refs.is_empty() {
        steps.push(format!(
            "Delete the pods that still use it through {} so that kubelet unpublishes them.",
            skip.pod_refs.join(", ")
        ));
    }
    steps.push(format!(
        "Call the driver's NodeUnstageVolume with staging_target_path {}/globalmount and the \
         volume's handle.",
        skip.path
    ));
    steps.push(NO_MANUAL_CLEANUP.to_owned());
    steps
}
