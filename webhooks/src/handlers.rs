//! The HTTP face of the webhooks: `/mutate`, `/validate` and `/authorize` as an axum `Router`,
//! with one log line and one metrics sample per request (reviews that are simply allowed are
//! logged at debug level). TLS, ports and signals live elsewhere, so tests drive this router
//! in-process.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::BytesMut;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use json_patch::{Patch, PatchOperation, RemoveOperation, jsonptr::PointerBuf};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Level;
use volume_health_authz::{AuthzPolicy, Decision, RequestAttributes};
use volume_health_validation::{
    AdmissionRequest, FieldError, HealthResource, Operation, RestrictionPolicy, Verdict,
    bad_request_status,
};

use crate::enforcement::{self, EnforcementAction};
use crate::error_chain;
use crate::gates::FeatureGates;
use crate::metrics::Metrics;
use crate::review::{self, BadReview, Objects};

/// What the handlers decide by.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The server's feature gates.
    pub gates: FeatureGates,
    /// Answer a node asking for another node's CSINode with an explicit deny.
    pub authz_deny_on_mismatch: bool,
    /// When set, only these users may change a claim's `status.healthStatus`.
    pub pvc_health_writers: Option<HashSet<String>>,
    /// What `/validate` does with a review that field validation refuses.
    pub enforcement_action: EnforcementAction,
    /// Largest request body accepted; larger gets 413.
    pub max_request_bytes: usize,
    /// Most bytes of request bodies held at once, from the first byte read to the answer; a body
    /// that would go over waits (its bytes stay in the client's socket).
    pub max_in_flight_bytes: usize,
    /// Longest time to receive a request's body; longer gets 408. The handlers do not wait on
    /// anything else, so this bounds the time from a request's headers to its answer.
    pub request_timeout: Duration,
}

/// Shared state of the handlers; cheap to clone.
#[derive(Clone, Debug)]
pub struct WebhookState {
    restriction: Arc<RestrictionPolicy>,
    authz: AuthzPolicy,
    gates: FeatureGates,
    enforcement_action: EnforcementAction,
    metrics: Metrics,
    max_request_bytes: usize,
    request_timeout: Duration,
    in_flight: Arc<Semaphore>,
    in_flight_kib: u32,
}

impl WebhookState {
    /// State for `settings`, reporting into `metrics`.
    pub fn new(settings: &Settings, metrics: Metrics) -> Self {
        let in_flight_kib = kib(settings.max_in_flight_bytes);
        let resources = HealthResource::ALL.map(HealthResource::resource);
        metrics.expect_violations(settings.enforcement_action.as_str(), &resources);
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
            enforcement_action: settings.enforcement_action,
            metrics,
            max_request_bytes: settings.max_request_bytes,
            request_timeout: settings.request_timeout,
            in_flight: Arc::new(Semaphore::new(in_flight_kib as usize)),
            in_flight_kib,
        }
    }
}

/// The webhook routes. Each handler reads its body itself, within `max_request_bytes` (an
/// UPDATE review carries the object twice, so axum's 2 MB default would refuse large objects the
/// apiserver accepts) and `request_timeout`.
pub fn router(settings: &Settings, metrics: Metrics) -> Router {
    let state = WebhookState::new(settings, metrics);
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/authorize", post(authorize))
        .with_state(state)
}

/// Why a request body could not be read.
#[derive(Debug)]
enum BodyError {
    /// Over `--max-request-bytes`, by its `Content-Length` or as it arrived.
    TooLarge,
    /// Not complete within `--request-timeout`.
    TimedOut,
    /// No room under `--max-in-flight-bytes` within `--request-timeout`.
    Busy,
    /// The connection failed while it was read.
    Read(Box<dyn std::error::Error + Send + Sync>),
}

/// A request body, with its share of `--max-in-flight-bytes` held until the answer is made.
struct Body_ {
    bytes: Bytes,
    _held: OwnedSemaphorePermit,
}

