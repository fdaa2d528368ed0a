//! Views: the members of an object that the rules read, borrowed from the review's text.
//!
//! A pod status review carries two whole Pods; only names, `spec.nodeName`, the volume
//! names and the health fields are read, and everything else is checked to be JSON and
//! skipped. Lists are [`RawList`]s: short ones held, longer ones kept as their text, so that
//! memory stays bounded by the body however long a list is.
//! `Option` everywhere: the apiserver omits empty fields, and `null` reads as absent.
//!
//! The health entries and `healthStatus` are read as k8s-openapi reads them (a member given twice:
//! the last one counts; `null`: absent), so that answers do not depend on which reader ran.

mod fingerprint;
mod list;
mod walk;

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

pub(crate) use crate::decode::json::{Borrowed, optional_text};
pub(crate) use fingerprint::{Fingerprinted, hash128};
pub(crate) use list::{RawList, same_list};
pub(crate) use walk::Walk;

/// A string member borrowed from the body where it holds no escapes.
pub(crate) type Text<'a> = Cow<'a, str>;

#[derive(Deserialize, Default)]
pub(crate) struct MetaView<'a> {
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub(crate) name: Option<Text<'a>>,
}

/// An item of `spec.volumes`.
#[derive(Deserialize)]
pub(crate) struct NameView<'a> {
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub(crate) name: Option<Text<'a>>,
}

impl Fingerprinted for NameView<'_> {
    fn feed<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

#[derive(Deserialize)]
pub(crate) struct PodView<'a> {
    #[serde(borrow, default)]
    pub(crate) metadata: MetaView<'a>,
    #[serde(borrow, default)]
    pub(crate) spec: Option<PodSpecView<'a>>,
    #[serde(borrow, default)]
    pub(crate) status: Option<PodStatusView<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodSpecView<'a> {
    #[serde(borrow, default, deserialize_with = "optional_text")]
    pub(crate) node_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(crate) volumes: Option<RawList<'a, NameView<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodStatusView<'a> {
    #[serde(borrow, default)]
    pub(crate) volume_health: Option<RawList<'a, PodVolumeHealthView<'a>>>,
}

impl<'a> PodView<'a> {
    pub(crate) fn volume_health(&self) -> Option<&RawList<'a, PodVolumeHealthView<'a>>> {
        self.status.as_ref()?.volume_health.as_ref()
    }

    pub(crate) fn volumes(&self) -> Option<&RawList<'a, NameView<'a>>> {
        self.spec.as_ref()?.volumes.as_ref()
    }
}

#[derive(Deserialize)]
pub(crate) struct ClaimView<'a> {
    #[serde(borrow, default)]
    pub(crate) metadata: MetaView<'a>,
    #[serde(borrow, default)]
    pub(crate) status: Option<ClaimStatusView<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimStatusView<'a> {
    #[serde(borrow, default)]
    pub(crate) health_status: Option<HealthStatusView<'a>>,
}

impl<'a> ClaimView<'a> {
    pub(crate) fn health_status(&self) -> Option<&HealthStatusView<'a>> {
        self.status.as_ref()?.health_status.as_ref()
    }
}

/// No rule reads `spec.drivers`: a health entry need not name a registered driver (the kubelet
/// keeps the entry of a driver it has unregistered).
#[derive(Deserialize)]
pub(crate) struct CsiNodeView<'a> {
    #[serde(borrow, default)]
    pub(crate) metadata: MetaView<'a>,
    #[serde(borrow, default)]
    pub(crate) status: Option<CsiNodeStatusView<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CsiNodeStatusView<'a> {
    #[serde(borrow, default)]
    pub(crate) storage_health: Option<RawList<'a, StorageHealthView<'a>>>,
}

impl<'a> CsiNodeView<'a> {
    pub(crate) fn storage_health(&self) -> Option<&RawList<'a, StorageHealthView<'a>>> {
        self.status.as_ref()?.storage_health.as_ref()
    }
}

/// Structs read member by member as k8s-openapi's generated code reads them: unknown members
/// skipped, a repeated member overwriting the earlier one, `null` as absent.
macro_rules! last_member_wins {
    (
        $(#[$meta:meta])* $name:ident as $kind:literal {
            required: [$($req:ident: $req_ty:ty = $req_key:literal),* $(,)?],
            optional: [$($field:ident: $ty:ty = $key:literal),* $(,)?] $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub(crate) struct $name<'a> {
            // A required string absent or null reads as "", as k8s-openapi's `unwrap_or_default`.
            $(pub(crate) $req: $req_ty,)*
            $(pub(crate) $field: Option<$ty>,)*
        }

        impl<'de: 'a, 'a> Deserialize<'de> for $name<'a> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Members<'a>(std::marker::PhantomData<&'a ()>);

                impl<'de: 'a, 'a> Visitor<'de> for Members<'a> {
                    type Value = $name<'a>;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($kind)
                    }

                    fn visit_map<A: MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name<'a>, A::Error> {
                        let mut value = $name::default();
                        while let Some(key) = map.next_key::<Borrowed<'de>>()? {
                            match &*key.0 {
                                $($req_key => {
                                    value.$req = <$req_ty as Member>::read(&mut map)?.unwrap_or_default();
                                })*
                                $($key => value.$field = <$ty as Member>::read(&mut map)?,)*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(value)
                    }
                }

                deserializer.deserialize_struct(
                    $kind,
                    &[$($req_key,)* $($key),*],
                    Members(std::marker::PhantomData),
                )
            }
        }

        /// Every member, in the order listed: the members equality compares, so that two
        /// items the fingerprint calls equal are equal.
        impl Fingerprinted for $name<'_> {
            fn feed<H: Hasher>(&self, state: &mut H) {
                $(Feed::feed(&self.$req, state);)*
                $(Feed::feed(&self.$field, state);)*
            }
        }
    };
}

