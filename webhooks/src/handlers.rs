//! The HTTP face of the webhooks: `/mutate`, `/validate` and `/authorize` as an axum `Router`,
//! with one log line and one metrics sample per request (reviews that are simply allowed are
//! logged at debug level). TLS, ports and signals live elsewhere, so tests drive this router
//! in-process.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use json_patch::{Patch, PatchOperation, RemoveOperation, jsonptr::PointerBuf};
use tower_http::timeout::TimeoutLayer;
use tracing::Level;
use volume_health_authz::{AuthzPolicy, Decision, OwnedAttributes};
use volume_health_validation::{
    AdmissionInput, HealthResource, Operation, RestrictionPolicy, Verdict, bad_request_status,
    gated_field_to_drop, validate_admission,
};

use crate::error_chain;
use crate::gates::FeatureGates;
use crate::metrics::Metrics;
use crate::review::{self, BadReview, Request};

/// What the handlers decide by.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The server's feature gates.
    pub gates: FeatureGates,
    /// Answer a node asking for another node's CSINode with an explicit deny.
    pub authz_deny_on_mismatch: bool,
    /// When set, only these users may change a claim's `status.healthStatus`.
    pub pvc_health_writers: Option<HashSet<String>>,
    /// Largest request body accepted; larger gets 413.
    pub max_request_bytes: usize,
    /// Longest time from request start to answer, body read included; longer gets 408.
    pub request_timeout: Duration,
}

/// Shared state of the handlers; cheap to clone.
#[derive(Clone, Debug)]
pub struct WebhookState {
    restriction: Arc<RestrictionPolicy>,
    authz: AuthzPolicy,
    gates: FeatureGates,
    metrics: Metrics,
}

impl WebhookState {
    /// State for `settings`, reporting into `metrics`.
    pub fn new(settings: &Settings, metrics: Metrics) -> Self {
        WebhookState {
            restriction: Arc::new(RestrictionPolicy {
                gate_enabled: settings.gates.csi_volume_health,
                pvc_health_writers: settings.pvc_health_writers.clone(),
            }),
            authz: AuthzPolicy {
                gate_enabled: settings.gates.csi_volume_health,
                deny_on_mismatch: settings.authz_deny_on_mismatch,
            },
            gates: settings.gates,
            metrics,
        }
    }
}

/// The webhook routes. The body limit is explicit: an UPDATE review carries the object twice,
/// and axum's 2 MB default would refuse large objects the apiserver accepts.
pub fn router(settings: &Settings, metrics: Metrics) -> Router {
    let state = WebhookState::new(settings, metrics);
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/authorize", post(authorize))
        .layer(DefaultBodyLimit::max(settings.max_request_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            settings.request_timeout,
        ))
        .with_state(state)
}

async fn mutate(
    State(state): State<WebhookState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    admit(&state, "mutate", body, |state, request, input| {
        let Some(input) = input else {
            return (review::Response::allow(&request.uid), "allowed");
        };
        match gated_field_to_drop(input, state.gates.csi_volume_health) {
            Ok(None) => (review::Response::allow(&request.uid), "allowed"),
            Ok(Some(pointer)) => {
                let patch = Patch(vec![PatchOperation::Remove(RemoveOperation {
                    path: PointerBuf::parse(pointer).unwrap_or_default(),
                })]);
                let mut response = review::Response::allow_with_patch(&request.uid, &patch);
                response.warnings.push(format!(
                    "{} was dropped: feature gate CSIVolumeHealth is disabled",
                    input.resource.gated_field()
                ));
                (response, "patched")
            }
            Err(err) => (
                review::Response::deny(&request.uid, bad_request_status(error_chain(&err))),
                "bad_object",
            ),
        }
    })
}

async fn validate(
    State(state): State<WebhookState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    admit(&state, "validate", body, |state, request, input| {
        let Some(input) = input else {
            return (review::Response::allow(&request.uid), "allowed");
        };
        match validate_admission(input, &state.restriction) {
            Ok(Verdict::Allowed) => (review::Response::allow(&request.uid), "allowed"),
            Ok(verdict) => {
                let status = verdict.status(input.resource).unwrap_or_default();
                (
                    review::Response::deny(&request.uid, status),
                    verdict.label(),
                )
            }
            Err(err) => (
                review::Response::deny(&request.uid, bad_request_status(error_chain(&err))),
                "bad_object",
            ),
        }
    })
}

