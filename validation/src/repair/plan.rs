//! Repair over the views a request holds: each gated field's list walked a bounded number of
//! times, whatever its length, and its repaired value written as JSON for one `replace`.
//!
//! What is held between the walks is counted against a limit ([`Budget`]): a record per name
//! of entry, and the conditions kept of each list that needs a repair (at most
//! [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS), as they will be written).
//! A list of entries that needs no repair is held as nothing: it is written again from the
//! views. So a long list is never held decoded, and a repair that would hold or write more than
//! the limit stops early ([`TooLarge`]).

use std::collections::HashMap;

use serde::Serialize;

use super::kind::{Repair, RepairKind};
use super::select::{
    Candidate, ListPath, Origin, Selection, Sink, StorageOut, StoredVolume, VolumeOut,
    message_hash, storage_condition, volume_condition, volume_identity,
};
use crate::decode::{
    HealthStatusView, NameView, PodVolumeHealthView, RawList, StorageConditionView,
    StorageHealthView, VolumeConditionView, Walk, hash128, same_list,
};
use crate::rules::ConditionIdentity;
use crate::rules::names::{is_condition_reason, is_csi_driver_name};

/// The repair would hold or write more than its limit: not made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TooLarge;

/// What a repair of one list gives: the repaired list as JSON, `None` when nothing is repaired.
pub(crate) type Planned = Result<Option<String>, TooLarge>;

/// What a repair holds and writes, counted against a limit as it grows.
struct Budget {
    limit: usize,
    used: usize,
}

impl Budget {
    fn new(limit: usize) -> Self {
        Budget { limit, used: 0 }
    }

    fn add(&mut self, bytes: usize) -> Result<(), TooLarge> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            Err(TooLarge)
        } else {
            Ok(())
        }
    }

    fn sub(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }
}

/// Whether a walk goes on after a step that may have run over the budget.
fn walk_on(result: &Result<(), TooLarge>) -> Walk {
    if result.is_err() {
        Walk::Stop
    } else {
        Walk::Next
    }
}

/// What one hashed map entry costs, about: its key, its value and the table's slack.
const MAP_ENTRY_BYTES: usize = 48;

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
    fn of(
        list: Option<&RawList<'_, VolumeConditionView<'_>>>,
        budget: &mut Budget,
    ) -> Result<Self, TooLarge> {
        let mut stored = HashMap::new();
        let mut result = Ok(());
        if let Some(list) = list {
            list.walk(|_, c| {
                let key = volume_identity(&c.status, &c.reason);
                if let std::collections::hash_map::Entry::Vacant(slot) = stored.entry(key) {
                    slot.insert(message_hash(c.message.as_deref()));
                    result = budget.add(MAP_ENTRY_BYTES);
                }
                walk_on(&result)
            });
        }
        result.map(|()| StoredList(stored))
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

/// A claim's `status.healthStatus.healthConditions`, repaired against the stored `old`.
pub(crate) fn claim(
    new: &HealthStatusView<'_>,
    old: Option<&HealthStatusView<'_>>,
    limit: usize,
    sink: Sink<'_>,
) -> Planned {
    let Some(list) = new.health_conditions.as_ref() else {
        return Ok(None);
    };
    let stored = old.and_then(|old| old.health_conditions.as_ref());
    if !has_reason_out_of_format(Some(list)) && same_list(Some(list), stored) {
        return Ok(None);
    }
    let mut budget = Budget::new(limit);
    let stored = StoredList::of(stored, &mut budget)?;
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
        return Ok(None);
    }
    let mut out = String::new();
    write_kept(&mut out, selection.kept());
    Ok(Some(out))
}

/// How the conditions of a group of entries are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Conditions {
    /// Not chosen yet.
    Open,
    /// As they are: the group is one entry that needs no repair.
    AsThey,
    /// The kept conditions of this selection.
    Chosen(u32),
}

/// The entries of one name.
struct Group {
    /// The input index of its first entry, where the group is written.
    first: u32,
    members: u32,
    /// Whether one of them has a `healthConditions` member.
    has_conditions: bool,
    /// Why the whole group is dropped (every entry of a name shares the reason).
    dropped: Option<RepairKind>,
    conditions: Conditions,
}

/// Entries grouped by name, in order of first appearance.
struct Groups {
    by_name: HashMap<u128, u32>,
    groups: Vec<Group>,
    selections: Vec<Selection>,
}

