//! `audit`: what slipped past the rules.
//!
//! The webhook entries fail open, so during an outage the project's own rules are not applied,
//! and objects stored before the install were never checked. The audit lists every Pod,
//! PersistentVolumeClaim and CSINode the cluster holds, a page at a time, and decides each as
//! `check` does ([`volume_health_check::Decider`]): a write of its status as it is stored, with
//! no old object, so that a stored invalid value is a finding. What it finds is written where
//! operators of policy engines already look, as OpenReports reports
//! ([`report`]): one `Report` per namespace with findings and one `ClusterReport` for
//! CSINodes, bounded in results and bytes, and the audit's reports whose findings are gone are
//! deleted. Nothing else is written.

mod findings;
mod metrics;
mod pages;
pub mod report;
mod write;

use std::time::{SystemTime, UNIX_EPOCH};

use volume_health_check::{Decider, Printable};
use volume_health_validation::HealthResource;
use volume_health_validation::rules::ConditionIdentity;

pub use findings::{Count, MAX_HELD_RESULTS, MAX_REPORT_BYTES, MAX_RESULTS_PER_OBJECT};
pub use metrics::{failed_metrics, write_metrics};
pub use write::WriteError;

use crate::apiserver::{Apiserver, RequestError};
use findings::{Collector, index};
use report::{Report, Timestamp};
use write::Applied;

/// Objects per list page by default, as Gatekeeper's audit lists them: a page of pods is a few
/// megabytes, and memory is the page.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// Results per report by default.
pub const DEFAULT_MAX_RESULTS: usize = 1000;

/// The order the resources are listed in: the small lists first, so that a refusal (RBAC)
/// shows before the long one.
const LISTED: [HealthResource; 3] = [
    HealthResource::CsiNodes,
    HealthResource::PersistentVolumeClaims,
    HealthResource::Pods,
];

/// How to audit.
#[derive(Clone, Debug)]
pub struct Options {
    /// Write no report; only say what would be written.
    pub dry_run: bool,
    /// Objects per list page.
    pub page_size: u32,
    /// Most results in one report; the rest are counted in its summary.
    pub max_results: usize,
    /// This project's rule of one identity per storage condition, or in-tree's answers.
    pub storage_condition_identity: ConditionIdentity,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dry_run: false,
            page_size: DEFAULT_PAGE_SIZE,
            max_results: DEFAULT_MAX_RESULTS,
            storage_condition_identity: ConditionIdentity::Unique,
        }
    }
}

/// Why the audit could not tell: nothing, or not everything, was listed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The apiserver could not be asked what it serves.
    #[error("asking the apiserver for the reports API")]
    Discovery(#[source] RequestError),
    /// The OpenReports CRDs are not installed.
    #[error(
        "the apiserver does not serve {missing}: install the OpenReports CRDs (manifests/components/openreports-crds), or run with --dry-run"
    )]
    NoReportsApi {
        /// The resources missing.
        missing: String,
    },
    /// A list request got no answer.
    #[error("listing {resource}")]
    List {
        /// The resource.
        resource: &'static str,
        /// What failed.
        #[source]
        source: RequestError,
    },
    /// The apiserver refused a list (RBAC, most often).
    #[error("listing {resource}: {code}: {message}")]
    Refused {
        /// The resource.
        resource: &'static str,
        /// The HTTP code.
        code: u16,
        /// The apiserver's message, bounded.
        message: String,
    },
    /// A page was not a list.
    #[error("listing {resource}: the answer is not a list")]
    Page {
        /// The resource.
        resource: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A continue token expired and the apiserver offered none to go on with.
    #[error("listing {resource}: the continue token expired and the apiserver offered no other")]
    Expired {
        /// The resource.
        resource: &'static str,
    },
    /// The apiserver answered a continue token with the same token.
    #[error("listing {resource}: the apiserver answered a continue token with itself")]
    Stuck {
        /// The resource.
        resource: &'static str,
    },
}

/// What the audit found and wrote.
#[derive(Debug)]
pub struct Outcome {
    /// The counts of pods, claims and CSINodes ([`Outcome::count`]).
    counts: [Count; 3],
    /// The reports with findings, the cluster's first.
    pub reports: Vec<Report>,
    /// Whether reports were left unwritten on purpose.
    pub dry_run: bool,
    /// The bound of results per report.
    pub max_results: usize,
    /// Reports stored.
    pub written: usize,
    /// The audit's reports deleted, their findings gone.
    pub deleted: usize,
    /// Reports that could not be written or deleted: the reports do not show what was found.
    pub failures: Vec<WriteError>,
    /// What the operator should know that is not a finding (a list that was not one snapshot,
    /// a namespace deleted meanwhile).
    pub notes: Vec<String>,
    /// When the audit started, in seconds since the Unix epoch: every result's timestamp.
    pub started: i64,
}

