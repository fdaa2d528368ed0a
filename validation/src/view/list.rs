//! Lists read from a review without materializing them.
//!
//! A list in an object may be as long as the body allows: millions of `{}` in 7 MiB. Decoded
//! into structs it would take many times its own size, so a [`RawList`] keeps only the list's
//! text (borrowed from the body), its length and a fingerprint for equality, and each rule walks
//! the items by decoding them one at a time. The items are decoded once when the list is read,
//! so an item that is not of its type fails the read exactly as a decoded `Vec` would.

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::marker::PhantomData;
use std::sync::LazyLock;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::json;

/// A list kept as its JSON text: length, fingerprint and items decoded on demand.
pub(crate) struct RawList<'a, T> {
    text: &'a RawValue,
    len: usize,
    fingerprint: u64,
    item: PhantomData<fn() -> T>,
}

impl<T> Clone for RawList<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RawList<'_, T> {}

impl<'a, T: Deserialize<'a> + Fingerprinted> RawList<'a, T> {
    /// Reads and checks the list at `text`.
    pub(crate) fn read(text: &'a RawValue) -> Result<Self, serde_json::Error> {
        let (len, fingerprint) = walk_text::<T>(text.get(), |_, item| {
            // Only the item's type is checked here.
            drop(item);
            Walk::Next
        })?;
        Ok(RawList {
            text,
            len,
            fingerprint,
            item: PhantomData,
        })
    }

    /// Reads a list that [`typed_list_text`] wrote.
    pub(crate) fn read_typed(text: &'a RawValue) -> Self {
        Self::read(text).expect("a list serialized from k8s-openapi types reads back")
    }

    /// Calls `visit` with each item in order until it says stop.
    pub(crate) fn walk(&self, mut visit: impl FnMut(usize, T) -> Walk) {
        // The text decoded as this same type when the list was read, so it decodes again.
        let _ = walk_text::<T>(self.text.get(), &mut visit);
    }

    /// The items, for a list known to be short.
    pub(crate) fn collect(&self) -> Vec<T> {
        let mut items = Vec::with_capacity(self.len);
        self.walk(|_, item| {
            items.push(item);
            Walk::Next
        });
        items
    }
}

impl<T> RawList<'_, T> {
    /// How many items.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<T> fmt::Debug for RawList<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawList").field("len", &self.len).finish()
    }
}

/// Two lists are equal when their items are, in order: same length, same fingerprint.
impl<T> PartialEq for RawList<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.fingerprint == other.fingerprint
    }
}

impl<T> Hash for RawList<'_, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        self.fingerprint.hash(state);
    }
}

impl<'de: 'a, 'a, T: Deserialize<'a> + Fingerprinted> Deserialize<'de> for RawList<'a, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <&'a RawValue>::deserialize(deserializer)?;
        // The item's own position would be within the list; the reader adds the list's.
        RawList::read(text).map_err(|e| de::Error::custom(json::message_without_position(&e)))
    }
}

/// Whether a walk goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    Next,
    Stop,
}

/// Decodes the items of the list `text` one by one, giving each to `visit`; returns how many
/// there were and their fingerprint.
fn walk_text<'a, T: Deserialize<'a> + Fingerprinted>(
    text: &'a str,
    visit: impl FnMut(usize, T) -> Walk,
) -> Result<(usize, u64), serde_json::Error> {
    json::from_str_seed(
        text,
        ListSeed::<T, _> {
            visit,
            item: PhantomData,
        },
    )
}

struct ListSeed<T, F> {
    visit: F,
    item: PhantomData<fn() -> T>,
}

impl<'de, T: Deserialize<'de> + Fingerprinted, F: FnMut(usize, T) -> Walk> DeserializeSeed<'de>
    for ListSeed<T, F>
{
    type Value = (usize, u64);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de> + Fingerprinted, F: FnMut(usize, T) -> Walk> Visitor<'de>
    for ListSeed<T, F>
{
    type Value = (usize, u64);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut fingerprint = Fingerprint::new();
        let mut len = 0;
        let mut walking = true;
        while let Some(item) = seq.next_element::<T>()? {
            fingerprint.add(&item);
            if walking {
                walking = (self.visit)(len, item) == Walk::Next;
            }
            len += 1;
        }
        Ok((len, fingerprint.finish(len)))
    }
}

