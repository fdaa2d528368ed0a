//! `/authorize`: the SubjectAccessReview of `csinodes/status`, as logged and counted.

use std::time::Duration;

use tracing::Level;
use volume_health_authz::{Answer, Decision, ResourceAttributes};

use super::endpoint::{Endpoint, Reviewed};
use super::rejection::Rejection;
use super::state::WebhookState;
use crate::telemetry::{HANDLERS_TARGET, event_at, logged};

/// `/authorize`: the SubjectAccessReview of `csinodes/status`.
pub(super) struct Authorize;

impl Endpoint for Authorize {
    const NAME: &'static str = "authorize";
    type Reviewed<'b> = Answer<'b>;

    fn decide<'b>(state: &WebhookState, body: &'b [u8]) -> Result<Answer<'b>, Rejection> {
        Ok(volume_health_authz::review(body, &state.authz)?)
    }
}

/// The level of a decision's log line. As for admission: the ordinary answers (allow, or no
/// opinion for everything outside the table) are counted in /metrics and logged at debug level;
/// a deny is logged at info.
fn level(decision: &Decision) -> Level {
    match decision {
        Decision::Deny(_) => Level::INFO,
        _ => Level::DEBUG,
    }
}

impl Reviewed for Answer<'_> {
    fn log(&self, endpoint: &'static str, elapsed: Duration) {
        let no_attrs = ResourceAttributes::default();
        let attrs = self.resource.as_ref().unwrap_or(&no_attrs);
        let decision = self.decision.label();
        event_at!(
            target: HANDLERS_TARGET,
            level(&self.decision),
            endpoint,
            user = logged(&self.user),
            verb = logged(&attrs.verb),
            group = logged(&attrs.group),
            resource = logged(&attrs.resource),
            subresource = logged(&attrs.subresource),
            name = logged(&attrs.name),
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

    fn decision(&self) -> &'static str {
        self.decision.label()
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
