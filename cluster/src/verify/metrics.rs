//! The apiserver's own count of its calls to each webhook entry: what shows that it called an
//! entry whose answer changed nothing.

/// The apiserver's counter of webhook calls, one sample per entry, type, operation, code and
/// rejection (`k8s.io/apiserver` `pkg/admission/metrics`). A call that failed has code 0.
const REQUEST_TOTAL: &str = "apiserver_admission_webhook_request_total{";

/// The calls the apiserver counted to the entry `name`: `(answered, failed)`, where answered
/// calls got an HTTP answer from the webhook and failed ones got none.
pub(crate) fn calls(metrics: &str, name: &str) -> (f64, f64) {
    let mut answered = 0.0;
    let mut failed = 0.0;
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(REQUEST_TOTAL) else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        if label(labels, "name") != Some(name) {
            continue;
        }
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        match label(labels, "code") {
            Some("0") => failed += value,
            Some(_) => answered += value,
            None => {}
        }
    }
    (answered, failed)
}

/// The value of label `key` in `a="x",b="y"` (entry names and codes hold no quote).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::calls;

    /// Lines as kube-apiserver v1.37.2 writes them, for two entries.
    const METRICS: &str = r#"# HELP apiserver_admission_webhook_request_total [ALPHA] Admission webhook request total
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="probe-0.verify.volume-health.github.io",operation="UPDATE",rejected="false",type="admit"} 2
apiserver_admission_webhook_request_total{code="0",name="probe-0.verify.volume-health.github.io",operation="UPDATE",rejected="true",type="admit"} 1
apiserver_admission_webhook_request_total{code="403",name="probe-0.verify.volume-health.github.io",operation="UPDATE",rejected="true",type="validating"} 1
apiserver_admission_webhook_request_total{code="200",name="csinode.repair.volume-health.github.io",operation="UPDATE",rejected="false",type="admit"} 7
apiserver_admission_webhook_fail_open_count{name="probe-0.verify.volume-health.github.io",type="admit"} 5
"#;

    #[test]
    fn calls_are_counted_per_entry_answered_or_failed() {
        assert_eq!(
            calls(METRICS, "probe-0.verify.volume-health.github.io"),
            (3.0, 1.0)
        );
        assert_eq!(
            calls(METRICS, "csinode.repair.volume-health.github.io"),
            (7.0, 0.0)
        );
        assert_eq!(calls(METRICS, "other.example.com"), (0.0, 0.0));
        assert_eq!(
            calls("", "probe-0.verify.volume-health.github.io"),
            (0.0, 0.0)
        );
    }
}
