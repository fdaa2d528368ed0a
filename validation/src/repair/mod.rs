//! Repair: the nearest report that validation accepts, for writers before they write and for
//! a mutating webhook before the apiserver validates.
//!
//! A writer that sends a report the apiserver refuses retries it forever, and a kubelet's pod
//! status write also carries the container states, so one duplicate condition can hold a pod in
//! `Terminating`. [`repair_pvc`], [`repair_pod`] and [`repair_csinode`] change the new object in
//! place until [`validate_pvc`](crate::validate_pvc), [`validate_pod`](crate::validate_pod) and
//! [`validate_csinode`](crate::validate_csinode) accept it against the same old object, and
//! return each change as a [`Repair`]: the input's path of what was changed, and why. A webhook
//! repairs the request it holds with
//! [`AdmissionRequest::repair`](crate::AdmissionRequest::repair), the same decisions.
//!
//! What a repair does, in this order:
//!
//! - Pod `status.volumeHealth`: an entry naming no volume of `spec.volumes` is dropped, and an
//!   entry without a name; a later entry with the name of an earlier one is merged into it.
//! - CSINode `status.storageHealth`: an entry whose name is not a CSI driver name is dropped
//!   (a name is the entry's key: another name would be another driver's report); a later entry
//!   with the driver name of an earlier one is merged into it.
//! - The conditions of one claim, one pod entry or one driver (merged entries' together, in
//!   order): a condition whose status is outside its set is dropped; a reason that can never be
//!   valid is replaced by [`REPLACED_REASON`], and an access or volume mode outside its set is
//!   unset, each original kept in the message; a later condition with the identity of an
//!   earlier one ((status, reason); for storage, with [`ConditionIdentity::Unique`], (status,
//!   reason, accessMode, volumeMode)) is dropped; of what is left, the
//!   [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS) most severe are kept, the
//!   earlier of equally severe ones (`DataLoss` over `Inaccessible` over `Degraded`;
//!   `StorageUnreachable` over `StorageDegraded`); last, a message longer than 1024 bytes is cut
//!   at a UTF-8 character boundary. So a repair never turns an unhealthy report into a healthy
//!   one: every status the driver gave that can be stored is still there.
//!
//! With an old object the repair ratchets as the rules do (section 2.6 of the specification):
//! what the apiserver accepts because it is stored as it is (an unchanged list, a condition
//! whose (status, reason) is stored, an unchanged message, a stored entry without a name) is
//! kept, and what it checks on every write (a volume that does not exist, a reason's format,
//! every CSINode rule) is repaired. So a write the library accepts with its old object is never
//! changed, and repairing a repaired write changes nothing. Without an old object (a create, or
//! a writer that does not hold the stored object) every rule applies: the result is accepted
//! whatever is stored.
//!
//! Every list is read a bounded number of times and at most
//! [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS) conditions of each are held,
//! so time is linear in the report and memory bounded by what is kept.
//!
//! For writers, [`unchanged`] tells whether a report changes what is stored, as the kubelet
//! ([`Policy::IgnoreMessages`]) or external-health-monitor ([`Policy::CompareMessages`]) decides
//! it, and [`carry_transition_times`] keeps the stored `lastTransitionTime` of what did not
//! change.

mod kind;
pub(crate) mod plan;
mod report;
mod select;
#[cfg(test)]
mod tests;

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodVolumeHealth, VolumeHealthStatus};
use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};
use serde::de::DeserializeOwned;

pub use kind::{Impossible, LABELS, REPLACED_REASON, Repair, RepairKind};
pub use report::{Policy, Report, carry_transition_times, unchanged};

use crate::decode::{typed_health_status, typed_pod_volume_health, typed_storage_health};
use crate::rules::ConditionIdentity;

