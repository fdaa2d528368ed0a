//! Repair: the smallest change that makes a volume health report valid, for writers before
//! they write and for a mutating webhook before the apiserver validates.
//!
//! A writer that sends a report the apiserver refuses retries it forever, and a kubelet's pod
//! status write also carries the container states, so one duplicate condition can hold a pod in
//! `Terminating`. [`repair_pvc`], [`repair_pod`] and [`repair_csinode`] change the new object in
//! place until [`validate_pvc`](crate::validate_pvc), [`validate_pod`](crate::validate_pod) and
//! [`validate_csinode`](crate::validate_csinode) accept it against the same old object, and
//! return each change as a [`Repair`]: the input's path of what was dropped or cut, and why.
//! What a repair does, in this order:
//!
//! - Pod `status.volumeHealth`: an entry naming no volume of `spec.volumes` is dropped; then a
//!   later entry with the name of an earlier one, and an entry without a name.
//! - CSINode `status.storageHealth`: a later entry with the driver name of an earlier one is
//!   dropped, and so is an entry whose name is not a CSI driver name (nothing smaller makes it
//!   valid: a name is the entry's key, and another name would be another driver's report).
//! - The conditions of one claim, one pod entry or one driver: first a condition that can never
//!   be valid (a status outside its set, a reason empty, longer than 256 bytes or not in the
//!   reason format; for storage also an access or volume mode outside its set) is dropped, then
//!   a later condition with the identity of an earlier one ((status, reason); for storage, with
//!   [`ConditionIdentity::Unique`], (status, reason, accessMode, volumeMode)), then the
//!   conditions past the 16th; last, a message longer than 1024 bytes is cut at a UTF-8
//!   character boundary. Dropping what can never be valid first keeps as many valid conditions
//!   as the limit allows.
//!
//! With an old object the repair ratchets as the rules do (section 2.6 of the specification):
//! what the apiserver accepts because it is stored as it is (an unchanged list, a condition
//! whose (status, reason) is stored, an unchanged message, a stored entry without a name) is
//! kept, and what it checks on every write (a volume that does not exist, a reason's format,
//! every CSINode rule) is repaired. So a write the library accepts with its old object is never
//! changed, and repairing a repaired write changes nothing. Without an old object (a create, or
//! a writer that does not hold the stored object) every rule applies: the result is accepted
//! whatever is stored.
//!
//! For writers, [`unchanged`] tells whether a report changes what is stored, as the kubelet
//! ([`Policy::IgnoreMessages`]) or external-health-monitor ([`Policy::CompareMessages`]) decides
//! it, and [`carry_transition_times`] keeps the stored `lastTransitionTime` of what did not
//! change.

mod report;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, Pod, PodVolumeHealth, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageHealth, StorageHealthCondition};

pub use report::{Policy, Report, carry_transition_times, unchanged};

use crate::decode::{
    RawList, same_list, storage_condition_view, typed_pod_volume_health, volume_condition_view,
};
use crate::error::prefix;
use crate::field::FieldPath;
use crate::rules::names::{is_condition_reason, is_csi_driver_name};
use crate::rules::{
    ACCESS_MODES, ConditionIdentity, MAX_HEALTH_CONDITIONS, MAX_STORAGE_MESSAGE_BYTES,
    MAX_STORAGE_REASON_BYTES, MAX_VOLUME_MESSAGE_BYTES, MAX_VOLUME_REASON_BYTES,
    STORAGE_HEALTH_STATUSES, VOLUME_HEALTH_STATUSES, VOLUME_MODES,
};

/// One change a repair made: where in the input, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The path of the item dropped or of the message cut, with the input's indexes, e.g.
    /// `status.volumeHealth[2].healthConditions[17]`, rendered as [`FieldPath`] renders.
    pub path: String,
    /// What was done, and why.
    pub kind: RepairKind,
}

/// A `Warning` header's text: `<path>: <what was done>`, bounded (no value of the input).
impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind)
    }
}

/// What a repair did. The path of a dropped item is the item's; of a cut message, the message's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairKind {
    /// A condition dropped: this field of it can never be valid.
    ImpossibleCondition(Impossible),
    /// A condition dropped: an earlier condition has its (status, reason).
    DuplicateCondition,
    /// A storage condition dropped: an earlier condition of the driver has its (status, reason,
    /// accessMode, volumeMode) ([`ConditionIdentity::Unique`]).
    IndistinctCondition,
    /// A condition dropped: past the [`MAX_HEALTH_CONDITIONS`]th.
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
    /// A Pod or CSINode entry dropped: an earlier entry has its name.
    DuplicateEntry,
    /// A CSINode entry dropped: its name is not a CSI driver name (empty, longer than 63 bytes,
    /// or not a DNS-1123 subdomain once lower-cased).
    InvalidDriverName,
}

