//! What the audit keeps of each object: its findings as report results, within bounds, and
//! counts of the rest. Objects arrive a page at a time and are never held: memory is the page
//! being read and at most [`MAX_HELD_RESULTS`] results.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use volume_health_check::{Decider, Finding};
use volume_health_validation::HealthResource;

use super::report::{ObjectReference, Report, ReportResult, SOURCE, Timestamp};

/// Most results of one object: its first errors, as `check` prints them; the rest are counted.
/// One object may hold thousands (a list of 10,000 conditions), and must not fill a report.
pub const MAX_RESULTS_PER_OBJECT: usize = 32;

/// Most bytes of one report's results, as JSON. etcd refuses a value past 1.5 MiB by default;
/// a report stays at half of that with its metadata, so it never costs etcd more than a large
/// object does.
pub const MAX_REPORT_BYTES: usize = 768 * 1024;

/// Most results held over all reports, about 30 MiB at their largest: a cluster with findings
/// in every namespace must not hold them all.
pub const MAX_HELD_RESULTS: usize = 20_000;

/// Longest name, namespace or UID written into a result. The apiserver keeps names within 253
/// bytes; an object written into etcd past it need not be.
const MAX_NAME_BYTES: usize = 256;

/// The counts of one resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Count {
    /// Objects checked.
    pub checked: u64,
    /// Objects whose status the webhooks would refuse, as stored.
    pub with_findings: u64,
    /// Their errors (one finding per field error), kept in a report or not.
    pub findings: u64,
}

/// The position of a resource in the counts: pods, claims, CSINodes, as `check` counts them.
pub(crate) fn index(resource: HealthResource) -> usize {
    match resource {
        HealthResource::Pods => 0,
        HealthResource::PersistentVolumeClaims => 1,
        HealthResource::CsiNodes => 2,
    }
}

/// The results of every object decided, bucketed into reports.
pub(crate) struct Collector {
    decider: Decider,
    max_results: usize,
    timestamp: Timestamp,
    counts: [Count; 3],
    namespaces: BTreeMap<String, Report>,
    cluster: Report,
    held: usize,
}

/// The members of an object a result names it by.
#[derive(Default, Deserialize)]
struct Named<'a> {
    #[serde(borrow, default)]
    metadata: Option<Meta<'a>>,
}

#[derive(Default, Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uid: Option<Cow<'a, str>>,
}

/// One error of an object: its field, its message and its type.
struct Error {
    rule: Option<String>,
    message: String,
    kind: &'static str,
}

impl Collector {
    /// Decides with `decider`; at most `max_results` results per report; results stamped
    /// `timestamp`.
    pub(crate) fn new(decider: Decider, max_results: usize, timestamp: Timestamp) -> Self {
        Collector {
            decider,
            max_results,
            timestamp,
            counts: [Count::default(); 3],
            namespaces: BTreeMap::new(),
            cluster: Report::default(),
            held: 0,
        }
    }