/// Repairs a claim's `status.healthStatus` until [`validate_pvc`](crate::validate_pvc) accepts
/// it against `old`; `old` is the stored claim on update (`None`: every rule applies).
///
/// A condition whose status is outside its set is dropped. A reason that can never be valid
/// becomes [`REPLACED_REASON`], and the original moves into the message. A later condition with
/// an earlier one's (status, reason) is dropped. Of the rest, the
/// [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS) most severe are kept, and a
/// message over 1024 bytes is cut. What `old` stores is kept where the rules ratchet, so a claim
/// they accept is left as it is.
///
/// ```
/// use k8s_openapi::api::core::v1::{
///     PersistentVolumeClaim, PersistentVolumeClaimStatus, VolumeHealthCondition,
///     VolumeHealthStatus,
/// };
/// use volume_health_validation::repair::{REPLACED_REASON, repair_pvc};
/// use volume_health_validation::validate_pvc;
///
/// let condition = |status: &str, reason: &str| VolumeHealthCondition {
///     status: status.into(),
///     reason: reason.into(),
///     message: None,
/// };
/// let mut claim = PersistentVolumeClaim {
///     status: Some(PersistentVolumeClaimStatus {
///         health_status: Some(VolumeHealthStatus {
///             health_conditions: Some(vec![
///                 // No status says how unhealthy this is: dropped.
///                 condition("Healthy", "Probed"),
///                 // A hyphen is outside the reason format: the reason is replaced.
///                 condition("Degraded", "disk-slow"),
///             ]),
///             ..Default::default()
///         }),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// let repairs = repair_pvc(&mut claim, None);
/// assert_eq!(repairs.len(), 2, "{repairs:?}");
/// assert!(validate_pvc(&claim, None).is_empty());
/// let health = claim.status.and_then(|s| s.health_status).unwrap_or_default();
/// let kept = health.health_conditions.unwrap_or_default();
/// assert_eq!(kept.len(), 1);
/// assert_eq!(kept[0].reason, REPLACED_REASON);
/// assert_eq!(kept[0].message.as_deref(), Some("reason: disk-slow"));
/// ```
pub fn repair_pvc(
    claim: &mut PersistentVolumeClaim,
    old: Option<&PersistentVolumeClaim>,
) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.health_status.as_ref());
    match claim.status.as_mut().and_then(|s| s.health_status.as_mut()) {
        Some(health) => repair_volume_health_status(health, old),
        None => Vec::new(),
    }
}

/// Repairs a `VolumeHealthStatus` found at `status.healthStatus` (a claim's), `old` the stored
/// one: what a health monitor holds before it writes. Each repair is returned (its path and
/// kind); a report the rules accept is left as it is. The rules are [`repair_pvc`]'s: impossible
/// conditions dropped or their reason replaced, repeats dropped, the most severe kept, long
/// messages cut.
///
/// ```
/// use k8s_openapi::api::core::v1::VolumeHealthStatus;
/// use volume_health_validation::repair::repair_volume_health_status;
/// use volume_health_validation::rules::validate_volume_health_status;
///
/// // kubernetes#142280's driver: one (status, reason) twice, with different messages.
/// let mut report: VolumeHealthStatus = serde_json::from_value(serde_json::json!({
///     "healthConditions": [
///         {"status": "Degraded", "reason": "missing_controller", "message": "controller 1 missing"},
///         {"status": "Degraded", "reason": "missing_controller", "message": "controller 2 missing"},
///     ]
/// }))?;
/// let repairs = repair_volume_health_status(&mut report, None);
/// assert_eq!(
///     repairs[0].to_string(),
///     "status.healthStatus.healthConditions[1]: condition dropped: an earlier condition has its status and reason"
/// );
/// // The first is kept, and the rules accept the result.
/// let kept = report.health_conditions.as_deref().unwrap_or_default();
/// assert_eq!(kept.len(), 1);
/// assert_eq!(kept[0].message.as_deref(), Some("controller 1 missing"));
/// assert!(validate_volume_health_status(Some(&report), None).is_empty());
/// // A valid report is never changed.
/// assert!(repair_volume_health_status(&mut report, None).is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn repair_volume_health_status(
    new: &mut VolumeHealthStatus,
    old: Option<&VolumeHealthStatus>,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let repaired = {
        let view = typed_health_status(new);
        let old = old.map(typed_health_status);
        plan::claim(&view, old.as_ref(), usize::MAX, &mut |r| repairs.push(r))
    };
    // Nothing is too large without a limit.
    if let Ok(Some(json)) = repaired {
        new.health_conditions = Some(typed(&json));
    }
    repairs
}

