//! Repair over generated reports shaped like the kubelet's and external-health-monitor's writes
//! (repeated pairs, more than 16 conditions, long messages with a multi-byte character at the
//! cut, statuses and reasons the apiserver refuses, volumes that do not exist, repeated and
//! empty names), with and without a stored object derived from the same report. For every
//! input: the repaired value is accepted by the library's validators and by a status write's
//! admission (gate on, this project's identity rule on); it is never healthier than the input
//! (each list kept says every valid status it was given, or, full, the most severe one);
//! repairing it again changes nothing;
//! an input the library accepts is returned unchanged, with no repair; a repair is reported
//! exactly when the value changed. The figures printed at the end (`--nocapture`) are asserted
//! too, so that a generator that stops producing a kind of input fails the test.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimStatus, Pod, PodSpec, PodStatus, PodVolumeHealth,
    Volume, VolumeHealthCondition, VolumeHealthStatus,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeStatus, StorageHealth, StorageHealthCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use volume_health_validation::admission::HealthObject;
use volume_health_validation::repair::{
    Policy, Repair, repair_csinode, repair_pod, repair_pvc, unchanged,
};
use volume_health_validation::{
    AdmissionRequest, ErrorList, Operation, Settings, Verdict, validate_csinode, validate_pod,
    validate_pvc,
};

/// Cases per resource. Each is a few microseconds of work; the count keeps the test under a
/// few seconds in a debug build on a shared machine.
const CASES: u32 = 512;

// ---- generators -------------------------------------------------------------------------

/// Reasons from a small pool (repeats) and from a larger one (lists of more than 16 distinct
/// conditions), and the ones the apiserver refuses.
fn reason() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(vec!["A", "B", "Slow", "IOPS_Throttled", "a:b,c", "Z9"]).prop_map(String::from),
        6 => (0_u8..48).prop_map(|i| format!("R{i}")),
        2 => select(vec!["", "1st", "bad reason", "End:", "é", "-x"]).prop_map(String::from),
        1 => Just(format!("R{}", "a".repeat(256))),
        1 => Just("a".repeat(256)),
    ]
}

/// Messages: none, short, or around 1024 bytes with a character of 1 to 4 bytes near the cut.
fn message() -> impl Strategy<Value = Option<String>> {
    let long = (
        1018_usize..1030,
        select(vec!["a", "é", "€", "😀"]),
        0_usize..8,
    )
        .prop_map(|(n, c, tail)| format!("{}{c}{}", "m".repeat(n), "t".repeat(tail)));
    prop_oneof![
        3 => Just(None),
        3 => select(vec!["", "slow", "very slow"]).prop_map(|m| Some(m.to_owned())),
        2 => long.prop_map(Some),
    ]
}

fn volume_condition() -> BoxedStrategy<VolumeHealthCondition> {
    let status = prop_oneof![
        8 => select(vec!["Inaccessible", "DataLoss", "Degraded"]),
        1 => select(vec!["", "Healthy", "degraded"]),
    ];
    (status, reason(), message())
        .prop_map(|(status, reason, message)| VolumeHealthCondition {
            status: status.into(),
            reason,
            message,
        })
        .boxed()
}

fn time() -> impl Strategy<Value = Option<Time>> {
    // Whole seconds and a fraction of one: stored times are compared at the second.
    select(vec![
        None,
        Some((1, 0)),
        Some((1, 500_000_000)),
        Some((2, 0)),
    ])
    .prop_map(|t| t.and_then(|(s, n)| Timestamp::new(s, n).ok()).map(Time))
}

fn storage_condition() -> BoxedStrategy<StorageHealthCondition> {
    let status = prop_oneof![
        8 => select(vec!["StorageDegraded", "StorageUnreachable"]),
        1 => select(vec!["", "Degraded"]),
    ];
    let access = prop_oneof![
        4 => Just(None),
        4 => select(vec!["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"])
            .prop_map(|m| Some(m.to_owned())),
        1 => select(vec!["", "RWO"]).prop_map(|m| Some(m.to_owned())),
    ];
    let volume = prop_oneof![
        4 => Just(None),
        4 => select(vec!["Filesystem", "Block"]).prop_map(|m| Some(m.to_owned())),
        1 => Just(Some("Raw".to_owned())),
    ];
    (status, reason(), message(), access, volume, time())
        .prop_map(
            |(status, reason, message, access_mode, volume_mode, last_transition_time)| {
                StorageHealthCondition {
                    status: status.into(),
                    reason,
                    message,
                    access_mode,
                    volume_mode,
                    last_transition_time,
                }
            },
        )
        .boxed()
}

