//! What the handlers decide by: the settings from the command line, and the state built from
//! them once and shared by every request.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use volume_health_authz::AuthzPolicy;
use volume_health_validation::HealthResource;
use volume_health_validation::restriction::RestrictionPolicy;
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::status::MAX_REPORTED_ERRORS;

use super::body::BodyBudget;
use crate::enforcement::EnforcementAction;
use crate::gates::FeatureGates;
use crate::metrics::Metrics;

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
    /// `/mutate` repairs a status write that validation would refuse (`--repair`).
    pub repair: bool,
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
    /// What requests are decided with (the library's settings, not these).
    pub(super) decisions: Arc<volume_health_validation::Settings>,
    pub(super) authz: AuthzPolicy,
    pub(super) gates: FeatureGates,
    pub(super) enforcement_action: EnforcementAction,
    pub(super) repair: bool,
    pub(super) metrics: Metrics,
    pub(super) bodies: BodyBudget,
}

impl WebhookState {
    /// State for `settings`, reporting into `metrics`.
    pub fn new(settings: &Settings, metrics: Metrics) -> Self {
        let bodies = BodyBudget::new(
            settings.max_request_bytes,
            settings.max_in_flight_bytes,
            settings.request_timeout,
        );
        let resources = HealthResource::ALL.map(HealthResource::resource);
        metrics.expect_violations(settings.enforcement_action.as_str(), &resources);
        if settings.repair {
            metrics.expect_repairs(&resources, &volume_health_validation::repair::LABELS);
        }
        WebhookState {
            decisions: Arc::new(volume_health_validation::Settings {
                restriction: RestrictionPolicy {
                    gate_enabled: settings.gates.csi_volume_health,
                    pvc_health_writers: settings.pvc_health_writers.clone(),
                },
                storage_condition_identity: settings.storage_condition_identity,
                error_limit: Some(MAX_REPORTED_ERRORS),
            }),
            authz: AuthzPolicy {
                gate_enabled: settings.gates.csi_volume_health,
                deny_on_mismatch: settings.authz_deny_on_mismatch,
            },
            gates: settings.gates,
            enforcement_action: settings.enforcement_action,
            repair: settings.repair,
            metrics,
            bodies,
        }
    }
}
