//! Kubelet trees the way real nodes leave them, in the situations a review of
//! the doctor found it misjudged: a block volume after a reboot, drivers with
//! `attachRequired: false`, an unstage in flight, a symlinked kubelet root,
//! drivers without STAGE_UNSTAGE_VOLUME, the `pv/<name>/globalmount` layout of
//! kubelet 1.23 and older, global files written by released kubelets (no
//! `specVolID`), a dead global mount, and a dense node.
//!
//! Every global `vol_data.json` here is written as a released kubelet writes
//! it (`driverName` and `volumeHandle` only) unless the test is about the
//! KEP-6058 format, so no result depends on a key real nodes do not have.

use std::path::PathBuf;
use std::time::Duration;

use csi_globalmount::api::{ApiDump, parse_node, parse_volume_attachments};
use csi_globalmount::layout::{attachment_name, unique_volume_name};
use csi_globalmount::plan::PlannedAction;
use csi_globalmount::podlocal::DeclineReason;
use csi_globalmount::report::{Flag, OwnerSource, PairedBy, Progress, Signal};
use csi_globalmount::{ExtraInputs, SkipReason, VolumeClass};
use serde_json::Value;

use crate::cli::{json, run, stderr};
use crate::fixture::{FixtureNode, NODE, PodData, gm, mnt, s};

const EBS: &str = "ebs.csi.aws.com";
const CEPHFS: &str = "cephfs.csi.ceph.com";
const NFS: &str = "nfs.csi.k8s.io";

fn write_json(node: &FixtureNode, name: &str, json: &str) -> String {
    let path = node.prefix().join(name);
    std::fs::write(&path, json).expect("write json");
    s(path)
}

fn node_status(volumes_in_use: &[String], volumes_attached: &[(String, &str)]) -> String {
    let attached: Vec<Value> = volumes_attached
        .iter()
        .map(|(name, path)| serde_json::json!({"name": name, "devicePath": path}))
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
        "status": {"volumesInUse": volumes_in_use, "volumesAttached": attached}
    })
    .to_string()
}

#[test]
fn a_block_volume_left_over_after_a_reboot_exits_1() {
    let node = FixtureNode::new();
    node.stage_block("pvc-b", "ebs.csi.aws.com", "vol-0b10c");
    node.write(node.layout.block_publish_dir("pvc-b").join("uid-1"), "");
    let output = run(&node, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["globalVolumes"][0]["class"], "orphaned_staged");
    assert_eq!(
        report["globalVolumes"][0]["owner"]["persistentVolume"],
        "pvc-b"
    );
}

/// A CephFS volume in use by a pod, healthy: cephfs has `attachRequired:
/// false`, so kubelet never reports it in volumesInUse and the Node lists
/// only the node's attachable EBS volume.
fn cephfs_in_use() -> (FixtureNode, String) {
    let mut node = FixtureNode::new();
    let handle = "0001-0009-rook-ceph-0000000000000001-8d7c5b2e";
    let global = node.stage_fs(CEPHFS, handle, None);
    let pod = node.pod_fs_volume(
        "uid-c",
        "pvc-cephfs",
        PodData::Written {
            driver: CEPHFS,
            handle,
        },
    );
    node.mount_with(
        "0:52",
        "/volumes/csi/csi-vol-8d7c",
        gm(&global),
        "ceph",
        "10.0.0.1:6789:/",
    );
    node.mount_with(
        "0:52",
        "/volumes/csi/csi-vol-8d7c",
        mnt(&pod),
        "ceph",
        "10.0.0.1:6789:/",
    );
    let ebs = unique_volume_name(EBS, "vol-0other");
    let status = node_status(std::slice::from_ref(&ebs), &[(ebs.clone(), "/dev/xvdf")]);
    (node, status)
}

