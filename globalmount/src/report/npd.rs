//! The node-problem-detector rendering of a [`Report`]: one line.

use super::Report;
use crate::escape;

impl Report {
    /// One line for node-problem-detector's custom plugin monitor, whose
    /// exit-status convention (0 OK, 1 problem, 2 unknown) the doctor's
    /// follows. The most pressing part comes first, as the monitor keeps
    /// only the beginning of the line.
    pub fn to_npd_line(&self) -> String {
        let s = &self.summary;
        if !self.has_findings() {
            return format!("no findings on {} staged CSI volumes", s.global_volumes);
        }
        let mut parts: Vec<String> = [
            ("orphaned_staged", s.orphaned_staged),
            ("at_risk", s.at_risk),
            ("pod_data_unreadable", s.pod_data_unreadable),
            ("staged_unmounted", s.staged_unmounted),
            ("pod_local_unreadable", s.pod_local_unreadable),
            ("mounted_skipped", s.mounted_skipped),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name}={n}"))
        .collect();
        let first = self
            .global_volumes
            .iter()
            .find(|v| v.is_finding())
            .map(|v| {
                v.owner
                    .persistent_volume
                    .clone()
                    .unwrap_or_else(|| v.unique_volume_name.clone())
            })
            .or_else(|| self.pod_local.first().map(|p| p.path.clone()))
            .or_else(|| {
                self.skipped
                    .iter()
                    .find(|k| k.mounted)
                    .map(|k| k.path.clone())
            });
        if let Some(first) = first {
            // A name from the node: it must not split the line or forge a part.
            parts.push(format!("first: {}", escape::npd(&first)));
        }
        format!("{} findings: {}", s.findings, parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use crate::report::VolumeClass;
    use crate::report::tests::{report_of, volume};

    #[test]
    fn the_npd_line_leads_with_what_matters() {
        let mut report = report_of(&[VolumeClass::InUse]);
        assert_eq!(report.to_npd_line(), "no findings on 1 staged CSI volumes");
        report
            .global_volumes
            .push(volume(VolumeClass::OrphanedStaged));
        report.summarize();
        assert_eq!(
            report.to_npd_line(),
            "1 findings: orphaned_staged=1 first: pvc-1"
        );
        assert!(!report.to_npd_line().contains('\n'));
    }
}
