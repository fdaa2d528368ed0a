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
    ///
    /// ```
    /// use volume_health_validation::rules::ConditionIdentity;
    /// use volume_health_validation::{
    ///     AdmissionRequest, HealthResource, Operation, Settings, UserInfo,
    /// };
    ///
    /// let off = Settings::with_gate(false);
    /// assert!(!off.restriction.gate_enabled);
    /// // The rest are the defaults: this project's condition rule on, every error kept.
    /// assert_eq!(off.storage_condition_identity, ConditionIdentity::Unique);
    /// assert_eq!(off.error_limit, None);
    /// // With the gate off, a node may not write its own CSINode's status.
    /// let request = AdmissionRequest::new(HealthResource::CsiNodes, Operation::Update)
    ///     .with_subresource("status")
    ///     .with_name("node-1")
    ///     .with_user(UserInfo::node("node-1"));
    /// assert_eq!(request.validate(&off)?.code(), Some(403));
    /// assert_eq!(request.validate(&Settings::with_gate(true))?.code(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
