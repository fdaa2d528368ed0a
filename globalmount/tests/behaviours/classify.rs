//! Behaviours B1-B6 and G1-G4: classification of what is on a node and the
//! reconstruction plan, on the fixtures of the KEP's user stories and issues.

use csi_globalmount::api::{NodeView, VolumeAttachmentView, parse_node, parse_volume_attachments};
use csi_globalmount::layout::{attachment_name, unique_volume_name};
use csi_globalmount::plan::{PlannedAction, plan_reconstruction};
use csi_globalmount::podlocal::DeclineReason;
use csi_globalmount::report::{Flag, PairedBy};
use csi_globalmount::{KubeletLayout, Report, VolumeClass, VolumeMode};

use crate::fixture::{FixtureNode, NODE, PodData, gm, mnt, s};

const DRIVER: &str = "ebs.csi.aws.com";
const HANDLE: &str = "vol-0abc";

/// Fixture 1 (fs-healthy): staged, published to one pod, both on 8:16 with root `/`.
fn healthy() -> (FixtureNode, std::path::PathBuf, std::path::PathBuf) {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume(
        "uid-1",
        "pvc-1",
        PodData::Written {
            driver: DRIVER,
            handle: HANDLE,
        },
    );
    node.bind("8:16", gm(&global), mnt(&pod));
    (node, global, pod)
}

/// Fixture 2 (fs-121937-restart): the global mount is mounted, the pod directory is gone.
fn restart_121937() -> (FixtureNode, std::path::PathBuf) {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    (node, global)
}

fn only_volume(report: &Report) -> &csi_globalmount::report::GlobalVolumeReport {
    assert_eq!(report.global_volumes.len(), 1, "{report:#?}");
    &report.global_volumes[0]
}

#[test]
fn b1_a_published_filesystem_volume_is_in_use() {
    let (node, global, pod) = healthy();
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::InUse);
    assert!(v.mounted);
    assert_eq!(v.pod_refs, [s(mnt(&pod))]);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    assert_eq!(v.device_mount_path, s(gm(&global)));
    // Kubelet lists global volumes before it walks the pod directories, so a
    // volume found both ways keeps the listing's registration.
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterUncertain);
    assert!(!report.has_findings(), "{report:#?}");
    assert!(report.pod_local.is_empty());
}

#[test]
fn b1_a_mapped_block_volume_is_in_use() {
    // Fixture 10: dev/<podUID> bind mount (devtmpfs, root /sdc) and publish/<pv>/<podUID>.
    let mut node = FixtureNode::new();
    let dir = node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let dev = dir.join("dev/uid-1");
    node.write(&dev, "");
    node.mount_with("0:5", "/sdc", &dev, "devtmpfs", "udev");
    node.write(node.layout.block_publish_dir("pvc-b").join("uid-1"), "");
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.mode, VolumeMode::Block);
    assert_eq!(v.class, VolumeClass::InUse);
    assert_eq!(v.dev_mounts, [s(&dev)]);
    assert_eq!(
        v.publish_entries,
        [s(node.layout.block_publish_dir("pvc-b").join("uid-1"))]
    );
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterViaMapper);
    assert!(!report.has_findings());
}

#[test]
fn b1_a_publish_entry_with_the_device_bound_on_it_is_in_use() {
    // NodePublishVolume bind mounts the device onto the publish file.
    let mut node = FixtureNode::new();
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let publish = node.layout.block_publish_dir("pvc-b").join("uid-1");
    node.write(&publish, "");
    node.mount_with("0:5", "/sdc", &publish, "devtmpfs", "udev");
    let report = node.diagnose();
    assert_eq!(only_volume(&report).class, VolumeClass::InUse);
    assert!(!report.has_findings());
}

#[test]
fn b2_a_block_volume_left_over_after_a_reboot_is_not_in_use() {
    // As a reboot leaves a mapped block volume (the listing in jsafrane's
    // comment on kubernetes#84625): staging/<pv>/ present, a 0-byte
    // publish/<pv>/<podUID> file, no pod directory, nothing mounted.
    let node = FixtureNode::new();
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let publish = node.layout.block_publish_dir("pvc-b").join("uid-1");
    node.write(&publish, "");
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::OrphanedStaged);
    assert_eq!(v.publish_entries, [s(&publish)]);
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterViaMapper);
    assert!(report.has_findings());
    assert!(
        v.operator_plan
            .iter()
            .any(|step| step.contains("NodeUnstageVolume")),
        "{:?}",
        v.operator_plan
    );
}

