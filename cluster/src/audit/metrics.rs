//! The audit's counts as Prometheus text, for `--metrics-file`. A Job serves no scrape
//! endpoint and ends before any scrape: the file is for node-exporter's textfile collector
//! (an audit run from a host's timer) or a volume another exporter reads. In the cluster, the
//! reports' summaries and the Job's own status are the signals (docs/audit.md).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use volume_health_validation::HealthResource;

use super::Outcome;

/// One gauge per resource.
fn per_resource(out: &mut String, name: &str, help: &str, value: impl Fn(HealthResource) -> u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    for resource in HealthResource::ALL {
        let _ = writeln!(
            out,
            "{name}{{resource=\"{}\"}} {}",
            resource.resource(),
            value(resource)
        );
    }
}

/// One gauge.
fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name} {value}");
}

/// The last run's success and when it ended.
fn run(out: &mut String, success: bool, ended: i64) {
    gauge(
        out,
        "volume_health_audit_success",
        "Whether the last audit listed every object and wrote every report (1) or not (0).",
        u8::from(success),
    );
    gauge(
        out,
        "volume_health_audit_last_run_timestamp_seconds",
        "When the last audit ended, in seconds since the Unix epoch.",
        ended,
    );
}

impl Outcome {
    /// The counts as Prometheus text, the run ended at `ended` (seconds since the epoch).
    pub fn metrics(&self, ended: i64) -> String {
        let mut out = String::new();
        per_resource(
            &mut out,
            "volume_health_audit_objects",
            "Objects the last audit checked.",
            |r| self.count(r).checked,
        );
        per_resource(
            &mut out,
            "volume_health_audit_objects_with_findings",
            "Objects whose stored status the webhooks would refuse, found by the last audit.",
            |r| self.count(r).with_findings,
        );
        per_resource(
            &mut out,
            "volume_health_audit_findings",
            "Field errors found by the last audit, in reports or left out.",
            |r| self.count(r).findings,
        );
        gauge(
            &mut out,
            "volume_health_audit_results_left_out",
            "Findings the last audit left out of its reports, past their bounds.",
            self.left_out(),
        );
        gauge(
            &mut out,
            "volume_health_audit_reports",
            "Reports the last audit wrote (0 with --dry-run).",
            self.written,
        );
        run(&mut out, self.failures.is_empty(), ended);
        out
    }
}

/// The metrics of a run that could not tell (exit code 2): its failure and when.
pub fn failed_metrics(ended: i64) -> String {
    let mut out = String::new();
    run(&mut out, false, ended);
    out
}

/// Writes `text` to `path` whole or not at all: into a hidden file beside it, then renamed
/// over it, so that a collector never reads half a file (the textfile collector reads only
/// `*.prom`, so the hidden one is never read).
pub fn write_metrics(path: &Path, text: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut hidden = std::ffi::OsString::from(".");
    hidden.push(name);
    hidden.push(".tmp");
    let temporary = path.with_file_name(hidden);
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::findings::Count;

    fn outcome() -> Outcome {
        Outcome {
            counts: [
                Count {
                    checked: 5,
                    with_findings: 0,
                    findings: 0,
                },
                Count {
                    checked: 2,
                    with_findings: 1,
                    findings: 3,
                },
                Count {
                    checked: 1,
                    with_findings: 1,
                    findings: 1,
                },
            ],
            reports: Vec::new(),
            dry_run: false,
            max_results: 1000,
            written: 2,
            deleted: 0,
            failures: Vec::new(),
            notes: Vec::new(),
            started: 0,
        }
    }

    #[test]
    fn the_metrics_are_prometheus_text_with_one_sample_per_resource() {
        let text = outcome().metrics(1_700_000_000);
        for line in [
            "volume_health_audit_objects{resource=\"pods\"} 5",
            "volume_health_audit_objects_with_findings{resource=\"persistentvolumeclaims\"} 1",
            "volume_health_audit_findings{resource=\"persistentvolumeclaims\"} 3",
            "volume_health_audit_findings{resource=\"csinodes\"} 1",
            "volume_health_audit_reports 2",
            "volume_health_audit_results_left_out 0",
            "volume_health_audit_success 1",
            "volume_health_audit_last_run_timestamp_seconds 1700000000",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // Each family is declared once, before its samples.
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(types, 7);
        assert!(failed_metrics(3).contains("volume_health_audit_success 0\n"));
    }

    #[test]
    fn the_file_is_replaced_whole() {
        let dir = tempfile_dir();
        let path = dir.join("volume-health-audit.prom");
        write_metrics(&path, "a 1\n").unwrap();
        write_metrics(&path, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory under the system's temporary directory.
    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "volume-health-audit-metrics-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
