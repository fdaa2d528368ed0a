//! The JSON Patch of repair (`--repair`): what the mutating webhook sends so that a status write
//! that validation would refuse, and that its writer would retry for ever, is stored repaired,
//! and what `check` applies to show what a repair would change.
//!
//! The repair itself is the validation library's ([`volume_health_validation::repair`]); this
//! module turns its list of repairs into the smallest patch of the object as written: one
//! `remove` per item dropped and one `replace` per message cut, nothing else touched. The patch
//! is applied to the object here and must give exactly the library's repaired object, or no
//! patch is made.

use std::cmp::Ordering;

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use volume_health_validation::HealthResource;
use volume_health_validation::repair::{
    Impossible, Repair, RepairKind, repair_pod, repair_pvc, repair_storage_health,
};
use volume_health_validation::rules::ConditionIdentity;

/// A repair to send: the patch, and what it does.
#[derive(Debug)]
pub struct Repaired {
    /// `remove`s and `replace`s of the object as written.
    pub patch: Patch,
    /// Each change, with the input's paths.
    pub repairs: Vec<Repair>,
}

/// Why no repair could be made. The write is then answered as if repair were off.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The object is not its resource's kind (the validating webhook answers that).
    #[error("the object is not a {kind}")]
    NotItsKind {
        /// The kind expected.
        kind: &'static str,
        /// What did not decode.
        #[source]
        source: serde_json::Error,
    },
    /// A repair's path does not lead into the object as written: a bug, never sent.
    #[error("a repair's path does not lead into the object")]
    Path,
    /// The patch does not give the library's repaired object: a bug, never sent.
    #[error("the patch does not give the repaired object")]
    Mismatch,
}

/// Repairs `object` (with the stored `old`, for ratcheting) of `resource`; `None` when the
/// write needs no repair. `identity` is the server's storage condition rule.
pub fn repair(
    resource: HealthResource,
    object: &Value,
    old: Option<&Value>,
    identity: ConditionIdentity,
) -> Result<Option<Repaired>, RepairError> {
    let (repairs, repaired) = match resource {
        HealthResource::Pods => {
            let (mut pod, old) = typed::<Pod>(object, old, "Pod")?;
            let repairs = repair_pod(&mut pod, old.as_ref());
            (repairs, to_value(&pod))
        }
        HealthResource::PersistentVolumeClaims => {
            let (mut claim, old) =
                typed::<PersistentVolumeClaim>(object, old, "PersistentVolumeClaim")?;
            let repairs = repair_pvc(&mut claim, old.as_ref());
            (repairs, to_value(&claim))
        }
        HealthResource::CsiNodes => {
            let (mut node, old) = typed::<CSINode>(object, old, "CSINode")?;
            let old = old
                .as_ref()
                .and_then(|old| old.status.as_ref())
                .and_then(|status| status.storage_health.as_deref());
            let repairs = match node.status.as_mut().and_then(|s| s.storage_health.as_mut()) {
                Some(entries) => repair_storage_health(entries, old, identity),
                None => Vec::new(),
            };
            (repairs, to_value(&node))
        }
    };
    if repairs.is_empty() {
        return Ok(None);
    }
    let patch = patch_of(object, &repairs)?;
    // The patch must give the library's answer: checked on the typed form, which both sides
    // share (defaults, empty lists), before anything is sent.
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).map_err(|_| RepairError::Path)?;
    let patched = match resource {
        HealthResource::Pods => retyped::<Pod>(patched),
        HealthResource::PersistentVolumeClaims => retyped::<PersistentVolumeClaim>(patched),
        HealthResource::CsiNodes => retyped::<CSINode>(patched),
    };
    if patched.as_ref() != Some(&repaired) {
        return Err(RepairError::Mismatch);
    }
    Ok(Some(Repaired { patch, repairs }))
}

/// The label of a repair's kind in metrics and audit annotations.
pub fn kind_label(kind: &RepairKind) -> &'static str {
    match kind {
        RepairKind::ImpossibleCondition(Impossible::Status) => "impossible_status",
        RepairKind::ImpossibleCondition(Impossible::Reason) => "impossible_reason",
        RepairKind::ImpossibleCondition(Impossible::AccessMode) => "impossible_access_mode",
        RepairKind::ImpossibleCondition(Impossible::VolumeMode) => "impossible_volume_mode",
        RepairKind::DuplicateCondition => "duplicate_condition",
        RepairKind::IndistinctCondition => "indistinct_condition",
        RepairKind::ConditionPastLimit => "condition_past_limit",
        RepairKind::MessageCut { .. } => "message_cut",
        RepairKind::UnknownVolume => "unknown_volume",
        RepairKind::UnnamedEntry => "unnamed_entry",
        RepairKind::DuplicateEntry => "duplicate_entry",
        RepairKind::InvalidDriverName => "invalid_driver_name",
        _ => "other",
    }
}

