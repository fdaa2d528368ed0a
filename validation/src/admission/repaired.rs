//! Repair of a status write: the decision on the request, and what it carries to the answer
//! (one JSON Patch `replace` of the repaired list, warnings, an audit annotation, counts).

use serde::Serialize;
use serde_json::value::RawValue;

use super::{AdmissionRequest, DecodeError, Settings, Verdict};
use crate::repair::{Repair, plan};
use crate::resource::HealthResource;
use crate::rules::names::is_csi_driver_name;

/// The most paths one kind of repair names in its warning; the rest are counted.
pub const PATHS_PER_WARNING: usize = 5;

/// The most a repair holds and writes, in bytes: etcd's default request limit (1.5 MiB), which
/// no stored object exceeds. A repair that needs more is of a writer gone wrong (tens of
/// thousands of entries, or lists longer than an object can be); making it would cost the
/// webhook several times its size for an answer the apiserver could not store.
pub const MAX_REPAIRED_BYTES: usize = 3 * 512 * 1024;

/// Why a write validation refuses is not repaired. It is then answered as without repair.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// An object is not its kind (validation answers that).
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The repair would hold or write more than [`MAX_REPAIRED_BYTES`].
    #[error("repairing {field} would take more than {MAX_REPAIRED_BYTES} bytes")]
    TooLarge {
        /// The gated field.
        field: &'static str,
    },
}

/// One kind of repair in a [`Repaired`]: its label, what it did, how many, and the first
/// paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairCount {
    /// The kind's label in metrics and annotations ([`RepairKind::label`](crate::repair::RepairKind::label)).
    pub label: &'static str,
    /// What each did, in words.
    pub summary: String,
    /// How many.
    pub count: usize,
    /// The first [`PATHS_PER_WARNING`] paths, in the order made.
    pub paths: Vec<String>,
}

/// A status write repaired: the patch that makes the object as written the repaired one, and
/// what it did. [`AdmissionRequest::repair`] makes it; a webhook sends
/// [`patch`](Self::patch) with [`warnings`](Self::warnings) and
/// [`audit_annotation`](Self::audit_annotation), and a program that wants the object the
/// apiserver would store applies the same patch.
#[derive(Debug)]
pub struct Repaired {
    resource: HealthResource,
    pointer: &'static str,
    value: Box<RawValue>,
    counts: Vec<RepairCount>,
    entries: Vec<String>,
}

/// How many repaired entries a [`Repaired`] names: enough to find the writer's driver, bounded
/// whatever the input.
pub const NAMED_ENTRIES: usize = 5;

/// A JSON Patch `replace` operation: `{"op":"replace","path":...,"value":...}`.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(tag = "op", rename = "replace")]
pub struct Replace<'a> {
    /// The JSON Pointer of the member replaced.
    pub path: &'static str,
    /// Its new value.
    pub value: &'a RawValue,
}

