//! The objects the dry-run writes are made on, and the writes.
//!
//! A status write needs a stored object, so `verify` stores two of its own, labelled, and
//! deletes them when it ends: a claim in the webhooks' namespace, which the installed entries'
//! namespace selectors leave out (only a probe entry sees its writes), pre-bound to a volume
//! that does not exist so that nothing ever binds it, and a CSINode of no node. Every write
//! is a server-side dry run: the apiserver runs admission and validation and stores nothing.

use http::Method;
use serde_json::{Value, json};

use volume_health_policies::MAX_REPAIRED_ENTRIES;

use crate::apiserver::{Answer, Apiserver, RequestError};

/// The label of everything `verify` stores; its value is the run's suffix.
pub(crate) const LABEL: &str = "volume-health.github.io/verify";
/// The field manager of `verify`'s writes.
const FIELD_MANAGER: &str = "volume-health-verify";
/// Where the probe claim goes when the webhooks' namespace does not exist.
const FALLBACK_NAMESPACE: &str = "default";
/// The reason every probe condition carries, so that an audit log shows where it came from.
const REASON: &str = "VolumeHealthVerify";

/// The probe objects of one run.
pub(crate) struct Probe {
    /// The run's suffix, the value of [`LABEL`].
    pub(crate) suffix: String,
    /// The claim's namespace.
    pub(crate) namespace: String,
    /// The name of both objects.
    pub(crate) name: String,
}

/// A write a probe makes, and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// The claim's `healthStatus` with two conditions of one (status, reason): in-tree refuses
    /// it, repair keeps the first.
    ClaimDuplicate,
    /// A valid `healthStatus` on the claim: only a writer list refuses it.
    ClaimValid,
    /// A CSINode driver entry with two conditions nothing tells apart: in-tree accepts it,
    /// this project's rule refuses it (repair keeps the first). Past it, more valid driver
    /// entries than the repair policies read, so that the identity policy sees the pair.
    CsiNodeIndistinct,
    /// The same pair alone, which repair keeps one of.
    CsiNodeRepair,
}

impl Probe {
    /// A probe for this run: `suffix` names it.
    pub(crate) fn new(namespace: &str, suffix: String) -> Self {
        Probe {
            name: format!("volume-health-verify-{suffix}"),
            suffix,
            namespace: namespace.to_owned(),
        }
    }

    fn labels(&self) -> Value {
        json!({ LABEL: self.suffix })
    }

    /// Stores the claim and the CSINode. Without the webhooks' namespace (nothing of them is
    /// installed), the claim goes to `default`.
    pub(crate) async fn create(&mut self, api: &Apiserver) -> Result<(), ProbeError> {
        let claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": self.name, "labels": self.labels()},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Mi"}},
                // No class and a volume that does not exist: the claim stays Pending.
                "storageClassName": "",
                "volumeName": format!("{}-none", self.name),
            }
        });
        let path = format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims",
            self.namespace
        );
        let answer = api.send(Method::POST, &path, Some(&claim), None).await?;
        if answer.code == 404 && self.namespace != FALLBACK_NAMESPACE {
            self.namespace = FALLBACK_NAMESPACE.to_owned();
            let path = format!(
                "/api/v1/namespaces/{}/persistentvolumeclaims",
                self.namespace
            );
            created(
                api.send(Method::POST, &path, Some(&claim), None).await?,
                &path,
            )?;
        } else {
            created(answer, &path)?;
        }
        let csinode = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": self.name, "labels": self.labels()},
            "spec": {"drivers": []}
        });
        let path = "/apis/storage.k8s.io/v1/csinodes";
        created(
            api.send(Method::POST, path, Some(&csinode), None).await?,
            path,
        )?;
        Ok(())
    }

    /// The dry-run write, and the apiserver's answer.
    pub(crate) async fn write(
        &self,
        api: &Apiserver,
        write: Write,
    ) -> Result<Answer, RequestError> {
        let path = match write {
            Write::ClaimDuplicate | Write::ClaimValid => format!(
                "/api/v1/namespaces/{}/persistentvolumeclaims/{}/status",
                self.namespace, self.name
            ),
            Write::CsiNodeIndistinct | Write::CsiNodeRepair => {
                format!("/apis/storage.k8s.io/v1/csinodes/{}/status", self.name)
            }
        };
        let path = format!("{path}?dryRun=All&fieldManager={FIELD_MANAGER}");
        api.send(
            Method::PATCH,
            &path,
            Some(&patch(write)),
            Some("application/merge-patch+json"),
        )
        .await
    }

    /// Deletes what this run stored (an error is only a leftover, removed by the next run).
    pub(crate) async fn delete(&self, api: &Apiserver) {
        let _ = api
            .send(
                Method::DELETE,
                &format!(
                    "/api/v1/namespaces/{}/persistentvolumeclaims/{}",
                    self.namespace, self.name
                ),
                None,
                None,
            )
            .await;
        let _ = api
            .send(
                Method::DELETE,
                &format!("/apis/storage.k8s.io/v1/csinodes/{}", self.name),
                None,
                None,
            )
            .await;
    }

    /// Deletes what earlier runs left (an interrupted run cannot delete its own).
    pub(crate) async fn delete_leftovers(api: &Apiserver, namespace: &str) {
        let selector = format!("?labelSelector={LABEL}");
        for collection in [
            format!("/api/v1/namespaces/{FALLBACK_NAMESPACE}/persistentvolumeclaims"),
            format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims"),
            "/apis/storage.k8s.io/v1/csinodes".to_owned(),
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations".to_owned(),
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations".to_owned(),
        ] {
            let _ = api
                .send(
                    Method::DELETE,
                    &format!("{collection}{selector}"),
                    None,
                    None,
                )
                .await;
        }
    }
}

