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
    pub fn from_group_resource(group: &str, resource: &str) -> Option<Self> {
        match (group, resource) {
            ("", "pods") => Some(HealthResource::Pods),
            ("", "persistentvolumeclaims") => Some(HealthResource::PersistentVolumeClaims),
            ("storage.k8s.io", "csinodes") => Some(HealthResource::CsiNodes),
            _ => None,
        }
    }

    /// The API group (`""` for core).
    pub fn group(self) -> &'static str {
        match self {
            HealthResource::CsiNodes => "storage.k8s.io",
            _ => "",
        }
    }

    /// The plural resource name.
    pub fn resource(self) -> &'static str {
        match self {
            HealthResource::Pods => "pods",
            HealthResource::PersistentVolumeClaims => "persistentvolumeclaims",
            HealthResource::CsiNodes => "csinodes",
        }
    }

    /// The kind.
    pub fn kind(self) -> &'static str {
        match self {
            HealthResource::Pods => "Pod",
            HealthResource::PersistentVolumeClaims => "PersistentVolumeClaim",
            HealthResource::CsiNodes => "CSINode",
        }
    }

    /// The kind as `schema.GroupKind.String()` prints it: `Pod`, `CSINode.storage.k8s.io`.
    pub fn qualified_kind(self) -> &'static str {
        match self {
            HealthResource::Pods => "Pod",
            HealthResource::PersistentVolumeClaims => "PersistentVolumeClaim",
            HealthResource::CsiNodes => "CSINode.storage.k8s.io",
        }
    }

    /// The resource as `schema.GroupResource.String()` prints it: `pods`,
    /// `csinodes.storage.k8s.io`.
    pub fn qualified_resource(self) -> &'static str {
        match self {
            HealthResource::Pods => "pods",
            HealthResource::PersistentVolumeClaims => "persistentvolumeclaims",
            HealthResource::CsiNodes => "csinodes.storage.k8s.io",
        }
    }

    /// The gated field as a JSON Pointer (RFC 6901) into the object.
    pub const fn gated_pointer(self) -> &'static str {
        match self {
            HealthResource::Pods => "/status/volumeHealth",
            HealthResource::PersistentVolumeClaims => "/status/healthStatus",
            HealthResource::CsiNodes => "/status/storageHealth",
        }
    }

    /// The gated field's member of `status` (`volumeHealth`, ...): the name a reader of the
    /// object looks for, with no pointer or path to take apart.
    pub const fn gated_member(self) -> &'static str {
        match self {
            HealthResource::Pods => "volumeHealth",
            HealthResource::PersistentVolumeClaims => "healthStatus",
            HealthResource::CsiNodes => "storageHealth",
        }
    }

    /// The gated field as a field path.
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