/// A valid storage condition from pools of two: indistinct conditions are common, and so is a
/// stored entry that only this project's identity rule (which ratchets) would refuse.
fn alike_storage_condition() -> BoxedStrategy<StorageHealthCondition> {
    let status = select(vec!["StorageDegraded", "StorageUnreachable"]);
    let reason = select(vec!["A", "B"]);
    let access = select(vec![None, Some("ReadWriteOnce")]);
    (status, reason, access, time())
        .prop_map(
            |(status, reason, access, last_transition_time)| StorageHealthCondition {
                status: status.into(),
                reason: reason.into(),
                access_mode: access.map(Into::into),
                last_transition_time,
                ..Default::default()
            },
        )
        .boxed()
}

/// Up to 24 conditions from small pools: repeats are common, and so are lists over 16.
fn conditions<C: std::fmt::Debug>(
    item: impl Strategy<Value = C> + Clone,
) -> impl Strategy<Value = Vec<C>> {
    prop_oneof![
        3 => prop::collection::vec(item.clone(), 0..8),
        1 => prop::collection::vec(item, 14..24),
    ]
}

/// How one side (new or stored) differs from a shared report: which items it keeps, which
/// messages it rewrites, what it adds at the end.
#[derive(Clone, Debug)]
struct Edit<C> {
    keep: Vec<bool>,
    messages: Vec<Option<Option<String>>>,
    extra: Vec<C>,
}

fn edit<C: std::fmt::Debug + Clone>(
    item: impl Strategy<Value = C> + Clone,
) -> impl Strategy<Value = Edit<C>> {
    let keep = prop::collection::vec(prop::bool::weighted(0.85), 24);
    let messages = prop::collection::vec(prop::option::weighted(0.15, message()), 24);
    let extra = prop::collection::vec(item, 0..3);
    (keep, messages, extra).prop_map(|(keep, messages, extra)| Edit {
        keep,
        messages,
        extra,
    })
}

trait Message {
    fn set_message(&mut self, message: Option<String>);
}

impl Message for VolumeHealthCondition {
    fn set_message(&mut self, message: Option<String>) {
        self.message = message;
    }
}

impl Message for StorageHealthCondition {
    fn set_message(&mut self, message: Option<String>) {
        self.message = message;
    }
}

impl<C: Clone + Message> Edit<C> {
    fn apply(&self, base: &[C]) -> Vec<C> {
        let mut items: Vec<C> = base
            .iter()
            .enumerate()
            .filter(|(i, _)| self.keep.get(*i).copied().unwrap_or(true))
            .map(|(i, item)| {
                let mut item = item.clone();
                if let Some(Some(message)) = self.messages.get(i) {
                    item.set_message(message.clone());
                }
                item
            })
            .collect();
        items.extend(self.extra.iter().cloned());
        items
    }
}

/// Which stored object a case has.
#[derive(Clone, Copy, Debug)]
enum Stored {
    /// None: a create, or a writer without the stored object.
    Absent,
    /// The new object itself.
    Same,
    /// The shared report with its own edits.
    Derived,
}

fn stored() -> impl Strategy<Value = Stored> {
    prop_oneof![
        2 => Just(Stored::Absent),
        1 => Just(Stored::Same),
        3 => Just(Stored::Derived),
    ]
}