/// Repairs a pod's `status.volumeHealth` until [`validate_pod`](crate::validate_pod) accepts it
/// against `old`; volume names are looked up in the pod's own `spec.volumes`.
///
/// An entry without a name, or naming no volume of `spec.volumes`, is dropped. A later entry
/// with an earlier entry's name is merged into it. Each entry's conditions are then repaired as
/// a claim's are ([`repair_pvc`]). A pod the rules accept against `old` is left as it is.
///
/// ```
/// use k8s_openapi::api::core::v1::{
///     Pod, PodSpec, PodStatus, PodVolumeHealth, Volume, VolumeHealthCondition,
/// };
/// use volume_health_validation::repair::{RepairKind, repair_pod};
/// use volume_health_validation::validate_pod;
///
/// let entry = |name: &str, reason: &str| PodVolumeHealth {
///     name: name.into(),
///     health_conditions: Some(vec![VolumeHealthCondition {
///         status: "Degraded".into(),
///         reason: reason.into(),
///         message: None,
///     }]),
///     ..Default::default()
/// };
/// let mut pod = Pod {
///     spec: Some(PodSpec {
///         volumes: Some(vec![Volume { name: "data".into(), ..Default::default() }]),
///         ..Default::default()
///     }),
///     status: Some(PodStatus {
///         volume_health: Some(vec![entry("data", "ReplicaOutOfSync"), entry("logs", "Slow")]),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// // `logs` is no volume of this pod: its entry goes.
/// let repairs = repair_pod(&mut pod, None);
/// assert_eq!(repairs[0].path, "status.volumeHealth[1]");
/// assert_eq!(repairs[0].kind, RepairKind::UnknownVolume);
/// assert!(validate_pod(&pod, None).is_empty());
/// // A repaired pod needs no more.
/// assert!(repair_pod(&mut pod, None).is_empty());
/// ```
pub fn repair_pod(pod: &mut Pod, old: Option<&Pod>) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.volume_health.as_deref());
    let volumes: HashSet<String> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .map(|volume| volume.name.clone())
        .collect();
    match pod.status.as_mut().and_then(|s| s.volume_health.as_mut()) {
        Some(entries) => repair_pod_volume_health(entries, old, |name| volumes.contains(name)),
        None => Vec::new(),
    }
}

/// Repairs a `status.volumeHealth` list, `old` the stored one; `volume_exists` tells whether a
/// name is an entry of the pod's `spec.volumes`. The rules are [`repair_pod`]'s, with
/// `volume_exists` in place of the pod's own list.
///
/// ```
/// use k8s_openapi::api::core::v1::PodVolumeHealth;
/// use volume_health_validation::repair::repair_pod_volume_health;
///
/// let mut entries: Vec<PodVolumeHealth> = serde_json::from_value(serde_json::json!([
///     {"name": "data", "healthConditions": [{"status": "DataLoss", "reason": "SplitBrain"}]},
///     {"name": "gone", "healthConditions": [{"status": "Degraded", "reason": "ReplicaOutOfSync"}]},
///     {"name": "data", "healthConditions": [{"status": "Inaccessible", "reason": "NoQuorum"}]},
/// ]))?;
/// let repairs = repair_pod_volume_health(&mut entries, None, |name| name == "data");
/// assert_eq!(repairs.len(), 2, "{repairs:?}");
/// // The entry of a volume the pod does not have is dropped; the second `data` entry is
/// // merged into the first, its condition kept.
/// assert_eq!(entries.len(), 1);
/// let conditions = entries[0].health_conditions.as_deref().unwrap_or_default();
/// let kept: Vec<&str> = conditions.iter().map(|c| c.reason.as_str()).collect();
/// assert_eq!(kept, ["SplitBrain", "NoQuorum"]);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn repair_pod_volume_health(
    new: &mut Vec<PodVolumeHealth>,
    old: Option<&[PodVolumeHealth]>,
    volume_exists: impl Fn(&str) -> bool,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let repaired = {
        let view = typed_pod_volume_health(new);
        let old = old.map(typed_pod_volume_health);
        let volumes = plan::Volumes::Lookup(&volume_exists);
        plan::pod(&view, old.as_ref(), volumes, usize::MAX, &mut |r| {
            repairs.push(r)
        })
    };
    // Nothing is too large without a limit.
    if let Ok(Some(json)) = repaired {
        *new = typed(&json);
    }
    repairs
}

