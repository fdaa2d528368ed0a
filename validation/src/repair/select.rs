//! One list of conditions repaired: each condition read once, fixed or dropped, and the kept
//! ones chosen as a bounded selection, so that a list of any length costs time linear in it and
//! memory for [`MAX_HEALTH_CONDITIONS`] conditions.
//!
//! The choice, in this order: a condition whose status is outside its set is dropped (nothing
//! says how unhealthy it is); a reason or a mode that can never be stored is replaced, the
//! original kept in the message; a later condition with the identity of a kept one is dropped;
//! when more than [`MAX_HEALTH_CONDITIONS`] are left, the most severe are kept, the earlier of
//! equally severe ones, so that a more severe condition is never dropped to keep a less severe
//! one. The kept conditions stay in their order. A message over its limit is cut last.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use super::kind::{Impossible, REPLACED_REASON, Repair, RepairKind};
use crate::decode::{StorageConditionView, VolumeConditionView, hash128};
use crate::error::prefix;
use crate::field::FieldPath;
use crate::rules::names::is_condition_reason;
use crate::rules::{
    ACCESS_MODES, MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES, MAX_STORAGE_REASON_BYTES,
    MAX_VOLUME_MESSAGE_BYTES, MAX_VOLUME_REASON_BYTES, STORAGE_HEALTH_STATUSES,
    VOLUME_HEALTH_STATUSES, VOLUME_MODES,
};

/// Where repairs are reported, one at a time, as they are made.
pub(crate) type Sink<'s> = &'s mut dyn FnMut(Repair);

/// How severe a volume condition's status is, after the KEP's statuses: `DataLoss` (data is
/// gone) over `Inaccessible` (it cannot be reached now) over `Degraded` (it works, worse). A
/// status outside the set (kept only when stored as it is) ranks last.
fn volume_severity(status: &str) -> u8 {
    match status {
        "DataLoss" => 3,
        "Inaccessible" => 2,
        "Degraded" => 1,
        _ => 0,
    }
}

/// `StorageUnreachable` (the storage cannot be reached) over `StorageDegraded`.
fn storage_severity(status: &str) -> u8 {
    match status {
        "StorageUnreachable" => 2,
        "StorageDegraded" => 1,
        _ => 0,
    }
}

/// The place of a condition in the input: its entry (unused for a claim) and its index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin {
    pub(crate) entry: usize,
    pub(crate) index: usize,
}

/// The field path of the conditions of a list: a claim's, or an entry's of a list of entries.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ListPath {
    /// `status.healthStatus.healthConditions[i]`.
    Claim,
    /// `status.<field>[entry].healthConditions[i]`.
    Entries(&'static str),
}

impl ListPath {
    /// A repair of the item at `path` in entry `entry` (ignored in a claim's list).
    pub(crate) fn repair(self, path: String, entry: usize, kind: RepairKind) -> Repair {
        let entry = match self {
            ListPath::Claim => None,
            ListPath::Entries(_) => Some(entry),
        };
        Repair { path, entry, kind }
    }

    /// A repair of entry `entry` itself.
    pub(crate) fn entry_repair(self, entry: usize, kind: RepairKind) -> Repair {
        self.repair(self.entry(entry), entry, kind)
    }

    /// A repair of the condition at `at`.
    pub(crate) fn condition_repair(self, at: Origin, kind: RepairKind) -> Repair {
        self.repair(self.condition(at), at.entry, kind)
    }

    pub(crate) fn entry(self, entry: usize) -> String {
        match self {
            ListPath::Claim => "status.healthStatus".to_owned(),
            ListPath::Entries(field) => FieldPath::root("status")
                .child(field)
                .index(entry)
                .to_string(),
        }
    }

    pub(crate) fn condition(self, at: Origin) -> String {
        let status = FieldPath::root("status");
        match self {
            ListPath::Claim => status
                .child("healthStatus")
                .child("healthConditions")
                .index(at.index)
                .to_string(),
            ListPath::Entries(field) => {
                let entries = status.child(field);
                let entry = entries.index(at.entry);
                entry.child("healthConditions").index(at.index).to_string()
            }
        }
    }
}

/// A condition that repair keeps so far: as it will be written, and what choosing needs.
pub(crate) struct Candidate {
    /// The condition as JSON, as it will be written.
    pub(crate) json: Box<str>,
    /// Its identity: what makes two conditions duplicates.
    identity: u128,
    /// Every member as written, to compare a selection with a stored list.
    pub(crate) content: u128,
    severity: u8,
    at: Origin,
}

/// The conditions kept of one list: at most [`MAX_HEALTH_CONDITIONS`], in input order.
pub(crate) struct Selection {
    kept: Vec<Candidate>,
    /// What the kept conditions hold: their JSON and their records.
    bytes: usize,
    /// What a later condition with a kept one's identity is, or `None` when identities may
    /// repeat.
    duplicate: Option<RepairKind>,
    path: ListPath,
}

impl Selection {
    pub(crate) fn new(path: ListPath, duplicate: Option<RepairKind>) -> Self {
        Selection {
            kept: Vec::new(),
            bytes: 0,
            duplicate,
            path,
        }
    }

