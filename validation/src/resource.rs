//! The three resources that carry volume health, and the request facts the rules key on.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;

/// `request.resource` of an admission request.
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

impl GroupVersionResource<'_> {
    /// The resource, when it is one with a volume health field (any version).
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    /// use volume_health_validation::admission::GroupVersionResource;
    ///
    /// let gvr = |group: &'static str, version: &'static str, resource: &'static str| {
    ///     GroupVersionResource { group: group.into(), version: version.into(), resource: resource.into() }
    /// };
    /// // The version is not read: the rules are the same in each.
    /// let csinodes = gvr("storage.k8s.io", "v1beta1", "csinodes");
    /// assert_eq!(csinodes.health_resource(), Some(HealthResource::CsiNodes));
    /// assert_eq!(gvr("", "v1", "configmaps").health_resource(), None);
    /// ```
    pub fn health_resource(&self) -> Option<HealthResource> {
        HealthResource::from_group_resource(&self.group, &self.resource)
    }
}

/// A resource with a volume health field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthResource {
    /// `pods` (core), field `status.volumeHealth`.
    Pods,
    /// `persistentvolumeclaims` (core), field `status.healthStatus`.
    PersistentVolumeClaims,
    /// `csinodes` (`storage.k8s.io`), field `status.storageHealth`.
    CsiNodes,
}

impl HealthResource {
    /// Every resource, for iteration.
    pub const ALL: [HealthResource; 3] = [
        HealthResource::Pods,
        HealthResource::PersistentVolumeClaims,
        HealthResource::CsiNodes,
    ];

    /// The resource for an API group and plural resource name, any version.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    ///
    /// let csinodes = HealthResource::from_group_resource("storage.k8s.io", "csinodes");
    /// assert_eq!(csinodes, Some(HealthResource::CsiNodes));
    /// // Core resources have the empty group, and a kind is not a resource name.
    /// assert_eq!(HealthResource::from_group_resource("", "pods"), Some(HealthResource::Pods));
    /// assert_eq!(HealthResource::from_group_resource("", "Pod"), None);
    /// ```
    pub fn from_group_resource(group: &str, resource: &str) -> Option<Self> {
        match (group, resource) {
            ("", "pods") => Some(HealthResource::Pods),
            ("", "persistentvolumeclaims") => Some(HealthResource::PersistentVolumeClaims),
            ("storage.k8s.io", "csinodes") => Some(HealthResource::CsiNodes),
            _ => None,
        }
    }