#[test]
fn b2_a_mounted_global_mount_nobody_refers_to_is_orphaned_staged() {
    let (node, global) = restart_121937();
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::OrphanedStaged);
    assert!(v.mounted);
    assert!(v.pod_refs.is_empty());
    assert!(v.pod_dirs.is_empty());
    assert_eq!(v.device_mount_path, s(gm(&global)));
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterUncertain);
    assert!(report.has_findings());
    assert_eq!(report.summary.orphaned_staged, 1);
    assert_eq!(report.summary.findings, 1);
}

#[test]
fn b2_an_unmapped_staged_block_volume_is_orphaned_staged() {
    let node = FixtureNode::new();
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    assert_eq!(
        only_volume(&node.diagnose()).class,
        VolumeClass::OrphanedStaged
    );
}

#[test]
fn b2_a_block_volume_with_a_pod_map_entry_is_tracked_by_the_pod_dir() {
    let node = FixtureNode::new();
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let map = node.layout.pod_block_volumes_dir("uid-1").join("pvc-b");
    node.mkdir(map.parent().expect("parent"));
    node.symlink("/dev/sdc", &map);
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::TrackedByPodDir);
    assert_eq!(v.pod_dirs, [s(&map)]);
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterViaMapper);
}

#[test]
fn b2_a_mounted_volume_whose_pod_dir_still_names_it_is_tracked_not_orphaned() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume(
        "uid-1",
        "pvc-1",
        PodData::Written {
            driver: DRIVER,
            handle: HANDLE,
        },
    );
    node.mount("8:16", "/", gm(&global));
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::TrackedByPodDir);
    assert_eq!(v.pod_dirs, [s(&pod)]);
    assert!(!report.has_findings());
}

#[test]
fn b3_a_staged_directory_without_a_mount_is_staged_unmounted() {
    // Fixture 3 (fs-after-reboot): directory and file exist, no mount lines.
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::StagedUnmounted);
    assert!(!v.mounted);
    assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterUncertain);
    assert!(report.has_findings());
}

#[test]
fn b4_pod_data_unreadable_for_missing_truncated_and_empty_files() {
    // Fixture 4 (fs-101791), variants (a) missing, (b) truncated, (c) zero bytes.
    for data in [PodData::Missing, PodData::Truncated, PodData::Empty] {
        let mut node = FixtureNode::new();
        let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
        let pod = node.pod_fs_volume("uid-1", "pvc-1", data);
        node.bind("8:16", gm(&global), mnt(&pod));
        let report = node.diagnose();
        let v = only_volume(&report);
        assert_eq!(v.class, VolumeClass::PodDataUnreadable, "{data:?}");
        assert_eq!(v.pod_dirs, [s(&pod)], "{data:?}");

        assert_eq!(report.pod_local.len(), 1, "{data:?}");
        let p = &report.pod_local[0];
        assert_eq!(p.path, s(&pod));
        assert_eq!(p.pod_uid, "uid-1");
        assert!(p.pod_mount_mounted);
        let recovered = p.recovered_from.as_ref().expect("fallback recovers");
        assert_eq!(recovered.global_data_dir, s(&global));
        assert_eq!(recovered.volume_handle, HANDLE);
        assert_eq!(recovered.spec_name, "pvc-1");
        assert!(recovered.listed);
        assert_eq!(p.decline_reason, None);
        assert_eq!(p.paired_global_volume, Some(s(gm(&global))));
        assert_eq!(p.paired_by, Some(PairedBy::Fallback));
        // With the gate on, the listing registers it before the pod walk.
        assert_eq!(v.kubelet_plan, PlannedAction::WouldRegisterUncertain);
        assert!(report.has_findings());
        assert_eq!(report.summary.findings, 2, "{data:?}");
    }
}

