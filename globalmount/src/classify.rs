//! Joins the listing, the pod scan, the mount table and optional API objects
//! into a [`Report`]: which staged volumes are in use, which kubelet lost
//! track of, and which are at risk of being detached under their mounts.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::api::{NodeView, VolumeAttachmentView};
use crate::discover::{GlobalVolume, ListError, Skip, VolumeMode, list_global_volumes};
use crate::fs::NodeFs;
use crate::layout::{KubeletLayout, clean_path, unique_volume_name};
use crate::mountrefs::{MountTable, SnapshotRefs};
use crate::plan::{PlannedAction, plan_reconstruction};
use crate::podlocal::{
    FallbackError, PodFsVolume, PodScan, RecoveredGlobalData,
    find_global_mount_data_from_pod_mount, scan_pod_volumes, spec_name_for_recovered,
};
use crate::report::{
    ApiReport, Flag, GlobalVolumeReport, PairedBy, PodLocalReport, RecoveredReport, Report,
    SkipReport, VolumeAttachmentReport, VolumeClass,
};

/// Everything a diagnosis looks at. Paths are host paths; `fs` maps them.
pub struct NodeInputs<'a, F: NodeFs + ?Sized> {
    /// Read-only file access.
    pub fs: &'a F,
    /// The kubelet root as the mount table spells it.
    pub layout: &'a KubeletLayout,
    /// One consistent snapshot of the mount table.
    pub table: &'a MountTable,
    /// Where the table came from, for the report.
    pub mountinfo_source: String,
    /// The node's name; needed for VolumeAttachment names.
    pub node_name: Option<String>,
    /// The Node object, when given.
    pub node: Option<NodeView>,
    /// VolumeAttachments, when given.
    pub volume_attachments: Option<Vec<VolumeAttachmentView>>,
}

