//! Reading JSON text: every review and object in this project is read through [`from_str`]
//! or [`from_str_seed`], with the [`strict`] deserializer (an object is an object), plus the
//! string helpers the readers share.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer};

pub(crate) use super::strict::LIST;
pub(crate) use super::strict::strict;
use super::strict::{Lists, with_lists};

/// Reads `T` from `text`, refusing a non-object wherever `T` (at any depth) wants a struct.
///
/// The views' lists are read in the same pass and held when short, which is what a review
/// carries; a text with a longer list, or with an error, is read again with every list captured
/// (each list borrowed as its text), so that what it gives, and where an error is placed, never depends on the
/// first read.
///
/// ```
/// use volume_health_validation::json;
///
/// /// What a reader of a SubjectAccessReview's status keeps.
/// #[derive(serde::Deserialize)]
/// struct Decision {
///     allowed: bool,
/// }
///
/// let decision: Decision = json::from_str(r#"{"allowed": true}"#)?;
/// assert!(decision.allowed);
/// // serde_json alone reads an array field by field; Kubernetes never does.
/// assert!(serde_json::from_str::<Decision>("[true]").is_ok());
/// assert!(json::from_str::<Decision>("[true]").is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn from_str<'a, T: de::Deserialize<'a>>(text: &'a str) -> Result<T, serde_json::Error> {
    from_str_views(text, std::marker::PhantomData::<T>)
}

/// Reads `text` with `seed` as [`from_str`] reads a type: lists held, else captured.
pub(crate) fn from_str_views<'a, S: DeserializeSeed<'a> + Copy>(
    text: &'a str,
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    from_str_seed_held(text, seed).or_else(|_| from_str_seed(text, seed))
}

/// Reads `text` with `seed`, every list captured.
pub(crate) fn from_str_seed<'a, S: DeserializeSeed<'a>>(
    text: &'a str,
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(strict(&mut deserializer))?;
    deserializer.end()?;
    Ok(value)
}

/// serde_json's message of `error` without its position, for an error found in a part of a
/// document read on its own: the enclosing reader adds its own position.
///
/// ```
/// use volume_health_validation::json::message_without_position;
///
/// let error = serde_json::from_str::<u32>(r#""12""#).expect_err("a string is no number");
/// assert_eq!(error.to_string(), r#"invalid type: string "12", expected u32 at line 1 column 4"#);
/// assert_eq!(message_without_position(&error), r#"invalid type: string "12", expected u32"#);
/// ```
pub fn message_without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&suffix) {
        Some(message) if error.line() != 0 => message.to_owned(),
        _ => text,
    }
}

/// A string borrowed from the text where it holds no escapes. serde's own `Cow<str>` always
/// copies, and `#[serde(borrow)]` borrows only a field written `Cow<'a, str>` (not an alias, nor
/// inside an `Option` or a list).
#[derive(Deserialize)]
pub struct Borrowed<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// Reads an optional string member borrowed from the text where it holds no escapes, for
/// `#[serde(borrow, deserialize_with = "...")]`: `Option<Cow<'a, str>>` alone copies every
/// string. `null` and an absent member (with `default`) read as `None`.
///
/// ```
/// use std::borrow::Cow;
/// use volume_health_validation::json;
///
/// #[derive(serde::Deserialize)]
/// struct Subject<'a> {
///     #[serde(borrow, default, deserialize_with = "json::optional_text")]
///     user: Option<Cow<'a, str>>,
/// }
///
/// let subject: Subject<'_> = json::from_str(r#"{"user": "system:node:node-1"}"#)?;
/// assert!(matches!(subject.user, Some(Cow::Borrowed("system:node:node-1"))));
/// // An escape has to be decoded, so that string is copied.
/// let subject: Subject<'_> = json::from_str(r#"{"user": "node\u002d1"}"#)?;
/// assert!(matches!(subject.user, Some(Cow::Owned(ref user)) if user == "node-1"));
/// let subject: Subject<'_> = json::from_str(r#"{"user": null}"#)?;
/// assert!(subject.user.is_none());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn optional_text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<Borrowed<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

/// Reads `text` with `seed`, lists held: one pass, no list text kept. A list longer than can be
/// held fails it.
fn from_str_seed_held<'a, S: DeserializeSeed<'a>>(
    text: &'a str,
    seed: S,
) -> Result<S::Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = seed.deserialize(with_lists(&mut deserializer, Lists::Held))?;
    deserializer.end()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::from_str;

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Outer<'a> {
        #[serde(borrow, default)]
        spec: Option<Inner<'a>>,
        #[serde(default)]
        list: Vec<Inner<'a>>,
        #[serde(borrow, default)]
        raw: Option<&'a RawValue>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Inner<'a> {
        #[serde(borrow, default)]
        node_name: Option<Cow<'a, str>>,
    }

    #[test]
    fn objects_read_as_usual() {
        let outer: Outer<'_> = from_str(
            r#"{"spec":{"nodeName":"n1"},"list":[{"nodeName":"a"},{}],"raw":[1,{"x":2}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outer.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
        assert_eq!(outer.list.len(), 2);
        assert_eq!(outer.raw.map(RawValue::get), Some(r#"[1,{"x":2}]"#));
    }

    #[test]
    fn arrays_are_not_structs_at_any_depth() {
        // serde_json alone reads each of these field by field.
        let cases = [
            (r#"[null]"#, "invalid type: sequence, expected struct Outer"),
            (
                r#"{"spec":["n1"]}"#,
                "invalid type: sequence, expected struct Inner",
            ),
            (
                r#"{"list":[["n1"]]}"#,
                "invalid type: sequence, expected struct Inner",
            ),
        ];
        for (json, want) in cases {
            assert!(serde_json::from_str::<Outer<'_>>(json).is_ok(), "{json}");
            let err = from_str::<Outer<'_>>(json).map(|_| ()).unwrap_err();
            assert!(err.to_string().starts_with(want), "{json}: {err}");
        }
    }

    #[test]
    fn trailing_text_is_refused() {
        assert!(from_str::<Outer<'_>>("{} {}").is_err());
    }
}
