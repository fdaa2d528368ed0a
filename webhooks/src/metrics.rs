//! Prometheus metrics: requests by endpoint, resource, operation and decision; latency per
//! endpoint and decision; the serving certificate's expiry and reloads; the build; reviews
//! that field validation refuses, by resource and enforcement action; repairs, by kind and
//! by the driver to fix; and the standard `process_*` metrics.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets in seconds: fine below a millisecond, where answers land, and up to the
/// apiserver's own buckets (5 ms, 25 ms, 100 ms ...) above it, then 2 s and 3 s, so that a p99
/// approaching the webhooks' 3 s timeout can be told apart from one of a second.
const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.0, 3.0,
];

/// The prefix of the server's own metrics.
pub const PREFIX: &str = "volume_health_webhook";

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
struct RepairLabels {
    resource: &'static str,
    repair: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriverLabels {
    resource: &'static str,
    driver: String,
}

/// How many drivers get a series of their own; later ones share [`OTHER_DRIVERS`]. Any kubelet
/// names the drivers of its CSINode, so the number of series must not be its choice.
pub const NAMED_DRIVERS: usize = 64;

/// The `driver` label of the drivers past [`NAMED_DRIVERS`]: no driver name has parentheses.
pub const OTHER_DRIVERS: &str = "(other)";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
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
    cert_expiry: Gauge<f64, AtomicU64>,
    violations: Family<ViolationLabels, Counter>,
    repairs: Family<RepairLabels, Counter>,
    driver_repairs: Family<DriverLabels, Gauge<f64, AtomicU64>>,
    /// The drivers that have a series of their own.
    drivers: Mutex<BTreeSet<String>>,
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
    /// Registers the server's metrics under the [`PREFIX`], and the `process_*` metrics.
    pub fn new() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let registry = root.sub_registry_with_prefix(PREFIX);
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
        // Both results from the start, so that `increase(...[1h])` sees the first failure.
        for result in ["success", "failure"] {
            let _ = cert_reloads.get_or_create(&ResultLabels { result });
        }
        let cert_expiry = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "tls_certificate_expiration_timestamp_seconds",
            "When the serving certificate now in use expires (its leaf's notAfter), in seconds since the Unix epoch",
            cert_expiry.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the version label says which build is running",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let violations = Family::<ViolationLabels, Counter>::default();
        registry.register(
            "violations",
            "Reviews that field validation refuses, by resource and the enforcement action \
             applied (deny, warn or dryrun)",
            violations.clone(),
        );
        let repairs = Family::<RepairLabels, Counter>::default();
        registry.register(
            "repairs",
            "Changes /mutate made with --repair so that a write validation would refuse is \
             stored, by resource and kind of repair",
            repairs.clone(),
        );
        // A gauge of when, not a counter: a driver's series appears at its first repair, and
        // a counter's first sample is no increase, so an alert would miss a driver repaired once.
        let driver_repairs = Family::<DriverLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "driver_last_repair_timestamp_seconds",
            "When /mutate last repaired a report of a CSI driver the object names (a CSINode's \
             entry), by resource and driver, in seconds since the Unix epoch",
            driver_repairs.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry: root,
                requests,
                latency,
                cert_reloads,
                cert_expiry,
                violations,
                repairs,
                driver_repairs,
                drivers: Mutex::default(),
            }),
        }
    }

    /// Counts one answered request. A label combination's series appear when it is first seen.
    ///
    /// Straight to the families, each behind its own lock. A cache of series handles in front
    /// of them measured 26 ns a call against 140 ns (criterion, one thread; 55 ns against
    /// 186 ns with two threads): 0.1 µs, about 2% of the smallest request in process
    /// (`/authorize`, 4.9 µs) and too little to show end to end, so not worth a second map.
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

    /// Records when the certificate now served expires, in seconds since the Unix epoch.
    pub fn cert_expires_at(&self, unix_seconds: i64) {
        // Exact: certificate times are whole seconds far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        self.inner.cert_expiry.set(unix_seconds as f64);
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

    /// Creates the repair series of each of `resources` and `kinds` at zero, so that an alert on
    /// their increase sees the first repair.
    pub fn expect_repairs(&self, resources: &[&'static str], kinds: &[&'static str]) {
        for &resource in resources {
            for &repair in kinds {
                let _ = self
                    .inner
                    .repairs
                    .get_or_create(&RepairLabels { resource, repair });
            }
        }
    }

    /// Counts `count` repairs of one kind made on a review of `resource`.
    pub fn repaired(&self, resource: &'static str, repair: &'static str, count: u64) {
        self.inner
            .repairs
            .get_or_create(&RepairLabels { resource, repair })
            .inc_by(count);
    }

    /// Records that a report of `driver` was repaired on a review of `resource`, now. `driver`
    /// must be a CSI driver name (it is a label value as given); past [`NAMED_DRIVERS`]
    /// drivers, it counts as [`OTHER_DRIVERS`].
    pub fn driver_repaired(&self, resource: &'static str, driver: &str) {
        let driver = {
            let mut named = self
                .inner
                .drivers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if named.contains(driver) || named.len() < NAMED_DRIVERS {
                named.insert(driver.to_owned());
                driver.to_owned()
            } else {
                OTHER_DRIVERS.to_owned()
            }
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.inner
            .driver_repairs
            .get_or_create(&DriverLabels { resource, driver })
            .set(now);
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

/// The standard `process_*` metrics, as Prometheus client libraries export them, read from
/// `/proc/self` on each scrape. A value that cannot be read is left out of that scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(process) = procfs::process::Process::myself() else {
            return Ok(());
        };
        // Tick and page counts are far below 2^53: the conversions are exact.
        #[allow(clippy::cast_precision_loss)]
        if let Ok(stat) = process.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            let cpu = ConstCounter::new((stat.utime + stat.stime) as f64 / ticks);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
            let gauges = [
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    Some(stat.rss as f64 * procfs::page_size() as f64),
                ),
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    Some(stat.vsize as f64),
                ),
                (
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    procfs::boot_time_secs()
                        .ok()
                        .map(|boot| boot as f64 + stat.starttime as f64 / ticks),
                ),
                (
                    "process_threads",
                    "Number of OS threads in the process.",
                    Some(stat.num_threads as f64),
                ),
            ];
            for (name, help, value) in gauges {
                if let Some(value) = value {
                    encode_gauge(&mut encoder, name, help, value)?;
                }
            }
        }
        #[allow(clippy::cast_precision_loss)]
        if let Ok(open) = process.fd_count() {
            encode_gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open as f64,
            )?;
        }
        let max_fds = process
            .limits()
            .ok()
            .map(|limits| limits.max_open_files.soft_limit);
        #[allow(clippy::cast_precision_loss)]
        if let Some(procfs::process::LimitValue::Value(max)) = max_fds {
            encode_gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            )?;
        }
        Ok(())
    }
}

