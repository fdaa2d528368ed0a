//! `verify`: does the apiserver reach each installed entry of this project?
//!
//! The installed entries fail open (a kubelet must never wait on them), so a broken install,
//! a wrong CA, a Service with no endpoints, a NetworkPolicy that drops the apiserver's
//! packets, shows only as rules silently not applied. `verify` makes the apiserver show it:
//!
//! 1. It reads what is installed: the webhook configurations named `volume-health` and the
//!    policy bindings labelled as this project's.
//! 2. For each place the webhook entries call (a Service or URL, and a path), it installs a
//!    probe entry with the same `clientConfig` (so the same CA, Service and network path) that
//!    fails closed and matches only its own labelled objects, and makes a server-side dry-run
//!    write only that entry can answer. A call that fails comes back with the apiserver's
//!    own reason (`x509: certificate signed by unknown authority`, `no endpoints available`).
//!    A call the webhook answered shows in its answer (a denial, a warning, a repair) or, when
//!    the answer changes nothing, in the apiserver's count of calls to the probe entry.
//! 3. For each policy binding, a dry-run write its policy refuses, and its answer.
//!
//! Nothing is stored but the probe objects, which it deletes.

mod inventory;
mod metrics;
mod probe;
mod report;

use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};
use volume_health_validation::HealthResource;

pub use probe::ProbeError;
pub use report::{EntryCheck, Outcome, Report, Seen, Status};

use crate::apiserver::{Answer, Apiserver, RequestError};
use inventory::{Binding, Installed, WebhookEntry};
use probe::{LABEL, Probe, Write};

/// The policies of this project a write can be shown to reach.
const IDENTITY_POLICY: &str = "volume-health-storage-condition-identity";
const WRITERS_POLICY: &str = "volume-health-pvc-health-writers";
/// The suffix of names kube-apiserver loads from static manifests.
const STATIC_SUFFIX: &str = ".static.k8s.io";

/// What `verify` looks at.
#[derive(Clone, Debug)]
pub struct Options {
    /// The name of the webhook configurations (both kinds).
    pub configuration_name: String,
    /// The namespace of the probe claim: the webhooks' own, which their entries leave out.
    pub namespace: String,
    /// How long a probe entry may take to be called (the apiserver loads a new configuration
    /// within about a second; each apiserver of a control plane loads it on its own).
    pub wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            configuration_name: "volume-health".to_owned(),
            namespace: "volume-health".to_owned(),
            wait: Duration::from_secs(20),
        }
    }
}

/// Why `verify` could not tell.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The apiserver did not answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A probe object could not be stored.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// A probe entry could not be installed.
    #[error("installing the probe entry {name}: {code} {message}")]
    ProbeEntry {
        /// Its configuration's name.
        name: String,
        /// The HTTP code.
        code: u16,
        /// The apiserver's message.
        message: String,
    },
}

/// Checks the installed entries through `client`'s apiserver.
pub async fn verify(client: kube::Client, options: &Options) -> Result<Report, VerifyError> {
    let api = Apiserver::new(client);
    let installed = Installed::read(&api, &options.configuration_name).await?;
    Probe::delete_leftovers(&api, &options.namespace).await;
    let mut probe = Probe::new(&options.namespace, suffix());
    let result = match probe.create(&api).await {
        Ok(()) => run(&api, &probe, &installed, options).await,
        Err(e) => Err(e.into()),
    };
    probe.delete(&api).await;
    let (entries, seen, mut hints) = result?;
    hints.extend(service_hints(&api, &installed, &entries).await);
    if entries.is_empty() {
        hints.push(format!(
            "no webhook configuration named {:?}, no policy binding labelled \
             app.kubernetes.io/name=volume-health-webhook, and no static policy answered",
            options.configuration_name
        ));
    }
    Ok(Report {
        mode: mode(&installed, &entries),
        seen,
        entries,
        hints,
    })
}

