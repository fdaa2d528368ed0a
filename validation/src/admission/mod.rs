//! Admission requests and their verdicts: a review read from its body, or a write made
//! in-process, decided by the node restriction and the field rules.

mod decide;
mod drop_on_save;
mod repaired;
mod response;
mod settings;
mod verdict;

use std::borrow::Cow;
use std::fmt;

use serde_json::value::RawValue;

pub use crate::decode::DecodeError;
use crate::decode::{self, Slot};
pub use crate::decode::{HealthObject, Typed};
pub use crate::identity::UserInfo;
pub use crate::resource::GroupVersionResource;
use crate::resource::{HealthResource, Operation};
pub use drop_on_save::{DropOnSave, Remove};
pub use repaired::{
    MAX_REPAIRED_BYTES, NAMED_ENTRIES, PATHS_PER_WARNING, RepairCount, RepairError, Repaired,
    Replace,
};
pub use response::Response;
pub use settings::Settings;
pub use verdict::{Forbidden, Invalid, Verdict};

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// An AdmissionReview body (`admission.k8s.io/v1`) with a request this library decides.
///
/// ```
/// use volume_health_validation::{AdmissionReview, Settings, Verdict};
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
/// let request = AdmissionReview::parse(body)?.request;
/// let settings = Settings::with_gate(true);
/// let Verdict::Invalid(invalid) = request.validate(&settings)? else {
///     panic!("a volume that is not in spec.volumes");
/// };
/// assert_eq!(invalid.errors[0].to_string(), r#"status.volumeHealth[0].name: Not found: "logs""#);
/// assert_eq!(invalid.status().code, Some(422));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AdmissionReview<'a> {
    /// `request`.
    pub request: AdmissionRequest<'a>,
}

/// A body that is not an AdmissionReview with a request to decide. Each message says what is
/// wrong at this layer; the source, where there is one, says the rest.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON of the AdmissionReview shape.
    #[error("request body is not an AdmissionReview")]
    Decode(#[source] serde_json::Error),
    /// Another apiVersion or kind.
    #[error(
        "expected kind AdmissionReview in admission.k8s.io/v1, got {kind:?} in {api_version:?}"
    )]
    Type {
        /// The body's `apiVersion`.
        api_version: String,
        /// The body's `kind`.
        kind: String,
    },
    /// No `request`.
    #[error("AdmissionReview has no request")]
    MissingRequest,
    /// A request without `uid`: no answer could be matched to it.
    #[error("AdmissionReview request has no uid")]
    MissingUid,
    /// An operation that is not CREATE, UPDATE, DELETE or CONNECT.
    #[error("AdmissionReview request has unknown operation {0:?}")]
    Operation(String),
}

