//! An AdmissionReview, read in one pass.
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
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::admission::{Target, Verdict};
use crate::identity::Groups;
use crate::json;
use crate::objects::{DecodeError, Slot, SlotSeed};
use crate::resource::{HealthResource, Operation};
use crate::restriction::RestrictionPolicy;
use crate::view::Borrowed;

/// An AdmissionReview body (`admission.k8s.io/v1`) as far as the rules read it.
///
/// ```
/// use volume_health_validation::{AdmissionReview, RestrictionPolicy, Verdict};
///
/// let body = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
///   "request": {
///     "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
///     "resource": {"group": "", "version": "v1", "resource": "pods"},
///     "subResource": "status", "name": "web-0", "namespace": "default", "operation": "UPDATE",
///     "userInfo": {"username": "system:node:node1", "groups": ["system:nodes"]},
///     "object": {"metadata": {"name": "web-0"}, "spec": {"nodeName": "node1",
///         "volumes": [{"name": "data"}]},
///         "status": {"volumeHealth": [{"name": "logs",
///             "healthConditions": [{"status": "Degraded", "reason": "DiskSlow"}]}]}},
///     "oldObject": {"metadata": {"name": "web-0"}, "spec": {"nodeName": "node1"}}
///   }}"#;
/// let review = AdmissionReview::parse(body)?;
/// let request = review.request.expect("a review with a request");
/// let policy = RestrictionPolicy { gate_enabled: true, ..Default::default() };
/// let Verdict::Invalid(invalid) = request.validate(&policy)? else {
///     panic!("a volume that is not in spec.volumes");
/// };
/// assert_eq!(invalid.errors[0].to_string(), r#"status.volumeHealth[0].name: Not found: "logs""#);
/// assert_eq!(invalid.status().code, Some(422));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AdmissionReview<'a> {
    /// `apiVersion`.
    pub api_version: Cow<'a, str>,
    /// `kind`.
    pub kind: Cow<'a, str>,
    /// `request`.
    pub request: Option<AdmissionRequest<'a>>,
}

impl<'a> AdmissionReview<'a> {
    /// Reads an AdmissionReview body, whatever the order of its members. Strings are borrowed
    /// from `body` where they hold no escapes. The error is the body's own: not JSON, or not
    /// of the AdmissionReview shape; an object that is not its kind is no error here, but one
    /// the decisions return when they read it.
    pub fn parse(body: &'a str) -> Result<Self, serde_json::Error> {
        match json::from_str::<Envelope<'a, OnePass<'a>>>(body) {
            Ok(review) => Ok(review.into_review(|pass| pass.0)),
            Err(_) => json::from_str::<Envelope<'a, RawObjects<'a>>>(body)
                .map(|review| review.into_review(|pass| pass.0)),
        }
    }
}

/// The body as serde reads it, with `request` read one way or the other.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound = "R: Deserialize<'de>",
    expecting = "struct AdmissionReview"
)]
struct Envelope<'a, R> {
    #[serde(borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(default)]
    request: Option<R>,
}

impl<'a, R> Envelope<'a, R> {
    fn into_review(self, request: impl FnOnce(R) -> AdmissionRequest<'a>) -> AdmissionReview<'a> {
        AdmissionReview {
            api_version: self.api_version,
            kind: self.kind,
            request: self.request.map(request),
        }
    }
}

/// `userInfo` of an admission request.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo<'a> {
    /// The username.
    #[serde(borrow, default)]
    pub username: Cow<'a, str>,
    /// The groups, as far as the rules read them.
    #[serde(default)]
    pub groups: Groups,
}

impl UserInfo<'_> {
    /// The node name when this user is a node (see [`crate::node_name`]).
    pub fn node_name(&self) -> Option<&str> {
        self.groups.node_name(&self.username)
    }
}

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

/// The members of an AdmissionReview's `request` that the rules and the webhooks read, with
/// `object` and `oldObject` decoded as far as the rules read them.
///
/// Read from a review with [`AdmissionReview::parse`], or made in-process for a write about to
/// be sent with [`AdmissionRequest::new`].
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
    /// `operation`, as written; see [`operation`](Self::operation).
    pub operation: Cow<'a, str>,
    /// `userInfo`.
    pub user_info: UserInfo<'a>,
    /// `dryRun`.
    pub dry_run: Option<bool>,
    pub(crate) object: Slot<'a>,
    pub(crate) old_object: Slot<'a>,
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

/// An operation that is not CREATE, UPDATE, DELETE or CONNECT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown operation {0:?}")]
pub struct UnknownOperation(pub String);