/// What the run calls for, as the command's exit code says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Nothing found (0).
    Clean,
    /// Objects the webhooks would refuse are stored (1).
    Findings,
    /// A report could not be written or deleted (2).
    Incomplete,
}

impl Outcome {
    /// The counts of `resource`.
    pub fn count(&self, resource: HealthResource) -> Count {
        self.counts[index(resource)]
    }

    /// Findings in every resource.
    pub fn findings(&self) -> u64 {
        self.counts.iter().map(|c| c.findings).sum()
    }

    /// Findings left out of the reports by their bounds.
    pub fn left_out(&self) -> u64 {
        self.reports.iter().map(Report::left_out).sum()
    }

    /// The exit status: failures first, then findings.
    pub fn status(&self) -> Status {
        if !self.failures.is_empty() {
            Status::Incomplete
        } else if self.findings() > 0 {
            Status::Findings
        } else {
            Status::Clean
        }
    }

    /// The report on standard output: a line per result kept (names and messages escaped,
    /// as `check` prints them), a line per report with results left out, a line per resource,
    /// and one for the reports.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for report in &self.reports {
            for result in &report.results {
                let object = result.object();
                let name = match &object.namespace {
                    Some(namespace) => format!(
                        "{}/{}",
                        Printable(namespace, MAX_NAME),
                        Printable(&object.name, MAX_NAME)
                    ),
                    None => Printable(&object.name, MAX_NAME).to_string(),
                };
                out.push_str(&format!(
                    "{}/{name}: {}\n",
                    object.kind,
                    Printable(&result.message, MAX_MESSAGE)
                ));
            }
            if report.left_out() > 0 {
                let scope = match &report.namespace {
                    Some(namespace) => format!("Report {}", Printable(namespace, MAX_NAME)),
                    None => "ClusterReport".to_owned(),
                };
                out.push_str(&format!(
                    "{scope}: {} more findings left out of the report (its summary counts them)\n",
                    report.left_out()
                ));
            }
        }
        for resource in HealthResource::ALL {
            let count = self.count(resource);
            out.push_str(&format!(
                "{}: {} checked, {} with findings",
                resource.resource(),
                count.checked,
                count.with_findings
            ));
            if count.findings > 0 {
                let errors = if count.findings == 1 {
                    "error"
                } else {
                    "errors"
                };
                out.push_str(&format!(" ({} {errors})", count.findings));
            }
            out.push('\n');
        }
        let namespaced = self
            .reports
            .iter()
            .filter(|r| r.namespace.is_some())
            .count();
        let kinds = format!(
            "{namespaced} Report, {} ClusterReport",
            self.reports.len() - namespaced
        );
        if self.dry_run {
            out.push_str(&format!(
                "reports: none written (--dry-run); would write {kinds}"
            ));
        } else {
            out.push_str(&format!(
                "reports: {} written ({kinds}), {} deleted",
                self.written, self.deleted
            ));
            if !self.failures.is_empty() {
                out.push_str(&format!(", {} failed", self.failures.len()));
            }
        }
        if self.left_out() > 0 {
            out.push_str(&format!("; {} findings left out", self.left_out()));
        }
        out.push('\n');
        out
    }
}

/// Longest name printed whole, in characters, as `check` prints names.
const MAX_NAME: usize = 256;
/// Longest message printed whole, in characters.
const MAX_MESSAGE: usize = 2048;

