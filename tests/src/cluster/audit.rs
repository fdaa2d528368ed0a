//! The apiserver's audit log as the suites read it: the status writes of CSINodes, claims and
//! pods (the policy `Cluster::start` gives it), each with its writer, its object, its answer and
//! when it was answered. A mark is a byte offset, so that a suite at scale reads only what came
//! after it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::Cluster;

/// A point in the audit log: the writes after it are read.
#[derive(Clone, Copy, Debug)]
pub struct AuditMark(u64);

/// One status write, as the apiserver answered it.
#[derive(Clone, Debug)]
pub struct StatusWrite {
    /// Who wrote it: `system:node:<name>` for a kubelet.
    pub user: String,
    /// `pods`, `csinodes` or `persistentvolumeclaims`.
    pub resource: String,
    /// The object's namespace; empty for a CSINode.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The answer's status code.
    pub code: i64,
    /// The answer's message (a refusal's reason).
    pub message: String,
    /// Whether a repair webhook changed it (its `<webhook>/repairs` annotation).
    pub repaired: bool,
    /// Whether a webhook call for it failed open: the apiserver went on without the answer
    /// (its `failed-open.mutation.webhook.admission.k8s.io/...` annotation).
    pub failed_open: bool,
    /// When the answer was sent.
    pub at: Timestamp,
    /// How long the apiserver took, from the request received to the answer sent (the audit
    /// log's timestamps, to the microsecond).
    pub took: std::time::Duration,
}

impl StatusWrite {
    /// Stored: answered 200 (or 201).
    pub fn stored(&self) -> bool {
        matches!(self.code, 200 | 201)
    }

    /// Refused by one of this project's webhooks (or for want of one).
    pub fn by_webhook(&self) -> bool {
        self.message.contains("admission webhook")
    }

    /// Whether `node`'s kubelet wrote it.
    pub fn by_node(&self, node: &str) -> bool {
        self.user
            .strip_prefix("system:node:")
            .is_some_and(|name| name == node)
    }

    fn read(event: &Value) -> Option<StatusWrite> {
        if event["stage"] != "ResponseComplete" || event["objectRef"]["subresource"] != "status" {
            return None;
        }
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let at: Timestamp = event["stageTimestamp"].as_str()?.parse().ok()?;
        let received: Timestamp = event["requestReceivedTimestamp"].as_str()?.parse().ok()?;
        let annotations = || {
            event["annotations"]
                .as_object()
                .into_iter()
                .flat_map(|a| a.keys())
        };
        Some(StatusWrite {
            user: text(&event["user"]["username"]),
            resource: text(&event["objectRef"]["resource"]),
            namespace: text(&event["objectRef"]["namespace"]),
            name: text(&event["objectRef"]["name"]),
            code: event["responseStatus"]["code"].as_i64().unwrap_or(0),
            message: text(&event["responseStatus"]["message"]),
            repaired: annotations().any(|k| k.ends_with("/repairs")),
            failed_open: annotations().any(|k| k.starts_with("failed-open.")),
            at,
            took: std::time::Duration::try_from(at.duration_since(received)).unwrap_or_default(),
        })
    }
}

impl Cluster {
    /// The end of the audit log now: [`status_writes`](Self::status_writes) reads after it.
    pub fn audit_mark(&self) -> AuditMark {
        AuditMark(
            std::fs::metadata(self.audit_log())
                .map(|m| m.len())
                .unwrap_or(0),
        )
    }

    /// The status writes the audit log holds after `mark`, in the order answered, and a mark
    /// after the last whole line read.
    pub fn status_writes_after(&self, mark: AuditMark) -> Result<(Vec<StatusWrite>, AuditMark)> {
        writes_after(&self.audit_log(), mark)
    }

    /// The status writes after `mark`, in the order answered.
    pub fn status_writes(&self, mark: AuditMark) -> Result<Vec<StatusWrite>> {
        Ok(self.status_writes_after(mark)?.0)
    }
}

