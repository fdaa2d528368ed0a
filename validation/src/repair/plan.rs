//! Repair over the views a request holds: each gated field's list walked a bounded number of
//! times, whatever its length, and its repaired value written as JSON for one `replace`.
//!
//! Entries are walked three times at most: once to group them by name, once to choose their
//! conditions, once to write. What is held between the walks is bounded per entry (its group)
//! and per group (at most [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS)
//! conditions, as they will be written), so a long list is never held decoded.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::kind::{Repair, RepairKind};
use super::select::{
    Candidate, ListPath, Origin, Selection, Sink, StoredVolume, message_hash, storage_condition,
    storage_content, volume_condition, volume_identity,
};
use crate::decode::{
    HealthStatusView, PodVolumeHealthView, RawList, StorageConditionView, StorageHealthView,
    VolumeConditionView, Walk, hash128, same_list,
};
use crate::rules::ConditionIdentity;
use crate::rules::names::{is_condition_reason, is_csi_driver_name};

/// A sink that counts what passes to the one it wraps.
struct Counted<'s> {
    sink: Sink<'s>,
    made: usize,
}

impl Counted<'_> {
    fn report(&mut self, repair: Repair) {
        self.made += 1;
        (self.sink)(repair);
    }
}

/// The stored conditions of one list: the first stored message of each (status, reason).
#[derive(Default)]
struct StoredList(HashMap<u128, u128>);

impl StoredList {
    fn of(list: Option<&RawList<'_, VolumeConditionView<'_>>>) -> Self {
        let mut stored = HashMap::new();
        if let Some(list) = list {
            list.walk(|_, c| {
                stored
                    .entry(volume_identity(&c.status, &c.reason))
                    .or_insert_with(|| message_hash(c.message.as_deref()));
                Walk::Next
            });
        }
        StoredList(stored)
    }
}

impl StoredVolume for StoredList {
    fn message_of(&self, status: &str, reason: &str) -> Option<u128> {
        self.0.get(&volume_identity(status, reason)).copied()
    }
}

/// Whether a volume condition list has a reason out of format: upstream checks that on every
/// write (handwritten), so such a list is repaired even when it is the stored one.
fn has_reason_out_of_format(list: Option<&RawList<'_, VolumeConditionView<'_>>>) -> bool {
    let mut found = false;
    if let Some(list) = list {
        list.walk(|_, c| {
            found = !c.reason.is_empty() && !is_condition_reason(&c.reason);
            if found { Walk::Stop } else { Walk::Next }
        });
    }
    found
}

/// Appends the kept conditions as a JSON array.
fn write_kept(out: &mut String, kept: &[Candidate]) {
    out.push('[');
    for (i, candidate) in kept.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&candidate.json);
    }
    out.push(']');
}

/// Appends `value` as JSON: strings, timestamps and lists of them always serialize.
fn write_json<T: Serialize + ?Sized>(out: &mut String, value: &T) {
    let text = serde_json::to_string(value).expect("a health value serializes");
    out.push_str(&text);
}

/// A claim's `status.healthStatus.healthConditions`, repaired against the stored `old`: the
/// repaired list as JSON, or `None` when nothing is repaired.
pub(crate) fn claim(
    new: &HealthStatusView<'_>,
    old: Option<&HealthStatusView<'_>>,
    sink: Sink<'_>,
) -> Option<String> {
    let list = new.health_conditions.as_ref()?;
    let stored = old.and_then(|old| old.health_conditions.as_ref());
    if !has_reason_out_of_format(Some(list)) && same_list(Some(list), stored) {
        return None;
    }
    let stored = StoredList::of(stored);
    let mut sink = Counted { sink, made: 0 };
    let path = ListPath::Claim;
    let mut selection = Selection::new(path, Some(RepairKind::DuplicateCondition));
    list.walk(|index, c| {
        let at = Origin { entry: 0, index };
        let mut report = |r| sink.report(r);
        if let Some(candidate) = volume_condition(c, at, &stored, path, &mut report) {
            selection.offer(candidate, &mut report);
        }
        Walk::Next
    });
    if sink.made == 0 {
        return None;
    }
    let mut out = String::new();
    write_kept(&mut out, selection.kept());
    Some(out)
}

/// What repair decided of one entry of a list of entries.
#[derive(Clone, Copy)]
enum Entry {
    Dropped,
    /// In this group; the group's first entry is where the group is written.
    In(u32),
}

/// Entries of one name.
struct Group {
    first: usize,
    members: u32,
    /// Whether one of them has a `healthConditions` member.
    has_conditions: bool,
    /// Written as it is: a single entry equal to the stored entry of its name.
    verbatim: bool,
    selection: Option<Selection>,
}