/// Every label [`kind_label`] gives, in a fixed order.
pub const KIND_LABELS: [&str; 12] = [
    "impossible_status",
    "impossible_reason",
    "impossible_access_mode",
    "impossible_volume_mode",
    "duplicate_condition",
    "indistinct_condition",
    "condition_past_limit",
    "message_cut",
    "unknown_volume",
    "unnamed_entry",
    "duplicate_entry",
    "invalid_driver_name",
];

/// What a group of repairs of one kind did, in words (no value of the input).
pub fn kind_text(kind: &RepairKind) -> String {
    match kind {
        RepairKind::MessageCut { .. } => {
            "message cut at a character boundary to at most 1024 bytes".to_owned()
        }
        other => other.to_string(),
    }
}

fn typed<T: DeserializeOwned>(
    object: &Value,
    old: Option<&Value>,
    kind: &'static str,
) -> Result<(T, Option<T>), RepairError> {
    let decode = |value: &Value| {
        T::deserialize(value).map_err(|source| RepairError::NotItsKind { kind, source })
    };
    let old = match old {
        Some(Value::Null) | None => None,
        Some(old) => Some(decode(old)?),
    };
    Ok((decode(object)?, old))
}

fn retyped<T: DeserializeOwned + Serialize>(value: Value) -> Option<Value> {
    serde_json::from_value::<T>(value)
        .ok()
        .map(|t| to_value(&t))
}

fn to_value(object: &impl Serialize) -> Value {
    // A typed object decoded from JSON serializes back to JSON.
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// One step of a repair's path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

impl PartialOrd for Step {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Step {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Step::Index(a), Step::Index(b)) => a.cmp(b),
            (Step::Field(a), Step::Field(b)) => a.cmp(b),
            (Step::Field(_), Step::Index(_)) => Ordering::Less,
            (Step::Index(_), Step::Field(_)) => Ordering::Greater,
        }
    }
}

