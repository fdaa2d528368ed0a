//! The findings as OpenReports objects (`openreports.io/v1alpha1`, the policy report API that
//! Policy Reporter and the policy engines read): one `Report` per namespace with findings and
//! one `ClusterReport` for CSINodes, never one per object, each bounded in results and bytes.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

/// The reports' API group and version.
pub const GROUP: &str = "openreports.io";
/// The version of [`GROUP`] written.
pub const VERSION: &str = "v1alpha1";
/// The name of every report the audit writes: one per namespace, and the cluster's.
pub const REPORT_NAME: &str = "volume-health-audit";
/// The label that marks the audit's reports, so that it finds and deletes them when their
/// findings are gone, and never touches another tool's.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "volume-health-audit");
/// `source` of the reports and results: how consumers tell this project's findings apart.
pub const SOURCE: &str = "volume-health";
/// The annotation that says how many findings a report leaves out.
pub const LEFT_OUT_ANNOTATION: &str = "volume-health.github.io/results-left-out";

/// A reference to the object a result is about, as `corev1.ObjectReference`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// `v1` or `storage.k8s.io/v1`.
    pub api_version: &'static str,
    /// `Pod`, `PersistentVolumeClaim` or `CSINode`.
    pub kind: &'static str,
    /// Its namespace, for namespaced kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its UID, so that a result is about this object and not a later one of the same name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// `metav1.Timestamp`: the time of the audit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    pub seconds: i64,
    /// Always 0: a second is precise enough, and the schema requires the member.
    pub nanos: i32,
}

/// One result: one field error of one object, as the webhooks would refuse it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReportResult {
    /// [`SOURCE`].
    pub source: &'static str,
    /// The field the rules guard, `<resource>.status.<field>`
    /// (`csinodes.status.storageHealth`).
    pub policy: &'static str,
    /// The path of the field in error (`status.storageHealth[0].healthConditions[1]`); none
    /// for an object that could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Always "volume health".
    pub category: &'static str,
    /// Always `fail`: the webhooks would refuse a write of this status.
    pub result: &'static str,
    /// When the audit found it.
    pub timestamp: Timestamp,
    /// The webhook's message, `<field>: <what is wrong>`, bounded.
    pub message: String,
    /// The object.
    pub resources: [ObjectReference; 1],
    /// `type`: the cause type the webhook's 422 carries (`FieldValueDuplicate`), or
    /// `BadRequest`.
    pub properties: BTreeMap<&'static str, &'static str>,
}

impl ReportResult {
    /// The object the result is about.
    pub fn object(&self) -> &ObjectReference {
        &self.resources[0]
    }
}

/// One report: a namespace's findings, or the cluster's (`namespace` none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The namespace of a `Report`; `None` for the `ClusterReport`.
    pub namespace: Option<String>,
    /// The results kept, in the order found.
    pub results: Vec<ReportResult>,
    /// Every finding, kept or left out.
    pub found: u64,
    /// Bytes of the results kept, as JSON.
    pub(crate) bytes: usize,
}

impl Report {
    /// An empty report of `namespace` (`None`: the cluster's).
    pub fn new(namespace: Option<String>) -> Self {
        Report {
            namespace,
            ..Report::default()
        }
    }

    /// `Report` or `ClusterReport`.
    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            "Report"
        } else {
            "ClusterReport"
        }
    }

    /// Findings not written into the report: past its bounds.
    pub fn left_out(&self) -> u64 {
        self.found - self.results.len() as u64
    }

    /// The object to apply. The summary counts every finding (`fail`), kept or not, so that
    /// `kubectl get reports` shows the real number; the annotation says how many the results
    /// leave out, and `configuration.limits.maxResults` the bound, as the API defines it.
    pub fn object(&self, max_results: usize) -> Value {
        let mut metadata = json!({
            "name": REPORT_NAME,
            "labels": {
                MANAGED_BY.0: MANAGED_BY.1,
                "app.kubernetes.io/part-of": "volume-health",
            },
            "annotations": {LEFT_OUT_ANNOTATION: self.left_out().to_string()},
        });
        if let Some(namespace) = &self.namespace {
            metadata["namespace"] = json!(namespace);
        }
        json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": self.kind(),
            "metadata": metadata,
            "source": SOURCE,
            "configuration": {"limits": {"maxResults": max_results, "statusFilter": ["fail"]}},
            "summary": {"pass": 0, "fail": self.found, "warn": 0, "error": 0, "skip": 0},
            "results": self.results,
        })
    }
}