/// Repairs a CSINode's `status.storageHealth` until [`validate_csinode`](crate::validate_csinode)
/// accepts it against `old`, this project's [`ConditionIdentity::Unique`] included.
///
/// An entry whose name is not a CSI driver name is dropped. A later entry of an earlier entry's
/// driver is merged into it. A condition whose status is outside its set is dropped. An
/// impossible reason becomes [`REPLACED_REASON`], an access or volume mode outside its set is
/// unset, and each original moves into the message. A later condition with an earlier one's
/// (status, reason, accessMode, volumeMode) is dropped, unless `old` stores that entry's
/// conditions as they are (the rule ratchets per entry).
/// The most severe [`MAX_HEALTH_CONDITIONS`](crate::rules::MAX_HEALTH_CONDITIONS) are kept, and
/// a message over 1024 bytes is cut.
///
/// ```
/// use k8s_openapi::api::storage::v1::{
///     CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition,
/// };
/// use volume_health_validation::repair::{RepairKind, repair_csinode};
/// use volume_health_validation::validate_csinode;
///
/// let unreachable = StorageHealthCondition {
///     status: "StorageUnreachable".into(),
///     reason: "BackendDown".into(),
///     ..Default::default()
/// };
/// let entry = |name: &str| StorageHealth {
///     name: name.into(),
///     health_conditions: Some(vec![unreachable.clone(), unreachable.clone()]),
/// };
/// let mut node = CSINode {
///     status: Some(CSINodeStatus {
///         storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
///     }),
///     ..Default::default()
/// };
/// let repairs = repair_csinode(&mut node, None);
/// let kinds: Vec<RepairKind> = repairs.iter().map(|r| r.kind).collect();
/// // A name with capitals is no driver's; one condition of the driver is enough.
/// assert_eq!(kinds, [RepairKind::InvalidDriverName, RepairKind::IndistinctCondition]);
/// assert!(validate_csinode(&node, None).is_empty());
/// ```
pub fn repair_csinode(node: &mut CSINode, old: Option<&CSINode>) -> Vec<Repair> {
    let old = old
        .and_then(|old| old.status.as_ref())
        .and_then(|status| status.storage_health.as_deref());
    match node.status.as_mut().and_then(|s| s.storage_health.as_mut()) {
        Some(entries) => repair_storage_health(entries, old, ConditionIdentity::Unique),
        None => Vec::new(),
    }
}

/// Repairs a `status.storageHealth` list, `old` the stored one, with or without this project's
/// rule on conditions' identities. Only that rule ratchets (per entry, as it is checked); every
/// upstream CSINode rule applies to every write. The rules are [`repair_csinode`]'s; with
/// [`ConditionIdentity::InTree`], conditions that share an identity are all kept.
///
/// ```
/// use k8s_openapi::api::storage::v1::StorageHealth;
/// use volume_health_validation::repair::repair_storage_health;
/// use volume_health_validation::rules::ConditionIdentity;
///
/// // Two conditions nothing tells apart (the same status, reason and modes): in-tree stores
/// // them, this project's rule keeps the first.
/// let report = || -> Result<Vec<StorageHealth>, serde_json::Error> {
///     serde_json::from_value(serde_json::json!([{"name": "csi.example.com", "healthConditions": [
///         {"status": "StorageDegraded", "reason": "PoolFull", "message": "pool a"},
///         {"status": "StorageDegraded", "reason": "PoolFull", "message": "pool b"},
///     ]}]))
/// };
/// let mut unique = report()?;
/// assert_eq!(repair_storage_health(&mut unique, None, ConditionIdentity::Unique).len(), 1);
/// assert_eq!(unique[0].health_conditions.as_ref().map(Vec::len), Some(1));
/// let mut in_tree = report()?;
/// assert!(repair_storage_health(&mut in_tree, None, ConditionIdentity::InTree).is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn repair_storage_health(
    new: &mut Vec<StorageHealth>,
    old: Option<&[StorageHealth]>,
    identity: ConditionIdentity,
) -> Vec<Repair> {
    let mut repairs = Vec::new();
    let repaired = {
        let view = typed_storage_health(new);
        let old = old.map(typed_storage_health);
        plan::csinode(&view, old.as_ref(), identity, usize::MAX, &mut |r| {
            repairs.push(r)
        })
    };
    // Nothing is too large without a limit.
    if let Ok(Some(json)) = repaired {
        *new = typed(&json);
    }
    repairs
}

/// The repaired list written by [`plan`], read back as k8s-openapi's type: it was written from
/// that type's members, so it reads.
fn typed<T: DeserializeOwned>(json: &str) -> T {
    serde_json::from_str(json).expect("a repaired list reads as its type")
}