impl Repaired {
    /// The resource repaired.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// assert_eq!(repaired.resource(), volume_health_validation::HealthResource::CsiNodes);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resource(&self) -> HealthResource {
        self.resource
    }

    /// The JSON Patch: one `replace` of the repaired list. The apiserver applies it in time
    /// linear in the object, where one `remove` per item dropped costs a copy of the list each.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// let patch = serde_json::to_value(repaired.patch())?;
    /// assert_eq!(patch[0]["op"], "replace");
    /// assert_eq!(patch[0]["path"], "/status/storageHealth");
    /// // The driver's entry, with one condition left.
    /// let value = &patch[0]["value"];
    /// assert_eq!(value[0]["name"], "csi.example.com");
    /// assert_eq!(value[0]["healthConditions"].as_array().map(Vec::len), Some(1));
    /// // The webhook sends it as the answer's patch.
    /// assert_eq!(request.allow_patching(&repaired.patch()).patch_type, Some("JSONPatch"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn patch(&self) -> [Replace<'_>; 1] {
        [Replace {
            path: self.pointer,
            value: &self.value,
        }]
    }

    /// Each kind of repair made, in the order first made.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// let counts: Vec<(&str, usize)> =
    ///     repaired.counts().iter().map(|c| (c.label, c.count)).collect();
    /// assert_eq!(counts, [("invalid_driver_name", 1), ("indistinct_condition", 1)]);
    /// assert_eq!(repaired.counts()[0].paths, ["status.storageHealth[0]"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn counts(&self) -> &[RepairCount] {
        &self.counts
    }

    /// The names of the first entries repaired (at most [`NAMED_ENTRIES`], in the order of
    /// their first repair): a CSINode's drivers, a pod's volumes; none for a claim. A repaired
    /// report is a driver to fix, and these name it.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// assert_eq!(repaired.entries(), ["Not_A_Driver", "csi.example.com"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The CSI drivers whose reports were repaired, as far as the object names them: a
    /// CSINode's entries are its drivers (an entry whose name is not a driver name is left out,
    /// so each is safe to use as a metric label). A pod's entry is a volume and a claim has no
    /// entries; their driver is the PersistentVolume's, which only the API knows.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// // `Not_A_Driver` is no driver's name: it is no metric label either.
    /// assert_eq!(repaired.drivers().collect::<Vec<_>>(), ["csi.example.com"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drivers(&self) -> impl Iterator<Item = &str> {
        let named = matches!(self.resource, HealthResource::CsiNodes);
        self.entries
            .iter()
            .map(String::as_str)
            .filter(move |name| named && is_csi_driver_name(name))
    }

    /// How many repairs in all.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// assert_eq!(repaired.total(), 2);
    /// assert_eq!(repaired.total(), repaired.counts().iter().map(|c| c.count).sum::<usize>());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn total(&self) -> usize {
        self.counts.iter().map(|c| c.count).sum()
    }

    /// One `Warning` per kind: what was repaired, how often, and the first paths.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// let warnings = repaired.warnings();
    /// assert_eq!(warnings.len(), repaired.counts().len());
    /// assert_eq!(
    ///     warnings[0],
    ///     "status.storageHealth repaired (1): entry dropped: its name is not a CSI driver name: status.storageHealth[0]"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warnings(&self) -> Vec<String> {
        let field = self.resource.gated_field();
        self.counts
            .iter()
            .map(|c| {
                let more = c.count.saturating_sub(c.paths.len());
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!(
                    "{field} repaired ({}): {}: {}{more}",
                    c.count,
                    c.summary,
                    c.paths.join(", ")
                )
            })
            .collect()
    }

    /// The audit annotation: `repairs`, with `label=count` of each kind.
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// let (key, value) = repaired.audit_annotation();
    /// assert_eq!(key, "repairs");
    /// assert_eq!(value, "invalid_driver_name=1,indistinct_condition=1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn audit_annotation(&self) -> (&'static str, String) {
        let value: Vec<String> = self
            .counts
            .iter()
            .map(|c| format!("{}={}", c.label, c.count))
            .collect();
        ("repairs", value.join(","))
    }

    fn add(counts: &mut Vec<RepairCount>, repair: &Repair) {
        let label = repair.kind.label();
        let index = match counts.iter().position(|c| c.label == label) {
            Some(i) => i,
            None => {
                counts.push(RepairCount {
                    label,
                    summary: repair.kind.summary(),
                    count: 0,
                    paths: Vec::new(),
                });
                counts.len() - 1
            }
        };
        let kind = &mut counts[index];
        kind.count += 1;
        if kind.paths.len() < PATHS_PER_WARNING {
            kind.paths.push(repair.path.clone());
        }
    }
}

