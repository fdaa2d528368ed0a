//! Prometheus metrics of the doctor's runs: volumes by class, flags,
//! findings, and whether the last run worked. Used by the continuous mode.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::report::{Flag, Report, VolumeClass};

/// Every class, so that each series exists (at 0) from the first run on and
/// alerts can compare against it.
const CLASSES: [VolumeClass; 6] = [
    VolumeClass::InUse,
    VolumeClass::TrackedByPodDir,
    VolumeClass::OrphanedStaged,
    VolumeClass::StagedUnmounted,
    VolumeClass::PodDataUnreadable,
    VolumeClass::UnstageInProgress,
];
const FLAGS: [Flag; 3] = [
    Flag::AtRisk,
    Flag::VolumeAttachmentDetached,
    Flag::VolumeAttachmentNodeMismatch,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlagLabels {
    flag: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The doctor's metrics, updated after every run.
#[derive(Debug)]
pub struct DoctorMetrics {
    registry: Registry,
    volumes: Family<ClassLabels, Gauge>,
    flags: Family<FlagLabels, Gauge>,
    skipped_mounted: Family<SkipLabels, Gauge>,
    findings: Gauge,
    pod_local_unreadable: Gauge,
    runs: Family<ResultLabels, Counter>,
    last_run_success: Gauge,
    last_run_timestamp: FloatGauge,
    last_run_duration: FloatGauge,
}

impl Default for DoctorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl DoctorMetrics {
    /// Registers every metric under the prefix `csi_globalmount_doctor`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("csi_globalmount_doctor");
        let volumes = Family::<ClassLabels, Gauge>::default();
        registry.register(
            "volumes",
            "Staged CSI volumes found by the last run, by class",
            volumes.clone(),
        );
        let flags = Family::<FlagLabels, Gauge>::default();
        registry.register(
            "volume_flags",
            "Volumes carrying each API cross-check flag in the last run",
            flags.clone(),
        );
        let skipped_mounted = Family::<SkipLabels, Gauge>::default();
        registry.register(
            "skipped_mounted",
            "Entries kubelet's listing skips while something is still mounted there, by reason",
            skipped_mounted.clone(),
        );
        let findings = Gauge::default();
        registry.register(
            "findings",
            "Items needing attention in the last run (the exit status is 1 when above 0)",
            findings.clone(),
        );
        let pod_local_unreadable = Gauge::default();
        registry.register(
            "pod_local_unreadable",
            "Pod CSI volume directories whose vol_data.json kubelet cannot use",
            pod_local_unreadable.clone(),
        );
        let runs = Family::<ResultLabels, Counter>::default();
        registry.register("runs", "Runs by result", runs.clone());
        let last_run_success = Gauge::default();
        registry.register(
            "last_run_success",
            "1 when the last run produced a report, 0 when it failed",
            last_run_success.clone(),
        );
        let last_run_timestamp = FloatGauge::default();
        registry.register(
            "last_run_timestamp_seconds",
            "When the last run ended, in seconds since the epoch",
            last_run_timestamp.clone(),
        );
        let last_run_duration = FloatGauge::default();
        registry.register(
            "last_run_duration_seconds",
            "How long the last run took",
            last_run_duration.clone(),
        );
        for result in ["clean", "findings", "error"] {
            runs.get_or_create(&ResultLabels { result }).inc_by(0);
        }
        Self {
            registry,
            volumes,
            flags,
            skipped_mounted,
            findings,
            pod_local_unreadable,
            runs,
            last_run_success,
            last_run_timestamp,
            last_run_duration,
        }
    }

    /// Records a run that produced `report`.
    pub fn record(&self, report: &Report, took: Duration) {
        for class in CLASSES {
            let count = report
                .global_volumes
                .iter()
                .filter(|v| v.class == class)
                .count();
            self.volumes
                .get_or_create(&ClassLabels {
                    class: class.as_str(),
                })
                .set(gauge_value(count));
        }
        for flag in FLAGS {
            let count = report
                .global_volumes
                .iter()
                .filter(|v| v.flags.contains(&flag))
                .count();
            self.flags
                .get_or_create(&FlagLabels {
                    flag: flag.as_str(),
                })
                .set(gauge_value(count));
        }
        // Reasons seen before and gone now must drop to 0, not linger.
        self.skipped_mounted.clear();
        for skip in report.skipped.iter().filter(|s| s.mounted) {
            self.skipped_mounted
                .get_or_create(&SkipLabels {
                    reason: skip.reason.as_str(),
                })
                .inc();
        }
        self.findings.set(gauge_value(report.summary.findings));
        self.pod_local_unreadable
            .set(gauge_value(report.summary.pod_local_unreadable));
        let result = if report.has_findings() {
            "findings"
        } else {
            "clean"
        };
        self.runs.get_or_create(&ResultLabels { result }).inc();
        self.last_run_success.set(1);
        self.finish(took);
    }

    /// Records a run that failed; the last report's gauges stay as they were.
    pub fn record_error(&self, took: Duration) {
        self.runs
            .get_or_create(&ResultLabels { result: "error" })
            .inc();
        self.last_run_success.set(0);
        self.finish(took);
    }

    fn finish(&self, took: Duration) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_run_timestamp.set(now.as_secs_f64());
        self.last_run_duration.set(took.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::report_of;

    #[test]
    fn every_class_is_exported_from_the_first_run_and_counts_follow_the_report() {
        let metrics = DoctorMetrics::new();
        let before = metrics.encode();
        assert!(
            before.contains("csi_globalmount_doctor_runs_total{result=\"error\"} 0"),
            "{before}"
        );

        metrics.record(
            &report_of(&[
                VolumeClass::InUse,
                VolumeClass::OrphanedStaged,
                VolumeClass::OrphanedStaged,
            ]),
            Duration::from_millis(5),
        );
        let text = metrics.encode();
        assert!(
            text.contains("csi_globalmount_doctor_volumes{class=\"orphaned_staged\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_volumes{class=\"in_use\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_volumes{class=\"unstage_in_progress\"} 0"),
            "{text}"
        );
        assert!(text.contains("csi_globalmount_doctor_findings 2"), "{text}");
        assert!(
            text.contains("csi_globalmount_doctor_runs_total{result=\"findings\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_last_run_success 1"),
            "{text}"
        );

        metrics.record(&report_of(&[VolumeClass::InUse]), Duration::from_millis(5));
        metrics.record_error(Duration::from_millis(1));
        let text = metrics.encode();
        assert!(
            text.contains("csi_globalmount_doctor_volumes{class=\"orphaned_staged\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_runs_total{result=\"clean\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_runs_total{result=\"error\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("csi_globalmount_doctor_last_run_success 0"),
            "{text}"
        );
    }
}
