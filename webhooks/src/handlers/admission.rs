//! `/mutate` and `/validate`: the admission reviews, what each answered, and
//! `--enforcement-action`.

use std::time::Duration;

use tracing::Level;
use volume_health_validation::admission::{DecodeError, Invalid, RepairError, Response};
use volume_health_validation::error::{self, MAX_MESSAGE_BYTES, prefix};
use volume_health_validation::status::bad_request_status;
use volume_health_validation::{AdmissionRequest, HealthResource, Verdict};

use super::endpoint::{Endpoint, Reviewed};
use super::rejection::Rejection;
use super::state::WebhookState;
use crate::enforcement::{self, EnforcementAction};
use crate::review;
use crate::telemetry::{HANDLERS_TARGET, event_at, logged};

/// What an admission endpoint answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admitted {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with the gated field dropped.
    Patched,
    /// Denied by the node restriction.
    Forbidden,
    /// Denied by field validation.
    Invalid,
    /// Field validation would deny; allowed with warnings (`--enforcement-action=warn`).
    Warned,
    /// Field validation would deny; allowed, logged (`--enforcement-action=dryrun`).
    DryRun,
    /// Denied: an object is not its kind.
    BadObject,
    /// Allowed with what validation would refuse repaired (`--repair`).
    Repaired,
}

impl Admitted {
    /// The `decision` of logs and metrics.
    fn label(self) -> &'static str {
        match self {
            Admitted::Allowed => "allowed",
            Admitted::Patched => "patched",
            Admitted::Forbidden => "forbidden",
            Admitted::Invalid => "invalid",
            Admitted::Warned => "warned",
            Admitted::DryRun => "dryrun",
            Admitted::BadObject => "bad_object",
            Admitted::Repaired => "repaired",
        }
    }

    // Almost every review sent here is simply allowed (a valid write the entries'
    // conditions could not rule out): those are counted in /metrics, and logged only at debug level
    // (`RUST_LOG=volume_health_webhooks=debug` logs every review). Denials and patches, the
    // answers someone may have to look into, are logged at info.
    fn level(self) -> Level {
        match self {
            Admitted::Allowed => Level::DEBUG,
            _ => Level::INFO,
        }
    }
}

/// An admission review decided: the request, what was answered, and the answer's body.
pub(super) struct AdmissionReviewed<'b> {
    request: AdmissionRequest<'b>,
    outcome: Admitted,
    body: Vec<u8>,
}

impl<'b> AdmissionReviewed<'b> {
    fn allowed(request: AdmissionRequest<'b>) -> Self {
        let body = request.allow().into_body();
        AdmissionReviewed {
            request,
            outcome: Admitted::Allowed,
            body,
        }
    }
}

impl Reviewed for AdmissionReviewed<'_> {
    fn log(&self, endpoint: &'static str, elapsed: Duration) {
        let request = &self.request;
        let decision = self.outcome.label();
        // Values from the request are logged as strings, so the text format quotes them: a
        // value cannot pass for another field (control characters are escaped by the
        // formatter).
        event_at!(
            target: HANDLERS_TARGET,
            self.outcome.level(),
            endpoint,
            uid = logged(&request.uid),
            resource = logged(&request.resource.resource),
            subresource = logged(request.subresource()),
            namespace = logged(request.namespace.as_deref().unwrap_or_default()),
            name = logged(request.name()),
            operation = request.operation.as_str(),
            user = logged(&request.user_info.username),
            dry_run = request.dry_run.unwrap_or(false),
            decision,
            latency_us = elapsed.as_micros() as u64,
            "admission review"
        );
    }

    fn labels(&self) -> (&'static str, &'static str) {
        let request = &self.request;
        (
            request
                .health_resource()
                .map_or("other", HealthResource::resource),
            request.operation.as_str(),
        )
    }

    fn decision(&self) -> &'static str {
        self.outcome.label()
    }

    fn into_body(self) -> Vec<u8> {
        self.body
    }
}

/// An object that is not its kind: the review is answered, denied with a 400 `Status`.
fn undecidable(request: AdmissionRequest<'_>, err: DecodeError) -> AdmissionReviewed<'_> {
    let status = bad_request_status(error::chain(&err));
    let body = request.deny(status).into_body();
    AdmissionReviewed {
        request,
        outcome: Admitted::BadObject,
        body,
    }
}

/// `/mutate`: drop on save while `CSIVolumeHealth` is off.
pub(super) struct Mutate;

impl Endpoint for Mutate {
    const NAME: &'static str = "mutate";
    type Reviewed<'b> = AdmissionReviewed<'b>;

    fn decide<'b>(
        state: &WebhookState,
        body: &'b [u8],
    ) -> Result<AdmissionReviewed<'b>, Rejection> {
        let request = review::parse(body)?;
        match request.gated_field_to_drop(state.gates.csi_volume_health) {
            Ok(None) if state.repair => Ok(repair(state, request)),
            Ok(None) => Ok(AdmissionReviewed::allowed(request)),
            Ok(Some(drop)) => {
                let mut response = request.allow_patching(&drop.patch());
                response.warnings.push(drop.warning());
                let body = response.into_body();
                Ok(AdmissionReviewed {
                    request,
                    outcome: Admitted::Patched,
                    body,
                })
            }
            Err(err) => Ok(undecidable(request, err)),
        }
    }
}

