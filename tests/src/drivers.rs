//! The real-driver fixtures of `tests/fixtures/real-drivers/`: for one object, the value a
//! writer stores at each probe of a real CSI driver, and the answer recorded for each write.
//! `tests/tests/real_drivers.rs` asks the library for each answer, `tests/tests/e2e_drivers.rs`
//! a real kube-apiserver v1.37.2 behind the shipped configuration; both compare it with the
//! record. The README next to the fixtures says what each file holds and where it comes from.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::{PodVolumeHealth, VolumeHealthStatus};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use volume_health_validation::repair::{self, Policy};
use volume_health_validation::{AdmissionReview, Settings};

/// The directory of the fixtures.
pub fn fixtures_dir() -> PathBuf {
    crate::repository().join("tests/fixtures/real-drivers")
}

/// Every fixture file, in name order.
pub fn fixture_files() -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|path| path.extension().is_some_and(|e| e == "json"));
    files.sort();
    Ok(files)
}

/// One fixture file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// The driver, and which of its plugins answers.
    pub driver: String,
    /// Where each value comes from: repository, file or pull request, and what is a shape.
    pub source: Vec<String>,
    /// Who writes.
    pub writer: Writer,
    /// The object written, as it is created: a Pod or a PersistentVolumeClaim.
    pub object: Value,
    /// The probes, in order.
    pub writes: Vec<Write>,
}

/// Who writes a fixture's object.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Writer {
    /// The kubelet of this node, from the driver's `NodeGetVolumeHealth`.
    Kubelet {
        /// The node: the pod's `spec.nodeName`.
        node: String,
    },
    /// The health monitor's service account, from the driver's controller RPCs.
    Monitor {
        /// `<namespace>/<name>` of the service account.
        service_account: String,
    },
}

impl Writer {
    /// The user the apiserver authenticates the writer as.
    pub fn user(&self) -> Value {
        match self {
            Writer::Kubelet { node } => json!({"username": format!("system:node:{node}"),
                "groups": ["system:nodes", "system:authenticated"]}),
            Writer::Monitor { service_account } => {
                let namespace = service_account.split('/').next().unwrap_or_default();
                let name = service_account.split('/').nth(1).unwrap_or_default();
                json!({"username": format!("system:serviceaccount:{namespace}:{name}"),
                    "groups": ["system:serviceaccounts",
                        format!("system:serviceaccounts:{namespace}"), "system:authenticated"]})
            }
        }
    }
}

/// One probe: what the driver answered and what the writer sent, with the recorded answer.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Write {
    /// What the driver answered, in words.
    pub probe: String,
    /// The RPC's error, when the driver could not answer: nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpc_error: Option<String>,
    /// The value of the health field written (`null` clears it), absent when nothing is.
    #[serde(
        default,
        skip_serializing_if = "Sent::is_nothing",
        deserialize_with = "Sent::deserialize",
        serialize_with = "Sent::serialize"
    )]
    pub report: Sent,
    /// Recorded: whether each writer's comparison finds the report a change from what is
    /// stored (`repair::unchanged`), so whether it sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<Changed>,
    /// Recorded: the answer to the write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// What a probe sends.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Sent {
    /// Nothing: the driver's RPC failed.
    #[default]
    Nothing,
    /// The field set to this value, or cleared (`None`).
    Field(Option<Report>),
}

impl Sent {
    fn is_nothing(&self) -> bool {
        *self == Sent::Nothing
    }

    fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Sent, D::Error> {
        Option::<Report>::deserialize(deserializer).map(Sent::Field)
    }

    fn serialize<S: Serializer>(sent: &Sent, serializer: S) -> Result<S::Ok, S::Error> {
        match sent {
            Sent::Nothing | Sent::Field(None) => serializer.serialize_none(),
            Sent::Field(Some(report)) => report.serialize(serializer),
        }
    }
}

/// A health field's value: a pod's `status.volumeHealth` or a claim's `status.healthStatus`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Report {
    /// A pod's entries.
    Pod(Vec<VolumeEntry>),
    /// A claim's status.
    Claim(HealthStatus),
}

/// A pod's `status.volumeHealth[]` entry.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeEntry {
    /// The volume's name in `spec.volumes`.
    pub name: String,
    /// When the conditions last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The driver's conditions.
    #[serde(default)]
    pub health_conditions: Vec<Condition>,
}

