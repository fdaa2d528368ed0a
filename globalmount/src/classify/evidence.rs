//! Phase one: what the node shows. The listing, the pod scan, the fallback
//! for each pod directory with unusable data, and what the mount table says
//! about each listed volume. Everything read from the node is read here.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

use super::{DiagnoseError, ExtraInputs, NodeInputs};
use crate::discover::{GlobalVolume, Listing, VolumeMode, list_global_volumes};
use crate::fs::NodeFs;
use crate::layout::{KubeletLayout, clean_path};
use crate::mountrefs::{MountTable, SnapshotRefs};
use crate::podlocal::{
    FallbackError, PodFsVolume, PodScan, RecoveredGlobalData,
    find_global_mount_data_from_pod_mount, scan_pod_volumes, spec_name_for_recovered,
};

/// What was read from the node for one diagnosis.
pub(super) struct Evidence {
    /// The layout of the kubelet root with its links resolved, as kubelet
    /// and the mount table spell it.
    pub(super) layout: KubeletLayout,
    /// The root as given, when it differs from the resolved one.
    pub(super) root_given: Option<PathBuf>,
    pub(super) listing: Listing,
    pub(super) pods: PodScan,
    /// Per pod filesystem volume: whether its `mount` is a mount point.
    pub(super) pod_mount_mounted: Vec<bool>,
    /// Per pod filesystem volume: the fallback's outcome, when its data is unusable.
    pub(super) fallbacks: Vec<Option<FallbackOutcome>>,
    /// Per listed volume: what the mount table says about it.
    pub(super) facts: Vec<MountFacts>,
    pub(super) warnings: Vec<String>,
}

/// The fallback's outcome for one pod volume directory with unusable data.
pub(super) struct FallbackOutcome {
    pub(super) recovered: Option<(RecoveredGlobalData, String)>,
    pub(super) declined: Option<FallbackError>,
}

/// What the mount table says about one listed volume.
#[derive(Default)]
pub(super) struct MountFacts {
    pub(super) mounted: bool,
    pub(super) holds_mounts: bool,
    pub(super) nested_mounts: Vec<PathBuf>,
    pub(super) pod_refs: Vec<PathBuf>,
    pub(super) other_refs: Vec<PathBuf>,
    pub(super) dev_mounts: Vec<PathBuf>,
    pub(super) publish_entries: Vec<PathBuf>,
    /// Block: publish entries with the device bound on them. A leftover
    /// 0-byte file after a reboot is not a use.
    pub(super) published: usize,
}

impl Evidence {
    pub(super) fn gather(
        inputs: &NodeInputs<'_, impl NodeFs + ?Sized>,
        extra: &ExtraInputs,
    ) -> Result<Self, DiagnoseError> {
        let (fs, table) = (inputs.fs, inputs.table);
        // Kubelet resolves the links in its root directory, and the mount table
        // spells every mount with the target; so must every path built here.
        let mut root_given = extra.kubelet_root_given.clone();
        let layout = match fs.resolve_symlinks(inputs.layout.root()) {
            Ok(root) if root != inputs.layout.root() => {
                root_given.get_or_insert_with(|| inputs.layout.root().to_path_buf());
                KubeletLayout::new(root)
            }
            _ => inputs.layout.clone(),
        };
        if let Err(source) = fs.read_dir(layout.root()) {
            return Err(DiagnoseError::KubeletRoot {
                path: layout.root().to_path_buf(),
                source,
            });
        }
        let listing = list_global_volumes(fs, &layout)?;
        let pods = scan_pod_volumes(fs, &layout);
        let mut warnings: Vec<String> = pods
            .problems
            .iter()
            .map(|(path, e)| format!("listing {}: {e}", path.display()))
            .collect();
        let pod_mount_mounted = pods
            .fs_volumes
            .iter()
            .map(|p| table.is_mount_point(&p.mount_path))
            .collect();
        let fallbacks = pods
            .fs_volumes
            .iter()
            .map(|p| (!p.data_is_usable()).then(|| run_fallback(fs, table, p)))
            .collect();
        let facts = listing
            .volumes
            .iter()
            .map(|v| match v.mode() {
                VolumeMode::Filesystem => filesystem_facts(table, &layout, v, &mut warnings),
                VolumeMode::Block => block_facts(fs, table, &layout, v, &mut warnings),
            })
            .collect();
        Ok(Self {
            layout,
            root_given,
            listing,
            pods,
            pod_mount_mounted,
            fallbacks,
            facts,
            warnings,
        })
    }
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

/// `paths` without repeats, each kept where it first appears. A hash set
/// rather than a search of the list: one volume may have tens of thousands
/// of references (a `subPath: "."` mount per container).
pub(super) fn dedup_in_order(paths: &mut Vec<PathBuf>) {
    let mut seen = HashSet::with_capacity(paths.len());
    paths.retain(|p| seen.insert(p.clone()));
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
    let own: HashSet<&Path> = std::iter::once(global_mount.as_path())
        .chain(nested_mounts.iter().map(PathBuf::as_path))
        .collect();
    for path in std::iter::once(&global_mount).chain(nested_mounts.iter()) {
        match table.search_mount_points(path) {
            Ok(refs) => {
                for r in refs {
                    if own.contains(r.as_path()) {
                        continue;
                    }
                    if r.starts_with(&pods_dir) {
                        facts.pod_refs.push(r);
                    } else {
                        facts.other_refs.push(r);
                    }
                }
            }
            Err(e) => warnings.push(format!(
                "mount references of {}: {}",
                path.display(),
                error_line::chain(&e)
            )),
        }
    }
    dedup_in_order(&mut facts.pod_refs);
    dedup_in_order(&mut facts.other_refs);
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
    let publish_entries: Vec<PathBuf> = match fs.read_dir(&publish_dir) {
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
    let published = publish_entries
        .iter()
        .filter(|p| table.is_mount_point(p))
        .count();
    let staging_holds_mounts = volume
        .staging_path
        .as_deref()
        .is_some_and(|p| table.has_mounts_at_or_beneath(p));
    MountFacts {
        // Listed block volumes are staged by definition: the staging directory exists.
        mounted: true,
        holds_mounts: staging_holds_mounts || !dev_mounts.is_empty() || published > 0,
        dev_mounts,
        publish_entries,
        published,
        ..MountFacts::default()
    }
}
