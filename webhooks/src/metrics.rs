//! Prometheus metrics: requests by endpoint, resource, operation and decision; latency per
//! endpoint and decision; certificate reloads.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                latency,
                cert_reloads,
            }),
        }
    }

    /// Counts one answered request.
    pub fn observe(
        &self,
        endpoint: &'static str,
        resource: &'static str,
        operation: &'static str,
        decision: &'static str,
        elapsed: Duration,
    ) {
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                endpoint,
                resource,
                operation,
                decision,
            })
            .inc();
        self.inner
            .latency
            .get_or_create(&LatencyLabels { endpoint, decision })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a certificate reload attempt.
    pub fn cert_reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.inner
            .cert_reloads
            .get_or_create(&ResultLabels { result })
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