/// `--repair`: a status write that validation would refuse for something the writer cannot fix
/// by retrying, answered with the library's patch that makes it acceptable. Anything else (a
/// write that is valid, refused by the node rules, or that no repair makes valid) is allowed
/// unchanged, and `/validate` and in-tree validation answer it as without repair.
fn repair<'b>(state: &WebhookState, request: AdmissionRequest<'b>) -> AdmissionReviewed<'b> {
    let repaired = match request.repair(&state.decisions) {
        Ok(Some(repaired)) => repaired,
        Ok(None) | Err(RepairError::Decode(_)) => return AdmissionReviewed::allowed(request),
        Err(err) => {
            tracing::warn!(
                target: HANDLERS_TARGET,
                uid = logged(&request.uid),
                name = logged(request.name()),
                user = logged(&request.user_info.username),
                error = logged(&error::chain(&err)),
                "no repair made"
            );
            return AdmissionReviewed::allowed(request);
        }
    };
    let resource = repaired.resource().resource();
    for kind in repaired.counts() {
        state
            .metrics
            .repaired(resource, kind.label, kind.count as u64);
    }
    for driver in repaired.drivers() {
        state.metrics.driver_repaired(resource, driver);
    }
    let (key, summary) = repaired.audit_annotation();
    // The writer and the entries are named: a repaired report is a driver or a sidecar to fix,
    // and a CSINode's entry is its driver, a pod's its volume.
    tracing::warn!(
        target: HANDLERS_TARGET,
        uid = logged(&request.uid),
        resource,
        namespace = logged(request.namespace.as_deref().unwrap_or_default()),
        name = logged(request.name()),
        user = logged(&request.user_info.username),
        entries = logged(&repaired.entries().join(",")),
        repairs = summary.as_str(),
        "a status write validation would refuse was repaired"
    );
    let mut response = request.allow_patching(&repaired.patch());
    response.warnings = repaired.warnings();
    response.audit_annotations.insert(key, summary);
    let body = response.into_body();
    drop(repaired);
    AdmissionReviewed {
        request,
        outcome: Admitted::Repaired,
        body,
    }
}

/// `/validate`: node restriction, then field validation.
pub(super) struct Validate;

impl Endpoint for Validate {
    const NAME: &'static str = "validate";
    type Reviewed<'b> = AdmissionReviewed<'b>;

    fn decide<'b>(
        state: &WebhookState,
        body: &'b [u8],
    ) -> Result<AdmissionReviewed<'b>, Rejection> {
        let request = review::parse(body)?;
        match request.validate(&state.decisions) {
            Ok(Verdict::Allowed) => Ok(AdmissionReviewed::allowed(request)),
            Ok(Verdict::Forbidden(forbidden)) => {
                let response = request.deny(forbidden.status());
                let body = response.into_body();
                Ok(AdmissionReviewed {
                    request,
                    outcome: Admitted::Forbidden,
                    body,
                })
            }
            Ok(Verdict::Invalid(invalid)) => {
                let (outcome, response) = enforce(state, &request, &invalid);
                let body = response.into_body();
                Ok(AdmissionReviewed {
                    request,
                    outcome,
                    body,
                })
            }
            Err(err) => Ok(undecidable(request, err)),
        }
    }
}

/// Applies `--enforcement-action` to a review that field validation refuses. Node restriction
/// and undecodable objects never come here: they are denied in every mode.
fn enforce<'a>(
    state: &WebhookState,
    request: &'a AdmissionRequest<'a>,
    invalid: &Invalid,
) -> (Admitted, Response<'a>) {
    let action = state.enforcement_action;
    let resource = invalid.resource.resource();
    // Counted in every mode, so the count seen during `warn` or `dryrun` is what `deny` would
    // refuse.
    state.metrics.violation(resource, action.as_str());
    let status = invalid.status();
    if action == EnforcementAction::Deny {
        return (Admitted::Invalid, request.deny(status));
    }
    // The answer (allowed) tells nobody what was wrong, so the would-be denial is logged whole.
    tracing::info!(
        target: HANDLERS_TARGET,
        uid = logged(&request.uid),
        resource,
        namespace = logged(request.namespace.as_deref().unwrap_or_default()),
        name = logged(request.name()),
        user = logged(&request.user_info.username),
        action = action.as_str(),
        denial = prefix(status.message.as_deref().unwrap_or_default(), MAX_MESSAGE_BYTES),
        "field validation would deny"
    );
    let mut response = request.allow();
    if action == EnforcementAction::Warn {
        response.warnings = enforcement::warnings(&invalid.errors);
        return (Admitted::Warned, response);
    }
    (Admitted::DryRun, response)
}