/// The kinds of entry installed, joined with `+` (`webhooks`, `native`, `static`), or `none`.
fn mode(installed: &Installed, entries: &[EntryCheck]) -> String {
    let kinds = [
        (!installed.webhooks.is_empty(), "webhooks"),
        (!installed.bindings.is_empty(), "native"),
        (entries.iter().any(|e| e.kind == STATIC_BINDING), "static"),
    ];
    let kinds: Vec<&str> = kinds
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, kind)| *kind)
        .collect();
    if kinds.is_empty() {
        "none".to_owned()
    } else {
        kinds.join("+")
    }
}

/// A suffix unique to this run (time and process), for names and the label's value.
fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or_default();
    // The process id in the high bits, where the clock's change most slowly.
    format!("{:08x}", nanos ^ std::process::id().rotate_left(16))
}

/// The checks: a probe entry per place the webhook entries call, then the bindings.
async fn run(
    api: &Apiserver,
    probe: &Probe,
    installed: &Installed,
    options: &Options,
) -> Result<(Vec<EntryCheck>, Seen, Vec<String>), VerifyError> {
    let mut seen = Seen::default();
    let mut hints = Vec::new();
    let mut targets: Vec<(bool, Value, Called)> = Vec::new();
    for (index, entry) in installed.webhooks.iter().enumerate() {
        let known = targets.iter().any(|(mutating, config, _)| {
            *mutating == entry.mutating() && *config == entry.client_config
        });
        if known {
            continue;
        }
        let called = call_through(api, probe, entry, index, options.wait).await?;
        called.record(entry.mutating(), &mut seen);
        targets.push((entry.mutating(), entry.client_config.clone(), called));
    }
    let mut entries = Vec::new();
    for entry in &installed.webhooks {
        let Some((_, _, called)) = targets.iter().find(|(mutating, config, _)| {
            *mutating == entry.mutating() && *config == entry.client_config
        }) else {
            continue;
        };
        entries.push(called.check(entry));
    }
    // The policies' writes, made whatever is installed: static policies are not objects of
    // the API, and only their answers show them.
    let identity = probe.write(api, Write::CsiNodeIndistinct).await?;
    let writers = probe.write(api, Write::ClaimValid).await?;
    entries.extend(static_bindings(&[&identity, &writers]));
    // A repair binding shows in what is stored of a write it repairs: a pair of one identity.
    let repairs = if installed
        .bindings
        .iter()
        .any(|b| repaired_resource(&b.policy).is_some())
    {
        Some((
            probe.write(api, Write::ClaimDuplicate).await?,
            probe.write(api, Write::CsiNodeRepair).await?,
        ))
    } else {
        None
    };
    for binding in &installed.bindings {
        let check = match (repaired_resource(&binding.policy), &repairs) {
            (Some(resource), Some((claim, csinode))) => {
                check_repair_binding(binding, resource, claim, csinode)
            }
            _ => check_binding(binding, &identity, &writers),
        };
        if check.outcome == Outcome::Failed {
            hints.push(format!(
                "binding {} could not be configured (its parameters are missing?): while it \
                 cannot, every write its policy matches is refused",
                binding.name
            ));
        }
        entries.push(check);
    }
    Ok((entries, seen, hints))
}

/// What a probe entry showed of a place the webhook entries call.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Called {
    /// Answered, visibly: the text says how.
    Answered(Shown),
    /// The apiserver counted an answer that changed nothing.
    Silent,
    /// The apiserver could not call it: its reason.
    Failed(String),
    /// Nothing showed within the wait: why.
    Unshown(String),
}

/// A visible answer of the webhook server.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shown {
    Denied(String),
    Warned(String),
    Repaired(String),
    Dropped(String),
}

