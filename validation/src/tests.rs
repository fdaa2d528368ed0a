//! Rule tables: every field rule and its boundaries, run through a request made from raw JSON
//! objects and, for parity, through the typed API.

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::admission::*;
use crate::field::*;
use crate::identity::*;
use crate::rules::*;
use crate::*;

/// The parts of an admission request the decisions read, objects as JSON text.
#[derive(Clone, Copy)]
struct AdmissionInput<'a> {
    resource: HealthResource,
    subresource: &'a str,
    operation: Operation,
    name: &'a str,
    user: &'a UserInfo<'a>,
    object: Option<&'a RawValue>,
    old_object: Option<&'a RawValue>,
}

impl<'a> AdmissionInput<'a> {
    fn request(&self) -> AdmissionRequest<'a> {
        AdmissionRequest::new(self.resource, self.operation)
            .with_subresource(self.subresource)
            .with_name(self.name)
            .with_user(self.user.clone())
            .with_objects(self.object, self.old_object)
    }
}

/// What a decision said of an object that is not its kind.
#[derive(Debug)]
struct Undecoded {
    field: &'static str,
    message: String,
}

fn undecoded(err: DecodeError) -> Undecoded {
    Undecoded {
        field: err.field(),
        message: err.to_string(),
    }
}

fn validate_admission(input: &AdmissionInput<'_>, policy: &Settings) -> Result<Verdict, Undecoded> {
    input.request().validate(policy).map_err(undecoded)
}

fn gated_field_to_drop(
    input: &AdmissionInput<'_>,
    gate_enabled: bool,
) -> Result<Option<&'static str>, Undecoded> {
    input
        .request()
        .gated_field_to_drop(gate_enabled)
        .map(|drop| drop.map(DropOnSave::pointer))
        .map_err(undecoded)
}

fn raw(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).unwrap()
}

/// Field errors of an UPDATE (or CREATE when `old` is `None`) by an administrator.
fn errors_of(resource: HealthResource, new: &Value, old: Option<&Value>) -> Vec<String> {
    let user = UserInfo {
        username: "system:admin".into(),
        groups: Groups::of(&["system:masters"]),
    };
    let (new_raw, old_raw) = (raw(new), old.map(raw));
    let input = AdmissionInput {
        resource,
        subresource: "status",
        operation: if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        },
        name: "",
        user: &user,
        object: Some(&new_raw),
        old_object: old_raw.as_deref(),
    };
    let from_raw = match validate_admission(&input, &Settings::default()).unwrap() {
        Verdict::Allowed => vec![],
        Verdict::Invalid(Invalid { errors, .. }) => errors,
        forbidden => panic!("unexpected {forbidden:?}"),
    };
    let typed = typed_errors(resource, new, old);
    assert_eq!(from_raw, typed, "raw and typed entry points disagree");
    let written = typed_request_errors(resource, new, old, &user);
    assert_eq!(from_raw, written, "raw and typed requests disagree");
    from_raw.iter().map(ToString::to_string).collect()
}

/// The field errors of the same write made in-process from typed objects.
fn typed_request_errors(
    resource: HealthResource,
    new: &Value,
    old: Option<&Value>,
    user: &UserInfo<'_>,
) -> ErrorList {
    fn errors<K: HealthObject + serde::de::DeserializeOwned>(
        new: &Value,
        old: Option<&Value>,
        user: &UserInfo<'_>,
    ) -> ErrorList {
        let new: K = serde_json::from_value(new.clone()).unwrap();
        let old: Option<K> = old.map(|old| serde_json::from_value(old.clone()).unwrap());
        let operation = if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        };
        let request = AdmissionRequest::write(operation, Some(&new), old.as_ref())
            .with_subresource("status")
            .with_user(user.clone());
        match request.validate(&Settings::default()).unwrap() {
            Verdict::Allowed => vec![],
            Verdict::Invalid(Invalid { errors, .. }) => errors,
            forbidden => panic!("unexpected {forbidden:?}"),
        }
    }
    match resource {
        HealthResource::Pods => errors::<k8s_openapi::api::core::v1::Pod>(new, old, user),
        HealthResource::PersistentVolumeClaims => {
            errors::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(new, old, user)
        }
        HealthResource::CsiNodes => {
            errors::<k8s_openapi::api::storage::v1::CSINode>(new, old, user)
        }
    }
}

fn typed_errors(resource: HealthResource, new: &Value, old: Option<&Value>) -> ErrorList {
    fn de<T: serde::de::DeserializeOwned>(v: &Value) -> T {
        serde_json::from_value(v.clone()).unwrap()
    }
    match resource {
        HealthResource::Pods => validate_pod(&de(new), old.map(de).as_ref()),
        HealthResource::PersistentVolumeClaims => validate_pvc(&de(new), old.map(de).as_ref()),
        HealthResource::CsiNodes => validate_csinode(&de(new), old.map(de).as_ref()),
    }
}

fn pod(volume_health: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "foo", "namespace": "default"},
        "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "i"}],
                 "volumes": [{"name": "vol", "persistentVolumeClaim": {"claimName": "c"}},
                             {"name": "vol2", "emptyDir": {}}]},
        "status": {"phase": "Running", "volumeHealth": volume_health}
    })
}

fn claim(health_status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "claim", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Bound", "healthStatus": health_status}
    })
}

fn csinode(storage_health: Value) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "node1"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1"},
                             {"name": "b.example.com", "nodeID": "n1"}]},
        "status": {"storageHealth": storage_health}
    })
}

fn cond(status: &str, reason: &str) -> Value {
    json!({"status": status, "reason": reason})
}

fn conds(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| cond("Degraded", &format!("Reason{i}")))
            .collect(),
    )
}

fn storage_conds(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| cond("StorageDegraded", &format!("Reason{i}")))
            .collect(),
    )
}

const PVC: HealthResource = HealthResource::PersistentVolumeClaims;
const POD: HealthResource = HealthResource::Pods;
const NODE: HealthResource = HealthResource::CsiNodes;
const VOLUME_STATUSES: &str = r#"supported values: "DataLoss", "Degraded", "Inaccessible""#;

fn pvc_errors(conditions: Value) -> Vec<String> {
    errors_of(PVC, &claim(json!({"healthConditions": conditions})), None)
}

fn pod_errors(volume_health: Value) -> Vec<String> {
    errors_of(POD, &pod(volume_health), None)
}

fn node_errors(storage_health: Value) -> Vec<String> {
    errors_of(NODE, &csinode(storage_health), None)
}

fn one_driver(conditions: Value) -> Value {
    json!([{"name": "csi.example.com", "healthConditions": conditions}])
}

const PVC_C0: &str = "status.healthStatus.healthConditions[0]";

/// Lists longer than the decoded reader holds, with repeated names and an old object: the
/// typed entry points answer as the review's JSON does.
#[test]
fn long_lists_read_typed_as_from_json() {
    let entries = |n: usize, conditions: usize| {
        Value::Array(
            (0..n)
                .map(|i| {
                    json!({"name": format!("d{}.example.com", i % (n / 2)),
                           "healthConditions": storage_conds(conditions)})
                })
                .collect(),
        )
    };
    let (new, old) = (entries(200, 2), entries(150, 1));
    let errors = errors_of(NODE, &csinode(new.clone()), Some(&csinode(old)));
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.contains("Duplicate value"))
            .count(),
        100,
        "{errors:?}"
    );
    let names: Value = Value::Array(
        (0..200)
            .map(|i| json!({"name": format!("v{}", i % 100)}))
            .collect(),
    );
    let errors = errors_of(POD, &pod(names), None);
    assert_eq!(
        errors
            .iter()
            .filter(|e| e.contains("Duplicate value"))
            .count(),
        100
    );
}

