//! Joins the listing, the pod scan, the mount table and optional API objects
//! into a [`Report`]: which staged volumes are in use, which kubelet lost
//! track of, and which are at risk of being detached under their mounts.
//!
//! Every join goes through an index (by path, by device, by identity), so the
//! cost grows with the number of volumes plus mounts, not with their product:
//! a node with thousands of volumes is diagnosed in well under a second.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use thiserror::Error;

use crate::api::{CsiDriverView, NodeView, PersistentVolumeView, PodView, VolumeAttachmentView};
use crate::discover::{GlobalVolume, ListError, Skip, SkipReason, VolumeMode, list_global_volumes};
use crate::error_chain;
use crate::fs::{EntryKind, NodeFs, StatProbe};
use crate::layout::{GLOBAL_MOUNT_DIR, KubeletLayout, clean_path, unique_volume_name};
use crate::mountinfo::MountInfo;
use crate::mountrefs::{MountTable, SnapshotRefs};
use crate::plan::{PlannedAction, plan_reconstruction};
use crate::podlocal::{
    FallbackError, PodFsVolume, PodScan, RecoveredGlobalData,
    find_global_mount_data_from_pod_mount, scan_pod_volumes, spec_name_for_recovered,
};
use crate::report::{
    ApiReport, Flag, GlobalVolumeReport, MountReport, OwnerReport, OwnerSource, PairedBy,
    PodLocalReport, PodRefReport, Progress, ProgressReport, RecoveredReport, Report, Signal,
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
    /// Block: publish entries with the device bound on them. A leftover
    /// 0-byte file after a reboot is not a use.
    published: usize,
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `paths` without repeats, each kept where it first appears. A hash set
/// rather than a search of the list: one volume may have tens of thousands
/// of references (a `subPath: "."` mount per container).
fn dedup_in_order(paths: &mut Vec<PathBuf>) {
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
                error_chain(&e)
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

/// Builds the report for one node.
pub fn diagnose(inputs: &NodeInputs<'_, impl NodeFs + ?Sized>) -> Result<Report, DiagnoseError> {
    diagnose_with(inputs, &ExtraInputs::default())
}

/// Builds the report for one node, with the optional inputs of [`ExtraInputs`].
pub fn diagnose_with(
    inputs: &NodeInputs<'_, impl NodeFs + ?Sized>,
    extra: &ExtraInputs,
) -> Result<Report, DiagnoseError> {
    let NodeInputs {
        fs, layout, table, ..
    } = inputs;
    let (fs, table) = (*fs, *table);
    // Kubelet resolves the links in its root directory, and the mount table
    // spells every mount with the target; so must every path built here.
    let resolved_layout;
    let mut root_given = extra.kubelet_root_given.clone();
    let layout = match fs.resolve_symlinks(layout.root()) {
        Ok(root) if root != layout.root() => {
            root_given.get_or_insert_with(|| layout.root().to_path_buf());
            resolved_layout = KubeletLayout::new(root);
            &resolved_layout
        }
        _ => *layout,
    };
    if let Err(source) = fs.read_dir(layout.root()) {
        return Err(DiagnoseError::KubeletRoot {
            path: layout.root().to_path_buf(),
            source,
        });
    }
    let listing = list_global_volumes(fs, layout)?;
    let pods: PodScan = scan_pod_volumes(fs, layout);
    let pods_dir = layout.pods_dir();
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

    let node_name = inputs
        .node_name
        .clone()
        .or_else(|| inputs.node.as_ref().map(|n| n.name.clone()));
    let node = inputs.node.as_ref();
    let va_by_name: HashMap<&str, &VolumeAttachmentView> = inputs
        .volume_attachments
        .iter()
        .flatten()
        .map(|va| (va.name.as_str(), va))
        .collect();
    let pv_by_identity: HashMap<(&str, &str), &PersistentVolumeView> = extra
        .persistent_volumes
        .iter()
        .flatten()
        .map(|pv| ((pv.driver.as_str(), pv.volume_handle.as_str()), pv))
        .collect();
    let pv_by_name: HashMap<&str, &PersistentVolumeView> = extra
        .persistent_volumes
        .iter()
        .flatten()
        .map(|pv| (pv.name.as_str(), pv))
        .collect();
    let pod_by_uid: HashMap<&str, &PodView> = extra
        .pods
        .iter()
        .flatten()
        .map(|p| (p.uid.as_str(), p))
        .collect();

    // The PV behind each volume, from the strongest source that names it. A
    // global file written by a released kubelet has no specVolID, so the API
    // objects are the only way to name it.
    let owner_pv: Vec<Option<(String, OwnerSource)>> = listing
        .volumes
        .iter()
        .map(|v| {
            if !v.spec_vol_id.is_empty() {
                return Some((v.spec_vol_id.clone(), OwnerSource::SpecVolId));
            }
            let from_va = node_name
                .as_deref()
                .and_then(|n| va_by_name.get(v.attachment_name(n).as_str()))
                .and_then(|va| va.persistent_volume_name.clone());
            if let Some(name) = from_va {
                return Some((name, OwnerSource::VolumeAttachment));
            }
            pv_by_identity
                .get(&(v.spec.driver.as_str(), v.spec.volume_handle.as_str()))
                .map(|pv| (pv.name.clone(), OwnerSource::PersistentVolume))
        })
        .collect();

    // Indexes for pairing pod directories with listed filesystem volumes.
    let pod_by_mount: HashMap<PathBuf, usize> = pods
        .fs_volumes
        .iter()
        .enumerate()
        .map(|(i, p)| (clean_path(&p.mount_path), i))
        .collect();
    let mut fs_by_identity: HashMap<(&str, &str), usize> = HashMap::new();
    let mut fs_by_dir: HashMap<PathBuf, usize> = HashMap::new();
    let mut fs_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (vi, v) in listing.volumes.iter().enumerate() {
        if v.mode() != VolumeMode::Filesystem {
            continue;
        }
        fs_by_identity
            .entry((v.spec.driver.as_str(), v.spec.volume_handle.as_str()))
            .or_insert(vi);
        fs_by_dir.entry(clean_path(&v.volume_dir)).or_insert(vi);
        fs_by_name.entry(v.spec.name.as_str()).or_default().push(vi);
        if let Some((pv, _)) = &owner_pv[vi] {
            if pv != &v.spec.name {
                fs_by_name.entry(pv.as_str()).or_default().push(vi);
            }
        }
    }

    // How each pod directory pairs with each listed filesystem volume; the
    // strongest evidence wins. A readable pod file is matched by identity,
    // never by name, so an inline volume cannot pair with a PV that happens
    // to share its name.
    let mut pairs: HashMap<(usize, usize), PairedBy> = HashMap::new();
    let pair = |pairs: &mut HashMap<(usize, usize), PairedBy>, pod, volume, by: PairedBy| {
        pairs
            .entry((pod, volume))
            .and_modify(|best| *best = (*best).min(by))
            .or_insert(by);
    };
    for (vi, f) in facts.iter().enumerate() {
        for r in &f.pod_refs {
            if let Some(&pi) = pod_by_mount.get(&clean_path(r)) {
                pair(&mut pairs, pi, vi, PairedBy::MountReference);
            }
        }
    }
    for (pi, pod) in pods.fs_volumes.iter().enumerate() {
        let recovered = fallbacks[pi]
            .as_ref()
            .and_then(|f| f.recovered.as_ref())
            .and_then(|(global, _)| fs_by_dir.get(&clean_path(&global.global_data_dir)));
        if let Some(&vi) = recovered {
            pair(&mut pairs, pi, vi, PairedBy::Fallback);
        }
        match &pod.data {
            Ok(data) => {
                if let Some(&vi) = fs_by_identity.get(&(data.driver_name(), data.volume_handle())) {
                    pair(&mut pairs, pi, vi, PairedBy::PodData);
                }
            }
            Err(_) if !pod_mount_mounted[pi] => {
                for &vi in fs_by_name.get(pod.name.as_str()).into_iter().flatten() {
                    pair(&mut pairs, pi, vi, PairedBy::Name);
                }
            }
            Err(_) => {}
        }
    }
    // A driver without STAGE_UNSTAGE_VOLUME leaves `globalmount` an empty
    // directory and mounts straight into the pod: a mounted pod volume with
    // no usable file and no other pairing belongs to the volume of its name.
    // Besides the PV name, the name may be a `#`-separated field of the
    // handle, where csi-driver-nfs and csi-driver-smb keep the subdirectory
    // they provision for the PV (`server#share#<pv name>#...`).
    let paired_pods: std::collections::HashSet<usize> = pairs.keys().map(|&(pi, _)| pi).collect();
    let mut unstaged_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (vi, v) in listing.volumes.iter().enumerate() {
        if v.mode() != VolumeMode::Filesystem || facts[vi].holds_mounts {
            continue;
        }
        let mut names: Vec<&str> = vec![v.spec.name.as_str()];
        names.extend(owner_pv[vi].as_ref().map(|(pv, _)| pv.as_str()));
        names.extend(v.spec.volume_handle.split('#').filter(|s| !s.is_empty()));
        names.sort_unstable();
        names.dedup();
        for name in names {
            unstaged_by_name.entry(name).or_default().push(vi);
        }
    }
    for (pi, pod) in pods.fs_volumes.iter().enumerate() {
        if pod.data_is_usable() || !pod_mount_mounted[pi] || paired_pods.contains(&pi) {
            continue;
        }
        for &vi in unstaged_by_name
            .get(pod.name.as_str())
            .into_iter()
            .flatten()
        {
            pair(&mut pairs, pi, vi, PairedBy::NameWithoutStaging);
        }
    }
    let mut pods_of_volume: Vec<Vec<usize>> = vec![Vec::new(); listing.volumes.len()];
    let mut best_of_pod: HashMap<usize, (PairedBy, usize)> = HashMap::new();
    for (&(pi, vi), &by) in &pairs {
        pods_of_volume[vi].push(pi);
        best_of_pod
            .entry(pi)
            .and_modify(|best| *best = (*best).min((by, vi)))
            .or_insert((by, vi));
    }
    for list in &mut pods_of_volume {
        list.sort_unstable();
    }
    let mut block_maps_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, block) in pods.block_volumes.iter().enumerate() {
        block_maps_by_name
            .entry(block.name.as_str())
            .or_default()
            .push(i);
    }

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
    for v in listing
        .volumes
        .iter()
        .filter(|v| v.mode() == VolumeMode::Block)
    {
        if block_maps_by_name.contains_key(v.spec.name.as_str()) {
            pod_dir_volumes.push(v.unique_volume_name());
        }
    }

    // Kubelet's listing stats `globalmount` following links; a dangling link
    // or a dead mount fails there and the volume is skipped. Only those two
    // shapes can fail, so only they are probed.
    let would_list: Vec<Result<(), String>> = listing
        .volumes
        .iter()
        .zip(&facts)
        .map(|(v, f)| {
            if v.mode() != VolumeMode::Filesystem {
                return Ok(());
            }
            let probe = f.mounted
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
        })
        .collect();
    let listable: Vec<GlobalVolume> = listing
        .volumes
        .iter()
        .zip(&would_list)
        .filter(|(_, ok)| ok.is_ok())
        .map(|(v, _)| v.clone())
        .collect();
    let plan = plan_reconstruction(true, &listable, &pod_dir_volumes);
    let plan_by_name: HashMap<&str, PlannedAction> = plan
        .iter()
        .map(|p| (p.unique_volume_name.as_str(), p.action))
        .collect();

    let mut global_volumes = Vec::new();
    for (vi, (volume, facts)) in listing.volumes.iter().zip(&facts).enumerate() {
        let mut pod_dirs = Vec::new();
        let mut unreadable_pod_dir = false;
        let mut pod_mount_live = false;
        match volume.mode() {
            VolumeMode::Filesystem => {
                for &pi in &pods_of_volume[vi] {
                    let pod = &pods.fs_volumes[pi];
                    pod_dirs.push(pod.path.clone());
                    unreadable_pod_dir |= !pod.data_is_usable();
                    pod_mount_live |= pod_mount_mounted[pi];
                }
            }
            VolumeMode::Block => {
                for &i in block_maps_by_name
                    .get(volume.spec.name.as_str())
                    .into_iter()
                    .flatten()
                {
                    pod_dirs.push(pods.block_volumes[i].path.clone());
                }
            }
        }

        let in_use = match volume.mode() {
            VolumeMode::Filesystem => {
                !facts.pod_refs.is_empty() || (!facts.holds_mounts && pod_mount_live)
            }
            VolumeMode::Block => !facts.dev_mounts.is_empty() || facts.published > 0,
        };
        let mut class = if unreadable_pod_dir {
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
        let found_va = attachment_name
            .as_deref()
            .and_then(|name| va_by_name.get(name).copied());
        let (attachable, attachable_source) = attachability(
            volume,
            node,
            found_va.is_some(),
            extra.csi_drivers.as_deref(),
        );
        let mut flags = Vec::new();
        let api = if node.is_some() || inputs.volume_attachments.is_some() {
            let attached_entry = node.and_then(|n| n.attached(&unique));
            let in_volumes_in_use = node.map(|n| n.in_use(&unique));
            // Kubelet reports only attachable volumes in volumesInUse; a
            // driver with attachRequired: false is never there, and is no risk.
            if in_volumes_in_use == Some(false) && attachable == Some(true) {
                flags.push(Flag::AtRisk);
            }
            let volume_attachment = match (&inputs.volume_attachments, &attachment_name) {
                (Some(_), Some(name)) => {
                    let node_matches =
                        found_va.map(|va| Some(va.node_name.as_str()) == node_name.as_deref());
                    if node_matches == Some(false) {
                        flags.push(Flag::VolumeAttachmentNodeMismatch);
                    }
                    if found_va.is_some_and(|va| !va.attached) && facts.holds_mounts {
                        flags.push(Flag::VolumeAttachmentDetached);
                    }
                    Some(VolumeAttachmentReport {
                        name: name.clone(),
                        exists: found_va.is_some(),
                        attached: found_va.map(|va| va.attached),
                        node_name: found_va.map(|va| va.node_name.clone()),
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
                attachable,
                attachable_source,
            })
        } else {
            None
        };

        let data_file = match volume.mode() {
            VolumeMode::Filesystem => volume.volume_dir.join(crate::voldata::VOL_DATA_FILE),
            VolumeMode::Block => volume
                .volume_dir
                .join(crate::layout::BLOCK_DATA_DIR)
                .join(crate::voldata::VOL_DATA_FILE),
        };
        let staged_at = fs.modified(&data_file).ok().flatten();

        let progress = (class == VolumeClass::OrphanedStaged).then(|| {
            let in_volumes_in_use = api.as_ref().and_then(|a| a.in_volumes_in_use);
            decide_progress(
                &unique,
                in_volumes_in_use,
                attachable,
                attachable_source,
                staged_at,
                extra.kubelet_started_at,
            )
        });
        if progress
            .as_ref()
            .is_some_and(|p| p.state == Progress::InProgress)
        {
            class = VolumeClass::UnstageInProgress;
        }

        let kubelet_plan = plan_by_name
            .get(unique.as_str())
            .copied()
            .unwrap_or(PlannedAction::WouldSkip);

        let owner = owner_report(
            volume,
            owner_pv[vi].as_ref(),
            facts,
            &pod_dirs,
            &pods_dir,
            &pv_by_name,
            &pv_by_identity,
            extra.pods.as_deref(),
            &pod_by_uid,
            node_name.as_deref(),
        );
        let mount = visible_mount(table, &volume.device_mount_path)
            .or_else(|| {
                volume
                    .staging_path
                    .as_deref()
                    .and_then(|p| visible_mount(table, p))
            })
            .map(mount_report);

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
            pod_dirs: pod_dirs.iter().map(|p| display(p)).collect(),
            class,
            flags,
            kubelet_plan,
            api,
            staged_at: staged_at.map(rfc3339),
            kubelet_would_list: would_list[vi].is_ok(),
            kubelet_would_list_detail: would_list[vi].clone().err(),
            mount,
            owner,
            progress,
            operator_plan: Vec::new(),
        };
        report.operator_plan = crate::advice::volume_plan(&report, node_name.as_deref());
        global_volumes.push(report);
    }

    let mut pod_local = Vec::new();
    for (pi, (pod, fallback)) in pods.fs_volumes.iter().zip(&fallbacks).enumerate() {
        let (Err(voldata_error), Some(fallback)) = (&pod.data, fallback) else {
            continue;
        };
        let paired = best_of_pod.get(&pi).map(|&(by, vi)| (vi, by));
        let recovered_from = fallback.recovered.as_ref().map(|(global, spec_name)| {
            let data_dir = clean_path(&global.global_data_dir);
            RecoveredReport {
                global_data_dir: display(&global.global_data_dir),
                reference: display(&global.reference),
                driver: global.data.driver_name().to_owned(),
                volume_handle: global.data.volume_handle().to_owned(),
                spec_vol_id: Some(global.data.spec_vol_id().to_owned()).filter(|s| !s.is_empty()),
                spec_name: spec_name.clone(),
                listed: fs_by_dir.contains_key(&data_dir),
            }
        });
        pod_local.push(PodLocalReport {
            pod_uid: pod.pod_uid.clone(),
            volume_name: pod.name.clone(),
            path: display(&pod.path),
            voldata_error: voldata_error.clone(),
            pod_mount_mounted: pod_mount_mounted[pi],
            recovered_from,
            decline_reason: fallback
                .declined
                .as_ref()
                .map(FallbackError::decline_reason),
            decline_detail: fallback.declined.as_ref().map(|e| error_chain(e)),
            paired_global_volume: paired
                .map(|(vi, _)| display(&listing.volumes[vi].device_mount_path)),
            paired_by: paired.map(|(_, by)| by),
        });
    }

    let skipped = listing
        .skipped
        .iter()
        .map(|s: &Skip| {
            skip_report(
                s,
                table,
                node,
                &pods,
                &pod_by_mount,
                &pods_dir,
                node_name.as_deref(),
            )
        })
        .collect();

    if !listing.volumes.is_empty() && !table.has_mounts_at_or_beneath(layout.root()) {
        warnings.push(format!(
            "no mount in the mount table lies under {}; if the kubelet root is a bind alias, pass the path the mount table uses",
            layout.root().display()
        ));
    }

    let mut report = Report {
        kubelet_root: display(layout.root()),
        kubelet_root_given: root_given
            .as_deref()
            .filter(|given| clean_path(given) != layout.root())
            .map(display),
        kubelet_started_at: extra.kubelet_started_at.map(rfc3339),
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

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename the arguments
fn owner_report(
    volume: &GlobalVolume,
    pv: Option<&(String, OwnerSource)>,
    facts: &MountFacts,
    pod_dirs: &[PathBuf],
    pods_dir: &Path,
    pv_by_name: &HashMap<&str, &PersistentVolumeView>,
    pv_by_identity: &HashMap<(&str, &str), &PersistentVolumeView>,
    pods: Option<&[PodView]>,
    pod_by_uid: &HashMap<&str, &PodView>,
    node_name: Option<&str>,
) -> OwnerReport {
    let pv_object = pv
        .and_then(|(name, _)| pv_by_name.get(name.as_str()))
        .or_else(|| {
            pv_by_identity.get(&(
                volume.spec.driver.as_str(),
                volume.spec.volume_handle.as_str(),
            ))
        })
        .copied();
    let claim = pv_object.and_then(|pv| pv.claim.clone());
    let mut pod_refs: Vec<PodRefReport> = Vec::new();
    let mut add = |uid: String, seen_in: &'static str| {
        if pod_refs.iter().any(|p| p.uid == uid) {
            return;
        }
        let known = pod_by_uid.get(uid.as_str());
        pod_refs.push(PodRefReport {
            namespace: known.map(|p| p.namespace.clone()),
            name: known.map(|p| p.name.clone()),
            uid,
            seen_in,
        });
    };
    for dir in pod_dirs {
        if let Some(uid) = pod_uid_of(pods_dir, dir) {
            add(uid, "pod_dir");
        }
    }
    for mount in facts.pod_refs.iter().chain(&facts.dev_mounts) {
        let uid = pod_uid_of(pods_dir, mount)
            .or_else(|| mount.file_name().map(|n| n.to_string_lossy().into_owned()));
        if let Some(uid) = uid {
            add(uid, "mount");
        }
    }
    if let (Some(claim), Some(pods)) = (&claim, pods) {
        for pod in pods {
            let on_this_node = node_name.is_none_or(|n| pod.node_name == n);
            let uses = pod
                .claims
                .iter()
                .any(|c| claim == &format!("{}/{c}", pod.namespace));
            if on_this_node && uses {
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

fn skip_report(
    skip: &Skip,
    table: &MountTable,
    node: Option<&NodeView>,
    pods: &PodScan,
    pod_by_mount: &HashMap<PathBuf, usize>,
    pods_dir: &Path,
    node_name: Option<&str>,
) -> SkipReport {
    let mounted = table.has_mounts_at_or_beneath(&skip.path);
    let mount = visible_mount(table, &skip.path.join(GLOBAL_MOUNT_DIR))
        .or_else(|| visible_mount(table, &skip.path))
        .or_else(|| table.mounts_beneath(&skip.path).first().copied());
    let mut pod_refs = Vec::new();
    let mut pod_dirs = Vec::new();
    if let Some(mount) = mount {
        if let Ok(refs) = table.search_mount_points(&mount.mount_point) {
            for r in refs.into_iter().filter(|r| r.starts_with(pods_dir)) {
                if let Some(&pi) = pod_by_mount.get(&clean_path(&r)) {
                    pod_dirs.push(pods.fs_volumes[pi].path.clone());
                }
                pod_refs.push(r);
            }
        }
    }
    if skip.reason == SkipReason::LegacyPvLayout {
        // pv/<pvName>: the pod directories of that PV are its users.
        let pv_name = skip
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        for pod in &pods.fs_volumes {
            if Some(&pod.name) == pv_name.as_ref() {
                pod_dirs.push(pod.path.clone());
            }
        }
    }
    dedup_in_order(&mut pod_refs);
    dedup_in_order(&mut pod_dirs);
    let attached_device_path_matches = match (mount, node) {
        (Some(mount), Some(node)) => node
            .volumes_attached
            .iter()
            .filter(|a| !a.device_path.is_empty() && a.device_path == mount.source)
            .map(|a| a.name.clone())
            .collect(),
        _ => Vec::new(),
    };
    let mut report = SkipReport {
        path: display(&skip.path),
        reason: skip.reason,
        detail: skip.detail.clone(),
        expected: skip.expected.as_deref().map(display),
        mounted,
        mount: mount.map(mount_report),
        attached_device_path_matches,
        pod_refs: pod_refs.iter().map(|p| display(p)).collect(),
        pod_dirs: pod_dirs.iter().map(|p| display(p)).collect(),
        operator_plan: Vec::new(),
    };
    report.operator_plan = crate::advice::skip_plan(&report, node_name);
    report
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