/// The merge patch of a write.
fn patch(write: Write) -> Value {
    let condition = |status: &str, message: &str| json!({"status": status, "reason": REASON, "message": message});
    match write {
        Write::ClaimDuplicate => json!({"status": {"healthStatus": {"healthConditions": [
            condition("Degraded", "first"), condition("Degraded", "second")]}}}),
        Write::ClaimValid => json!({"status": {"healthStatus": {"healthConditions": [
            condition("Degraded", "probe")]}}}),
        Write::CsiNodeRepair => json!({"status": {"storageHealth": [pair()]}}),
        Write::CsiNodeIndistinct => {
            let padding = (0..MAX_REPAIRED_ENTRIES).map(|i| {
                json!({"name": format!("pad-{i}.verify.volume-health.github.io"),
                    "healthConditions": [condition("StorageDegraded", "padding")]})
            });
            json!({"status": {"storageHealth": std::iter::once(pair()).chain(padding).collect::<Vec<_>>()}})
        }
    }
}

/// A CSINode driver entry with two conditions nothing tells apart.
fn pair() -> Value {
    let condition =
        |message: &str| json!({"status": "StorageDegraded", "reason": REASON, "message": message});
    json!({"name": "verify.volume-health.github.io",
        "healthConditions": [condition("first"), condition("second")]})
}

/// Why a probe object could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The apiserver refused it.
    #[error("creating {path}: {code} {message}")]
    Refused {
        /// Where.
        path: String,
        /// The HTTP code.
        code: u16,
        /// The apiserver's message.
        message: String,
    },
}

fn created(answer: Answer, path: &str) -> Result<(), ProbeError> {
    if answer.succeeded() {
        return Ok(());
    }
    Err(ProbeError::Refused {
        path: path.to_owned(),
        code: answer.code,
        message: answer.message().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe writes hold what their names say, as the validation library reads them.
    #[test]
    fn the_probe_writes_are_what_the_rules_see() {
        let duplicate = patch(Write::ClaimDuplicate);
        let conditions = &duplicate["status"]["healthStatus"]["healthConditions"];
        assert_eq!(conditions[0]["status"], conditions[1]["status"]);
        assert_eq!(conditions[0]["reason"], conditions[1]["reason"]);
        assert_ne!(conditions[0]["message"], conditions[1]["message"]);

        let valid = patch(Write::ClaimValid);
        assert_eq!(
            valid["status"]["healthStatus"]["healthConditions"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );

        for write in [Write::CsiNodeIndistinct, Write::CsiNodeRepair] {
            let indistinct = patch(write);
            let entry = &indistinct["status"]["storageHealth"][0];
            assert_eq!(
                entry["healthConditions"][0]["reason"],
                entry["healthConditions"][1]["reason"]
            );
            assert!(entry["healthConditions"][0].get("accessMode").is_none());
        }
        // The identity probe is past what the repair policies read.
        let entries = patch(Write::CsiNodeIndistinct)["status"]["storageHealth"]
            .as_array()
            .map(Vec::len);
        assert_eq!(entries, Some(MAX_REPAIRED_ENTRIES + 1));
    }
}
