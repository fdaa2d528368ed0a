//! CSINode `status.storageHealth`.
//!
//! Upstream's rules are all handwritten (`ValidateCSINodeStatusUpdate` and `validateStorageHealth`
//! in pkg/apis/storage/validation/validation.go of Kubernetes v1.37.2): one pass over the entries
//! in field order, never ratcheted. This project adds one rule of its own
//! ([`ConditionIdentity`]), reported after upstream's errors.

use k8s_openapi::api::storage::v1::{CSINode, StorageHealth};

use super::conditions::{MAX_HEALTH_CONDITIONS, check_storage_condition, check_storage_identities};
use super::names::{CSI_DRIVER_NAME_MAX_LEN, dns1123_subdomain_errors, go_to_lower};
use super::validate::{Checks, Keyed, List, each, each_seen, each_slice_val, len};
use crate::decode::{StorageHealthView, typed_storage_health};
use crate::field::{ErrorKind, ErrorList, Errors, FieldPath, GoQuoted};

/// Whether two conditions of one driver may share (status, reason, accessMode, volumeMode): this
/// project's own rule. In-tree Kubernetes v1.37.2 accepts such duplicates (the list
/// is `+listType=atomic`); the kubelet tells conditions apart by these four fields, so the
/// rule never refuses two conditions a kubelet keeps apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConditionIdentity {
    /// A later condition with the identity of an earlier one in the same entry is a Duplicate.
    /// Ratcheted per entry: an entry whose conditions equal those of the old entry of its name
    /// is not checked, so one driver's stored report never blocks another driver's.
    #[default]
    Unique,
    /// No such rule: exactly in-tree's answers.
    InTree,
}

impl ConditionIdentity {
    /// [`Unique`](Self::Unique) when `unique`, as a `--storage-health-unique-conditions` flag
    /// reads.
    ///
    /// ```
    /// use k8s_openapi::api::storage::v1::StorageHealth;
    /// use volume_health_validation::rules::{ConditionIdentity, validate_storage_health};
    ///
    /// assert_eq!(ConditionIdentity::unique_if(true), ConditionIdentity::Unique);
    /// // Two conditions nothing tells apart: only the project's rule refuses them.
    /// let entries: Vec<StorageHealth> = serde_json::from_value(serde_json::json!([
    ///     {"name": "csi.example.com", "healthConditions": [
    ///         {"status": "StorageDegraded", "reason": "PoolFull"},
    ///         {"status": "StorageDegraded", "reason": "PoolFull"}]},
    /// ]))?;
    /// let check = |unique| {
    ///     validate_storage_health(Some(&entries), None, ConditionIdentity::unique_if(unique))
    /// };
    /// assert_eq!(check(true).len(), 1);
    /// assert!(check(false).is_empty());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn unique_if(unique: bool) -> Self {
        if unique {
            ConditionIdentity::Unique
        } else {
            ConditionIdentity::InTree
        }
    }
}

/// Validates a CSINode's `status.storageHealth` with every rule, this project's
/// [`ConditionIdentity::Unique`] included; `old` is the stored CSINode on update.
///
/// ```
/// use k8s_openapi::api::storage::v1::CSINode;
/// use volume_health_validation::validate_csinode;
///
/// let node: CSINode = serde_json::from_value(serde_json::json!({
///     "metadata": {"name": "node-1"},
///     "spec": {"drivers": []},
///     "status": {"storageHealth": [{"name": "csi.example.com", "healthConditions": [
///         {"status": "StorageUnreachable", "reason": "BackendDown", "accessMode": "ReadWriteMany"},
///         {"status": "StorageUnreachable", "reason": "BackendDown", "accessMode": "ReadWriteOnce"},
///     ]}]}
/// }))?;
/// // One reason for two access modes: two identities, both accepted.
/// assert!(validate_csinode(&node, None).is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn validate_csinode(new: &CSINode, old: Option<&CSINode>) -> ErrorList {
    validate_storage_health(
        storage_health(Some(new)),
        storage_health(old),
        ConditionIdentity::Unique,
    )
}

