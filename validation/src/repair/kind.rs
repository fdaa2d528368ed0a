//! What a repair did: one [`Repair`] per change, its [`RepairKind`], and the label each kind has
//! in metrics and audit annotations.

use std::fmt;

use crate::rules::{MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES};

/// One change a repair made: where in the input, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The path of the item dropped, merged or changed, with the input's indexes, e.g.
    /// `status.volumeHealth[2].healthConditions[17]`, rendered as
    /// [`FieldPath`](crate::field::FieldPath) renders.
    pub path: String,
    /// The index of the entry it is in, in a list of entries (a pod's `volumeHealth`, a
    /// CSINode's `storageHealth`): what names the volume or the driver to fix. `None` in a
    /// claim's list.
    pub entry: Option<usize>,
    /// What was done, and why.
    pub kind: RepairKind,
}

/// A `Warning` header's text: `<path>: <what was done>`, bounded (no value of the input).
impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind)
    }
}

/// What a repair did. The path is the condition's or the entry's; of a cut message, the
/// message's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairKind {
    /// A condition dropped: its status is outside its set, so nothing says how unhealthy it is.
    ImpossibleCondition(Impossible),
    /// A condition kept with this field replaced: a reason by [`REPLACED_REASON`], a mode
    /// unset. The original is kept in the message where it fits, so the stored status still
    /// says what the driver said.
    ReplacedField(Impossible),
    /// A condition dropped: an earlier condition has its (status, reason).
    DuplicateCondition,
    /// A storage condition dropped: an earlier condition of the driver has its (status, reason,
    /// accessMode, volumeMode) ([`ConditionIdentity::Unique`](crate::rules::ConditionIdentity)).
    IndistinctCondition,
    /// A condition dropped: [`MAX_HEALTH_CONDITIONS`] more severe or earlier ones are kept.
    ConditionPastLimit,
    /// A message cut at a character boundary, from `from` to `to` bytes.
    MessageCut {
        /// Its length before, in bytes.
        from: usize,
        /// Its length after, in bytes.
        to: usize,
    },
    /// A Pod entry dropped: it names no volume of `spec.volumes`.
    UnknownVolume,
    /// A Pod entry dropped: it has no name.
    UnnamedEntry,
    /// A Pod or CSINode entry merged into the earlier entry of its name: its conditions join
    /// that entry's, those that are not duplicates kept.
    MergedEntry,
    /// A CSINode entry dropped: its name is not a CSI driver name (empty, longer than 63 bytes,
    /// or not a DNS-1123 subdomain once lower-cased).
    InvalidDriverName,
}

/// The field of a condition that can never be stored as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Impossible {
    /// `status` empty or outside its set.
    Status,
    /// `reason` empty, too long, or not in the reason format.
    Reason,
    /// `accessMode` set and outside [`ACCESS_MODES`](crate::rules::ACCESS_MODES).
    AccessMode,
    /// `volumeMode` set and outside [`VOLUME_MODES`](crate::rules::VOLUME_MODES).
    VolumeMode,
}

impl Impossible {
    /// The field's name, as the API spells it.
    pub(crate) fn field(self) -> &'static str {
        match self {
            Impossible::Status => "status",
            Impossible::Reason => "reason",
            Impossible::AccessMode => "accessMode",
            Impossible::VolumeMode => "volumeMode",
        }
    }
}

/// The reason a condition keeps when its own can never be stored: it says why, in the reason
/// format, and the original follows in the message.
pub const REPLACED_REASON: &str = "InvalidReason";

impl fmt::Display for RepairKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairKind::ImpossibleCondition(field) => write!(
                f,
                "condition dropped: its {} can never be valid",
                field.field()
            ),
            RepairKind::ReplacedField(Impossible::Reason) => write!(
                f,
                "condition kept with reason {REPLACED_REASON}: its reason can never be valid (the original is in the message)"
            ),
            RepairKind::ReplacedField(field) => write!(
                f,
                "condition kept without its {0}: its {0} can never be valid (the original is in the message)",
                field.field()
            ),
            RepairKind::DuplicateCondition => {
                f.write_str("condition dropped: an earlier condition has its status and reason")
            }
            RepairKind::IndistinctCondition => f.write_str(
                "condition dropped: an earlier condition has its status, reason, accessMode and volumeMode",
            ),
            RepairKind::ConditionPastLimit => write!(
                f,
                "condition dropped: {MAX_HEALTH_CONDITIONS} more severe or earlier conditions are kept"
            ),
            RepairKind::MessageCut { from, to } => {
                write!(f, "message cut from {from} to {to} bytes")
            }
            RepairKind::UnknownVolume => {
                f.write_str("entry dropped: it names no volume of spec.volumes")
            }
            RepairKind::UnnamedEntry => f.write_str("entry dropped: it has no name"),
            RepairKind::MergedEntry => f.write_str(
                "entry merged into the earlier entry of its name: its conditions kept there",
            ),
            RepairKind::InvalidDriverName => {
                f.write_str("entry dropped: its name is not a CSI driver name")
            }
        }
    }
}