/// The field that makes a condition impossible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Impossible {
    /// `status` empty or outside its set.
    Status,
    /// `reason` empty, too long, or not in the reason format.
    Reason,
    /// `accessMode` set and outside [`ACCESS_MODES`].
    AccessMode,
    /// `volumeMode` set and outside [`VOLUME_MODES`].
    VolumeMode,
}

impl fmt::Display for RepairKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairKind::ImpossibleCondition(field) => {
                let field = match field {
                    Impossible::Status => "status",
                    Impossible::Reason => "reason",
                    Impossible::AccessMode => "accessMode",
                    Impossible::VolumeMode => "volumeMode",
                };
                write!(f, "condition dropped: its {field} can never be valid")
            }
            RepairKind::DuplicateCondition => {
                f.write_str("condition dropped: an earlier condition has its status and reason")
            }
            RepairKind::IndistinctCondition => f.write_str(
                "condition dropped: an earlier condition has its status, reason, accessMode and volumeMode",
            ),
            RepairKind::ConditionPastLimit => write!(
                f,
                "condition dropped: at most {MAX_HEALTH_CONDITIONS} conditions are kept"
            ),
            RepairKind::MessageCut { from, to } => {
                write!(f, "message cut from {from} to {to} bytes")
            }
            RepairKind::UnknownVolume => {
                f.write_str("entry dropped: it names no volume of spec.volumes")
            }
            RepairKind::UnnamedEntry => f.write_str("entry dropped: it has no name"),
            RepairKind::DuplicateEntry => {
                f.write_str("entry dropped: an earlier entry has its name")
            }
            RepairKind::InvalidDriverName => {
                f.write_str("entry dropped: its name is not a CSI driver name")
            }
        }
    }
}

/// Repairs a claim's `status.healthStatus` until [`validate_pvc`](crate::validate_pvc) accepts
/// it against `old`; `old` is the stored claim on update (`None`: every rule applies).
pub fn repair_pvc(
    claim: &mut PersistentVolumeClaim,
    old: Option<&PersistentVolumeClaim>,
) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.health_status.as_ref());
    match claim.status.as_mut().and_then(|s| s.health_status.as_mut()) {
        Some(health) => repair_volume_health_status(health, old),
        None => Vec::new(),
    }
}

/// Repairs a `VolumeHealthStatus` found at `status.healthStatus` (a claim's), `old` the stored
/// one.
pub fn repair_volume_health_status(
    new: &mut VolumeHealthStatus,
    old: Option<&VolumeHealthStatus>,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let Some(conditions) = new.health_conditions.as_mut() else {
        return repairs;
    };
    let status = FieldPath::root("status");
    let health = status.child("healthStatus");
    let path = health.child("healthConditions");
    let old = old.and_then(|old| old.health_conditions.as_deref());
    let mut list = Tracked::new(std::mem::take(conditions));
    drop_reasons_out_of_format(&mut list, &path, &mut repairs);
    repair_volume_conditions(&mut list, old, &path, &mut repairs);
    *conditions = list.items;
    repairs
}

/// Repairs a pod's `status.volumeHealth` until [`validate_pod`](crate::validate_pod) accepts it
/// against `old`; volume names are looked up in the pod's own `spec.volumes`.
pub fn repair_pod(pod: &mut Pod, old: Option<&Pod>) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.volume_health.as_deref());
    let volumes: HashSet<String> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .map(|volume| volume.name.clone())
        .collect();
    match pod.status.as_mut().and_then(|s| s.volume_health.as_mut()) {
        Some(entries) => repair_pod_volume_health(entries, old, |name| volumes.contains(name)),
        None => Vec::new(),
    }
}

