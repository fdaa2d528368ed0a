//! Prometheus metrics: requests by endpoint, resource, operation and decision; latency per
//! endpoint and decision; certificate reloads; reviews that field validation refuses, by
//! resource and enforcement action.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
// The keys are a few addresses and lengths, not client input: no need for SipHash's protection
// against chosen collisions.
use rustc_hash::FxHashMap;

/// Latency buckets in seconds: fine below a millisecond, where answers land, and up to the
/// apiserver's own buckets (5 ms, 25 ms, 100 ms ...) above it.
const LATENCY_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    resource: &'static str,
    operation: &'static str,
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    endpoint: &'static str,
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ViolationLabels {
    resource: &'static str,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The server's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    cert_reloads: Family<ResultLabels, Counter>,
    violations: Family<ViolationLabels, Counter>,
    /// The series of each label combination seen so far, so that a request does not hash its
    /// label strings and take the lock of both families.
    series: RwLock<FxHashMap<SeriesKey, Series>>,
}

/// The labels of [`Metrics::observe`], each a `&'static str` by address and length: equal keys
/// are the same bytes. Equal text at two addresses gets two entries, which resolve to the same
/// series.
type SeriesKey = [(usize, usize); 4];

fn static_key(label: &'static str) -> (usize, usize) {
    (label.as_ptr() as usize, label.len())
}

/// Handles on the series of one label combination; they update the families' series.
struct Series {
    requests: Counter,
    latency: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `volume_health_webhook` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("volume_health_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Reviews answered, by endpoint, resource, operation and decision",
            requests.clone(),
        );
        let latency: Family<LatencyLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS));
        registry.register(
            "request_duration_seconds",
            "Time from a complete request body to its answer",
            latency.clone(),
        );
        let cert_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "tls_certificate_reloads",
            "Serving certificate reloads after the files changed, by result",
            cert_reloads.clone(),
        );
        let violations = Family::<ViolationLabels, Counter>::default();
        registry.register(
            "violations",
            "Reviews that field validation refuses, by resource and the enforcement action \
             applied (deny, warn or dryrun)",
            violations.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                latency,
                cert_reloads,
                violations,
                series: RwLock::default(),
            }),
        }
    }

    /// Counts one answered request. A label combination's series appear when it is first seen.
    pub fn observe(
        &self,
        endpoint: &'static str,
        resource: &'static str,
        operation: &'static str,
        decision: &'static str,
        elapsed: Duration,
    ) {
        let key = [
            static_key(endpoint),
            static_key(resource),
            static_key(operation),
            static_key(decision),
        ];
        let seconds = elapsed.as_secs_f64();
        {
            let series = self
                .inner
                .series
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(series) = series.get(&key) {
                series.requests.inc();
                series.latency.observe(seconds);
                return;
            }
        }
        let series = Series {
            requests: self.inner.requests.get_or_create_owned(&RequestLabels {
                endpoint,
                resource,
                operation,
                decision,
            }),
            latency: self
                .inner
                .latency
                .get_or_create_owned(&LatencyLabels { endpoint, decision }),
        };
        series.requests.inc();
        series.latency.observe(seconds);
        self.inner
            .series
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, series);
    }

    /// Counts a certificate reload attempt.
    pub fn cert_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.inner
            .cert_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Creates the violation series of `action` for each of `resources` at zero, so that a
    /// dashboard watching a `warn` or `dryrun` period shows 0, not "no data", until the first.
    pub fn expect_violations(&self, action: &'static str, resources: &[&'static str]) {
        for &resource in resources {
            // Creating the series is the point; the guard is released at once.
            let _ = self
                .inner
                .violations
                .get_or_create(&ViolationLabels { resource, action });
        }
    }

    /// Counts a review that field validation refuses, whatever `action` then does with it.
    /// Rare enough that the family's own lookup is fine.
    pub fn violation(&self, resource: &'static str, action: &'static str) {
        self.inner
            .violations
            .get_or_create(&ViolationLabels { resource, action })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_appear_when_first_seen_and_count_every_request() {
        let metrics = Metrics::new();
        assert!(!metrics.encode().contains("requests_total{"));
        // The same label text at another address counts into the same series.
        let copied: &'static str = String::from("validate").leak();
        for endpoint in ["validate", "validate", copied] {
            metrics.observe(
                endpoint,
                "pods",
                "UPDATE",
                "allowed",
                Duration::from_micros(80),
            );
        }
        metrics.observe(
            "authorize",
            "csinodes",
            "update",
            "allow",
            Duration::from_millis(2),
        );
        let text = metrics.encode();
        for line in [
            r#"volume_health_webhook_requests_total{endpoint="validate",resource="pods",operation="UPDATE",decision="allowed"} 3"#,
            r#"volume_health_webhook_request_duration_seconds_count{endpoint="validate",decision="allowed"} 3"#,
            r#"volume_health_webhook_request_duration_seconds_bucket{le="0.0001",endpoint="validate",decision="allowed"} 3"#,
            r#"volume_health_webhook_request_duration_seconds_bucket{le="0.00005",endpoint="validate",decision="allowed"} 0"#,
            r#"volume_health_webhook_requests_total{endpoint="authorize",resource="csinodes",operation="update",decision="allow"} 1"#,
            r#"volume_health_webhook_request_duration_seconds_bucket{le="0.0025",endpoint="authorize",decision="allow"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert_eq!(text.matches("requests_total{").count(), 2, "{text}");
    }

    #[test]
    fn violations_start_at_zero_for_the_expected_series_and_count() {
        let metrics = Metrics::new();
        assert!(!metrics.encode().contains("violations_total{"));
        metrics.expect_violations("warn", &["pods", "csinodes"]);
        metrics.violation("pods", "warn");
        metrics.violation("pods", "warn");
        let text = metrics.encode();
        for line in [
            "# TYPE volume_health_webhook_violations counter",
            r#"volume_health_webhook_violations_total{resource="pods",action="warn"} 2"#,
            r#"volume_health_webhook_violations_total{resource="csinodes",action="warn"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
        assert_eq!(text.matches("violations_total{").count(), 2, "{text}");
    }
}
