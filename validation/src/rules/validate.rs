//! The checks the field rules are written with, after upstream's `validate` package
//! (`k8s.io/apimachinery/pkg/api/validate` of Kubernetes v1.37.2), which the `+k8s:` tags
//! generate calls to, and the `field` errors its handwritten code returns.
//!
//! A rule names a field, a limit and where its errors go ([`Checks`]). How a list is kept is
//! decided here, and only here. A list of at most 64 items is held, and its items are compared
//! pairwise. A longer one is kept as its text ([`RawList`]) and decoded one item at a time on
//! each walk, and its keys are hashed. Either way a check is linear in the body and keeps
//! memory bounded by it.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use serde::Deserialize;

use crate::decode::{
    Fingerprinted, NameView, PodVolumeHealthView, RawList, StorageConditionView, StorageHealthView,
    VolumeConditionView, Walk, hash128, same_list,
};
use crate::field::{ErrorKind, Errors, FieldPath, LengthUnit};

/// Where an error goes, which decides its place in the answer: [`Errors::handwritten`],
/// [`Errors::declarative`] or [`Errors::own`].
type Record = fn(&mut Errors, &FieldPath<'_>, ErrorKind);

/// A list as read: `None` when absent or `null`, which the checks treat as empty.
pub(crate) type List<'l, 'a, T> = Option<&'l RawList<'a, T>>;

/// The checks of one origin, each recording its errors where that origin's go.
pub(crate) struct Checks<'e> {
    errors: &'e mut Errors,
    record: Record,
}

impl<'e> Checks<'e> {
    /// Upstream's handwritten checks (`validation.go`).
    pub(crate) fn handwritten(errors: &'e mut Errors) -> Self {
        Checks {
            errors,
            record: Errors::handwritten,
        }
    }

    /// Upstream's declarative checks (`zz_generated.validations.go`, from the `+k8s:` tags).
    pub(crate) fn declarative(errors: &'e mut Errors) -> Self {
        Checks {
            errors,
            record: Errors::declarative,
        }
    }

    /// This project's own rule.
    pub(crate) fn own(errors: &'e mut Errors) -> Self {
        Checks {
            errors,
            record: Errors::own,
        }
    }

    /// An error of a check written out in a rule.
    pub(crate) fn report(&mut self, path: &FieldPath<'_>, kind: ErrorKind) {
        (self.record)(self.errors, path, kind);
    }

    /// `validate.RequiredValue` (`+k8s:required`), and handwritten `field.Required`: Required
    /// when empty. Returns whether the value is set: nothing more is checked of an empty one
    /// (the generated code's `MarkShortCircuit`).
    pub(crate) fn required_value(&mut self, path: &FieldPath<'_>, value: &str) -> bool {
        if value.is_empty() {
            self.report(path, ErrorKind::Required);
            return false;
        }
        true
    }

    /// `validate.Enum` (`+k8s:enum`), and handwritten `field.NotSupported`: NotSupported
    /// outside `supported`, which the message lists in the order given.
    pub(crate) fn enum_value(
        &mut self,
        path: &FieldPath<'_>,
        value: &str,
        supported: &'static [&'static str],
    ) {
        if !supported.contains(&value) {
            let value = value.to_owned();
            self.report(path, ErrorKind::NotSupported { value, supported });
        }
    }

    /// `validate.MaxBytes` (`+k8s:maxBytes`), and handwritten `field.TooLong`: TooLong over
    /// `max` bytes (Go's `len`).
    pub(crate) fn max_bytes(&mut self, path: &FieldPath<'_>, value: &str, max: usize) {
        if value.len() > max {
            let unit = LengthUnit::Bytes;
            self.report(path, ErrorKind::TooLong { max, unit });
        }
    }

    /// `validate.MaxItems` (`+k8s:maxItems`), and handwritten `field.TooMany`: TooMany over
    /// `max`. Returns whether the list is within: nothing more is checked of a longer one
    /// (`MarkShortCircuit`).
    pub(crate) fn max_items<T>(
        &mut self,
        path: &FieldPath<'_>,
        list: List<'_, '_, T>,
        max: usize,
    ) -> bool {
        let count = len(list);
        if count > max {
            self.report(path, ErrorKind::TooMany { count, max });
            return false;
        }
        true
    }

    /// `validate.Unique` over the keys (`+k8s:listType=map`): Duplicate at every item whose
    /// key an earlier item has, its value the whole item as `render` writes it.
    pub(crate) fn unique<'a, T: Keyed + Deserialize<'a> + Fingerprinted>(
        &mut self,
        path: &FieldPath<'_>,
        list: List<'_, 'a, T>,
        render: fn(&T) -> String,
    ) {
        let Some(list) = list else { return };
        each_seen(path, list, |item_path, item, seen| {
            if seen {
                let rendered = render(item);
                self.report(item_path, ErrorKind::Duplicate { rendered });
            }
        });
    }
}