fn claim(health: Option<Vec<VolumeHealthCondition>>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data-0".into()),
            ..Default::default()
        },
        status: Some(PersistentVolumeClaimStatus {
            health_status: health.map(|conditions| VolumeHealthStatus {
                health_conditions: Some(conditions),
                last_transition_time: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn claims() -> impl Strategy<Value = (PersistentVolumeClaim, Option<PersistentVolumeClaim>)> {
    let item = volume_condition();
    (
        conditions(item.clone()),
        edit(item.clone()),
        edit(item),
        stored(),
    )
        .prop_map(|(base, new_edit, old_edit, stored)| {
            let new = claim(Some(new_edit.apply(&base)));
            let old = match stored {
                Stored::Absent => None,
                Stored::Same => Some(new.clone()),
                Stored::Derived => Some(claim(Some(old_edit.apply(&base)))),
            };
            (new, old)
        })
}

const VOLUMES: [&str; 3] = ["data", "logs", "cache"];

fn pod(volumes: &[bool], entries: Vec<PodVolumeHealth>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(
                VOLUMES
                    .iter()
                    .zip(volumes)
                    .filter(|(_, present)| **present)
                    .map(|(name, _)| Volume {
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
    }
}

type Entries<C> = Vec<(String, Vec<C>, Option<Time>)>;

/// Entries of a named list: names from `names`, each with its conditions and edits.
fn derived_entries<C: std::fmt::Debug + Clone + Message>(
    names: Vec<&'static str>,
    item: impl Strategy<Value = C> + Clone + 'static,
) -> impl Strategy<Value = (Entries<C>, Entries<C>)> {
    let entry = (
        select(names),
        conditions(item.clone()),
        edit(item.clone()),
        edit(item),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.85),
        time(),
        time(),
    );
    prop::collection::vec(entry, 0..6).prop_map(|entries| {
        let mut new = Vec::new();
        let mut old = Vec::new();
        for (name, base, new_edit, old_edit, in_new, in_old, new_time, old_time) in entries {
            if in_new {
                new.push((name.to_owned(), new_edit.apply(&base), new_time));
            }
            if in_old {
                old.push((name.to_owned(), old_edit.apply(&base), old_time));
            }
        }
        (new, old)
    })
}

fn pods() -> impl Strategy<Value = (Pod, Option<Pod>)> {
    let names = vec!["data", "logs", "cache", "gone", ""];
    (
        prop::collection::vec(prop::bool::weighted(0.8), 3),
        derived_entries(names, volume_condition()),
        stored(),
    )
        .prop_map(|(volumes, (new, old), stored)| {
            let entries = |list: Entries<VolumeHealthCondition>| {
                list.into_iter()
                    .map(|(name, conditions, time)| PodVolumeHealth {
                        name,
                        health_conditions: Some(conditions),
                        last_transition_time: time,
                    })
                    .collect()
            };
            let new = pod(&volumes, entries(new));
            let old = match stored {
                Stored::Absent => None,
                Stored::Same => Some(new.clone()),
                Stored::Derived => Some(pod(&volumes, entries(old))),
            };
            (new, old)
        })
}

fn node(entries: Vec<StorageHealth>) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some("node1".into()),
            ..Default::default()
        },
        status: Some(CSINodeStatus {
            storage_health: Some(entries),
        }),
        ..Default::default()
    }
}

/// Nodes whose drivers report only valid conditions under their own names, often alike, stored
/// as they are or with each driver's last condition not yet reported: what is left to repair
/// is this project's identity rule, which ratchets per driver.
fn alike_nodes() -> impl Strategy<Value = (CSINode, Option<CSINode>)> {
    let conditions = prop::collection::vec(alike_storage_condition(), 2..6);
    (prop::collection::vec(conditions, 1..4), prop::bool::ANY).prop_map(|(lists, same)| {
        let entries = |lists: &[Vec<StorageHealthCondition>]| {
            lists
                .iter()
                .zip(["a.example", "b.example", "c.example"])
                .map(|(conditions, name)| StorageHealth {
                    name: name.into(),
                    health_conditions: Some(conditions.clone()),
                })
                .collect()
        };
        let new = node(entries(&lists));
        let old = if same {
            new.clone()
        } else {
            let mut shorter = lists;
            shorter.iter_mut().for_each(|list| drop(list.pop()));
            node(entries(&shorter))
        };
        (new, Some(old))
    })
}

fn nodes() -> impl Strategy<Value = (CSINode, Option<CSINode>)> {
    prop_oneof![3 => mixed_nodes().boxed(), 1 => alike_nodes().boxed()]
}

fn mixed_nodes() -> impl Strategy<Value = (CSINode, Option<CSINode>)> {
    let names = vec![
        "a.example",
        "b.example",
        "c.example",
        "B.EXAMPLE",
        "",
        "Bad_Name",
    ];
    // Valid conditions of many reasons, so that a driver may report more than 16 distinct ones.
    let distinct = (
        select(vec!["StorageDegraded", "StorageUnreachable"]),
        0_u8..48,
    )
        .prop_map(|(status, i)| StorageHealthCondition {
            status: status.into(),
            reason: format!("R{i}"),
            ..Default::default()
        });
    let item = prop_oneof![
        1 => storage_condition(),
        1 => alike_storage_condition(),
        2 => distinct.boxed(),
    ]
    .boxed();
    (derived_entries(names, item), stored()).prop_map(|((new, old), stored)| {
        let entries = |list: Entries<StorageHealthCondition>| {
            list.into_iter()
                .map(|(name, conditions, _)| StorageHealth {
                    name,
                    health_conditions: Some(conditions),
                })
                .collect()
        };
        let new = node(entries(new));
        let old = match stored {
            Stored::Absent => None,
            Stored::Same => Some(new.clone()),
            Stored::Derived => Some(node(entries(old))),
        };
        (new, old)
    })
}

// ---- the properties ---------------------------------------------------------------------

/// What the cases of one resource covered.
#[derive(Debug, Default)]
struct Figures {
    cases: usize,
    with_old: usize,
    accepted: usize,
    /// Accepted only thanks to the old object: ratcheting exercised.
    accepted_by_ratcheting: usize,
    repaired: usize,
    repairs: usize,
    kinds: BTreeMap<String, usize>,
}

/// `MessageCut { .. }` as `MessageCut`; `ImpossibleCondition(Status)` as it is.
fn kind_name(repair: &Repair) -> String {
    let debug = format!("{:?}", repair.kind);
    debug
        .split_once(" {")
        .map_or(debug.clone(), |(name, _)| name.to_owned())
}

/// The properties of one case, for any of the three resources.
fn check<K: HealthObject + Statuses + Clone + PartialEq + std::fmt::Debug>(
    new: &K,
    old: Option<&K>,
    repair: impl Fn(&mut K, Option<&K>) -> Vec<Repair>,
    validate: impl Fn(&K, Option<&K>) -> ErrorList,
    figures: &Mutex<Figures>,
) -> Result<(), TestCaseError> {
    let mut repaired = new.clone();
    let repairs = repair(&mut repaired, old);

    // Never healthier: each list kept says every valid status its input said, or, when it is
    // full, the most severe one.
    let (before, after) = (new.statuses(), repaired.statuses());
    for (name, kept) in &after {
        let given = before.get(name).cloned().unwrap_or_default();
        let full = kept.len() == 16;
        let valid: Vec<&String> = given.iter().filter(|s| severity(s) > 0).collect();
        let most = valid.iter().map(|s| severity(s)).max().unwrap_or(0);
        let kept_most = kept.iter().map(|s| severity(s)).max().unwrap_or(0);
        prop_assert!(kept_most >= most, "{name}: {given:?} became {kept:?}");
        if !full {
            for status in valid {
                prop_assert!(kept.contains(status), "{name}: {given:?} became {kept:?}");
            }
        }
    }

    // The repaired value is accepted, by the rules and by a status write's admission.
    prop_assert_eq!(validate(&repaired, old), vec![], "repairs: {:?}", repairs);
    let policy = Settings::with_gate(true);
    let verdict = AdmissionRequest::write(Operation::Update, Some(&repaired), old)
        .with_subresource("status")
        .validate(&policy)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        matches!(verdict, Verdict::Allowed),
        "{:?}",
        verdict.message()
    );

    // Repairing it again changes nothing.
    let mut again = repaired.clone();
    prop_assert_eq!(repair(&mut again, old), vec![]);
    prop_assert_eq!(&again, &repaired);

    // A repair is reported exactly when the value changed.
    prop_assert_eq!(repairs.is_empty(), &repaired == new);

    // An input the library accepts is never changed.
    let accepted = validate(new, old).is_empty();
    if accepted {
        prop_assert_eq!(&repairs, &vec![]);
        prop_assert_eq!(&repaired, new);
    }

    let mut figures = figures
        .lock()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    figures.cases += 1;
    figures.with_old += usize::from(old.is_some());
    figures.accepted += usize::from(accepted);
    figures.accepted_by_ratcheting += usize::from(accepted && !validate(new, None).is_empty());
    figures.repaired += usize::from(!repairs.is_empty());
    figures.repairs += repairs.len();
    for repair in &repairs {
        *figures.kinds.entry(kind_name(repair)).or_default() += 1;
    }
    Ok(())
}

fn run<K: std::fmt::Debug>(
    name: &str,
    strategy: impl Strategy<Value = (K, Option<K>)>,
    case: impl Fn(&K, Option<&K>, &Mutex<Figures>) -> Result<(), TestCaseError>,
) -> Figures {
    let figures = Mutex::new(Figures::default());
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |(new, old)| case(&new, old.as_ref(), &figures));
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
    let figures = figures.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!("{name}: {figures:#?}");
    figures
}