/// A typed list of any length is checked in time linear in it, as a review's is.
#[test]
fn long_typed_lists_take_linear_time() {
    use k8s_openapi::api::storage::v1::{CSINode, CSINodeStatus, StorageHealth};
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let entries = (0..100_000)
            .map(|_| StorageHealth {
                name: "csi.example.com".into(),
                ..Default::default()
            })
            .collect();
        let node = CSINode {
            status: Some(CSINodeStatus {
                storage_health: Some(entries),
            }),
            ..Default::default()
        };
        let _ = done.send(validate_csinode(&node, None).len());
    });
    // Quadratic name comparisons (10^10) would take many minutes here.
    let errors = finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("100,000 typed entries checked within two minutes");
    assert_eq!(errors, 99_999);
}

#[test]
fn valid_objects_pass() {
    assert!(pvc_errors(json!([cond("Inaccessible", "VolumeNotFound")])).is_empty());
    assert!(pvc_errors(json!([cond("DataLoss", "X"), cond("Degraded", "X")])).is_empty());
    assert!(
        pod_errors(
            json!([{"name": "vol", "healthConditions": [cond("Degraded", "DiskSlow")]},
                             {"name": "vol2"}])
        )
        .is_empty()
    );
    assert!(node_errors(json!([
        {"name": "csi.example.com", "healthConditions": [{
            "status": "StorageUnreachable", "reason": "NetworkPartition", "message": "down",
            "accessMode": "ReadWriteMany", "volumeMode": "Filesystem",
            "lastTransitionTime": "2026-07-20T12:00:00Z"}]},
        {"name": "b.example.com", "healthConditions": [cond("StorageUnreachable", "NetworkPartition")]}
    ]))
    .is_empty());
}

#[test]
fn empty_and_absent_are_valid() {
    for health in [
        json!({}),
        json!({"healthConditions": []}),
        json!(null),
        json!({"healthConditions": null}),
    ] {
        assert!(
            errors_of(PVC, &claim(health.clone()), None).is_empty(),
            "{health}"
        );
    }
    assert!(pod_errors(json!([])).is_empty());
    assert!(pod_errors(json!(null)).is_empty());
    assert!(pod_errors(json!([{"name": "vol", "healthConditions": []}])).is_empty());
    assert!(node_errors(json!([])).is_empty());
    assert!(node_errors(json!([{"name": "csi.example.com"}])).is_empty());
    let no_status = json!({"metadata": {"name": "foo"}, "spec": {}});
    assert!(errors_of(POD, &no_status, None).is_empty());
    assert!(errors_of(PVC, &no_status, None).is_empty());
    assert!(errors_of(NODE, &no_status, None).is_empty());
}

#[test]
fn condition_count_boundary() {
    assert!(pvc_errors(conds(16)).is_empty());
    assert_eq!(
        pvc_errors(conds(17)),
        ["status.healthStatus.healthConditions: Too many: 17: must have at most 16 items"]
    );
    assert!(node_errors(one_driver(storage_conds(16))).is_empty());
    assert_eq!(
        node_errors(one_driver(storage_conds(17))),
        ["status.storageHealth[0].healthConditions: Too many: 17: must have at most 16 items"]
    );
    assert_eq!(
        pod_errors(json!([{"name": "vol", "healthConditions": conds(17)}])),
        ["status.volumeHealth[0].healthConditions: Too many: 17: must have at most 16 items"]
    );
}

#[test]
fn status_required_then_supported() {
    assert_eq!(
        pvc_errors(json!([cond("", "X")])),
        [format!("{PVC_C0}.status: Required value")]
    );
    assert_eq!(
        pvc_errors(json!([{"reason": "X"}])),
        [format!("{PVC_C0}.status: Required value")]
    );
    assert_eq!(
        pvc_errors(json!([cond("Healthy", "X")])),
        [format!(
            r#"{PVC_C0}.status: Unsupported value: "Healthy": {VOLUME_STATUSES}"#
        )]
    );
    assert_eq!(
        pvc_errors(json!([cond("degraded", "X")])),
        [format!(
            r#"{PVC_C0}.status: Unsupported value: "degraded": {VOLUME_STATUSES}"#
        )],
        "case-sensitive"
    );
    assert_eq!(
        node_errors(one_driver(json!([cond("Unknown", "X")]))),
        [
            r#"status.storageHealth[0].healthConditions[0].status: Unsupported value: "Unknown": supported values: "StorageDegraded", "StorageUnreachable""#
        ]
    );
    assert_eq!(
        node_errors(one_driver(json!([cond("Degraded", "X")]))),
        [
            r#"status.storageHealth[0].healthConditions[0].status: Unsupported value: "Degraded": supported values: "StorageDegraded", "StorageUnreachable""#
        ],
        "volume statuses are not storage statuses"
    );
}

#[test]
fn reason_required_length_and_format() {
    assert_eq!(
        pvc_errors(json!([cond("Degraded", "")])),
        [format!("{PVC_C0}.reason: Required value")]
    );
    assert_eq!(
        pvc_errors(json!([{"status": "Degraded"}])),
        [format!("{PVC_C0}.reason: Required value")]
    );
    assert!(pvc_errors(json!([cond("Degraded", &"R".repeat(256))])).is_empty());
    assert_eq!(
        pvc_errors(json!([cond("Degraded", &"R".repeat(257))])),
        [format!(
            "{PVC_C0}.reason: Too long: may not be more than 256 bytes"
        )]
    );
    let invalid = pvc_errors(json!([cond("Degraded", "1abc")]));
    assert_eq!(
        invalid,
        [format!(
            r#"{PVC_C0}.reason: Invalid value: "1abc": {}"#,
            crate::rules::names::CONDITION_REASON_DETAIL
        )]
    );
    assert!(pvc_errors(json!([cond("Degraded", "ReasonA,ReasonB:C_1")])).is_empty());
    // Too long and malformed: both, the handwritten format error first.
    let both = pvc_errors(json!([cond("Degraded", &format!("{}-", "R".repeat(256)))]));
    assert_eq!(both.len(), 2);
    assert!(both[0].contains("Invalid value"));
    assert!(both[1].ends_with("Too long: may not be more than 256 bytes"));
}

#[test]
fn volume_limits_count_bytes() {
    // 86 three-byte characters are 258 bytes: too long for a volume reason, fine for storage.
    let reason = format!("A{}", "é".repeat(128));
    assert_eq!(reason.len(), 257);
    let errors = pvc_errors(json!([cond("Degraded", &reason)]));
    assert!(
        errors
            .iter()
            .any(|e| e.ends_with("may not be more than 256 bytes")),
        "{errors:?}"
    );
    let message_ok = "m".repeat(1024);
    assert!(
        pvc_errors(json!([{"status": "Degraded", "reason": "X", "message": message_ok}]))
            .is_empty()
    );
    assert_eq!(
        pvc_errors(json!([{"status": "Degraded", "reason": "X", "message": "m".repeat(1025)}])),
        [format!(
            "{PVC_C0}.message: Too long: may not be more than 1024 bytes"
        )]
    );
    // 256 four-byte characters fit in 1024 bytes; 257 do not.
    assert!(
        pvc_errors(json!([{"status": "Degraded", "reason": "X", "message": "😀".repeat(256)}]))
            .is_empty()
    );
    assert_eq!(
        pvc_errors(json!([{"status": "Degraded", "reason": "X", "message": "😀".repeat(257)}])),
        [format!(
            "{PVC_C0}.message: Too long: may not be more than 1024 bytes"
        )]
    );
    assert!(pvc_errors(json!([{"status": "Degraded", "reason": "X", "message": ""}])).is_empty());
}