impl<'a> AdmissionReview<'a> {
    /// Reads and checks an AdmissionReview body, whatever the order of its members: its
    /// `apiVersion` and `kind`, a request with a `uid` and a known operation. Strings are
    /// borrowed from `body` where they hold no escapes. An object that is not its kind is no
    /// error here, but one the decisions return when they read it.
    ///
    /// ```
    /// use volume_health_validation::{AdmissionReview, Settings, Verdict};
    ///
    /// // A kubelet's write of another node's CSINode status, as kube-apiserver sends it.
    /// let body = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    ///   "uid": "705ab4f5", "operation": "UPDATE", "subResource": "status", "name": "node-2",
    ///   "resource": {"group": "storage.k8s.io", "version": "v1", "resource": "csinodes"},
    ///   "userInfo": {"username": "system:node:node-1", "groups": ["system:nodes"]},
    ///   "object": {"metadata": {"name": "node-2"}}, "oldObject": {"metadata": {"name": "node-2"}}}}"#;
    /// let review = AdmissionReview::parse(body)?;
    /// let Verdict::Forbidden(forbidden) = review.request.validate(&Settings::with_gate(true))? else {
    ///     panic!("a node writes its own CSINode only");
    /// };
    /// let message = forbidden.status().message.unwrap_or_default();
    /// assert_eq!(
    ///     message,
    ///     r#"csinodes.storage.k8s.io "node-2" is forbidden: can only access CSINode with the same name as the requesting node"#
    /// );
    /// // Not an AdmissionReview: an error naming what it is.
    /// assert!(AdmissionReview::parse(r#"{"apiVersion": "v1", "kind": "Pod"}"#).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parse(body: &'a str) -> Result<Self, ReviewError> {
        let review = decode::read_review(body).map_err(ReviewError::Decode)?;
        if review.api_version != API_VERSION || review.kind != KIND {
            return Err(ReviewError::Type {
                api_version: quoted(&review.api_version),
                kind: quoted(&review.kind),
            });
        }
        let read = review.request.ok_or(ReviewError::MissingRequest)?;
        if read.uid.is_empty() {
            return Err(ReviewError::MissingUid);
        }
        let operation = Operation::parse(&read.operation)
            .ok_or_else(|| ReviewError::Operation(quoted(&read.operation)))?;
        let request = AdmissionRequest {
            uid: read.uid,
            resource: read.resource,
            sub_resource: read.sub_resource,
            name: read.name,
            namespace: read.namespace,
            operation,
            user_info: read.user_info,
            dry_run: read.dry_run,
            object: read.object,
            old_object: read.old_object,
        };
        Ok(AdmissionReview { request })
    }
}

/// A value of the body as an error quotes it: cut, so that the message stays short whatever
/// the body holds.
fn quoted(value: &str) -> String {
    crate::error::cut(value, crate::error::MAX_QUOTED_BYTES).into_owned()
}

/// The members of an admission request that the rules and the webhooks read, with `object`
/// and `oldObject` read as far as the rules read them.
///
/// Read from a review with [`AdmissionReview::parse`], or made in-process for a write about to
/// be sent with [`AdmissionRequest::write`] (typed objects) or [`AdmissionRequest::new`].
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
    pub operation: Operation,
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