/// Repairs a `status.volumeHealth` list, `old` the stored one; `volume_exists` tells whether a
/// name is an entry of the pod's `spec.volumes`.
pub fn repair_pod_volume_health(
    new: &mut Vec<PodVolumeHealth>,
    old: Option<&[PodVolumeHealth]>,
    volume_exists: impl Fn(&str) -> bool,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let status = FieldPath::root("status");
    let path = status.child("volumeHealth");
    let mut entries = Tracked::new(std::mem::take(new));

    // Handwritten upstream, never ratcheted: the volume must exist, the reasons be in format.
    let verdicts = entries
        .items
        .iter()
        .map(|entry| {
            (!entry.name.is_empty() && !volume_exists(&entry.name))
                .then_some(RepairKind::UnknownVolume)
        })
        .collect();
    entries.drop_marked(verdicts, &path, &mut repairs);
    // The input's indexes of the conditions left in each entry, by the entry's input index.
    let mut origins: HashMap<usize, Vec<usize>> = HashMap::new();
    for (entry, &i) in entries.items.iter_mut().zip(&entries.origin) {
        let item = path.index(i);
        let conditions_path = item.child("healthConditions");
        if let Some(conditions) = entry.health_conditions.as_mut() {
            let mut list = Tracked::new(std::mem::take(conditions));
            drop_reasons_out_of_format(&mut list, &conditions_path, &mut repairs);
            *conditions = list.items;
            origins.insert(i, list.origin);
        }
    }

    // Declarative upstream: nothing more when the list is now the stored one.
    let stored = old.map(typed_pod_volume_health);
    if !same_list(
        Some(&typed_pod_volume_health(&entries.items)),
        stored.as_ref(),
    ) {
        let old_entries = first_by_name(old.unwrap_or_default(), |e| &e.name);
        let mut seen = HashSet::new();
        let verdicts = entries
            .items
            .iter()
            .map(|entry| {
                if !seen.insert(entry.name.as_str()) {
                    Some(RepairKind::DuplicateEntry)
                } else if entry.name.is_empty() && !old_entries.contains_key("") {
                    // A stored entry without a name is matched and accepted again.
                    Some(RepairKind::UnnamedEntry)
                } else {
                    None
                }
            })
            .collect();
        entries.drop_marked(verdicts, &path, &mut repairs);
        for (entry, &i) in entries.items.iter_mut().zip(&entries.origin) {
            let Some(conditions) = entry.health_conditions.as_mut() else {
                continue;
            };
            let item = path.index(i);
            let conditions_path = item.child("healthConditions");
            let old = old_entries
                .get(entry.name.as_str())
                .and_then(|old| old.health_conditions.as_deref());
            let mut list = Tracked::new(std::mem::take(conditions));
            if let Some(origin) = origins.remove(&i) {
                list.origin = origin;
            }
            repair_volume_conditions(&mut list, old, &conditions_path, &mut repairs);
            *conditions = list.items;
        }
    }
    *new = entries.items;
    repairs
}

/// Repairs a CSINode's `status.storageHealth` until [`validate_csinode`](crate::validate_csinode)
/// accepts it against `old`, this project's [`ConditionIdentity::Unique`] included.
pub fn repair_csinode(node: &mut CSINode, old: Option<&CSINode>) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.storage_health.as_deref());
    match node.status.as_mut().and_then(|s| s.storage_health.as_mut()) {
        Some(entries) => repair_storage_health(entries, old, ConditionIdentity::Unique),
        None => Vec::new(),
    }
}

/// Repairs a `status.storageHealth` list, `old` the stored one, with or without this project's
/// rule on conditions' identities. Only that rule ratchets (per entry, as it is checked); every
/// upstream CSINode rule applies to every write.
pub fn repair_storage_health(
    new: &mut Vec<StorageHealth>,
    old: Option<&[StorageHealth]>,
    identity: ConditionIdentity,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let status = FieldPath::root("status");
    let path = status.child("storageHealth");
    let mut entries = Tracked::new(std::mem::take(new));
    let mut seen = HashSet::new();
    let verdicts = entries
        .items
        .iter()
        .map(|entry| {
            if !seen.insert(entry.name.as_str()) {
                Some(RepairKind::DuplicateEntry)
            } else if !is_csi_driver_name(&entry.name) {
                Some(RepairKind::InvalidDriverName)
            } else {
                None
            }
        })
        .collect();
    entries.drop_marked(verdicts, &path, &mut repairs);
    let old_entries = first_by_name(old.unwrap_or_default(), |e| &e.name);
    for (entry, &i) in entries.items.iter_mut().zip(&entries.origin) {
        let Some(conditions) = entry.health_conditions.as_mut() else {
            continue;
        };
        let item = path.index(i);
        let conditions_path = item.child("healthConditions");
        // Only a name's first stored entry is matched, as the rule matches it.
        let old = old_entries
            .get(entry.name.as_str())
            .map(|old| old.health_conditions.as_deref().unwrap_or_default());
        let mut list = Tracked::new(std::mem::take(conditions));
        repair_storage_conditions(&mut list, old, identity, &conditions_path, &mut repairs);
        *conditions = list.items;
    }
    *new = entries.items;
    repairs
}