    /// The API group (`""` for core).
    ///
    /// ```
    /// use k8s_openapi::Resource as _;
    /// use k8s_openapi::api::core::v1::Pod;
    /// use k8s_openapi::api::storage::v1::CSINode;
    /// use volume_health_validation::HealthResource;
    ///
    /// assert_eq!(HealthResource::CsiNodes.group(), CSINode::GROUP);
    /// assert_eq!(HealthResource::Pods.group(), Pod::GROUP);
    /// assert_eq!(HealthResource::Pods.group(), "");
    /// ```
    pub fn group(self) -> &'static str {
        match self {
            HealthResource::CsiNodes => "storage.k8s.io",
            _ => "",
        }
    }

    /// The plural resource name.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    ///
    /// assert_eq!(HealthResource::PersistentVolumeClaims.resource(), "persistentvolumeclaims");
    /// // With the group, it names the resource again.
    /// for resource in HealthResource::ALL {
    ///     let found = HealthResource::from_group_resource(resource.group(), resource.resource());
    ///     assert_eq!(found, Some(resource));
    /// }
    /// ```
    pub fn resource(self) -> &'static str {
        match self {
            HealthResource::Pods => "pods",
            HealthResource::PersistentVolumeClaims => "persistentvolumeclaims",
            HealthResource::CsiNodes => "csinodes",
        }
    }

    /// The kind.
    ///
    /// ```
    /// use k8s_openapi::Resource as _;
    /// use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    /// use k8s_openapi::api::storage::v1::CSINode;
    /// use volume_health_validation::HealthResource;
    ///
    /// assert_eq!(HealthResource::CsiNodes.kind(), CSINode::KIND);
    /// assert_eq!(HealthResource::PersistentVolumeClaims.kind(), PersistentVolumeClaim::KIND);
    /// ```
    pub fn kind(self) -> &'static str {
        match self {
            HealthResource::Pods => "Pod",
            HealthResource::PersistentVolumeClaims => "PersistentVolumeClaim",
            HealthResource::CsiNodes => "CSINode",
        }
    }

    /// The kind as `schema.GroupKind.String()` prints it: `Pod`, `CSINode.storage.k8s.io`.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    ///
    /// // A core kind has no group to add.
    /// assert_eq!(HealthResource::Pods.qualified_kind(), "Pod");
    /// assert_eq!(HealthResource::CsiNodes.qualified_kind(), "CSINode.storage.k8s.io");
    /// ```
    pub fn qualified_kind(self) -> &'static str {
        match self {
            HealthResource::Pods => "Pod",
            HealthResource::PersistentVolumeClaims => "PersistentVolumeClaim",
            HealthResource::CsiNodes => "CSINode.storage.k8s.io",
        }
    }

    /// The resource as `schema.GroupResource.String()` prints it: `pods`,
    /// `csinodes.storage.k8s.io`.
    ///
    /// ```
    /// use volume_health_validation::HealthResource;
    ///
    /// assert_eq!(HealthResource::CsiNodes.qualified_resource(), "csinodes.storage.k8s.io");
    /// assert_eq!(HealthResource::Pods.qualified_resource(), "pods");
    /// // It is also how the resource displays.
    /// assert_eq!(HealthResource::CsiNodes.to_string(), "csinodes.storage.k8s.io");
    /// ```
    pub fn qualified_resource(self) -> &'static str {
        match self {
            HealthResource::Pods => "pods",
            HealthResource::PersistentVolumeClaims => "persistentvolumeclaims",
            HealthResource::CsiNodes => "csinodes.storage.k8s.io",
        }
    }

    /// The gated field as a JSON Pointer (RFC 6901) into the object.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{Pod, PodStatus, PodVolumeHealth};
    /// use volume_health_validation::HealthResource;
    ///
    /// let pod = Pod {
    ///     status: Some(PodStatus {
    ///         volume_health: Some(vec![PodVolumeHealth { name: "data".into(), ..Default::default() }]),
    ///         ..Default::default()
    ///     }),
    ///     ..Default::default()
    /// };
    /// let json = serde_json::to_value(&pod)?;
    /// let field = json.pointer(HealthResource::Pods.gated_pointer());
    /// assert_eq!(field, Some(&serde_json::json!([{"name": "data"}])));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub const fn gated_pointer(self) -> &'static str {
        match self {
            HealthResource::Pods => "/status/volumeHealth",
            HealthResource::PersistentVolumeClaims => "/status/healthStatus",
            HealthResource::CsiNodes => "/status/storageHealth",
        }
    }

    /// The gated field's member of `status` (`volumeHealth`, ...): the name a reader of the
    /// object looks for, with no pointer or path to take apart.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::{
    ///     PersistentVolumeClaim, PersistentVolumeClaimStatus, VolumeHealthStatus,
    /// };
    /// use volume_health_validation::HealthResource;
    ///
    /// let claim = PersistentVolumeClaim {
    ///     status: Some(PersistentVolumeClaimStatus {
    ///         health_status: Some(VolumeHealthStatus::default()),
    ///         ..Default::default()
    ///     }),
    ///     ..Default::default()
    /// };
    /// let json = serde_json::to_value(&claim)?;
    /// let member = HealthResource::PersistentVolumeClaims.gated_member();
    /// assert_eq!(member, "healthStatus");
    /// assert!(json["status"].get(member).is_some());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub const fn gated_member(self) -> &'static str {
        match self {
            HealthResource::Pods => "volumeHealth",
            HealthResource::PersistentVolumeClaims => "healthStatus",
            HealthResource::CsiNodes => "storageHealth",
        }
    }

    /// The gated field as a field path.
    ///
    /// ```
    /// use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth};
    /// use volume_health_validation::{HealthResource, validate_csinode};
    ///
    /// let node = CSINode {
    ///     status: Some(CSINodeStatus {
    ///         storage_health: Some(vec![StorageHealth::default()]),
    ///     }),
    ///     ..Default::default()
    /// };
    /// // Every field error of a CSINode's health is below this path.
    /// let errors = validate_csinode(&node, None);
    /// assert_eq!(HealthResource::CsiNodes.gated_field(), "status.storageHealth");
    /// assert!(errors[0].field.starts_with(HealthResource::CsiNodes.gated_field()));
    /// ```
    pub fn gated_field(self) -> &'static str {
        match self {
            HealthResource::Pods => "status.volumeHealth",
            HealthResource::PersistentVolumeClaims => "status.healthStatus",
            HealthResource::CsiNodes => "status.storageHealth",
        }
    }
}

impl fmt::Display for HealthResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.qualified_resource())
    }
}

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// CREATE
    Create,
    /// UPDATE
    Update,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
}

impl Operation {
    /// Parses the wire form (`CREATE`, ...).
    ///
    /// ```
    /// use volume_health_validation::Operation;
    ///
    /// assert_eq!(Operation::parse("UPDATE"), Some(Operation::Update));
    /// // The wire form is upper case, as the apiserver writes it.
    /// assert_eq!(Operation::parse("update"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }

    /// The wire form.
    ///
    /// ```
    /// use volume_health_validation::Operation;
    ///
    /// assert_eq!(Operation::Delete.as_str(), "DELETE");
    /// assert_eq!(Operation::parse(Operation::Connect.as_str()), Some(Operation::Connect));
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::HealthResource;

    /// The member, the pointer and the path name one field.
    #[test]
    fn the_gated_field_is_one_member_of_status() {
        for resource in HealthResource::ALL {
            let member = resource.gated_member();
            assert_eq!(resource.gated_pointer(), format!("/status/{member}"));
            assert_eq!(resource.gated_field(), format!("status.{member}"));
        }
    }
}
