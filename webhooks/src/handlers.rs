//! The HTTP face of the webhooks: `/mutate`, `/validate` and `/authorize` as an axum `Router`,
//! with one log line and one metrics sample per request (reviews that are simply allowed are
//! logged at debug level). TLS, ports and signals live elsewhere, so tests drive this router
//! in-process.
//!
//! The three endpoints share one skeleton ([`serve`]): read the body, decide, log, count,
//! answer. An [`Endpoint`] decides; what it decided knows its log line and metric labels
//! ([`Reviewed`]); a body it cannot answer is a [`Rejection`], which is its own HTTP answer.

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
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Level;
use volume_health_authz::{Answer, AuthzPolicy, ResourceAttributes};
use volume_health_validation::admission::{DecodeError, Invalid};
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::status::{MAX_REPORTED_ERRORS, bad_request_status};
use volume_health_validation::{AdmissionRequest, HealthResource, RestrictionPolicy, Verdict};

use crate::enforcement::{self, EnforcementAction};
use crate::error_chain;
use crate::gates::FeatureGates;
use crate::metrics::Metrics;
use crate::review::{self, BadReview, PlainJson};

/// What the handlers decide by.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The server's feature gates.
    pub gates: FeatureGates,
    /// Answer a node asking for another node's CSINode with an explicit deny.
    pub authz_deny_on_mismatch: bool,
    /// This project's own rule of one identity per storage condition, or in-tree's
    /// answers.
    pub storage_condition_identity: ConditionIdentity,
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
                storage_condition_identity: settings.storage_condition_identity,
                error_limit: Some(MAX_REPORTED_ERRORS),
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
        .route("/mutate", post(serve::<Mutate>))
        .route("/validate", post(serve::<Validate>))
        .route("/authorize", post(serve::<Authorize>))
        .with_state(state)
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
async fn read_body(state: &WebhookState, body: Body) -> Result<Body_, Rejection> {
    let limit = state.max_request_bytes;
    let hint = body.size_hint();
    if hint.lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(Rejection::TooLarge);
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
        Ok(Err(_)) | Err(_) => return Err(Rejection::Busy),
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
                Err(err) if err.is::<LengthLimitError>() => return Err(Rejection::TooLarge),
                Err(err) => return Err(Rejection::Read(err)),
            }
        }
        Ok(bytes.freeze())
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(bytes) => Ok(Body_ {
            bytes: bytes?,
            _held: held,
        }),
        Err(_elapsed) => Err(Rejection::TimedOut),
    }
}

/// One endpoint: how it decides a body it has read.
trait Endpoint: Send + 'static {
    /// The path, and the `endpoint` of logs and metrics.
    const NAME: &'static str;
    /// What it decided, borrowed from the body.
    type Reviewed<'b>: Reviewed;

    fn decide<'b>(state: &WebhookState, body: &'b [u8]) -> Result<Self::Reviewed<'b>, Rejection>;
}