impl Groups {
    /// Groups `list` by name, counting each group against `budget`. A group whose name the
    /// rules refuse on every write is dropped whole.
    fn of<'a, T>(list: &RawList<'a, T>, budget: &mut Budget) -> Result<Self, TooLarge>
    where
        T: serde::Deserialize<'a> + crate::decode::Fingerprinted + Entry,
    {
        let mut grouped = Groups {
            by_name: HashMap::new(),
            groups: Vec::new(),
            selections: Vec::new(),
        };
        let mut result = Ok(());
        list.walk(|i, entry| {
            let next = u32::try_from(grouped.groups.len()).unwrap_or(u32::MAX);
            let g = *grouped.by_name.entry(hash128(entry.name())).or_insert(next);
            if g == next {
                grouped.groups.push(Group {
                    first: u32::try_from(i).unwrap_or(u32::MAX),
                    members: 0,
                    has_conditions: false,
                    dropped: entry.refused(),
                    conditions: Conditions::Open,
                });
                result = budget.add(std::mem::size_of::<Group>() + MAP_ENTRY_BYTES);
            }
            let group = &mut grouped.groups[g as usize];
            group.members += 1;
            group.has_conditions |= entry.has_conditions();
            walk_on(&result)
        });
        result.map(|()| grouped)
    }

    fn of_name(&self, name: &str) -> u32 {
        self.by_name
            .get(&hash128(name))
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// The selection of group `g`, made when first asked.
    fn selection(&mut self, g: u32, make: impl FnOnce() -> Selection) -> &mut Selection {
        let group = &mut self.groups[g as usize];
        let index = match group.conditions {
            Conditions::Chosen(index) => index,
            _ => {
                let index = u32::try_from(self.selections.len()).unwrap_or(u32::MAX);
                self.selections.push(make());
                group.conditions = Conditions::Chosen(index);
                index
            }
        };
        &mut self.selections[index as usize]
    }

    fn kept(&self, group: &Group) -> &[Candidate] {
        match group.conditions {
            Conditions::Chosen(index) => self.selections[index as usize].kept(),
            _ => &[],
        }
    }
}

/// Reports an entry's own repair, before its conditions': dropped with its group, or merged
/// into the first entry of its name. `true` when the entry is kept.
fn report_entry(groups: &Groups, g: u32, i: usize, path: ListPath, sink: &mut Counted<'_>) -> bool {
    let group = &groups.groups[g as usize];
    if let Some(kind) = group.dropped {
        sink.report(path.entry_repair(i, kind));
        return false;
    }
    if group.first as usize != i {
        sink.report(path.entry_repair(i, RepairKind::MergedEntry));
    }
    true
}

/// Chooses the conditions of every kept entry, each entry's own repair reported first, with
/// `conditions` (for an entry, its index and its group), then writes the list: `None` when
/// nothing was repaired.
fn repair_entries<'a, T>(
    list: &RawList<'a, T>,
    mut groups: Groups,
    path: ListPath,
    mut budget: Budget,
    limit: usize,
    sink: Sink<'_>,
    mut conditions: impl FnMut(
        usize,
        &T,
        u32,
        &mut Groups,
        &mut Budget,
        &mut Counted<'_>,
    ) -> Result<(), TooLarge>,
) -> Planned
where
    T: serde::Deserialize<'a> + crate::decode::Fingerprinted + Entry,
{
    let mut sink = Counted { sink, made: 0 };
    let mut result = Ok(());
    list.walk(|i, entry| {
        let g = groups.of_name(entry.name());
        if report_entry(&groups, g, i, path, &mut sink) {
            result = conditions(i, entry, g, &mut groups, &mut budget, &mut sink);
        }
        walk_on(&result)
    });
    result?;
    if sink.made == 0 {
        return Ok(None);
    }
    write_entries(list, &groups, limit)
}

