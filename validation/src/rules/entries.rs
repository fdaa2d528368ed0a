//! Lists of health entries keyed by name: Pod `status.volumeHealth` and CSINode
//! `status.storageHealth`.
//!
//! Such a list has no length limit, so every step here is linear in it: a list short enough to
//! hold compares names (at most 64 x 64, what a kubelet writes), a longer one finds them in hash
//! tables and is decoded one entry at a time.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use super::conditions::Conditions;
use crate::decode::{
    Fingerprinted, PodVolumeHealthView, RawList, StorageConditionView, StorageHealthView,
    VolumeConditionView, Walk, hash128,
};

/// A health entry: a name that keys the list, and its conditions.
pub(crate) trait HealthEntry<'a>: Deserialize<'a> + Fingerprinted {
    type Condition: Clone + Deserialize<'a> + Fingerprinted;
    fn name(&self) -> &str;
    fn conditions(&self) -> Conditions<'_, 'a, Self::Condition>;
}

impl<'a> HealthEntry<'a> for PodVolumeHealthView<'a> {
    type Condition = VolumeConditionView<'a>;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> Conditions<'_, 'a, VolumeConditionView<'a>> {
        self.health_conditions.as_ref()
    }
}

impl<'a> HealthEntry<'a> for StorageHealthView<'a> {
    type Condition = StorageConditionView<'a>;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> Conditions<'_, 'a, StorageConditionView<'a>> {
        self.health_conditions.as_ref()
    }
}

/// Calls `visit` with each entry in order and whether no entry before it has its name (two empty
/// names are the same name): the later ones are what upstream reports as Duplicate.
pub(crate) fn walk_names<'a, E: HealthEntry<'a>>(
    list: &RawList<'a, E>,
    mut visit: impl FnMut(usize, &E, bool),
) {
    if let Some(entries) = list.held() {
        for (i, entry) in entries.iter().enumerate() {
            let first = !entries[..i].iter().any(|e| e.name() == entry.name());
            visit(i, entry, first);
        }
        return;
    }
    // Keyed 128-bit hashes: the set grows with the distinct names, not with the entries.
    let mut seen: HashSet<u128> = HashSet::new();
    list.walk(|i, entry| {
        visit(i, entry, seen.insert(hash128(entry.name())));
        Walk::Next
    });
}

/// The old list's entries as the new list's entries are matched to them: by name, the first old
/// entry of that name (apimachinery's `lookup`).
pub(crate) enum OldEntries<'l, 'a, E: HealthEntry<'a>> {
    /// An old list absent or empty: nothing matches.
    Empty,
    /// Both lists short enough to hold: names are compared.
    Held(&'l [E]),
    /// Otherwise: the conditions of the first old entry of each name the new list has, kept
    /// without their items so that what is kept per name stays small.
    Indexed(HashMap<u128, Option<RawList<'a, E::Condition>>>),
}

impl<'l, 'a, E: HealthEntry<'a>> OldEntries<'l, 'a, E> {
    pub(crate) fn new(new: &RawList<'a, E>, old: Option<&'l RawList<'a, E>>) -> Self {
        let Some(old) = old.filter(|old| old.len() > 0) else {
            return OldEntries::Empty;
        };
        if let (Some(old), Some(_)) = (old.held(), new.held()) {
            return OldEntries::Held(old);
        }
        let mut names: HashSet<u128> = HashSet::new();
        new.walk(|_, entry| {
            names.insert(hash128(entry.name()));
            Walk::Next
        });
        let mut index = HashMap::new();
        old.walk(|_, entry| {
            let name = hash128(entry.name());
            if names.contains(&name) {
                index
                    .entry(name)
                    .or_insert_with(|| entry.conditions().map(RawList::without_items));
            }
            Walk::Next
        });
        OldEntries::Indexed(index)
    }

    /// The conditions of the old entry `name` is matched to; `None` when it is matched to none.
    pub(crate) fn conditions(&self, name: &str) -> Option<Conditions<'_, 'a, E::Condition>> {
        match self {
            OldEntries::Empty => None,
            OldEntries::Held(entries) => entries
                .iter()
                .find(|entry| entry.name() == name)
                .map(HealthEntry::conditions),
            OldEntries::Indexed(index) => index.get(&hash128(name)).map(Option::as_ref),
        }
    }
}
