//! What a request is decided with: the node restriction's settings and the field rules'.

use crate::field::Errors;
use crate::restriction::RestrictionPolicy;
use crate::rules::ConditionIdentity;

/// The settings of [`AdmissionRequest::validate`](super::AdmissionRequest::validate): the node
/// restriction's, then the field rules'.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The node restriction's: the `CSIVolumeHealth` gate and the claim writer list.
    pub restriction: RestrictionPolicy,
    /// Whether a driver's storage conditions must each have their own identity (on by
    /// default) or are checked exactly as in-tree.
    pub storage_condition_identity: ConditionIdentity,
    /// When set, at most this many field errors are kept for one object and the rest counted
    /// ([`Invalid::omitted`](super::Invalid::omitted)); a server answering untrusted writers
    /// sets [`MAX_REPORTED_ERRORS`](crate::status::MAX_REPORTED_ERRORS). `None`: every error.
    pub error_limit: Option<usize>,
}

impl Settings {
    /// The defaults, with the `CSIVolumeHealth` gate on or off.
    pub fn with_gate(enabled: bool) -> Self {
        Settings {
            restriction: RestrictionPolicy {
                gate_enabled: enabled,
                ..RestrictionPolicy::default()
            },
            ..Settings::default()
        }
    }

    /// The field errors of one object, kept up to [`error_limit`](Self::error_limit): the one
    /// place where no limit means every error.
    pub(crate) fn errors(&self) -> Errors {
        Errors::with_limit(self.error_limit.unwrap_or(usize::MAX))
    }
}
