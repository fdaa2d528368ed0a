//! Lists of health entries keyed by name: Pod `status.volumeHealth` and CSINode
//! `status.storageHealth`.
//!
//! Such a list has no length limit, so every step here is linear in it: names are found in hash
//! tables, never by scanning the list again, and entries are decoded one at a time.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use crate::conditions::{HealthCondition, check_conditions, check_length};
use crate::field::{ErrorKind, Errors, GoQuoted, LengthUnit, Path};
use crate::names::CSI_DRIVER_NAME_MAX_LEN;
use crate::view::{
    Fingerprinted, PodVolumeHealthView, RawList, StorageConditionView, StorageHealthView,
    VolumeConditionView, Walk, fingerprint, hash128,
};

/// A health entry: a name that keys the list, and its conditions.
pub(crate) trait HealthEntry<'a>: PartialEq + Deserialize<'a> + Fingerprinted {
    type Condition: HealthCondition<'a>;
    fn name(&self) -> &str;
    fn conditions(&self) -> Option<&RawList<'a, Self::Condition>>;
    /// Declarative checks of a non-empty name beyond Required.
    fn check_name_declarative(&self, _path: &Path<'_>, _errors: &mut Errors) {}
}

impl<'a> HealthEntry<'a> for PodVolumeHealthView<'a> {
    type Condition = VolumeConditionView<'a>;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> Option<&RawList<'a, VolumeConditionView<'a>>> {
        self.health_conditions.as_ref()
    }
}

impl<'a> HealthEntry<'a> for StorageHealthView<'a> {
    type Condition = StorageConditionView<'a>;

    fn name(&self) -> &str {
        &self.name
    }

    fn conditions(&self) -> Option<&RawList<'a, StorageConditionView<'a>>> {
        self.health_conditions.as_ref()
    }

    fn check_name_declarative(&self, path: &Path<'_>, errors: &mut Errors) {
        check_length(
            path,
            &self.name,
            CSI_DRIVER_NAME_MAX_LEN,
            LengthUnit::Bytes,
            errors,
        );
    }
}

/// An old entry, kept as what ratcheting compares with the new entry of the same name.
enum OldEntry<'l, 'a, E: HealthEntry<'a>> {
    /// From an old list short enough to hold: the entry itself.
    Held(&'l E),
    /// From a longer old list, walked: the entry's fingerprint, and its conditions without their
    /// items, so that what is kept per name stays small.
    Walked {
        fingerprint: u64,
        conditions: Option<RawList<'a, E::Condition>>,
    },
}

impl<'a, E: HealthEntry<'a>> OldEntry<'_, 'a, E> {
    fn equals(&self, entry: &E) -> bool {
        match self {
            OldEntry::Held(old) => *old == entry,
            OldEntry::Walked {
                fingerprint: old, ..
            } => *old == fingerprint(entry),
        }
    }

    fn conditions(&self) -> Option<&RawList<'a, E::Condition>> {
        match self {
            OldEntry::Held(old) => old.conditions(),
            OldEntry::Walked { conditions, .. } => conditions.as_ref(),
        }
    }
}

/// Validates a list of named entries at `path`.
///
/// `check_name` holds the handwritten checks of a non-empty name (it must name a volume or a
/// registered driver); they run for every entry. Declarative checks are skipped for a list equal
/// to the old one and for an entry equal to the old entry of the same name (the first one).
pub(crate) fn check_entries<'a, E: HealthEntry<'a>>(
    path: &Path<'_>,
    new: &RawList<'a, E>,
    old: Option<&RawList<'a, E>>,
    mut check_name: impl FnMut(&Path<'_>, &str, &mut Errors),
    errors: &mut Errors,
) {
    let unchanged = old == Some(new);
    let mut entry = |i, entry: &E, first_time, old: Option<&OldEntry<'_, 'a, E>>| {
        check_entry(
            path,
            i,
            entry,
            unchanged,
            first_time,
            old,
            &mut check_name,
            errors,
        );
    };
    // What a kubelet writes: lists short enough to hold, where names are found by comparing
    // them (at most 64 x 64), with no hashing.
    if let (Some(entries), Some(old_entries)) =
        (new.held(), old.map_or(Some(&[][..]), RawList::held))
    {
        for (i, new_entry) in entries.iter().enumerate() {
            let name = new_entry.name();
            if unchanged {
                entry(i, new_entry, true, None);
                continue;
            }
            let first_time = !entries[..i].iter().any(|e| e.name() == name);
            let old = old_entries
                .iter()
                .find(|o| o.name() == name)
                .map(OldEntry::Held);
            entry(i, new_entry, first_time, old.as_ref());
        }
        return;
    }
    // Names are keyed by their 128-bit keyed hash: a set then costs the same for any name. It
    // grows with the distinct names, not with the entries (a million entries may share one).
    let mut names: HashSet<u128> = HashSet::new();
    // The first old entry of each name the new list has.
    let mut old_by_name: HashMap<u128, OldEntry<'_, 'a, E>> = HashMap::new();
    if let (false, Some(old)) = (unchanged, old) {
        new.walk(|_, entry| {
            names.insert(hash128(entry.name()));
            Walk::Next
        });
        match old.held() {
            Some(entries) => {
                for entry in entries {
                    let name = hash128(entry.name());
                    if names.contains(&name) {
                        old_by_name.entry(name).or_insert(OldEntry::Held(entry));
                    }
                }
            }
            None => old.walk(|_, entry| {
                let name = hash128(entry.name());
                if names.contains(&name) {
                    old_by_name.entry(name).or_insert_with(|| OldEntry::Walked {
                        fingerprint: fingerprint(entry),
                        conditions: entry.conditions().map(RawList::without_items),
                    });
                }
                Walk::Next
            }),
        }
        // From here on: the names met so far.
        names.clear();
    }
    new.walk(|i, new_entry| {
        if unchanged {
            entry(i, new_entry, true, None);
        } else {
            let name = hash128(new_entry.name());
            entry(i, new_entry, names.insert(name), old_by_name.get(&name));
        }
        Walk::Next
    });
}

/// Validates the entry at `path[i]`: `first_time` when no entry before it has its name, `old`
/// the first old entry of that name.
#[allow(clippy::too_many_arguments)]
fn check_entry<'a, E: HealthEntry<'a>>(
    path: &Path<'_>,
    i: usize,
    entry: &E,
    unchanged: bool,
    first_time: bool,
    old: Option<&OldEntry<'_, 'a, E>>,
    check_name: &mut impl FnMut(&Path<'_>, &str, &mut Errors),
    errors: &mut Errors,
) {
    let item = path.index(i);
    let name_path = item.child("name");
    let name = entry.name();
    if !name.is_empty() {
        check_name(&name_path, name, errors);
    }
    let entry_unchanged = unchanged || old.is_some_and(|o| o.equals(entry));
    if !first_time {
        errors.declarative(
            &item,
            ErrorKind::Duplicate {
                rendered: GoQuoted(name).to_string(),
            },
        );
    }
    if !entry_unchanged {
        if name.is_empty() {
            errors.declarative(&name_path, ErrorKind::Required);
        } else {
            entry.check_name_declarative(&name_path, errors);
        }
    }
    let conditions = entry.conditions();
    // An unchanged entry ratchets all of its conditions; otherwise compare with the old entry of
    // the same name.
    let old_conditions = if entry_unchanged {
        Some(conditions)
    } else {
        old.map(OldEntry::conditions)
    };
    check_conditions(
        &item.child("healthConditions"),
        conditions,
        old_conditions,
        errors,
    );
}