/// Bodies larger than this are decided on the blocking pool, so that a large review never holds
/// up the async workers that serve small reviews and health checks.
const BLOCKING_BODY_BYTES: usize = 256 * 1024;

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// Reads a request body of at most `max_request_bytes` within `request_timeout`. The body is the
/// only part of a request that waits on the client: after it the handlers run to their answer
/// without waiting on anything. A body announced as too large is refused before it is read.
///
/// Before reading, the body's length (announced, or else the limit) is reserved under
/// `--max-in-flight-bytes`, so the bytes held at once stay bounded whatever the clients send.
///
/// `tokio::time::timeout` polls the read first and arms its timer only when the body is not
/// complete yet, so a body that arrived with its headers, as a small review does, never touches
/// the timer wheel.
async fn read_body(state: &WebhookState, body: Body) -> Result<Body_, BodyError> {
    let limit = state.max_request_bytes;
    let hint = body.size_hint();
    if hint.lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(BodyError::TooLarge);
    }
    let announced = hint
        .exact()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(limit);
    let deadline = tokio::time::Instant::now() + state.request_timeout;
    let reserve = state
        .in_flight
        .clone()
        .acquire_many_owned(kib(announced).min(state.in_flight_kib));
    let held = match tokio::time::timeout_at(deadline, reserve).await {
        Ok(Ok(held)) => held,
        // The semaphore is never closed; no room in time is the one way to get here.
        Ok(Err(_)) | Err(_) => return Err(BodyError::Busy),
    };
    let read = async {
        let mut bytes = BytesMut::with_capacity(announced);
        let mut body = Limited::new(body, limit);
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
                Err(err) if err.is::<LengthLimitError>() => return Err(BodyError::TooLarge),
                Err(err) => return Err(BodyError::Read(err)),
            }
        }
        Ok(bytes.freeze())
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(bytes) => Ok(Body_ {
            bytes: bytes?,
            _held: held,
        }),
        Err(_elapsed) => Err(BodyError::TimedOut),
    }
}

async fn mutate(State(state): State<WebhookState>, body: Body) -> Response {
    let body = read_body(&state, body).await;
    // With the gate on nothing is ever dropped, so the objects are only checked to be JSON.
    let objects = if state.gates.csi_volume_health {
        Objects::Skip
    } else {
        Objects::Read
    };
    admit(state, "mutate", body, objects, |state, request, target| {
        let Some((resource, operation)) = target else {
            return (review::Response::allow(&request.uid), "allowed");
        };
        match request.gated_field_to_drop(operation, state.gates.csi_volume_health) {
            Ok(None) => (review::Response::allow(&request.uid), "allowed"),
            Ok(Some(pointer)) => {
                let patch = Patch(vec![PatchOperation::Remove(RemoveOperation {
                    path: PointerBuf::parse(pointer).unwrap_or_default(),
                })]);
                let mut response = review::Response::allow_with_patch(&request.uid, &patch);
                response.warnings.push(format!(
                    "{} was dropped: feature gate CSIVolumeHealth is disabled",
                    resource.gated_field()
                ));
                (response, "patched")
            }
            Err(err) => (
                review::Response::deny(&request.uid, bad_request_status(error_chain(&err))),
                "bad_object",
            ),
        }
    })
    .await
}

async fn validate(State(state): State<WebhookState>, body: Body) -> Response {
    let body = read_body(&state, body).await;
    admit(
        state,
        "validate",
        body,
        Objects::Read,
        |state, request, target| {
            let Some((resource, operation)) = target else {
                return (review::Response::allow(&request.uid), "allowed");
            };
            match request.validate(operation, &state.restriction) {
                Ok(Verdict::Allowed) => (review::Response::allow(&request.uid), "allowed"),
                Ok(verdict) => {
                    let status = verdict.status(resource).unwrap_or_default();
                    if let Verdict::Invalid { errors, .. } = &verdict {
                        return enforce(state, request, resource, status, errors);
                    }
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
        },
    )
    .await
}

/// Applies `--enforcement-action` to a review that field validation refuses with `status`.
/// Node restriction and undecodable objects never come here: they are denied in every mode.
fn enforce<'a>(
    state: &WebhookState,
    request: &'a AdmissionRequest<'a>,
    resource: HealthResource,
    status: Status,
    errors: &[FieldError],
) -> (review::Response<'a>, &'static str) {
    let action = state.enforcement_action;
    // Counted in every mode, so the count seen during `warn` or `dryrun` is what `deny` would
    // refuse.
    state
        .metrics
        .violation(resource.resource(), action.as_str());
    if action == EnforcementAction::Deny {
        return (review::Response::deny(&request.uid, status), "invalid");
    }
    // The answer (allowed) tells nobody what was wrong, so the would-be denial is logged whole.
    tracing::info!(
        uid = &*request.uid,
        resource = resource.resource(),
        namespace = request.namespace.as_deref().unwrap_or_default(),
        name = request.name(),
        user = &*request.user_info.username,
        action = action.as_str(),
        denial = status.message.as_deref().unwrap_or_default(),
        "field validation would deny"
    );
    let mut response = review::Response::allow(&request.uid);
    if action == EnforcementAction::Warn {
        response.warnings = enforcement::warnings(errors);
        return (response, "warned");
    }
    (response, "dryrun")
}

/// What an admission endpoint decides: the response, and its label for logs and metrics.
trait Decide:
    for<'a> Fn(
        &WebhookState,
        &'a AdmissionRequest<'a>,
        Option<(HealthResource, Operation)>,
    ) -> (review::Response<'a>, &'static str)
    + Send
    + 'static
{
}