impl<'a> AdmissionRequest<'a> {
    /// A request for a write of `resource` made in-process, its objects set with
    /// [`with_objects`](Self::with_objects).
    ///
    /// ```
    /// use volume_health_validation::{
    ///     AdmissionRequest, HealthResource, Operation, Settings, UserInfo,
    /// };
    ///
    /// // A kubelet deleting another node's CSINode: the rule reads the request alone.
    /// let request = AdmissionRequest::new(HealthResource::CsiNodes, Operation::Delete)
    ///     .with_name("node-2")
    ///     .with_user(UserInfo::node("node-1"));
    /// assert_eq!(request.resource.group, "storage.k8s.io");
    /// assert!(!request.has_object());
    /// assert_eq!(request.validate(&Settings::with_gate(true))?.code(), Some(403));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(resource: HealthResource, operation: Operation) -> Self {
        AdmissionRequest {
            uid: Cow::Borrowed(""),
            resource: GroupVersionResource {
                group: resource.group().into(),
                version: "v1".into(),
                resource: resource.resource().into(),
            },
            sub_resource: None,
            name: None,
            namespace: None,
            operation,
            user_info: UserInfo::default(),
            dry_run: None,
            object: Slot::Absent,
            old_object: Slot::Absent,
        }
    }

    /// A write of typed objects, as a program checks its own write before sending it: the
    /// resource is the objects' kind, the name and namespace are `object`'s (`old_object`'s on
    /// DELETE). Set who writes with [`with_user`](Self::with_user), and `status` for a status
    /// write with [`with_subresource`](Self::with_subresource).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus, PodVolumeHealth};
    /// use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo, Verdict};
    ///
    /// let old = Pod {
    ///     metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    ///         name: Some("web-0".into()),
    ///         ..Default::default()
    ///     },
    ///     spec: Some(PodSpec { node_name: Some("node2".into()), ..Default::default() }),
    ///     ..Default::default()
    /// };
    /// let mut new = old.clone();
    /// new.status = Some(PodStatus {
    ///     volume_health: Some(vec![PodVolumeHealth { name: "data".into(), ..Default::default() }]),
    ///     ..Default::default()
    /// });
    /// let verdict = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node1"))
    ///     .validate(&Settings::with_gate(true))?;
    /// let Verdict::Forbidden(forbidden) = verdict else { panic!("another node's pod") };
    /// assert_eq!(
    ///     forbidden.reason.to_string(),
    ///     r#"node "node1" can only update pod status for pods with spec.nodeName set to itself"#
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write<K: HealthObject>(
        operation: Operation,
        object: Option<&'a K>,
        old_object: Option<&'a K>,
    ) -> Self {
        let (object, old_object) = (object.map(K::typed), old_object.map(K::typed));
        let named = if operation == Operation::Delete {
            old_object.or(object)
        } else {
            object.or(old_object)
        };
        let metadata = named.map(Typed::metadata);
        let borrowed = |text: Option<&'a String>| text.map(|t| Cow::Borrowed(t.as_str()));
        AdmissionRequest {
            name: borrowed(metadata.and_then(|m| m.name.as_ref())),
            namespace: borrowed(metadata.and_then(|m| m.namespace.as_ref())),
            object: object.map_or(Slot::Absent, Typed::slot),
            old_object: old_object.map_or(Slot::Absent, Typed::slot),
            ..AdmissionRequest::new(K::RESOURCE, operation)
        }
    }

    /// With `subResource` (`status` for a status write).
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{Pod, PodStatus, PodVolumeHealth};
    /// use volume_health_validation::{AdmissionRequest, Operation, Settings, Verdict};
    ///
    /// let old = Pod::default();
    /// let mut new = old.clone();
    /// new.status = Some(PodStatus {
    ///     volume_health: Some(vec![PodVolumeHealth { name: "logs".into(), ..Default::default() }]),
    ///     ..Default::default()
    /// });
    /// let settings = Settings::with_gate(true);
    /// // A write of the pod itself keeps the stored status, so its fields are not checked.
    /// let spec = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old));
    /// assert_eq!(spec.validate(&settings)?, Verdict::Allowed);
    /// // Written to `pods/status`, the same entry is refused: `logs` is no volume of the pod.
    /// let status = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// assert_eq!(status.validate(&settings)?.code(), Some(422));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_subresource(mut self, subresource: impl Into<Cow<'a, str>>) -> Self {
        self.sub_resource = Some(subresource.into());
        self
    }

    /// With `name`.
    ///
    /// ```
    /// use volume_health_validation::{
    ///     AdmissionRequest, HealthResource, Operation, Settings, UserInfo,
    /// };
    ///
    /// let settings = Settings::with_gate(true);
    /// let request = AdmissionRequest::new(HealthResource::CsiNodes, Operation::Update)
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"))
    ///     .with_name("node-1");
    /// assert_eq!(request.name(), "node-1");
    /// // A node writes its own CSINode, and no other.
    /// assert_eq!(request.validate(&settings)?.code(), None);
    /// let other = request.with_name("node-2");
    /// assert_eq!(other.validate(&settings)?.code(), Some(403));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_name(mut self, name: impl Into<Cow<'a, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// With `userInfo`: who writes.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{
    ///     PersistentVolumeClaim, PersistentVolumeClaimStatus, VolumeHealthCondition,
    ///     VolumeHealthStatus,
    /// };
    /// use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo, Verdict};
    ///
    /// let old = PersistentVolumeClaim::default();
    /// let mut new = old.clone();
    /// let degraded = VolumeHealthCondition {
    ///     status: "Degraded".into(),
    ///     reason: "ReplicaOutOfSync".into(),
    ///     message: None,
    /// };
    /// new.status = Some(PersistentVolumeClaimStatus {
    ///     health_status: Some(VolumeHealthStatus {
    ///         health_conditions: Some(vec![degraded]),
    ///         ..Default::default()
    ///     }),
    ///     ..Default::default()
    /// });
    /// let write = |user: UserInfo<'static>| {
    ///     AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///         .with_subresource("status")
    ///         .with_user(user)
    /// };
    /// let settings = Settings::with_gate(true);
    /// // A health monitor may change a claim's health; a node never may.
    /// let monitor = UserInfo::new(
    ///     "system:serviceaccount:kube-system:csi-health-monitor",
    ///     &["system:serviceaccounts"],
    /// );
    /// assert_eq!(write(monitor).validate(&settings)?, Verdict::Allowed);
    /// assert_eq!(write(UserInfo::node("node-1")).validate(&settings)?.label(), "forbidden");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_user(mut self, user: UserInfo<'a>) -> Self {
        self.user_info = user;
        self
    }

    /// With `object` and `oldObject` as JSON text (`None` or `null`: absent), decoded as the
    /// request's resource; one that is not its kind is reported when a decision reads it.
    ///
    /// ```
    /// use serde_json::value::RawValue;
    /// use volume_health_validation::{AdmissionRequest, HealthResource, Operation, Settings};
    ///
    /// let claims = || {
    ///     AdmissionRequest::new(HealthResource::PersistentVolumeClaims, Operation::Update)
    /// };
    /// let settings = Settings::with_gate(true);
    /// let old: &RawValue = serde_json::from_str(r#"{"metadata": {"name": "data-0"}}"#)?;
    /// let new: &RawValue = serde_json::from_str(
    ///     r#"{"metadata": {"name": "data-0"}, "status": {"healthStatus": {"healthConditions": [
    ///         {"status": "Healthy", "reason": "Probed"}]}}}"#,
    /// )?;
    /// let request = claims().with_subresource("status").with_objects(Some(new), Some(old));
    /// assert_eq!(request.validate(&settings)?.code(), Some(422));
    /// // Text that is not a claim is no error yet: validation reports it when it reads it.
    /// let list: &RawValue = serde_json::from_str("[]")?;
    /// let request = claims().with_objects(Some(list), Some(old));
    /// let error = request.validate(&settings).expect_err("a list is not a claim");
    /// assert_eq!(error.to_string(), "failed to decode object as PersistentVolumeClaim");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// ```
    /// use volume_health_validation::{AdmissionRequest, HealthResource, Operation};
    ///
    /// let request = AdmissionRequest::new(HealthResource::Pods, Operation::Update);
    /// assert_eq!(request.subresource(), "");
    /// assert_eq!(request.with_subresource("status").subresource(), "status");
    /// ```
    pub fn subresource(&self) -> &str {
        self.sub_resource.as_deref().unwrap_or_default()
    }

    /// `name`, `""` when absent.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use volume_health_validation::{AdmissionRequest, HealthResource, Operation};
    ///
    /// let pod = Pod {
    ///     metadata: ObjectMeta { name: Some("web-0".into()), ..Default::default() },
    ///     ..Default::default()
    /// };
    /// // A typed write is named by its object.
    /// assert_eq!(AdmissionRequest::write(Operation::Create, Some(&pod), None).name(), "web-0");
    /// assert_eq!(AdmissionRequest::new(HealthResource::Pods, Operation::Create).name(), "");
    /// ```
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// The resource written, when it is one with a volume health field.
    ///
    /// ```
    /// use volume_health_validation::{AdmissionReview, HealthResource, Settings, Verdict};
    ///
    /// let body = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    ///     "uid": "705ab4f5", "operation": "UPDATE", "name": "settings", "namespace": "default",
    ///     "resource": {"group": "", "version": "v1", "resource": "configmaps"}}}"#;
    /// let request = AdmissionReview::parse(body)?.request;
    /// // A ConfigMap has no volume health: it is allowed unchanged.
    /// assert_eq!(request.health_resource(), None);
    /// assert_eq!(request.validate(&Settings::with_gate(true))?, Verdict::Allowed);
    ///
    /// let body = body.replace("configmaps", "persistentvolumeclaims");
    /// let request = AdmissionReview::parse(&body)?.request;
    /// assert_eq!(request.health_resource(), Some(HealthResource::PersistentVolumeClaims));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn health_resource(&self) -> Option<HealthResource> {
        self.resource.health_resource()
    }

    /// Whether `object` is present and not `null`.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::Pod;
    /// use volume_health_validation::{AdmissionRequest, Operation};
    ///
    /// let pod = Pod::default();
    /// assert!(AdmissionRequest::write(Operation::Create, Some(&pod), None).has_object());
    /// // A DELETE carries the old object alone.
    /// assert!(!AdmissionRequest::write(Operation::Delete, None, Some(&pod)).has_object());
    /// ```
    pub fn has_object(&self) -> bool {
        !matches!(self.object, Slot::Absent)
    }

    /// The answer that allows this request unchanged.
    ///
    /// ```
    /// use volume_health_validation::{AdmissionReview, Settings, Verdict};
    ///
    /// let body = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    ///     "uid": "705ab4f5", "operation": "UPDATE", "name": "web-0", "namespace": "default",
    ///     "resource": {"group": "", "version": "v1", "resource": "pods"}}}"#;
    /// let request = AdmissionReview::parse(body)?.request;
    /// assert_eq!(request.validate(&Settings::with_gate(true))?, Verdict::Allowed);
    /// let response = request.allow();
    /// // The answer carries the request's uid: the apiserver matches the two by it.
    /// assert_eq!((response.uid, response.allowed), ("705ab4f5", true));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allow(&self) -> Response<'_> {
        Response::allow(&self.uid)
    }

    /// The answer that allows this request with `patch` applied (a JSON Patch:
    /// [`DropOnSave::patch`], [`Repaired::patch`]).
    ///
    /// ```
    /// use base64::Engine as _;
    /// use base64::engine::general_purpose::STANDARD;
    /// use k8s_openapi::api::core::v1::{Pod, PodStatus, PodVolumeHealth};
    /// use volume_health_validation::{AdmissionRequest, Operation};
    ///
    /// let old = Pod::default();
    /// let mut new = old.clone();
    /// new.status = Some(PodStatus {
    ///     volume_health: Some(vec![PodVolumeHealth { name: "data".into(), ..Default::default() }]),
    ///     ..Default::default()
    /// });
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status");
    /// // With the gate off, the new field is dropped on save.
    /// let drop = request.gated_field_to_drop(false)?.expect("a new field to drop");
    /// let response = request.allow_patching(&drop.patch());
    /// assert!(response.allowed);
    /// assert_eq!(response.patch_type, Some("JSONPatch"));
    /// // The patch travels as base64 of its JSON.
    /// let patch = STANDARD.decode(response.patch.unwrap_or_default())?;
    /// assert_eq!(patch, br#"[{"op":"remove","path":"/status/volumeHealth"}]"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allow_patching<P: serde::Serialize + ?Sized>(&self, patch: &P) -> Response<'_> {
        Response::allow_patching(&self.uid, patch)
    }

    /// The answer that denies this request with `status`.
    ///
    /// ```
    /// use volume_health_validation::{
    ///     AdmissionRequest, HealthResource, Operation, Settings, UserInfo,
    /// };
    ///
    /// let request = AdmissionRequest::new(HealthResource::CsiNodes, Operation::Update)
    ///     .with_name("node-2")
    ///     .with_user(UserInfo::node("node-1"));
    /// let verdict = request.validate(&Settings::with_gate(true))?;
    /// let status = verdict.status().expect("a node writes its own CSINode only");
    /// let response = request.deny(status);
    /// assert!(!response.allowed);
    /// assert_eq!(response.status.and_then(|s| s.code), Some(403));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deny(
        &self,
        status: k8s_openapi::apimachinery::pkg::apis::meta::v1::Status,
    ) -> Response<'_> {
        Response::deny(&self.uid, status)
    }

    /// The validating webhook's decision: node restriction first, then field validation of the
    /// new object against the old one. Requests for other resources are allowed.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{
    ///     PersistentVolumeClaim, PersistentVolumeClaimStatus, VolumeHealthCondition,
    ///     VolumeHealthStatus,
    /// };
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo, Verdict};
    ///
    /// let old = PersistentVolumeClaim {
    ///     metadata: ObjectMeta { name: Some("data-0".into()), ..Default::default() },
    ///     ..Default::default()
    /// };
    /// let mut new = old.clone();
    /// // A hyphen is outside the reason format (letters, digits, `_`, `,` and `:`).
    /// let condition = VolumeHealthCondition {
    ///     status: "Degraded".into(),
    ///     reason: "controller-missing".into(),
    ///     message: None,
    /// };
    /// new.status = Some(PersistentVolumeClaimStatus {
    ///     health_status: Some(VolumeHealthStatus {
    ///         health_conditions: Some(vec![condition]),
    ///         ..Default::default()
    ///     }),
    ///     ..Default::default()
    /// });
    /// let monitor = UserInfo::new(
    ///     "system:serviceaccount:kube-system:csi-health-monitor",
    ///     &["system:serviceaccounts"],
    /// );
    /// let verdict = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(monitor)
    ///     .validate(&Settings::with_gate(true))?;
    /// let Verdict::Invalid(invalid) = verdict else { panic!("a reason out of format") };
    /// assert_eq!(invalid.name, "data-0");
    /// assert!(invalid.errors[0].to_string().starts_with(
    ///     r#"status.healthStatus.healthConditions[0].reason: Invalid value: "controller-missing""#
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn validate(&self, settings: &Settings) -> Result<Verdict, DecodeError> {
        match self.health_resource() {
            Some(resource) => {
                self.validate_health(resource, settings, crate::rules::ConditionIdentity::InTree)
            }
            None => Ok(Verdict::Allowed),
        }
    }

    /// Drop on save: the gated field to remove from `object`, with the patch that removes it,
    /// or `None` when nothing is removed. With the gate off, a new value is dropped unless the
    /// old object already uses the field (present for a claim's `healthStatus`, a non-empty
    /// list otherwise). Nothing is dropped from other resources. With the gate on nothing is
    /// dropped, and an object that is not its kind is reported as [`validate`](Self::validate)
    /// reports it.
    ///
    /// ```
    /// use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth};
    /// use volume_health_validation::{AdmissionRequest, Operation};
    ///
    /// fn csinode(entries: usize) -> CSINode {
    ///     let entry = StorageHealth { name: "csi.example.com".into(), ..Default::default() };
    ///     let status = CSINodeStatus { storage_health: Some(vec![entry; entries]) };
    ///     CSINode { status: Some(status), ..Default::default() }
    /// }
    /// fn status_write<'a>(new: &'a CSINode, old: &'a CSINode) -> AdmissionRequest<'a> {
    ///     AdmissionRequest::write(Operation::Update, Some(new), Some(old)).with_subresource("status")
    /// }
    /// let (bare, reporting) = (csinode(0), csinode(1));
    /// // The gate is off and nothing is stored: the new report is dropped.
    /// let drop = status_write(&reporting, &bare).gated_field_to_drop(false)?;
    /// assert_eq!(drop.map(|d| d.field()), Some("status.storageHealth"));
    /// // A field the stored object already uses stays writable.
    /// assert_eq!(status_write(&reporting, &reporting).gated_field_to_drop(false)?, None);
    /// // With the gate on, nothing is dropped.
    /// assert_eq!(status_write(&reporting, &bare).gated_field_to_drop(true)?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gated_field_to_drop(
        &self,
        gate_enabled: bool,
    ) -> Result<Option<DropOnSave>, DecodeError> {
        match self.health_resource() {
            Some(resource) => self.gated_field_to_drop_from(resource, gate_enabled),
            None => Ok(None),
        }
    }
}
