//! Typed k8s-openapi objects read into the views the rules read, by borrowing their strings:
//! the same values a review's JSON of them gives, without writing JSON.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, Pod, PodVolumeHealth, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::api::storage::v1::{CSINode, StorageHealth, StorageHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::objects::Slot;
use super::view::{
    ClaimStatusView, ClaimView, CsiNodeStatusView, CsiNodeView, HealthStatusView, MetaView,
    NameView, PodSpecView, PodStatusView, PodView, PodVolumeHealthView, RawList,
    StorageConditionView, StorageHealthView, Text, VolumeConditionView,
};
use crate::resource::HealthResource;

/// A typed k8s-openapi object with a volume health field, by kind.
#[derive(Clone, Copy, Debug)]
pub enum Typed<'a> {
    /// A Pod.
    Pod(&'a Pod),
    /// A PersistentVolumeClaim.
    Claim(&'a PersistentVolumeClaim),
    /// A CSINode.
    CsiNode(&'a CSINode),
}

/// A Pod, PersistentVolumeClaim or CSINode of k8s-openapi, which a request reads directly.
pub trait HealthObject {
    /// The resource of this kind.
    const RESOURCE: HealthResource;

    /// This object, by kind.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    /// use volume_health_validation::HealthResource;
    /// use volume_health_validation::admission::{HealthObject, Typed};
    ///
    /// let claim = PersistentVolumeClaim::default();
    /// assert!(matches!(claim.typed(), Typed::Claim(_)));
    /// assert_eq!(PersistentVolumeClaim::RESOURCE, HealthResource::PersistentVolumeClaims);
    /// ```
    fn typed(&self) -> Typed<'_>;
}

impl HealthObject for Pod {
    const RESOURCE: HealthResource = HealthResource::Pods;

    fn typed(&self) -> Typed<'_> {
        Typed::Pod(self)
    }
}

impl HealthObject for PersistentVolumeClaim {
    const RESOURCE: HealthResource = HealthResource::PersistentVolumeClaims;

    fn typed(&self) -> Typed<'_> {
        Typed::Claim(self)
    }
}

impl HealthObject for CSINode {
    const RESOURCE: HealthResource = HealthResource::CsiNodes;

    fn typed(&self) -> Typed<'_> {
        Typed::CsiNode(self)
    }
}

impl<'a> Typed<'a> {
    /// Its `metadata`.
    ///
    /// ```
    /// use k8s_openapi::api::storage::v1::CSINode;
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use volume_health_validation::admission::Typed;
    ///
    /// let node = CSINode {
    ///     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    ///     ..Default::default()
    /// };
    /// let typed = Typed::CsiNode(&node);
    /// // Borrowed from the object, not copied.
    /// assert!(std::ptr::eq(typed.metadata(), &node.metadata));
    /// assert_eq!(typed.metadata().name.as_deref(), Some("node-1"));
    /// ```
    pub fn metadata(self) -> &'a ObjectMeta {
        match self {
            Typed::Pod(pod) => &pod.metadata,
            Typed::Claim(claim) => &claim.metadata,
            Typed::CsiNode(node) => &node.metadata,
        }
    }

    /// Its view, as a request's object.
    pub(crate) fn slot(self) -> Slot<'a> {
        match self {
            Typed::Pod(pod) => Slot::Pod(pod_view(pod)),
            Typed::Claim(claim) => Slot::Claim(claim_view(claim)),
            Typed::CsiNode(node) => Slot::CsiNode(csinode_view(node)),
        }
    }
}

fn pod_view(pod: &Pod) -> PodView<'_> {
    let spec = pod.spec.as_ref().map(|spec| PodSpecView {
        node_name: text(spec.node_name.as_ref()),
        volumes: spec.volumes.as_ref().map(|volumes| {
            RawList::from_items(
                volumes
                    .iter()
                    .map(|v| NameView {
                        name: Some(Cow::Borrowed(&v.name)),
                    })
                    .collect(),
            )
        }),
    });
    let status = pod.status.as_ref().map(|status| PodStatusView {
        volume_health: status.volume_health.as_deref().map(typed_pod_volume_health),
    });
    PodView {
        metadata: meta(&pod.metadata),
        spec,
        status,
    }
}

