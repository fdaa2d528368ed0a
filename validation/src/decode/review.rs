//! Reading an AdmissionReview in one pass.
//!
//! kube-apiserver writes `resource` before `object` and `oldObject`, so by the time an object
//! arrives its kind is known and its view (the few members the rules read) can be decoded right
//! there, while serde checks and skips everything else. The body is then read once instead of
//! twice (once to find the objects, once to read them). An object met before `resource` is kept
//! as raw JSON until the end of the request, then decoded.
//!
//! An object that is not its kind fails that one pass as a whole (serde cannot resume a
//! document after an error). The review is then read again with both objects kept raw, and
//! each is decoded on its own, into its view or into the error that says why it is not one:
//! the decisions report that error when they read the object, and only then.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::json::{self, Borrowed};
use super::objects::{Slot, SlotSeed};
use crate::identity::{Groups, NODES_GROUP, UserInfo};
use crate::resource::{GroupVersionResource, HealthResource};

/// An AdmissionReview's members, as read: nothing checked but their JSON types.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound = "R: Deserialize<'de>",
    expecting = "struct AdmissionReview"
)]
pub(crate) struct Envelope<'a, R = Request<'a>> {
    #[serde(borrow, default)]
    pub(crate) api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) kind: Cow<'a, str>,
    #[serde(default)]
    pub(crate) request: Option<R>,
}

/// The members of `request` the rules and the webhooks read, with `object` and `oldObject`
/// read as far as the rules read them.
#[derive(Default)]
pub(crate) struct Request<'a> {
    pub(crate) uid: Cow<'a, str>,
    pub(crate) resource: GroupVersionResource<'a>,
    pub(crate) sub_resource: Option<Cow<'a, str>>,
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) namespace: Option<Cow<'a, str>>,
    pub(crate) operation: Cow<'a, str>,
    pub(crate) user_info: UserInfo<'a>,
    pub(crate) dry_run: Option<bool>,
    pub(crate) object: Slot<'a>,
    pub(crate) old_object: Slot<'a>,
}

/// Reads an AdmissionReview body, whatever the order of its members. Strings are borrowed from
/// `body` where they hold no escapes. The error is the body's own: not JSON, or not of the
/// AdmissionReview shape; an object that is not its kind is no error here, but a [`Slot`] that
/// says so.
pub(crate) fn read_review(body: &str) -> Result<Envelope<'_>, serde_json::Error> {
    match json::from_str::<Envelope<'_, OnePass<'_>>>(body) {
        Ok(review) => Ok(review.map(|pass| pass.0)),
        Err(_) => json::from_str::<Envelope<'_, RawObjects<'_>>>(body)
            .map(|review| review.map(|pass| pass.0)),
    }
}

impl<'a, R> Envelope<'a, R> {
    fn map(self, request: impl FnOnce(R) -> Request<'a>) -> Envelope<'a> {
        Envelope {
            api_version: self.api_version,
            kind: self.kind,
            request: self.request.map(request),
        }
    }
}

/// A request read in one pass: an object met after `resource` is read as its view right there.
struct OnePass<'a>(Request<'a>);

/// A request read with its objects kept raw, each decoded on its own at the end.
struct RawObjects<'a>(Request<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for OnePass<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(RequestVisitor { one_pass: true })
            .map(OnePass)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawObjects<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_map(RequestVisitor { one_pass: false })
            .map(RawObjects)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    Uid,
    Resource,
    SubResource,
    Name,
    Namespace,
    Operation,
    UserInfo,
    Object,
    OldObject,
    DryRun,
    #[serde(other)]
    Other,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Uid => "uid",
            Field::Resource => "resource",
            Field::SubResource => "subResource",
            Field::Name => "name",
            Field::Namespace => "namespace",
            Field::Operation => "operation",
            Field::UserInfo => "userInfo",
            Field::Object => "object",
            Field::OldObject => "oldObject",
            Field::DryRun => "dryRun",
            Field::Other => "",
        }
    }
}

struct RequestVisitor {
    one_pass: bool,
}