/// Why a request could not be decided.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request's operation is not one Kubernetes has.
    #[error(transparent)]
    Operation(UnknownOperation),
    /// An object of the request is not its kind.
    #[error(transparent)]
    Decode(Arc<DecodeError>),
}

impl<'a> AdmissionRequest<'a> {
    /// A request for a write of `resource` made in-process, as a program checks its own write
    /// before sending it; the objects are set with [`with_objects`](Self::with_objects).
    pub fn new(resource: HealthResource, operation: Operation) -> Self {
        AdmissionRequest {
            resource: GroupVersionResource {
                group: resource.group().into(),
                version: "v1".into(),
                resource: resource.resource().into(),
            },
            operation: operation.as_str().into(),
            ..AdmissionRequest::default()
        }
    }

    /// With `subResource` (`status` for a status write).
    pub fn with_subresource(mut self, subresource: impl Into<Cow<'a, str>>) -> Self {
        self.sub_resource = Some(subresource.into());
        self
    }

    /// With `name`.
    pub fn with_name(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// With `userInfo`: who writes.
    pub fn with_user(mut self, user: UserInfo<'a>) -> Self {
        self.user_info = user;
        self
    }

    /// With `object` and `oldObject` as JSON text (`None` or `null`: absent), decoded as the
    /// request's resource; one that is not its kind is reported when a decision reads it.
    pub fn with_objects(
        mut self,
        object: Option<&'a RawValue>,
        old_object: Option<&'a RawValue>,
    ) -> Self {
        let resource = self.health_resource();
        let decode = |raw: Option<&'a RawValue>, field| {
            raw.map_or(Slot::Absent, |raw| Slot::decode(resource, raw, field))
        };
        self.object = decode(object, "object");
        self.old_object = decode(old_object, "oldObject");
        self
    }

    /// `subResource`, `""` when absent.
    pub fn subresource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or_default()
    }

    /// `name`, `""` when absent.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// The operation.
    pub fn operation(&self) -> Result<Operation, UnknownOperation> {
        Operation::parse(&self.operation)
            .ok_or_else(|| UnknownOperation(self.operation.to_string()))
    }

    /// The resource written, when it is one with a volume health field.
    pub fn health_resource(&self) -> Option<HealthResource> {
        HealthResource::from_group_resource(&self.resource.group, &self.resource.resource)
    }

    /// Whether `object` is present and not `null`.
    pub fn has_object(&self) -> bool {
        !matches!(self.object, Slot::Absent)
    }

    /// The validating webhook's decision: node restriction first, then field validation of the
    /// new object against the old one. Requests for other resources are allowed.
    pub fn validate(&self, policy: &RestrictionPolicy) -> Result<Verdict, RequestError> {
        match self.target()? {
            Some(target) => target.validate(policy).map_err(RequestError::Decode),
            None => Ok(Verdict::Allowed),
        }
    }

    /// Drop on save: the JSON Pointer (RFC 6901) of the gated field to remove from `object`,
    /// or `None` when nothing is removed. With the gate off, a new value is dropped unless the
    /// old object already uses the field (present for a claim's `healthStatus`, a non-empty
    /// list otherwise). Nothing is dropped from other resources.
    pub fn gated_field_to_drop(
        &self,
        gate_enabled: bool,
    ) -> Result<Option<&'static str>, RequestError> {
        match self.target()? {
            Some(target) => target
                .gated_field_to_drop(gate_enabled)
                .map_err(RequestError::Decode),
            None => Ok(None),
        }
    }

    fn target(&self) -> Result<Option<Target<'_, 'a>>, RequestError> {
        let operation = self.operation().map_err(RequestError::Operation)?;
        Ok(self.health_resource().map(|resource| Target {
            request: self,
            resource,
            operation,
        }))
    }
}

/// A request read in one pass: an object met after `resource` is read as its view right there.
struct OnePass<'a>(AdmissionRequest<'a>);

/// A request read with its objects kept raw, each decoded on its own at the end.
struct RawObjects<'a>(AdmissionRequest<'a>);

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
    type Value = AdmissionRequest<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut request = AdmissionRequest::default();
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
        let resource = request.health_resource();
        request.object = object.into_slot(resource, "object");
        request.old_object = old_object.into_slot(resource, "oldObject");
        Ok(request)
    }
}

impl RequestVisitor {
    /// How to read an object met now: as its view when its resource is known, else raw.
    fn seed(&self, request: &AdmissionRequest<'_>, seen: u16) -> ObjectSeed {
        let resource_read = seen & (1 << Field::Resource as u16) != 0;
        ObjectSeed(
            match (self.one_pass && resource_read, request.health_resource()) {
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