/// Keyed SipHash over the items: equal items give equal fingerprints, and with a key drawn per
/// process nobody can make two different lists collide on purpose. A fingerprint is only ever
/// compared with one other (a list with the old object's), so 64 bits leave a chance of 2^-64
/// per comparison; sets of many names use [`hash128`].
struct Fingerprint(std::hash::DefaultHasher);

static KEYS: LazyLock<(RandomState, RandomState)> =
    LazyLock::new(|| (RandomState::new(), RandomState::new()));

impl Fingerprint {
    fn new() -> Self {
        Fingerprint(KEYS.0.build_hasher())
    }

    fn add<T: Fingerprinted>(&mut self, item: &T) {
        item.feed(&mut self.0);
    }

    fn finish(mut self, len: usize) -> u64 {
        self.0.write_usize(len);
        self.0.finish()
    }
}

/// The fingerprint of one item, as a list's is made of its items'.
pub(crate) fn fingerprint<T: Fingerprinted>(item: &T) -> u64 {
    let mut fingerprint = Fingerprint::new();
    fingerprint.add(item);
    fingerprint.finish(1)
}

/// The JSON text of a typed list, for the typed entry points, which read it as the webhooks read
/// a review's: one implementation of the rules.
pub(crate) fn typed_list_text<T: serde::Serialize>(items: &[T]) -> Box<RawValue> {
    // k8s-openapi types are structs of strings, lists and timestamps: always JSON.
    serde_json::value::to_raw_value(items).expect("k8s-openapi types serialize to JSON")
}

/// The 128-bit keyed hash of one value, for sets of names that need not keep the names.
pub(crate) fn hash128<T: Hash + ?Sized>(value: &T) -> u128 {
    (u128::from(KEYS.0.hash_one(value)) << 64) | u128::from(KEYS.1.hash_one(value))
}

/// What goes into a list's fingerprint: every field that equality compares.
pub(crate) trait Fingerprinted {
    /// Feeds the fields to `state`, as `Hash` would.
    fn feed<H: Hasher>(&self, state: &mut H);
}

/// A string member borrowed from the body where it holds no escapes.
pub(crate) type Text<'a> = Cow<'a, str>;

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, Hash, PartialEq)]
    struct Item<'a> {
        #[serde(borrow, default)]
        name: Option<Cow<'a, str>>,
    }

    impl Fingerprinted for Item<'_> {
        fn feed<H: Hasher>(&self, state: &mut H) {
            self.hash(state);
        }
    }

    fn list(json: &str) -> RawList<'_, Item<'_>> {
        crate::json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn length_items_and_equality() {
        let a = list(r#"[{"name":"x"}, {}, {"name":"y","other":[1,2]}]"#);
        assert_eq!(a.len(), 3);
        let names: Vec<_> = a
            .collect()
            .into_iter()
            .map(|i| i.name.unwrap_or_default().into_owned())
            .collect();
        assert_eq!(names, ["x", "", "y"]);
        // Equal when the items are, whatever the spacing and the members ignored.
        assert!(a == list(r#"[ {"name":"x"},{},{"name":"y"} ]"#));
        assert!(a != list(r#"[{"name":"x"},{},{"name":"z"}]"#));
        assert!(a != list(r#"[{"name":"x"},{}]"#));
        assert!(a != list(r#"[{},{"name":"x"},{"name":"y"}]"#));
    }

    #[test]
    fn a_walk_stops_when_asked() {
        let a = list(r#"[{"name":"x"},{"name":"y"},{"name":"z"}]"#);
        let mut seen = Vec::new();
        a.walk(|i, item| {
            seen.push((i, item.name.unwrap_or_default().into_owned()));
            if i == 1 { Walk::Stop } else { Walk::Next }
        });
        assert_eq!(seen, [(0, "x".to_owned()), (1, "y".to_owned())]);
    }

    #[test]
    fn items_of_the_wrong_type_fail_the_read() {
        for json in [r#"[{"name":"x"}, 7]"#, r#"[["x"]]"#, r#"{"name":"x"}"#] {
            assert!(
                crate::json::from_str::<RawList<'_, Item<'_>>>(json).is_err(),
                "{json}"
            );
        }
    }

    #[test]
    fn millions_of_items_take_no_memory_per_item() {
        let json = format!("[{}{{}}]", "{},".repeat(1_000_000));
        let a = list(&json);
        assert_eq!(a.len(), 1_000_001);
    }
}
