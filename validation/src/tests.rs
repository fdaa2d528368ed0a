//! Rule tables: every field rule and its boundaries, run through a request made from raw JSON
//! objects and, for parity, through the typed API.

use serde_json::value::RawValue;
use serde_json::{Value, json};

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

fn undecoded(err: RequestError) -> Undecoded {
    match err {
        RequestError::Decode(err) => Undecoded {
            field: err.field,
            message: err.to_string(),
        },
        RequestError::Operation(err) => panic!("{err}"),
    }
}

fn validate_admission(
    input: &AdmissionInput<'_>,
    policy: &RestrictionPolicy,
) -> Result<Verdict, Undecoded> {
    input.request().validate(policy).map_err(undecoded)
}

fn gated_field_to_drop(
    input: &AdmissionInput<'_>,
    gate_enabled: bool,
) -> Result<Option<&'static str>, Undecoded> {
    input
        .request()
        .gated_field_to_drop(gate_enabled)
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
    let from_raw = match validate_admission(&input, &RestrictionPolicy::default()).unwrap() {
        Verdict::Allowed => vec![],
        Verdict::Invalid(Invalid { errors, .. }) => errors,
        forbidden => panic!("unexpected {forbidden:?}"),
    };
    let typed = typed_errors(resource, new, old);
    assert_eq!(from_raw, typed, "raw and typed entry points disagree");
    from_raw.iter().map(ToString::to_string).collect()
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
fn too_many_short_circuits_the_list() {
    let mut list = conds(17);
    let items = list.as_array_mut().unwrap();
    items[0] = cond("", "");
    items[1] = cond("Healthy", "1bad");
    items[2] = items[3].clone();
    assert_eq!(
        pvc_errors(list),
        ["status.healthStatus.healthConditions: Too many: 17: must have at most 16 items"]
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
            names::CONDITION_REASON_DETAIL
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
fn storage_limits_count_characters() {
    let c0 = "status.storageHealth[0].healthConditions[0]";
    let long_message =
        |s: String| one_driver(json!([{"status": "StorageDegraded", "reason": "X", "message": s}]));
    assert!(
        node_errors(long_message("😀".repeat(1024))).is_empty(),
        "4096 bytes, 1024 characters"
    );
    assert_eq!(
        node_errors(long_message("é".repeat(1025))),
        [format!(
            "{c0}.message: Too long: may not be more than 1024 characters"
        )]
    );
    assert_eq!(
        node_errors(long_message("m".repeat(1025))),
        [format!(
            "{c0}.message: Too long: may not be more than 1024 characters"
        )]
    );
    assert!(
        node_errors(one_driver(json!([cond(
            "StorageDegraded",
            &"R".repeat(256)
        )])))
        .is_empty()
    );
    assert_eq!(
        node_errors(one_driver(json!([cond(
            "StorageDegraded",
            &"R".repeat(257)
        )]))),
        [format!(
            "{c0}.reason: Too long: may not be more than 256 characters"
        )]
    );
    // Multi-byte reasons fail the format check but are counted in characters.
    let errors = node_errors(one_driver(json!([cond(
        "StorageDegraded",
        &format!("A{}", "é".repeat(255))
    )])));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("Invalid value"));
}

#[test]
fn storage_optional_enums() {
    let c0 = "status.storageHealth[0].healthConditions[0]";
    let with = |field: &str, value: &str| {
        let mut c = cond("StorageDegraded", "X");
        c[field] = json!(value);
        node_errors(one_driver(json!([c])))
    };
    for mode in [
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOnce",
        "ReadWriteOncePod",
    ] {
        assert!(with("accessMode", mode).is_empty(), "{mode}");
    }
    assert_eq!(
        with("accessMode", "ReadWrite"),
        [format!(
            r#"{c0}.accessMode: Unsupported value: "ReadWrite": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#
        )]
    );
    assert_eq!(
        with("accessMode", ""),
        [format!(
            r#"{c0}.accessMode: Unsupported value: "": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod""#
        )]
    );
    for mode in ["Block", "Filesystem"] {
        assert!(with("volumeMode", mode).is_empty(), "{mode}");
    }
    assert_eq!(
        with("volumeMode", "block"),
        [format!(
            r#"{c0}.volumeMode: Unsupported value: "block": supported values: "Block", "Filesystem""#
        )]
    );
}

#[test]
fn duplicates_are_reported_at_the_later_index() {
    let errors = pvc_errors(json!([
        cond("Degraded", "A"),
        cond("Degraded", "B"),
        cond("Degraded", "A")
    ]));
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("status.healthStatus.healthConditions[2]: Duplicate value: "),
        "{errors:?}"
    );
    assert!(pvc_errors(json!([cond("Degraded", "A"), cond("DataLoss", "A")])).is_empty());
    let three = pvc_errors(json!([
        cond("Degraded", "A"),
        cond("Degraded", "A"),
        cond("Degraded", "A")
    ]));
    assert_eq!(three.len(), 2, "each later copy: {three:?}");

    let pods = pod_errors(json!([{"name": "vol"}, {"name": "vol2"}, {"name": "vol"}]));
    assert_eq!(pods, [r#"status.volumeHealth[2]: Duplicate value: "vol""#]);

    let nodes = node_errors(json!([{"name": "csi.example.com"}, {"name": "csi.example.com"}]));
    assert_eq!(
        nodes,
        [r#"status.storageHealth[1]: Duplicate value: "csi.example.com""#]
    );
    let same_condition_two_drivers = node_errors(json!([
        {"name": "csi.example.com", "healthConditions": [cond("StorageDegraded", "PoolFull")]},
        {"name": "b.example.com", "healthConditions": [cond("StorageDegraded", "PoolFull")]}
    ]));
    assert!(same_condition_two_drivers.is_empty());
    let within_one_driver = node_errors(one_driver(json!([
        cond("StorageDegraded", "PoolFull"),
        cond("StorageUnreachable", "PoolFull"),
        cond("StorageDegraded", "PoolFull")
    ])));
    assert_eq!(within_one_driver.len(), 1);
    assert!(
        within_one_driver[0]
            .starts_with("status.storageHealth[0].healthConditions[2]: Duplicate value: ")
    );
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

#[test]
fn csinode_driver_names() {
    assert_eq!(
        node_errors(json!([{}])),
        ["status.storageHealth[0].name: Required value"]
    );
    assert_eq!(
        node_errors(json!([{"name": "other.example.com"}])),
        [r#"status.storageHealth[0].name: Not found: "other.example.com""#]
    );
    assert_eq!(
        node_errors(json!([{"name": "csi_example"}])),
        [format!(
            r#"status.storageHealth[0].name: Invalid value: "csi_example": {}"#,
            names::DNS1123_SUBDOMAIN_DETAIL
        )],
        "an invalid name is not also reported missing"
    );
    let long = format!("{}.example.com", "a".repeat(52));
    assert_eq!(long.len(), 64);
    assert_eq!(
        node_errors(json!([{"name": long}])),
        ["status.storageHealth[0].name: Too long: may not be more than 63 bytes"]
    );
    // Upper case passes the format check (lower-cased) but must match spec.drivers exactly.
    assert_eq!(
        node_errors(json!([{"name": "CSI.example.com"}])),
        [r#"status.storageHealth[0].name: Not found: "CSI.example.com""#]
    );
}

#[test]
fn handwritten_errors_come_first_in_field_order() {
    let errors = pod_errors(json!([
        {"name": "vol", "healthConditions": [cond("", "1bad")]},
        {"name": "missing", "healthConditions": [cond("Degraded", "")]}
    ]));
    assert_eq!(
        errors,
        [
            format!(
                r#"status.volumeHealth[0].healthConditions[0].reason: Invalid value: "1bad": {}"#,
                names::CONDITION_REASON_DETAIL
            ),
            r#"status.volumeHealth[1].name: Not found: "missing""#.to_owned(),
            "status.volumeHealth[0].healthConditions[0].status: Required value".to_owned(),
            "status.volumeHealth[1].healthConditions[0].reason: Required value".to_owned(),
        ]
    );
    let node = node_errors(json!([
        {"name": "csi.example.com", "healthConditions": [{"status": "Bad", "reason": "R", "accessMode": "X", "volumeMode": "Y", "message": "m".repeat(1025)}]},
        {"name": "nope.example.com"}
    ]));
    let fields: Vec<&str> = node.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "status.storageHealth[1].name",
            "status.storageHealth[0].healthConditions[0].status",
            "status.storageHealth[0].healthConditions[0].message",
            "status.storageHealth[0].healthConditions[0].accessMode",
            "status.storageHealth[0].healthConditions[0].volumeMode",
        ]
    );
}

#[test]
fn ratcheting_skips_unchanged_items_for_declarative_checks() {
    let bad = cond("Healthy", "X");
    let old = claim(json!({"healthConditions": [bad.clone()]}));
    // Unchanged list: nothing.
    assert!(errors_of(PVC, &old, Some(&old)).is_empty());
    // Unchanged item beside a new one: only the new item is checked.
    let new = claim(json!({"healthConditions": [bad.clone(), cond("Unknown", "Y")]}));
    assert_eq!(
        errors_of(PVC, &new, Some(&old)),
        [format!(
            r#"status.healthStatus.healthConditions[1].status: Unsupported value: "Unknown": {VOLUME_STATUSES}"#
        )]
    );
    // Same key, different message: the item changed and is checked again.
    let changed =
        claim(json!({"healthConditions": [{"status": "Healthy", "reason": "X", "message": "m"}]}));
    assert_eq!(errors_of(PVC, &changed, Some(&old)).len(), 1);
    // The list over the limit, unchanged: no TooMany.
    let many = claim(json!({"healthConditions": conds(17)}));
    assert!(errors_of(PVC, &many, Some(&many)).is_empty());
    let more = claim(json!({"healthConditions": conds(18)}));
    assert_eq!(errors_of(PVC, &more, Some(&many)).len(), 1);
    // On CREATE there is nothing to ratchet against.
    assert_eq!(errors_of(PVC, &old, None).len(), 1);
}

#[test]
fn ratcheting_never_skips_handwritten_checks() {
    let old = pod(json!([{"name": "gone", "healthConditions": [cond("Degraded", "1bad")]}]));
    let errors = errors_of(POD, &old, Some(&old));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("Not found"), "name before conditions");
    assert!(errors[1].contains("Invalid value"));
    let node = csinode(json!([{"name": "gone.example.com"}]));
    assert_eq!(errors_of(NODE, &node, Some(&node)).len(), 1);
}

#[test]
fn ratcheting_matches_entries_by_name() {
    let old = pod(json!([{"name": "vol", "healthConditions": [cond("Healthy", "X")]}]));
    // Reordered list with the unchanged entry: still ratcheted.
    let new =
        pod(json!([{"name": "vol2"}, {"name": "vol", "healthConditions": [cond("Healthy", "X")]}]));
    assert!(errors_of(POD, &new, Some(&old)).is_empty());
    // A changed entry ratchets its unchanged conditions by (status, reason).
    let new = pod(
        json!([{"name": "vol", "healthConditions": [cond("Healthy", "X"), cond("Nope", "Y")]}]),
    );
    assert_eq!(
        errors_of(POD, &new, Some(&old)),
        [
            r#"status.volumeHealth[0].healthConditions[1].status: Unsupported value: "Nope": supported values: "DataLoss", "Degraded", "Inaccessible""#
        ]
    );
    let old_node =
        csinode(json!([{"name": "csi.example.com", "healthConditions": [cond("Bad", "X")]}]));
    let new_node = csinode(json!([
        {"name": "csi.example.com", "healthConditions": [cond("Bad", "X")]},
        {"name": "b.example.com", "healthConditions": [cond("Bad", "X")]}
    ]));
    assert_eq!(
        errors_of(NODE, &new_node, Some(&old_node)),
        [
            r#"status.storageHealth[1].healthConditions[0].status: Unsupported value: "Bad": supported values: "StorageDegraded", "StorageUnreachable""#
        ]
    );
}

#[test]
fn ratcheting_does_not_admit_new_duplicates() {
    let old = claim(json!({"healthConditions": [cond("Degraded", "A")]}));
    let new = claim(json!({"healthConditions": [cond("Degraded", "A"), cond("Degraded", "A")]}));
    let errors = errors_of(PVC, &new, Some(&old));
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("status.healthStatus.healthConditions[1]: Duplicate value: "));
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
    let verdict = validate_admission(&input, &RestrictionPolicy::default()).unwrap();
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

    fn gate(enabled: bool) -> RestrictionPolicy {
        RestrictionPolicy {
            gate_enabled: enabled,
            pvc_health_writers: None,
        }
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
