//! Phase six: each entry kubelet's listing skips, with what is still
//! mounted there and who uses it.

use super::evidence::dedup_in_order;
use super::{Diagnosis, display, mount_report, visible_mount};
use crate::discover::{Skip, SkipReason};
use crate::fs::NodeFs;
use crate::layout::{GLOBAL_MOUNT_DIR, clean_path};
use crate::report::SkipReport;

impl<F: NodeFs + ?Sized> Diagnosis<'_, F> {
    pub(super) fn skip_reports(&self) -> Vec<SkipReport> {
        self.evidence
            .listing
            .skipped
            .iter()
            .map(|skip| self.skip_report(skip))
            .collect()
    }

    fn skip_report(&self, skip: &Skip) -> SkipReport {
        let table = self.table;
        let pods = &self.evidence.pods;
        let pods_dir = self.evidence.layout.pods_dir();
        let mounted = table.has_mounts_at_or_beneath(&skip.path);
        let mount = visible_mount(table, &skip.path.join(GLOBAL_MOUNT_DIR))
            .or_else(|| visible_mount(table, &skip.path))
            .or_else(|| table.mounts_beneath(&skip.path).first().copied());
        let mut pod_refs = Vec::new();
        let mut pod_dirs = Vec::new();
        if let Some(mount) = mount
            && let Ok(refs) = table.search_mount_points(&mount.mount_point)
        {
            for r in refs.into_iter().filter(|r| r.starts_with(&pods_dir)) {
                if let Some(&pi) = self.indexes.pod_by_mount.get(&clean_path(&r)) {
                    pod_dirs.push(pods.fs_volumes[pi].path.clone());
                }
                pod_refs.push(r);
            }
        }
        if skip.reason == SkipReason::LegacyPvLayout {
            // pv/<pvName>: the pod directories of that PV are its users.
            let pv_name = skip
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            let same_name = pv_name.and_then(|name| self.indexes.pod_by_name.get(name.as_str()));
            for &pi in same_name.into_iter().flatten() {
                pod_dirs.push(pods.fs_volumes[pi].path.clone());
            }
        }
        dedup_in_order(&mut pod_refs);
        dedup_in_order(&mut pod_dirs);
        let attached_device_path_matches = match (mount, self.indexes.node) {
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
        report.operator_plan = crate::advice::skip_plan(&report, self.indexes.node_name.as_deref());
        report
    }
}