/// Failures that make a diagnosis meaningless.
#[derive(Debug, Error)]
pub enum DiagnoseError {
    /// A wrong kubelet root must not look like a clean node.
    #[error("kubelet root {} cannot be read: {source}", path.display())]
    KubeletRoot {
        /// The kubelet root.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The CSI plugin directory exists but cannot be listed.
    #[error(transparent)]
    List(#[from] ListError),
}

/// The fallback's outcome for one pod volume directory with unusable data.
struct FallbackOutcome {
    recovered: Option<(RecoveredGlobalData, String)>,
    declined: Option<FallbackError>,
}

fn run_fallback(
    fs: &(impl NodeFs + ?Sized),
    table: &MountTable,
    pod: &PodFsVolume,
) -> FallbackOutcome {
    let refs = SnapshotRefs { fs, table };
    match find_global_mount_data_from_pod_mount(fs, &refs, &pod.path) {
        Err(e) => FallbackOutcome {
            recovered: None,
            declined: Some(e),
        },
        Ok(global) => match spec_name_for_recovered(&pod.name, &global.data) {
            Ok(spec_name) => FallbackOutcome {
                recovered: Some((global, spec_name)),
                declined: None,
            },
            Err(e) => FallbackOutcome {
                recovered: None,
                declined: Some(e),
            },
        },
    }
}

/// What the mount table says about one listed volume.
#[derive(Default)]
struct MountFacts {
    mounted: bool,
    holds_mounts: bool,
    nested_mounts: Vec<PathBuf>,
    pod_refs: Vec<PathBuf>,
    other_refs: Vec<PathBuf>,
    dev_mounts: Vec<PathBuf>,
    publish_entries: Vec<PathBuf>,
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !list.contains(&path) {
        list.push(path);
    }
}

fn filesystem_facts(
    table: &MountTable,
    layout: &KubeletLayout,
    volume: &GlobalVolume,
    warnings: &mut Vec<String>,
) -> MountFacts {
    let global_mount = clean_path(&volume.device_mount_path);
    let nested_mounts: Vec<PathBuf> = table
        .mounts_beneath(&global_mount)
        .into_iter()
        .map(|m| m.mount_point.clone())
        .collect();
    let mounted = table.is_mount_point(&global_mount);
    let mut facts = MountFacts {
        mounted,
        holds_mounts: mounted || !nested_mounts.is_empty(),
        ..MountFacts::default()
    };
    // The global mount is known to exist from the listing, so the table
    // alone answers; nothing is stat'ed.
    let pods_dir = layout.pods_dir();
    for path in std::iter::once(&global_mount).chain(nested_mounts.iter()) {
        match table.search_mount_points(path) {
            Ok(refs) => {
                for r in refs {
                    if r == global_mount || nested_mounts.contains(&r) {
                        continue;
                    }
                    if r.starts_with(&pods_dir) {
                        push_unique(&mut facts.pod_refs, r);
                    } else {
                        push_unique(&mut facts.other_refs, r);
                    }
                }
            }
            Err(e) => warnings.push(format!("mount references of {}: {e}", path.display())),
        }
    }
    facts.nested_mounts = nested_mounts;
    facts
}

fn block_facts(
    fs: &(impl NodeFs + ?Sized),
    table: &MountTable,
    layout: &KubeletLayout,
    volume: &GlobalVolume,
    warnings: &mut Vec<String>,
) -> MountFacts {
    let dev_mounts: Vec<PathBuf> = table
        .mounts_beneath(&volume.device_mount_path)
        .into_iter()
        .map(|m| m.mount_point.clone())
        .collect();
    let publish_dir = layout.block_publish_dir(&volume.spec.name);
    let publish_entries = match fs.read_dir(&publish_dir) {
        Ok(entries) => entries
            .into_iter()
            .map(|e| publish_dir.join(e.name))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            warnings.push(format!("listing {}: {e}", publish_dir.display()));
            Vec::new()
        }
    };
    let staging_mounted = volume
        .staging_path
        .as_deref()
        .is_some_and(|p| table.is_mount_point(p));
    MountFacts {
        // Listed block volumes are staged by definition: the staging directory exists.
        mounted: true,
        holds_mounts: staging_mounted || !dev_mounts.is_empty(),
        dev_mounts,
        publish_entries,
        ..MountFacts::default()
    }
}

/// Builds the report for one node.
pub fn diagnose(inputs: &NodeInputs<'_, impl NodeFs + ?Sized>) -> Result<Report, DiagnoseError> {
    let NodeInputs {
        fs, layout, table, ..
    } = inputs;
    let fs = *fs;
    if let Err(source) = fs.read_dir(layout.root()) {
        return Err(DiagnoseError::KubeletRoot {
            path: layout.root().to_path_buf(),
            source,
        });
    }
    let listing = list_global_volumes(fs, layout)?;
    let pods: PodScan = scan_pod_volumes(fs, layout);
    let mut warnings: Vec<String> = pods
        .problems
        .iter()
        .map(|(path, e)| format!("listing {}: {e}", path.display()))
        .collect();

    let pod_mount_mounted: Vec<bool> = pods
        .fs_volumes
        .iter()
        .map(|p| table.is_mount_point(&p.mount_path))
        .collect();
    let fallbacks: Vec<Option<FallbackOutcome>> = pods
        .fs_volumes
        .iter()
        .map(|p| (!p.data_is_usable()).then(|| run_fallback(fs, table, p)))
        .collect();

    let facts: Vec<MountFacts> = listing
        .volumes
        .iter()
        .map(|v| match v.mode() {
            VolumeMode::Filesystem => filesystem_facts(table, layout, v, &mut warnings),
            VolumeMode::Block => block_facts(fs, table, layout, v, &mut warnings),
        })
        .collect();

    // How each pod directory pairs with each listed filesystem volume, strongest
    // evidence first. A readable pod file is matched by identity, never by name,
    // so an inline volume cannot pair with a PV that happens to share its name.
    let pairing = |pod_index: usize, volume_index: usize| -> Option<PairedBy> {
        let pod = &pods.fs_volumes[pod_index];
        let volume = &listing.volumes[volume_index];
        if volume.mode() != VolumeMode::Filesystem {
            return None;
        }
        let recovered_here = fallbacks[pod_index]
            .as_ref()
            .and_then(|f| f.recovered.as_ref())
            .is_some_and(|(global, _)| {
                clean_path(&global.global_data_dir) == clean_path(&volume.volume_dir)
            });
        if recovered_here {
            return Some(PairedBy::Fallback);
        }
        if facts[volume_index]
            .pod_refs
            .contains(&clean_path(&pod.mount_path))
        {
            return Some(PairedBy::MountReference);
        }
        match &pod.data {
            Ok(data) => (data.driver_name() == volume.spec.driver
                && data.volume_handle() == volume.spec.volume_handle)
                .then_some(PairedBy::PodData),
            Err(_) => (!pod_mount_mounted[pod_index] && pod.name == volume.spec.name)
                .then_some(PairedBy::Name),
        }
    };

    // Unique names kubelet's pod-directory walk reconstructs with the gate on:
    // readable pod files, pod files recovered through the fallback, and block
    // map entries of listed volumes.
    let mut pod_dir_volumes: Vec<String> = Vec::new();
    for (pod, fallback) in pods.fs_volumes.iter().zip(&fallbacks) {
        match (&pod.data, fallback) {
            (Ok(data), _) => {
                pod_dir_volumes.push(unique_volume_name(data.driver_name(), data.volume_handle()))
            }
            (
                Err(_),
                Some(FallbackOutcome {
                    recovered: Some((global, _)),
                    ..
                }),
            ) => pod_dir_volumes.push(unique_volume_name(
                global.data.driver_name(),
                global.data.volume_handle(),
            )),
            _ => {}
        }
    }
    for block in &pods.block_volumes {
        if let Some(volume) = listing
            .volumes
            .iter()
            .find(|v| v.mode() == VolumeMode::Block && v.spec.name == block.name)
        {
            pod_dir_volumes.push(volume.unique_volume_name());
        }
    }
    let plan = plan_reconstruction(true, &listing.volumes, &pod_dir_volumes);

    let node_name = inputs
        .node_name
        .clone()
        .or_else(|| inputs.node.as_ref().map(|n| n.name.clone()));

    let mut global_volumes = Vec::new();
    for (volume_index, (volume, facts)) in listing.volumes.iter().zip(&facts).enumerate() {
        let mut pod_dirs = Vec::new();
        let mut unreadable_pod_dir = false;
        match volume.mode() {
            VolumeMode::Filesystem => {
                for (pod_index, pod) in pods.fs_volumes.iter().enumerate() {
                    if pairing(pod_index, volume_index).is_some() {
                        pod_dirs.push(display(&pod.path));
                        unreadable_pod_dir |= !pod.data_is_usable();
                    }
                }
            }
            VolumeMode::Block => {
                for block in pods
                    .block_volumes
                    .iter()
                    .filter(|b| b.name == volume.spec.name)
                {
                    pod_dirs.push(display(&block.path));
                }
            }
        }

        let in_use = match volume.mode() {
            VolumeMode::Filesystem => !facts.pod_refs.is_empty(),
            VolumeMode::Block => !facts.dev_mounts.is_empty() || !facts.publish_entries.is_empty(),
        };
        let class = if unreadable_pod_dir {
            VolumeClass::PodDataUnreadable
        } else if in_use {
            VolumeClass::InUse
        } else if !pod_dirs.is_empty() {
            VolumeClass::TrackedByPodDir
        } else if facts.holds_mounts || volume.mode() == VolumeMode::Block {
            VolumeClass::OrphanedStaged
        } else {
            VolumeClass::StagedUnmounted
        };

        let unique = volume.unique_volume_name();
        let attachment_name = node_name.as_deref().map(|n| volume.attachment_name(n));
        let mut flags = Vec::new();
        let api = if inputs.node.is_some() || inputs.volume_attachments.is_some() {
            let node = inputs.node.as_ref();
            let attached_entry = node.and_then(|n| n.attached(&unique));
            let in_volumes_in_use = node.map(|n| n.in_use(&unique));
            if in_volumes_in_use == Some(false) {
                flags.push(Flag::AtRisk);
            }
            let volume_attachment = match (&inputs.volume_attachments, &attachment_name) {
                (Some(vas), Some(name)) => {
                    let found = vas.iter().find(|va| &va.name == name);
                    let node_matches =
                        found.map(|va| Some(va.node_name.as_str()) == node_name.as_deref());
                    if node_matches == Some(false) {
                        flags.push(Flag::VolumeAttachmentNodeMismatch);
                    }
                    if found.is_some_and(|va| !va.attached) && facts.holds_mounts {
                        flags.push(Flag::VolumeAttachmentDetached);
                    }
                    Some(VolumeAttachmentReport {
                        name: name.clone(),
                        exists: found.is_some(),
                        attached: found.map(|va| va.attached),
                        node_name: found.map(|va| va.node_name.clone()),
                        node_matches,
                    })
                }
                _ => None,
            };
            Some(ApiReport {
                in_volumes_in_use,
                in_volumes_attached: node.map(|_| attached_entry.is_some()),
                device_path: attached_entry
                    .map(|a| a.device_path.clone())
                    .filter(|p| !p.is_empty()),
                volume_attachment,
            })
        } else {
            None
        };

        let kubelet_plan = plan
            .iter()
            .find(|p| p.unique_volume_name == unique)
            .map(|p| p.action)
            .unwrap_or(match volume.mode() {
                VolumeMode::Filesystem => PlannedAction::WouldRegisterUncertain,
                VolumeMode::Block => PlannedAction::WouldRegisterViaMapper,
            });

        global_volumes.push(GlobalVolumeReport {
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
            pod_dirs,
            class,
            flags,
            kubelet_plan,
            api,
        });
    }

    let mut pod_local = Vec::new();
    for (pod_index, (pod, fallback)) in pods.fs_volumes.iter().zip(&fallbacks).enumerate() {
        let (Err(voldata_error), Some(fallback)) = (&pod.data, fallback) else {
            continue;
        };
        let paired = (0..listing.volumes.len())
            .filter_map(|vi| pairing(pod_index, vi).map(|by| (vi, by)))
            .min_by_key(|(_, by)| *by);
        let recovered_from = fallback.recovered.as_ref().map(|(global, spec_name)| {
            let data_dir = clean_path(&global.global_data_dir);
            RecoveredReport {
                global_data_dir: display(&global.global_data_dir),
                reference: display(&global.reference),
                driver: global.data.driver_name().to_owned(),
                volume_handle: global.data.volume_handle().to_owned(),
                spec_vol_id: Some(global.data.spec_vol_id().to_owned()).filter(|s| !s.is_empty()),
                spec_name: spec_name.clone(),
                listed: listing
                    .volumes
                    .iter()
                    .any(|v| clean_path(&v.volume_dir) == data_dir),
            }
        });
        pod_local.push(PodLocalReport {
            pod_uid: pod.pod_uid.clone(),
            volume_name: pod.name.clone(),
            path: display(&pod.path),
            voldata_error: voldata_error.clone(),
            pod_mount_mounted: pod_mount_mounted[pod_index],
            recovered_from,
            decline_reason: fallback
                .declined
                .as_ref()
                .map(FallbackError::decline_reason),
            decline_detail: fallback.declined.as_ref().map(ToString::to_string),
            paired_global_volume: paired
                .map(|(vi, _)| display(&listing.volumes[vi].device_mount_path)),
            paired_by: paired.map(|(_, by)| by),
        });
    }

    let skipped = listing
        .skipped
        .iter()
        .map(|s: &Skip| SkipReport {
            path: display(&s.path),
            reason: s.reason,
            detail: s.detail.clone(),
            expected: s.expected.as_deref().map(display),
            mounted: table.is_mount_point(&s.path) || !table.mounts_beneath(&s.path).is_empty(),
        })
        .collect();

    if !listing.volumes.is_empty()
        && !table
            .entries()
            .iter()
            .any(|m| m.mount_point.starts_with(layout.root()))
    {
        warnings.push(format!(
            "no mount in the mount table lies under {}; if the kubelet root is a symlink or a bind alias, pass the path the mount table uses",
            layout.root().display()
        ));
    }

    let mut report = Report {
        kubelet_root: display(layout.root()),
        node_name,
        mountinfo_source: inputs.mountinfo_source.clone(),
        global_volumes,
        pod_local,
        skipped,
        warnings,
        summary: Default::default(),
    };
    report.summarize();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{GLOBAL_MOUNT_DIR, POD_MOUNT_DIR};
    use crate::testfs::{Access, MemFs};

    const ROOT: &str = "/var/lib/kubelet";

    fn inputs<'a>(
        fs: &'a MemFs,
        layout: &'a KubeletLayout,
        table: &'a MountTable,
    ) -> NodeInputs<'a, MemFs> {
        NodeInputs {
            fs,
            layout,
            table,
            mountinfo_source: "test".to_owned(),
            node_name: Some("node-a".to_owned()),
            node: None,
            volume_attachments: None,
        }
    }

    /// Every kind of entry the doctor looks at, with its mount points populated
    /// by something that must never be read.
    fn busy_node(layout: &KubeletLayout) -> (MemFs, MountTable, Vec<PathBuf>) {
        let mut fs = MemFs::new();
        let mut mount_points = Vec::new();
        let mut lines = vec!["1 0 8:1 / / rw - ext4 /dev/sda1 rw".to_owned()];
        for (i, (handle, pod_data)) in [("h1", true), ("h2", false), ("h3", true)]
            .iter()
            .enumerate()
        {
            let dir = layout.fs_volume_dir("d", handle);
            let global = dir.join(GLOBAL_MOUNT_DIR);
            fs.dir(&global)
                .file(global.join("inside-the-mount"), "never read")
                .file(
                    dir.join("vol_data.json"),
                    format!(r#"{{"driverName":"d","specVolID":"pv-{handle}","volumeHandle":"{handle}"}}"#),
                );
            let pod_dir = layout
                .pod_fs_volumes_dir("uid")
                .join(format!("pv-{handle}"));
            let pod_mount = pod_dir.join(POD_MOUNT_DIR);
            fs.dir(&pod_mount)
                .file(pod_mount.join("inside-the-mount"), "never read");
            if *pod_data {
                fs.file(
                    pod_dir.join("vol_data.json"),
                    format!(r#"{{"driverName":"d","specVolID":"pv-{handle}","volumeHandle":"{handle}"}}"#),
                );
            }
            lines.push(format!(
                "{} 1 8:{} / {} rw - ext4 /dev/x rw",
                100 + i,
                16 + i,
                global.display()
            ));
            lines.push(format!(
                "{} 1 8:{} / {} rw - ext4 /dev/x rw",
                200 + i,
                16 + i,
                pod_mount.display()
            ));
            mount_points.push(global);
            mount_points.push(pod_mount);
        }
        let block = layout.block_volume_dir("pv-b");
        fs.file(
            block.join("data/vol_data.json"),
            r#"{"driverName":"b","specVolID":"pv-b","volumeHandle":"hb"}"#,
        )
        .dir(layout.block_staging_path("pv-b"))
        .file(block.join("dev/uid"), "device node")
        .file(layout.block_publish_dir("pv-b").join("uid"), "");
        lines.push(format!(
            "300 1 0:5 /sdc {} rw - devtmpfs udev rw",
            block.join("dev/uid").display()
        ));
        mount_points.push(block.join("dev/uid"));
        (
            fs,
            MountTable::parse(lines.join("\n")).unwrap(),
            mount_points,
        )
    }

    #[test]
    fn the_diagnosis_never_reads_or_lists_a_mount_point() {
        let layout = KubeletLayout::new(ROOT);
        let (fs, table, mount_points) = busy_node(&layout);
        let report = diagnose(&inputs(&fs, &layout, &table)).unwrap();
        assert_eq!(report.global_volumes.len(), 4);
        assert_eq!(report.pod_local.len(), 1);
        let accesses = fs.accesses();
        assert!(!accesses.is_empty());
        for (access, path) in &accesses {
            for mount_point in &mount_points {
                assert!(
                    !path.starts_with(mount_point),
                    "{access:?} of {} touches mount point {}",
                    path.display(),
                    mount_point.display()
                );
            }
        }
        // The pod-local file of the broken volume was read, beside its mount.
        assert!(accesses.contains(&(
            Access::ReadFile,
            layout.pod_fs_volumes_dir("uid").join("pv-h2/vol_data.json")
        )));
    }

    #[test]
    fn unreadable_pod_directories_become_warnings() {
        let layout = KubeletLayout::new(ROOT);
        let mut fs = MemFs::new();
        fs.dir(layout.root())
            .unreadable_dir(layout.pod_fs_volumes_dir("uid-1"));
        let table = MountTable::parse("1 0 8:1 / / rw - ext4 /dev/sda1 rw").unwrap();
        let report = diagnose(&inputs(&fs, &layout, &table)).unwrap();
        assert_eq!(report.warnings.len(), 1);
        assert!(
            report.warnings[0].contains("uid-1"),
            "{:?}",
            report.warnings
        );
        assert!(!report.has_findings());
    }

    #[test]
    fn a_mount_table_without_a_root_mount_gives_warnings_not_failures() {
        let layout = KubeletLayout::new(ROOT);
        let mut fs = MemFs::new();
        let dir = layout.fs_volume_dir("d", "h");
        fs.dir(dir.join(GLOBAL_MOUNT_DIR)).file(
            dir.join("vol_data.json"),
            r#"{"driverName":"d","volumeHandle":"h"}"#,
        );
        let table = MountTable::parse("5 1 8:1 / /boot rw - ext4 /dev/sda1 rw").unwrap();
        let report = diagnose(&inputs(&fs, &layout, &table)).unwrap();
        assert_eq!(report.global_volumes[0].class, VolumeClass::StagedUnmounted);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("mount references")),
            "{:?}",
            report.warnings
        );
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("no mount in the mount table")),
            "{:?}",
            report.warnings
        );
    }
}