fn encode_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_appear_when_first_seen_and_count_every_request() {
        let metrics = Metrics::new();
        assert!(!metrics.encode().contains("requests_total{"));
        for endpoint in ["validate", "validate", "validate"] {
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

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map(|value| value.parse().expect("a number"))
    }

    #[test]
    fn operator_metrics_are_there_from_the_start() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        for (series, want) in [
            (
                r#"volume_health_webhook_tls_certificate_reloads_total{result="success"}"#,
                Some(0.0),
            ),
            (
                r#"volume_health_webhook_tls_certificate_reloads_total{result="failure"}"#,
                Some(0.0),
            ),
            (
                concat!(
                    r#"volume_health_webhook_build_info{version=""#,
                    env!("CARGO_PKG_VERSION"),
                    r#""}"#
                ),
                Some(1.0),
            ),
        ] {
            assert_eq!(sample(&text, series), want, "{series}\n{text}");
        }
        metrics.cert_reload(false);
        metrics.cert_expires_at(1_924_992_000);
        let text = metrics.encode();
        assert_eq!(
            sample(
                &text,
                r#"volume_health_webhook_tls_certificate_reloads_total{result="failure"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "volume_health_webhook_tls_certificate_expiration_timestamp_seconds"
            ),
            Some(1_924_992_000.0),
            "{text}"
        );
    }

    #[test]
    fn process_metrics_describe_this_process() {
        let text = Metrics::new().encode();
        let value = |name: &str| sample(&text, name).unwrap_or_else(|| panic!("{name}\n{text}"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        // A test binary has some memory, some threads and at least stdin, stdout and stderr.
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_threads") >= 1.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "started {started}, now {now}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        assert!(!text.contains("volume_health_webhook_process"), "{text}");
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

    /// Each driver has its series with the time of its last repair, up to the cap; the
    /// rest share one, whatever names a kubelet makes up.
    #[test]
    fn drivers_repaired_are_named_up_to_the_cap() {
        let metrics = Metrics::new();
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        for i in 0..NAMED_DRIVERS + 10 {
            metrics.driver_repaired("csinodes", &format!("d{i}.example.com"));
        }
        // A driver named before the cap keeps its own series.
        metrics.driver_repaired("csinodes", "d0.example.com");
        let text = metrics.encode();
        let series = |driver: &str| {
            format!(
                r#"volume_health_webhook_driver_last_repair_timestamp_seconds{{resource="csinodes",driver="{driver}"}}"#
            )
        };
        for driver in ["d0.example.com", "d63.example.com", OTHER_DRIVERS] {
            let when = sample(&text, &series(driver)).unwrap_or_else(|| panic!("{driver}\n{text}"));
            assert!(
                when >= before.floor() && when < before + 3600.0,
                "{driver}: {when}"
            );
        }
        assert_eq!(sample(&text, &series("d64.example.com")), None, "{text}");
        assert_eq!(
            text.matches("driver_last_repair_timestamp_seconds{")
                .count(),
            NAMED_DRIVERS + 1,
            "{text}"
        );
    }
}
