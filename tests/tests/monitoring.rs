//! The optional monitoring component (`manifests/components/monitoring`): its alerts pass
//! `promtool check rules` and the unit tests in `tests/fixtures/monitoring/alerts.test.yaml`
//! (`promtool test rules`), every alert the runbook needs is there and tested both ways, and
//! every metric its rules and dashboard query is one a running server exports on /metrics.
//!
//! promtool comes with Debian's `prometheus` package; `make test` unpacks it under the target
//! directory when it is not on `PATH`, and passes its path in `PROMTOOL`.

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use clap::Parser;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use volume_health_webhooks::config::{Cli, Command as Subcommand};
use volume_health_webhooks::server::{Server, Shutdown};

/// The alerts an operator of fail-closed webhooks needs.
const ALERTS: &[&str] = &[
    // No ready replica: every gated write fails.
    "VolumeHealthWebhookDown",
    "VolumeHealthWebhookCertificateExpiringSoon",
    "VolumeHealthWebhookCertificateReloadFailing",
    // 5xx, 400 and the like.
    "VolumeHealthWebhookErrorAnswers",
    // p99 approaching the webhooks' 3 s timeout.
    "VolumeHealthWebhookSlow",
    // A writer whose reports the apiserver would refuse, stored repaired (--repair).
    "VolumeHealthWebhookRepairs",
];

/// Series that Prometheus itself makes for every target rather than reading from /metrics.
const FROM_PROMETHEUS: &[&str] = &["up"];

use volume_health_tests::repository;

fn component() -> PathBuf {
    repository().join("manifests/components/monitoring")
}

fn prometheus_rule() -> Value {
    let path = component().join("prometheusrule.yaml");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rules() -> Vec<Value> {
    let rule = prometheus_rule();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().expect("rules").clone())
        .collect()
}

fn dashboard() -> Value {
    let path = component().join("dashboard.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `make test` found no promtool and no way to fetch it (no apt-get): the rules'
/// tests then say so loudly and check nothing. CI never sets it (`REQUIRE_TOOLS=1`).
fn promtool_missing() -> bool {
    let missing = std::env::var_os("VOLUME_HEALTH_PROMTOOL_MISSING").is_some();
    if missing {
        eprintln!(
            "NOTICE: promtool is missing (VOLUME_HEALTH_PROMTOOL_MISSING): the alerting rules \
             were NOT checked. Install Prometheus' promtool, or set PROMTOOL."
        );
    }
    missing
}

fn promtool(args: &[&str], dir: &Path) -> String {
    // `make test` names the promtool it fetched; otherwise the one on PATH.
    let program = std::env::var_os("PROMTOOL").unwrap_or_else(|| "promtool".into());
    let output = match Command::new(&program).args(args).current_dir(dir).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "promtool is required to test the alerting rules but is not on PATH (nor in \
             PROMTOOL); run the tests with `make test`, which fetches it, or install Debian's \
             `prometheus` package"
        ),
        Err(e) => panic!("running promtool: {e}"),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    if promtool_missing() {
        return;
    }
    let scratch = tempfile::Builder::new()
        .prefix("promtool-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    // A PrometheusRule's spec is a Prometheus rules file.
    let spec = serde_yaml::to_string(&prometheus_rule()["spec"]).expect("serializes");
    fs::write(scratch.path().join("rules.yaml"), spec).expect("rules file");
    fs::copy(
        repository().join("tests/fixtures/monitoring/alerts.test.yaml"),
        scratch.path().join("alerts.test.yaml"),
    )
    .expect("unit tests");
    let checked = promtool(&["check", "rules", "rules.yaml"], scratch.path());
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", rules().len())),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "alerts.test.yaml"], scratch.path());
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_alert_is_there_and_tested_silent_and_firing() {
    let names: BTreeSet<String> = rules()
        .iter()
        .filter_map(|rule| rule["alert"].as_str().map(str::to_owned))
        .collect();
    let wanted: BTreeSet<String> = ALERTS.iter().map(|a| (*a).to_owned()).collect();
    assert_eq!(names, wanted);
    for rule in rules() {
        let name = rule["alert"].as_str().unwrap_or("?");
        for field in ["summary", "description"] {
            assert!(rule["annotations"][field].is_string(), "{name}: no {field}");
        }
        assert!(
            rule["labels"]["severity"].is_string(),
            "{name}: no severity"
        );
    }
    let path = repository().join("tests/fixtures/monitoring/alerts.test.yaml");
    let tests: Value =
        serde_yaml::from_str(&fs::read_to_string(&path).expect("unit tests")).expect("YAML");
    for alert in ALERTS {
        let cases: Vec<&Value> = tests["tests"]
            .as_array()
            .expect("tests")
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().expect("alert_rule_test"))
            .filter(|case| case["alertname"] == *alert)
            .collect();
        let firing = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()));
        let silent = cases
            .iter()
            .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty));
        assert!(
            firing && silent,
            "{alert}: needs a firing and a silent case"
        );
    }
}