    /// Offers the next condition of the list. What is dropped is reported to `sink`: the
    /// condition itself, or a kept one it displaces.
    ///
    /// A condition with the identity of one dropped earlier is dropped too, as past the limit:
    /// the earlier one left the selection for a more severe one, and a later one of the same
    /// status never outranks what displaced it.
    pub(crate) fn offer(&mut self, candidate: Candidate, sink: Sink<'_>) {
        let mut report = |at: Origin, kind| sink(self.path.condition_repair(at, kind));
        if let Some(kind) = self.duplicate
            && self.kept.iter().any(|k| k.identity == candidate.identity)
        {
            report(candidate.at, kind);
            return;
        }
        if self.kept.len() < MAX_HEALTH_CONDITIONS {
            self.bytes += candidate.bytes();
            self.kept.push(candidate);
            return;
        }
        // The latest of the least severe: the one the order ranks last.
        let last = self
            .kept
            .iter()
            .enumerate()
            .min_by_key(|(i, k)| (k.severity, std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        match last {
            Some(i) if self.kept[i].severity < candidate.severity => {
                let displaced = self.kept.remove(i);
                report(displaced.at, RepairKind::ConditionPastLimit);
                self.bytes = self.bytes - displaced.bytes() + candidate.bytes();
                self.kept.push(candidate);
            }
            _ => report(candidate.at, RepairKind::ConditionPastLimit),
        }
    }

    /// The kept conditions, in input order.
    pub(crate) fn kept(&self) -> &[Candidate] {
        &self.kept
    }

    /// What the selection holds, in bytes: itself, its records and the kept conditions' JSON,
    /// at least what they will take written.
    pub(crate) fn bytes(&self) -> usize {
        std::mem::size_of::<Selection>()
            + self.kept.capacity() * std::mem::size_of::<Candidate>()
            + self.bytes
    }
}

impl Candidate {
    fn bytes(&self) -> usize {
        self.json.len()
    }
}

/// A message as a repair leaves it: the driver's words, then the original of each field
/// replaced, where it fits.
fn message_with<'m>(
    message: Option<&'m str>,
    replaced: &[(Impossible, &str)],
) -> Option<Cow<'m, str>> {
    let notes: Vec<String> = replaced
        .iter()
        .filter(|(_, original)| !original.is_empty())
        .map(|(field, original)| format!("{}: {original}", field.field()))
        .collect();
    if notes.is_empty() {
        return message.map(Cow::Borrowed);
    }
    let notes = notes.join("; ");
    Some(Cow::Owned(match message {
        Some(message) if !message.is_empty() => format!("{message} ({notes})"),
        _ => notes,
    }))
}

/// Cuts `message` to at most `max` bytes at a character boundary, reporting it as the message
/// of the condition at `at`.
fn cut<'m>(
    message: Cow<'m, str>,
    max: usize,
    (path, at): (ListPath, Origin),
    sink: Sink<'_>,
) -> Cow<'m, str> {
    let from = message.len();
    if from <= max {
        return message;
    }
    let to = prefix(&message, max).len();
    sink(path.repair(
        format!("{}.message", path.condition(at)),
        at.entry,
        RepairKind::MessageCut { from, to },
    ));
    match message {
        Cow::Borrowed(text) => Cow::Borrowed(&text[..to]),
        Cow::Owned(mut text) => {
            text.truncate(to);
            Cow::Owned(text)
        }
    }
}

/// What repair reads of the stored list a volume condition list is matched to: whether an
/// identity is stored, and with which message (upstream's ratcheting matches by (status,
/// reason), and then checks a field only when it changed).
pub(crate) trait StoredVolume {
    /// The stored message of the first stored condition with this (status, reason), hashed;
    /// `None` when none is stored. An absent message hashes as empty.
    fn message_of(&self, status: &str, reason: &str) -> Option<u128>;
}

/// The key of a volume condition as [`StoredVolume`] is asked.
pub(crate) fn volume_identity(status: &str, reason: &str) -> u128 {
    hash128(&(status, reason))
}

/// A volume condition's message as [`StoredVolume`] compares it.
pub(crate) fn message_hash(message: Option<&str>) -> u128 {
    hash128(message.unwrap_or_default())
}

/// A volume condition as repair writes it: every member of `VolumeHealthCondition`.
#[derive(Serialize)]
pub(crate) struct VolumeOut<'c> {
    status: &'c str,
    reason: &'c str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'c str>,
}

impl<'c> VolumeOut<'c> {
    /// A condition as it was given.
    pub(crate) fn of(c: &'c VolumeConditionView<'_>) -> Self {
        VolumeOut {
            status: &c.status,
            reason: &c.reason,
            message: c.message.as_deref(),
        }
    }
}