#[test]
fn pod_volume_names() {
    assert_eq!(
        pod_errors(json!([{}])),
        ["status.volumeHealth[0].name: Required value"]
    );
    assert_eq!(
        pod_errors(json!([{"name": ""}])),
        ["status.volumeHealth[0].name: Required value"]
    );
    assert_eq!(
        pod_errors(json!([{"name": "other"}])),
        [r#"status.volumeHealth[0].name: Not found: "other""#]
    );
    assert_eq!(
        pod_errors(json!([{"name": "Vol"}])),
        [r#"status.volumeHealth[0].name: Not found: "Vol""#],
        "names are case-sensitive"
    );
    let no_volumes = json!({"metadata": {"name": "foo"}, "spec": {},
                            "status": {"volumeHealth": [{"name": "vol"}]}});
    assert_eq!(
        errors_of(POD, &no_volumes, None),
        [r#"status.volumeHealth[0].name: Not found: "vol""#]
    );
}

/// One row of a rule table: what an UPDATE of `status` by an administrator (a CREATE when `old`
/// is `None`) gets, and the upstream function (Kubernetes v1.37.2) whose answer it is.
struct Row {
    follows: &'static str,
    what: &'static str,
    resource: HealthResource,
    new: Value,
    old: Option<Value>,
    want: Vec<String>,
}

fn row(follows: &'static str, resource: HealthResource, new: Value, want: &[&str]) -> Row {
    Row {
        follows,
        what: "",
        resource,
        new,
        old: None,
        want: want.iter().map(|w| (*w).to_owned()).collect(),
    }
}

impl Row {
    fn old(mut self, old: Value) -> Self {
        self.old = Some(old);
        self
    }

    /// What the row shows, beside the code it follows.
    fn what(mut self, what: &'static str) -> Self {
        self.what = what;
        self
    }
}

fn check_rows(rows: Vec<Row>) {
    for (i, row) in rows.into_iter().enumerate() {
        let got = errors_of(row.resource, &row.new, row.old.as_ref());
        assert_eq!(
            got, row.want,
            "row {i} ({}; {}): new {} old {:?}",
            row.follows, row.what, row.new, row.old
        );
    }
}

// The upstream code each row follows: file and function (Kubernetes v1.37.2, apimachinery v0.37.2).
const VOLUME_REASONS: &str =
    "pkg/apis/core/validation/validation.go validateVolumeHealthConditions";
const POD_VOLUME_HEALTH: &str = "pkg/apis/core/validation/validation.go validatePodVolumeHealth";
const CSI_DRIVER_NAME: &str = "pkg/apis/core/validation/validation.go ValidateCSIDriverName";
const VOLUME_HEALTH_STATUS: &str =
    "pkg/apis/core/v1/zz_generated.validations.go Validate_VolumeHealthStatus";
const POD_STATUS: &str = "pkg/apis/core/v1/zz_generated.validations.go Validate_PodStatus";
const POD_VOLUME_HEALTH_DV: &str =
    "pkg/apis/core/v1/zz_generated.validations.go Validate_PodVolumeHealth";
const VOLUME_CONDITION: &str =
    "pkg/apis/core/v1/zz_generated.validations.go Validate_VolumeHealthCondition";
const CSINODE_STATUS: &str =
    "pkg/apis/storage/validation/validation.go ValidateCSINodeStatusUpdate";
const STORAGE_HEALTH: &str = "pkg/apis/storage/validation/validation.go validateStorageHealth";
const STORAGE_CONDITION: &str =
    "pkg/apis/storage/validation/validation.go validateStorageHealthCondition";
const ERROR_BODY: &str = "apimachinery pkg/util/validation/field/errors.go (*Error).ErrorBody";
const OWN_RULE: &str = "this project's own rule, ConditionIdentity::Unique";
const STORAGE_STATUSES: &str = r#"supported values: "StorageDegraded", "StorageUnreachable""#;

fn reason_invalid(path: &str, reason: &str) -> String {
    format!(
        "{path}.reason: Invalid value: {}: {}",
        GoQuoted(reason),
        crate::rules::names::CONDITION_REASON_DETAIL
    )
}

/// Over 16 conditions the declarative checks stop at TooMany (`MaxItems(...).MarkShortCircuit()`)
/// but the handwritten reason format still runs on every item (`validateVolumeHealthConditions`
/// has no limit); the storage conditions of an entry stop at TooMany (`validateStorageHealth`).
#[test]
fn too_many_conditions() {
    let mut list = conds(17);
    let items = list.as_array_mut().unwrap();
    items[0] = cond("", "");
    items[1] = cond("Healthy", "1bad");
    items[2] = items[3].clone();
    let mut storage = storage_conds(17);
    storage.as_array_mut().unwrap()[1] = cond("", "1bad");
    let pvc = claim(json!({"healthConditions": list.clone()}));
    check_rows(vec![
        row(
            VOLUME_HEALTH_STATUS,
            PVC,
            pvc.clone(),
            &[
                &reason_invalid("status.healthStatus.healthConditions[1]", "1bad"),
                "status.healthStatus.healthConditions: Too many: 17: must have at most 16 items",
            ],
        )
        .what("validateVolumeHealthConditions, then Validate_VolumeHealthStatus"),
        row(
            VOLUME_REASONS,
            PVC,
            pvc.clone(),
            &[&reason_invalid(
                "status.healthStatus.healthConditions[1]",
                "1bad",
            )],
        )
        .what("the handwritten check is never ratcheted")
        .old(pvc),
        row(
            POD_VOLUME_HEALTH_DV,
            POD,
            pod(json!([{"name": "vol", "healthConditions": list}])),
            &[
                &reason_invalid("status.volumeHealth[0].healthConditions[1]", "1bad"),
                "status.volumeHealth[0].healthConditions: Too many: 17: must have at most 16 items",
            ],
        )
        .what("validatePodVolumeHealth, then Validate_PodVolumeHealth"),
        row(
            STORAGE_HEALTH,
            NODE,
            csinode(one_driver(storage)),
            &["status.storageHealth[0].healthConditions: Too many: 17: must have at most 16 items"],
        )
        .what("validateStorageHealth"),
    ]);
}

/// `validateStorageHealthCondition` (storage/validation.go): limits in bytes, the format
/// before the length, every field in order, an empty status NotSupported.
#[test]
fn storage_condition_fields() {
    let c0 = "status.storageHealth[0].healthConditions[0]";
    let node = |condition: Value| csinode(one_driver(json!([condition])));
    let message =
        |m: String| node(json!({"status": "StorageDegraded", "reason": "X", "message": m}));
    let access_modes =
        r#"supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#;
    let mut rows = vec![
        row(
            STORAGE_CONDITION,
            NODE,
            message("é".repeat(600)),
            &[&format!(
                "{c0}.message: Too long: may not be more than 1024 bytes"
            )],
        ),
        row(STORAGE_CONDITION, NODE, message("m".repeat(1024)), &[]),
        row(STORAGE_CONDITION, NODE, message("😀".repeat(256)), &[]),
        row(
            STORAGE_CONDITION,
            NODE,
            message("😀".repeat(257)),
            &[&format!(
                "{c0}.message: Too long: may not be more than 1024 bytes"
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(cond("StorageDegraded", &"R".repeat(256))),
            &[],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(cond("StorageDegraded", &"R".repeat(257))),
            &[&format!(
                "{c0}.reason: Too long: may not be more than 256 bytes"
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(cond("StorageDegraded", &format!("A{}", "é".repeat(200)))),
            &[
                &reason_invalid(c0, &format!("A{}", "é".repeat(200))),
                &format!("{c0}.reason: Too long: may not be more than 256 bytes"),
            ],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(cond("", "PoolFull")),
            &[&format!(
                r#"{c0}.status: Unsupported value: "": {STORAGE_STATUSES}"#
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(json!({"reason": "PoolFull"})),
            &[&format!(
                r#"{c0}.status: Unsupported value: "": {STORAGE_STATUSES}"#
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(cond("StorageDegraded", "")),
            &[&format!("{c0}.reason: Required value")],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(json!({"status": "StorageDegraded", "reason": "X", "accessMode": ""})),
            &[&format!(
                r#"{c0}.accessMode: Unsupported value: "": {access_modes}"#
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(json!({"status": "StorageDegraded", "reason": "X", "volumeMode": "block"})),
            &[&format!(
                r#"{c0}.volumeMode: Unsupported value: "block": supported values: "Filesystem", "Block""#
            )],
        ),
        row(
            STORAGE_CONDITION,
            NODE,
            node(
                json!({"status": "Bad", "reason": "1x", "message": "m".repeat(1025),
                        "accessMode": "X", "volumeMode": "Y"}),
            ),
            &[
                &format!(r#"{c0}.status: Unsupported value: "Bad": {STORAGE_STATUSES}"#),
                &reason_invalid(c0, "1x"),
                &format!("{c0}.message: Too long: may not be more than 1024 bytes"),
                &format!(r#"{c0}.accessMode: Unsupported value: "X": {access_modes}"#),
                &format!(
                    r#"{c0}.volumeMode: Unsupported value: "Y": supported values: "Filesystem", "Block""#
                ),
            ],
        )
        .what("validateStorageHealthCondition: status, reason, message, accessMode, volumeMode"),
    ];
    for mode in [
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ] {
        let condition = json!({"status": "StorageDegraded", "reason": "X", "accessMode": mode});
        rows.push(row(STORAGE_CONDITION, NODE, node(condition), &[]));
    }
    for mode in ["Block", "Filesystem"] {
        let condition = json!({"status": "StorageDegraded", "reason": "X", "volumeMode": mode});
        rows.push(row(STORAGE_CONDITION, NODE, node(condition), &[]));
    }
    check_rows(rows);
}

/// `ValidateCSIDriverName` as `validateStorageHealth` calls it: TooLong (63 bytes) before the
/// DNS-1123 checks of the lower-cased name, whose Invalid value is the name as written. No rule
/// asks the name to be in `spec.drivers`.
#[test]
fn csinode_driver_names() {
    let name = |n: &str| csinode(json!([{"name": n}]));
    let long = format!("{}.example.com", "a".repeat(52));
    assert_eq!(long.len(), 64);
    let long_bad = format!("{}_", "a".repeat(63));
    let too_long_dns = "a".repeat(254);
    let dns = crate::rules::names::DNS1123_SUBDOMAIN_DETAIL;
    check_rows(vec![
        row(
            STORAGE_HEALTH,
            NODE,
            csinode(json!([{}])),
            &["status.storageHealth[0].name: Required value"],
        ),
        row(
            STORAGE_HEALTH,
            NODE,
            name(""),
            &["status.storageHealth[0].name: Required value"],
        ),
        row(STORAGE_HEALTH, NODE, name("other.example.com"), &[]).what("no registration check"),
        row(CSI_DRIVER_NAME, NODE, name("CSI.example.com"), &[])
            .what("lower-cased before the check"),
        row(
            CSI_DRIVER_NAME,
            NODE,
            name("csi_example"),
            &[&format!(
                r#"status.storageHealth[0].name: Invalid value: "csi_example": {dns}"#
            )],
        ),
        row(
            CSI_DRIVER_NAME,
            NODE,
            name(&long),
            &["status.storageHealth[0].name: Too long: may not be more than 63 bytes"],
        ),
        row(
            CSI_DRIVER_NAME,
            NODE,
            name(&long_bad),
            &[
                "status.storageHealth[0].name: Too long: may not be more than 63 bytes",
                &format!(r#"status.storageHealth[0].name: Invalid value: "{long_bad}": {dns}"#),
            ],
        ),
        row(
            CSI_DRIVER_NAME,
            NODE,
            name(&too_long_dns),
            &[
                "status.storageHealth[0].name: Too long: may not be more than 63 bytes",
                &format!(
                    r#"status.storageHealth[0].name: Invalid value: "{too_long_dns}": must be no more than 253 characters"#
                ),
            ],
        ),
    ]);
}

/// Values of a named string type (condition status, accessMode, volumeMode) render as
/// `json.Marshal` writes them; plain strings (reasons, names) as `%q` (`field.Error.ErrorBody`).
#[test]
fn values_render_as_apimachinery_does() {
    let c0 = "status.healthStatus.healthConditions[0]";
    let s0 = "status.storageHealth[0].healthConditions[0]";
    check_rows(vec![
        row(
            ERROR_BODY,
            PVC,
            claim(json!({"healthConditions": [cond("A<B&C", "X")]})),
            &[&format!(
                r#"{c0}.status: Unsupported value: "A\u003cB\u0026C": {VOLUME_STATUSES}"#
            )],
        )
        .what("ErrorBody: json.Marshal"),
        row(
            ERROR_BODY,
            PVC,
            claim(json!({"healthConditions": [cond("a\u{1}", "X")]})),
            &[&format!(
                r#"{c0}.status: Unsupported value: "a\u0001": {VOLUME_STATUSES}"#
            )],
        )
        .what("ErrorBody: json.Marshal"),
        row(
            ERROR_BODY,
            PVC,
            claim(json!({"healthConditions": [cond("a\u{7f}", "X")]})),
            &[&format!(
                "{c0}.status: Unsupported value: \"a\u{7f}\": {VOLUME_STATUSES}"
            )],
        )
        .what("ErrorBody: json.Marshal"),
        row(
            ERROR_BODY,
            NODE,
            csinode(one_driver(
                json!([{"status": "StorageDegraded", "reason": "X", "accessMode": "<x>"}]),
            )),
            &[&format!(
                r#"{s0}.accessMode: Unsupported value: "\u003cx\u003e": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#
            )],
        )
        .what("ErrorBody: json.Marshal"),
        row(
            ERROR_BODY,
            PVC,
            claim(json!({"healthConditions": [cond("Degraded", "a<\u{1}")]})),
            &[&reason_invalid(c0, "a<\u{1}")],
        )
        .what("ErrorBody: %q"),
    ]);
    assert!(reason_invalid(c0, "a<\u{1}").contains(r#""a<\x01""#));
}

/// `ValSliceUnique` reports every later item whose key repeats an earlier one's, its value the
/// whole item; CSINode's handwritten `seen` set reports the name.
#[test]
fn duplicates_are_reported_at_the_later_index() {
    let pvc = |list: Value| claim(json!({"healthConditions": list}));
    let c = "status.healthStatus.healthConditions";
    check_rows(vec![
        row(
            VOLUME_HEALTH_STATUS,
            PVC,
            pvc(json!([cond("Degraded", "A"), cond("Degraded", "B"),
            {"status": "Degraded", "reason": "A", "message": "m"}])),
            &[&format!(
                r#"{c}[2]: Duplicate value: {{"status":"Degraded","reason":"A","message":"m"}}"#
            )],
        ),
        row(
            VOLUME_HEALTH_STATUS,
            PVC,
            pvc(json!([cond("Degraded", "A"), cond("DataLoss", "A")])),
            &[],
        ),
        row(
            VOLUME_HEALTH_STATUS,
            PVC,
            pvc(json!([
                cond("Degraded", "A"),
                cond("Degraded", "A"),
                cond("Degraded", "A")
            ])),
            &[
                &format!(r#"{c}[1]: Duplicate value: {{"status":"Degraded","reason":"A"}}"#),
                &format!(r#"{c}[2]: Duplicate value: {{"status":"Degraded","reason":"A"}}"#),
            ],
        ),
        row(
            POD_STATUS,
            POD,
            pod(json!([{"name": "vol"}, {"name": "vol2"}, {"name": "vol"}])),
            &[
                r#"status.volumeHealth[2]: Duplicate value: {"name":"vol","lastTransitionTime":null}"#,
            ],
        ),
        row(
            POD_STATUS,
            POD,
            pod(json!([{"name": "vol"}, {"name": "vol",
            "healthConditions": [{"status": "Degraded", "reason": "R"}],
            "lastTransitionTime": "2026-07-20T14:00:00+02:00"}])),
            &[
                r#"status.volumeHealth[1]: Duplicate value: {"name":"vol","healthConditions":[{"status":"Degraded","reason":"R"}],"lastTransitionTime":"2026-07-20T12:00:00Z"}"#,
            ],
        ),
        row(
            POD_STATUS,
            POD,
            pod(json!([{"name": ""}, {"name": ""}])),
            &[
                "status.volumeHealth[1]: Duplicate value: {\"name\":\"\",\"lastTransitionTime\":null}",
                "status.volumeHealth[0].name: Required value",
                "status.volumeHealth[1].name: Required value",
            ],
        )
        .what("ValSliceUnique: two empty names too"),
        row(
            CSINODE_STATUS,
            NODE,
            csinode(json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}])),
            &[r#"status.storageHealth[1]: Duplicate value: "csi.example.com""#],
        ),
        row(
            CSINODE_STATUS,
            NODE,
            csinode(json!([
                {"name": "csi.example.com", "healthConditions": [cond("StorageDegraded", "PoolFull")]},
                {"name": "b.example.com", "healthConditions": [cond("StorageDegraded", "PoolFull")]}
            ])),
            &[],
        )
        .what("the same condition for two drivers"),
    ]);
}

/// Handwritten checks come first; inside the declarative ones a list's TooMany or Duplicate
/// errors come before its items' errors. CSINode is one handwritten pass in field order.
#[test]
fn errors_in_kubernetes_order() {
    let c = "status.healthStatus.healthConditions";
    check_rows(vec![
        row(
            POD_VOLUME_HEALTH,
            POD,
            pod(json!([
                {"name": "vol", "healthConditions": [cond("", "1bad")]},
                {"name": "missing", "healthConditions": [cond("Degraded", "")]}
            ])),
            &[
                &reason_invalid("status.volumeHealth[0].healthConditions[0]", "1bad"),
                r#"status.volumeHealth[1].name: Not found: "missing""#,
                "status.volumeHealth[0].healthConditions[0].status: Required value",
                "status.volumeHealth[1].healthConditions[0].reason: Required value",
            ],
        )
        .what("validatePodVolumeHealth, then Validate_PodStatus"),
        row(
            POD_STATUS,
            POD,
            pod(json!([
                {"name": "vol", "healthConditions": [cond("Bogus", "R")]},
                {"name": "vol"}
            ])),
            &[
                r#"status.volumeHealth[1]: Duplicate value: {"name":"vol","lastTransitionTime":null}"#,
                &format!(
                    r#"status.volumeHealth[0].healthConditions[0].status: Unsupported value: "Bogus": {VOLUME_STATUSES}"#
                ),
            ],
        )
        .what("Validate_PodStatus: Unique before EachValSliceVal"),
        row(
            VOLUME_HEALTH_STATUS,
            PVC,
            claim(json!({"healthConditions": [
                {"status": "Degraded", "reason": "R", "message": "x".repeat(1025)},
                cond("Degraded", "R")
            ]})),
            &[
                &format!(r#"{c}[1]: Duplicate value: {{"status":"Degraded","reason":"R"}}"#),
                &format!("{c}[0].message: Too long: may not be more than 1024 bytes"),
            ],
        )
        .what("Validate_VolumeHealthStatus: Unique before EachValSliceVal"),
        row(
            CSINODE_STATUS,
            NODE,
            csinode(json!([
                {"name": "a.example.com", "healthConditions": [cond("StorageDegraded", &"r".repeat(300))]},
                {"name": "Bad_Name"}
            ])),
            &[
                "status.storageHealth[0].healthConditions[0].reason: Too long: may not be more than 256 bytes",
                &format!(
                    r#"status.storageHealth[1].name: Invalid value: "Bad_Name": {}"#,
                    crate::rules::names::DNS1123_SUBDOMAIN_DETAIL
                ),
            ],
        )
        .what("ValidateCSINodeStatusUpdate: one pass"),
        row(
            CSINODE_STATUS,
            NODE,
            csinode(json!([
                {"name": "a.example.com"},
                {"name": "a.example.com", "healthConditions": [cond("Bad", "R")]}
            ])),
            &[
                r#"status.storageHealth[1]: Duplicate value: "a.example.com""#,
                &format!(
                    r#"status.storageHealth[1].healthConditions[0].status: Unsupported value: "Bad": {STORAGE_STATUSES}"#
                ),
            ],
        )
        .what("ValidateCSINodeStatusUpdate: the Duplicate before the entry's own errors"),
    ]);
}

/// Ratcheting as the generated code does it: an unchanged list is not checked; an item matched
/// by its key to an old one is checked only in the fields that changed, so the key never is.
#[test]
fn ratcheting_is_per_field() {
    let pvc = |list: Value| claim(json!({"healthConditions": list}));
    let c = "status.healthStatus.healthConditions";
    let bad = cond("Healthy", "X");
    let stored = pvc(json!([bad.clone()]));
    check_rows(vec![
        row(VOLUME_HEALTH_STATUS, PVC, stored.clone(), &[])
        .what("unchanged list").old(stored.clone()),
        row(VOLUME_HEALTH_STATUS, PVC,
            pvc(json!([bad.clone(), cond("Unknown", "Y")])), &[
            &format!(r#"{c}[1].status: Unsupported value: "Unknown": {VOLUME_STATUSES}"#),
        ])
        .what("an unchanged item beside a new one").old(stored.clone()),
        row(VOLUME_CONDITION, PVC,
            pvc(json!([{"status": "Healthy", "reason": "X", "message": "m"}])), &[])
        .what("the message changed: only the message is checked").old(stored.clone()),
        row(VOLUME_CONDITION, PVC,
            pvc(json!([{"status": "Healthy", "reason": "X", "message": "m".repeat(1025)}])), &[
            &format!("{c}[0].message: Too long: may not be more than 1024 bytes"),
        ])
        .what("the message changed, too long").old(stored.clone()),
        row(VOLUME_HEALTH_STATUS, PVC,
            pvc(json!([{"status": "Healthy", "reason": "X", "message": "m".repeat(1025)}, cond("Degraded", "Z")])), &[])
        .what("an unchanged long message is not checked again")
            .old(pvc(json!([{"status": "Healthy", "reason": "X", "message": "m".repeat(1025)}]))),
        row(VOLUME_HEALTH_STATUS, PVC, pvc(json!([cond("Healthy", "Y")])), &[
            &format!(r#"{c}[0].status: Unsupported value: "Healthy": {VOLUME_STATUSES}"#),
        ])
        .what("a new key is a new item").old(stored.clone()),
        row(VOLUME_HEALTH_STATUS, PVC, pvc(conds(17)), &[])
        .what("over the limit, unchanged").old(pvc(conds(17))),
        row(VOLUME_HEALTH_STATUS, PVC, pvc(conds(18)), &[
            &format!("{c}: Too many: 18: must have at most 16 items"),
        ])
        .what("over the limit, changed").old(pvc(conds(17))),
        row(VOLUME_HEALTH_STATUS, PVC, stored.clone(), &[
            &format!(r#"{c}[0].status: Unsupported value: "Healthy": {VOLUME_STATUSES}"#),
        ])
        .what("an old claim without healthStatus").old(claim(json!(null))),
        row(VOLUME_HEALTH_STATUS, PVC,
            pvc(json!([cond("Degraded", "A"), cond("Degraded", "A")])), &[
            &format!(r#"{c}[1]: Duplicate value: {{"status":"Degraded","reason":"A"}}"#),
        ])
        .what("Unique is not ratcheted per item").old(pvc(json!([cond("Degraded", "A")]))),
        row(VOLUME_HEALTH_STATUS, PVC, stored.clone(), &[
            &format!(r#"{c}[0].status: Unsupported value: "Healthy": {VOLUME_STATUSES}"#),
        ])
        .what("CREATE: nothing to ratchet against"),
        row(POD_VOLUME_HEALTH_DV, POD,
            pod(json!([{"name": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}])), &[])
        .what("an entry's name is its key")
            .old(pod(json!([{"name": ""}]))),
        row(POD_VOLUME_HEALTH_DV, POD, pod(json!([{"name": "vol"}, {"name": ""}])), &[
            "status.volumeHealth[1].name: Required value",
        ])
        .what("a new entry with no name").old(pod(json!([{"name": "vol"}]))),
        row(POD_VOLUME_HEALTH_DV, POD,
            pod(json!([{"name": "vol", "healthConditions": [{"status": "Bogus", "reason": "R", "message": "changed"}]}])), &[])
        .what("an entry's conditions, matched by key")
            .old(pod(json!([{"name": "vol", "healthConditions": [cond("Bogus", "R")]}]))),
        row(POD_STATUS, POD,
            pod(json!([{"name": "vol2"}, {"name": "vol", "healthConditions": [bad.clone()]}])), &[])
        .what("a reordered list keeps its matches")
            .old(pod(json!([{"name": "vol", "healthConditions": [bad.clone()]}]))),
        row(POD_VOLUME_HEALTH_DV, POD,
            pod(json!([{"name": "vol", "healthConditions": [bad.clone(), cond("Nope", "Y")]}])), &[
            &format!(r#"status.volumeHealth[0].healthConditions[1].status: Unsupported value: "Nope": {VOLUME_STATUSES}"#),
        ])
        .what("a changed entry, a new condition").old(pod(json!([{"name": "vol", "healthConditions": [bad.clone()]}]))),
    ]);
}

/// Handwritten checks are never ratcheted: the Pod's name and reason checks, and every CSINode
/// check (all of `ValidateCSINodeStatusUpdate` is handwritten).
#[test]
fn handwritten_checks_are_never_ratcheted() {
    let stored_pod = pod(json!([{"name": "gone", "healthConditions": [cond("Degraded", "1bad")]}]));
    let stored_node = csinode(json!([
        {"name": "csi.example.com", "healthConditions": [cond("", "R")]},
        {"name": "csi.example.com"}
    ]));
    check_rows(vec![
        row(POD_VOLUME_HEALTH, POD, stored_pod.clone(), &[
            r#"status.volumeHealth[0].name: Not found: "gone""#,
            &reason_invalid("status.volumeHealth[0].healthConditions[0]", "1bad"),
        ]).old(stored_pod),
        row(CSINODE_STATUS, NODE, stored_node.clone(), &[
            &format!(r#"status.storageHealth[0].healthConditions[0].status: Unsupported value: "": {STORAGE_STATUSES}"#),
            r#"status.storageHealth[1]: Duplicate value: "csi.example.com""#,
        ]).old(stored_node),
    ]);
}

/// This project's own rule (in-tree has none): within one driver, one identity per condition,
/// ratcheted per entry, reported after upstream's errors, and off with
/// [`ConditionIdentity::InTree`].
#[test]
fn storage_condition_identity() {
    let scoped = json!([
        {"status": "StorageDegraded", "reason": "HighLatency", "accessMode": "ReadWriteOnce"},
        {"status": "StorageDegraded", "reason": "HighLatency", "accessMode": "ReadOnlyMany"},
        {"status": "StorageDegraded", "reason": "HighLatency", "volumeMode": "Block"}
    ]);
    let twice = json!([
        cond("StorageDegraded", "PoolFull"),
        {"status": "StorageDegraded", "reason": "PoolFull", "message": "twice"}
    ]);
    let dup = r#"status.storageHealth[0].healthConditions[1]: Duplicate value: {"status":"StorageDegraded","reason":"PoolFull","message":"twice","lastTransitionTime":null}"#;
    let stale = json!({"name": "csi.example.com", "healthConditions": twice.clone()});
    check_rows(vec![
        row(OWN_RULE, NODE, csinode(one_driver(scoped)), &[])
        .what("scoped by access and volume mode"),
        row(OWN_RULE, NODE, csinode(one_driver(twice.clone())), &[dup])
        .what("the same four fields"),
        row(OWN_RULE, NODE, csinode(json!([
            {"name": "csi.example.com", "healthConditions": twice.clone()},
            {"name": "Bad_Name"}
        ])), &[
            &format!(r#"status.storageHealth[1].name: Invalid value: "Bad_Name": {}"#, crate::rules::names::DNS1123_SUBDOMAIN_DETAIL),
            dup,
        ])
        .what("after upstream's errors"),
        row(OWN_RULE, NODE, csinode(json!([
            stale.clone(),
            {"name": "b.example.com", "healthConditions": [cond("StorageUnreachable", "Down")]}
        ])), &[])
        .what("a stored report never blocks another driver's").old(csinode(json!([stale.clone()]))),
        row(OWN_RULE, NODE, csinode(json!([
            {"name": "csi.example.com", "healthConditions": [twice[0].clone(), twice[1].clone(), cond("StorageUnreachable", "Down")]}
        ])), &[dup])
        .what("a changed entry is checked again").old(csinode(json!([stale]))),
    ]);
    let new = csinode(one_driver(twice));
    let in_tree = Settings {
        storage_condition_identity: ConditionIdentity::InTree,
        ..Settings::with_gate(true)
    };
    let (new_raw, user) = (raw(&new), UserInfo::default());
    let request = AdmissionRequest::new(NODE, Operation::Update)
        .with_subresource("status")
        .with_user(user)
        .with_objects(Some(&new_raw), None);
    assert_eq!(request.validate(&in_tree).unwrap(), Verdict::Allowed);
    let typed: k8s_openapi::api::storage::v1::CSINode = serde_json::from_value(new).unwrap();
    let health = typed.status.as_ref().unwrap().storage_health.as_deref();
    assert!(validate_storage_health(health, None, ConditionIdentity::InTree).is_empty());
    assert_eq!(
        validate_storage_health(health, None, ConditionIdentity::Unique)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [dup]
    );
}

/// A kubelet-shaped CSINode lifecycle, as `pkg/volume/csi/nodeinfomanager` writes it: register
/// a driver, report its health (one reason for two access modes), unregister it (the health
/// entry stays), register another and report again. Every write is allowed.
#[test]
fn kubelet_csinode_lifecycle_is_allowed() {
    let node = |drivers: &[&str], health: Option<Value>| {
        let drivers: Vec<Value> = drivers
            .iter()
            .map(|d| json!({"name": d, "nodeID": "node1", "topologyKeys": null}))
            .collect();
        let mut object = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": "node1"}, "spec": {"drivers": drivers}});
        if let Some(health) = health {
            object["status"] = json!({"storageHealth": health});
        }
        object
    };
    let a_health = json!({"name": "a.example.com", "healthConditions": [
        {"status": "StorageDegraded", "reason": "HighLatency", "accessMode": "ReadWriteOnce",
         "lastTransitionTime": "2026-07-20T12:00:00Z"},
        {"status": "StorageDegraded", "reason": "HighLatency", "accessMode": "ReadOnlyMany",
         "lastTransitionTime": "2026-07-20T12:00:00Z"}
    ]});
    let b_health = json!({"name": "b.example.com", "healthConditions": [
        {"status": "StorageUnreachable", "reason": "NetworkPartition"}
    ]});
    let registered = node(&["a.example.com"], None);
    let reported = node(&["a.example.com"], Some(json!([a_health.clone()])));
    let unregistered = node(&[], Some(json!([a_health.clone()])));
    let other = node(&["b.example.com"], Some(json!([a_health.clone()])));
    let reported_again = node(&["b.example.com"], Some(json!([a_health, b_health])));
    let steps: [(&str, Operation, &Value, Option<&Value>); 5] = [
        ("", Operation::Create, &registered, None),
        ("status", Operation::Update, &reported, Some(&registered)),
        ("", Operation::Update, &unregistered, Some(&reported)),
        ("", Operation::Update, &other, Some(&unregistered)),
        ("status", Operation::Update, &reported_again, Some(&other)),
    ];
    let kubelet = UserInfo {
        username: "system:node:node1".into(),
        groups: Groups::of(&["system:nodes", "system:authenticated"]),
    };
    let settings = Settings::with_gate(true);
    for (i, (subresource, operation, new, old)) in steps.into_iter().enumerate() {
        let (new, old) = (raw(new), old.map(raw));
        let request = AdmissionRequest::new(NODE, operation)
            .with_subresource(subresource)
            .with_name("node1")
            .with_user(kubelet.clone())
            .with_objects(Some(&new), old.as_deref());
        assert_eq!(
            request.validate(&settings).unwrap(),
            Verdict::Allowed,
            "step {i}"
        );
    }
}

/// On a write of the object itself the apiserver keeps the stored status, so the gated fields
/// are not validated there: stored data never blocks a change of the spec. The same objects
/// written to `status` are refused, which shows the objects are invalid.
#[test]
fn spec_update_beside_stored_invalid_status_is_allowed() {
    let mut resized = claim(json!({"healthConditions": [cond("Degraded", "bad reason")]}));
    let stored = resized.clone();
    resized["spec"]["resources"] = json!({"requests": {"storage": "2Gi"}});
    let mut relabelled = pod(json!([{"name": "gone", "healthConditions": [cond("Bogus", "R")]}]));
    let stored_pod = relabelled.clone();
    relabelled["metadata"]["labels"] = json!({"app": "web"});
    let stored_node = csinode(json!([{"name": "gone.example.com",
        "healthConditions": [cond("", "R")]}, {"name": "gone.example.com"}]));
    let mut unregistered = stored_node.clone();
    unregistered["spec"]["drivers"] = json!([]);
    let admin = UserInfo {
        username: "system:admin".into(),
        groups: Groups::of(&["system:masters"]),
    };
    let settings = Settings::with_gate(true);
    for (resource, new, old) in [
        (PVC, &resized, &stored),
        (POD, &relabelled, &stored_pod),
        (NODE, &unregistered, &stored_node),
    ] {
        let (new, old) = (raw(new), raw(old));
        for (subresource, allowed) in [("", true), ("status", false)] {
            let request = AdmissionRequest::new(resource, Operation::Update)
                .with_subresource(subresource)
                .with_name("x")
                .with_user(admin.clone())
                .with_objects(Some(&new), Some(&old));
            let verdict = request.validate(&settings).unwrap();
            assert_eq!(
                verdict == Verdict::Allowed,
                allowed,
                "{resource:?} subresource {subresource:?}: {verdict:?}"
            );
        }
    }
}

#[test]
fn invalid_whole_object_message() {
    let user = UserInfo::default();
    let new = raw(&pod(json!([{"name": ""}, {"name": "x"}])));
    let input = AdmissionInput {
        resource: POD,
        subresource: "status",
        operation: Operation::Create,
        name: "",
        user: &user,
        object: Some(&new),
        old_object: None,
    };
    let verdict = validate_admission(&input, &Settings::default()).unwrap();
    let status = verdict.status().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some(
            r#"Pod "foo" is invalid: [status.volumeHealth[1].name: Not found: "x", status.volumeHealth[0].name: Required value]"#
        )
    );
    assert_eq!(verdict.label(), "invalid");
}

mod admission_decisions {
    use super::*;

    fn input<'a>(
        resource: HealthResource,
        subresource: &'a str,
        operation: Operation,
        name: &'a str,
        user: &'a UserInfo<'a>,
        object: Option<&'a serde_json::value::RawValue>,
        old_object: Option<&'a serde_json::value::RawValue>,
    ) -> AdmissionInput<'a> {
        AdmissionInput {
            resource,
            subresource,
            operation,
            name,
            user,
            object,
            old_object,
        }
    }

    fn node1() -> UserInfo<'static> {
        UserInfo {
            username: "system:node:node1".into(),
            groups: Groups::of(&["system:nodes", "system:authenticated"]),
        }
    }

    fn gate(enabled: bool) -> Settings {
        Settings::with_gate(enabled)
    }

    #[test]
    fn forbidden_comes_before_field_errors() {
        let user = node1();
        let mut other = pod(json!([{"name": ""}]));
        other["spec"]["nodeName"] = json!("node2");
        let obj = raw(&other);
        let i = input(
            POD,
            "status",
            Operation::Update,
            "foo",
            &user,
            Some(&obj),
            Some(&obj),
        );
        let verdict = validate_admission(&i, &gate(true)).unwrap();
        let status = verdict.status().unwrap();
        assert_eq!(status.code, Some(403));
        assert_eq!(
            status.message.as_deref(),
            Some(
                r#"pods "foo" is forbidden: node "node1" can only update pod status for pods with spec.nodeName set to itself"#
            )
        );
    }

    /// `code`, `reason` and `message` of a verdict are what its `Status` carries.
    #[test]
    fn verdict_parts_are_its_status_parts() {
        let user = node1();
        let mut other = pod(json!([{"name": ""}]));
        other["spec"]["nodeName"] = json!("node2");
        let (forbidden, invalid, valid) = (
            raw(&other),
            raw(&pod(json!([{"name": ""}, {"name": "x"}]))),
            raw(&pod(json!([]))),
        );
        let admin = UserInfo::default();
        let cases = [
            (&user, &forbidden, &forbidden, "forbidden"),
            (&admin, &invalid, &valid, "invalid"),
            (&admin, &valid, &valid, "allowed"),
        ];
        for (user, obj, old, label) in cases {
            let i = input(
                POD,
                "status",
                Operation::Update,
                "foo",
                user,
                Some(obj),
                Some(old),
            );
            let verdict = validate_admission(&i, &gate(true)).unwrap();
            assert_eq!(verdict.label(), label);
            let status = verdict.status();
            assert_eq!(verdict.code(), status.as_ref().and_then(|s| s.code));
            assert_eq!(
                verdict.reason(),
                status.as_ref().and_then(|s| s.reason.as_deref())
            );
            assert_eq!(
                verdict.message().as_deref(),
                status.as_ref().and_then(|s| s.message.as_deref())
            );
            assert_eq!(verdict.code().is_some(), label != "allowed");
        }
    }

    #[test]
    fn csinode_create_uses_the_object_name() {
        let user = node1();
        let obj = raw(&json!({"metadata": {"name": "node2"}, "spec": {"drivers": []}}));
        let i = input(NODE, "", Operation::Create, "", &user, Some(&obj), None);
        let verdict = validate_admission(&i, &gate(true)).unwrap();
        assert_eq!(
            verdict.status().unwrap().message.as_deref(),
            Some(
                r#"csinodes.storage.k8s.io "node2" is forbidden: can only access CSINode with the same name as the requesting node"#
            )
        );
        let own = raw(&json!({"metadata": {"name": "node1"}, "spec": {"drivers": []}}));
        let i = input(NODE, "", Operation::Create, "", &user, Some(&own), None);
        assert_eq!(
            validate_admission(&i, &gate(true)).unwrap(),
            Verdict::Allowed
        );
    }

    #[test]
    fn claim_health_change_by_node() {
        let user = node1();
        let old = raw(&claim(json!(null)));
        let new = raw(&claim(json!({"healthConditions": [cond("Degraded", "X")]})));
        for (o, n, forbidden) in [
            (&old, &new, true),
            (&new, &old, true),
            (&new, &new, false),
            (&old, &old, false),
        ] {
            let i = input(
                PVC,
                "status",
                Operation::Update,
                "claim",
                &user,
                Some(n),
                Some(o),
            );
            let verdict = validate_admission(&i, &gate(true)).unwrap();
            assert_eq!(
                matches!(verdict, Verdict::Forbidden(_)),
                forbidden,
                "{verdict:?}"
            );
        }
        let changed_time = raw(&claim(
            json!({"healthConditions": [cond("Degraded", "X")], "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        ));
        let i = input(
            PVC,
            "status",
            Operation::Update,
            "claim",
            &user,
            Some(&changed_time),
            Some(&new),
        );
        assert!(matches!(
            validate_admission(&i, &gate(true)).unwrap(),
            Verdict::Forbidden(_)
        ));
    }

    #[test]
    fn other_subresources_and_operations_are_allowed_unchanged() {
        let user = node1();
        let eviction = raw(
            &json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "foo"}}),
        );
        let i = input(
            POD,
            "eviction",
            Operation::Create,
            "foo",
            &user,
            Some(&eviction),
            None,
        );
        assert_eq!(
            validate_admission(&i, &gate(true)).unwrap(),
            Verdict::Allowed
        );
        let bad = raw(&pod(json!([{"name": ""}])));
        let admin = UserInfo {
            username: "system:admin".into(),
            groups: Groups::default(),
        };
        let i = input(POD, "", Operation::Delete, "foo", &admin, None, Some(&bad));
        assert_eq!(
            validate_admission(&i, &gate(true)).unwrap(),
            Verdict::Allowed
        );
        let i = input(
            POD,
            "status",
            Operation::Connect,
            "foo",
            &admin,
            Some(&bad),
            None,
        );
        assert_eq!(
            validate_admission(&i, &gate(true)).unwrap(),
            Verdict::Allowed
        );
    }

    #[test]
    fn undecodable_objects_are_errors_not_panics() {
        let admin = UserInfo::default();
        for bad in [
            json!({"status": {"volumeHealth": "x"}}),
            json!([1, 2]),
            json!("pod"),
            json!({"spec": {"volumes": [{"name": 5}]}}),
            json!({"status": {"volumeHealth": [{"lastTransitionTime": "yesterday"}]}}),
        ] {
            let obj = raw(&bad);
            let i = input(
                POD,
                "status",
                Operation::Create,
                "foo",
                &admin,
                Some(&obj),
                None,
            );
            let err = validate_admission(&i, &gate(true)).unwrap_err();
            assert_eq!(err.field, "object");
            assert_eq!(err.message, "failed to decode object as Pod");
        }
    }

    #[test]
    fn drop_on_save() {
        let admin = UserInfo::default();
        let with = raw(&pod(json!([{"name": "vol"}])));
        let without = raw(&pod(json!(null)));
        let empty = raw(&pod(json!([])));
        let cases = [
            // (new, old, operation, gate, dropped)
            (&with, None, Operation::Create, false, true),
            (&with, Some(&without), Operation::Update, false, true),
            (&with, Some(&empty), Operation::Update, false, true),
            (&with, Some(&with), Operation::Update, false, false),
            (&with, Some(&without), Operation::Update, true, false),
            (&without, Some(&with), Operation::Update, false, false),
            (&empty, None, Operation::Create, false, false),
        ];
        for (new, old, op, gate_on, dropped) in cases {
            let i = input(
                POD,
                "status",
                op,
                "foo",
                &admin,
                Some(new),
                old.map(|o| &**o),
            );
            let got = gated_field_to_drop(&i, gate_on).unwrap();
            assert_eq!(
                got,
                dropped.then_some("/status/volumeHealth"),
                "{op} gate={gate_on} old={old:?}"
            );
        }
        let claim_empty = raw(&claim(json!({})));
        let claim_null = raw(&claim(json!(null)));
        let i = input(
            PVC,
            "status",
            Operation::Update,
            "claim",
            &admin,
            Some(&claim_empty),
            Some(&claim_null),
        );
        assert_eq!(
            gated_field_to_drop(&i, false).unwrap(),
            Some("/status/healthStatus"),
            "{{}} is a value"
        );
        let i = input(
            PVC,
            "status",
            Operation::Update,
            "claim",
            &admin,
            Some(&claim_empty),
            Some(&claim_empty),
        );
        assert_eq!(
            gated_field_to_drop(&i, false).unwrap(),
            None,
            "{{}} is in use"
        );
        let node_with = raw(&csinode(json!([{"name": "csi.example.com"}])));
        let i = input(
            NODE,
            "",
            Operation::Create,
            "node1",
            &admin,
            Some(&node_with),
            None,
        );
        assert_eq!(
            gated_field_to_drop(&i, false).unwrap(),
            Some("/status/storageHealth")
        );
        let i = input(
            NODE,
            "",
            Operation::Delete,
            "node1",
            &admin,
            None,
            Some(&node_with),
        );
        assert_eq!(gated_field_to_drop(&i, false).unwrap(), None);
    }
}