impl RepairKind {
    /// The label of this kind in metrics and audit annotations: one of [`LABELS`].
    ///
    /// ```
    /// use volume_health_validation::repair::{LABELS, RepairKind};
    ///
    /// let cut = RepairKind::MessageCut { from: 1500, to: 1024 };
    /// assert_eq!(cut.label(), "message_cut");
    /// // A metric can export every label from the start.
    /// assert!(LABELS.contains(&cut.label()));
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            RepairKind::ImpossibleCondition(_) => "impossible_status",
            RepairKind::ReplacedField(Impossible::Reason | Impossible::Status) => "replaced_reason",
            RepairKind::ReplacedField(Impossible::AccessMode) => "replaced_access_mode",
            RepairKind::ReplacedField(Impossible::VolumeMode) => "replaced_volume_mode",
            RepairKind::DuplicateCondition => "duplicate_condition",
            RepairKind::IndistinctCondition => "indistinct_condition",
            RepairKind::ConditionPastLimit => "condition_past_limit",
            RepairKind::MessageCut { .. } => "message_cut",
            RepairKind::UnknownVolume => "unknown_volume",
            RepairKind::UnnamedEntry => "unnamed_entry",
            RepairKind::MergedEntry => "merged_entry",
            RepairKind::InvalidDriverName => "invalid_driver_name",
        }
    }

    /// What every repair of this kind did, in words: the same text for every repair that
    /// shares the label (no value of the input).
    ///
    /// ```
    /// use volume_health_validation::repair::RepairKind;
    ///
    /// let cut = RepairKind::MessageCut { from: 1500, to: 1024 };
    /// // The text of one repair holds its lengths; the summary holds none.
    /// assert_eq!(cut.to_string(), "message cut from 1500 to 1024 bytes");
    /// assert_eq!(cut.summary(), "message cut at a character boundary to at most 1024 bytes");
    /// ```
    pub fn summary(&self) -> String {
        match self {
            RepairKind::MessageCut { .. } => format!(
                "message cut at a character boundary to at most {MAX_STORAGE_MESSAGE_BYTES} bytes"
            ),
            other => other.to_string(),
        }
    }
}

/// Every label [`RepairKind::label`] gives, in a fixed order: a metric exports each from the
/// start.
pub const LABELS: [&str; 12] = [
    "impossible_status",
    "replaced_reason",
    "replaced_access_mode",
    "replaced_volume_mode",
    "duplicate_condition",
    "indistinct_condition",
    "condition_past_limit",
    "message_cut",
    "unknown_volume",
    "unnamed_entry",
    "merged_entry",
    "invalid_driver_name",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_is_listed_once() {
        use std::collections::BTreeSet;
        let labels: BTreeSet<&str> = LABELS.into_iter().collect();
        assert_eq!(labels.len(), LABELS.len());
        let kinds = [
            RepairKind::ImpossibleCondition(Impossible::Status),
            RepairKind::ReplacedField(Impossible::Reason),
            RepairKind::ReplacedField(Impossible::AccessMode),
            RepairKind::ReplacedField(Impossible::VolumeMode),
            RepairKind::DuplicateCondition,
            RepairKind::IndistinctCondition,
            RepairKind::ConditionPastLimit,
            RepairKind::MessageCut { from: 2, to: 1 },
            RepairKind::UnknownVolume,
            RepairKind::UnnamedEntry,
            RepairKind::MergedEntry,
            RepairKind::InvalidDriverName,
        ];
        let given: BTreeSet<&str> = kinds.iter().map(RepairKind::label).collect();
        assert_eq!(given, labels);
    }
}