impl Group {
    fn new(first: usize) -> Self {
        Group {
            first,
            members: 0,
            has_conditions: false,
            verbatim: false,
            selection: None,
        }
    }
}

/// Groups entries by name, in order of first appearance; an entry `keep` refuses is dropped.
/// A later entry of a name is merged into the first (reported).
fn group<'a, T>(
    list: &RawList<'a, T>,
    name: impl Fn(&T) -> &str,
    has_conditions: impl Fn(&T) -> bool,
    keep: &mut dyn FnMut(usize, &T) -> Option<RepairKind>,
    path: ListPath,
    sink: &mut Counted<'_>,
) -> (Vec<Entry>, Vec<Group>)
where
    T: serde::Deserialize<'a> + crate::decode::Fingerprinted,
{
    let mut entries = Vec::with_capacity(list.len());
    let mut groups: Vec<Group> = Vec::new();
    let mut by_name: HashMap<u128, u32> = HashMap::new();
    list.walk(|i, entry| {
        if let Some(kind) = keep(i, entry) {
            sink.report(Repair {
                path: path.entry(i),
                kind,
            });
            entries.push(Entry::Dropped);
            return Walk::Next;
        }
        let next = u32::try_from(groups.len()).unwrap_or(u32::MAX);
        let g = *by_name.entry(hash128(name(entry))).or_insert(next);
        if g == next {
            groups.push(Group::new(i));
        } else {
            sink.report(Repair {
                path: path.entry(i),
                kind: RepairKind::MergedEntry,
            });
        }
        let group = &mut groups[g as usize];
        group.members += 1;
        group.has_conditions |= has_conditions(entry);
        entries.push(Entry::In(g));
        Walk::Next
    });
    (entries, groups)
}

/// A hash of a volume condition list's items, every member, in order: absent and empty alike.
fn volume_list_hash(list: Option<&RawList<'_, VolumeConditionView<'_>>>) -> u128 {
    let mut hash = hash128(&0usize);
    if let Some(list) = list {
        list.walk(|_, c| {
            hash = hash128(&(hash, &*c.status, &*c.reason, c.message.as_deref()));
            Walk::Next
        });
    }
    hash
}

/// The stored entries of a pod, first of each name, as repair matches them.
struct StoredPod {
    /// Each name's conditions, hashed whole.
    lists: HashMap<u128, u128>,
    /// Each (name, status, reason): the stored message, hashed.
    conditions: HashMap<u128, u128>,
    unnamed: bool,
}

impl StoredPod {
    fn of(old: Option<&RawList<'_, PodVolumeHealthView<'_>>>) -> Self {
        let mut stored = StoredPod {
            lists: HashMap::new(),
            conditions: HashMap::new(),
            unnamed: false,
        };
        let Some(old) = old else { return stored };
        old.walk(|_, entry| {
            let name = hash128(&*entry.name);
            if stored.lists.contains_key(&name) {
                return Walk::Next;
            }
            stored.unnamed |= entry.name.is_empty();
            let conditions = entry.health_conditions.as_ref();
            stored.lists.insert(name, volume_list_hash(conditions));
            if let Some(conditions) = conditions {
                conditions.walk(|_, c| {
                    stored
                        .conditions
                        .entry(hash128(&(&*entry.name, &*c.status, &*c.reason)))
                        .or_insert_with(|| message_hash(c.message.as_deref()));
                    Walk::Next
                });
            }
            Walk::Next
        });
        stored
    }
}

/// The stored conditions of one pod entry's name.
struct StoredEntry<'s> {
    stored: &'s StoredPod,
    name: &'s str,
}

impl StoredVolume for StoredEntry<'_> {
    fn message_of(&self, status: &str, reason: &str) -> Option<u128> {
        self.stored
            .conditions
            .get(&hash128(&(self.name, status, reason)))
            .copied()
    }
}

