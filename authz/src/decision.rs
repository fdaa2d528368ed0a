//! The decision table: the CSINode branch of the Node authorizer, extended for
//! `csinodes/status`.

use std::borrow::Cow;

use volume_health_validation::field::GoQuoted;
use volume_health_validation::identity::Groups;
use volume_health_validation::restriction::CSINODE_OTHER_NODE;

/// Reason for a verb a node may not use on CSINodes (upstream text).
pub const REASON_VERBS: &str = "can only get, create, update, patch, or delete a CSINode";
/// Reason for a subresource other than `status`, whatever the verb (upstream text).
pub const REASON_SUBRESOURCES: &str = "cannot authorize CSINode subresources";
/// Reason for `csinodes/status` while the gate is off (upstream text).
pub const REASON_STATUS_GATED: &str = "CSINode status access requires CSIVolumeHealth feature";
/// Reason for a verb a node may not use on `csinodes/status` (upstream text).
pub const REASON_STATUS_VERBS: &str = "can only get, update, or patch CSINode status";

/// Settings of the authorizer.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthzPolicy {
    /// Whether the `CSIVolumeHealth` gate is on; off, `csinodes/status` is never allowed.
    pub gate_enabled: bool,
    /// Answer a node asking for another node's CSINode with an explicit deny, so that no later
    /// authorizer (RBAC) can grant it.
    pub deny_on_mismatch: bool,
}

/// `spec.resourceAttributes` of a SubjectAccessReview, the fields the table reads; absent ones
/// are empty. Borrowed from the review's body where they hold no escapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes<'a> {
    /// `verb`
    pub verb: Cow<'a, str>,
    /// `group`
    pub group: Cow<'a, str>,
    /// `resource`
    pub resource: Cow<'a, str>,
    /// `subresource`
    pub subresource: Cow<'a, str>,
    /// `name`
    pub name: Cow<'a, str>,
}

/// Why an authorizer answered as it did: one of the fixed texts above, or a text naming the user.
pub type Reason = Cow<'static, str>;

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `allowed: true`.
    Allow,
    /// `allowed: false`, no `denied`: the next authorizer decides.
    NoOpinion(Reason),
    /// `denied: true`: no later authorizer is asked.
    Deny(Reason),
}

impl Decision {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::NoOpinion(_) => "no-opinion",
            Decision::Deny(_) => "deny",
        }
    }

    /// The reason sent back (empty for allow).
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow => "",
            Decision::NoOpinion(reason) | Decision::Deny(reason) => reason,
        }
    }

    fn no_opinion(reason: &'static str) -> Self {
        Decision::NoOpinion(Cow::Borrowed(reason))
    }
}

/// Decides a request of `user` with `groups`. `resource` is `None` for a non-resource request.
/// Anything outside the table is no opinion with an empty reason; nothing outside it is ever
/// allowed.
pub fn decide(
    user: &str,
    groups: Groups,
    resource: Option<&ResourceAttributes<'_>>,
    policy: &AuthzPolicy,
) -> Decision {
    let Some(node) = groups.node_name(user) else {
        return Decision::no_opinion("");
    };
    let Some(attrs) = resource else {
        return Decision::no_opinion("");
    };
    // Outside the CSINode table this authorizer has nothing to say, not even the Node
    // authorizer's "unknown node" (which answers those requests first anyway).
    if attrs.group != "storage.k8s.io" || attrs.resource != "csinodes" {
        return Decision::no_opinion("");
    }
    if node.is_empty() {
        return Decision::NoOpinion(Cow::Owned(format!(
            "unknown node for user {}",
            GoQuoted(user)
        )));
    }
    // `authorizeCSINode` (plugin/pkg/auth/authorizer/node/node_authorizer.go): the verbs allowed
    // depend on the subresource.
    match &*attrs.subresource {
        "" => {
            if !matches!(
                &*attrs.verb,
                "get" | "create" | "update" | "patch" | "delete"
            ) {
                return Decision::no_opinion(REASON_VERBS);
            }
        }
        "status" => {
            if !policy.gate_enabled {
                return Decision::no_opinion(REASON_STATUS_GATED);
            }
            if !matches!(&*attrs.verb, "get" | "update" | "patch") {
                return Decision::no_opinion(REASON_STATUS_VERBS);
            }
        }
        _ => return Decision::no_opinion(REASON_SUBRESOURCES),
    }
    if attrs.verb != "create" && attrs.name != node {
        return if policy.deny_on_mismatch {
            Decision::Deny(Cow::Borrowed(CSINODE_OTHER_NODE))
        } else {
            Decision::no_opinion(CSINODE_OTHER_NODE)
        };
    }
    Decision::Allow
}
