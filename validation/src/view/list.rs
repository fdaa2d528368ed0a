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

/// Lists of at most this many items are held decoded after their read, so the rules' several
/// walks over a short list (the health conditions, a pod's volumes) decode it once. Longer lists
/// are decoded again on each walk: what they hold stays bounded, whatever their length.
const HELD_ITEMS: usize = 64;

/// A list kept as its JSON text: length, and its items held when the list is short, else decoded
/// on demand and compared by fingerprint.
pub(crate) struct RawList<'a, T> {
    text: &'a RawValue,
    len: usize,
    items: Items<T>,
}

enum Items<T> {
    /// Every item: the list has at most [`HELD_ITEMS`].
    Held(Vec<T>),
    /// None: the items are decoded from the text on each walk, and compared by their keyed hash.
    InText { fingerprint: u64 },
}

impl<T: Clone> Clone for RawList<'_, T> {
    fn clone(&self) -> Self {
        RawList {
            items: match &self.items {
                Items::Held(items) => Items::Held(items.clone()),
                Items::InText { fingerprint } => Items::InText {
                    fingerprint: *fingerprint,
                },
            },
            ..*self
        }
    }
}

impl<'a, T: Deserialize<'a> + Fingerprinted> RawList<'a, T> {
    /// Reads and checks the list at `text`.
    pub(crate) fn read(text: &'a RawValue) -> Result<Self, serde_json::Error> {
        let mut held = Vec::new();
        // Started when the list turns out too long to hold.
        let mut long: Option<Fingerprint> = None;
        let len = walk_text::<T>(text.get(), |i, item| {
            match &mut long {
                Some(fingerprint) => fingerprint.add(&item),
                None if i < HELD_ITEMS => held.push(item),
                None => {
                    let mut fingerprint = Fingerprint::new();
                    for held in std::mem::take(&mut held) {
                        fingerprint.add(&held);
                    }
                    fingerprint.add(&item);
                    long = Some(fingerprint);
                }
            }
            Walk::Next
        })?;
        Ok(match long {
            Some(fingerprint) => RawList {
                text,
                len,
                items: Items::InText {
                    fingerprint: fingerprint.finish(len),
                },
            },
            None => RawList {
                text,
                len,
                items: Items::Held(held),
            },
        })
    }

    /// Reads a list that [`typed_list_text`] wrote.
    pub(crate) fn read_typed(text: &'a RawValue) -> Self {
        Self::read(text).expect("a list serialized from k8s-openapi types reads back")
    }

    /// Calls `visit` with each item in order until it says stop.
    pub(crate) fn walk(&self, mut visit: impl FnMut(usize, &T) -> Walk) {
        if let Some(items) = self.held() {
            for (i, item) in items.iter().enumerate() {
                if visit(i, item) == Walk::Stop {
                    return;
                }
            }
            return;
        }
        // The text decoded as this same type when the list was read, so it decodes again.
        let _ = walk_text::<T>(self.text.get(), |i, item| visit(i, &item));
    }

    /// The same list without its items, to keep many of them: walks decode the text again.
    pub(crate) fn without_items(&self) -> Self {
        RawList {
            text: self.text,
            len: self.len,
            items: Items::InText {
                fingerprint: self.fingerprint(),
            },
        }
    }
}

impl<T> RawList<'_, T> {
    /// How many items.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The items, when the list is short enough to hold them.
    pub(crate) fn held(&self) -> Option<&[T]> {
        match &self.items {
            Items::Held(items) => Some(items),
            Items::InText { .. } => None,
        }
    }
}

impl<T: Fingerprinted> RawList<'_, T> {
    /// The keyed hash of the items: kept for a long list, made from the items of a held one.
    fn fingerprint(&self) -> u64 {
        match &self.items {
            Items::InText { fingerprint } => *fingerprint,
            Items::Held(items) => {
                let mut fingerprint = Fingerprint::new();
                for item in items {
                    fingerprint.add(item);
                }
                fingerprint.finish(self.len)
            }
        }
    }
}

impl<T> fmt::Debug for RawList<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawList").field("len", &self.len).finish()
    }
}

/// Two lists are equal when their items are, in order: held items compared as they are, others
/// by fingerprint.
impl<T: PartialEq + Fingerprinted> PartialEq for RawList<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && match (self.held(), other.held()) {
                (Some(a), Some(b)) => a == b,
                _ => self.fingerprint() == other.fingerprint(),
            }
    }
}

impl<T: Fingerprinted> Hash for RawList<'_, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        match &self.items {
            Items::InText { fingerprint } => fingerprint.hash(state),
            Items::Held(items) => items.iter().for_each(|item| item.feed(state)),
        }
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
/// there were.
fn walk_text<'a, T: Deserialize<'a>>(
    text: &'a str,
    visit: impl FnMut(usize, T) -> Walk,
) -> Result<usize, serde_json::Error> {
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

impl<'de, T: Deserialize<'de>, F: FnMut(usize, T) -> Walk> DeserializeSeed<'de> for ListSeed<T, F> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>, F: FnMut(usize, T) -> Walk> Visitor<'de> for ListSeed<T, F> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<usize, A::Error> {
        let mut len = 0;
        let mut walking = true;
        // Items after a stop are still decoded: the whole list is checked on every walk.
        while let Some(item) = seq.next_element::<T>()? {
            if walking {
                walking = (self.visit)(len, item) == Walk::Next;
            }
            len += 1;
        }
        Ok(len)
    }
}

/// Keyed SipHash over the items: equal items give equal fingerprints, and with a key drawn per
/// process nobody can make two different lists collide on purpose. A fingerprint is only ever
/// compared with one other (a list with the old object's), so 64 bits leave a chance of 2^-64
/// per comparison; sets of many names use [`hash128`]. Short lists, held, compare their items
/// and are never hashed on the request path.
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

/// Reads a [`Text`] borrowed from the body where it can be: serde's own `Cow<str>` always copies,
/// and `#[serde(borrow)]` borrows only a field written `Cow<'a, str>` (not an alias, nor inside
/// an `Option`).
#[derive(serde::Deserialize)]
pub(crate) struct Borrowed<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

/// Reads an optional [`Text`] member borrowed from the body, for `deserialize_with`.
pub(crate) fn optional_text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Text<'a>>, D::Error> {
    Ok(Option::<Borrowed<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Clone, Debug, Deserialize, Hash, PartialEq)]
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
            .held()
            .unwrap_or_default()
            .iter()
            .map(|i| i.name.as_deref().unwrap_or_default())
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
            seen.push((i, item.name.clone().unwrap_or_default().into_owned()));
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
