//! The `request` of an AdmissionReview, read in one pass.
//!
//! kube-apiserver writes `resource` before `object` and `oldObject`, so by the time an object
//! arrives its kind is known and its view (the few members the rules read) can be decoded right
//! there, while serde checks and skips everything else. The body is then read once instead of
//! twice (once to find the objects, once to read them). An object met before `resource` is kept
//! as raw JSON and read when a decision needs it.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::admission::{
    DecodeError, Slot, SlotSeed, Subject, UserInfo, Verdict, gated_field_to_drop_subject,
    validate_subject,
};
use crate::resource::{HealthResource, Operation};
use crate::restriction::RestrictionPolicy;

/// The members of an AdmissionReview's `request` in the order kube-apiserver writes them (the
/// field order of Go's `admission/v1.AdmissionRequest`). `resource` comes before the objects,
/// which is what lets [`AdmissionRequest`] read them in one pass.
pub const REQUEST_MEMBER_ORDER: [&str; 15] = [
    "uid",
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "object",
    "oldObject",
    "dryRun",
    "options",
];

/// `request.resource`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct GroupVersionResource<'a> {
    /// API group, `""` for core.
    #[serde(borrow, default)]
    pub group: Cow<'a, str>,
    /// Version.
    #[serde(borrow, default)]
    pub version: Cow<'a, str>,
    /// Plural resource.
    #[serde(borrow, default)]
    pub resource: Cow<'a, str>,
}

/// The members of an AdmissionReview's `request` that the rules and the webhooks read.
///
/// Deserializing it reads `object` and `oldObject` in the same pass when `resource` came first
/// (as kube-apiserver writes it); [`RawObjects`] keeps them as raw JSON instead. Either way,
/// [`validate`](Self::validate) and [`gated_field_to_drop`](Self::gated_field_to_drop) answer
/// exactly as [`crate::validate_admission`] and [`crate::gated_field_to_drop`] do on the same
/// request, with one difference: an object that does not decode as its kind makes the one-pass
/// read fail as a whole, so a caller reads such a body again with [`RawObjects`] to get the
/// [`DecodeError`].
///
/// ```
/// use volume_health_validation::{AdmissionRequest, Operation, RestrictionPolicy, Verdict};
///
/// let request = r#"{
///     "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
///     "resource": {"group": "", "version": "v1", "resource": "pods"},
///     "subResource": "status", "name": "web-0", "namespace": "default", "operation": "UPDATE",
///     "userInfo": {"username": "system:node:node1", "groups": ["system:nodes"]},
///     "object": {"metadata": {"name": "web-0"}, "spec": {"nodeName": "node1",
///         "volumes": [{"name": "data"}]},
///         "status": {"volumeHealth": [{"name": "logs",
///             "healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]}]}},
///     "oldObject": {"metadata": {"name": "web-0"}, "spec": {"nodeName": "node1"}}
/// }"#;
/// let request: AdmissionRequest<'_> = serde_json::from_str(request)?;
/// let policy = RestrictionPolicy { gate_enabled: true, pvc_health_writers: None };
/// let Verdict::Invalid { errors, .. } = request.validate(Operation::Update, &policy)? else {
///     panic!("a volume that is not in spec.volumes");
/// };
/// assert_eq!(errors[0].to_string(), r#"status.volumeHealth[0].name: Not found: "logs""#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct AdmissionRequest<'a> {
    /// `uid`, echoed in the response.
    pub uid: Cow<'a, str>,
    /// `resource`.
    pub resource: GroupVersionResource<'a>,
    /// `subResource`.
    pub sub_resource: Option<Cow<'a, str>>,
    /// `name`.
    pub name: Option<Cow<'a, str>>,
    /// `namespace`.
    pub namespace: Option<Cow<'a, str>>,
    /// `operation`.
    pub operation: Cow<'a, str>,
    /// `userInfo`.
    pub user_info: UserInfo<'a>,
    /// `dryRun`.
    pub dry_run: Option<bool>,
    object: Slot<'a>,
    old_object: Slot<'a>,
}

