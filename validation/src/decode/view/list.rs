//! Lists read from a review with memory bounded by the body, whatever their length.
//!
//! A list in an object may be as long as the body allows: millions of `{}` in 7 MiB. Decoded
//! into structs it would take many times its own size. So a [`RawList`] holds its items only
//! when there are at most [`HELD_ITEMS`] of them, which is what a review carries (at most 16
//! conditions, a few volumes). [`crate::decode::json::from_str`] reads those in the one pass over the
//! body. A longer list makes that pass fail, and the body is read again with each list's text
//! captured (borrowed from the body): such a list keeps its text, its length and a fingerprint
//! for equality (`fingerprint`), and each rule walks it by decoding the items one at a time
//! (`walk`). Either way every item is decoded when the list is read, so an item that is not of
//! its type fails the read exactly as a decoded `Vec` would.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::fingerprint::{Fingerprint, Fingerprinted};
use super::walk::{Walk, walk_text};
use crate::decode::json;

/// Lists of at most this many items are held decoded after their read, so the rules' several
/// walks over a short list (the health conditions, a pod's volumes) decode it once. Longer lists
/// are decoded again on each walk: what they hold stays bounded, whatever their length.
const HELD_ITEMS: usize = 64;

/// A list kept as its JSON text: length, and its items held when the list is short, else decoded
/// on demand and compared by fingerprint.
pub(crate) struct RawList<'a, T> {
    len: usize,
    items: Items<'a, T>,
}

enum Items<'a, T> {
    /// Every item: the list has at most [`HELD_ITEMS`]. The text is there when the list was read
    /// from it (see [`crate::decode::strict::Lists`]).
    Held {
        items: Vec<T>,
        text: Option<&'a RawValue>,
    },
    /// None: the items are decoded from the text on each walk, and compared by their keyed hash.
    InText {
        text: &'a RawValue,
        fingerprint: u64,
    },
}

impl<T: Clone> Clone for RawList<'_, T> {
    fn clone(&self) -> Self {
        RawList {
            len: self.len,
            items: match &self.items {
                Items::Held { items, text } => Items::Held {
                    items: items.clone(),
                    text: *text,
                },
                Items::InText { text, fingerprint } => Items::InText {
                    text,
                    fingerprint: *fingerprint,
                },
            },
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
                len,
                items: Items::InText {
                    text,
                    fingerprint: fingerprint.finish(len),
                },
            },
            None => RawList {
                len,
                items: Items::Held {
                    items: held,
                    text: Some(text),
                },
            },
        })
    }

    /// A list of items already decoded, held whatever their number: the caller holds them
    /// already (a typed object).
    pub(crate) fn from_items(items: Vec<T>) -> Self {
        RawList {
            len: items.len(),
            items: Items::Held { items, text: None },
        }
    }

    /// Calls `visit` with each item in order until it says stop.
    pub(crate) fn walk(&self, mut visit: impl FnMut(usize, &T) -> Walk) {
        match &self.items {
            Items::Held { items, .. } => {
                for (i, item) in items.iter().enumerate() {
                    if visit(i, item) == Walk::Stop {
                        return;
                    }
                }
            }
            Items::InText { text, .. } => {
                // The text decoded as this same type when the list was read, so it decodes again.
                let _ = walk_text::<T>(text.get(), |i, item| visit(i, &item));
            }
        }
    }
}

impl<'a, T: Clone + Fingerprinted> RawList<'a, T> {
    /// The same list without its items where its text allows, to keep many of them: walks decode
    /// the text again. (A list read without its text, held, is never kept this way: it is then
    /// part of a held list, and those are kept whole.)
    pub(crate) fn without_items(&self) -> Self {
        match &self.items {
            Items::Held {
                text: Some(text), ..
            } => RawList {
                len: self.len,
                items: Items::InText {
                    text,
                    fingerprint: self.fingerprint(),
                },
            },
            _ => self.clone(),
        }
    }
}

impl<T> RawList<'_, T> {
    /// How many items.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The items, when the list is short enough to hold them. A longer list of a typed object
    /// keeps its items but is walked like one kept as text, so that every step stays linear in
    /// its length.
    pub(crate) fn held(&self) -> Option<&[T]> {
        match &self.items {
            Items::Held { items, .. } if items.len() <= HELD_ITEMS => Some(items),
            _ => None,
        }
    }
}