#[test]
fn b4_pod_data_that_names_no_driver_is_unusable_too() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.voldata(&pod, &[("specVolID", "pvc-1"), ("volumeHandle", HANDLE)]);
    node.bind("8:16", gm(&global), mnt(&pod));
    let report = node.diagnose();
    assert_eq!(only_volume(&report).class, VolumeClass::PodDataUnreadable);
    assert!(report.pod_local[0].voldata_error.contains("driverName"));
}

#[test]
fn after_reboot_a_bad_pod_file_is_paired_by_name_and_the_fallback_declines() {
    // The known alpha gap: nothing is mounted, so the fallback has nothing to
    // follow; the report still shows the pod directory next to its volume.
    // The pair is made through specVolID, which only a kubelet with KEP-6058
    // writes into the global file (a released kubelet's file pairs only
    // through the API: see real_nodes.rs).
    let node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    let report = node.diagnose();
    let p = &report.pod_local[0];
    assert!(!p.pod_mount_mounted);
    assert_eq!(p.recovered_from, None);
    assert_eq!(p.decline_reason, Some(DeclineReason::NoReference));
    assert_eq!(p.paired_global_volume, Some(s(gm(&global))));
    assert_eq!(p.paired_by, Some(PairedBy::Name));
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::PodDataUnreadable);
    assert_eq!(v.pod_dirs, [s(&pod)]);
}

#[test]
fn inline_collision_does_not_pair_and_leaves_the_pv_orphaned() {
    // Fixture 5: PV "data" staged on 8:16; an inline volume "data" mounted from 8:32.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-data", Some("data"));
    let pod = node.pod_fs_volume("uid-1", "data", PodData::Missing);
    node.mount("8:16", "/", gm(&global));
    node.mount("8:32", "/", mnt(&pod));
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::OrphanedStaged);
    assert!(v.pod_dirs.is_empty());
    let p = &report.pod_local[0];
    assert_eq!(p.paired_global_volume, None);
    assert_eq!(p.decline_reason, Some(DeclineReason::NoReference));

    // With a readable inline file naming another driver, still no pairing.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-data", Some("data"));
    let pod = node.pod_fs_volume(
        "uid-1",
        "data",
        PodData::Written {
            driver: "inline.csi.io",
            handle: "csi-ephemeral-1",
        },
    );
    node.mount("8:16", "/", gm(&global));
    node.mount("8:32", "/", mnt(&pod));
    let report = node.diagnose();
    assert_eq!(only_volume(&report).class, VolumeClass::OrphanedStaged);
    assert!(report.pod_local.is_empty());
}

#[test]
fn subdir_staging_is_in_use_through_the_nested_mount() {
    // Fixture 13 with a readable pod file.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let inner = gm(&global).join("inner");
    node.mkdir(&inner);
    let pod = node.pod_fs_volume(
        "uid-1",
        "pvc-1",
        PodData::Written {
            driver: DRIVER,
            handle: HANDLE,
        },
    );
    node.bind("8:16", &inner, mnt(&pod));
    let report = node.diagnose();
    let v = only_volume(&report);
    assert!(!v.mounted);
    assert_eq!(v.nested_mounts, [s(&inner)]);
    assert_eq!(v.pod_refs, [s(mnt(&pod))]);
    assert_eq!(v.class, VolumeClass::InUse);
}

#[test]
fn subdir_staging_with_a_bad_pod_file_is_reported_with_the_fallback_declining() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let inner = gm(&global).join("inner");
    node.mkdir(&inner);
    node.pod_fs_volume("uid-1", "pvc-1", PodData::Truncated);
    let pod = node.layout.pod_fs_volumes_dir("uid-1").join("pvc-1");
    node.bind("8:16", &inner, mnt(&pod));
    let report = node.diagnose();
    assert_eq!(only_volume(&report).class, VolumeClass::PodDataUnreadable);
    let p = &report.pod_local[0];
    assert_eq!(p.decline_reason, Some(DeclineReason::NoUsableReference));
    assert_eq!(p.paired_by, Some(PairedBy::MountReference));
}