/// A list being repaired: its items and, for each, its index in the input.
struct Tracked<T> {
    items: Vec<T>,
    origin: Vec<usize>,
}

impl<T> Tracked<T> {
    fn new(items: Vec<T>) -> Self {
        let origin = (0..items.len()).collect();
        Tracked { items, origin }
    }

    /// Drops the items with a verdict (one per item, in order), recording each.
    fn drop_marked(
        &mut self,
        verdicts: Vec<Option<RepairKind>>,
        path: &FieldPath<'_>,
        repairs: &mut Vec<Repair>,
    ) {
        if verdicts.iter().all(Option::is_none) {
            return;
        }
        let items = std::mem::take(&mut self.items);
        let origin = std::mem::take(&mut self.origin);
        for ((item, i), verdict) in items.into_iter().zip(origin).zip(verdicts) {
            match verdict {
                Some(kind) => repairs.push(Repair {
                    path: path.index(i).to_string(),
                    kind,
                }),
                None => {
                    self.items.push(item);
                    self.origin.push(i);
                }
            }
        }
    }

    /// Keeps the first `max` items, recording each one dropped.
    fn cap(&mut self, max: usize, path: &FieldPath<'_>, repairs: &mut Vec<Repair>) {
        for &i in self.origin.iter().skip(max) {
            repairs.push(Repair {
                path: path.index(i).to_string(),
                kind: RepairKind::ConditionPastLimit,
            });
        }
        self.items.truncate(max);
        self.origin.truncate(max);
    }
}

/// The first item of each name, as the rules match a new entry to a stored one.
fn first_by_name<T>(items: &[T], name: impl Fn(&T) -> &String) -> HashMap<&str, &T> {
    let mut first = HashMap::new();
    for item in items {
        first.entry(name(item).as_str()).or_insert(item);
    }
    first
}

/// Handwritten upstream (`validateVolumeHealthConditions`), never ratcheted: a non-empty reason
/// out of format. An empty one is the declarative Required, which ratchets.
fn drop_reasons_out_of_format(
    list: &mut Tracked<VolumeHealthCondition>,
    path: &FieldPath<'_>,
    repairs: &mut Vec<Repair>,
) {
    let verdicts = list
        .items
        .iter()
        .map(|c| {
            (!c.reason.is_empty() && !is_condition_reason(&c.reason))
                .then_some(RepairKind::ImpossibleCondition(Impossible::Reason))
        })
        .collect();
    list.drop_marked(verdicts, path, repairs);
}

/// The declarative rules of a volume condition list against `old`, the stored list it is
/// matched to: none when the list is the stored one; a condition whose (status, reason) is
/// stored is never checked for them, and its message only when it changed.
fn repair_volume_conditions(
    list: &mut Tracked<VolumeHealthCondition>,
    old: Option<&[VolumeHealthCondition]>,
    path: &FieldPath<'_>,
    repairs: &mut Vec<Repair>,
) {
    let views = RawList::from_items(list.items.iter().map(volume_condition_view).collect());
    let stored =
        old.map(|old| RawList::from_items(old.iter().map(volume_condition_view).collect()));
    if same_list(Some(&views), stored.as_ref()) {
        return;
    }
    let mut stored: HashMap<(&str, &str), &VolumeHealthCondition> = HashMap::new();
    for condition in old.unwrap_or_default() {
        stored
            .entry((condition.status.as_str(), condition.reason.as_str()))
            .or_insert(condition);
    }
    let verdicts = list
        .items
        .iter()
        .map(|c| {
            if stored.contains_key(&(c.status.as_str(), c.reason.as_str())) {
                None
            } else if !VOLUME_HEALTH_STATUSES.contains(&c.status.as_str()) {
                Some(RepairKind::ImpossibleCondition(Impossible::Status))
            } else if c.reason.is_empty() || c.reason.len() > MAX_VOLUME_REASON_BYTES {
                Some(RepairKind::ImpossibleCondition(Impossible::Reason))
            } else {
                None
            }
        })
        .collect();
    list.drop_marked(verdicts, path, repairs);
    let mut seen = HashSet::new();
    let verdicts = list
        .items
        .iter()
        .map(|c| {
            (!seen.insert((c.status.as_str(), c.reason.as_str())))
                .then_some(RepairKind::DuplicateCondition)
        })
        .collect();
    list.drop_marked(verdicts, path, repairs);
    list.cap(MAX_HEALTH_CONDITIONS, path, repairs);
    for (condition, &i) in list.items.iter_mut().zip(&list.origin) {
        let stored_message = stored
            .get(&(condition.status.as_str(), condition.reason.as_str()))
            .map(|old| old.message.as_deref().unwrap_or_default());
        let Some(message) = condition.message.as_mut() else {
            continue;
        };
        if stored_message != Some(message.as_str()) {
            cut_message(message, MAX_VOLUME_MESSAGE_BYTES, &path.index(i), repairs);
        }
    }
}