impl Called {
    /// What the answer tells of the server's settings.
    fn record(&self, mutating: bool, seen: &mut Seen) {
        match (self, mutating) {
            (Called::Answered(Shown::Repaired(_)), _) => seen.repair = Some(true),
            (Called::Answered(Shown::Dropped(_)), _) => seen.gate = Some(false),
            (Called::Silent, true) => seen.repair = Some(false),
            (Called::Answered(Shown::Denied(_)), false) => seen.enforcement = Some("deny".into()),
            (Called::Answered(Shown::Warned(_)), false) => seen.enforcement = Some("warn".into()),
            _ => {}
        }
    }

    /// The line of an installed entry that calls this place.
    fn check(&self, entry: &WebhookEntry) -> EntryCheck {
        let target = entry.target();
        let (outcome, evidence) = match self {
            Called::Answered(shown) => {
                let how = match shown {
                    Shown::Denied(m) => format!("denied the probe write: {m}"),
                    Shown::Warned(w) => format!("warned: {w}"),
                    Shown::Repaired(w) => format!("repaired the probe write: {w}"),
                    Shown::Dropped(w) => format!("dropped the probe report: {w}"),
                };
                (
                    Outcome::Answered,
                    format!("the apiserver reached {target}, which {how}"),
                )
            }
            Called::Silent => (
                Outcome::Answered,
                format!(
                    "the apiserver reached {target}, which answered the probe write unchanged \
                     (the apiserver counted the call)"
                ),
            ),
            Called::Failed(reason) => (
                Outcome::Failed,
                format!("the apiserver could not call {target}: {reason}"),
            ),
            Called::Unshown(why) => (Outcome::Unshown, format!("{target}: {why}")),
        };
        EntryCheck {
            kind: entry.kind.to_owned(),
            name: entry.name.clone(),
            outcome,
            evidence,
        }
    }
}

/// Installs a probe entry calling where `entry` calls, makes its write until the answer or the
/// apiserver's count shows the call, and removes the entry.
async fn call_through(
    api: &Apiserver,
    probe: &Probe,
    entry: &WebhookEntry,
    index: usize,
    wait: Duration,
) -> Result<Called, VerifyError> {
    let (collection, kind) = if entry.mutating() {
        (
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
        )
    } else {
        (
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
        )
    };
    let configuration = format!("{}-{index}", probe.name);
    // Unique to the run: the apiserver's counts of an entry name outlive the entry.
    let name = format!(
        "probe-{index}-{}.verify.volume-health.github.io",
        probe.suffix
    );
    let mut webhook = json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        // Fails closed: a call that fails comes back with the apiserver's reason.
        "failurePolicy": "Fail",
        "timeoutSeconds": entry.timeout_seconds.clamp(1, 30),
        "matchPolicy": "Equivalent",
        "clientConfig": entry.client_config,
        // Only this run's probe objects: no other write ever meets the probe entry.
        "objectSelector": {"matchLabels": {LABEL: probe.suffix}},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims/status"],
             "operations": ["UPDATE"], "scope": "Namespaced"},
            {"apiGroups": ["storage.k8s.io"], "apiVersions": ["v1"], "resources": ["csinodes/status"],
             "operations": ["UPDATE"], "scope": "Cluster"},
        ],
    });
    if entry.mutating() {
        webhook["reinvocationPolicy"] = json!("Never");
    }
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": configuration, "labels": {LABEL: probe.suffix}},
        "webhooks": [webhook],
    });
    let path = format!("/apis/admissionregistration.k8s.io/v1/{collection}");
    let answer = api.send(Method::POST, &path, Some(&body), None).await?;
    if !answer.succeeded() {
        return Err(VerifyError::ProbeEntry {
            name: configuration,
            code: answer.code,
            message: answer.message().to_owned(),
        });
    }
    // The claim in the webhooks' namespace is left out by every installed entry, so what the
    // mutating probe entry answers is its own; the CSINode is the one object a validating
    // entry of this project refuses a write of, beyond in-tree.
    let write = if entry.mutating() {
        Write::ClaimDuplicate
    } else {
        Write::CsiNodeIndistinct
    };
    let called = watch_calls(api, probe, &name, write, wait).await;
    let _ = api
        .send(
            Method::DELETE,
            &format!("{path}/{configuration}"),
            None,
            None,
        )
        .await;
    called
}