#[test]
fn a_healthy_volume_of_a_driver_without_attach_is_not_at_risk() {
    let (node, status) = cephfs_in_use();
    let node_file = write_json(&node, "node.json", &status);
    let output = run(&node, &["--node-json", &node_file]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let v = &json(&output)["globalVolumes"][0];
    assert_eq!(v["class"], "in_use");
    assert_eq!(v["flags"], serde_json::json!([]));
    assert_eq!(v["api"]["inVolumesInUse"], false);
    assert_eq!(v["api"]["attachable"], Value::Null);

    // The CSIDriver object says so outright.
    let drivers = write_json(
        &node,
        "csidrivers.json",
        &format!(
            r#"{{"apiVersion":"storage.k8s.io/v1","kind":"CSIDriverList","items":[
              {{"kind":"CSIDriver","metadata":{{"name":"{CEPHFS}"}},"spec":{{"attachRequired":false}}}}]}}"#
        ),
    );
    let output = run(&node, &["--node-json", &node_file, "--api-json", &drivers]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let v = &json(&output)["globalVolumes"][0];
    assert_eq!(v["api"]["attachable"], false);
    assert_eq!(v["api"]["attachableSource"], "csi_driver");
}

#[test]
fn an_attachable_volume_missing_from_volumes_in_use_is_still_at_risk() {
    // Without a CSIDriver object, attachRequired defaults to true.
    let (node, status) = cephfs_in_use();
    let node_view = parse_node(status.as_bytes(), Some(NODE)).expect("node");
    let report = node.diagnose_extra(
        Some(node_view),
        None,
        &ExtraInputs {
            csi_drivers: Some(Vec::new()),
            ..ExtraInputs::default()
        },
    );
    assert_eq!(report.global_volumes[0].flags, [Flag::AtRisk]);
}

/// A pod was deleted: kubelet unpublished it and removed the pod volume
/// directory, and UnmountDevice has not run yet.
fn unstage_in_flight() -> (FixtureNode, String) {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(EBS, "vol-0abc", None);
    node.mount_with("259:3", "/", gm(&global), "ext4", "/dev/nvme1n1");
    (node, unique_volume_name(EBS, "vol-0abc"))
}

#[test]
fn an_unstage_in_flight_is_in_progress_when_kubelet_still_reports_it_in_use() {
    let (node, unique) = unstage_in_flight();
    let status = node_status(
        std::slice::from_ref(&unique),
        &[(unique.clone(), "/dev/nvme1n1")],
    );
    let node_file = write_json(&node, "node.json", &status);
    let output = run(&node, &["--node-json", &node_file]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let report = json(&output);
    let v = &report["globalVolumes"][0];
    assert_eq!(v["class"], "unstage_in_progress");
    assert_eq!(v["progress"]["state"], "in_progress");
    assert_eq!(v["progress"]["decidedBy"], "volumes_in_use");
    assert_eq!(report["summary"]["unstageInProgress"], 1);

    // Gone from volumesInUse while still attached: lost, and at risk.
    let status = node_status(&[], &[(unique.clone(), "/dev/nvme1n1")]);
    let node_file = write_json(&node, "node.json", &status);
    let output = run(&node, &["--node-json", &node_file]);
    assert_eq!(output.status.code(), Some(1));
    let v = &json(&output)["globalVolumes"][0];
    assert_eq!(v["class"], "orphaned_staged");
    assert_eq!(v["progress"]["state"], "lost");
    assert_eq!(v["flags"], serde_json::json!(["at_risk"]));
}

#[test]
fn without_api_data_the_kubelet_start_time_decides() {
    let (node, _) = unstage_in_flight();
    let data = node.host(
        node.layout
            .fs_volume_dir(EBS, "vol-0abc")
            .join("vol_data.json"),
    );
    let staged = std::fs::metadata(&data)
        .and_then(|m| m.modified())
        .expect("mtime");

    let started_before = staged - Duration::from_secs(3600);
    let report = node.diagnose_extra(
        None,
        None,
        &ExtraInputs {
            kubelet_started_at: Some(started_before),
            ..ExtraInputs::default()
        },
    );
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::UnstageInProgress);
    let p = v.progress.as_ref().expect("progress");
    assert_eq!(
        (p.state, p.decided_by),
        (Progress::InProgress, Signal::KubeletStartTime)
    );

    let started_after = staged + Duration::from_secs(3600);
    let report = node.diagnose_extra(
        None,
        None,
        &ExtraInputs {
            kubelet_started_at: Some(started_after),
            ..ExtraInputs::default()
        },
    );
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::OrphanedStaged);
    assert_eq!(v.progress.as_ref().map(|p| p.state), Some(Progress::Lost));

    // No signal at all: still a finding, and the report says why it cannot tell.
    let v = &node.diagnose().global_volumes[0];
    assert_eq!(v.class, VolumeClass::OrphanedStaged);
    let p = v.progress.as_ref().expect("progress");
    assert_eq!((p.state, p.decided_by), (Progress::Unknown, Signal::None));

    // The binary takes the start time as RFC 3339.
    let start = humantime::format_rfc3339_seconds(started_before).to_string();
    let output = run(&node, &["--kubelet-start-time", &start]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json(&output)["kubeletStartedAt"], start);
}

