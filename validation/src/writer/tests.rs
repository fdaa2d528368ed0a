// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use crate::repair::RepairKind;
use crate::validate_pvc;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeHealthCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::claim_report as plan;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(1_772_000_000 + second).unwrap())
}

fn condition(status: &str, reason: &str, message: &str) -> VolumeHealthCondition {
    VolumeHealthCondition {
        status: status.into(),
        reason: reason.into(),
        message: Some(message.into()),
    }
}

fn claim(status: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": "data-0"}, "status": status})).unwrap()
}

/// The claim after the apiserver applied `patch`, which it must accept.
fn apply(stored: &PersistentVolumeClaim, patch: &Value) -> PersistentVolumeClaim {
    let mut value = serde_json::to_value(stored).unwrap();
    json_patch::merge(&mut value, patch);
    let saved: PersistentVolumeClaim = serde_json::from_value(value).unwrap();
    assert_eq!(validate_pvc(&saved, Some(stored)), vec![], "{patch}");
    saved
}

fn health(claim: &PersistentVolumeClaim) -> Value {
    serde_json::to_value(claim).unwrap()["status"]["healthStatus"].clone()
}

/// One probe of a sequence: (what it shows, the driver's conditions, whether it is written, the
/// `healthStatus` stored after it (`null`: none)).
type Probe = (&'static str, Vec<VolumeHealthCondition>, bool, Value);

/// Probes in sequence, each at its index in seconds, each patch applied before the next.
fn run(start: PersistentVolumeClaim, probes: Vec<Probe>) {
    let mut stored = start;
    for (second, (what, conditions, written, expected)) in (0..).zip(probes) {
        let plan = plan(&stored, conditions, &at(second));
        assert_eq!(plan.patch.is_some(), written, "{what}: {:?}", plan.patch);
        if let Some(patch) = &plan.patch {
            stored = apply(&stored, patch);
        }
        assert_eq!(health(&stored), expected, "{what}");
    }
}

#[test]
fn a_monitor_writes_what_changed_and_keeps_the_transition_time() {
    let throttled = || condition("Degraded", "IOPSThrottled", "throttled");
    let lost = || condition("DataLoss", "BlocksLost", "3 blocks");
    let stored = |conditions: Value, second: i64| json!({"healthConditions": conditions, "lastTransitionTime": at(second)});
    run(
        claim(json!({"phase": "Bound"})),
        vec![
            (
                "first report: written at its time",
                vec![throttled()],
                true,
                stored(json!([throttled()]), 0),
            ),
            (
                "the same report: not written",
                vec![throttled()],
                false,
                stored(json!([throttled()]), 0),
            ),
            (
                "a new message: written, the time kept",
                vec![condition("Degraded", "IOPSThrottled", "throttled harder")],
                true,
                stored(
                    json!([condition("Degraded", "IOPSThrottled", "throttled harder")]),
                    0,
                ),
            ),
            (
                "another condition: written at its time",
                vec![
                    condition("Degraded", "IOPSThrottled", "throttled harder"),
                    lost(),
                ],
                true,
                stored(
                    json!([
                        condition("Degraded", "IOPSThrottled", "throttled harder"),
                        lost()
                    ]),
                    3,
                ),
            ),
            (
                "the same conditions in another order: not written",
                vec![
                    lost(),
                    condition("Degraded", "IOPSThrottled", "throttled harder"),
                ],
                false,
                stored(
                    json!([
                        condition("Degraded", "IOPSThrottled", "throttled harder"),
                        lost()
                    ]),
                    3,
                ),
            ),
            (
                "one condition gone: written at its time",
                vec![lost()],
                true,
                stored(json!([lost()]), 5),
            ),
            ("healthy: cleared", vec![], true, Value::Null),
            ("healthy again: not written", vec![], false, Value::Null),
            (
                "a status that can never be valid: nothing to write",
                vec![condition("Unknown", "Probe", "")],
                false,
                Value::Null,
            ),
            (
                "a reason that can never be valid: still degraded, the reason in the message",
                vec![condition("Degraded", "1st", "")],
                true,
                json!({
                    "healthConditions": [condition("Degraded", "InvalidReason", "reason: 1st")],
                    "lastTransitionTime": at(9),
                }),
            ),
        ],
    );
}

#[test]
fn a_report_the_apiserver_would_refuse_is_repaired_before_it_is_written() {
    let long = "x".repeat(1500);
    let report = vec![
        condition("Degraded", "IOPSThrottled", &long),
        condition("Degraded", "IOPSThrottled", "throttled again"),
        condition("Inaccessible", "", "no reason"),
    ];
    let stored = claim(json!({}));
    let planned = plan(&stored, report.clone(), &at(0));
    let kinds: Vec<(&str, RepairKind)> = planned
        .repairs
        .iter()
        .map(|r| (r.path.as_str(), r.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            (
                "status.healthStatus.healthConditions[0].message",
                RepairKind::MessageCut {
                    from: 1500,
                    to: 1024
                }
            ),
            (
                "status.healthStatus.healthConditions[1]",
                RepairKind::DuplicateCondition
            ),
            (
                "status.healthStatus.healthConditions[2]",
                RepairKind::ReplacedField(crate::repair::Impossible::Reason)
            ),
        ]
    );
    let patch = planned.patch.unwrap();
    let saved = apply(&stored, &patch);
    assert_eq!(
        health(&saved),
        json!({
            "healthConditions": [
                condition("Degraded", "IOPSThrottled", &long[..1024]),
                condition("Inaccessible", "InvalidReason", "no reason"),
            ],
            "lastTransitionTime": at(0),
        })
    );
    // The same driver report on the next probe repairs to what is stored: nothing to write.
    let again = plan(&saved, report, &at(1));
    assert_eq!(again.patch, None);
    assert_eq!(again.repairs.len(), 3);
}

#[test]
fn the_patch_is_a_merge_patch_of_the_status_alone() {
    let stored = claim(json!({
        "phase": "Bound",
        "healthStatus": {
            "healthConditions": [condition("Degraded", "IOPSThrottled", "throttled")],
            "lastTransitionTime": at(0),
        },
    }));
    let moved = plan(
        &stored,
        vec![condition("DataLoss", "BlocksLost", "")],
        &at(9),
    );
    assert_eq!(
        moved.patch,
        Some(json!({"status": {"healthStatus": {
            "healthConditions": [{"status": "DataLoss", "reason": "BlocksLost", "message": ""}],
            "lastTransitionTime": at(9),
        }}}))
    );
    // Clearing sends `null`, which removes the member; nothing else of the status is named.
    let cleared = plan(&stored, vec![], &at(9));
    assert_eq!(
        cleared.patch,
        Some(json!({"status": {"healthStatus": null}}))
    );
    assert_eq!(
        serde_json::to_value(apply(&stored, &cleared.patch.unwrap())).unwrap()["status"],
        json!({"phase": "Bound"})
    );
}
