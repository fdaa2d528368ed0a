//! Phase three: which pod directory belongs to which listed filesystem
//! volume, and by what evidence.

use std::collections::{HashMap, HashSet};

use super::evidence::Evidence;
use super::indexes::Indexes;
use crate::discover::VolumeMode;
use crate::layout::clean_path;
use crate::report::PairedBy;

/// The pairs of pod filesystem volumes and listed volumes.
pub(super) struct Pairing {
    /// Per listed volume: its pod filesystem volumes, in scan order.
    pub(super) pods_of_volume: Vec<Vec<usize>>,
    /// Per paired pod filesystem volume: its strongest pairing and volume.
    pub(super) best_of_pod: HashMap<usize, (PairedBy, usize)>,
}

impl Pairing {
    /// The strongest evidence wins. A readable pod file is matched by
    /// identity, never by name, so an inline volume cannot pair with a PV
    /// that happens to share its name.
    pub(super) fn build(evidence: &Evidence, indexes: &Indexes<'_>) -> Self {
        let pods = &evidence.pods.fs_volumes;
        let mut pairs: HashMap<(usize, usize), PairedBy> = HashMap::new();
        for (vi, f) in evidence.facts.iter().enumerate() {
            for r in &f.pod_refs {
                if let Some(&pi) = indexes.pod_by_mount.get(&clean_path(r)) {
                    pair(&mut pairs, pi, vi, PairedBy::MountReference);
                }
            }
        }
        for (pi, pod) in pods.iter().enumerate() {
            let recovered = evidence.fallbacks[pi]
                .as_ref()
                .and_then(|f| f.recovered.as_ref())
                .and_then(|(global, _)| {
                    indexes.fs_by_dir.get(&clean_path(&global.global_data_dir))
                });
            if let Some(&vi) = recovered {
                pair(&mut pairs, pi, vi, PairedBy::Fallback);
            }
            match &pod.data {
                Ok(data) => {
                    if let Some(&vi) = indexes
                        .fs_by_identity
                        .get(&(data.driver_name(), data.volume_handle()))
                    {
                        pair(&mut pairs, pi, vi, PairedBy::PodData);
                    }
                }
                Err(_) if !evidence.pod_mount_mounted[pi] => {
                    for &vi in indexes
                        .fs_by_name
                        .get(pod.name.as_str())
                        .into_iter()
                        .flatten()
                    {
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
        let paired_pods: HashSet<usize> = pairs.keys().map(|&(pi, _)| pi).collect();
        let mut unstaged_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for (vi, v) in evidence.listing.volumes.iter().enumerate() {
            if v.mode() != VolumeMode::Filesystem || evidence.facts[vi].holds_mounts {
                continue;
            }
            let mut names: Vec<&str> = vec![v.spec.name.as_str()];
            names.extend(indexes.owner_pv[vi].as_ref().map(|(pv, _)| pv.as_str()));
            names.extend(v.spec.volume_handle.split('#').filter(|s| !s.is_empty()));
            names.sort_unstable();
            names.dedup();
            for name in names {
                unstaged_by_name.entry(name).or_default().push(vi);
            }
        }
        for (pi, pod) in pods.iter().enumerate() {
            if pod.data_is_usable() || !evidence.pod_mount_mounted[pi] || paired_pods.contains(&pi)
            {
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

        let mut pods_of_volume: Vec<Vec<usize>> = vec![Vec::new(); evidence.listing.volumes.len()];
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
        Self {
            pods_of_volume,
            best_of_pod,
        }
    }
}

/// Records that pod `pod` pairs with volume `volume` by `by`, keeping the
/// strongest evidence for the pair.
fn pair(pairs: &mut HashMap<(usize, usize), PairedBy>, pod: usize, volume: usize, by: PairedBy) {
    pairs
        .entry((pod, volume))
        .and_modify(|best| *best = (*best).min(by))
        .or_insert(by);
}