/// Some distributions run kubelet with `--root-dir` behind a link:
/// `/var/lib/kubelet -> /data/kubelet`. Kubelet resolves it, and the mount
/// table spells every mount with the target.
fn symlinked_root() -> FixtureNode {
    let node = FixtureNode::with_root("/data/kubelet");
    node.mkdir("/var/lib");
    node.symlink("/data/kubelet", "/var/lib/kubelet");
    node
}

#[test]
fn a_symlinked_kubelet_root_is_resolved_as_kubelet_resolves_it() {
    let mut node = symlinked_root();
    let healthy = node.stage_fs(EBS, "vol-0abc", None);
    let pod = node.pod_fs_volume(
        "uid-1",
        "pvc-1",
        PodData::Written {
            driver: EBS,
            handle: "vol-0abc",
        },
    );
    node.bind("259:3", gm(&healthy), mnt(&pod));
    let orphan = node.stage_fs(EBS, "vol-0def", None);
    node.mount("259:4", "/", gm(&orphan));
    let mountinfo = node.write_mountinfo();
    assert!(s(&healthy).starts_with("/data/kubelet/"));

    let output = crate::cli::bare_command()
        .args(["--kubelet-root", "/var/lib/kubelet", "--host-prefix"])
        .arg(node.prefix())
        .arg("--mountinfo")
        .arg(&mountinfo)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["kubeletRoot"], "/data/kubelet");
    assert_eq!(report["kubeletRootGiven"], "/var/lib/kubelet");
    assert_eq!(report["warnings"], serde_json::json!([]));
    let classes: Vec<(&str, &str)> = report["globalVolumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| {
            (
                v["volumeHandle"].as_str().unwrap_or(""),
                v["class"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        classes,
        [("vol-0abc", "in_use"), ("vol-0def", "orphaned_staged")]
    );
}

/// csi-driver-nfs has no STAGE_UNSTAGE_VOLUME: kubelet still writes the
/// global directory with an empty `globalmount`, and the driver mounts the
/// share straight onto the pod's `mount`.
fn nfs_without_staging(pod_data: PodData<'_>, spec_vol_id: Option<&str>) -> (FixtureNode, PathBuf) {
    let mut node = FixtureNode::new();
    let handle = "nfs-server.storage.svc.cluster.local#share#pvc-nfs#";
    node.stage_fs(NFS, handle, spec_vol_id);
    let pod = node.pod_fs_volume("uid-n", "pvc-nfs", pod_data);
    node.mount_with(
        "0:61",
        "/share/pvc-nfs",
        mnt(&pod),
        "nfs4",
        "nfs-server.storage.svc.cluster.local:/share/pvc-nfs",
    );
    (node, pod)
}

#[test]
fn a_driver_without_staging_in_use_by_a_pod_is_in_use() {
    let handle = "nfs-server.storage.svc.cluster.local#share#pvc-nfs#";
    let (node, pod) = nfs_without_staging(
        PodData::Written {
            driver: NFS,
            handle,
        },
        None,
    );
    let report = node.diagnose();
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::InUse);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    assert!(!report.has_findings());
}