/// Each kind of input the generator is meant to produce showed up, and so did each repair.
fn assert_covered(figures: &Figures, kinds: &[&str]) {
    assert_eq!(figures.cases, CASES as usize);
    assert!(figures.with_old > figures.cases / 3, "{figures:?}");
    assert!(figures.accepted > figures.cases / 20, "{figures:?}");
    assert!(
        figures.accepted_by_ratcheting > 0,
        "no ratcheting: {figures:?}"
    );
    assert!(figures.repaired > figures.cases / 4, "{figures:?}");
    for kind in kinds {
        assert!(
            figures.kinds.get(*kind).is_some_and(|n| *n > 0),
            "no {kind}: {figures:?}"
        );
    }
}

/// A status's rank, most severe highest; 0 outside the sets.
fn severity(status: &str) -> u8 {
    match status {
        "DataLoss" | "StorageUnreachable" => 3,
        "Inaccessible" => 2,
        "Degraded" | "StorageDegraded" => 1,
        _ => 0,
    }
}

/// The statuses of each list of conditions, by entry name (a claim's list has none).
trait Statuses {
    fn statuses(&self) -> BTreeMap<String, Vec<String>>;
}

impl Statuses for PersistentVolumeClaim {
    fn statuses(&self) -> BTreeMap<String, Vec<String>> {
        let conditions = self
            .status
            .as_ref()
            .and_then(|s| s.health_status.as_ref())
            .and_then(|h| h.health_conditions.as_ref());
        conditions
            .map(|c| (String::new(), c.iter().map(|c| c.status.clone()).collect()))
            .into_iter()
            .collect()
    }
}