impl<F> Decide for F where
    F: for<'a> Fn(
            &WebhookState,
            &'a AdmissionRequest<'a>,
            Option<(HealthResource, Operation)>,
        ) -> (review::Response<'a>, &'static str)
        + Send
        + 'static
{
}

/// The common path of both admission endpoints: decode, decide, log, count, answer.
async fn admit(
    state: WebhookState,
    endpoint: &'static str,
    body: Result<Body_, BodyError>,
    objects: Objects,
    decide: impl Decide,
) -> Response {
    off_workers_when_large(state, endpoint, body, move |state, body| {
        admit_now(state, endpoint, body, objects, decide)
    })
    .await
}

/// Answers `body` with `answer`: right here when it is small, on the blocking pool when it is
/// large, so that a large review never holds up the async workers that serve small reviews and
/// health checks.
async fn off_workers_when_large(
    state: WebhookState,
    endpoint: &'static str,
    body: Result<Body_, BodyError>,
    answer: impl FnOnce(&WebhookState, Result<Body_, BodyError>) -> Response + Send + 'static,
) -> Response {
    if !matches!(&body, Ok(body) if body.bytes.len() > BLOCKING_BODY_BYTES) {
        return answer(&state, body);
    }
    let pool_state = state.clone();
    tokio::task::spawn_blocking(move || answer(&pool_state, body))
        .await
        .unwrap_or_else(|_panicked| {
            error_response(
                &state,
                endpoint,
                StatusCode::INTERNAL_SERVER_ERROR,
                "the review could not be decided",
                Instant::now(),
            )
        })
}

/// `decide` gets the resource and operation, or `None` for resources without a rule here, which
/// are allowed unchanged.
fn admit_now(
    state: &WebhookState,
    endpoint: &'static str,
    body: Result<Body_, BodyError>,
    objects: Objects,
    decide: impl Decide,
) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(body) => body,
        Err(err) => return reject_body(state, endpoint, err, started),
    };
    let request = match review::parse(&body.bytes, objects) {
        Ok(request) => request,
        Err(err) => return bad_review(state, endpoint, &err, started),
    };
    let Some(operation) = Operation::parse(&request.operation) else {
        let err = BadReview::Operation(request.operation.clone().into_owned());
        return bad_review(state, endpoint, &err, started);
    };
    let resource = request.health_resource();
    let (response, decision) = decide(state, &request, resource.map(|r| (r, operation)));
    let elapsed = started.elapsed();
    // Values from the request are logged as strings, so the text format quotes them: a value
    // cannot pass for another field (control characters are escaped by the formatter).
    macro_rules! log_review {
        ($level:expr) => {
            tracing::event!(
                $level,
                endpoint,
                uid = &*request.uid,
                resource = &*request.resource.resource,
                subresource = request.subresource(),
                namespace = request.namespace.as_deref().unwrap_or_default(),
                name = request.name(),
                operation = operation.as_str(),
                user = &*request.user_info.username,
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

async fn authorize(State(state): State<WebhookState>, body: Body) -> Response {
    let body = read_body(&state, body).await;
    off_workers_when_large(state, "authorize", body, authorize_now).await
}

fn authorize_now(state: &WebhookState, body: Result<Body_, BodyError>) -> Response {
    let started = Instant::now();
    let endpoint = "authorize";
    let body = match body {
        Ok(body) => body,
        Err(err) => return reject_body(state, endpoint, err, started),
    };
    let answer = match volume_health_authz::review(&body.bytes, &state.authz) {
        Ok(answer) => answer,
        Err(err) => return bad_review(state, endpoint, &err, started),
    };
    let elapsed = started.elapsed();
    let no_attrs = RequestAttributes::default();
    let attrs = answer.resource.as_ref().unwrap_or(&no_attrs);
    let decision = answer.decision.label();
    macro_rules! log_review {
        ($level:expr) => {
            tracing::event!(
                $level,
                endpoint,
                user = &*answer.user,
                verb = &*attrs.verb,
                group = &*attrs.group,
                resource = &*attrs.resource,
                subresource = &*attrs.subresource,
                name = &*attrs.name,
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
    err: BodyError,
    started: Instant,
) -> Response {
    let (status, message) = match err {
        BodyError::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body is larger than --max-request-bytes".to_owned(),
        ),
        BodyError::TimedOut => (
            StatusCode::REQUEST_TIMEOUT,
            "request body not received within --request-timeout".to_owned(),
        ),
        BodyError::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many request bytes in flight (--max-in-flight-bytes); try again".to_owned(),
        ),
        BodyError::Read(err) => (
            StatusCode::BAD_REQUEST,
            format!("could not read request body: {}", error_chain(&*err)),
        ),
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
        StatusCode::REQUEST_TIMEOUT => "timeout",
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
            StatusCode::REQUEST_TIMEOUT => "Timeout",
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
