//! Phase two: every lookup the later phases make, built once. Each join of
//! the diagnosis goes through one of these maps (by path, by identity, by
//! name), so its cost grows with the number of volumes, pods and mounts,
//! not with their product.

use std::collections::HashMap;
use std::path::PathBuf;

use super::evidence::Evidence;
use super::{ExtraInputs, NodeInputs};
use crate::api::{NodeView, PersistentVolumeView, PodView, VolumeAttachmentView};
use crate::discover::VolumeMode;
use crate::fs::NodeFs;
use crate::layout::clean_path;
use crate::report::OwnerSource;

/// Lookups into the evidence and the API objects.
pub(super) struct Indexes<'a> {
    /// This node's name, given or taken from the Node object.
    pub(super) node_name: Option<String>,
    pub(super) node: Option<&'a NodeView>,
    pub(super) va_by_name: HashMap<&'a str, &'a VolumeAttachmentView>,
    pub(super) pv_by_identity: HashMap<(&'a str, &'a str), &'a PersistentVolumeView>,
    pub(super) pv_by_name: HashMap<&'a str, &'a PersistentVolumeView>,
    pub(super) pod_by_uid: HashMap<&'a str, &'a PodView>,
    /// Pods by each claim they use, as `namespace/claim`, in input order.
    pub(super) pods_by_claim: HashMap<String, Vec<&'a PodView>>,
    /// Per listed volume: its PV, from the strongest source that names it.
    pub(super) owner_pv: Vec<Option<(String, OwnerSource)>>,
    /// Pod filesystem volumes by their `mount` directory.
    pub(super) pod_by_mount: HashMap<PathBuf, usize>,
    /// Pod filesystem volumes by their directory name, in scan order.
    pub(super) pod_by_name: HashMap<&'a str, Vec<usize>>,
    /// Listed filesystem volumes by driver and handle (the first one listed).
    pub(super) fs_by_identity: HashMap<(&'a str, &'a str), usize>,
    /// Listed filesystem volumes by their directory.
    pub(super) fs_by_dir: HashMap<PathBuf, usize>,
    /// Listed filesystem volumes by spec name and by PV name.
    pub(super) fs_by_name: HashMap<String, Vec<usize>>,
    /// Pod block volume map entries by volume name.
    pub(super) block_maps_by_name: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Indexes<'a> {
    pub(super) fn build<F: NodeFs + ?Sized>(
        evidence: &'a Evidence,
        inputs: &'a NodeInputs<'_, F>,
        extra: &'a ExtraInputs,
    ) -> Self {
        let node_name = inputs
            .node_name
            .clone()
            .or_else(|| inputs.node.as_ref().map(|n| n.name.clone()));
        let va_by_name: HashMap<&str, &VolumeAttachmentView> = inputs
            .volume_attachments
            .iter()
            .flatten()
            .map(|va| (va.name.as_str(), va))
            .collect();
        let persistent_volumes = || extra.persistent_volumes.iter().flatten();
        let pv_by_identity: HashMap<(&str, &str), &PersistentVolumeView> = persistent_volumes()
            .map(|pv| ((pv.driver.as_str(), pv.volume_handle.as_str()), pv))
            .collect();
        let pv_by_name = persistent_volumes()
            .map(|pv| (pv.name.as_str(), pv))
            .collect();
        let pod_by_uid = extra
            .pods
            .iter()
            .flatten()
            .map(|p| (p.uid.as_str(), p))
            .collect();
        let mut pods_by_claim: HashMap<String, Vec<&PodView>> = HashMap::new();
        for pod in extra.pods.iter().flatten() {
            for claim in &pod.claims {
                pods_by_claim
                    .entry(format!("{}/{claim}", pod.namespace))
                    .or_default()
                    .push(pod);
            }
        }

        let volumes = &evidence.listing.volumes;
        // A global file written by a released kubelet has no specVolID, so
        // the API objects are the only way to name its PV.
        let owner_pv: Vec<Option<(String, OwnerSource)>> = volumes
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

        let pod_by_mount = evidence
            .pods
            .fs_volumes
            .iter()
            .enumerate()
            .map(|(i, p)| (clean_path(&p.mount_path), i))
            .collect();
        let mut pod_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, pod) in evidence.pods.fs_volumes.iter().enumerate() {
            pod_by_name.entry(pod.name.as_str()).or_default().push(i);
        }
        let mut fs_by_identity: HashMap<(&str, &str), usize> = HashMap::new();
        let mut fs_by_dir: HashMap<PathBuf, usize> = HashMap::new();
        let mut fs_by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (vi, v) in volumes.iter().enumerate() {
            if v.mode() != VolumeMode::Filesystem {
                continue;
            }
            fs_by_identity
                .entry((v.spec.driver.as_str(), v.spec.volume_handle.as_str()))
                .or_insert(vi);
            fs_by_dir.entry(clean_path(&v.volume_dir)).or_insert(vi);
            fs_by_name.entry(v.spec.name.clone()).or_default().push(vi);
            if let Some((pv, _)) = &owner_pv[vi]
                && pv != &v.spec.name
            {
                fs_by_name.entry(pv.clone()).or_default().push(vi);
            }
        }
        let mut block_maps_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, block) in evidence.pods.block_volumes.iter().enumerate() {
            block_maps_by_name
                .entry(block.name.as_str())
                .or_default()
                .push(i);
        }
        Self {
            node_name,
            node: inputs.node.as_ref(),
            va_by_name,
            pv_by_identity,
            pv_by_name,
            pod_by_uid,
            pods_by_claim,
            owner_pv,
            pod_by_mount,
            pod_by_name,
            fs_by_identity,
            fs_by_dir,
            fs_by_name,
            block_maps_by_name,
        }
    }
}