/// A claim's `status.healthStatus`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthStatus {
    /// The driver's conditions.
    #[serde(default)]
    pub health_conditions: Vec<Condition>,
    /// When the conditions last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// A volume health condition.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// `DataLoss`, `Degraded` or `Inaccessible` (or what the driver sent).
    pub status: String,
    /// The driver's reason.
    pub reason: String,
    /// The driver's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Whether each writer's comparison finds a report a change from what is stored.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Changed {
    /// The kubelet's ([`Policy::IgnoreMessages`]).
    pub kubelet: bool,
    /// external-health-monitor's ([`Policy::CompareMessages`]).
    pub monitor: bool,
}

/// The answer to a write.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// Stored as sent.
    Admitted,
    /// Nothing was sent: what is stored stays.
    NotWritten,
    /// Refused without repair (in-tree's 422); with repair (the default installs) stored
    /// repaired.
    Refused {
        /// The status code.
        code: i32,
        /// The Status message.
        message: String,
        /// What `/mutate`'s repair stores instead.
        repaired: Repaired,
    },
}

/// A write stored repaired.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repaired {
    /// The health field as stored.
    pub stored: Option<Report>,
    /// The `Warning`s of the answer.
    pub warnings: Vec<String>,
}

impl Fixture {
    /// Reads a fixture file.
    pub fn read(path: &Path) -> Result<Fixture> {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
    }

    /// Writes the fixture to `path`, its short members on one line.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = compact(&serde_json::to_string_pretty(self)?, 100);
        std::fs::write(path, text + "\n")?;
        Ok(())
    }

    /// `pods` or `persistentvolumeclaims`.
    pub fn resource(&self) -> Result<&'static str> {
        match self.object["kind"].as_str() {
            Some("Pod") => Ok("pods"),
            Some("PersistentVolumeClaim") => Ok("persistentvolumeclaims"),
            other => bail!("no fixture of kind {other:?}"),
        }
    }

    /// The health field: `volumeHealth` or `healthStatus`.
    pub fn field(&self) -> Result<&'static str> {
        Ok(match self.resource()? {
            "pods" => "volumeHealth",
            _ => "healthStatus",
        })
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// The object with `stored` as its health field.
    pub fn stored_object(&self, stored: Option<&Report>) -> Result<Value> {
        let mut object = self.object.clone();
        if let Some(report) = stored {
            object["status"] = json!({self.field()?: report});
        }
        Ok(object)
    }

    /// The merge patch of the `status` subresource a write sends.
    pub fn patch(&self, report: Option<&Report>) -> Result<Value> {
        Ok(json!({"status": {self.field()?: report}}))
    }
}

/// The value a write stores when it is admitted or refused and repaired, from what was stored.
pub fn stored_after(
    stored: Option<&Report>,
    write: &Write,
    answer: &Answer,
) -> Result<Option<Report>> {
    Ok(match (answer, &write.report) {
        (Answer::Admitted, Sent::Field(report)) => report.clone(),
        (Answer::Refused { repaired, .. }, Sent::Field(_)) => repaired.stored.clone(),
        (Answer::NotWritten, Sent::Nothing) => stored.cloned(),
        (answer, report) => bail!("the answer {answer:?} to the report {report:?}"),
    })
}

