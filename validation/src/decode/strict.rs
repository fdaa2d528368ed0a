//! A serde deserializer in which an object is an object.
//!
//! serde's derived structs also accept a JSON array and read it field by field, so
//! `"spec": ["node1"]` would read as `spec.nodeName: node1` and a review that is an array would
//! be answered. Kubernetes decodes JSON with encoding/json, which never does that. [`Strict`]
//! wraps serde_json's deserializer and asks for a map wherever a struct is wanted, at every
//! depth, so a non-object where an object is required is refused with serde's usual
//! `invalid type` error. It also carries how the views' lists are read ([`Lists`]).
//!
//! Its errors never quote a string of the document: serde's `invalid type: string "..."`
//! would quote it whole, escaped (up to 8 bytes a byte), so a 7 MiB body could make a 50 MB
//! message. A string where another type is wanted is refused as `invalid type: string,
//! expected ...`, and any other message a visitor builds is cut to
//! [`MAX_MESSAGE_BYTES`](crate::error::MAX_MESSAGE_BYTES) as it is written.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};

use crate::error::Bounded;

/// `inner`, with structs read only from maps.
pub(crate) fn strict<'de, D: Deserializer<'de>>(inner: D) -> Strict<D> {
    Strict(inner, Lists::Captured)
}

/// `inner`, with structs read only from maps and lists read as `lists` says.
pub(crate) fn with_lists<'de, D: Deserializer<'de>>(inner: D, lists: Lists) -> Strict<D> {
    Strict(inner, lists)
}

/// A deserializer whose structs are maps only; see the module documentation.
#[derive(Debug)]
pub(crate) struct Strict<D>(D, pub(crate) Lists);

/// How the lists of views ([`crate::decode::view::RawList`]) are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lists {
    /// Each list's text is kept, so that a list of any length can be walked again.
    Captured,
    /// Each list's items are decoded as they are read and held, with no text: one pass over the
    /// body, and a list too long to hold fails the read.
    Held,
}

/// The name by which a [`crate::decode::view::RawList`] asks for a list: `Lists::Held` reads it as a
/// sequence; anything else reads it as a newtype, which serde_json captures as raw text.
pub(crate) const LIST: &str = "$volume_health::RawList";

/// Everything a visitor is given is wrapped again, so the rule holds all the way down.
struct Wrap<V>(V, Lists);

macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.$method(Wrap(visitor, self.1))
            }
        )*
    };
}

/// serde_json refuses a string where another type is wanted by quoting it whole; these are read
/// with `deserialize_any` instead, which gives [`NotAString`] the string to refuse by its type.
/// What else they are given is what serde_json's own method would have taken, or refused in
/// the same words.
macro_rules! not_a_string {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.0.deserialize_any(NotAString {
                    visitor: Wrap(visitor, self.1),
                    map_only: false,
                })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward!(
        deserialize_any,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    not_a_string!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_unit,
        deserialize_seq,
    );

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.deserialize_any(NotAString {
            visitor: Wrap(visitor, self.1),
            map_only: true,
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name == LIST && self.1 == Lists::Held {
            return self.0.deserialize_seq(Wrap(visitor, self.1));
        }
        // serde_json's RawValue is read through here, by name.
        self.0
            .deserialize_newtype_struct(name, Wrap(visitor, self.1))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    /// The point of it all: a struct is read from a map, never from a sequence.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0
            .deserialize_enum(name, variants, Wrap(visitor, self.1))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor given a value is given an error type that keeps its message short ([`Capped`]).
macro_rules! forward_visit {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.0.$method::<Capped<E>>(v).map_err(|capped| capped.0)
            }
        )*
    };
}

/// A visitor of anything but a string (and, with `map_only`, of a map but not a sequence: a
/// struct).
struct NotAString<V> {
    visitor: V,
    map_only: bool,
}

impl<'de, V: Visitor<'de>> NotAString<V> {
    fn refuse<E: de::Error>(self, what: Unexpected<'_>) -> Result<V::Value, E> {
        Err(E::invalid_type(what, &self.visitor))
    }
}

macro_rules! forward_plain {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.visitor.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for NotAString<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_plain!(
        visit_bool: bool,
        visit_i8: i8,
        visit_i16: i16,
        visit_i32: i32,
        visit_i64: i64,
        visit_i128: i128,
        visit_u8: u8,
        visit_u16: u16,
        visit_u32: u32,
        visit_u64: u64,
        visit_u128: u128,
        visit_f32: f32,
        visit_f64: f64,
        visit_char: char,
    );

    fn visit_str<E: de::Error>(self, _: &str) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("string"))
    }

    fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("string"))
    }

    fn visit_string<E: de::Error>(self, _: String) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("string"))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("bytes"))
    }

    fn visit_borrowed_bytes<E: de::Error>(self, _: &'de [u8]) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("bytes"))
    }

    fn visit_byte_buf<E: de::Error>(self, _: Vec<u8>) -> Result<V::Value, E> {
        self.refuse(Unexpected::Other("bytes"))
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        if self.map_only {
            return self.refuse(Unexpected::Seq);
        }
        self.visitor.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(map)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_enum(data)
    }
}

/// The error type a visitor is given for a value: what it says of the value is its type for a
/// string or bytes, and any message it builds is cut as it is written.
#[derive(Debug)]
struct Capped<E>(E);

impl<E: fmt::Display> fmt::Display for Capped<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<E: std::error::Error> std::error::Error for Capped<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `unexpected` without the value, where the value is text of the document.
fn by_type(unexpected: Unexpected<'_>) -> Unexpected<'_> {
    match unexpected {
        Unexpected::Str(_) => Unexpected::Other("string"),
        Unexpected::Bytes(_) => Unexpected::Other("bytes"),
        other => other,
    }
}

impl<E: de::Error> de::Error for Capped<E> {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Capped(E::custom(Bounded(msg)))
    }

    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        Capped(E::invalid_type(by_type(unexp), exp))
    }

    fn invalid_value(unexp: Unexpected<'_>, exp: &dyn Expected) -> Self {
        Capped(E::invalid_value(by_type(unexp), exp))
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool: bool,
        visit_i8: i8,
        visit_i16: i16,
        visit_i32: i32,
        visit_i64: i64,
        visit_i128: i128,
        visit_u8: u8,
        visit_u16: u16,
        visit_u32: u32,
        visit_u64: u64,
        visit_u128: u128,
        visit_f32: f32,
        visit_f64: f64,
        visit_char: char,
        visit_str: &str,
        visit_borrowed_str: &'de str,
        visit_string: String,
        visit_bytes: &[u8],
        visit_borrowed_bytes: &'de [u8],
        visit_byte_buf: Vec<u8>,
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none::<Capped<E>>().map_err(|capped| capped.0)
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit::<Capped<E>>().map_err(|capped| capped.0)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Strict(deserializer, self.1))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Strict(deserializer, self.1))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Wrap(seq, self.1))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Wrap(map, self.1))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Wrap(data, self.1))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Strict(deserializer, self.1))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Wrap(seed, self.1))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Wrap(seed, self.1))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Wrap(seed, self.1))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let lists = self.1;
        let (value, variant) = self.0.variant_seed(Wrap(seed, lists))?;
        Ok((value, Wrap(variant, lists)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Wrap(seed, self.1))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor, self.1))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        // As for structs: a map, not a sequence.
        self.0.newtype_variant_seed(MapOf(visitor, self.1))
    }
}

/// Reads a map with `V`: a struct variant's fields.
struct MapOf<V>(V, Lists);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for MapOf<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        deserializer.deserialize_map(Wrap(self.0, self.1))
    }
}