impl Statuses for Pod {
    fn statuses(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let entries = self.status.as_ref().and_then(|s| s.volume_health.as_ref());
        for entry in entries.into_iter().flatten() {
            let statuses = out.entry(entry.name.clone()).or_default();
            for c in entry.health_conditions.iter().flatten() {
                statuses.push(c.status.clone());
            }
        }
        out
    }
}

impl Statuses for CSINode {
    fn statuses(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let entries = self.status.as_ref().and_then(|s| s.storage_health.as_ref());
        for entry in entries.into_iter().flatten() {
            let statuses = out.entry(entry.name.clone()).or_default();
            for c in entry.health_conditions.iter().flatten() {
                // A volume status is no storage status.
                let valid = c.status.starts_with("Storage");
                statuses.push(if valid {
                    c.status.clone()
                } else {
                    String::new()
                });
            }
        }
        out
    }
}

const CONDITION_KINDS: [&str; 5] = [
    "ImpossibleCondition(Status)",
    "ReplacedField(Reason)",
    "DuplicateCondition",
    "ConditionPastLimit",
    "MessageCut",
];

#[test]
fn claims_repaired() {
    let figures = run("claims", claims(), |new, old, figures| {
        check(new, old, repair_pvc, validate_pvc, figures)
    });
    assert_covered(&figures, &CONDITION_KINDS);
}

#[test]
fn pods_repaired() {
    let figures = run("pods", pods(), |new, old, figures| {
        check(new, old, repair_pod, validate_pod, figures)
    });
    let mut kinds = CONDITION_KINDS.to_vec();
    kinds.extend(["UnknownVolume", "UnnamedEntry", "MergedEntry"]);
    assert_covered(&figures, &kinds);
}

#[test]
fn csinodes_repaired() {
    let figures = run("csinodes", nodes(), |new, old, figures| {
        check(new, old, repair_csinode, validate_csinode, figures)
    });
    let mut kinds = CONDITION_KINDS.to_vec();
    kinds.retain(|kind| *kind != "DuplicateCondition");
    kinds.extend([
        "ReplacedField(AccessMode)",
        "ReplacedField(VolumeMode)",
        "IndistinctCondition",
        "MergedEntry",
        "InvalidDriverName",
    ]);
    assert_covered(&figures, &kinds);
}

/// The no-op test: a report is unchanged from itself; comparing messages finds every change
/// that ignoring them finds; and a report is unchanged from its own repair under neither
/// policy only when the repair dropped or cut something.
#[test]
fn unchanged_agrees_with_itself() {
    let result = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    })
    .run(&pods(), |(new, old)| {
        let entries = |pod: &Pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.volume_health.clone())
                .unwrap_or_default()
        };
        let (new_entries, old_entries) = (entries(&new), old.as_ref().map(entries));
        for policy in [Policy::IgnoreMessages, Policy::CompareMessages] {
            prop_assert!(unchanged(Some(&new_entries[..]), &new_entries[..], policy));
        }
        let ignoring = unchanged(
            old_entries.as_deref(),
            &new_entries[..],
            Policy::IgnoreMessages,
        );
        let comparing = unchanged(
            old_entries.as_deref(),
            &new_entries[..],
            Policy::CompareMessages,
        );
        prop_assert!(
            !comparing || ignoring,
            "comparing messages is the finer test"
        );
        let mut repaired = new.clone();
        let repairs = repair_pod(&mut repaired, old.as_ref());
        let same = unchanged(
            Some(&new_entries[..]),
            &entries(&repaired)[..],
            Policy::CompareMessages,
        );
        prop_assert!(same || !repairs.is_empty());
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