    /// Decides one stored object (a list item, which carries no kind) as a write of its status
    /// as it is stored, and keeps its findings within the bounds.
    pub(crate) fn object(&mut self, resource: HealthResource, raw: &RawValue) {
        let count = &mut self.counts[index(resource)];
        count.checked += 1;
        let (total, errors) = match self.decider.decide(resource, raw, None) {
            Ok(Finding { denial: None, .. }) => return,
            Ok(Finding {
                denial: Some(denial),
                ..
            }) if denial.errors.is_empty() => (
                1,
                vec![Error {
                    rule: None,
                    message: denial.message,
                    kind: if denial.code == 403 {
                        "Forbidden"
                    } else {
                        "BadRequest"
                    },
                }],
            ),
            Ok(Finding {
                denial: Some(denial),
                ..
            }) => (
                denial.errors.len(),
                denial
                    .errors
                    .iter()
                    .take(MAX_RESULTS_PER_OBJECT)
                    .map(|error| Error {
                        rule: Some(error.field.clone()),
                        message: error.to_string(),
                        kind: error.kind.cause_type(),
                    })
                    .collect(),
            ),
            Err(err) => (
                1,
                vec![Error {
                    rule: None,
                    message: format!(
                        "not a Kubernetes object: {}",
                        volume_health_validation::json::message_without_position(&err)
                    ),
                    kind: "BadRequest",
                }],
            ),
        };
        let total = total as u64;
        count.with_findings += 1;
        count.findings += total;

        let named: Named<'_> = serde_json::from_str(raw.get()).unwrap_or_default();
        let meta = named.metadata.unwrap_or_default();
        let bounded = |text: Option<Cow<'_, str>>| {
            text.filter(|t| !t.is_empty())
                .map(|t| error_line::cut(&t, MAX_NAME_BYTES).into_owned())
        };
        let namespace = bounded(meta.namespace);
        let object = ObjectReference {
            api_version: api_version(resource),
            kind: resource.kind(),
            namespace: namespace.clone(),
            name: bounded(meta.name).unwrap_or_default(),
            uid: bounded(meta.uid),
        };
        let report = match namespace {
            Some(namespace) => self
                .namespaces
                .entry(namespace.clone())
                .or_insert_with(|| Report::new(Some(namespace))),
            None => &mut self.cluster,
        };
        report.found += total;
        for error in errors {
            if report.results.len() >= self.max_results || self.held >= MAX_HELD_RESULTS {
                break;
            }
            let result = ReportResult {
                source: SOURCE,
                policy: policy(resource),
                rule: error.rule,
                category: "volume health",
                result: "fail",
                timestamp: self.timestamp,
                message: error_line::cut(&error.message, error_line::MAX_MESSAGE_BYTES)
                    .into_owned(),
                resources: [object.clone()],
                properties: [("type", error.kind)].into(),
            };
            let size = serde_json::to_vec(&result).map_or(usize::MAX, |json| json.len());
            if report.bytes.saturating_add(size) > MAX_REPORT_BYTES {
                break;
            }
            report.bytes += size;
            report.results.push(result);
            self.held += 1;
        }
    }

    /// The counts (pods, claims, CSINodes) and the reports with findings: the cluster's first,
    /// then one per namespace in name order.
    pub(crate) fn finish(self) -> ([Count; 3], Vec<Report>) {
        let cluster = (self.cluster.found > 0).then_some(self.cluster);
        let reports = cluster
            .into_iter()
            .chain(self.namespaces.into_values())
            .collect();
        (self.counts, reports)
    }
}

/// The `apiVersion` of a resource's objects.
fn api_version(resource: HealthResource) -> &'static str {
    match resource {
        HealthResource::CsiNodes => "storage.k8s.io/v1",
        HealthResource::Pods | HealthResource::PersistentVolumeClaims => "v1",
    }
}