/// Makes `write` until the probe entry `name` shows in the answer or in the apiserver's count.
async fn watch_calls(
    api: &Apiserver,
    probe: &Probe,
    name: &str,
    write: Write,
    wait: Duration,
) -> Result<Called, VerifyError> {
    let deadline = Instant::now() + wait;
    // The count before the first write; each later read is compared with it, so `/metrics`
    // (megabytes on a busy apiserver) is read once a write, not twice.
    let before = counted(api, name).await;
    let mut metrics_error = before.as_ref().err().cloned();
    loop {
        let answer = probe.write(api, write).await?;
        if let Some(called) = shown(&answer, name, write) {
            return Ok(called);
        }
        if let Ok((answered_before, _)) = before {
            match counted(api, name).await {
                Ok((answered, _)) if answered > answered_before => return Ok(Called::Silent),
                Ok(_) => {}
                Err(e) => metrics_error = Some(e),
            }
        }
        if Instant::now() >= deadline {
            let why = match metrics_error {
                Some(e) => format!(
                    "the probe write showed no answer, and the apiserver's call count could not be \
                     read ({e}): grant get on the non-resource URL /metrics to see a call that changes nothing"
                ),
                None => format!(
                    "the apiserver did not call the probe entry within {}s (on a control plane of \
                     several apiservers, the count read may be another one's)",
                    wait.as_secs()
                ),
            };
            return Ok(Called::Unshown(why));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The apiserver's count of calls to entry `name`: `(answered, failed)`.
async fn counted(api: &Apiserver, name: &str) -> Result<(f64, f64), String> {
    match api.get_text("/metrics").await {
        Ok((200, text)) => Ok(metrics::calls(&text, name)),
        Ok((code, _)) => Err(format!("HTTP {code}")),
        Err(e) => Err(e.to_string()),
    }
}

/// What an answer shows of the probe entry `name`, if anything.
fn shown(answer: &Answer, name: &str, write: Write) -> Option<Called> {
    let message = answer.message();
    let failed = format!("failed calling webhook \"{name}\": ");
    if let Some(at) = message.find(&failed) {
        return Some(Called::Failed(message[at + failed.len()..].to_owned()));
    }
    if message.contains(&format!("admission webhook \"{name}\" denied the request")) {
        return Some(Called::Answered(Shown::Denied(message.to_owned())));
    }
    let warning = |prefix: &str| {
        answer
            .warnings
            .iter()
            .find(|w| w.starts_with(prefix))
            .cloned()
    };
    match write {
        Write::ClaimDuplicate | Write::ClaimValid => {
            if let Some(w) = warning("status.healthStatus repaired") {
                return Some(Called::Answered(Shown::Repaired(w)));
            }
            if let Some(w) = warning("status.healthStatus was dropped") {
                return Some(Called::Answered(Shown::Dropped(w)));
            }
        }
        Write::CsiNodeIndistinct | Write::CsiNodeRepair => {
            // warn mode: the denial's own strings. A policy's warnings name the policy, and
            // a repair entry's name its repair.
            let warned = answer.warnings.iter().find(|w| {
                w.contains("status.storageHealth[0].healthConditions[1]: Duplicate value")
                    && !w.contains("ValidatingAdmissionPolicy")
            });
            if let Some(w) = warned {
                return Some(Called::Answered(Shown::Warned(w.clone())));
            }
            if let Some(w) = warning("status.storageHealth was dropped") {
                return Some(Called::Answered(Shown::Dropped(w)));
            }
        }
    }
    None
}

/// The kind of a line for a binding loaded from static manifests.
const STATIC_BINDING: &str = "ValidatingAdmissionPolicyBinding (static)";

/// The bindings loaded from static manifests (names ending in `.static.k8s.io`, which no API
/// client can make) that answered one of `answers`, each once.
fn static_bindings(answers: &[&Answer]) -> Vec<EntryCheck> {
    const NAMED: &str = "with binding '";
    let mut found: Vec<EntryCheck> = Vec::new();
    for answer in answers {
        let texts = std::iter::once((answer.message(), true))
            .chain(answer.warnings.iter().map(|w| (w.as_str(), false)));
        for (text, refused) in texts {
            let Some(at) = text.find(NAMED) else { continue };
            let rest = &text[at + NAMED.len()..];
            let Some(name) = rest.split('\'').next() else {
                continue;
            };
            if !name.ends_with(STATIC_SUFFIX) || found.iter().any(|e| e.name == name) {
                continue;
            }
            let evidence = if refused {
                format!("denied the probe write: {text}")
            } else {
                format!("warned: {text}")
            };
            found.push(EntryCheck {
                kind: STATIC_BINDING.to_owned(),
                name: name.to_owned(),
                outcome: Outcome::Answered,
                evidence,
            });
        }
    }
    found
}

/// The resource whose repair policy `policy` is, if it is one.
fn repaired_resource(policy: &str) -> Option<HealthResource> {
    HealthResource::ALL
        .into_iter()
        .find(|r| volume_health_policies::repair_name(*r) == policy)
}

/// A repair binding's line, from what was stored of a write of a pair of one identity: the
/// claim's for claims, the CSINode's for CSINodes. No pod is probed (`verify` stores none):
/// the pods' binding stands on the claim's answer, made by the same kind of policy.
fn check_repair_binding(
    binding: &Binding,
    resource: HealthResource,
    claim: &Answer,
    csinode: &Answer,
) -> EntryCheck {
    let (answer, list) = match resource {
        HealthResource::CsiNodes => (csinode, "/status/storageHealth/0/healthConditions"),
        _ => (claim, "/status/healthStatus/healthConditions"),
    };
    let stored = answer
        .body
        .pointer(list)
        .and_then(Value::as_array)
        .map(Vec::len);
    let (outcome, evidence) = if !answer.succeeded() {
        (
            Outcome::Unshown,
            format!("the probe write was refused: {}", answer.message()),
        )
    } else if stored == Some(1) {
        let what = "repaired the probe write: two conditions of one identity stored as one";
        let evidence = match resource {
            HealthResource::Pods => format!("{what} (no pod is probed: the claim's write)"),
            _ => what.to_owned(),
        };
        (Outcome::Answered, evidence)
    } else {
        (
            Outcome::Unshown,
            "the probe write was stored unrepaired".to_owned(),
        )
    };
    EntryCheck {
        kind: binding.kind.to_owned(),
        name: binding.name.clone(),
        outcome,
        evidence,
    }
}

/// A policy binding's line, from the answers to the writes its policy refuses.
fn check_binding(binding: &Binding, identity: &Answer, writers: &Answer) -> EntryCheck {
    let line = |outcome, evidence: String| EntryCheck {
        kind: binding.kind.to_owned(),
        name: binding.name.clone(),
        outcome,
        evidence,
    };
    let answer = match binding.policy.as_str() {
        IDENTITY_POLICY => identity,
        WRITERS_POLICY => writers,
        _ => {
            return line(
                Outcome::Unshown,
                format!("policy {}: no probe write for it", binding.policy),
            );
        }
    };
    let named = format!("binding '{}'", binding.name);
    let message = answer.message();
    // A binding whose parameters are missing refuses every write it matches, in its own
    // "denied request" wrapper.
    let unconfigured =
        message.contains("failed to configure binding") || message.contains("no params found");
    if message.contains(&named) && message.contains("denied request") && !unconfigured {
        return line(
            Outcome::Answered,
            format!("denied the probe write: {message}"),
        );
    }
    if message.contains(&named) || message.contains("no params found") {
        return line(
            Outcome::Failed,
            format!("the probe write was refused: {message}"),
        );
    }
    if let Some(w) = answer.warnings.iter().find(|w| w.contains(&named)) {
        return line(Outcome::Answered, format!("warned: {w}"));
    }
    if binding.kind == "MutatingAdmissionPolicyBinding" {
        let dropped = answer.succeeded()
            && answer.body.pointer("/status/healthStatus").is_none()
            && !answer.body.is_null();
        return if dropped {
            line(
                Outcome::Answered,
                "the probe's new health report was dropped".to_owned(),
            )
        } else {
            line(
                Outcome::Unshown,
                "the probe's new health report was kept (the apiserver's gate is on, and so \
                 is drop on save's: nothing to drop)"
                    .to_owned(),
            )
        };
    }
    if binding.actions.iter().all(|a| a == "Audit") {
        return line(
            Outcome::Unshown,
            "an Audit-only binding answers in the audit log alone".to_owned(),
        );
    }
    let why = if answer.warnings.iter().any(|w| w.contains(" repaired (")) {
        "a repair entry repaired the probe write before the policy saw it"
    } else if binding.policy == WRITERS_POLICY {
        "the probe write was accepted: you are on the writer list, or it is empty"
    } else {
        "the probe write was accepted"
    };
    line(Outcome::Unshown, why.to_owned())
}

/// For a Service a failed entry calls: whether it exists and has ready endpoints.
async fn service_hints(
    api: &Apiserver,
    installed: &Installed,
    entries: &[EntryCheck],
) -> Vec<String> {
    let mut hints: Vec<String> = Vec::new();
    for entry in &installed.webhooks {
        let failed = entries
            .iter()
            .any(|e| e.name == entry.name && e.outcome == Outcome::Failed);
        let Some(service) = entry.client_config.get("service").filter(|_| failed) else {
            continue;
        };
        let text = |key| service.get(key).and_then(Value::as_str).unwrap_or_default();
        let (namespace, name) = (text("namespace"), text("name"));
        let hint = match api
            .get(&format!("/api/v1/namespaces/{namespace}/services/{name}"))
            .await
        {
            Ok(None) => Some(format!("Service {namespace}/{name} does not exist")),
            Ok(Some(_)) => match ready_endpoints(api, namespace, name).await {
                Ok(0) => Some(format!(
                    "Service {namespace}/{name} has no ready endpoints: are the webhook's pods running and ready?"
                )),
                Ok(_) => Some(format!(
                    "Service {namespace}/{name} has ready endpoints: check that the entries' \
                     caBundle signs the serving certificate, and that no NetworkPolicy in \
                     {namespace} drops the apiserver's connections"
                )),
                Err(_) => None,
            },
            Err(_) => None,
        };
        if let Some(hint) = hint.filter(|h| !hints.contains(h)) {
            hints.push(hint);
        }
    }
    let nowhere = |config: &Value| config.get("url").is_none() && config.get("service").is_none();
    if installed.webhooks.iter().any(|e| nowhere(&e.client_config)) {
        hints.push("an entry has neither a service nor a url in its clientConfig".to_owned());
    }
    hints
}

/// Ready endpoints of a Service, from its EndpointSlices.
async fn ready_endpoints(
    api: &Apiserver,
    namespace: &str,
    name: &str,
) -> Result<usize, RequestError> {
    let slices = api
        .get(&format!(
            "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector=kubernetes.io/service-name={name}"
        ))
        .await?
        .unwrap_or(Value::Null);
    let ready = slices
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|slice| {
            slice
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter(|endpoint| endpoint.pointer("/conditions/ready") != Some(&Value::Bool(false)))
        .count();
    Ok(ready)
}

#[cfg(test)]
mod tests;