/// The common path of both admission endpoints: decode, decide, log, count, answer.
/// `decide` gets `None` for resources without a rule here, which are allowed unchanged.
fn admit(
    state: &WebhookState,
    endpoint: &'static str,
    body: Result<Bytes, BytesRejection>,
    decide: impl for<'a> Fn(
        &WebhookState,
        &'a Request<'a>,
        Option<&AdmissionInput<'a>>,
    ) -> (review::Response<'a>, &'static str),
) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return reject_body(state, endpoint, rejection, started),
    };
    let request = match review::parse(&body) {
        Ok(request) => request,
        Err(err) => return bad_review(state, endpoint, &err, started),
    };
    let Some(operation) = Operation::parse(&request.operation) else {
        let err = BadReview::Operation(request.operation.clone().into_owned());
        return bad_review(state, endpoint, &err, started);
    };
    let resource =
        HealthResource::from_group_resource(&request.resource.group, &request.resource.resource);
    let input = resource.map(|resource| AdmissionInput {
        resource,
        subresource: request.subresource(),
        operation,
        name: request.name(),
        user: &request.user_info,
        object: request.object(),
        old_object: request.old_object(),
    });
    let (response, decision) = decide(state, &request, input.as_ref());
    let elapsed = started.elapsed();
    macro_rules! log_review {
        ($level:expr) => {
            tracing::event!(
                $level,
                endpoint,
                uid = %request.uid,
                resource = %request.resource.resource,
                subresource = request.subresource(),
                namespace = request.namespace.as_deref().unwrap_or_default(),
                name = request.name(),
                operation = operation.as_str(),
                user = %request.user_info.username,
                dry_run = request.dry_run.unwrap_or(false),
                decision,
                latency_us = elapsed.as_micros() as u64,
                "admission review"
            )
        };
    }
    // Every kubelet status write passes through here, and almost all of them are simply
    // allowed: those are counted in /metrics, and logged only at debug level
    // (`RUST_LOG=volume_health_webhooks=debug` logs every review). Denials and patches, the
    // answers someone may have to look into, are logged at info.
    if decision == "allowed" {
        log_review!(Level::DEBUG);
    } else {
        log_review!(Level::INFO);
    }
    state.metrics.observe(
        endpoint,
        resource.map_or("other", HealthResource::resource),
        operation.as_str(),
        decision,
        elapsed,
    );
    json_response(StatusCode::OK, response.into_body())
}

async fn authorize(
    State(state): State<WebhookState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let endpoint = "authorize";
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return reject_body(&state, endpoint, rejection, started),
    };
    let answer = match volume_health_authz::review(&body, &state.authz) {
        Ok(answer) => answer,
        Err(err) => return bad_review(&state, endpoint, &err, started),
    };
    let elapsed = started.elapsed();
    let no_attrs = OwnedAttributes::default();
    let attrs = answer.resource.as_ref().unwrap_or(&no_attrs);
    let decision = answer.decision.label();
    macro_rules! log_review {
        ($level:expr) => {
            tracing::event!(
                $level,
                endpoint,
                user = %answer.user,
                verb = %attrs.verb,
                group = %attrs.group,
                resource = %attrs.resource,
                subresource = %attrs.subresource,
                name = %attrs.name,
                non_resource = answer.resource.is_none(),
                decision,
                reason = answer.decision.reason(),
                latency_us = elapsed.as_micros() as u64,
                "authorization review"
            )
        };
    }
    // As for admission: the ordinary answers (allow, or no opinion for everything outside the
    // table) are counted in /metrics and logged at debug level; a deny is logged at info.
    if matches!(answer.decision, Decision::Deny(_)) {
        log_review!(Level::INFO);
    } else {
        log_review!(Level::DEBUG);
    }
    let csinodes = attrs.group == "storage.k8s.io" && attrs.resource == "csinodes";
    state.metrics.observe(
        endpoint,
        if csinodes { "csinodes" } else { "other" },
        known_verb(&attrs.verb),
        decision,
        elapsed,
    );
    json_response(StatusCode::OK, answer.body)
}

/// A verb as a bounded metrics label.
fn known_verb(verb: &str) -> &'static str {
    const VERBS: [&str; 8] = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    VERBS.into_iter().find(|v| *v == verb).unwrap_or("other")
}

fn reject_body(
    state: &WebhookState,
    endpoint: &'static str,
    rejection: BytesRejection,
    started: Instant,
) -> Response {
    let status = rejection.status();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "request body is larger than --max-request-bytes".to_owned()
    } else {
        format!("could not read request body: {}", rejection.body_text())
    };
    error_response(state, endpoint, status, &message, started)
}

fn bad_review(
    state: &WebhookState,
    endpoint: &'static str,
    err: &dyn std::error::Error,
    started: Instant,
) -> Response {
    error_response(
        state,
        endpoint,
        StatusCode::BAD_REQUEST,
        &error_chain(err),
        started,
    )
}

/// An HTTP error carrying a `Status` body, logged and counted like any answer.
fn error_response(
    state: &WebhookState,
    endpoint: &'static str,
    status: StatusCode,
    message: &str,
    started: Instant,
) -> Response {
    let elapsed = started.elapsed();
    tracing::warn!(
        endpoint,
        status = status.as_u16(),
        error = message,
        "bad request"
    );
    let decision = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::BAD_REQUEST => "bad_request",
        _ => "error",
    };
    state
        .metrics
        .observe(endpoint, "unknown", "unknown", decision, elapsed);
    let mut body = bad_request_status(message.to_owned());
    body.code = Some(status.as_u16().into());
    body.reason = Some(
        match status {
            StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
            StatusCode::BAD_REQUEST => "BadRequest",
            _ => "InternalError",
        }
        .to_owned(),
    );
    json_response(status, serde_json::to_vec(&body).unwrap_or_default())
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