/// Names of the series a PromQL expression selects: identifiers outside strings, label
/// matchers, ranges and grouping lists that are neither functions nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        // Aggregations, which may be followed by `by (...)` before their parenthesis.
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "count",
        "count_values",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut last_word = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += 1;
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c == '(' && ["by", "without", "on", "ignoring"].contains(&last_word.as_str()) {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            i += 1;
            last_word.clear();
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let is_call = chars.get(next) == Some(&'(');
            // A number's exponent or a duration's unit follows a digit.
            let after_digit = start > 0 && chars[start - 1].is_ascii_digit();
            if !is_call && !after_digit && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
                names.insert(word.clone());
            }
            last_word = word;
        } else {
            if !c.is_whitespace() {
                last_word.clear();
            }
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_read_from_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (namespace, le) (rate(a_bucket{x="y{z}"}[5m]))) > 2e3 and on(pod) b - time() < 7 * 24 * 3600 or absent(up{job="j"} == 1) offset 5m or min without (pod) (c)"#,
    );
    let want: BTreeSet<String> = ["a_bucket", "b", "up", "c"].map(str::to_owned).into();
    assert_eq!(names, want);
}

/// What a running server's /metrics declares: every sample name, and for each family with
/// no sample yet (request series appear with the first request) the names its type exports.
fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let (family, kind) = declaration.split_once(' ').expect("# TYPE name kind");
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_count", "_sum", "_created"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{family}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// Sends `body` to `path` on the webhook port over TLS and returns the status line.
async fn post(secure: SocketAddr, ca: &str, path: &str, body: &[u8]) -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.expect("PEM")).expect("a CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(secure)
        .await
        .expect("connects");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("a name"), tcp)
        .await
        .expect("handshake");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.expect("writes");
    tls.write_all(body).await.expect("writes");
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).await.expect("reads");
    String::from_utf8_lossy(&raw)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The /metrics of a server that has answered a review on each admission endpoint and one
/// request that is not a review, so that every family has its series.
async fn scrape_a_running_server() -> String {
    let cli = Cli::try_parse_from([
        "volume-health-webhook",
        "serve",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--health-port=0",
        // The repair counters exist only with it, created at 0 so that the first repair is
        // an increase.
        "--repair",
        // Repair is of what validation refuses, which it checks with the gate on.
        "--feature-gates=CSIVolumeHealth=true",
    ])
    .expect("flags parse");
    #[allow(unreachable_patterns)] // `serve` may not stay the only subcommand.
    let args = match cli.command {
        Subcommand::Serve(args) => args,
        _ => panic!("parsed as serve"),
    };
    let server = Server::bind(args.into_config()).await.expect("starts");
    let (secure, ca) = (
        server.secure_addr(),
        server.generated_ca().expect("a generated CA").to_owned(),
    );
    let review = fs::read(repository().join("examples/pod-status-review.json")).expect("example");
    // A CSINode report repaired (a message past 1024 bytes, cut), so that the series naming
    // its driver exists.
    let mut node: serde_json::Value = serde_json::from_slice(
        &fs::read(repository().join("examples/csinode-status-review.json")).expect("example"),
    )
    .expect("JSON");
    node["request"]["object"]["status"] = serde_json::json!({"storageHealth": [
        {"name": "csi.example.com", "healthConditions": [
            {"status": "StorageDegraded", "reason": "PoolFull", "message": "x".repeat(1025)}]}]});
    let node = serde_json::to_vec(&node).expect("serializes");
    let health = server.health_addr();
    let running = tokio::spawn(server.run(Shutdown::new()));
    for (path, body, status) in [
        ("/validate", &review[..], "200"),
        ("/mutate", &review[..], "200"),
        ("/mutate", &node[..], "200"),
        ("/validate", b"not a review", "400"),
    ] {
        let answer = post(secure, &ca, path, body).await;
        assert!(answer.contains(status), "{path}: {answer}");
    }
    let mut tcp = tokio::net::TcpStream::connect(health)
        .await
        .expect("connects");
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("writes");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.expect("reads");
    running.abort();
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

#[tokio::test]
async fn every_metric_queried_is_exported_by_a_running_server() {
    let exposition = scrape_a_running_server().await;
    let exported = exported_names(&exposition);
    // The metrics an operator alerts on are there before any request.
    for name in [
        "volume_health_webhook_tls_certificate_expiration_timestamp_seconds",
        "volume_health_webhook_tls_certificate_reloads_total",
        "volume_health_webhook_build_info",
        "volume_health_webhook_repairs_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            exposition
                .lines()
                .any(|l| l.starts_with(name) && !l.starts_with('#')),
            "{name} has no sample:\n{exposition}"
        );
    }
    let mut queries: Vec<(String, String)> = rules()
        .iter()
        .map(|rule| {
            (
                format!("rule {}", rule["alert"].as_str().unwrap_or("?")),
                rule["expr"].as_str().expect("expr").to_owned(),
            )
        })
        .collect();
    // An annotation may query too (the repairs alert lists the drivers): its metric names.
    for rule in rules() {
        let annotations = rule["annotations"].as_object().into_iter().flatten();
        for (key, text) in annotations {
            let text = text.as_str().unwrap_or_default();
            for name in text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with(volume_health_webhooks::metrics::PREFIX))
            {
                queries.push((
                    format!("rule {} {key}", rule["alert"].as_str().unwrap_or("?")),
                    name.to_owned(),
                ));
            }
        }
    }
    for panel in dashboard()["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push((
                format!("panel {}", panel["title"].as_str().unwrap_or("?")),
                target["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    assert!(queries.len() > ALERTS.len());
    for (origin, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{origin}: no metric in {expr}");
        for name in names {
            assert!(
                exported.contains(&name) || FROM_PROMETHEUS.contains(&name.as_str()),
                "{origin} queries {name}, which the server does not export:\n{exposition}"
            );
        }
    }
}