/// The steps of a field path as the library renders it: `status.volumeHealth[2].message`.
fn steps(path: &str) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = part.find('[').map_or((part, ""), |i| part.split_at(i));
        if name.is_empty() {
            return None;
        }
        out.push(Step::Field(name.to_owned()));
        while let Some(inner) = rest.strip_prefix('[') {
            let (index, after) = inner.split_once(']')?;
            out.push(Step::Index(index.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

fn pointer(steps: &[Step]) -> PointerBuf {
    PointerBuf::from_tokens(steps.iter().map(|step| match step {
        Step::Field(name) => name.clone(),
        Step::Index(i) => i.to_string(),
    }))
}

/// The smallest patch of `object` that makes `repairs`: every message cut first (its path
/// holds the input's indexes), then every item dropped, the last first, so that each index
/// still names the input's item when its turn comes; an item inside one dropped is not named.
fn patch_of(object: &Value, repairs: &[Repair]) -> Result<Patch, RepairError> {
    let mut replaces = Vec::new();
    let mut removes = Vec::new();
    for repair in repairs {
        let steps = steps(&repair.path).ok_or(RepairError::Path)?;
        match repair.kind {
            RepairKind::MessageCut { to, .. } => {
                let path = pointer(&steps);
                let message = path
                    .resolve(object)
                    .ok()
                    .and_then(Value::as_str)
                    .ok_or(RepairError::Path)?;
                let cut = message.get(..to).ok_or(RepairError::Path)?;
                replaces.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: Value::String(cut.to_owned()),
                }));
            }
            _ => removes.push(steps),
        }
    }
    removes.sort_by(|a, b| b.cmp(a));
    let mut operations = replaces;
    for (i, steps) in removes.iter().enumerate() {
        // Sorted last first, so an enclosing item dropped too comes later in the list.
        let inside_dropped = removes[i + 1..]
            .iter()
            .any(|outer| outer.len() < steps.len() && steps.starts_with(outer));
        if !inside_dropped {
            operations.push(PatchOperation::Remove(RemoveOperation {
                path: pointer(steps),
            }));
        }
    }
    Ok(Patch(operations))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(volume_health: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "apps"},
            "spec": {"containers": [{"name": "app", "image": "app:1"}],
                "volumes": [{"name": "data"}, {"name": "logs"}]},
            "status": {"phase": "Running", "volumeHealth": volume_health}})
    }

    fn condition(status: &str, reason: &str, message: &str) -> Value {
        json!({"status": status, "reason": reason, "message": message})
    }

    fn apply(object: &Value, patch: &Patch) -> Value {
        let mut out = object.clone();
        json_patch::patch(&mut out, patch).unwrap();
        out
    }

    #[test]
    fn a_valid_write_needs_no_patch() {
        let object = pod(json!([{"name": "data", "healthConditions": [
            condition("Degraded", "Slow", "m")]}]));
        assert!(
            repair(
                HealthResource::Pods,
                &object,
                None,
                ConditionIdentity::Unique
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn the_kubelets_duplicate_pair_is_one_remove_and_nothing_else_changes() {
        // kubernetes#142280: two conditions with the same (status, reason).
        let object = pod(json!([{"name": "data", "healthConditions": [
            condition("Degraded", "Slow", "first"), condition("Degraded", "Slow", "second")]}]));
        let repaired = repair(
            HealthResource::Pods,
            &object,
            None,
            ConditionIdentity::Unique,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            serde_json::to_value(&repaired.patch).unwrap(),
            json!([{"op": "remove", "path": "/status/volumeHealth/0/healthConditions/1"}])
        );
        let after = apply(&object, &repaired.patch);
        assert_eq!(after["status"]["phase"], "Running");
        assert_eq!(
            after["status"]["volumeHealth"][0]["healthConditions"][0]["message"],
            "first"
        );
    }

    #[test]
    fn removes_run_last_first_and_skip_what_an_enclosing_remove_takes() {
        let long = "é".repeat(600); // 1200 bytes
        let object = pod(json!([
            {"name": "data", "healthConditions": [
                condition("Degraded", "A", "a"), condition("Degraded", "A", "b"),
                condition("Bogus", "B", "c"), condition("Degraded", "C", &long)]},
            {"name": "gone", "healthConditions": [condition("Degraded", "A", "x")]},
            {"name": "data", "healthConditions": [condition("Degraded", "bad reason", "y")]},
        ]));
        let repaired = repair(
            HealthResource::Pods,
            &object,
            None,
            ConditionIdentity::Unique,
        )
        .unwrap()
        .unwrap();
        let ops = serde_json::to_value(&repaired.patch).unwrap();
        let paths: Vec<(&str, &str)> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|op| (op["op"].as_str().unwrap(), op["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            paths,
            [
                (
                    "replace",
                    "/status/volumeHealth/0/healthConditions/3/message"
                ),
                ("remove", "/status/volumeHealth/2"),
                ("remove", "/status/volumeHealth/1"),
                ("remove", "/status/volumeHealth/0/healthConditions/2"),
                ("remove", "/status/volumeHealth/0/healthConditions/1"),
            ]
        );
        let after = apply(&object, &repaired.patch);
        let message = after["status"]["volumeHealth"][0]["healthConditions"][1]["message"]
            .as_str()
            .unwrap();
        assert_eq!(message.len(), 1024);
        assert!(message.chars().all(|c| c == 'é'));
        // Repairing the repaired object changes nothing.
        assert!(
            repair(
                HealthResource::Pods,
                &after,
                None,
                ConditionIdentity::Unique
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn indistinct_storage_conditions_follow_the_servers_rule() {
        let node = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "node-1"}, "spec": {"drivers": []},
            "status": {"storageHealth": [{"name": "csi.example.com", "healthConditions": [
                {"status": "StorageDegraded", "reason": "PoolFull", "message": "one"},
                {"status": "StorageDegraded", "reason": "PoolFull", "message": "two"}]}]}});
        let unique = repair(
            HealthResource::CsiNodes,
            &node,
            None,
            ConditionIdentity::Unique,
        )
        .unwrap()
        .unwrap();
        assert_eq!(kind_label(&unique.repairs[0].kind), "indistinct_condition");
        assert!(
            repair(
                HealthResource::CsiNodes,
                &node,
                None,
                ConditionIdentity::InTree
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn an_object_of_another_kind_is_an_error_not_a_patch() {
        let object = json!({"spec": "not a pod spec", "status": {"volumeHealth": []}});
        assert!(matches!(
            repair(
                HealthResource::Pods,
                &object,
                None,
                ConditionIdentity::Unique
            ),
            Err(RepairError::NotItsKind { kind: "Pod", .. })
        ));
    }

    #[test]
    fn paths_parse_into_steps() {
        assert_eq!(
            steps("status.volumeHealth[2].healthConditions[17]"),
            Some(vec![
                Step::Field("status".into()),
                Step::Field("volumeHealth".into()),
                Step::Index(2),
                Step::Field("healthConditions".into()),
                Step::Index(17),
            ])
        );
        for bad in ["", "a..b", "a[x]", "a[1", "a[1]b"] {
            assert_eq!(steps(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_kind_has_its_own_label() {
        use std::collections::BTreeSet;
        let labels: BTreeSet<&str> = KIND_LABELS.into_iter().collect();
        assert_eq!(labels.len(), KIND_LABELS.len());
        assert!(!labels.contains("other"));
    }
}
