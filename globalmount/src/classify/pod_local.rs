//! Phase five: each pod volume directory whose `vol_data.json` kubelet
//! cannot use, with what the KEP-6058 fallback makes of it.

use super::{Diagnosis, display};
use crate::fs::NodeFs;
use crate::layout::clean_path;
use crate::podlocal::FallbackError;
use crate::report::{PodLocalReport, RecoveredReport};

impl<F: NodeFs + ?Sized> Diagnosis<'_, F> {
    pub(super) fn pod_local_reports(&self) -> Vec<PodLocalReport> {
        let evidence = self.evidence;
        let mut reports = Vec::new();
        for (pi, (pod, fallback)) in evidence
            .pods
            .fs_volumes
            .iter()
            .zip(&evidence.fallbacks)
            .enumerate()
        {
            let (Err(voldata_error), Some(fallback)) = (&pod.data, fallback) else {
                continue;
            };
            let paired = self.pairing.best_of_pod.get(&pi).map(|&(by, vi)| (vi, by));
            let recovered_from = fallback.recovered.as_ref().map(|(global, spec_name)| {
                let data_dir = clean_path(&global.global_data_dir);
                RecoveredReport {
                    global_data_dir: display(&global.global_data_dir),
                    reference: display(&global.reference),
                    driver: global.data.driver_name().to_owned(),
                    volume_handle: global.data.volume_handle().to_owned(),
                    spec_vol_id: Some(global.data.spec_vol_id().to_owned())
                        .filter(|s| !s.is_empty()),
                    spec_name: spec_name.clone(),
                    listed: self.indexes.fs_by_dir.contains_key(&data_dir),
                }
            });
            reports.push(PodLocalReport {
                pod_uid: pod.pod_uid.clone(),
                volume_name: pod.name.clone(),
                path: display(&pod.path),
                voldata_error: voldata_error.clone(),
                pod_mount_mounted: evidence.pod_mount_mounted[pi],
                recovered_from,
                decline_reason: fallback
                    .declined
                    .as_ref()
                    .map(FallbackError::decline_reason),
                decline_detail: fallback.declined.as_ref().map(|e| error_line::chain(e)),
                paired_global_volume: paired
                    .map(|(vi, _)| display(&evidence.listing.volumes[vi].device_mount_path)),
                paired_by: paired.map(|(_, by)| by),
            });
        }
        reports
    }
}