/// Whether a field differs from the same field of the matched old item: the generated code
/// validates a field again only then. Without an old item, every field is new.
pub(crate) fn changed<V: PartialEq + ?Sized>(new: &V, old: Option<&V>) -> bool {
    old != Some(new)
}

/// The ratcheting of a whole list (`equality.Semantic.DeepEqual`): an unchanged list is not
/// checked again. An absent list is the same as an empty one.
pub(crate) fn unchanged_list<T: PartialEq + Fingerprinted>(
    new: List<'_, '_, T>,
    old: List<'_, '_, T>,
) -> bool {
    same_list(new, old)
}

/// How many items.
pub(crate) fn len<T>(list: List<'_, '_, T>) -> usize {
    list.map_or(0, RawList::len)
}

/// Each item with its path, in order: a loop of handwritten code.
pub(crate) fn each<'a, T: Deserialize<'a> + Fingerprinted>(
    path: &FieldPath<'_>,
    list: List<'_, 'a, T>,
    mut visit: impl FnMut(&FieldPath<'_>, &T),
) {
    let Some(list) = list else { return };
    list.walk(|i, item| {
        visit(&path.index(i), item);
        Walk::Next
    });
}

/// What tells the items of a list apart: the `+k8s:listMapKey`s of a `+k8s:listType=map` list,
/// or the field of a handwritten `seen` set.
pub(crate) trait Keyed {
    type Key<'k>: Eq + Hash
    where
        Self: 'k;

    fn key(&self) -> Self::Key<'_>;
}

/// Each item with its path and whether an earlier item has its key: the `seen` set of
/// handwritten code. Two empty keys are the same key.
pub(crate) fn each_seen<'a, T: Keyed + Deserialize<'a> + Fingerprinted>(
    path: &FieldPath<'_>,
    list: &RawList<'a, T>,
    mut visit: impl FnMut(&FieldPath<'_>, &T, bool),
) {
    if let Some(items) = list.held() {
        for (i, item) in items.iter().enumerate() {
            let key = item.key();
            let seen = items[..i].iter().any(|earlier| earlier.key() == key);
            visit(&path.index(i), item, seen);
        }
        return;
    }
    // Keyed 128-bit hashes: the set grows with the distinct keys, not with the items.
    let mut seen: HashSet<u128> = HashSet::new();
    list.walk(|i, item| {
        visit(&path.index(i), item, !seen.insert(hash128(&item.key())));
        Walk::Next
    });
}

/// What a check of a new item reads of the old item it is matched to. A matched old item is
/// held when both lists are; otherwise the old list is walked once and this part of each
/// matched item kept, small: an entry keeps its conditions without their items.
pub(crate) trait Correlated<'a> {
    type Old: PartialEq;

    /// The part, in a held item.
    fn old_part(&self) -> &Self::Old;

    /// The part, kept beyond a walk.
    fn keep(&self) -> Self::Old;
}

impl<'a> Correlated<'a> for VolumeConditionView<'a> {
    type Old = Self;

    fn old_part(&self) -> &Self {
        self
    }

    fn keep(&self) -> Self {
        self.clone()
    }
}

impl<'a> Correlated<'a> for PodVolumeHealthView<'a> {
    type Old = Option<RawList<'a, VolumeConditionView<'a>>>;

    fn old_part(&self) -> &Self::Old {
        &self.health_conditions
    }

    fn keep(&self) -> Self::Old {
        self.health_conditions.as_ref().map(RawList::without_items)
    }
}

impl<'a> Correlated<'a> for StorageHealthView<'a> {
    type Old = Option<RawList<'a, StorageConditionView<'a>>>;

    fn old_part(&self) -> &Self::Old {
        &self.health_conditions
    }

    fn keep(&self) -> Self::Old {
        self.health_conditions.as_ref().map(RawList::without_items)
    }
}