/// Every upstream rule of one driver's conditions (never ratcheted), then, with
/// [`ConditionIdentity::Unique`], one condition per identity unless the conditions are then the
/// stored entry's (`old`), which this project's rule accepts again.
fn repair_storage_conditions(
    list: &mut Tracked<StorageHealthCondition>,
    old: Option<&[StorageHealthCondition]>,
    identity: ConditionIdentity,
    path: &FieldPath<'_>,
    repairs: &mut Vec<Repair>,
) {
    let verdicts = list
        .items
        .iter()
        .map(|c| impossible_storage_condition(c).map(RepairKind::ImpossibleCondition))
        .collect();
    list.drop_marked(verdicts, path, repairs);
    let keep_indistinct = identity == ConditionIdentity::InTree
        || old.is_some_and(|old| {
            // The conditions as they would be without this rule: capped, messages cut.
            let cut = |c| cut_storage_view(c);
            let views = list
                .items
                .iter()
                .take(MAX_HEALTH_CONDITIONS)
                .map(cut)
                .collect();
            let stored = old.iter().map(storage_condition_view).collect();
            same_list(
                Some(&RawList::from_items(views)),
                Some(&RawList::from_items(stored)),
            )
        });
    if !keep_indistinct {
        let mut seen = HashSet::new();
        let verdicts = list
            .items
            .iter()
            .map(|c| {
                let identity = (
                    c.status.as_str(),
                    c.reason.as_str(),
                    c.access_mode.as_deref(),
                    c.volume_mode.as_deref(),
                );
                (!seen.insert(identity)).then_some(RepairKind::IndistinctCondition)
            })
            .collect();
        list.drop_marked(verdicts, path, repairs);
    }
    list.cap(MAX_HEALTH_CONDITIONS, path, repairs);
    for (condition, &i) in list.items.iter_mut().zip(&list.origin) {
        if let Some(message) = condition.message.as_mut() {
            cut_message(message, MAX_STORAGE_MESSAGE_BYTES, &path.index(i), repairs);
        }
    }
}

/// The field of a storage condition that `validateStorageHealthCondition` always refuses.
fn impossible_storage_condition(c: &StorageHealthCondition) -> Option<Impossible> {
    let outside =
        |value: &Option<String>, set: &[&str]| value.as_deref().is_some_and(|v| !set.contains(&v));
    if !STORAGE_HEALTH_STATUSES.contains(&c.status.as_str()) {
        Some(Impossible::Status)
    } else if !is_condition_reason(&c.reason) || c.reason.len() > MAX_STORAGE_REASON_BYTES {
        Some(Impossible::Reason)
    } else if outside(&c.access_mode, ACCESS_MODES) {
        Some(Impossible::AccessMode)
    } else if outside(&c.volume_mode, VOLUME_MODES) {
        Some(Impossible::VolumeMode)
    } else {
        None
    }
}

/// A storage condition as the rules would read it once its message is cut.
fn cut_storage_view(c: &StorageHealthCondition) -> crate::decode::StorageConditionView<'_> {
    let mut view = storage_condition_view(c);
    view.message = c
        .message
        .as_deref()
        .map(|m| Cow::Borrowed(prefix(m, MAX_STORAGE_MESSAGE_BYTES)));
    view
}

/// Cuts `message` to at most `max` bytes at a character boundary, recording it.
fn cut_message(message: &mut String, max: usize, path: &FieldPath<'_>, repairs: &mut Vec<Repair>) {
    let from = message.len();
    if from <= max {
        return;
    }
    let to = prefix(message, max).len();
    message.truncate(to);
    repairs.push(Repair {
        path: path.child("message").to_string(),
        kind: RepairKind::MessageCut { from, to },
    });
}