/// Offers an entry's conditions to its group's selection. A group of one entry is tried
/// alone first: when nothing of it is repaired it is written as it is, and nothing is held.
fn choose<'c, C>(
    groups: &mut Groups,
    g: u32,
    conditions: Option<&RawList<'c, C>>,
    make: &dyn Fn() -> Selection,
    candidate: &mut dyn FnMut(usize, &C, Sink<'_>) -> Option<Candidate>,
    budget: &mut Budget,
    sink: &mut Counted<'_>,
) -> Result<(), TooLarge>
where
    C: serde::Deserialize<'c> + crate::decode::Fingerprinted + 'c,
{
    let mut offer_all = |selection: &mut Selection, sink: &mut Counted<'_>| {
        if let Some(conditions) = conditions {
            conditions.walk(|index, c| {
                let mut report = |r| sink.report(r);
                if let Some(kept) = candidate(index, c, &mut report) {
                    selection.offer(kept, &mut report);
                }
                Walk::Next
            });
        }
    };
    if groups.groups[g as usize].members == 1 {
        let mut alone = make();
        let made = sink.made;
        offer_all(&mut alone, sink);
        if sink.made == made {
            groups.groups[g as usize].conditions = Conditions::AsThey;
            return Ok(());
        }
        budget.add(alone.bytes())?;
        *groups.selection(g, make) = alone;
        Ok(())
    } else {
        let selection = groups.selection(g, make);
        let before = selection.bytes();
        offer_all(selection, sink);
        budget.sub(before);
        budget.add(selection.bytes())
    }
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
#[derive(Default)]
struct StoredPod {
    /// Each name's conditions, hashed whole.
    lists: HashMap<u128, u128>,
    /// Each (name, status, reason): the stored message, hashed.
    conditions: HashMap<u128, u128>,
    unnamed: bool,
}