/// `validate.EachSliceVal` of a `+k8s:listType=map` list, its match the key and its equiv
/// `SemanticDeepEqual`: `validator` gets each new item with its path and the part of the first
/// old item with its key (apimachinery's `lookup`), and an item whose part equals the old one
/// is not validated again.
pub(crate) fn each_slice_val<'a, T>(
    path: &FieldPath<'_>,
    new: List<'_, 'a, T>,
    old: List<'_, 'a, T>,
    mut validator: impl FnMut(&FieldPath<'_>, &T, Option<&T::Old>),
) where
    T: Keyed + Correlated<'a> + Deserialize<'a> + Fingerprinted,
{
    let Some(new) = new else { return };
    let old = OldItems::new(new, old);
    new.walk(|i, item| {
        let old = old.lookup(item);
        if old.is_none_or(|old| item.old_part() != old) {
            validator(&path.index(i), item, old);
        }
        Walk::Next
    });
}

/// The old list as the new list's items are matched to it: by key, the first old item.
enum OldItems<'l, 'a, T: Correlated<'a>> {
    /// An old list absent or empty: nothing matches.
    Empty,
    /// Both lists held: keys are compared.
    Held(&'l [T]),
    /// Otherwise: the kept part of the first old item of each key the new list has, so that
    /// what is kept stays bounded by the new list.
    Indexed(HashMap<u128, T::Old>),
}

impl<'l, 'a, T> OldItems<'l, 'a, T>
where
    T: Keyed + Correlated<'a> + Deserialize<'a> + Fingerprinted,
{
    fn new(new: &RawList<'a, T>, old: List<'l, 'a, T>) -> Self {
        let Some(old) = old.filter(|old| old.len() > 0) else {
            return OldItems::Empty;
        };
        if let (Some(old), Some(_)) = (old.held(), new.held()) {
            return OldItems::Held(old);
        }
        let mut keys: HashSet<u128> = HashSet::new();
        new.walk(|_, item| {
            keys.insert(hash128(&item.key()));
            Walk::Next
        });
        let mut index = HashMap::new();
        old.walk(|_, item| {
            let key = hash128(&item.key());
            if keys.contains(&key) {
                index.entry(key).or_insert_with(|| item.keep());
            }
            Walk::Next
        });
        OldItems::Indexed(index)
    }

    fn lookup(&self, item: &T) -> Option<&T::Old> {
        match self {
            OldItems::Empty => None,
            OldItems::Held(items) => {
                let key = item.key();
                let old = items.iter().find(|old| old.key() == key)?;
                Some(old.old_part())
            }
            OldItems::Indexed(index) => index.get(&hash128(&item.key())),
        }
    }
}

/// Which names a pod's health entries give are in its `spec.volumes`: the smaller of the two
/// lists hashed and sorted the first time a name is looked up, the other walked against it.
/// So what is held is at most 16 bytes per item of the smaller list, whichever an attacker
/// makes long, and each lookup is a binary search.
pub(crate) struct NameSet<'l, 'a> {
    volumes: List<'l, 'a, NameView<'a>>,
    entries: List<'l, 'a, PodVolumeHealthView<'a>>,
    found: OnceCell<Found>,
}

/// What the first lookup built.
enum Found {
    /// The volumes' names, sorted.
    Volumes(Vec<u128>),
    /// The entries' names, sorted, and whether each is a volume's.
    Entries(Vec<u128>, Vec<bool>),
}

fn sorted(mut names: Vec<u128>) -> Vec<u128> {
    names.sort_unstable();
    names.dedup();
    names
}

impl<'l, 'a> NameSet<'l, 'a> {
    /// The names of `volumes` that `entries` may ask for.
    pub(crate) fn new(
        volumes: List<'l, 'a, NameView<'a>>,
        entries: List<'l, 'a, PodVolumeHealthView<'a>>,
    ) -> Self {
        NameSet {
            volumes,
            entries,
            found: OnceCell::new(),
        }
    }

    /// Whether `name`, the name of an entry, is the name of a volume.
    pub(crate) fn contains(&self, name: &str) -> bool {
        // A few names, as a pod has, are compared rather than hashed.
        if let Some(names) = self.volumes.map_or(Some(&[][..]), RawList::held)
            && names.len() <= 16
        {
            return names.iter().any(|item| item.name.as_deref() == Some(name));
        }
        let key = hash128(name);
        match self.found.get_or_init(|| self.build()) {
            Found::Volumes(names) => names.binary_search(&key).is_ok(),
            Found::Entries(names, present) => match names.binary_search(&key) {
                Ok(i) => present[i],
                // Not an entry's name: walked for, which the rules never need.
                Err(_) => self.walk_for(name),
            },
        }
    }