fn node_json(volumes_in_use: Option<Vec<&str>>) -> NodeView {
    let status = match volumes_in_use {
        Some(names) => format!(
            r#"{{"volumesInUse":{},"volumesAttached":[{{"name":"{}","devicePath":"/dev/xvdf"}}]}}"#,
            serde_json::to_string(&names).expect("json"),
            unique_volume_name(DRIVER, HANDLE)
        ),
        None => "{}".to_owned(),
    };
    let json = format!(r#"{{"kind":"Node","metadata":{{"name":"{NODE}"}},"status":{status}}}"#);
    parse_node(json.as_bytes(), Some(NODE)).expect("node parses")
}

#[test]
fn b5_a_staged_volume_missing_from_volumes_in_use_is_at_risk() {
    let (node, _) = restart_121937();
    let unique = unique_volume_name(DRIVER, HANDLE);

    let report = node.diagnose_with(Some(node_json(Some(vec![]))), None);
    let v = only_volume(&report);
    assert_eq!(v.flags, [Flag::AtRisk]);
    let api = v.api.as_ref().expect("api section");
    assert_eq!(api.in_volumes_in_use, Some(false));
    assert_eq!(api.in_volumes_attached, Some(true));
    assert_eq!(api.device_path.as_deref(), Some("/dev/xvdf"));
    assert_eq!(report.summary.at_risk, 1);

    // Neither list names it: a driver with attachRequired: false is never in
    // volumesInUse, so with nothing saying the volume is attachable there is no flag.
    let report = node.diagnose_with(Some(node_json(None)), None);
    assert!(only_volume(&report).flags.is_empty());
    let api = only_volume(&report).api.clone().expect("api section");
    assert_eq!(api.in_volumes_attached, Some(false));
    assert_eq!(api.attachable, None);

    // Listed in volumesInUse: not at risk.
    let report = node.diagnose_with(Some(node_json(Some(vec![unique.as_str()]))), None);
    assert!(only_volume(&report).flags.is_empty());

    // Without API data there is no flag and no api section.
    let report = node.diagnose();
    assert!(only_volume(&report).flags.is_empty());
    assert!(only_volume(&report).api.is_none());
}

#[test]
fn b5_an_in_use_volume_missing_from_volumes_in_use_is_a_finding() {
    let (node, _, _) = healthy();
    let report = node.diagnose_with(Some(node_json(Some(vec![]))), None);
    let v = only_volume(&report);
    assert_eq!(v.class, VolumeClass::InUse);
    assert_eq!(v.flags, [Flag::AtRisk]);
    assert!(report.has_findings());
    // A pod uses it: the plan has kubelet track it again and never unstages it.
    assert!(
        v.operator_plan
            .iter()
            .any(|step| step.contains("do not unstage it")),
        "{:?}",
        v.operator_plan
    );
    assert!(
        !v.operator_plan
            .iter()
            .any(|step| step.starts_with("Have it unstaged")),
        "{:?}",
        v.operator_plan
    );
}

fn attachments(json: &str) -> Vec<VolumeAttachmentView> {
    parse_volume_attachments(json.as_bytes()).expect("volume attachments parse")
}

#[test]
fn b6_the_volume_attachment_is_found_by_its_csi_sha_name() {
    let (node, _, _) = healthy();
    let name_a = attachment_name(HANDLE, DRIVER, NODE);
    let name_b = attachment_name(HANDLE, DRIVER, "node-b");
    let list = format!(
        r#"{{"kind":"VolumeAttachmentList","items":[
          {{"metadata":{{"name":"{name_b}"}},"spec":{{"attacher":"{DRIVER}","nodeName":"node-b"}},"status":{{"attached":false}}}},
          {{"metadata":{{"name":"{name_a}"}},"spec":{{"attacher":"{DRIVER}","nodeName":"{NODE}","source":{{"persistentVolumeName":"pvc-1"}}}},"status":{{"attached":true}}}}]}}"#
    );
    let report = node.diagnose_with(None, Some(attachments(&list)));
    let v = only_volume(&report);
    assert_eq!(v.attachment_name.as_deref(), Some(name_a.as_str()));
    let va = v
        .api
        .as_ref()
        .and_then(|a| a.volume_attachment.as_ref())
        .expect("volume attachment section");
    assert_eq!(va.name, name_a);
    assert!(va.exists);
    assert_eq!(va.attached, Some(true));
    assert_eq!(va.node_name.as_deref(), Some(NODE));
    assert_eq!(va.node_matches, Some(true));
    assert!(v.flags.is_empty());
    assert!(!report.has_findings());
}