impl<T: Fingerprinted> RawList<'_, T> {
    /// The keyed hash of the items: kept for a long list, made from the items of a held one.
    fn fingerprint(&self) -> u64 {
        match &self.items {
            Items::InText { fingerprint, .. } => *fingerprint,
            Items::Held { items, .. } => {
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

/// Equal item for item, an absent list the same as an empty one (`equality.Semantic.DeepEqual`,
/// as apimachinery's ratcheting compares lists).
pub(crate) fn same_list<T: PartialEq + Fingerprinted>(
    a: Option<&RawList<'_, T>>,
    b: Option<&RawList<'_, T>>,
) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => a.map_or(0, RawList::len) == 0 && b.map_or(0, RawList::len) == 0,
    }
}

impl<T: Fingerprinted> Hash for RawList<'_, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        match &self.items {
            Items::InText { fingerprint, .. } => fingerprint.hash(state),
            Items::Held { items, .. } => items.iter().for_each(|item| item.feed(state)),
        }
    }
}

impl<'de: 'a, 'a, T> Deserialize<'de> for RawList<'a, T>
where
    T: Deserialize<'de> + Fingerprinted,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(json::LIST, ListVisitor(PhantomData))
    }
}

/// Reads a list as [`crate::decode::json::Lists`] says: its text captured, or its items held.
struct ListVisitor<'a, T>(PhantomData<fn() -> RawList<'a, T>>);

impl<'de: 'a, 'a, T> Visitor<'de> for ListVisitor<'a, T>
where
    T: Deserialize<'de> + Fingerprinted,
{
    type Value = RawList<'a, T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    /// Captured: the list's text, then its items read from it.
    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        let text = <&'de RawValue>::deserialize(deserializer)?;
        // The item's own position would be within the list; the reader adds the list's.
        let list: RawList<'de, T> = RawList::read(text)
            .map_err(|e| de::Error::custom(json::message_without_position(&e)))?;
        Ok(list)
    }

    /// Held: the items as they come, in the one pass over the body.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<T>()? {
            if items.len() == HELD_ITEMS {
                return Err(de::Error::custom(TOO_LONG_TO_HOLD));
            }
            items.push(item);
        }
        Ok(RawList {
            len: items.len(),
            items: Items::Held { items, text: None },
        })
    }
}

/// Why a read with lists held failed: the body is then read again with lists captured.
const TOO_LONG_TO_HOLD: &str = "a list too long to hold";

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

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
        crate::decode::json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
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

        // Lists too long to hold compare by fingerprint, with the same meaning.
        let long = |last: &str, spacing: &str| {
            let mut items = vec![r#"{"name":"x"}"#.to_owned(); 100];
            items.push(format!(r#"{{"name":"{last}"}}"#));
            format!("[{}]", items.join(spacing))
        };
        let (b, c) = (long("y", ","), long("y", " ,\n "));
        let (b, c, d) = (list(&b), list(&c), long("z", ","));
        assert!(b.held().is_none());
        assert!(b == c);
        assert!(b != list(&d));
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
                crate::decode::json::from_str::<RawList<'_, Item<'_>>>(json).is_err(),
                "{json}"
            );
        }
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Doc<'a> {
        #[serde(borrow, default)]
        items: Option<RawList<'a, Item<'a>>>,
    }

    /// A document is read with its lists held, and read again with them captured when a list is
    /// too long to hold or the read fails: either way the same items, and the same error at the
    /// same place as a read with every list captured.
    #[test]
    fn held_and_captured_reads_agree() {
        let items = |n: usize| {
            let items: Vec<String> = (0..n).map(|i| format!(r#"{{"name":"n{i}"}}"#)).collect();
            format!(r#"{{"items":[{}]}}"#, items.join(","))
        };
        let texts = [
            items(0),
            items(1),
            items(HELD_ITEMS),
            items(HELD_ITEMS + 1),
            items(3 * HELD_ITEMS),
            r#"{"items":[{"name":"a"},{"name":7},{"name":"b"}]}"#.to_owned(),
            r#"{"items":[{"name":"a"}, ["x"]]}"#.to_owned(),
            r#"{"items":{"name":"a"}}"#.to_owned(),
            r#"{"items":[{"name":"a"}"#.to_owned(),
        ];
        for text in &texts {
            let first = crate::decode::json::from_str::<Doc<'_>>(text);
            let captured = crate::decode::json::from_str_seed(text, PhantomData::<Doc<'_>>);
            match (first, captured) {
                (Ok(first), Ok(captured)) => {
                    assert_eq!(first, captured, "{text}");
                    let list = first.items.unwrap();
                    fn walked(list: &RawList<'_, Item<'_>>) -> Vec<String> {
                        let mut names = Vec::new();
                        list.walk(|_, item| {
                            names.push(item.name.as_deref().unwrap_or_default().to_owned());
                            Walk::Next
                        });
                        names
                    }
                    assert_eq!(walked(&list), walked(&captured.items.unwrap()), "{text}");
                    assert_eq!(list.held().is_some(), list.len() <= HELD_ITEMS, "{text}");
                }
                (Err(first), Err(captured)) => {
                    assert_eq!(first.to_string(), captured.to_string(), "{text}");
                }
                (first, captured) => panic!("{text}: {first:?} but {captured:?}"),
            }
        }
    }
}