/// How a member of a [`last_member_wins!`] struct goes into a fingerprint.
trait Feed {
    fn feed<H: Hasher>(&self, state: &mut H);
}

impl Feed for Text<'_> {
    fn feed<H: Hasher>(&self, state: &mut H) {
        self.hash(state);
    }
}

impl<T: Fingerprinted> Feed for RawList<'_, T> {
    fn feed<H: Hasher>(&self, state: &mut H) {
        self.hash(state);
    }
}

impl Feed for Time {
    fn feed<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl<T: Feed> Feed for Option<T> {
    fn feed<H: Hasher>(&self, state: &mut H) {
        match self {
            None => state.write_u8(0),
            Some(value) => {
                state.write_u8(1);
                value.feed(state);
            }
        }
    }
}

/// How a member of a [`last_member_wins!`] struct is read: strings borrowed from the body.
trait Member<'de>: Sized {
    fn read<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Self>, A::Error>;
}

impl<'de: 'a, 'a> Member<'de> for Text<'a> {
    fn read<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Self>, A::Error> {
        Ok(map.next_value::<Option<Borrowed<'a>>>()?.map(|text| text.0))
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de> + Fingerprinted> Member<'de> for RawList<'a, T> {
    fn read<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Self>, A::Error> {
        map.next_value()
    }
}

impl<'de> Member<'de> for Time {
    fn read<A: MapAccess<'de>>(map: &mut A) -> Result<Option<Self>, A::Error> {
        map.next_value()
    }
}

last_member_wins! {
    /// `PersistentVolumeClaim.status.healthStatus`.
    HealthStatusView as "VolumeHealthStatus" {
        required: [],
        optional: [
            health_conditions: RawList<'a, VolumeConditionView<'a>> = "healthConditions",
            last_transition_time: Time = "lastTransitionTime",
        ],
    }
}

last_member_wins! {
    /// An item of `Pod.status.volumeHealth`.
    PodVolumeHealthView as "PodVolumeHealth" {
        required: [name: Text<'a> = "name"],
        optional: [
            health_conditions: RawList<'a, VolumeConditionView<'a>> = "healthConditions",
            last_transition_time: Time = "lastTransitionTime",
        ],
    }
}

last_member_wins! {
    /// An item of `CSINode.status.storageHealth`.
    StorageHealthView as "StorageHealth" {
        required: [name: Text<'a> = "name"],
        optional: [health_conditions: RawList<'a, StorageConditionView<'a>> = "healthConditions"],
    }
}

last_member_wins! {
    /// An item of a volume's `healthConditions` (PVC `healthStatus`, Pod `volumeHealth[i]`),
    /// its strings borrowed from the review.
    VolumeConditionView as "VolumeHealthCondition" {
        required: [status: Text<'a> = "status", reason: Text<'a> = "reason"],
        optional: [message: Text<'a> = "message"],
    }
}

last_member_wins! {
    /// An item of a CSINode `storageHealth[i].healthConditions`.
    StorageConditionView as "StorageHealthCondition" {
        required: [status: Text<'a> = "status", reason: Text<'a> = "reason"],
        optional: [
            message: Text<'a> = "message",
            access_mode: Text<'a> = "accessMode",
            volume_mode: Text<'a> = "volumeMode",
            last_transition_time: Time = "lastTransitionTime",
        ],
    }
}

/// What an object of a review must be when read as a view.
pub(crate) const EXPECTED_OBJECT: &str = "a JSON object";

/// Reads an object as a view: a JSON object or `null` (absent). serde would also read an array
/// as a struct, field by field; here it is not an object of any kind.
pub(crate) struct ObjectVisitor<V>(pub(crate) std::marker::PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for ObjectVisitor<V> {
    type Value = Option<V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED_OBJECT)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<V>, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<V>, A::Error> {
        V::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// Strings without escapes are borrowed from the review, not copied.
    #[test]
    fn strings_are_borrowed_from_the_body() {
        let text = r#"{"metadata":{"name":"web-0"},"spec":{"nodeName":"node1","volumes":[{"name":"data"}]},
            "status":{"volumeHealth":[{"name":"data","healthConditions":[
                {"status":"Degraded","reason":"Slow","message":"plain"},
                {"status":"Degraded","reason":"Esc","message":"tab\there"}]}]}}"#;
        let pod: PodView<'_> = crate::decode::json::from_str(text).unwrap();
        assert!(matches!(pod.metadata.name, Some(Cow::Borrowed("web-0"))));
        let spec = pod.spec.as_ref().unwrap();
        assert!(matches!(spec.node_name, Some(Cow::Borrowed("node1"))));
        let volumes = spec.volumes.as_ref().unwrap().held().unwrap();
        assert!(matches!(volumes[0].name, Some(Cow::Borrowed("data"))));
        let entries = pod.volume_health().unwrap().held().unwrap();
        assert!(matches!(entries[0].name, Cow::Borrowed("data")));
        let conditions = entries[0]
            .health_conditions
            .as_ref()
            .unwrap()
            .held()
            .unwrap();
        assert!(matches!(conditions[0].status, Cow::Borrowed("Degraded")));
        assert!(matches!(
            conditions[0].message,
            Some(Cow::Borrowed("plain"))
        ));
        // An escape can only be read by copying.
        assert_eq!(conditions[1].message.as_deref(), Some("tab\there"));
    }
}
