//! Repair tables: each kind of repair, its path and kind, the repaired value accepted by the
//! rules, and a second repair that changes nothing.

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimStatus, Pod, PodSpec, PodStatus, PodVolumeHealth,
    Volume, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeSpec, CSINodeStatus, StorageHealth, StorageHealthCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::{validate_csinode, validate_pod, validate_pvc};

fn cond(status: &str, reason: &str) -> VolumeHealthCondition {
    VolumeHealthCondition {
        status: status.into(),
        reason: reason.into(),
        message: None,
    }
}

fn with_message(mut c: VolumeHealthCondition, message: &str) -> VolumeHealthCondition {
    c.message = Some(message.into());
    c
}

/// `n` distinct valid conditions, reasons `R0`, `R1`, ...
fn distinct(n: usize) -> Vec<VolumeHealthCondition> {
    (0..n).map(|i| cond("Degraded", &format!("R{i}"))).collect()
}

fn claim(conditions: Vec<VolumeHealthCondition>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        status: Some(PersistentVolumeClaimStatus {
            health_status: Some(VolumeHealthStatus {
                health_conditions: Some(conditions),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn claim_conditions(claim: &PersistentVolumeClaim) -> &[VolumeHealthCondition] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.health_status.as_ref())
        .and_then(|h| h.health_conditions.as_deref())
        .unwrap_or_default()
}

fn got(repairs: &[Repair]) -> Vec<(&str, RepairKind)> {
    repairs.iter().map(|r| (r.path.as_str(), r.kind)).collect()
}

const HC: &str = "status.healthStatus.healthConditions";

/// Repairs a claim, checks the result is accepted and stable, and returns what was done.
fn repair_claim(
    new: &PersistentVolumeClaim,
    old: Option<&PersistentVolumeClaim>,
) -> (PersistentVolumeClaim, Vec<Repair>) {
    let mut repaired = new.clone();
    let repairs = repair_pvc(&mut repaired, old);
    assert_eq!(validate_pvc(&repaired, old), vec![], "{repairs:?}");
    let mut again = repaired.clone();
    assert_eq!(repair_pvc(&mut again, old), vec![]);
    assert_eq!(again, repaired);
    (repaired, repairs)
}

#[test]
fn claim_duplicates_keep_the_first() {
    let new = claim(vec![
        with_message(cond("Degraded", "Slow"), "first"),
        with_message(cond("Degraded", "Slow"), "second"),
        cond("DataLoss", "Slow"),
    ]);
    let (repaired, repairs) = repair_claim(&new, None);
    assert_eq!(
        got(&repairs),
        [(
            "status.healthStatus.healthConditions[1]",
            RepairKind::DuplicateCondition
        )]
    );
    let kept = claim_conditions(&repaired);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].message.as_deref(), Some("first"));
}

#[test]
fn claim_conditions_past_the_sixteenth() {
    let (repaired, repairs) = repair_claim(&claim(distinct(18)), None);
    assert_eq!(
        got(&repairs),
        [
            (&*format!("{HC}[16]"), RepairKind::ConditionPastLimit),
            (&*format!("{HC}[17]"), RepairKind::ConditionPastLimit),
        ]
    );
    assert_eq!(claim_conditions(&repaired), &distinct(16)[..]);
}

/// Impossible conditions go first, duplicates next, and only then the limit: a list of 18 with
/// one bad status and one duplicate keeps all 16 valid distinct conditions.
#[test]
fn claim_order_keeps_the_most_valid_conditions() {
    let mut conditions = vec![cond("Unknown", "Bad"), cond("Degraded", "R0")];
    conditions.extend(distinct(16));
    let (repaired, repairs) = repair_claim(&claim(conditions), None);
    assert_eq!(
        got(&repairs),
        [
            (
                &*format!("{HC}[0]"),
                RepairKind::ImpossibleCondition(Impossible::Status)
            ),
            (&*format!("{HC}[2]"), RepairKind::DuplicateCondition),
        ]
    );
    assert_eq!(claim_conditions(&repaired), &distinct(16)[..]);
}

#[test]
fn claim_impossible_conditions() {
    let long_reason = format!("R{}", "a".repeat(256));
    let new = claim(vec![
        cond("", "Empty"),
        cond("Healthy", "Fine"),
        cond("Degraded", ""),
        cond("Degraded", "1stReason"),
        cond("Degraded", "Ends:"),
        cond("Degraded", &long_reason),
        cond("Degraded", &"a".repeat(256)),
    ]);
    let (repaired, repairs) = repair_claim(&new, None);
    let status = RepairKind::ImpossibleCondition(Impossible::Status);
    let reason = RepairKind::ReplacedField(Impossible::Reason);
    let duplicate = RepairKind::DuplicateCondition;
    // A reason that can never be valid is replaced, so the condition's status is stored; once
    // replaced, a later one of the same status is a duplicate.
    assert_eq!(
        got(&repairs),
        [
            (&*format!("{HC}[0]"), status),
            (&*format!("{HC}[1]"), status),
            (&*format!("{HC}[2]"), reason),
            (&*format!("{HC}[3]"), reason),
            (&*format!("{HC}[3]"), duplicate),
            (&*format!("{HC}[4]"), reason),
            (&*format!("{HC}[4]"), duplicate),
            (&*format!("{HC}[5]"), reason),
            (&*format!("{HC}[5]"), duplicate),
        ]
    );
    assert_eq!(
        claim_conditions(&repaired),
        [
            cond("Degraded", REPLACED_REASON),
            cond("Degraded", &"a".repeat(256))
        ]
    );
}

/// What the apiserver accepts because it is stored is kept; what it checks on every write is
/// repaired.
#[test]
fn claim_ratchets_as_the_rules_do() {
    let long = "m".repeat(2000);
    let stored = claim(vec![
        cond("Unknown", "Stored"),
        with_message(cond("Degraded", "Long"), &long),
        cond("Degraded", "Dup"),
        cond("Degraded", "Dup"),
    ]);
    // Unchanged: nothing checked, nothing repaired.
    let (_, repairs) = repair_claim(&stored, Some(&stored));
    assert_eq!(repairs, []);
    assert!(
        validate_pvc(&stored, None).len() > 1,
        "invalid without its old object"
    );

    // Changed: the stored status and message stay; the repeat is now a duplicate.
    let mut new = stored.clone();
    if let Some(h) = new.status.as_mut().and_then(|s| s.health_status.as_mut()) {
        h.health_conditions
            .as_mut()
            .unwrap()
            .push(cond("DataLoss", "New"));
    }
    let (repaired, repairs) = repair_claim(&new, Some(&stored));
    assert_eq!(
        got(&repairs),
        [(&*format!("{HC}[3]"), RepairKind::DuplicateCondition)]
    );
    assert_eq!(
        claim_conditions(&repaired)[1].message.as_deref(),
        Some(&*long)
    );

    // A new long message on a stored (status, reason) is checked, so cut.
    let mut new = stored.clone();
    if let Some(h) = new.status.as_mut().and_then(|s| s.health_status.as_mut()) {
        h.health_conditions.as_mut().unwrap()[1].message = Some("n".repeat(2000));
    }
    let (_, repairs) = repair_claim(&new, Some(&stored));
    assert_eq!(
        got(&repairs),
        [
            (
                &*format!("{HC}[1].message"),
                RepairKind::MessageCut {
                    from: 2000,
                    to: 1024
                }
            ),
            (&*format!("{HC}[3]"), RepairKind::DuplicateCondition),
        ]
    );

    // The reason format is never ratcheted: a stored bad reason goes, even unchanged.
    let stored = claim(vec![cond("Degraded", "bad reason"), cond("Degraded", "Ok")]);
    let (repaired, repairs) = repair_claim(&stored, Some(&stored));
    assert_eq!(
        got(&repairs),
        [(
            &*format!("{HC}[0]"),
            RepairKind::ReplacedField(Impossible::Reason)
        )]
    );
    assert_eq!(
        claim_conditions(&repaired),
        [
            with_message(cond("Degraded", REPLACED_REASON), "reason: bad reason"),
            cond("Degraded", "Ok")
        ],
        "the condition is kept unhealthy, its reason in the message"
    );
}

#[test]
fn claim_without_health_status_is_left_alone() {
    let mut claim = PersistentVolumeClaim::default();
    assert_eq!(repair_pvc(&mut claim, None), []);
    assert_eq!(claim, PersistentVolumeClaim::default());
}

fn pod(volumes: &[&str], entries: Vec<PodVolumeHealth>) -> Pod {
    Pod {
        spec: Some(PodSpec {
            volumes: Some(
                volumes
                    .iter()
                    .map(|name| Volume {
                        name: (*name).into(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(PodStatus {
            volume_health: Some(entries),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn entry(name: &str, conditions: Vec<VolumeHealthCondition>) -> PodVolumeHealth {
    PodVolumeHealth {
        name: name.into(),
        health_conditions: Some(conditions),
        last_transition_time: None,
    }
}

fn pod_entries(pod: &Pod) -> &[PodVolumeHealth] {
    pod.status
        .as_ref()
        .and_then(|s| s.volume_health.as_deref())
        .unwrap_or_default()
}

fn repair_pod_checked(new: &Pod, old: Option<&Pod>) -> (Pod, Vec<Repair>) {
    let mut repaired = new.clone();
    let repairs = repair_pod(&mut repaired, old);
    assert_eq!(validate_pod(&repaired, old), vec![], "{repairs:?}");
    let mut again = repaired.clone();
    assert_eq!(repair_pod(&mut again, old), vec![]);
    assert_eq!(again, repaired);
    (repaired, repairs)
}

#[test]
fn pod_entries_unknown_duplicate_and_unnamed() {
    let new = pod(
        &["data", "logs"],
        vec![
            entry("data", vec![cond("Degraded", "A")]),
            entry("scratch", vec![]),
            entry("data", vec![cond("Degraded", "B")]),
            entry("", vec![]),
            entry("", vec![]),
            entry("logs", vec![]),
        ],
    );
    let (repaired, repairs) = repair_pod_checked(&new, None);
    assert_eq!(
        got(&repairs),
        [
            ("status.volumeHealth[1]", RepairKind::UnknownVolume),
            ("status.volumeHealth[2]", RepairKind::MergedEntry),
            ("status.volumeHealth[3]", RepairKind::UnnamedEntry),
            ("status.volumeHealth[4]", RepairKind::UnnamedEntry),
        ]
    );
    let names: Vec<&str> = pod_entries(&repaired)
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["data", "logs"]);
    assert_eq!(
        pod_entries(&repaired)[0].health_conditions,
        Some(vec![cond("Degraded", "A"), cond("Degraded", "B")]),
        "the later entry of a name is merged, its conditions kept"
    );
}

/// Paths keep the input's indexes, of entries and of conditions, across both passes.
#[test]
fn pod_condition_paths_are_the_inputs() {
    let mut conditions = vec![
        cond("Degraded", "1x"),
        cond("Degraded", "A"),
        cond("Degraded", "A"),
    ];
    conditions.extend(distinct(17));
    let new = pod(
        &["data"],
        vec![
            entry("gone", vec![cond("Degraded", "bad reason")]),
            entry("data", conditions),
        ],
    );
    let (repaired, repairs) = repair_pod_checked(&new, None);
    let at = |s: &str| format!("status.volumeHealth[1].healthConditions{s}");
    assert_eq!(
        got(&repairs),
        [
            ("status.volumeHealth[0]", RepairKind::UnknownVolume),
            (&*at("[0]"), RepairKind::ReplacedField(Impossible::Reason)),
            (&*at("[2]"), RepairKind::DuplicateCondition),
            (&*at("[17]"), RepairKind::ConditionPastLimit),
            (&*at("[18]"), RepairKind::ConditionPastLimit),
            (&*at("[19]"), RepairKind::ConditionPastLimit),
        ]
    );
    let kept = pod_entries(&repaired)[0]
        .health_conditions
        .as_deref()
        .unwrap_or_default();
    assert_eq!(kept.len(), 16);
    assert_eq!(kept[0].reason, REPLACED_REASON);
    assert_eq!(kept[0].message.as_deref(), Some("reason: 1x"));
    assert_eq!(kept[1], cond("Degraded", "A"));
}

#[test]
fn pod_ratchets_as_the_rules_do() {
    // Stored before the rules: an entry without a name, a duplicate entry, a bad status.
    let stored = pod(
        &["data"],
        vec![
            entry("", vec![]),
            entry("data", vec![cond("Unknown", "A")]),
            entry("data", vec![]),
        ],
    );
    let (_, repairs) = repair_pod_checked(&stored, Some(&stored));
    assert_eq!(repairs, []);

    // A changed list: the duplicate entry is merged, the stored nameless entry and status
    // stay. Repairs come entry by entry, each entry's conditions after it.
    let mut new = stored.clone();
    new.status.as_mut().unwrap().volume_health.as_mut().unwrap()[1]
        .health_conditions
        .as_mut()
        .unwrap()
        .push(cond("Bad", "B"));
    let (repaired, repairs) = repair_pod_checked(&new, Some(&stored));
    assert_eq!(
        got(&repairs),
        [
            (
                "status.volumeHealth[1].healthConditions[1]",
                RepairKind::ImpossibleCondition(Impossible::Status)
            ),
            ("status.volumeHealth[2]", RepairKind::MergedEntry),
        ]
    );
    assert_eq!(pod_entries(&repaired)[0].name, "");
    assert_eq!(
        pod_entries(&repaired)[1].health_conditions,
        Some(vec![cond("Unknown", "A")])
    );

    // A volume that no longer exists is checked on every write, stored or not.
    let mut gone = stored.clone();
    gone.spec.as_mut().unwrap().volumes = Some(vec![]);
    let (repaired, repairs) = repair_pod_checked(&gone, Some(&stored));
    assert_eq!(
        got(&repairs)[..2],
        [
            ("status.volumeHealth[1]", RepairKind::UnknownVolume),
            ("status.volumeHealth[2]", RepairKind::UnknownVolume),
        ]
    );
    assert_eq!(pod_entries(&repaired), [entry("", vec![])]);
}

fn storage(status: &str, reason: &str) -> StorageHealthCondition {
    StorageHealthCondition {
        status: status.into(),
        reason: reason.into(),
        ..Default::default()
    }
}

fn moded(
    mut c: StorageHealthCondition,
    access: Option<&str>,
    volume: Option<&str>,
) -> StorageHealthCondition {
    c.access_mode = access.map(Into::into);
    c.volume_mode = volume.map(Into::into);
    c
}

fn driver(name: &str, conditions: Vec<StorageHealthCondition>) -> StorageHealth {
    StorageHealth {
        name: name.into(),
        health_conditions: Some(conditions),
    }
}

fn node(entries: Vec<StorageHealth>) -> CSINode {
    CSINode {
        spec: CSINodeSpec::default(),
        status: Some(CSINodeStatus {
            storage_health: Some(entries),
        }),
        ..Default::default()
    }
}

fn node_entries(node: &CSINode) -> &[StorageHealth] {
    node.status
        .as_ref()
        .and_then(|s| s.storage_health.as_deref())
        .unwrap_or_default()
}

fn repair_node(new: &CSINode, old: Option<&CSINode>) -> (CSINode, Vec<Repair>) {
    let mut repaired = new.clone();
    let repairs = repair_csinode(&mut repaired, old);
    assert_eq!(validate_csinode(&repaired, old), vec![], "{repairs:?}");
    let mut again = repaired.clone();
    assert_eq!(repair_csinode(&mut again, old), vec![]);
    assert_eq!(again, repaired);
    (repaired, repairs)
}

#[test]
fn csinode_entries_duplicate_and_invalid_names() {
    let new = node(vec![
        driver("csi.example.com", vec![]),
        driver("csi.example.com", vec![]),
        driver("", vec![]),
        driver("csi_example", vec![]),
        driver(&"a".repeat(64), vec![]),
        driver("CSI.Other.COM", vec![]),
    ]);
    let (repaired, repairs) = repair_node(&new, None);
    assert_eq!(
        got(&repairs),
        [
            ("status.storageHealth[1]", RepairKind::MergedEntry),
            ("status.storageHealth[2]", RepairKind::InvalidDriverName),
            ("status.storageHealth[3]", RepairKind::InvalidDriverName),
            ("status.storageHealth[4]", RepairKind::InvalidDriverName),
        ]
    );
    let names: Vec<&str> = node_entries(&repaired)
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["csi.example.com", "CSI.Other.COM"],
        "checked lower-cased, kept as written"
    );
}

#[test]
fn csinode_conditions() {
    let at = |s: &str| format!("status.storageHealth[0].healthConditions{s}");
    let impossible = RepairKind::ImpossibleCondition;
    let replaced = RepairKind::ReplacedField;
    let new = node(vec![driver(
        "csi.example.com",
        vec![
            storage("Degraded", "VolumeStatus"),
            storage("", "Empty"),
            storage("StorageDegraded", ""),
            storage("StorageDegraded", "bad reason"),
            storage("StorageDegraded", &format!("R{}", "a".repeat(256))),
            moded(storage("StorageDegraded", "Mode"), Some("ReadWrite"), None),
            moded(storage("StorageDegraded", "Mode"), Some(""), None),
            moded(storage("StorageDegraded", "Mode"), None, Some("Raw")),
            moded(
                storage("StorageDegraded", "Mode"),
                Some("ReadWriteOnce"),
                Some("Block"),
            ),
            moded(
                storage("StorageDegraded", "Mode"),
                Some("ReadOnlyMany"),
                Some("Block"),
            ),
            moded(
                storage("StorageDegraded", "Mode"),
                Some("ReadWriteOnce"),
                Some("Block"),
            ),
            StorageHealthCondition {
                message: Some(format!("{}€", "x".repeat(1022))),
                ..storage("StorageUnreachable", "Down")
            },
        ],
    )]);
    let (repaired, repairs) = repair_node(&new, None);
    assert_eq!(
        got(&repairs),
        [
            (&*at("[0]"), impossible(Impossible::Status)),
            (&*at("[1]"), impossible(Impossible::Status)),
            (&*at("[2]"), replaced(Impossible::Reason)),
            (&*at("[3]"), replaced(Impossible::Reason)),
            (&*at("[3]"), RepairKind::IndistinctCondition),
            (&*at("[4]"), replaced(Impossible::Reason)),
            (&*at("[4]"), RepairKind::IndistinctCondition),
            (&*at("[5]"), replaced(Impossible::AccessMode)),
            (&*at("[6]"), replaced(Impossible::AccessMode)),
            (&*at("[6]"), RepairKind::IndistinctCondition),
            (&*at("[7]"), replaced(Impossible::VolumeMode)),
            (&*at("[7]"), RepairKind::IndistinctCondition),
            (&*at("[10]"), RepairKind::IndistinctCondition),
            (
                &*at("[11].message"),
                RepairKind::MessageCut {
                    from: 1025,
                    to: 1022
                }
            ),
        ]
    );
    assert_eq!(
        node_entries(&repaired)[0]
            .health_conditions
            .as_ref()
            .map(Vec::len),
        Some(5),
        "one StorageDegraded with a replaced reason, one without each bad mode, two with both \
         modes, the unreachable one"
    );
}

#[test]
fn csinode_conditions_past_the_sixteenth() {
    let conditions: Vec<_> = (0..17)
        .map(|i| storage("StorageDegraded", &format!("R{i}")))
        .collect();
    let (_, repairs) = repair_node(&node(vec![driver("d.example", conditions)]), None);
    assert_eq!(
        got(&repairs),
        [(
            "status.storageHealth[0].healthConditions[16]",
            RepairKind::ConditionPastLimit
        )]
    );
}

/// This project's identity rule ratchets per entry, and not at all with the in-tree rules;
/// upstream's CSINode rules never ratchet.
#[test]
fn csinode_ratchets_only_the_identity_rule() {
    let twins = vec![
        storage("StorageDegraded", "Twin"),
        storage("StorageDegraded", "Twin"),
    ];
    let stored = node(vec![driver("a.example", twins.clone())]);
    let (_, repairs) = repair_node(&stored, Some(&stored));
    assert_eq!(repairs, []);

    // Capped to the stored conditions, the entry is the stored one: the twins stay.
    let mut sixteen = twins.clone();
    sixteen.extend((0..14).map(|i| storage("StorageDegraded", &format!("R{i}"))));
    let stored = node(vec![driver("a.example", sixteen.clone())]);
    let mut seventeen = sixteen.clone();
    seventeen.push(storage("StorageDegraded", "Extra"));
    let (repaired, repairs) =
        repair_node(&node(vec![driver("a.example", seventeen)]), Some(&stored));
    assert_eq!(
        got(&repairs),
        [(
            "status.storageHealth[0].healthConditions[16]",
            RepairKind::ConditionPastLimit
        )]
    );
    assert_eq!(
        node_entries(&repaired)[0].health_conditions.as_deref(),
        Some(&sixteen[..])
    );

    // A changed entry: the later twin goes.
    let mut changed = twins.clone();
    changed.push(storage("StorageDegraded", "New"));
    let (_, repairs) = repair_node(
        &node(vec![driver("a.example", changed.clone())]),
        Some(&stored),
    );
    assert_eq!(
        got(&repairs),
        [(
            "status.storageHealth[0].healthConditions[1]",
            RepairKind::IndistinctCondition
        )]
    );

    // In-tree rules: no identity rule at all.
    let mut entries = vec![driver("a.example", changed)];
    assert_eq!(
        repair_storage_health(&mut entries, None, ConditionIdentity::InTree),
        []
    );
    assert_eq!(entries[0].health_conditions.as_ref().map(Vec::len), Some(3));

    // A stored invalid access mode is refused again: unset even when unchanged.
    let stored = node(vec![driver(
        "a.example",
        vec![moded(storage("StorageDegraded", "A"), Some("RWO"), None)],
    )]);
    let (_, repairs) = repair_node(&stored, Some(&stored));
    assert_eq!(
        got(&repairs),
        [(
            "status.storageHealth[0].healthConditions[0]",
            RepairKind::ReplacedField(Impossible::AccessMode)
        )]
    );
}

#[test]
fn repairs_render_as_warnings() {
    let cases = [
        (
            RepairKind::DuplicateCondition,
            "condition dropped: an earlier condition has its status and reason",
        ),
        (
            RepairKind::ConditionPastLimit,
            "condition dropped: 16 more severe or earlier conditions are kept",
        ),
        (
            RepairKind::ImpossibleCondition(Impossible::VolumeMode),
            "condition dropped: its volumeMode can never be valid",
        ),
        (
            RepairKind::UnknownVolume,
            "entry dropped: it names no volume of spec.volumes",
        ),
    ];
    for (kind, text) in cases {
        let repair = Repair {
            path: "status.x[0]".into(),
            entry: Some(0),
            kind,
        };
        assert_eq!(repair.to_string(), format!("status.x[0]: {text}"));
    }
}

fn health(conditions: Vec<VolumeHealthCondition>) -> VolumeHealthStatus {
    VolumeHealthStatus {
        health_conditions: Some(conditions),
        last_transition_time: None,
    }
}

#[test]
fn unchanged_by_policy() {
    use Policy::{CompareMessages, IgnoreMessages};
    let a = cond("Degraded", "A");
    let b = cond("DataLoss", "B");
    let a2 = with_message(a.clone(), "other words");
    let stored = health(vec![a.clone(), b.clone()]);
    // (new, ignoring messages, comparing messages)
    let cases = [
        (health(vec![b.clone(), a.clone()]), true, true),
        (health(vec![a2.clone(), b.clone()]), true, false),
        (health(vec![a.clone(), b.clone(), a.clone()]), true, false),
        (health(vec![a.clone()]), false, false),
        (
            health(vec![a.clone(), b.clone(), cond("Degraded", "C")]),
            false,
            false,
        ),
        (health(vec![a.clone(), cond("Degraded", "B")]), false, false),
    ];
    for (i, (new, ignoring, comparing)) in cases.into_iter().enumerate() {
        assert_eq!(
            unchanged(Some(&stored), &new, IgnoreMessages),
            ignoring,
            "case {i}"
        );
        assert_eq!(
            unchanged(Some(&stored), &new, CompareMessages),
            comparing,
            "case {i}"
        );
    }
    // Absent is the same as no conditions; an empty message the same as none.
    assert!(unchanged(None, &health(vec![]), CompareMessages));
    assert!(!unchanged(None, &stored, IgnoreMessages));
    assert!(unchanged(
        Some(&health(vec![with_message(a.clone(), "")])),
        &health(vec![a.clone()]),
        CompareMessages
    ));

    // Pod entries by name, in any order; a name's first entry counts.
    let stored = [entry("x", vec![a.clone()]), entry("y", vec![b.clone()])];
    let new = [
        entry("y", vec![b.clone()]),
        entry("x", vec![a2.clone()]),
        entry("x", vec![]),
    ];
    assert!(unchanged(Some(&stored[..]), &new[..], IgnoreMessages));
    assert!(!unchanged(Some(&stored[..]), &new[..], CompareMessages));
    let moved = [entry("y", vec![a.clone()]), entry("x", vec![b.clone()])];
    assert!(!unchanged(Some(&stored[..]), &moved[..], IgnoreMessages));
    assert!(unchanged(
        Some(&stored[0]),
        &entry("x", vec![a2]),
        IgnoreMessages
    ));
    assert!(!unchanged(
        Some(&stored[0]),
        &entry("z", vec![a]),
        IgnoreMessages
    ));

    // Storage conditions: the access and volume modes are part of the identity.
    let rwo = moded(storage("StorageDegraded", "A"), Some("ReadWriteOnce"), None);
    let rox = moded(storage("StorageDegraded", "A"), Some("ReadOnlyMany"), None);
    let stored = [driver("d", vec![rwo.clone()])];
    assert!(!unchanged(
        Some(&stored[..]),
        &[driver("d", vec![rox])][..],
        IgnoreMessages
    ));
    let reworded = StorageHealthCondition {
        message: Some("m".into()),
        last_transition_time: Some(at(5)),
        ..rwo.clone()
    };
    assert!(unchanged(
        Some(&stored[..]),
        &[driver("d", vec![reworded.clone()])][..],
        IgnoreMessages
    ));
    assert!(!unchanged(
        Some(&stored[..]),
        &[driver("d", vec![reworded])][..],
        CompareMessages
    ));
    assert!(unchanged(
        Some(&stored[0]),
        &driver("d", vec![rwo.clone(), rwo]),
        IgnoreMessages
    ));
}

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(second).unwrap())
}

#[test]
fn transition_times_carried_over() {
    let now = at(1000);
    let stored = VolumeHealthStatus {
        health_conditions: Some(vec![cond("Degraded", "A")]),
        last_transition_time: Some(at(10)),
    };
    // A message-only change keeps the time; another set of (status, reason) takes `now`.
    let mut new = health(vec![with_message(cond("Degraded", "A"), "reworded")]);
    carry_transition_times(Some(&stored), &mut new, &now);
    assert_eq!(new.last_transition_time, Some(at(10)));
    let mut new = health(vec![cond("Degraded", "A"), cond("Degraded", "B")]);
    carry_transition_times(Some(&stored), &mut new, &now);
    assert_eq!(new.last_transition_time, Some(at(1000)));
    let mut new = health(vec![cond("Degraded", "A")]);
    carry_transition_times(None, &mut new, &now);
    assert_eq!(new.last_transition_time, Some(at(1000)));
    // `now` is kept to the second, as the apiserver keeps it.
    let fraction = Time(Timestamp::new(1000, 999_999_999).unwrap());
    let mut new = health(vec![cond("Degraded", "A")]);
    carry_transition_times(None, &mut new, &fraction);
    assert_eq!(new.last_transition_time, Some(at(1000)));

    // Pod entries: per entry, matched by name.
    let stored = [
        PodVolumeHealth {
            last_transition_time: Some(at(1)),
            ..entry("x", vec![cond("Degraded", "A")])
        },
        PodVolumeHealth {
            last_transition_time: Some(at(2)),
            ..entry("y", vec![cond("Degraded", "A")])
        },
    ];
    let mut new = [
        entry("y", vec![cond("Degraded", "A")]),
        entry("x", vec![cond("DataLoss", "A")]),
    ];
    carry_transition_times(Some(&stored[..]), &mut new[..], &now);
    assert_eq!(new[0].last_transition_time, Some(at(2)));
    assert_eq!(new[1].last_transition_time, Some(at(1000)));

    // Storage conditions: per condition, by identity.
    let stored = [driver(
        "d",
        vec![
            StorageHealthCondition {
                last_transition_time: Some(at(3)),
                ..storage("StorageDegraded", "A")
            },
            StorageHealthCondition {
                last_transition_time: Some(at(4)),
                ..moded(storage("StorageDegraded", "A"), Some("ReadWriteOnce"), None)
            },
        ],
    )];
    let mut new = [driver(
        "d",
        vec![
            moded(storage("StorageDegraded", "A"), Some("ReadWriteOnce"), None),
            storage("StorageUnreachable", "A"),
            StorageHealthCondition {
                message: Some("new words".into()),
                ..storage("StorageDegraded", "A")
            },
        ],
    )];
    carry_transition_times(Some(&stored[..]), &mut new[..], &now);
    let times: Vec<_> = new[0]
        .health_conditions
        .iter()
        .flatten()
        .map(|c| c.last_transition_time.clone())
        .collect();
    assert_eq!(times, [Some(at(4)), Some(at(1000)), Some(at(3))]);
}

/// Lists of any length are repaired in linear time: repeats are found by hashing, never by
/// comparing pairs (100 000 items compared pairwise would take minutes in a debug build).
#[test]
fn long_lists_are_repaired_in_linear_time() {
    let n = 100_000;
    let new = claim(vec![cond("Degraded", "A"); n]);
    let old = claim((0..n).map(|i| cond("Degraded", &format!("R{i}"))).collect());
    let mut repaired = new.clone();
    let repairs = repair_pvc(&mut repaired, Some(&old));
    assert_eq!(repairs.len(), n - 1);
    assert_eq!(claim_conditions(&repaired), [cond("Degraded", "A")]);

    let entries = (0..n).map(|i| entry(if i % 2 == 0 { "data" } else { "" }, vec![]));
    let mut repaired = pod(&["data"], entries.collect());
    let repairs = repair_pod(&mut repaired, None);
    assert_eq!(repairs.len(), n - 1);
    assert_eq!(pod_entries(&repaired), [entry("data", vec![])]);

    let drivers = (0..n).map(|i| driver(&format!("d{}.example", i % 1000), vec![]));
    let mut repaired = node(drivers.collect());
    let repairs = repair_csinode(&mut repaired, None);
    assert_eq!(repairs.len(), n - 1000);
    assert_eq!(validate_csinode(&repaired, None), vec![]);
}