#[test]
fn b6_a_missing_volume_attachment_is_not_a_finding() {
    let (node, _, _) = healthy();
    let report = node.diagnose_with(None, Some(attachments(r#"{"items":[]}"#)));
    let va = only_volume(&report)
        .api
        .as_ref()
        .and_then(|a| a.volume_attachment.clone())
        .expect("volume attachment section");
    assert!(!va.exists);
    assert_eq!(va.attached, None);
    assert!(!report.has_findings());
}

#[test]
fn b6_detached_or_misplaced_attachments_are_flagged_while_mounted() {
    let (node, _, _) = healthy();
    let name = attachment_name(HANDLE, DRIVER, NODE);
    let detached = format!(
        r#"{{"items":[{{"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"{NODE}"}},"status":{{"attached":false}}}}]}}"#
    );
    let report = node.diagnose_with(None, Some(attachments(&detached)));
    assert_eq!(only_volume(&report).flags, [Flag::VolumeAttachmentDetached]);

    let elsewhere = format!(
        r#"{{"items":[{{"metadata":{{"name":"{name}"}},"spec":{{"nodeName":"node-b"}},"status":{{"attached":true}}}}]}}"#
    );
    let report = node.diagnose_with(None, Some(attachments(&elsewhere)));
    let v = only_volume(&report);
    assert_eq!(v.flags, [Flag::VolumeAttachmentNodeMismatch]);
    assert_eq!(
        v.api
            .as_ref()
            .and_then(|a| a.volume_attachment.as_ref())
            .and_then(|va| va.node_matches),
        Some(false)
    );

    // After a reboot nothing is mounted: a detached attachment is expected then.
    let after_reboot = FixtureNode::new();
    after_reboot.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let report = after_reboot.diagnose_with(None, Some(attachments(&detached)));
    assert!(only_volume(&report).flags.is_empty());
}

#[test]
fn mounted_entries_kubelet_will_not_list_are_findings() {
    // A mounted legacy global mount (#105323 shape) and an unmounted identity mismatch.
    let mut node = FixtureNode::new();
    let legacy = node.layout.plugin_dir().join("pv/pvc-x");
    node.mkdir(gm(&legacy));
    node.mount("8:64", "/", gm(&legacy));
    let mismatch = node
        .layout
        .plugin_dir()
        .join(DRIVER)
        .join(csi_globalmount::layout::sha256_hex("some-other-handle"));
    node.mkdir(gm(&mismatch));
    node.voldata(
        &mismatch,
        &[
            ("driverName", DRIVER),
            ("volumeHandle", "handle-of-the-staged-pv"),
        ],
    );
    let report = node.diagnose();
    assert!(report.global_volumes.is_empty());
    let mounted: Vec<(String, bool)> = report
        .skipped
        .iter()
        .map(|k| (k.path.clone(), k.mounted))
        .collect();
    assert_eq!(mounted, [(s(&mismatch), false), (s(&legacy), true)]);
    assert_eq!(report.summary.mounted_skipped, 1);
    assert_eq!(report.summary.findings, 1);
}

#[test]
fn alias_mounts_of_the_kubelet_root_are_not_pod_refs() {
    // #105323: the same mounts show up again under /mnt/vda1/var/lib/kubelet.
    let (mut node, global, pod) = healthy();
    let alias = |p: &std::path::Path| {
        std::path::Path::new("/mnt/vda1").join(p.strip_prefix("/").expect("absolute"))
    };
    node.mount("8:16", "/", alias(&gm(&global)));
    node.mount("8:16", "/", alias(&mnt(&pod)));
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.pod_refs, [s(mnt(&pod))]);
    assert_eq!(v.other_refs, [s(alias(&gm(&global))), s(alias(&mnt(&pod)))]);
    assert_eq!(v.class, VolumeClass::InUse);
}

#[test]
fn a_non_default_kubelet_root_works() {
    // k0s keeps kubelet under /var/lib/k0s/kubelet.
    let mut node = FixtureNode::with_root("/var/lib/k0s/kubelet");
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    assert!(s(&global).starts_with("/var/lib/k0s/kubelet/plugins/kubernetes.io/csi/"));
    node.mount("8:16", "/", gm(&global));
    assert_eq!(
        only_volume(&node.diagnose()).class,
        VolumeClass::OrphanedStaged
    );
}

#[test]
fn a_kubelet_root_with_a_space_matches_the_escaped_mount_table() {
    let (mut node, global, pod) = {
        let mut node = FixtureNode::with_root("/var/lib/my kubelet");
        let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
        let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
        node.bind("8:16", gm(&global), mnt(&pod));
        (node, global, pod)
    };
    assert!(node.mountinfo_text().contains(r"/var/lib/my\040kubelet/"));
    node.mount("8:1", "/", "/unrelated");
    let report = node.diagnose();
    let v = only_volume(&report);
    assert_eq!(v.pod_refs, [s(mnt(&pod))]);
    assert_eq!(
        report.pod_local[0]
            .recovered_from
            .as_ref()
            .map(|r| r.global_data_dir.clone()),
        Some(s(&global))
    );
}

#[test]
fn a_missing_kubelet_root_is_an_error_not_a_clean_node() {
    let node = FixtureNode::new();
    let fs = node.fs();
    let table = node.table();
    let layout = KubeletLayout::new("/var/lib/not-kubelet");
    let inputs = csi_globalmount::NodeInputs {
        fs: &fs,
        layout: &layout,
        table: &table,
        mountinfo_source: "fixture".to_owned(),
        node_name: None,
        node: None,
        volume_attachments: None,
    };
    let err = csi_globalmount::diagnose(&inputs).unwrap_err();
    assert!(
        matches!(err, csi_globalmount::DiagnoseError::KubeletRoot { .. }),
        "{err}"
    );
}

#[test]
fn g1_g2_g3_g4_the_reconstruction_plan() {
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, "vol-only-global", Some("pvc-1"));
    node.stage_fs(DRIVER, "vol-both", Some("pvc-2"));
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let listing = node.list();
    let only_global = unique_volume_name(DRIVER, "vol-only-global");
    let both = unique_volume_name(DRIVER, "vol-both");
    let pod_only = unique_volume_name(DRIVER, "vol-pod-only");
    let pod_walk = vec![both.clone(), pod_only.clone()];

    let plan = plan_reconstruction(true, &listing.volumes, &pod_walk);
    let actions: Vec<(String, PlannedAction)> = plan
        .iter()
        .map(|p| (p.unique_volume_name.clone(), p.action))
        .collect();
    let mut expected = vec![
        (only_global.clone(), PlannedAction::WouldRegisterUncertain),
        (
            unique_volume_name("blk.csi.io", "blk-b"),
            PlannedAction::WouldRegisterViaMapper,
        ),
        // Listed first, so the listing's registration stands (9 of the review).
        (both.clone(), PlannedAction::WouldRegisterUncertain),
        (pod_only.clone(), PlannedAction::FromPodDir),
    ];
    // Listing order decides the first two; sort both sides to compare.
    let mut got = actions.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    // G2: a volume found both ways is planned exactly once.
    assert_eq!(
        plan.iter().filter(|p| p.unique_volume_name == both).count(),
        1
    );
    let uncertain = plan
        .iter()
        .find(|p| p.unique_volume_name == only_global)
        .expect("planned");
    assert_eq!(
        uncertain.device_mount_path,
        Some(node.layout.device_mount_path(DRIVER, "vol-only-global"))
    );

    // G4: gate off, nothing comes from the listing.
    let off = plan_reconstruction(false, &listing.volumes, &pod_walk);
    assert!(off.iter().all(|p| p.action == PlannedAction::FromPodDir));
    assert_eq!(off.len(), 2);
}