impl fmt::Debug for AdmissionRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionRequest")
            .field("uid", &self.uid)
            .field("resource", &self.resource)
            .field("sub_resource", &self.sub_resource)
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("operation", &self.operation)
            .field("user_info", &self.user_info)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl AdmissionRequest<'_> {
    /// `subResource`, `""` when absent.
    pub fn subresource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or_default()
    }

    /// `name`, `""` when absent.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// The resource written, when it is one with a volume health field.
    pub fn health_resource(&self) -> Option<HealthResource> {
        HealthResource::from_group_resource(&self.resource.group, &self.resource.resource)
    }

    /// Whether `object` is present and not `null`.
    pub fn has_object(&self) -> bool {
        !matches!(self.object, Slot::Absent)
    }

    /// The validating webhook's decision, as [`crate::validate_admission`]; requests for other
    /// resources are allowed.
    pub fn validate(
        &self,
        operation: Operation,
        policy: &RestrictionPolicy,
    ) -> Result<Verdict, DecodeError> {
        match self.health_resource() {
            Some(resource) => validate_subject(&self.subject(resource, operation), policy),
            None => Ok(Verdict::Allowed),
        }
    }

    /// Drop on save, as [`crate::gated_field_to_drop`]; nothing is dropped from other resources.
    pub fn gated_field_to_drop(
        &self,
        operation: Operation,
        gate_enabled: bool,
    ) -> Result<Option<&'static str>, DecodeError> {
        match self.health_resource() {
            Some(resource) => {
                gated_field_to_drop_subject(&self.subject(resource, operation), gate_enabled)
            }
            None => Ok(None),
        }
    }

    fn subject(&self, resource: HealthResource, operation: Operation) -> Subject<'_, '_> {
        Subject {
            resource,
            subresource: self.subresource(),
            operation,
            name: self.name(),
            user: &self.user_info,
            object: &self.object,
            old_object: &self.old_object,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for AdmissionRequest<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Strict at every depth, however the caller reads the text (see [`crate::json`]).
        crate::json::strict(deserializer).deserialize_map(RequestVisitor { read_objects: true })
    }
}

/// An [`AdmissionRequest`] read with its objects kept as raw JSON, for callers that only need
/// the envelope, and to read again a body whose objects did not decode as their kind.
#[derive(Debug)]
pub struct RawObjects<'a>(pub AdmissionRequest<'a>);

impl<'de: 'a, 'a> Deserialize<'de> for RawObjects<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::json::strict(deserializer)
            .deserialize_map(RequestVisitor {
                read_objects: false,
            })
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

/// A string borrowed from the body when it holds no escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

struct RequestVisitor {
    read_objects: bool,
}

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = AdmissionRequest<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut request = AdmissionRequest::default();
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
                Field::Uid => request.uid = map.next_value::<Text<'de>>()?.0,
                Field::Resource => request.resource = map.next_value()?,
                Field::SubResource => {
                    request.sub_resource = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                }
                Field::Name => request.name = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
                Field::Namespace => {
                    request.namespace = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0);
                }
                Field::Operation => request.operation = map.next_value::<Text<'de>>()?.0,
                Field::UserInfo => request.user_info = map.next_value()?,
                Field::Object => request.object = map.next_value_seed(self.seed(&request))?,
                Field::OldObject => {
                    request.old_object = map.next_value_seed(self.seed(&request))?;
                }
                Field::DryRun => request.dry_run = map.next_value()?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(request)
    }
}

impl RequestVisitor {
    /// How to read an object met now: as its view when its resource is known, else raw.
    fn seed(&self, request: &AdmissionRequest<'_>) -> ObjectSeed {
        ObjectSeed(
            self.read_objects
                .then(|| request.health_resource())
                .flatten(),
        )
    }
}

struct ObjectSeed(Option<HealthResource>);

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Slot<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Slot<'de>, D::Error> {
        match self.0 {
            None => Ok(Option::<&'de RawValue>::deserialize(deserializer)?
                .filter(|raw| raw.get() != "null")
                .map_or(Slot::Absent, Slot::Raw)),
            Some(resource) => SlotSeed(resource).deserialize(deserializer),
        }
    }
}