#[test]
fn a_driver_without_staging_with_an_empty_pod_file_is_paired_with_its_pod() {
    // With the KEP-6058 global file, specVolID names the pod directory.
    let (node, pod) = nfs_without_staging(PodData::Empty, Some("pvc-nfs"));
    let report = node.diagnose();
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::PodDataUnreadable);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    let p = &report.pod_local[0];
    assert!(p.pod_mount_mounted);
    assert_eq!(p.paired_by, Some(PairedBy::NameWithoutStaging));
    assert_eq!(p.decline_reason, Some(DeclineReason::NoReference));

    // A released kubelet's file has no specVolID: csi-driver-nfs keeps the PV
    // name as the handle's subdirectory field, and that pairs them.
    let (node, pod) = nfs_without_staging(PodData::Empty, None);
    let report = node.diagnose();
    assert_eq!(
        report.global_volumes[0].class,
        VolumeClass::PodDataUnreadable
    );
    assert_eq!(
        report.pod_local[0].paired_by,
        Some(PairedBy::NameWithoutStaging)
    );
    assert_eq!(report.global_volumes[0].pod_dirs, [s(&pod)]);

    // A PV dump also names the claim.
    let mut dump = ApiDump::default();
    dump.add(
        br#"{"kind":"PersistentVolume","metadata":{"name":"pvc-nfs"},
             "spec":{"csi":{"driver":"nfs.csi.k8s.io","volumeHandle":"nfs-server.storage.svc.cluster.local#share#pvc-nfs#"},
                     "claimRef":{"namespace":"media","name":"uploads"}}}"#,
    )
    .expect("pv");
    let report = node.diagnose_extra(
        None,
        None,
        &ExtraInputs {
            persistent_volumes: Some(dump.persistent_volumes),
            ..ExtraInputs::default()
        },
    );
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::PodDataUnreadable);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    assert_eq!(v.owner.claim.as_deref(), Some("media/uploads"));
    assert_eq!(
        v.owner.persistent_volume_source,
        Some(OwnerSource::PersistentVolume)
    );
}

#[test]
fn the_pv_layout_of_kubelet_1_23_links_the_pod_bound_to_it() {
    // kubelet 1.23 and older staged at pv/<pvName>/globalmount (kubernetes#107065
    // moved it in 1.24); a pod of that PV is bound from it.
    let mut node = FixtureNode::new();
    let legacy = node.layout.plugin_dir().join("pv/pvc-old");
    node.mkdir(gm(&legacy));
    node.voldata(
        &legacy,
        &[("driverName", EBS), ("volumeHandle", "vol-0old")],
    );
    let pod = node.pod_fs_volume(
        "uid-o",
        "pvc-old",
        PodData::Written {
            driver: EBS,
            handle: "vol-0old",
        },
    );
    node.bind("259:9", gm(&legacy), mnt(&pod));
    let report = node.diagnose();
    assert!(report.global_volumes.is_empty());
    let k = &report.skipped[0];
    assert_eq!(k.reason, SkipReason::LegacyPvLayout);
    assert!(k.mounted);
    assert!(k.detail.contains("1.23"), "{}", k.detail);
    assert!(!k.detail.contains("1.14"), "{}", k.detail);
    assert_eq!(k.pod_refs, [s(mnt(&pod))]);
    assert_eq!(k.pod_dirs, [s(&pod)]);
    assert_eq!(k.mount.as_ref().map(|m| m.device.as_str()), Some("259:9"));
    assert!(
        k.operator_plan
            .iter()
            .any(|step| step.contains("NodeUnstageVolume"))
    );
    assert!(report.has_findings());
}