/// Audits the cluster `client` talks to: lists every pod, claim and CSINode, decides each,
/// and (unless `dry_run`) writes the reports and deletes the audit's stale ones. An error means
/// the objects could not all be listed, so nothing was written or deleted: a partial list
/// must not delete a namespace's report as if its findings were gone.
pub async fn run(client: kube::Client, options: &Options) -> Result<Outcome, AuditError> {
    let apiserver = Apiserver::new(client.clone());
    if !options.dry_run
        && let Some(missing) = write::missing_kinds(&apiserver)
            .await
            .map_err(AuditError::Discovery)?
    {
        return Err(AuditError::NoReportsApi { missing });
    }
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let decider = Decider::new(volume_health_check::Options {
        storage_condition_identity: options.storage_condition_identity,
        ..volume_health_check::Options::default()
    });
    let mut collector = Collector::new(
        decider,
        options.max_results,
        Timestamp {
            seconds: started,
            nanos: 0,
        },
    );
    let mut notes = Vec::new();
    for resource in LISTED {
        pages::each_object(
            &apiserver,
            resource,
            options.page_size,
            &mut notes,
            |object| collector.object(resource, object),
        )
        .await?;
    }
    let (counts, reports) = collector.finish();
    let mut outcome = Outcome {
        counts,
        reports,
        dry_run: options.dry_run,
        max_results: options.max_results,
        written: 0,
        deleted: 0,
        failures: Vec::new(),
        notes,
        started,
    };
    if options.dry_run {
        return Ok(outcome);
    }
    // The namespaces whose report stays: written now, or failed (its last report is better
    // than none).
    let mut kept = Vec::new();
    for report in &outcome.reports {
        match write::apply(&client, report, options.max_results).await {
            Ok(Applied::Written) => {
                outcome.written += 1;
                kept.push(report.namespace.clone());
            }
            Ok(Applied::NamespaceGone) => outcome.notes.push(format!(
                "namespace {} was deleted during the audit: its report is not written",
                Printable(report.namespace.as_deref().unwrap_or_default(), MAX_NAME)
            )),
            Err(err) => {
                outcome.failures.push(err);
                kept.push(report.namespace.clone());
            }
        }
    }
    match write::existing(&client).await {
        Ok(existing) => {
            for (namespace, name) in report::stale(&existing, &kept) {
                match write::delete(&client, namespace.as_deref(), &name).await {
                    Ok(()) => outcome.deleted += 1,
                    Err(err) => outcome.failures.push(err),
                }
            }
        }
        Err(source) => outcome.failures.push(WriteError {
            action: "listing",
            kind: "reports",
            name: format!("labelled {}={}", report::MANAGED_BY.0, report::MANAGED_BY.1),
            source,
        }),
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::report::{ObjectReference, ReportResult, SOURCE};
    use super::*;

    fn outcome(name: &str, message: &str) -> Outcome {
        let result = ReportResult {
            source: SOURCE,
            policy: "pods.status.volumeHealth",
            rule: None,
            category: "volume health",
            result: "fail",
            timestamp: Timestamp::default(),
            message: message.to_owned(),
            resources: [ObjectReference {
                api_version: "v1",
                kind: "Pod",
                namespace: Some("shop".to_owned()),
                name: name.to_owned(),
                uid: None,
            }],
            properties: [("type", "FieldValueNotFound")].into(),
        };
        Outcome {
            counts: [
                Count {
                    checked: 3,
                    with_findings: 1,
                    findings: 2,
                },
                Count::default(),
                Count {
                    checked: 1,
                    ..Count::default()
                },
            ],
            reports: vec![Report {
                namespace: Some("shop".to_owned()),
                results: vec![result],
                found: 2,
                bytes: 0,
            }],
            dry_run: false,
            max_results: 1,
            written: 1,
            deleted: 2,
            failures: Vec::new(),
            notes: Vec::new(),
            started: 0,
        }
    }

    #[test]
    fn the_text_has_a_line_per_result_and_per_resource() {
        let text = outcome("web-0", "status.volumeHealth[0].name: Not found: \"logs\"").text();
        assert_eq!(
            text,
            "Pod/shop/web-0: status.volumeHealth[0].name: Not found: \"logs\"\n\
             Report shop: 1 more findings left out of the report (its summary counts them)\n\
             pods: 3 checked, 1 with findings (2 errors)\n\
             persistentvolumeclaims: 0 checked, 0 with findings\n\
             csinodes: 1 checked, 0 with findings\n\
             reports: 1 written (1 Report, 0 ClusterReport), 2 deleted; 1 findings left out\n"
        );
    }

    #[test]
    fn bytes_from_the_cluster_are_escaped() {
        let text = outcome("evil\u{1b}[2J\nPod/x/y: forged", "bidi\u{202e}txt").text();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "Pod/shop/evil\\u{1b}[2J\\u{a}Pod/x/y: forged: bidi\\u{202e}txt"
        );
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn the_status_is_failures_then_findings() {
        let mut outcome = outcome("web-0", "m");
        assert_eq!(outcome.status(), Status::Findings);
        outcome.counts = [Count::default(); 3];
        assert_eq!(outcome.status(), Status::Clean);
        outcome.dry_run = true;
        assert!(
            outcome
                .text()
                .contains("reports: none written (--dry-run); would write 1 Report")
        );
    }
}
