//! Joins the listing, the pod scan, the mount table and optional API objects
//! into a [`Report`]: which staged volumes are in use, which kubelet lost
//! track of, and which are at risk of being detached under their mounts.
//!
//! The diagnosis is a pipeline of phases, each in its own module:
//!
//! 1. `evidence`: everything read from the node.
//! 2. `indexes`: every lookup the later phases make, built once, so the
//!    cost grows with the number of volumes plus mounts, not their product.
//! 3. `pairing`: which pod directory belongs to which listed volume.
//! 4. `kubelet_view`: what kubelet's listing keeps and what it would plan.
//! 5. `volume`: the report of each listed volume.
//! 6. `pod_local`: pod directories whose data kubelet cannot use.
//! 7. `skips`: entries kubelet's listing skips.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use thiserror::Error;

use crate::api::{CsiDriverView, NodeView, PersistentVolumeView, PodView, VolumeAttachmentView};
use crate::discover::ListError;
use crate::fs::NodeFs;
use crate::gate::KubeletGate;
use crate::layout::{KubeletLayout, clean_path};
use crate::mountinfo::MountInfo;
use crate::mountrefs::MountTable;
use crate::report::{MountReport, Report};

mod evidence;
mod indexes;
mod kubelet_view;
mod pairing;
mod pod_local;
mod skips;
mod volume;

use evidence::Evidence;
use indexes::Indexes;
use kubelet_view::KubeletView;
use pairing::Pairing;

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

/// Optional inputs beyond [`NodeInputs`]: more API objects and time signals.
#[derive(Debug, Clone, Default)]
pub struct ExtraInputs {
    /// PersistentVolumes, to name a volume's PV and claim.
    pub persistent_volumes: Option<Vec<PersistentVolumeView>>,
    /// Pods, to name the pods behind pod directories and claims.
    pub pods: Option<Vec<PodView>>,
    /// CSIDrivers, to know which drivers attach (only those are in `volumesInUse`).
    pub csi_drivers: Option<Vec<CsiDriverView>>,
    /// When kubelet started.
    pub kubelet_started_at: Option<SystemTime>,
    /// The root as the operator gave it, when symbolic links were resolved.
    pub kubelet_root_given: Option<PathBuf>,
    /// Whether kubelet has KEP-6058's gate, when known from its binary or a version the
    /// operator gave; otherwise the Node's `kubeletVersion` decides, or it is unknown.
    pub kubelet_gate: Option<KubeletGate>,
}

/// Failures that make a diagnosis meaningless.
#[derive(Debug, Error)]
pub enum DiagnoseError {
    /// A wrong kubelet root must not look like a clean node.
    #[error("kubelet root {} cannot be read", path.display())]
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

/// Builds the report for one node.
pub fn diagnose(inputs: &NodeInputs<'_, impl NodeFs + ?Sized>) -> Result<Report, DiagnoseError> {
    diagnose_with(inputs, &ExtraInputs::default())
}

/// Builds the report for one node, with the optional inputs of [`ExtraInputs`].
pub fn diagnose_with<F: NodeFs + ?Sized>(
    inputs: &NodeInputs<'_, F>,
    extra: &ExtraInputs,
) -> Result<Report, DiagnoseError> {
    let mut evidence = Evidence::gather(inputs, extra)?;
    let mut warnings = std::mem::take(&mut evidence.warnings);
    let indexes = Indexes::build(&evidence, inputs, extra);
    let pairing = Pairing::build(&evidence, &indexes);
    let kubelet = KubeletView::build(inputs.fs, &evidence, &indexes);
    let gate = extra.kubelet_gate.clone().unwrap_or_else(|| {
        inputs
            .node
            .as_ref()
            .and_then(|node| node.kubelet_version.as_deref())
            .map_or_else(KubeletGate::default, |version| {
                KubeletGate::from_version(version, "the Node's status.nodeInfo.kubeletVersion")
            })
    });
    let diagnosis = Diagnosis {
        gate: &gate,
        fs: inputs.fs,
        table: inputs.table,
        volume_attachments_given: inputs.volume_attachments.is_some(),
        extra,
        evidence: &evidence,
        indexes: &indexes,
        pairing: &pairing,
        kubelet: &kubelet,
    };
    let global_volumes = (0..evidence.listing.volumes.len())
        .map(|vi| diagnosis.volume_report(vi))
        .collect();
    let pod_local = diagnosis.pod_local_reports();
    let skipped = diagnosis.skip_reports();

    let layout = &evidence.layout;
    if !evidence.listing.volumes.is_empty() && !inputs.table.has_mounts_at_or_beneath(layout.root())
    {
        warnings.push(format!(
            "no mount in the mount table lies under {}; if the kubelet root is a bind alias, pass the path the mount table uses",
            layout.root().display()
        ));
    }
    let mut report = Report {
        kubelet_root: display(layout.root()),
        kubelet_root_given: evidence
            .root_given
            .as_deref()
            .filter(|given| clean_path(given) != layout.root())
            .map(display),
        kubelet_started_at: extra.kubelet_started_at.map(rfc3339),
        node_name: indexes.node_name.clone(),
        kubelet_gate: gate.clone(),
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

/// What the reporting phases (per volume, pod-local, skips) read: the
/// evidence, its indexes, the pairing and kubelet's view of it.
struct Diagnosis<'a, F: NodeFs + ?Sized> {
    fs: &'a F,
    table: &'a MountTable,
    /// VolumeAttachments were given (possibly none): each volume's is looked up.
    volume_attachments_given: bool,
    extra: &'a ExtraInputs,
    /// Whether a plan may offer KEP-6058's gate.
    gate: &'a KubeletGate,
    evidence: &'a Evidence,
    indexes: &'a Indexes<'a>,
    pairing: &'a Pairing,
    kubelet: &'a KubeletView,
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn mount_report(mount: &MountInfo) -> MountReport {
    MountReport {
        mount_point: display(&mount.mount_point),
        source: mount.source.clone(),
        fs_type: mount.fs_type.clone(),
        device: format!("{}:{}", mount.major, mount.minor),
    }
}

/// The visible mount exactly at `path`, if any.
fn visible_mount<'t>(table: &'t MountTable, path: &Path) -> Option<&'t MountInfo> {
    table.mounts_at(path).last().copied()
}

/// The pod UID in a path below `<root>/pods/<uid>/`.
fn pod_uid_of(pods_dir: &Path, path: &Path) -> Option<String> {
    path.strip_prefix(pods_dir)
        .ok()?
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{GLOBAL_MOUNT_DIR, POD_MOUNT_DIR};
    use crate::report::VolumeClass;
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