#[test]
fn after_a_reboot_a_released_global_file_pairs_only_through_the_api() {
    // Released kubelets write no specVolID into the global file, so nothing on
    // the node ties pods/<uid>/.../pvc-1 to the directory named sha256(handle).
    let node = FixtureNode::new();
    let global = node.stage_fs(EBS, "vol-0abc", None);
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    let report = node.diagnose();
    assert_eq!(report.pod_local[0].paired_global_volume, None);
    assert_eq!(report.global_volumes[0].class, VolumeClass::StagedUnmounted);

    // The VolumeAttachment names the PV: the pair is made.
    let vas = parse_volume_attachments(
        format!(
            r#"{{"items":[{{"metadata":{{"name":"{}"}},"spec":{{"attacher":"{EBS}","nodeName":"{NODE}",
                "source":{{"persistentVolumeName":"pvc-1"}}}},"status":{{"attached":true}}}}]}}"#,
            attachment_name("vol-0abc", EBS, NODE)
        )
        .as_bytes(),
    )
    .expect("vas");
    let report = node.diagnose_with(None, Some(vas));
    let p = &report.pod_local[0];
    assert_eq!(p.paired_global_volume, Some(s(gm(&global))));
    assert_eq!(p.paired_by, Some(PairedBy::Name));
    let v = &report.global_volumes[0];
    assert_eq!(v.class, VolumeClass::PodDataUnreadable);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    assert_eq!(v.owner.persistent_volume.as_deref(), Some("pvc-1"));
    assert_eq!(
        v.owner.persistent_volume_source,
        Some(OwnerSource::VolumeAttachment)
    );
    assert!(
        v.operator_plan
            .iter()
            .any(|step| step.contains("NodeUnpublishVolume")),
        "{:?}",
        v.operator_plan
    );
}

#[test]
fn a_dead_global_mount_is_one_kubelet_would_skip() {
    // kubelet's os.Stat of globalmount follows the link and fails.
    let node = FixtureNode::new();
    let dir = node.layout.fs_volume_dir(EBS, "vol-0dead");
    node.mkdir(&dir);
    node.voldata(&dir, &[("driverName", EBS), ("volumeHandle", "vol-0dead")]);
    node.symlink("/nonexistent/target", gm(&dir));
    let output = run(&node, &[]);
    let report = json(&output);
    let v = &report["globalVolumes"][0];
    assert_eq!(v["kubeletWouldList"], false, "{v:#}");
    assert_eq!(v["kubeletPlan"], PlannedAction::WouldSkip.as_str());
    // With probing off nothing is stat'ed, and the listing's view stands.
    let output = run(&node, &["--stat-timeout", "0s"]);
    assert_eq!(
        json(&output)["globalVolumes"][0]["kubeletPlan"],
        "would_register_uncertain"
    );
}

#[test]
fn owner_claim_and_pods_come_from_a_mixed_api_dump() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(EBS, "vol-0abc", None);
    let pod = node.pod_fs_volume(
        "3f1c7a52-0c1e-4b8e-9d1a-6f2b9c1d7e11",
        "pvc-1",
        PodData::Missing,
    );
    node.bind("259:3", gm(&global), mnt(&pod));
    let unique = unique_volume_name(EBS, "vol-0abc");
    let dump = format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[
          {node},
          {{"kind":"PersistentVolume","metadata":{{"name":"pvc-1"}},"spec":{{"csi":{{"driver":"{EBS}","volumeHandle":"vol-0abc"}},"claimRef":{{"namespace":"shop","name":"data-web-0"}}}}}},
          {{"kind":"Pod","metadata":{{"uid":"3f1c7a52-0c1e-4b8e-9d1a-6f2b9c1d7e11","namespace":"shop","name":"web-0"}},"spec":{{"nodeName":"{NODE}","volumes":[{{"name":"data","persistentVolumeClaim":{{"claimName":"data-web-0"}}}}]}}}}]}}"#,
        node = node_status(
            std::slice::from_ref(&unique),
            &[(unique.clone(), "/dev/nvme1n1")]
        )
    );
    let file = write_json(&node, "dump.json", &dump);
    let output = run(&node, &["--api-json", &file, "--format", "text"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("owner: pv pvc-1  claim shop/data-web-0  pods shop/web-0"),
        "{text}"
    );
    let output = run(&node, &["--api-json", &file]);
    let v = &json(&output)["globalVolumes"][0];
    assert_eq!(v["owner"]["claim"], "shop/data-web-0");
    assert_eq!(v["owner"]["pods"][0]["name"], "web-0");
    assert_eq!(v["class"], "pod_data_unreadable");
}