/// A pod's `status.volumeHealth`, repaired against the stored `old`; `volume_exists` tells
/// whether a name is one of the pod's `spec.volumes`. The repaired list as JSON, or `None`;
/// writing stops once it is longer than `limit` bytes, which the caller then refuses.
pub(crate) fn pod(
    list: &RawList<'_, PodVolumeHealthView<'_>>,
    old: Option<&RawList<'_, PodVolumeHealthView<'_>>>,
    volume_exists: &dyn Fn(&str) -> bool,
    limit: usize,
    sink: Sink<'_>,
) -> Option<String> {
    let path = ListPath::Entries("volumeHealth");
    let mut sink = Counted { sink, made: 0 };
    // Handwritten upstream, never ratcheted: the volume must exist, the reasons be in format.
    let mut handwritten = false;
    let mut unknown = Vec::new();
    list.walk(|i, entry| {
        let exists = entry.name.is_empty() || volume_exists(&entry.name);
        if !exists {
            unknown.push(i);
        }
        handwritten |= !exists || has_reason_out_of_format(entry.health_conditions.as_ref());
        Walk::Next
    });
    // Declarative upstream: nothing more when the list is the stored one.
    if !handwritten && same_list(Some(list), old) {
        return None;
    }
    let stored = StoredPod::of(old);
    let mut unknown = unknown.into_iter().peekable();
    let (entries, mut groups) = group(
        list,
        |e| &e.name,
        |e| e.health_conditions.is_some(),
        &mut |i, entry| {
            if unknown.next_if_eq(&i).is_some() {
                Some(RepairKind::UnknownVolume)
            } else if entry.name.is_empty() && !stored.unnamed {
                // A stored entry without a name is matched and accepted again.
                Some(RepairKind::UnnamedEntry)
            } else {
                None
            }
        },
        path,
        &mut sink,
    );
    list.walk(|i, entry| {
        let Entry::In(g) = entries[i] else {
            return Walk::Next;
        };
        let group = &mut groups[g as usize];
        let conditions = entry.health_conditions.as_ref();
        if group.members == 1
            && !has_reason_out_of_format(conditions)
            && stored.lists.get(&hash128(&*entry.name)) == Some(&volume_list_hash(conditions))
        {
            group.verbatim = true;
            return Walk::Next;
        }
        let selection = group
            .selection
            .get_or_insert_with(|| Selection::new(path, Some(RepairKind::DuplicateCondition)));
        let matched = StoredEntry {
            stored: &stored,
            name: &entry.name,
        };
        if let Some(conditions) = conditions {
            conditions.walk(|index, c| {
                let at = Origin { entry: i, index };
                let mut report = |r| sink.report(r);
                if let Some(candidate) = volume_condition(c, at, &matched, path, &mut report) {
                    selection.offer(candidate, &mut report);
                }
                Walk::Next
            });
        }
        Walk::Next
    });
    if sink.made == 0 {
        return None;
    }
    let mut out = String::from("[");
    let mut written = 0;
    list.walk(|i, entry| {
        let Entry::In(g) = entries[i] else {
            return Walk::Next;
        };
        let group = &groups[g as usize];
        if group.first != i {
            return Walk::Next;
        }
        if written > 0 {
            out.push(',');
        }
        written += 1;
        out.push_str("{\"name\":");
        write_json(&mut out, &*entry.name);
        if group.verbatim {
            if let Some(conditions) = &entry.health_conditions {
                out.push_str(",\"healthConditions\":");
                write_volume_list(&mut out, conditions);
            }
        } else if group.has_conditions {
            out.push_str(",\"healthConditions\":");
            write_kept(
                &mut out,
                group.selection.as_ref().map_or(&[], Selection::kept),
            );
        }
        if let Some(time) = &entry.last_transition_time {
            out.push_str(",\"lastTransitionTime\":");
            write_json(&mut out, time);
        }
        out.push('}');
        // Past the limit the list is not made: stop writing, the caller refuses it whole.
        if out.len() > limit {
            Walk::Stop
        } else {
            Walk::Next
        }
    });
    out.push(']');
    Some(out)
}

/// A volume condition list as it is.
fn write_volume_list(out: &mut String, list: &RawList<'_, VolumeConditionView<'_>>) {
    #[derive(Serialize)]
    struct Out<'c> {
        status: &'c str,
        reason: &'c str,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<&'c str>,
    }
    out.push('[');
    list.walk(|i, c| {
        if i > 0 {
            out.push(',');
        }
        write_json(
            out,
            &Out {
                status: &c.status,
                reason: &c.reason,
                message: c.message.as_deref(),
            },
        );
        Walk::Next
    });
    out.push(']');
}

/// A CSINode's stored entries, first of each name: each one's conditions as written, hashed in
/// order, for this project's rule, which accepts again an entry equal to the stored one.
fn stored_storage(old: Option<&RawList<'_, StorageHealthView<'_>>>) -> HashMap<u128, Vec<u128>> {
    let mut stored = HashMap::new();
    if let Some(old) = old {
        old.walk(|_, entry| {
            stored.entry(hash128(&*entry.name)).or_insert_with(|| {
                let mut contents = Vec::new();
                if let Some(conditions) = &entry.health_conditions {
                    conditions.walk(|_, c: &StorageConditionView<'_>| {
                        contents.push(storage_content(
                            &c.status,
                            &c.reason,
                            c.message.as_deref(),
                            c.access_mode.as_deref(),
                            c.volume_mode.as_deref(),
                            c.last_transition_time.as_ref(),
                        ));
                        Walk::Next
                    });
                }
                contents
            });
            Walk::Next
        });
    }
    stored
}