impl<'a> AdmissionRequest<'a> {
    /// Repair (`--repair`): for a `status` write that [`validate`](Self::validate) refuses with
    /// field errors, the patch that makes it one the rules accept, or `None` when the write is
    /// valid, refused by the node rules, of the main resource, or nothing can be repaired. It
    /// reads the objects the request holds: no second parse.
    ///
    /// The repairs are those of [`repair_pvc`](crate::repair::repair_pvc),
    /// [`repair_pod`](crate::repair::repair_pod) and
    /// [`repair_csinode`](crate::repair::repair_csinode), with the settings' condition identity.
    /// A node's CSINode write is repaired to this project's condition rule, which validation
    /// does not enforce on it.
    ///
    /// ```
    /// use k8s_openapi::api::storage::v1::{
    ///     CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition,
    /// };
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    ///
    /// let degraded = StorageHealthCondition {
    ///     status: "StorageDegraded".into(),
    ///     reason: "PoolFull".into(),
    ///     ..Default::default()
    /// };
    /// let entry = |name: &str| StorageHealth {
    ///     name: name.into(),
    ///     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// };
    /// let old = CSINode {
    ///     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    ///     ..Default::default()
    /// };
    /// let mut new = old.clone();
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// new.status = Some(CSINodeStatus {
    ///     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// });
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// // Validation refuses the name.
    /// assert_eq!(request.validate(&settings)?.code(), Some(422));
    /// let repaired = request.repair(&settings)?.expect("a repair");
    /// assert_eq!(repaired.total(), 2);
    /// // A valid write is left as it is.
    /// let valid = AdmissionRequest::write(Operation::Update, Some(&old), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// assert!(valid.repair(&settings)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn repair(&self, settings: &Settings) -> Result<Option<Repaired>, RepairError> {
        self.repair_reporting(settings, &mut |_| {})
    }

    /// [`repair`](Self::repair), with every repair also given to `each` as it is made (a
    /// [`Repaired`] keeps counts and the first paths).
    ///
    /// ```
    /// # use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition};
    /// # use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    /// # use volume_health_validation::{AdmissionRequest, Operation, Settings, UserInfo};
    /// #
    /// # let degraded = StorageHealthCondition {
    /// #     status: "StorageDegraded".into(),
    /// #     reason: "PoolFull".into(),
    /// #     ..Default::default()
    /// # };
    /// # let entry = |name: &str| StorageHealth {
    /// #     name: name.into(),
    /// #     health_conditions: Some(vec![degraded.clone(), degraded.clone()]),
    /// # };
    /// # let old = CSINode {
    /// #     metadata: ObjectMeta { name: Some("node-1".into()), ..Default::default() },
    /// #     ..Default::default()
    /// # };
    /// # let mut new = old.clone();
    /// # new.status = Some(CSINodeStatus {
    /// #     storage_health: Some(vec![entry("Not_A_Driver"), entry("csi.example.com")]),
    /// # });
    /// // node-1's kubelet reports a name that is no driver's, and one condition twice.
    /// let request = AdmissionRequest::write(Operation::Update, Some(&new), Some(&old))
    ///     .with_subresource("status")
    ///     .with_user(UserInfo::node("node-1"));
    /// let settings = Settings::with_gate(true);
    /// let mut lines = Vec::new();
    /// let repaired = request.repair_reporting(&settings, &mut |repair| {
    ///     lines.push(repair.to_string());
    /// })?;
    /// assert_eq!(repaired.map(|r| r.total()), Some(2));
    /// assert_eq!(lines, [
    ///     "status.storageHealth[0]: entry dropped: its name is not a CSI driver name",
    ///     "status.storageHealth[1].healthConditions[1]: condition dropped: an earlier condition has its status, reason, accessMode and volumeMode",
    /// ]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn repair_reporting(
        &self,
        settings: &Settings,
        each: &mut dyn FnMut(&Repair),
    ) -> Result<Option<Repaired>, RepairError> {
        let Some(resource) = self.health_resource() else {
            return Ok(None);
        };
        // The apiserver keeps the stored status on a write of the main resource. A node's write
        // is checked with this project's storage condition rule too: repair enforces it there,
        // where validation does not refuse it.
        if self.subresource() != "status" {
            return Ok(None);
        }
        let identity = settings.storage_condition_identity;
        if !matches!(
            self.validate_health(resource, settings, identity)?,
            Verdict::Invalid(_)
        ) {
            return Ok(None);
        }
        let mut counts = Vec::new();
        let mut entries: Vec<usize> = Vec::new();
        let mut sink = |repair: Repair| {
            Repaired::add(&mut counts, &repair);
            if let Some(entry) = repair.entry
                && entries.len() < NAMED_ENTRIES
                && !entries.contains(&entry)
            {
                entries.push(entry);
            }
            each(&repair);
        };
        let too_large = |_| RepairError::TooLarge {
            field: resource.gated_field(),
        };
        let (value, entries) = match resource {
            HealthResource::PersistentVolumeClaims => {
                let new = self.object.as_claim()?;
                let old = self.old_object.as_claim()?;
                let Some(new) = new.and_then(|c| c.health_status()) else {
                    return Ok(None);
                };
                let old = old.and_then(|c| c.health_status());
                (
                    plan::claim(new, old, MAX_REPAIRED_BYTES, &mut sink),
                    Vec::new(),
                )
            }
            HealthResource::Pods => {
                let new = self.object.as_pod()?;
                let old = self.old_object.as_pod()?;
                let Some(pod) = new else { return Ok(None) };
                let Some(list) = pod.volume_health() else {
                    return Ok(None);
                };
                let value = plan::pod(
                    list,
                    old.and_then(|p| p.volume_health()),
                    plan::Volumes::Listed(pod.volumes()),
                    MAX_REPAIRED_BYTES,
                    &mut sink,
                );
                (value, plan::entry_names(list, &entries))
            }
            HealthResource::CsiNodes => {
                let new = self.object.as_csinode()?;
                let old = self.old_object.as_csinode()?;
                let Some(list) = new.and_then(|n| n.storage_health()) else {
                    return Ok(None);
                };
                let value = plan::csinode(
                    list,
                    old.and_then(|n| n.storage_health()),
                    settings.storage_condition_identity,
                    MAX_REPAIRED_BYTES,
                    &mut sink,
                );
                (value, plan::entry_names(list, &entries))
            }
        };
        let Some(value) = value.map_err(too_large)? else {
            return Ok(None);
        };
        let value = RawValue::from_string(value).expect("repair writes JSON");
        Ok(Some(Repaired {
            resource,
            pointer: repaired_pointer(resource),
            value,
            counts,
            entries,
        }))
    }
}