#[test]
fn no_plan_ever_unmounts_or_removes() {
    let mut node = FixtureNode::new();
    let orphan = node.stage_fs(EBS, "vol-0abc", None);
    node.mount("259:3", "/", gm(&orphan));
    node.stage_fs(EBS, "vol-0def", None);
    node.stage_block("pvc-b", EBS, "vol-0b");
    let legacy = node.layout.plugin_dir().join("pv/pvc-old");
    node.mkdir(gm(&legacy));
    node.mount("259:9", "/", gm(&legacy));
    let report = node.diagnose();
    let steps: Vec<&String> = report
        .global_volumes
        .iter()
        .flat_map(|v| &v.operator_plan)
        .chain(report.skipped.iter().flat_map(|k| &k.operator_plan))
        .collect();
    assert!(steps.len() > 10);
    for step in steps {
        let lower = step.to_lowercase();
        let advises_manual_cleanup =
            (lower.contains("umount") || lower.contains("rm -rf")) && !lower.starts_with("do not");
        assert!(!advises_manual_cleanup, "{step}");
    }
}

#[test]
fn version_names_the_binary_and_errors_name_their_cause_once() {
    let output = crate::cli::bare_command()
        .arg("--version")
        .output()
        .expect("runs");
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(version.starts_with("csi-globalmount-doctor "), "{version}");

    let node = FixtureNode::new();
    let mountinfo = node.write_mountinfo();
    let output = crate::cli::bare_command()
        .args(["--kubelet-root", "/var/lib/elsewhere", "--host-prefix"])
        .arg(node.prefix())
        .arg("--mountinfo")
        .arg(&mountinfo)
        .output()
        .expect("runs");
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let output = crate::cli::doctor_command(&node, &node.prefix().join("absent"))
        .output()
        .expect("runs");
    let err = stderr(&output);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert_eq!(err.matches("absent").count(), 1, "{err}");
}

#[test]
fn npd_mode_prints_one_line_and_keeps_the_exit_codes() {
    let (node, _) = unstage_in_flight();
    let output = run(&node, &["--format", "npd"]);
    assert_eq!(output.status.code(), Some(1));
    let line = String::from_utf8_lossy(&output.stdout);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.starts_with("1 findings: orphaned_staged=1"), "{line}");
    let clean = FixtureNode::new();
    let output = run(&clean, &["--format", "npd"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "no findings on 0 staged CSI volumes\n"
    );
}