/// A CSINode's `status.storageHealth`, repaired against the stored `old`, with or without this
/// project's rule on conditions' identities. Only that rule ratchets (per entry, as it is
/// checked); every upstream CSINode rule applies to every write.
pub(crate) fn csinode(
    list: &RawList<'_, StorageHealthView<'_>>,
    old: Option<&RawList<'_, StorageHealthView<'_>>>,
    identity: ConditionIdentity,
    limit: usize,
    sink: Sink<'_>,
) -> Option<String> {
    let path = ListPath::Entries("storageHealth");
    let mut sink = Counted { sink, made: 0 };
    let (entries, mut groups) = group(
        list,
        |e| &e.name,
        |e| e.health_conditions.is_some(),
        &mut |_, entry| (!is_csi_driver_name(&entry.name)).then_some(RepairKind::InvalidDriverName),
        path,
        &mut sink,
    );
    // Which groups keep indistinct conditions: all of them in-tree; with this project's rule,
    // those whose conditions, repaired without it, are the stored entry's.
    let mut indistinct = vec![identity == ConditionIdentity::InTree; groups.len()];
    if identity == ConditionIdentity::Unique {
        let stored = stored_storage(old);
        if !stored.is_empty() {
            let mut trial: Vec<Option<Selection>> = (0..groups.len()).map(|_| None).collect();
            let mut ignore = |_: Repair| {};
            choose_storage(list, &entries, &mut trial, &mut |_| None, path, &mut ignore);
            list.walk(|i, entry| {
                if let Entry::In(g) = entries[i] {
                    let g = g as usize;
                    if groups[g].first == i {
                        let kept: Vec<u128> = trial[g]
                            .as_ref()
                            .map_or(&[][..], Selection::kept)
                            .iter()
                            .map(|c| c.content)
                            .collect();
                        indistinct[g] = stored.get(&hash128(&*entry.name)) == Some(&kept);
                    }
                }
                Walk::Next
            });
        }
    }
    let mut selections: Vec<Option<Selection>> = (0..groups.len()).map(|_| None).collect();
    let mut report = |r| sink.report(r);
    choose_storage(
        list,
        &entries,
        &mut selections,
        &mut |g| (!indistinct[g]).then_some(RepairKind::IndistinctCondition),
        path,
        &mut report,
    );
    if sink.made == 0 {
        return None;
    }
    for (group, selection) in groups.iter_mut().zip(selections) {
        group.selection = selection;
    }
    let mut out = String::from("[");
    let mut written = 0;
    list.walk(|i, entry| {
        let Entry::In(g) = entries[i] else {
            return Walk::Next;
        };
        let group = &groups[g as usize];
        if group.first != i {
            return Walk::Next;
        }
        if written > 0 {
            out.push(',');
        }
        written += 1;
        let _ = write!(out, "{{\"name\":");
        write_json(&mut out, &*entry.name);
        if group.has_conditions {
            out.push_str(",\"healthConditions\":");
            write_kept(
                &mut out,
                group.selection.as_ref().map_or(&[], Selection::kept),
            );
        }
        out.push('}');
        // Past the limit the list is not made: stop writing, the caller refuses it whole.
        if out.len() > limit {
            Walk::Stop
        } else {
            Walk::Next
        }
    });
    out.push(']');
    Some(out)
}

/// Chooses the conditions of every group of a CSINode's entries; `duplicate` says, per group,
/// whether a later condition with a kept one's identity is dropped.
fn choose_storage(
    list: &RawList<'_, StorageHealthView<'_>>,
    entries: &[Entry],
    selections: &mut [Option<Selection>],
    duplicate: &mut dyn FnMut(usize) -> Option<RepairKind>,
    path: ListPath,
    sink: Sink<'_>,
) {
    list.walk(|i, entry| {
        let Entry::In(g) = entries[i] else {
            return Walk::Next;
        };
        let g = g as usize;
        let selection = selections[g].get_or_insert_with(|| Selection::new(path, duplicate(g)));
        if let Some(conditions) = &entry.health_conditions {
            conditions.walk(|index, c| {
                let at = Origin { entry: i, index };
                if let Some(candidate) = storage_condition(c, at, path, sink) {
                    selection.offer(candidate, sink);
                }
                Walk::Next
            });
        }
        Walk::Next
    });
}