/// The status writes `log` holds after `mark`, and a mark after the last whole line read.
fn writes_after(log: &Path, mark: AuditMark) -> Result<(Vec<StatusWrite>, AuditMark)> {
    let mut file = match std::fs::File::open(log) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), mark)),
        Err(e) => return Err(e.into()),
    };
    // A file shorter than the mark was rotated or cut: what the mark pointed at is gone, and
    // reading on would wait for writes that were already made.
    let length = file.metadata()?.len();
    anyhow::ensure!(
        length >= mark.0,
        "the audit log is {length} bytes, shorter than the mark at {}: it was rotated or cut",
        mark.0
    );
    file.seek(SeekFrom::Start(mark.0))?;
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    // A line being written is read next time.
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let writes = text[..whole]
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter_map(|event| StatusWrite::read(&event))
        .collect();
    Ok((writes, AuditMark(mark.0 + whole as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An audit event of a kubelet's pod status write, as the apiserver logs it.
    fn event(name: &str) -> String {
        serde_json::json!({
            "stage": "ResponseComplete",
            "objectRef": {"resource": "pods", "namespace": "scale", "name": name, "subresource": "status"},
            "user": {"username": "system:node:node-0"},
            "responseStatus": {"code": 200},
            "requestReceivedTimestamp": "2026-12-05T22:35:29.394104Z",
            "stageTimestamp": "2026-12-05T22:35:29.662896Z",
        })
        .to_string()
    }

    #[test]
    fn reads_whole_lines_after_the_mark_and_refuses_a_rotated_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        std::fs::write(
            &log,
            format!("{}\n{}\n{}", event("a"), event("b"), &event("c")[..20]),
        )
        .unwrap();
        let (writes, mark) = writes_after(&log, AuditMark(0)).unwrap();
        let names: Vec<_> = writes.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            ["a", "b"],
            "the line being written is left for next time"
        );
        assert!(writes.iter().all(StatusWrite::stored));

        std::fs::write(
            &log,
            format!("{}\n{}\n{}\n", event("a"), event("b"), event("c")),
        )
        .unwrap();
        let (writes, _) = writes_after(&log, mark).unwrap();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].name, "c");

        // Rotated: a new, shorter file under the same name.
        std::fs::write(&log, format!("{}\n", event("d"))).unwrap();
        let error = writes_after(&log, mark).unwrap_err().to_string();
        assert!(error.contains("rotated or cut"), "{error}");
    }

    /// A refused write whose repair call failed open, and the repaired write that followed
    /// it, as kube-apiserver v1.37.2 logged them in a 100-node `make scale` run (abridged to
    /// the fields read and the webhook's annotations).
    #[test]
    fn reads_a_failed_open_call_and_a_repair() {
        let refused = serde_json::json!({
            "stage": "ResponseComplete",
            "objectRef": {"resource": "pods", "namespace": "scale", "name": "p27-0", "subresource": "status"},
            "user": {"username": "system:node:node-27"},
            "responseStatus": {"code": 422, "message": "Pod \"p27-0\" is invalid: status.volumeHealth[0].healthConditions[1]: Duplicate value"},
            "requestReceivedTimestamp": "2026-12-06T02:04:26.212831Z",
            "stageTimestamp": "2026-12-06T02:04:30.114140Z",
            "annotations": {
                "apiserver.latency.k8s.io/mutating-webhook": "3.475522921s",
                "failed-open.mutation.webhook.admission.k8s.io/round_0_index_0": "pod-status.repair.volume-health.github.io",
                "mutation.webhook.admission.k8s.io/round_0_index_0": "{\"configuration\":\"volume-health\",\"webhook\":\"pod-status.repair.volume-health.github.io\",\"mutated\":false}"
            }
        });
        let write = StatusWrite::read(&refused).unwrap();
        assert!(!write.stored());
        assert!(write.failed_open);
        assert!(!write.repaired);
        assert_eq!(write.took.as_micros(), 3_901_309);

        let repaired = serde_json::json!({
            "stage": "ResponseComplete",
            "objectRef": {"resource": "pods", "namespace": "scale", "name": "p27-0", "subresource": "status"},
            "user": {"username": "system:node:node-27"},
            "responseStatus": {"code": 200},
            "requestReceivedTimestamp": "2026-12-06T02:05:00.580264Z",
            "stageTimestamp": "2026-12-06T02:05:01.297877Z",
            "annotations": {
                "mutation.webhook.admission.k8s.io/round_0_index_0": "{\"configuration\":\"volume-health\",\"webhook\":\"pod-status.repair.volume-health.github.io\",\"mutated\":true}",
                "pod-status.repair.volume-health.github.io/repairs": "duplicate_condition=1"
            }
        });
        let write = StatusWrite::read(&repaired).unwrap();
        assert!(write.stored());
        assert!(write.repaired);
        assert!(!write.failed_open);
    }
}