/// Where the repaired list goes: a claim's conditions, a pod's or a CSINode's entries.
fn repaired_pointer(resource: HealthResource) -> &'static str {
    match resource {
        HealthResource::PersistentVolumeClaims => "/status/healthStatus/healthConditions",
        HealthResource::Pods => "/status/volumeHealth",
        HealthResource::CsiNodes => "/status/storageHealth",
    }
}

#[cfg(test)]
mod tests {
    use crate::{AdmissionReview, Settings, Verdict};

    /// A write of node1's CSINode with two conditions of one driver that nothing tells apart.
    fn indistinct_write(user: &str, groups: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{
              "uid": "u", "operation": "UPDATE", "subResource": "status", "name": "node1",
              "resource": {{"group": "storage.k8s.io", "version": "v1", "resource": "csinodes"}},
              "userInfo": {{"username": "{user}", "groups": {groups}}},
              "object": {{"metadata": {{"name": "node1"}}, "status": {{"storageHealth": [
                {{"name": "csi.example.com", "healthConditions": [
                  {{"status": "StorageDegraded", "reason": "PoolFull", "message": "one"}},
                  {{"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}}]}}]}}}},
              "oldObject": {{"metadata": {{"name": "node1"}}}}}}}}"#
        )
    }

    /// The project's storage condition rule never refuses the kubelet's own write (it would
    /// retry it every probe tick): validation accepts it as in-tree does, and repair enforces
    /// the rule on it. Any other writer gets the 422.
    #[test]
    fn the_identity_rule_is_repaired_on_a_kubelets_write_and_refused_on_others() {
        let settings = Settings::with_gate(true);
        let kubelet = indistinct_write("system:node:node1", r#"["system:nodes"]"#);
        let request = AdmissionReview::parse(&kubelet).unwrap().request;
        assert!(matches!(request.validate(&settings), Ok(Verdict::Allowed)));
        let repaired = request.repair(&settings).unwrap().expect("repaired");
        assert_eq!(
            repaired.audit_annotation().1,
            "indistinct_condition=1",
            "{:?}",
            repaired.counts()
        );

        let admin = indistinct_write("system:admin", r#"["system:masters"]"#);
        let request = AdmissionReview::parse(&admin).unwrap().request;
        assert!(matches!(
            request.validate(&settings),
            Ok(Verdict::Invalid(_))
        ));
        assert!(request.repair(&settings).unwrap().is_some());

        // Without the rule, neither is refused nor repaired.
        let in_tree = Settings {
            storage_condition_identity: crate::rules::ConditionIdentity::InTree,
            ..Settings::with_gate(true)
        };
        let request = AdmissionReview::parse(&kubelet).unwrap().request;
        assert!(matches!(request.validate(&in_tree), Ok(Verdict::Allowed)));
        assert!(request.repair(&in_tree).unwrap().is_none());
    }

    /// A review of node1's kubelet writing `resource`'s status (its own CSINode, a pod, a claim)
    /// with `status` as the new object's, `extra` beside it.
    fn status_write(resource: &str, group: &str, status: &str, extra: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{
              "uid": "u", "operation": "UPDATE", "subResource": "status", "name": "node1",
              "namespace": "ns",
              "resource": {{"group": "{group}", "version": "v1", "resource": "{resource}"}},
              "userInfo": {{"username": "system:node:node1", "groups": ["system:nodes"]}},
              "object": {{"metadata": {{"name": "node1"}}{extra}, "status": {status}}},
              "oldObject": {{"metadata": {{"name": "node1"}}{extra}}}}}}}"#
        )
    }

    /// What each repaired write names: the entries with a repair, in the order of their first
    /// repair, each once, at most `NAMED_ENTRIES`; none for a claim. The drivers are a
    /// CSINode's entries that are driver names, and none of a pod's or a claim's.
    #[test]
    fn a_repair_names_the_entries_it_repaired() {
        let duplicate = r#"[{"status": "Degraded", "reason": "Slow"}, {"status": "Degraded", "reason": "Slow"}]"#;
        let fine = r#"[{"status": "Degraded", "reason": "Slow"}]"#;
        let storage = |name: &str, conditions: &str| {
            let conditions = conditions.replace("Degraded", "StorageDegraded");
            format!(r#"{{"name": "{name}", "healthConditions": {conditions}}}"#)
        };
        let volume = |name: &str, conditions: &str| {
            format!(r#"{{"name": "{name}", "healthConditions": {conditions}}}"#)
        };
        let volumes: String = (0..8)
            .map(|i| format!(r#"{{"name": "v{i}"}}"#))
            .collect::<Vec<_>>()
            .join(",");
        let pod_spec = format!(r#", "spec": {{"nodeName": "node1", "volumes": [{volumes}]}}"#);
        let many_names: Vec<String> = (0..8).map(|i| format!("d{i}.example.com")).collect();
        let many: Vec<String> = many_names
            .iter()
            .map(|name| storage(name, duplicate))
            .collect();
        let first_five: Vec<&str> = (0..5).map(|i| many_names[i].as_str()).collect();
        // (what, review, entries, drivers)
        let cases: Vec<(&str, String, Vec<&str>, Vec<&str>)> = vec![
            (
                "one driver of three",
                status_write(
                    "csinodes",
                    "storage.k8s.io",
                    &format!(
                        r#"{{"storageHealth": [{}, {}, {}]}}"#,
                        storage("a.example.com", fine),
                        storage("b.example.com", duplicate),
                        storage("c.example.com", fine),
                    ),
                    "",
                ),
                vec!["b.example.com"],
                vec!["b.example.com"],
            ),
            (
                "an entry whose name is no driver's is dropped, named, and no driver",
                status_write(
                    "csinodes",
                    "storage.k8s.io",
                    &format!(
                        r#"{{"storageHealth": [{}, {}]}}"#,
                        storage("not a driver!", fine),
                        storage("b.example.com", duplicate),
                    ),
                    "",
                ),
                vec!["not a driver!", "b.example.com"],
                vec!["b.example.com"],
            ),
            (
                "a driver given twice, merged, and named once",
                status_write(
                    "csinodes",
                    "storage.k8s.io",
                    &format!(
                        r#"{{"storageHealth": [{}, {}]}}"#,
                        storage("a.example.com", duplicate),
                        storage("a.example.com", fine),
                    ),
                    "",
                ),
                vec!["a.example.com"],
                vec!["a.example.com"],
            ),
            (
                "the first few of many",
                status_write(
                    "csinodes",
                    "storage.k8s.io",
                    &format!(r#"{{"storageHealth": [{}]}}"#, many.join(",")),
                    "",
                ),
                first_five.clone(),
                first_five.clone(),
            ),
            (
                "a pod's volumes",
                status_write(
                    "pods",
                    "",
                    &format!(
                        r#"{{"volumeHealth": [{}, {}, {}]}}"#,
                        volume("v0", fine),
                        volume("v1", duplicate),
                        volume("v2", fine),
                    ),
                    &pod_spec,
                ),
                vec!["v1"],
                vec![],
            ),
            (
                "a claim has no entries",
                // By its health monitor: a node may not write a claim's health.
                status_write(
                    "persistentvolumeclaims",
                    "",
                    &format!(r#"{{"healthStatus": {{"healthConditions": {duplicate}}}}}"#),
                    "",
                )
                .replace(
                    "system:node:node1",
                    "system:serviceaccount:kube-system:monitor",
                )
                .replace(r#"["system:nodes"]"#, "[]"),
                vec![],
                vec![],
            ),
        ];
        let settings = Settings::with_gate(true);
        for (what, review, want, drivers) in cases {
            let request = AdmissionReview::parse(&review).unwrap().request;
            let repaired = request
                .repair(&settings)
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: not repaired"));
            assert_eq!(repaired.entries(), want.as_slice(), "{what}");
            assert_eq!(repaired.drivers().collect::<Vec<_>>(), drivers, "{what}");
            assert!(want.len() <= super::NAMED_ENTRIES, "{what}");
        }
    }
}