/// The policy of a resource's results: the field its rules guard.
fn policy(resource: HealthResource) -> &'static str {
    match resource {
        HealthResource::Pods => "pods.status.volumeHealth",
        HealthResource::PersistentVolumeClaims => "persistentvolumeclaims.status.healthStatus",
        HealthResource::CsiNodes => "csinodes.status.storageHealth",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use volume_health_check::Options;

    use super::*;

    fn collector(max_results: usize) -> Collector {
        Collector::new(
            Decider::new(Options::default()),
            max_results,
            Timestamp {
                seconds: 7,
                nanos: 0,
            },
        )
    }

    fn raw(value: serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    /// A claim with `n` conditions of one (status, reason): `n - 1` duplicates.
    fn claim(namespace: &str, name: &str, n: usize) -> Box<RawValue> {
        let conditions: Vec<_> = (0..n)
            .map(|i| json!({"status": "Inaccessible", "reason": "VolumeDetached", "message": format!("m{i}")}))
            .collect();
        raw(
            json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {}, "status": {"healthStatus": {"healthConditions": conditions}}}),
        )
    }

    /// A CSINode with one driver's two conditions of one identity: this project's rule.
    fn node(name: &str) -> Box<RawValue> {
        raw(json!({"metadata": {"name": name, "uid": "n-1"},
            "spec": {"drivers": []},
            "status": {"storageHealth": [{"name": "csi.example.com", "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
                {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]}]}}))
    }

    #[test]
    fn valid_objects_are_counted_and_keep_nothing() {
        let mut c = collector(1000);
        c.object(
            HealthResource::Pods,
            &raw(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {}})),
        );
        c.object(
            HealthResource::PersistentVolumeClaims,
            &claim("shop", "data", 1),
        );
        let (counts, reports) = c.finish();
        assert_eq!(counts[0].checked, 1);
        assert_eq!(counts[1].checked, 1);
        assert_eq!(counts[1].with_findings, 0);
        assert!(reports.is_empty());
    }

    #[test]
    fn findings_go_to_their_namespace_and_csinodes_to_the_cluster() {
        let mut c = collector(1000);
        c.object(
            HealthResource::PersistentVolumeClaims,
            &claim("shop", "data", 2),
        );
        c.object(
            HealthResource::PersistentVolumeClaims,
            &claim("bank", "ledger", 3),
        );
        c.object(HealthResource::CsiNodes, &node("node-1"));
        let (counts, reports) = c.finish();
        assert_eq!(
            counts[1],
            Count {
                checked: 2,
                with_findings: 2,
                findings: 3
            }
        );
        assert_eq!(
            counts[2],
            Count {
                checked: 1,
                with_findings: 1,
                findings: 1
            }
        );
        let names: Vec<_> = reports.iter().map(|r| r.namespace.clone()).collect();
        assert_eq!(
            names,
            [None, Some("bank".to_owned()), Some("shop".to_owned())]
        );
        let csinode = &reports[0].results[0];
        assert_eq!(csinode.policy, "csinodes.status.storageHealth");
        assert_eq!(
            csinode.rule.as_deref(),
            Some("status.storageHealth[0].healthConditions[1]")
        );
        assert!(
            csinode.message.contains("Duplicate value"),
            "{}",
            csinode.message
        );
        assert_eq!(csinode.object().kind, "CSINode");
        assert_eq!(csinode.object().api_version, "storage.k8s.io/v1");
        assert_eq!(csinode.object().uid.as_deref(), Some("n-1"));
        assert_eq!(csinode.properties["type"], "FieldValueDuplicate");
        let claim = &reports[2].results[0];
        assert_eq!(claim.object().namespace.as_deref(), Some("shop"));
        assert_eq!(claim.object().name, "data");
        assert_eq!(claim.timestamp.seconds, 7);
    }

    #[test]
    fn a_report_keeps_at_most_max_results_and_counts_the_rest() {
        let mut c = collector(2);
        for name in ["a", "b", "c"] {
            c.object(
                HealthResource::PersistentVolumeClaims,
                &claim("shop", name, 2),
            );
        }
        let (_, reports) = c.finish();
        assert_eq!(reports[0].results.len(), 2);
        assert_eq!(reports[0].found, 3);
        assert_eq!(reports[0].left_out(), 1);
    }

    #[test]
    fn one_object_fills_no_report() {
        let mut c = collector(1000);
        // A report of 100 volumes the pod does not have: 100 errors.
        let entries: Vec<_> = (0..100).map(|i| json!({"name": format!("v{i}")})).collect();
        c.object(
            HealthResource::Pods,
            &raw(json!({"metadata": {"name": "many", "namespace": "shop"},
                "spec": {"volumes": []}, "status": {"volumeHealth": entries}})),
        );
        let (counts, reports) = c.finish();
        assert!(
            counts[0].findings > MAX_RESULTS_PER_OBJECT as u64,
            "{counts:?}"
        );
        assert_eq!(reports[0].results.len(), MAX_RESULTS_PER_OBJECT);
        assert_eq!(reports[0].found, counts[0].findings);
    }

    #[test]
    fn a_report_stays_within_its_bytes() {
        let mut c = collector(usize::MAX);
        let long = "x".repeat(4000);
        for i in 0..2000 {
            let object = raw(
                json!({"metadata": {"name": format!("{long}-{i}"), "namespace": "shop"},
                "spec": {}, "status": {"healthStatus": {"healthConditions": [
                    {"status": "Inaccessible", "reason": "VolumeDetached"},
                    {"status": "Inaccessible", "reason": "VolumeDetached"}]}}}),
            );
            c.object(HealthResource::PersistentVolumeClaims, &object);
        }
        let (_, reports) = c.finish();
        let report = &reports[0];
        let bytes = serde_json::to_vec(&report.object(1000)).unwrap().len();
        assert!(bytes <= MAX_REPORT_BYTES + 4096, "{bytes}");
        assert!(report.left_out() > 0);
        assert!(
            report
                .results
                .iter()
                .all(|r| r.object().name.len() <= MAX_NAME_BYTES)
        );
    }

    #[test]
    fn a_message_is_cut_and_an_unreadable_object_is_a_finding() {
        let mut c = collector(1000);
        let reason = "r".repeat(3000);
        c.object(
            HealthResource::PersistentVolumeClaims,
            &raw(
                json!({"metadata": {"name": "long", "namespace": "shop"}, "spec": {},
                "status": {"healthStatus": {"healthConditions": [
                    {"status": "Inaccessible", "reason": reason}]}}}),
            ),
        );
        c.object(HealthResource::Pods, &raw(json!(["not", "an", "object"])));
        let (counts, reports) = c.finish();
        assert_eq!(counts[0].with_findings, 1);
        for report in &reports {
            for result in &report.results {
                assert!(result.message.len() <= error_line::MAX_MESSAGE_BYTES);
            }
        }
        let unreadable = &reports[0].results[0];
        assert_eq!(unreadable.properties["type"], "BadRequest");
        assert!(unreadable.message.starts_with("not a Kubernetes object"));
    }
}