/// The audit's reports found in the cluster that this run does not write: their findings are
/// gone (or their name is not the audit's), so they are deleted rather than left stale.
/// `existing` holds (namespace, name) of the reports labelled [`MANAGED_BY`], `None` for
/// ClusterReports; `written` the namespaces written this run.
pub(crate) fn stale(
    existing: &[(Option<String>, String)],
    written: &[Option<String>],
) -> Vec<(Option<String>, String)> {
    existing
        .iter()
        .filter(|(namespace, name)| name != REPORT_NAME || !written.contains(namespace))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str) -> ReportResult {
        ReportResult {
            source: SOURCE,
            policy: "persistentvolumeclaims.status.healthStatus",
            rule: Some("status.healthStatus.healthConditions[1]".to_owned()),
            category: "volume health",
            result: "fail",
            timestamp: Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            },
            message: "status.healthStatus.healthConditions[1]: Duplicate value: {}".to_owned(),
            resources: [ObjectReference {
                api_version: "v1",
                kind: "PersistentVolumeClaim",
                namespace: Some("shop".to_owned()),
                name: name.to_owned(),
                uid: Some("u-1".to_owned()),
            }],
            properties: [("type", "FieldValueDuplicate")].into(),
        }
    }

    #[test]
    fn a_namespace_report_is_an_openreports_report_with_its_summary() {
        let report = Report {
            namespace: Some("shop".to_owned()),
            results: vec![result("data")],
            found: 3,
            bytes: 0,
        };
        let object = report.object(1000);
        assert_eq!(object["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(object["kind"], "Report");
        assert_eq!(object["metadata"]["name"], "volume-health-audit");
        assert_eq!(object["metadata"]["namespace"], "shop");
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "volume-health-audit"
        );
        assert_eq!(object["metadata"]["annotations"][LEFT_OUT_ANNOTATION], "2");
        assert_eq!(object["source"], "volume-health");
        assert_eq!(object["summary"]["fail"], 3);
        assert_eq!(object["configuration"]["limits"]["maxResults"], 1000);
        assert_eq!(
            object["results"][0],
            json!({
                "source": "volume-health",
                "policy": "persistentvolumeclaims.status.healthStatus",
                "rule": "status.healthStatus.healthConditions[1]",
                "category": "volume health",
                "result": "fail",
                "timestamp": {"seconds": 1_700_000_000, "nanos": 0},
                "message": "status.healthStatus.healthConditions[1]: Duplicate value: {}",
                "resources": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": "shop", "name": "data", "uid": "u-1"}],
                "properties": {"type": "FieldValueDuplicate"},
            })
        );
    }

    #[test]
    fn the_cluster_report_has_no_namespace() {
        let report = Report::default();
        let object = report.object(10);
        assert_eq!(object["kind"], "ClusterReport");
        assert!(object["metadata"].get("namespace").is_none());
        assert_eq!(object["summary"]["fail"], 0);
        assert_eq!(object["results"], json!([]));
    }

    #[test]
    fn reports_of_namespaces_without_findings_are_stale() {
        let existing = vec![
            (Some("shop".to_owned()), REPORT_NAME.to_owned()),
            (Some("fixed".to_owned()), REPORT_NAME.to_owned()),
            (Some("shop".to_owned()), "renamed".to_owned()),
            (None, REPORT_NAME.to_owned()),
        ];
        assert_eq!(
            stale(&existing, &[Some("shop".to_owned())]),
            vec![
                (Some("fixed".to_owned()), REPORT_NAME.to_owned()),
                (Some("shop".to_owned()), "renamed".to_owned()),
                (None, REPORT_NAME.to_owned()),
            ]
        );
        assert_eq!(
            stale(
                &existing,
                &[Some("shop".to_owned()), Some("fixed".to_owned()), None]
            )
            .len(),
            1
        );
    }
}