/// Validates a `status.storageHealth` list; `old` is the stored one on update.
///
/// ```
/// use k8s_openapi::api::storage::v1::StorageHealth;
/// use volume_health_validation::rules::{ConditionIdentity, validate_storage_health};
///
/// let entries: Vec<StorageHealth> = serde_json::from_value(serde_json::json!([
///     {"name": "Not_A_Driver", "healthConditions": [{"status": "StorageDegraded", "reason": "PoolFull"}]},
/// ]))?;
/// let errors = validate_storage_health(Some(&entries), None, ConditionIdentity::InTree);
/// assert_eq!(errors.len(), 1);
/// assert!(errors[0].to_string().starts_with("status.storageHealth[0].name: Invalid value: \"Not_A_Driver\""));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn validate_storage_health(
    new: Option<&[StorageHealth]>,
    old: Option<&[StorageHealth]>,
    identity: ConditionIdentity,
) -> ErrorList {
    let mut errors = Errors::default();
    check_storage_health(
        new.map(typed_storage_health).as_ref(),
        old.map(typed_storage_health).as_ref(),
        identity,
        &mut errors,
    );
    errors.into_list()
}

/// The names of `status.storageHealth`, which its handwritten check keeps in a `seen` set.
impl Keyed for StorageHealthView<'_> {
    type Key<'k>
        = &'k str
    where
        Self: 'k;

    fn key(&self) -> &str {
        &self.name
    }
}

/// `status.storageHealth` of a csinodes/status write: upstream's handwritten checks
/// (`ValidateCSINodeStatusUpdate`), one pass in field order, then this project's own rule.
pub(crate) fn check_storage_health<'a>(
    new: List<'_, 'a, StorageHealthView<'a>>,
    old: List<'_, 'a, StorageHealthView<'a>>,
    identity: ConditionIdentity,
    errors: &mut Errors,
) {
    let Some(new) = new else { return };
    let status = FieldPath::root("status");
    let path = status.child("storageHealth");
    let mut hv = Checks::handwritten(errors);
    each_seen(&path, new, |item, entry, seen| {
        if seen {
            let rendered = GoQuoted(&entry.name).to_string();
            hv.report(item, ErrorKind::Duplicate { rendered }); // field.Duplicate
        }
        storage_health_entry(&mut hv, item, entry); // validateStorageHealth
    });
    if identity == ConditionIdentity::InTree {
        return;
    }
    // ConditionIdentity, ratcheted per entry: an entry equal to the old entry of its name is
    // skipped. One condition cannot repeat another; over the limit the entry has its TooMany.
    each_slice_val(&path, Some(new), old, |item, entry, _| {
        let conditions = entry.health_conditions.as_ref();
        if (2..=MAX_HEALTH_CONDITIONS).contains(&len(conditions)) {
            check_storage_identities(&item.child("healthConditions"), conditions, errors);
        }
    });
}

/// `validateStorageHealth`: the name as `ValidateCSIDriverName` checks `spec.drivers[*].name`
/// (TooLong before Invalid; the Invalid value is the name as written), then the conditions.
fn storage_health_entry(hv: &mut Checks<'_>, path: &FieldPath<'_>, entry: &StorageHealthView<'_>) {
    let (name_path, name) = (path.child("name"), &*entry.name);
    if hv.required_value(&name_path, name) {
        hv.max_bytes(&name_path, name, CSI_DRIVER_NAME_MAX_LEN); // ValidateCSIDriverName
        dns1123_subdomain(hv, &name_path, name); // IsDNS1123Subdomain(ToLower(name))
    }
    let path = path.child("healthConditions");
    let conditions = entry.health_conditions.as_ref();
    if hv.max_items(&path, conditions, MAX_HEALTH_CONDITIONS) {
        each(&path, conditions, |item, condition| {
            check_storage_condition(hv, item, condition); // validateStorageHealthCondition
        });
    }
}

/// `IsDNS1123Subdomain` of the lower-cased name: Invalid, with the name as written, per detail.
fn dns1123_subdomain(hv: &mut Checks<'_>, path: &FieldPath<'_>, name: &str) {
    for detail in dns1123_subdomain_errors(&go_to_lower(name)) {
        let value = name.to_owned();
        hv.report(path, ErrorKind::Invalid { value, detail });
    }
}

fn storage_health(node: Option<&CSINode>) -> Option<&[StorageHealth]> {
    node?.status.as_ref()?.storage_health.as_deref()
}