impl StoredPod {
    fn of(
        old: Option<&RawList<'_, PodVolumeHealthView<'_>>>,
        budget: &mut Budget,
    ) -> Result<Self, TooLarge> {
        let mut stored = StoredPod::default();
        let Some(old) = old else { return Ok(stored) };
        let mut result = Ok(());
        old.walk(|_, entry| {
            let name = hash128(&*entry.name);
            if stored.lists.contains_key(&name) {
                return Walk::Next;
            }
            stored.unnamed |= entry.name.is_empty();
            let conditions = entry.health_conditions.as_ref();
            stored.lists.insert(name, volume_list_hash(conditions));
            let mut held = 1;
            if let Some(conditions) = conditions {
                conditions.walk(|_, c| {
                    stored
                        .conditions
                        .entry(hash128(&(&*entry.name, &*c.status, &*c.reason)))
                        .or_insert_with(|| {
                            held += 1;
                            message_hash(c.message.as_deref())
                        });
                    Walk::Next
                });
            }
            result = budget.add(held * MAP_ENTRY_BYTES);
            walk_on(&result)
        });
        result.map(|()| stored)
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

/// Where a pod's volume names come from: its `spec.volumes`, or a writer's lookup.
pub(crate) enum Volumes<'v, 'a> {
    /// `spec.volumes` of the pod written.
    Listed(Option<&'v RawList<'a, NameView<'a>>>),
    /// Whether a name is a volume of the pod.
    Lookup(&'v dyn Fn(&str) -> bool),
}

/// A pod's `status.volumeHealth`, repaired against the stored `old`. Writing stops once the
/// list is longer than `limit` bytes, and nothing is made past it.
pub(crate) fn pod(
    list: &RawList<'_, PodVolumeHealthView<'_>>,
    old: Option<&RawList<'_, PodVolumeHealthView<'_>>>,
    volumes: Volumes<'_, '_>,
    limit: usize,
    sink: Sink<'_>,
) -> Planned {
    let path = ListPath::Entries("volumeHealth");
    let mut budget = Budget::new(limit);
    let mut groups = Groups::of(list, &mut budget)?;
    // Handwritten upstream, never ratcheted: the volume must exist, the reasons be in format.
    // Every entry of a name shares its volume, so a name's existence is looked up once.
    let mut exists = vec![false; groups.groups.len()];
    let mut out_of_format = false;
    match volumes {
        Volumes::Listed(listed) => {
            if let Some(listed) = listed {
                listed.walk(|_, volume| {
                    if let Some(name) = &volume.name
                        && let Some(&g) = groups.by_name.get(&hash128(&**name))
                    {
                        exists[g as usize] = true;
                    }
                    Walk::Next
                });
            }
        }
        Volumes::Lookup(_) => {}
    }
    list.walk(|i, entry| {
        let g = groups.of_name(&entry.name) as usize;
        if let Volumes::Lookup(lookup) = &volumes
            && groups.groups[g].first as usize == i
        {
            exists[g] = lookup(&entry.name);
        }
        out_of_format |= has_reason_out_of_format(entry.health_conditions.as_ref());
        Walk::Next
    });
    // An entry without a name is Required, not NotFound: it is decided below.
    let unnamed = groups.by_name.get(&hash128("")).copied();
    let mut unknown = false;
    for (g, (group, exists)) in groups.groups.iter_mut().zip(&exists).enumerate() {
        if !*exists && unnamed != u32::try_from(g).ok() {
            group.dropped = Some(RepairKind::UnknownVolume);
            unknown = true;
        }
    }
    // Declarative upstream: nothing more when the list is the stored one.
    if !unknown && !out_of_format && same_list(Some(list), old) {
        return Ok(None);
    }
    let stored = StoredPod::of(old, &mut budget)?;
    if let Some(&g) = groups.by_name.get(&hash128("")) {
        // A stored entry without a name is matched and accepted again.
        let group = &mut groups.groups[g as usize];
        group.dropped = (!stored.unnamed).then_some(RepairKind::UnnamedEntry);
    }
    let make = || Selection::new(path, Some(RepairKind::DuplicateCondition));
    repair_entries(
        list,
        groups,
        path,
        budget,
        limit,
        sink,
        |i, entry, g, groups, budget, sink| {
            let conditions = entry.health_conditions.as_ref();
            if groups.groups[g as usize].members == 1
                && !has_reason_out_of_format(conditions)
                && stored.lists.get(&hash128(&*entry.name)) == Some(&volume_list_hash(conditions))
            {
                // The stored entry: the rules do not check it again.
                groups.groups[g as usize].conditions = Conditions::AsThey;
                return Ok(());
            }
            let matched = StoredEntry {
                stored: &stored,
                name: &entry.name,
            };
            let mut candidate = |index, c: &VolumeConditionView<'_>, sink: Sink<'_>| {
                volume_condition(c, Origin { entry: i, index }, &matched, path, sink)
            };
            choose(groups, g, conditions, &make, &mut candidate, budget, sink)
        },
    )
}

/// Writes each kept group at its first entry: its name, its conditions (as given when nothing
/// of them is repaired, else the kept ones) and the rest of the entry. Past `limit` bytes it
/// stops, and the list is too large.
fn write_entries<'a, T>(list: &RawList<'a, T>, groups: &Groups, limit: usize) -> Planned
where
    T: serde::Deserialize<'a> + crate::decode::Fingerprinted + Entry,
{
    let mut out = String::from("[");
    let mut too_large = false;
    list.walk(|i, entry| {
        let group = &groups.groups[groups.of_name(entry.name()) as usize];
        if group.dropped.is_some() || group.first as usize != i {
            return Walk::Next;
        }
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        write_json(&mut out, entry.name());
        match group.conditions {
            Conditions::AsThey => entry.write_conditions(&mut out),
            _ if group.has_conditions => {
                out.push_str(",\"healthConditions\":");
                write_kept(&mut out, groups.kept(group));
            }
            _ => {}
        }
        entry.write_rest(&mut out);
        out.push('}');
        too_large = out.len() > limit;
        if too_large { Walk::Stop } else { Walk::Next }
    });
    if too_large {
        return Err(TooLarge);
    }
    out.push(']');
    Ok(Some(out))
}

/// The names of the entries at `indexes`, in that order and each once (an entry given twice
/// is one volume or driver): a few, for a log line that names what to fix. The walk stops at
/// the last one.
pub(crate) fn entry_names<'a, T>(list: &RawList<'a, T>, indexes: &[usize]) -> Vec<String>
where
    T: serde::Deserialize<'a> + crate::decode::Fingerprinted + Entry,
{
    let mut at = vec![String::new(); indexes.len()];
    let last = indexes.iter().copied().max();
    list.walk(|i, entry| {
        if let Some(k) = indexes.iter().position(|&j| j == i) {
            at[k] = entry.name().to_owned();
        }
        if Some(i) >= last {
            Walk::Stop
        } else {
            Walk::Next
        }
    });
    let mut names: Vec<String> = Vec::with_capacity(at.len());
    for name in at {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// An entry of a list of entries, as repair reads and writes it.
pub(crate) trait Entry {
    fn name(&self) -> &str;
    /// Whether it has a `healthConditions` member.
    fn has_conditions(&self) -> bool;
    /// Why its name is refused on every write, when it is.
    fn refused(&self) -> Option<RepairKind> {
        None
    }
    /// Appends `,"healthConditions":[...]` as given, when the entry has them.
    fn write_conditions(&self, out: &mut String);
    /// Appends the members after the conditions.
    fn write_rest(&self, _out: &mut String) {}
}

impl Entry for PodVolumeHealthView<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn has_conditions(&self) -> bool {
        self.health_conditions.is_some()
    }

    fn write_conditions(&self, out: &mut String) {
        let Some(conditions) = &self.health_conditions else {
            return;
        };
        out.push_str(",\"healthConditions\":");
        write_list(out, conditions, |out, c| write_json(out, &VolumeOut::of(c)));
    }

    fn write_rest(&self, out: &mut String) {
        if let Some(time) = &self.last_transition_time {
            out.push_str(",\"lastTransitionTime\":");
            write_json(out, time);
        }
    }
}

impl Entry for StorageHealthView<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn has_conditions(&self) -> bool {
        self.health_conditions.is_some()
    }

    /// A name is the entry's key: another name would be another driver's report.
    fn refused(&self) -> Option<RepairKind> {
        (!is_csi_driver_name(&self.name)).then_some(RepairKind::InvalidDriverName)
    }

    fn write_conditions(&self, out: &mut String) {
        let Some(conditions) = &self.health_conditions else {
            return;
        };
        out.push_str(",\"healthConditions\":");
        write_list(out, conditions, |out, c| {
            write_json(out, &StorageOut::of(c))
        });
    }
}

fn write_list<'a, T>(out: &mut String, list: &RawList<'a, T>, item: impl Fn(&mut String, &T))
where
    T: serde::Deserialize<'a> + crate::decode::Fingerprinted,
{
    out.push('[');
    list.walk(|i, c| {
        if i > 0 {
            out.push(',');
        }
        item(out, c);
        Walk::Next
    });
    out.push(']');
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
) -> Planned {
    let path = ListPath::Entries("storageHealth");
    let mut budget = Budget::new(limit);
    let groups = Groups::of(list, &mut budget)?;
    // Which groups keep indistinct conditions: all of them in-tree; with this project's rule,
    // those whose conditions, repaired without it, are the stored entry's (first of its name).
    let mut indistinct = vec![identity == ConditionIdentity::InTree; groups.groups.len()];
    if identity == ConditionIdentity::Unique
        && let Some(old) = old
    {
        let mut stored: HashMap<u32, Vec<u128>> = HashMap::new();
        let mut result = Ok(());
        old.walk(|_, entry| {
            let g = groups.of_name(&entry.name);
            if g == u32::MAX || stored.contains_key(&g) {
                return Walk::Next;
            }
            let mut contents = Vec::new();
            if let Some(conditions) = &entry.health_conditions {
                conditions.walk(|_, c| {
                    contents.push(StorageOut::of(c).content());
                    Walk::Next
                });
            }
            result = budget.add(MAP_ENTRY_BYTES + 16 * contents.len());
            stored.insert(g, contents);
            walk_on(&result)
        });
        result?;
        let mut trial: HashMap<u32, Selection> = HashMap::new();
        let mut ignore = |_: Repair| {};
        list.walk(|i, entry| {
            let g = groups.of_name(&entry.name);
            if !stored.contains_key(&g) {
                return Walk::Next;
            }
            let selection = trial.entry(g).or_insert_with(|| Selection::new(path, None));
            let before = selection.bytes();
            if let Some(conditions) = &entry.health_conditions {
                conditions.walk(|index, c| {
                    let at = Origin { entry: i, index };
                    if let Some(candidate) = storage_condition(c, at, path, &mut ignore) {
                        selection.offer(candidate, &mut ignore);
                    }
                    Walk::Next
                });
            }
            budget.sub(before);
            result = budget.add(selection.bytes());
            walk_on(&result)
        });
        result?;
        for (g, selection) in trial {
            budget.sub(selection.bytes());
            let kept: Vec<u128> = selection.kept().iter().map(|c| c.content).collect();
            indistinct[g as usize] = stored.get(&g) == Some(&kept);
        }
    }
    repair_entries(
        list,
        groups,
        path,
        budget,
        limit,
        sink,
        |i, entry, g, groups, budget, sink| {
            let duplicate = (!indistinct[g as usize]).then_some(RepairKind::IndistinctCondition);
            let make = || Selection::new(path, duplicate);
            let mut candidate = |index, c: &StorageConditionView<'_>, sink: Sink<'_>| {
                storage_condition(c, Origin { entry: i, index }, path, sink)
            };
            let conditions = entry.health_conditions.as_ref();
            choose(groups, g, conditions, &make, &mut candidate, budget, sink)
        },
    )
}
