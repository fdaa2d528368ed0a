//! The objects of a request as the decisions read them: the view of their kind, or, for an
//! object that is not its kind, the error that says so, kept as data.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny};
use serde_json::value::RawValue;

use crate::decode::json;
use crate::decode::view::{ClaimView, CsiNodeView, ObjectVisitor, PodView};
use crate::resource::HealthResource;

/// An object in the request could not be decoded as its kind. Cheap to clone: the request keeps
/// it, and each decision that reads the object returns it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("failed to decode {field} as {kind}")]
pub struct DecodeError {
    field: &'static str,
    kind: &'static str,
    #[source]
    source: Arc<serde_json::Error>,
}

impl DecodeError {
    /// `object` or `oldObject`.
    ///
    /// ```
    /// use serde_json::value::RawValue;
    /// use volume_health_validation::{AdmissionRequest, HealthResource, Operation, Settings};
    ///
    /// // A pod whose `spec.volumes` is an object, where Kubernetes wants a list.
    /// let old: &RawValue = serde_json::from_str(r#"{"spec": {"volumes": {"name": "data"}}}"#)?;
    /// let request = AdmissionRequest::new(HealthResource::Pods, Operation::Update)
    ///     .with_objects(None, Some(old));
    /// let error = request.validate(&Settings::with_gate(true)).expect_err("not a pod");
    /// assert_eq!(error.field(), "oldObject");
    /// assert_eq!(error.to_string(), "failed to decode oldObject as Pod");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The kind it should have been.
    ///
    /// ```
    /// use serde_json::value::RawValue;
    /// use volume_health_validation::{AdmissionRequest, HealthResource, Operation, Settings};
    ///
    /// // A pod whose `spec.volumes` is an object, where Kubernetes wants a list.
    /// let old: &RawValue = serde_json::from_str(r#"{"spec": {"volumes": {"name": "data"}}}"#)?;
    /// let request = AdmissionRequest::new(HealthResource::Pods, Operation::Update)
    ///     .with_objects(None, Some(old));
    /// let error = request.validate(&Settings::with_gate(true)).expect_err("not a pod");
    /// assert_eq!(error.kind(), "Pod");
    /// // serde's message, the source, says what was wrong.
    /// let source = std::error::Error::source(&error).map(ToString::to_string);
    /// assert!(source.is_some_and(|text| text.starts_with("invalid type: map, expected a sequence")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// `object` or `oldObject` of a request.
#[derive(Default)]
pub(crate) enum Slot<'a> {
    /// Absent or `null`.
    #[default]
    Absent,
    /// Present, of a resource without rules here: nothing reads it.
    Other,
    Pod(PodView<'a>),
    Claim(ClaimView<'a>),
    CsiNode(CsiNodeView<'a>),
    /// Not an object of its kind.
    Undecodable(Box<Undecodable>),
}

/// An object that is not its kind: why, and what drop on save reads of it all the same.
pub(crate) struct Undecodable {
    /// Shared with the decisions that report it.
    pub(crate) error: DecodeError,
    /// Whether the gated field is in use, read leniently (only `status.<field>`): drop on save
    /// answers for an object whose other parts are malformed, as it always has.
    pub(crate) gated_in_use: Result<bool, DecodeError>,
}

impl<'a> Slot<'a> {
    /// Reads an object of `resource` as its view, in the review's pass.
    pub(crate) fn read<'de: 'a, D: Deserializer<'de>>(
        resource: HealthResource,
        deserializer: D,
    ) -> Result<Self, D::Error> {
        fn visit<'de, V: Deserialize<'de>, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<V>, D::Error> {
            deserializer.deserialize_any(ObjectVisitor(PhantomData))
        }
        Ok(match resource {
            HealthResource::Pods => visit(deserializer)?.map_or(Slot::Absent, Slot::Pod),
            HealthResource::PersistentVolumeClaims => {
                visit(deserializer)?.map_or(Slot::Absent, Slot::Claim)
            }
            HealthResource::CsiNodes => visit(deserializer)?.map_or(Slot::Absent, Slot::CsiNode),
        })
    }

    /// Decodes an object kept as raw JSON (`null` is absent): its view, or the error that says
    /// it is not of its kind. `resource` is `None` for a resource without rules.
    pub(crate) fn decode(
        resource: Option<HealthResource>,
        raw: &'a RawValue,
        field: &'static str,
    ) -> Self {
        let Some(resource) = resource else {
            return if raw.get() == "null" {
                Slot::Absent
            } else {
                Slot::Other
            };
        };
        json::from_str_views(raw.get(), SlotSeed(resource)).unwrap_or_else(|source| {
            let error = |source| DecodeError {
                field,
                kind: resource.kind(),
                source: Arc::new(source),
            };
            let gated_in_use = gated_in_use(resource, raw).map_err(error);
            let error = error(source);
            Slot::Undecodable(Box::new(Undecodable {
                error,
                gated_in_use,
            }))
        })
    }

    pub(crate) fn as_pod(&self) -> Result<Option<&PodView<'a>>, DecodeError> {
        match self {
            Slot::Pod(view) => Ok(Some(view)),
            Slot::Undecodable(bad) => Err(bad.error.clone()),
            _ => Ok(None),
        }
    }

    pub(crate) fn as_claim(&self) -> Result<Option<&ClaimView<'a>>, DecodeError> {
        match self {
            Slot::Claim(view) => Ok(Some(view)),
            Slot::Undecodable(bad) => Err(bad.error.clone()),
            _ => Ok(None),
        }
    }

