//! The authorization webhook for CSINode health: a kubelet may write the `csinodes/status`
//! subresource of its own CSINode and nothing else, as the in-tree Node authorizer decides for
//! CSINode itself.
//!
//! [`decide`] is the decision table over request attributes; [`review()`] answers a
//! SubjectAccessReview body (`authorization.k8s.io/v1` or `v1beta1`) with the response body.
//!
//! ```
//! use volume_health_authz::{AuthzPolicy, Decision, review};
//!
//! let body = br#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
//!   "spec": {"user": "system:node:node1", "groups": ["system:nodes"],
//!            "resourceAttributes": {"verb": "update", "group": "storage.k8s.io",
//!              "resource": "csinodes", "subresource": "status", "name": "node1"}}}"#;
//! let policy = AuthzPolicy { gate_enabled: true, deny_on_mismatch: false };
//! let answer = review(body, &policy).unwrap();
//! assert_eq!(answer.decision, Decision::Allow);
//! ```

mod decision;
mod review;

pub use decision::{
    AuthzPolicy, Decision, REASON_STATUS_GATED, REASON_STATUS_VERBS, REASON_SUBRESOURCES,
    REASON_VERBS, Reason, ResourceAttributes, decide,
};
pub use review::{Answer, ReviewError, review};
/// Reason for another node's CSINode: the upstream text, shared with the NodeRestriction rules.
pub use volume_health_validation::restriction::CSINODE_OTHER_NODE;