/// The library's answer to `write` where `stored` is stored: what `/validate` (and in-tree)
/// answers, and what `/mutate` with repair stores; and whether each writer sends it.
pub fn library_answer(
    fixture: &Fixture,
    stored: Option<&Report>,
    write: &Write,
) -> Result<(Option<Changed>, Answer)> {
    let Sent::Field(report) = &write.report else {
        return Ok((None, Answer::NotWritten));
    };
    let old = fixture.stored_object(stored)?;
    let mut new = old.clone();
    merge_patch(&mut new, &fixture.patch(report.as_ref())?);
    let resource = fixture.resource()?;
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "real-driver", "resource": {"group": "", "version": "v1", "resource": resource},
            "subResource": "status", "name": fixture.name(), "namespace": fixture.namespace(),
            "operation": "UPDATE", "userInfo": fixture.writer.user(),
            "object": new, "oldObject": old}})
    .to_string();
    let request = AdmissionReview::parse(&body)?.request;
    let settings = Settings::with_gate(true);
    let verdict = request.validate(&settings)?;
    let repaired = request.repair(&settings)?;
    let changed = changed(fixture, stored, report.as_ref())?;
    let Some(status) = verdict.status() else {
        if repaired.is_some() {
            bail!("an admitted write was repaired");
        }
        return Ok((Some(changed), Answer::Admitted));
    };
    let repaired = repaired.ok_or_else(|| anyhow!("a refused write is not repaired"))?;
    let patch = serde_json::to_value(repaired.patch())?;
    let (Some(path), Some(value)) = (patch[0]["path"].as_str(), patch[0].get("value")) else {
        bail!("not a replace: {patch}");
    };
    *new.pointer_mut(path)
        .ok_or_else(|| anyhow!("no {path} in the object"))? = value.clone();
    let stored = serde_json::from_value(new["status"][fixture.field()?].clone())?;
    Ok((
        Some(changed),
        Answer::Refused {
            code: status.code.unwrap_or_default(),
            message: status.message.unwrap_or_default(),
            repaired: Repaired {
                stored,
                warnings: repaired.warnings(),
            },
        },
    ))
}

/// Whether the kubelet's and the monitor's comparisons find `report` a change from `stored`.
fn changed(fixture: &Fixture, stored: Option<&Report>, report: Option<&Report>) -> Result<Changed> {
    let by = |policy| -> Result<bool> {
        Ok(if fixture.resource()? == "pods" {
            let typed = |r: Option<&Report>| -> Result<Option<Vec<PodVolumeHealth>>> {
                Ok(r.map(serde_json::to_value)
                    .transpose()?
                    .map(serde_json::from_value)
                    .transpose()?)
            };
            let (old, new) = (typed(stored)?, typed(report)?.unwrap_or_default());
            !repair::unchanged(old.as_deref(), &new[..], policy)
        } else {
            let typed = |r: Option<&Report>| -> Result<Option<VolumeHealthStatus>> {
                Ok(r.map(serde_json::to_value)
                    .transpose()?
                    .map(serde_json::from_value)
                    .transpose()?)
            };
            let (old, new) = (typed(stored)?, typed(report)?.unwrap_or_default());
            !repair::unchanged(old.as_ref(), &new, policy)
        })
    };
    Ok(Changed {
        kubelet: by(Policy::IgnoreMessages)?,
        monitor: by(Policy::CompareMessages)?,
    })
}

/// RFC 7386: `patch` merged into `target`, as the apiserver applies a merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(fields) = target {
        for (name, value) in members {
            if value.is_null() {
                fields.remove(name);
            } else {
                merge_patch(fields.entry(name.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// `pretty` (serde_json's pretty output) with every object and array whose members fit in
/// `width` columns on one line, and every object inside a write whose members are all
/// scalars: a condition reads as one line. Any such join is still the same JSON.
fn compact(pretty: &str, width: usize) -> String {
    let scalar = |member: &str| {
        let value = if member.starts_with('"') {
            member.split_once("\": ").map_or(member, |(_, value)| value)
        } else {
            member
        };
        !value.starts_with(['{', '['])
    };
    let mut lines: Vec<String> = pretty.lines().map(str::to_owned).collect();
    let mut open: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim();
        if trimmed.starts_with(['}', ']'])
            && let Some(start) = open.pop()
        {
            let mut line = lines[start].clone();
            for (n, part) in lines[start + 1..=i].iter().map(|l| l.trim()).enumerate() {
                // No space after the opening bracket or before the closing one.
                if n > 0 && !part.starts_with(['}', ']']) {
                    line.push(' ');
                }
                line.push_str(part);
            }
            let members = &lines[start + 1..i];
            // Deeper than the writes themselves, whose probe would make a long line.
            let indent = lines[start].len() - lines[start].trim_start().len();
            let object = lines[start].ends_with('{') && indent > 4;
            if line.len() <= width || object && members.iter().all(|l| scalar(l.trim())) {
                lines.splice(start..=i, [line]);
                i = start;
            }
        }
        if lines[i].ends_with(['{', '[']) {
            open.push(i);
        }
        i += 1;
    }
    lines.join("\n")
}