/// An object as the visit meets it: read, or kept raw until the resource is known.
enum Met<'a> {
    Read(Slot<'a>),
    Raw(&'a RawValue),
}

impl<'a> Met<'a> {
    fn into_slot(self, resource: Option<HealthResource>, field: &'static str) -> Slot<'a> {
        match self {
            Met::Read(slot) => slot,
            Met::Raw(raw) => Slot::decode(resource, raw, field),
        }
    }
}

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = Request<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut request = Request::default();
        let (mut object, mut old_object) = (Met::Read(Slot::Absent), Met::Read(Slot::Absent));
        let mut seen = 0u16;
        while let Some(field) = map.next_key::<Field>()? {
            if field != Field::Other {
                // Like a derived struct: a member twice is an error, not "last one wins".
                let bit = 1 << field as u16;
                if seen & bit != 0 {
                    return Err(de::Error::duplicate_field(field.name()));
                }
                seen |= bit;
            }
            match field {
                Field::Uid => request.uid = map.next_value::<Borrowed<'de>>()?.0,
                Field::Resource => request.resource = map.next_value()?,
                Field::SubResource => {
                    request.sub_resource = map.next_value::<Option<Borrowed<'de>>>()?.map(|t| t.0);
                }
                Field::Name => {
                    request.name = map.next_value::<Option<Borrowed<'de>>>()?.map(|t| t.0)
                }
                Field::Namespace => {
                    request.namespace = map.next_value::<Option<Borrowed<'de>>>()?.map(|t| t.0);
                }
                Field::Operation => request.operation = map.next_value::<Borrowed<'de>>()?.0,
                Field::UserInfo => request.user_info = map.next_value()?,
                Field::Object => object = map.next_value_seed(self.seed(&request, seen))?,
                Field::OldObject => {
                    old_object = map.next_value_seed(self.seed(&request, seen))?;
                }
                Field::DryRun => request.dry_run = map.next_value()?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let resource = request.resource.health_resource();
        request.object = object.into_slot(resource, "object");
        request.old_object = old_object.into_slot(resource, "oldObject");
        Ok(request)
    }
}

impl RequestVisitor {
    /// How to read an object met now: as its view when its resource is known, else raw.
    fn seed(&self, request: &Request<'_>, seen: u16) -> ObjectSeed {
        let resource_read = seen & (1 << Field::Resource as u16) != 0;
        ObjectSeed(
            match (
                self.one_pass && resource_read,
                request.resource.health_resource(),
            ) {
                (true, Some(resource)) => Seed::View(resource),
                // A resource without rules: nothing reads its objects.
                (true, None) => Seed::Skip,
                (false, _) => Seed::Raw,
            },
        )
    }
}

struct ObjectSeed(Seed);

enum Seed {
    View(HealthResource),
    Skip,
    Raw,
}

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Met<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Met<'de>, D::Error> {
        Ok(match self.0 {
            Seed::View(resource) => Met::Read(SlotSeed(resource).deserialize(deserializer)?),
            Seed::Skip => Met::Read(
                Option::<IgnoredAny>::deserialize(deserializer)?
                    .map_or(Slot::Absent, |_| Slot::Other),
            ),
            Seed::Raw => Met::Raw(<&'de RawValue>::deserialize(deserializer)?),
        })
    }
}

/// A user's groups: a JSON list of strings, or `null` for none. The list is walked and no group
/// is kept, so a list of millions of groups costs no memory.
impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;

        impl<'de> Visitor<'de> for Names {
            type Value = Groups;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence of strings")
            }

            fn visit_none<E: de::Error>(self) -> Result<Groups, E> {
                Ok(Groups::default())
            }

            fn visit_unit<E: de::Error>(self) -> Result<Groups, E> {
                Ok(Groups::default())
            }

            fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Groups, D::Error> {
                deserializer.deserialize_seq(self)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Groups, A::Error> {
                let mut nodes = false;
                // Borrowed: a `Cow<str>` element would copy every group name.
                while let Some(group) = seq.next_element::<Borrowed<'de>>()? {
                    nodes |= group.0 == NODES_GROUP;
                }
                Ok(Groups::with_nodes_group(nodes))
            }
        }

        deserializer.deserialize_option(Names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_read_from_json() {
        let cases: &[(&str, Result<bool, &str>)] = &[
            (r#"["system:authenticated","system:nodes"]"#, Ok(true)),
            // Escaped: decoded, not borrowed, and still the nodes group.
            (r#"["system:node\u0073"]"#, Ok(true)),
            (r#"["system:nodes "]"#, Ok(false)),
            ("[]", Ok(false)),
            ("null", Ok(false)),
            (
                r#"["system:nodes",5]"#,
                Err("invalid type: integer `5`, expected a string at line 1 column 17"),
            ),
            (
                r#"{"0":"system:nodes"}"#,
                Err("invalid type: map, expected a sequence of strings at line 1 column 1"),
            ),
        ];
        for (json, want) in cases {
            let got = json::from_str::<Groups>(json)
                .map(Groups::has_nodes_group)
                .map_err(|e| e.to_string());
            assert_eq!(
                got.as_ref().copied().map_err(String::as_str),
                *want,
                "{json}"
            );
        }
    }
}