    fn build(&self) -> Found {
        let volumes = self.volumes.map_or(0, RawList::len);
        let entries = self.entries.map_or(0, RawList::len);
        let mut names = Vec::with_capacity(volumes.min(entries));
        if entries < volumes {
            if let Some(list) = self.entries {
                list.walk(|_, entry| {
                    names.push(hash128(&*entry.name));
                    Walk::Next
                });
            }
            let names = sorted(names);
            let mut present = vec![false; names.len()];
            if let Some(list) = self.volumes {
                list.walk(|_, volume| {
                    if let Some(name) = &volume.name
                        && let Ok(i) = names.binary_search(&hash128(&**name))
                    {
                        present[i] = true;
                    }
                    Walk::Next
                });
            }
            Found::Entries(names, present)
        } else {
            if let Some(list) = self.volumes {
                list.walk(|_, volume| {
                    if let Some(name) = &volume.name {
                        names.push(hash128(&**name));
                    }
                    Walk::Next
                });
            }
            Found::Volumes(sorted(names))
        }
    }

    fn walk_for(&self, name: &str) -> bool {
        let mut found = false;
        if let Some(list) = self.volumes {
            list.walk(|_, volume| {
                found = volume.name.as_deref() == Some(name);
                if found { Walk::Stop } else { Walk::Next }
            });
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions(text: &str) -> RawList<'_, VolumeConditionView<'_>> {
        crate::decode::json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// `n` conditions `{"status":"Degraded","reason":"R<i>"}` after `first`.
    fn list_text(first: &[&str], n: usize) -> String {
        let items: Vec<String> = first
            .iter()
            .map(|item| (*item).to_owned())
            .chain((0..n).map(|i| format!(r#"{{"status":"Degraded","reason":"R{i}"}}"#)))
            .collect();
        format!("[{}]", items.join(","))
    }

    /// What `each_slice_val` gives the validator: each visited index with the old message.
    fn visited(
        new: &RawList<'_, VolumeConditionView<'_>>,
        old: &RawList<'_, VolumeConditionView<'_>>,
    ) -> Vec<(String, Option<String>)> {
        let root = FieldPath::root("c");
        let mut seen = Vec::new();
        each_slice_val(&root, Some(new), Some(old), |path, _, old| {
            let message = old.map(|old| old.message.as_deref().unwrap_or("-").to_owned());
            seen.push((path.to_string(), message));
        });
        seen
    }

    /// A new item is matched to the first old item with its key, and skipped when equal to
    /// it, whether the old list is held or kept as its text.
    #[test]
    fn each_slice_val_matches_the_first_old_item_held_or_not() {
        let new = conditions(
            r#"[{"status":"Degraded","reason":"R5","message":"new"},
                {"status":"Degraded","reason":"R7"},
                {"status":"Degraded","reason":"Other"},
                {"status":"DataLoss","reason":"R5"}]"#,
        );
        let first = [r#"{"status":"Degraded","reason":"R5","message":"first"}"#];
        let short = list_text(&first, 10);
        let long = list_text(&first, 100);
        let (short, long) = (conditions(&short), conditions(&long));
        assert!(short.held().is_some() && long.held().is_none());
        let want = [
            ("c[0]".to_owned(), Some("first".to_owned())),
            ("c[2]".to_owned(), None),
            ("c[3]".to_owned(), None),
        ];
        assert_eq!(visited(&new, &short), want);
        assert_eq!(visited(&new, &long), want);
    }

    /// The items whose key an earlier item has, held or kept as text.
    #[test]
    fn each_seen_finds_the_same_repeats_held_or_not() {
        let repeats = |text: &str| {
            let list = conditions(text);
            let mut repeated = Vec::new();
            each_seen(&FieldPath::root("c"), &list, |path, _, seen| {
                if seen {
                    repeated.push(path.to_string());
                }
            });
            (list.held().is_some(), repeated)
        };
        let again = r#"{"status":"Degraded","reason":"R3","message":"again"}"#;
        let short = list_text(&[], 5).replace(']', &format!(",{again}]"));
        let long = list_text(&[], 100).replace(']', &format!(",{again}]"));
        assert_eq!(repeats(&short), (true, vec!["c[5]".to_owned()]));
        assert_eq!(repeats(&long), (false, vec!["c[100]".to_owned()]));
    }
}