#[test]
fn the_sample_node_tree_reports_what_its_readme_says() {
    let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/node-tree");
    let output = crate::cli::bare_command()
        .arg("--host-prefix")
        .arg(&tree)
        .arg("--mountinfo")
        .arg(tree.join("mountinfo"))
        .args(["--node-name", NODE])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    let classes: Vec<(&str, &str)> = report["globalVolumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| {
            (
                v["volumeHandle"].as_str().unwrap_or(""),
                v["class"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            ("vol-0abc", "orphaned_staged"),
            ("vol-0def", "pod_data_unreadable"),
            ("vol-0123", "in_use"),
        ]
    );
    assert_eq!(
        report["podLocal"][0]["recoveredFrom"]["volumeHandle"],
        "vol-0def"
    );
    assert_eq!(report["globalVolumes"][0]["progress"]["state"], "unknown");
}

#[test]
fn the_library_resolves_a_symlinked_root_too() {
    let mut node = symlinked_root();
    let orphan = node.stage_fs(EBS, "vol-0def", None);
    node.mount("259:4", "/", gm(&orphan));
    let fs = node.fs();
    let table = node.table();
    let given = csi_globalmount::KubeletLayout::new("/var/lib/kubelet");
    let inputs = csi_globalmount::NodeInputs {
        fs: &fs,
        layout: &given,
        table: &table,
        mountinfo_source: "fixture".to_owned(),
        node_name: Some(NODE.to_owned()),
        node: None,
        volume_attachments: None,
    };
    let report = csi_globalmount::diagnose(&inputs).expect("diagnose");
    assert_eq!(report.kubelet_root, "/data/kubelet");
    assert_eq!(
        report.kubelet_root_given.as_deref(),
        Some("/var/lib/kubelet")
    );
    assert_eq!(report.global_volumes[0].class, VolumeClass::OrphanedStaged);
    assert!(report.global_volumes[0].mounted);
}

#[test]
fn a_mount_whose_data_files_are_both_gone_is_named_by_its_device() {
    // Both vol_data.json files deleted (the #101791 cleanup race), the mounts intact.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(EBS, "vol-0abc", None);
    node.remove(global.join("vol_data.json"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.mount_with("259:3", "/", gm(&global), "xfs", "/dev/nvme1n1");
    node.mount_with("259:3", "/", mnt(&pod), "xfs", "/dev/nvme1n1");
    let unique = unique_volume_name(EBS, "vol-0abc");
    let status = node_status(
        std::slice::from_ref(&unique),
        &[(unique.clone(), "/dev/nvme1n1")],
    );
    let node_view = parse_node(status.as_bytes(), Some(NODE)).expect("node");
    let report = node.diagnose_with(Some(node_view), None);
    assert!(report.global_volumes.is_empty());
    let k = &report.skipped[0];
    assert_eq!(k.reason, SkipReason::VoldataUnreadable);
    assert!(k.mounted);
    let mount = k.mount.as_ref().expect("mount");
    assert_eq!(
        (
            mount.source.as_str(),
            mount.fs_type.as_str(),
            mount.device.as_str()
        ),
        ("/dev/nvme1n1", "xfs", "259:3")
    );
    assert_eq!(k.attached_device_path_matches, [unique]);
    assert_eq!(k.pod_refs, [s(mnt(&pod))]);
    assert_eq!(k.pod_dirs, [s(&pod)]);
    assert!(
        k.operator_plan
            .iter()
            .any(|step| step.contains("/dev/nvme1n1"))
    );
    assert_eq!(
        report.pod_local[0].decline_reason,
        Some(DeclineReason::NoUsableReference)
    );
}

#[test]
fn the_continuous_mode_prints_a_line_per_run_and_serves_metrics() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;

    let (node, _) = unstage_in_flight();
    let mountinfo = node.write_mountinfo();
    let mut child = crate::cli::doctor_command(&node, &mountinfo)
        .args(["--interval", "1h", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("doctor starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));

    // The first run's report: one JSON document on one line.
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a report line");
    let report: Value = serde_json::from_str(&line).expect("one JSON document per line");
    assert_eq!(report["summary"]["orphanedStaged"], 1);

    let addr = crate::metrics_address(&mut stderr);
    let scrape = || {
        let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: doctor\r\nConnection: close\r\n\r\n")
            .expect("request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("response");
        response
    };
    // The report line is printed before the run is recorded; give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut metrics = scrape();
    while !metrics.contains("csi_globalmount_doctor_runs_total{result=\"findings\"} 1")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        metrics = scrape();
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("csi_globalmount_doctor_volumes{class=\"orphaned_staged\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("csi_globalmount_doctor_findings 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("csi_globalmount_doctor_runs_total{result=\"findings\"} 1"),
        "{metrics}"
    );
}