/// A decided review: its log line, its metric labels and the answer's body.
trait Reviewed {
    /// Logs the review; `decision` and `latency_us` as every endpoint logs them.
    fn log(&self, endpoint: &'static str, elapsed: Duration);
    /// `resource` and `operation` of the request metrics.
    fn labels(&self) -> (&'static str, &'static str);
    /// The outcome, for the `decision` label.
    fn outcome(&self) -> &dyn Outcome;
    /// The body of the 200 answer.
    fn into_body(self) -> Vec<u8>;
}

/// What an endpoint decided, as logged and counted.
trait Outcome {
    /// The `decision` of logs and metrics. Dashboards and alerts read these values.
    fn label(&self) -> &'static str;
    /// The level of its log line: the ordinary answers at debug, the ones someone may have to
    /// look into at info.
    fn level(&self) -> Level;
}

/// The skeleton of every endpoint: read the body, decide, log, count, answer.
async fn serve<E: Endpoint>(State(state): State<WebhookState>, body: Body) -> Response {
    let body = read_body(&state, body).await;
    off_workers_when_large::<E>(state, body, |state, body| {
        let started = Instant::now();
        let decided = body.and_then(|body| {
            let reviewed = E::decide(state, &body.bytes)?;
            let elapsed = started.elapsed();
            reviewed.log(E::NAME, elapsed);
            let (resource, operation) = reviewed.labels();
            let decision = reviewed.outcome().label();
            state
                .metrics
                .observe(E::NAME, resource, operation, decision, elapsed);
            Ok(json_response(StatusCode::OK, reviewed.into_body()))
        });
        decided.unwrap_or_else(|rejection| rejection.answer(state, E::NAME, started))
    })
    .await
}

/// Answers `body` with `answer`: right here when it is small, on the blocking pool when it is
/// large, so that a large review never holds up the async workers that serve small reviews and
/// health checks.
async fn off_workers_when_large<E: Endpoint>(
    state: WebhookState,
    body: Result<Body_, Rejection>,
    answer: fn(&WebhookState, Result<Body_, Rejection>) -> Response,
) -> Response {
    if !matches!(&body, Ok(body) if body.bytes.len() > BLOCKING_BODY_BYTES) {
        return answer(&state, body);
    }
    let pool_state = state.clone();
    tokio::task::spawn_blocking(move || answer(&pool_state, body))
        .await
        .unwrap_or_else(|_panicked| Rejection::Panicked.answer(&state, E::NAME, Instant::now()))
}

/// A request this server cannot answer with a review: an HTTP error with a `Status` body.
#[derive(Debug)]
enum Rejection {
    /// Over `--max-request-bytes`, by its `Content-Length` or as it arrived.
    TooLarge,
    /// Not complete within `--request-timeout`.
    TimedOut,
    /// No room under `--max-in-flight-bytes` within `--request-timeout`.
    Busy,
    /// The connection failed while the body was read.
    Read(Box<dyn std::error::Error + Send + Sync>),
    /// Not a review this endpoint answers.
    BadReview(Box<dyn std::error::Error + Send + Sync>),
    /// Deciding failed.
    Panicked,
}

impl From<BadReview> for Rejection {
    fn from(err: BadReview) -> Self {
        Rejection::BadReview(err.into())
    }
}

impl From<volume_health_authz::ReviewError> for Rejection {
    fn from(err: volume_health_authz::ReviewError) -> Self {
        Rejection::BadReview(err.into())
    }
}

impl Rejection {
    fn status(&self) -> StatusCode {
        match self {
            Rejection::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Rejection::TimedOut => StatusCode::REQUEST_TIMEOUT,
            Rejection::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::Read(_) | Rejection::BadReview(_) => StatusCode::BAD_REQUEST,
            Rejection::Panicked => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` of the `Status` body.
    fn reason(&self) -> &'static str {
        match self {
            Rejection::TooLarge => "RequestEntityTooLarge",
            Rejection::TimedOut => "Timeout",
            Rejection::Read(_) | Rejection::BadReview(_) => "BadRequest",
            Rejection::Busy | Rejection::Panicked => "InternalError",
        }
    }

    fn message(&self) -> String {
        match self {
            Rejection::TooLarge => "request body is larger than --max-request-bytes".to_owned(),
            Rejection::TimedOut => "request body not received within --request-timeout".to_owned(),
            Rejection::Busy => {
                "too many request bytes in flight (--max-in-flight-bytes); try again".to_owned()
            }
            Rejection::Read(err) => format!("could not read request body: {}", error_chain(&**err)),
            Rejection::BadReview(err) => error_chain(&**err),
            Rejection::Panicked => "the review could not be decided".to_owned(),
        }
    }
}

impl Rejection {
    /// The `decision` of the request metrics.
    fn label(&self) -> &'static str {
        match self {
            Rejection::TooLarge => "too_large",
            Rejection::TimedOut => "timeout",
            Rejection::Read(_) | Rejection::BadReview(_) => "bad_request",
            Rejection::Busy | Rejection::Panicked => "error",
        }
    }

    /// Logs and counts the rejection like any answer, then answers it.
    fn answer(self, state: &WebhookState, endpoint: &'static str, started: Instant) -> Response {
        let elapsed = started.elapsed();
        let message = self.message();
        tracing::warn!(
            endpoint,
            status = self.status().as_u16(),
            error = message,
            "bad request"
        );
        state
            .metrics
            .observe(endpoint, "unknown", "unknown", self.label(), elapsed);
        self.into_response()
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut body = bad_request_status(self.message());
        body.code = Some(status.as_u16().into());
        body.reason = Some(self.reason().to_owned());
        json_response(status, body.to_json())
    }
}

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
}

impl Outcome for Admitted {
    fn label(&self) -> &'static str {
        match self {
            Admitted::Allowed => "allowed",
            Admitted::Patched => "patched",
            Admitted::Forbidden => "forbidden",
            Admitted::Invalid => "invalid",
            Admitted::Warned => "warned",
            Admitted::DryRun => "dryrun",
            Admitted::BadObject => "bad_object",
        }
    }

    // Every kubelet status write passes through here, and almost all of them are simply
    // allowed: those are counted in /metrics, and logged only at debug level
    // (`RUST_LOG=volume_health_webhooks=debug` logs every review). Denials and patches, the
    // answers someone may have to look into, are logged at info.
    fn level(&self) -> Level {
        match self {
            Admitted::Allowed => Level::DEBUG,
            _ => Level::INFO,
        }
    }
}

/// An admission review decided: the request, what was answered, and the answer's body.
struct AdmissionReviewed<'b> {
    request: AdmissionRequest<'b>,
    outcome: Admitted,
    body: Vec<u8>,
}

impl<'b> AdmissionReviewed<'b> {
    fn allowed(request: AdmissionRequest<'b>) -> Self {
        let body = review::Response::allow(&request.uid).into_body();
        AdmissionReviewed {
            request,
            outcome: Admitted::Allowed,
            body,
        }
    }
}

/// `tracing::event!` at a level known only at run time: the macro wants it as a constant, and
/// the answers are logged at debug or info.
macro_rules! event_at {
    ($level:expr, $($event:tt)*) => {
        if $level == Level::DEBUG {
            tracing::event!(Level::DEBUG, $($event)*)
        } else {
            tracing::event!(Level::INFO, $($event)*)
        }
    };
}

impl Reviewed for AdmissionReviewed<'_> {
    fn log(&self, endpoint: &'static str, elapsed: Duration) {
        let request = &self.request;
        let decision = self.outcome.label();
        // Values from the request are logged as strings, so the text format quotes them: a
        // value cannot pass for another field (control characters are escaped by the
        // formatter).
        event_at!(
            self.outcome.level(),
            endpoint,
            uid = &*request.uid,
            resource = &*request.resource.resource,
            subresource = request.subresource(),
            namespace = request.namespace.as_deref().unwrap_or_default(),
            name = request.name(),
            operation = request.operation.as_str(),
            user = &*request.user_info.username,
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

    fn outcome(&self) -> &dyn Outcome {
        &self.outcome
    }

    fn into_body(self) -> Vec<u8> {
        self.body
    }
}

/// An object that is not its kind: the review is answered, denied with a 400 `Status`.
fn undecidable(request: AdmissionRequest<'_>, err: DecodeError) -> AdmissionReviewed<'_> {
    let status = bad_request_status(error_chain(&err));
    let body = review::Response::deny(&request.uid, status).into_body();
    AdmissionReviewed {
        request,
        outcome: Admitted::BadObject,
        body,
    }
}

/// `/mutate`: drop on save while `CSIVolumeHealth` is off.
struct Mutate;

impl Endpoint for Mutate {
    const NAME: &'static str = "mutate";
    type Reviewed<'b> = AdmissionReviewed<'b>;

    fn decide<'b>(
        state: &WebhookState,
        body: &'b [u8],
    ) -> Result<AdmissionReviewed<'b>, Rejection> {
        let request = review::parse(body)?;
        let Some(resource) = request.health_resource() else {
            return Ok(AdmissionReviewed::allowed(request));
        };
        match request.gated_field_to_drop(state.gates.csi_volume_health) {
            Ok(None) => Ok(AdmissionReviewed::allowed(request)),
            Ok(Some(_)) => {
                let mut response =
                    review::Response::allow_removing(&request.uid, review::gated_pointer(resource));
                response.warnings.push(format!(
                    "{} was dropped: feature gate CSIVolumeHealth is disabled",
                    resource.gated_field()
                ));
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

/// `/validate`: node restriction, then field validation.
struct Validate;

impl Endpoint for Validate {
    const NAME: &'static str = "validate";
    type Reviewed<'b> = AdmissionReviewed<'b>;

    fn decide<'b>(
        state: &WebhookState,
        body: &'b [u8],
    ) -> Result<AdmissionReviewed<'b>, Rejection> {
        let request = review::parse(body)?;
        match request.validate(&state.restriction) {
            Ok(Verdict::Allowed) => Ok(AdmissionReviewed::allowed(request)),
            Ok(Verdict::Forbidden(forbidden)) => {
                let response = review::Response::deny(&request.uid, forbidden.status());
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
) -> (Admitted, review::Response<'a>) {
    let action = state.enforcement_action;
    let resource = invalid.resource.resource();
    // Counted in every mode, so the count seen during `warn` or `dryrun` is what `deny` would
    // refuse.
    state.metrics.violation(resource, action.as_str());
    let status = invalid.status();
    if action == EnforcementAction::Deny {
        return (
            Admitted::Invalid,
            review::Response::deny(&request.uid, status),
        );
    }
    // The answer (allowed) tells nobody what was wrong, so the would-be denial is logged whole.
    tracing::info!(
        uid = &*request.uid,
        resource,
        namespace = request.namespace.as_deref().unwrap_or_default(),
        name = request.name(),
        user = &*request.user_info.username,
        action = action.as_str(),
        denial = status.message.as_deref().unwrap_or_default(),
        "field validation would deny"
    );
    let mut response = review::Response::allow(&request.uid);
    if action == EnforcementAction::Warn {
        response.warnings = enforcement::warnings(&invalid.errors);
        return (Admitted::Warned, response);
    }
    (Admitted::DryRun, response)
}

/// `/authorize`: the SubjectAccessReview of `csinodes/status`.
struct Authorize;

impl Endpoint for Authorize {
    const NAME: &'static str = "authorize";
    type Reviewed<'b> = Answer<'b>;

    fn decide<'b>(state: &WebhookState, body: &'b [u8]) -> Result<Answer<'b>, Rejection> {
        Ok(volume_health_authz::review(body, &state.authz)?)
    }
}

impl Outcome for volume_health_authz::Decision {
    fn label(&self) -> &'static str {
        volume_health_authz::Decision::label(self)
    }

    // As for admission: the ordinary answers (allow, or no opinion for everything outside the
    // table) are counted in /metrics and logged at debug level; a deny is logged at info.
    fn level(&self) -> Level {
        match self {
            volume_health_authz::Decision::Deny(_) => Level::INFO,
            _ => Level::DEBUG,
        }
    }
}

impl Reviewed for Answer<'_> {
    fn log(&self, endpoint: &'static str, elapsed: Duration) {
        let no_attrs = ResourceAttributes::default();
        let attrs = self.resource.as_ref().unwrap_or(&no_attrs);
        let decision = self.decision.label();
        event_at!(
            Outcome::level(&self.decision),
            endpoint,
            user = &*self.user,
            verb = &*attrs.verb,
            group = &*attrs.group,
            resource = &*attrs.resource,
            subresource = &*attrs.subresource,
            name = &*attrs.name,
            non_resource = self.resource.is_none(),
            decision,
            reason = self.decision.reason(),
            latency_us = elapsed.as_micros() as u64,
            "authorization review"
        );
    }

    fn labels(&self) -> (&'static str, &'static str) {
        let (group, resource, verb) = self
            .resource
            .as_ref()
            .map_or(("", "", ""), |a| (&*a.group, &*a.resource, &*a.verb));
        let csinodes = group == "storage.k8s.io" && resource == "csinodes";
        (
            if csinodes { "csinodes" } else { "other" },
            known_verb(verb),
        )
    }

    fn outcome(&self) -> &dyn Outcome {
        &self.decision
    }

    fn into_body(self) -> Vec<u8> {
        self.body
    }
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

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