    pub(crate) fn as_csinode(&self) -> Result<Option<&CsiNodeView<'a>>, DecodeError> {
        match self {
            Slot::CsiNode(view) => Ok(Some(view)),
            Slot::Undecodable(bad) => Err(bad.error.clone()),
            _ => Ok(None),
        }
    }

    /// Whether the object uses the gated field: a claim's `healthStatus` is non-null; a list is
    /// non-empty. The same test tells whether a new object carries a value worth dropping: an
    /// empty list or `null` decodes to the same typed object as an absent field, so removing it
    /// would change nothing.
    pub(crate) fn gated_in_use(&self) -> Result<bool, DecodeError> {
        match self {
            Slot::Absent | Slot::Other => Ok(false),
            Slot::Pod(view) => Ok(view.volume_health().is_some_and(|l| l.len() > 0)),
            Slot::Claim(view) => Ok(view.health_status().is_some()),
            Slot::CsiNode(view) => Ok(view.storage_health().is_some_and(|l| l.len() > 0)),
            Slot::Undecodable(bad) => bad.gated_in_use.clone(),
        }
    }
}

/// Reads an object as the view of `resource`.
#[derive(Clone, Copy)]
pub(crate) struct SlotSeed(pub(crate) HealthResource);

impl<'de> DeserializeSeed<'de> for SlotSeed {
    type Value = Slot<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Slot<'de>, D::Error> {
        Slot::read(self.0, deserializer)
    }
}

/// [`Slot::gated_in_use`] of an object that is not its kind, from its gated field alone; items
/// are skipped, not decoded (a `Vec` of `IgnoredAny` allocates nothing, however long).
fn gated_in_use(resource: HealthResource, raw: &RawValue) -> Result<bool, serde_json::Error> {
    fn read<'a, S: Deserialize<'a>>(raw: &'a RawValue) -> Result<Option<S>, serde_json::Error> {
        json::from_str_seed(raw.get(), GatedSeed(PhantomData))
            .and_then(|gated: Option<Gated<S>>| {
                // Never `null` here: a `null` object is absent, and decodes.
                gated.ok_or_else(|| serde::de::Error::custom("null object"))
            })
            .map(|gated| gated.status)
    }
    let non_empty = |list: Option<Vec<IgnoredAny>>| list.is_some_and(|l| !l.is_empty());
    Ok(match resource {
        HealthResource::Pods => non_empty(read::<PodGated>(raw)?.and_then(|s| s.volume_health)),
        HealthResource::PersistentVolumeClaims => {
            read::<ClaimGated>(raw)?.is_some_and(|s| s.health_status.is_some())
        }
        HealthResource::CsiNodes => {
            non_empty(read::<CsiNodeGated>(raw)?.and_then(|s| s.storage_health))
        }
    })
}

struct GatedSeed<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for GatedSeed<T> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        deserializer.deserialize_any(ObjectVisitor(PhantomData))
    }
}

/// Only the gated field of an object.
#[derive(Deserialize)]
#[serde(bound = "S: Deserialize<'de>")]
struct Gated<S> {
    #[serde(default)]
    status: Option<S>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodGated {
    #[serde(default)]
    volume_health: Option<Vec<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimGated {
    #[serde(default)]
    health_status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsiNodeGated {
    #[serde(default)]
    storage_health: Option<Vec<IgnoredAny>>,
}