/// A condition of a claim or a pod entry, repaired: `None` when it is dropped (reported).
///
/// The reason's format is upstream's handwritten check, never ratcheted: an out-of-format
/// reason is always replaced. The rest is declarative: a condition whose (status, reason) is
/// stored is not checked again, and its message only when it changed.
pub(crate) fn volume_condition(
    c: &VolumeConditionView<'_>,
    at: Origin,
    stored: &dyn StoredVolume,
    path: ListPath,
    sink: Sink<'_>,
) -> Option<Candidate> {
    let status = &*c.status;
    let mut reason: &str = &c.reason;
    let mut replaced = None;
    if !reason.is_empty() && !is_condition_reason(reason) {
        replaced = Some(reason);
        reason = REPLACED_REASON;
    }
    if stored.message_of(status, reason).is_none() {
        if !VOLUME_HEALTH_STATUSES.contains(&status) {
            sink(path.condition_repair(at, RepairKind::ImpossibleCondition(Impossible::Status)));
            return None;
        }
        if reason.is_empty() || reason.len() > MAX_VOLUME_REASON_BYTES {
            replaced = Some(reason);
            reason = REPLACED_REASON;
        }
    }
    if replaced.is_some() {
        sink(path.condition_repair(at, RepairKind::ReplacedField(Impossible::Reason)));
    }
    let notes: Vec<(Impossible, &str)> = replaced
        .map(|r| (Impossible::Reason, r))
        .into_iter()
        .collect();
    let mut message = message_with(c.message.as_deref(), &notes);
    let unchanged = stored.message_of(status, reason) == Some(message_hash(message.as_deref()));
    if !unchanged {
        message = message.map(|m| cut(m, MAX_VOLUME_MESSAGE_BYTES, (path, at), sink));
    }
    let out = VolumeOut {
        status,
        reason,
        message: message.as_deref(),
    };
    Some(Candidate {
        json: json(&out),
        identity: volume_identity(status, reason),
        content: hash128(&(status, reason, message.as_deref())),
        severity: volume_severity(status),
        at,
    })
}

/// A storage condition as repair writes it: every member of `StorageHealthCondition`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StorageOut<'c> {
    status: &'c str,
    reason: &'c str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'c str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    access_mode: Option<&'c str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    volume_mode: Option<&'c str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_transition_time: Option<&'c Time>,
}

impl<'c> StorageOut<'c> {
    /// A condition as it was given.
    pub(crate) fn of(c: &'c StorageConditionView<'_>) -> Self {
        StorageOut {
            status: &c.status,
            reason: &c.reason,
            message: c.message.as_deref(),
            access_mode: c.access_mode.as_deref(),
            volume_mode: c.volume_mode.as_deref(),
            last_transition_time: c.last_transition_time.as_ref(),
        }
    }

    /// What it is compared by: every member.
    pub(crate) fn content(&self) -> u128 {
        hash128(&(
            self.status,
            self.reason,
            self.message,
            self.access_mode,
            self.volume_mode,
            self.last_transition_time.map(|t| t.0),
        ))
    }
}

/// A storage condition, repaired: `None` when it is dropped (reported). Upstream never
/// ratchets a CSINode rule, so every field is checked on every write.
pub(crate) fn storage_condition(
    c: &StorageConditionView<'_>,
    at: Origin,
    path: ListPath,
    sink: Sink<'_>,
) -> Option<Candidate> {
    let status = &*c.status;
    if !STORAGE_HEALTH_STATUSES.contains(&status) {
        sink(path.condition_repair(at, RepairKind::ImpossibleCondition(Impossible::Status)));
        return None;
    }
    let mut notes: Vec<(Impossible, &str)> = Vec::new();
    let mut reason: &str = &c.reason;
    if !is_condition_reason(reason) || reason.len() > MAX_STORAGE_REASON_BYTES {
        notes.push((Impossible::Reason, reason));
        reason = REPLACED_REASON;
    }
    let access_mode = mode(
        c.access_mode.as_deref(),
        ACCESS_MODES,
        Impossible::AccessMode,
        &mut notes,
    );
    let volume_mode = mode(
        c.volume_mode.as_deref(),
        VOLUME_MODES,
        Impossible::VolumeMode,
        &mut notes,
    );
    for (field, _) in &notes {
        sink(path.condition_repair(at, RepairKind::ReplacedField(*field)));
    }
    let message = message_with(c.message.as_deref(), &notes)
        .map(|m| cut(m, MAX_STORAGE_MESSAGE_BYTES, (path, at), sink));
    let out = StorageOut {
        status,
        reason,
        message: message.as_deref(),
        access_mode,
        volume_mode,
        last_transition_time: c.last_transition_time.as_ref(),
    };
    Some(Candidate {
        json: json(&out),
        identity: hash128(&(status, reason, access_mode, volume_mode)),
        content: out.content(),
        severity: storage_severity(status),
        at,
    })
}

/// A mode as a repair leaves it: kept when it is one of `set`, else unset, the original noted.
fn mode<'c>(
    value: Option<&'c str>,
    set: &[&str],
    field: Impossible,
    notes: &mut Vec<(Impossible, &'c str)>,
) -> Option<&'c str> {
    let value = value?;
    if set.contains(&value) {
        return Some(value);
    }
    notes.push((field, value));
    None
}

/// A condition's JSON: strings and a timestamp, which `serde_json` always writes.
fn json(value: &impl Serialize) -> Box<str> {
    serde_json::to_string(value)
        .expect("a condition serializes")
        .into_boxed_str()
}
