//! Walks a list's JSON text: its items decoded one at a time, each given to a visitor, so that
//! a list of any length is read with memory for one item.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, SeqAccess, Visitor};

use crate::decode::json;

/// Whether a walk goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    Next,
    Stop,
}

/// Decodes the items of the list `text` one by one, giving each to `visit`; returns how many
/// there were.
pub(super) fn walk_text<'a, T: Deserialize<'a>>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk that stops early still decodes, and counts, every item.
    #[test]
    fn items_after_a_stop_are_decoded_and_counted() {
        let mut seen = Vec::new();
        let len = walk_text::<u8>("[1, 2, 3]", |i, item| {
            seen.push((i, item));
            Walk::Stop
        });
        assert_eq!(len.unwrap(), 3);
        assert_eq!(seen, [(0, 1)]);
        assert!(walk_text::<u8>("[1, \"two\", 3]", |_, _| Walk::Stop).is_err());
    }
}