fn claim_view(claim: &PersistentVolumeClaim) -> ClaimView<'_> {
    let status = claim.status.as_ref().map(|status| ClaimStatusView {
        health_status: status.health_status.as_ref().map(typed_health_status),
    });
    ClaimView {
        metadata: meta(&claim.metadata),
        status,
    }
}

fn csinode_view(node: &CSINode) -> CsiNodeView<'_> {
    let status = node.status.as_ref().map(|status| CsiNodeStatusView {
        storage_health: status.storage_health.as_deref().map(typed_storage_health),
    });
    CsiNodeView {
        metadata: meta(&node.metadata),
        status,
    }
}

/// A claim's `status.healthStatus`.
pub(crate) fn typed_health_status(status: &VolumeHealthStatus) -> HealthStatusView<'_> {
    HealthStatusView {
        health_conditions: status.health_conditions.as_deref().map(volume_conditions),
        last_transition_time: time(status.last_transition_time.as_ref()),
    }
}

/// A pod's `status.volumeHealth`.
pub(crate) fn typed_pod_volume_health(
    entries: &[PodVolumeHealth],
) -> RawList<'_, PodVolumeHealthView<'_>> {
    RawList::from_items(
        entries
            .iter()
            .map(|entry| PodVolumeHealthView {
                name: Cow::Borrowed(&entry.name),
                health_conditions: entry.health_conditions.as_deref().map(volume_conditions),
                last_transition_time: time(entry.last_transition_time.as_ref()),
            })
            .collect(),
    )
}

/// A CSINode's `status.storageHealth`.
pub(crate) fn typed_storage_health(
    entries: &[StorageHealth],
) -> RawList<'_, StorageHealthView<'_>> {
    RawList::from_items(
        entries
            .iter()
            .map(|entry| StorageHealthView {
                name: Cow::Borrowed(&entry.name),
                health_conditions: entry.health_conditions.as_deref().map(storage_conditions),
            })
            .collect(),
    )
}

fn volume_conditions(conditions: &[VolumeHealthCondition]) -> RawList<'_, VolumeConditionView<'_>> {
    RawList::from_items(conditions.iter().map(volume_condition_view).collect())
}

/// One volume condition as the rules read it.
pub(crate) fn volume_condition_view(c: &VolumeHealthCondition) -> VolumeConditionView<'_> {
    VolumeConditionView {
        status: Cow::Borrowed(&c.status),
        reason: Cow::Borrowed(&c.reason),
        message: text(c.message.as_ref()),
    }
}

fn storage_conditions(
    conditions: &[StorageHealthCondition],
) -> RawList<'_, StorageConditionView<'_>> {
    RawList::from_items(conditions.iter().map(storage_condition_view).collect())
}

/// One storage condition as the rules read it.
pub(crate) fn storage_condition_view(c: &StorageHealthCondition) -> StorageConditionView<'_> {
    StorageConditionView {
        status: Cow::Borrowed(&c.status),
        reason: Cow::Borrowed(&c.reason),
        message: text(c.message.as_ref()),
        access_mode: text(c.access_mode.as_ref()),
        volume_mode: text(c.volume_mode.as_ref()),
        last_transition_time: time(c.last_transition_time.as_ref()),
    }
}

fn meta(metadata: &ObjectMeta) -> MetaView<'_> {
    MetaView {
        name: text(metadata.name.as_ref()),
    }
}

fn text(value: Option<&String>) -> Option<Text<'_>> {
    value.map(|v| Cow::Borrowed(v.as_str()))
}

/// A timestamp at the second before it, as `metav1.Time` is written (RFC 3339, no fraction):
/// an object compares with its stored form as the apiserver compares them.
fn time(time: Option<&Time>) -> Option<Time> {
    time.map(|Time(at)| {
        let whole = at.as_second() - i64::from(at.subsec_nanosecond() < 0);
        Time(Timestamp::from_second(whole).unwrap_or(*at))
    })
}
