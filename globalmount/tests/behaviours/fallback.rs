//! Behaviours E1-E6: the pod-local fallback (`findGlobalMountDataFromPodMount`
//! and the ConstructVolumeSpec naming rule), plus fixture 13 (subdir staging).

use csi_globalmount::mountrefs::SnapshotRefs;
use csi_globalmount::podlocal::{
    DeclineReason, FallbackError, find_global_mount_data_from_pod_mount, recover_pod_volume,
    spec_name_for_recovered,
};
use csi_globalmount::voldata::VolumeData;

use crate::fixture::{FixtureNode, PodData, gm, mnt};

const DRIVER: &str = "ebs.csi.aws.com";

fn find(
    node: &FixtureNode,
    pod_dir: &std::path::Path,
) -> Result<csi_globalmount::podlocal::RecoveredGlobalData, FallbackError> {
    let fs = node.fs();
    let table = node.table();
    find_global_mount_data_from_pod_mount(
        &fs,
        &SnapshotRefs {
            fs: &fs,
            table: &table,
        },
        pod_dir,
    )
}

#[test]
fn e1_follows_the_bind_mount_to_the_global_mount() {
    // Fixture 1 ("bound"), with the pod file lost.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-0abc", Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.bind("8:16", gm(&global), mnt(&pod));
    let recovered = find(&node, &pod).expect("recovered");
    assert_eq!(recovered.global_data_dir, global);
    assert_eq!(recovered.reference, gm(&global));
    assert_eq!(recovered.data.driver_name(), DRIVER);
    assert_eq!(recovered.data.volume_handle(), "vol-0abc");
}

#[test]
fn e2_no_references_is_an_error() {
    let mut node = FixtureNode::new();
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    // Mounted, but nothing else shows the same device and directory.
    node.mount("8:48", "/", mnt(&pod));
    let err = find(&node, &pod).unwrap_err();
    assert!(
        matches!(err, FallbackError::NoGlobalMountReference { .. }),
        "{err}"
    );
    assert_eq!(err.decline_reason(), DeclineReason::NoReference);
}

#[test]
fn e3_a_decoy_without_volume_data_is_skipped_and_the_real_one_returned() {
    let mut node = FixtureNode::new();
    // The decoy is outside the plugin directory, is a "globalmount", and is
    // earlier in the table; only its missing vol_data.json rejects it.
    let decoy = std::path::PathBuf::from("/tmp/decoy/globalmount");
    node.mkdir(&decoy);
    let global = node.stage_fs(DRIVER, "vol-real", Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.mount("8:16", "/", &decoy);
    node.bind("8:16", gm(&global), mnt(&pod));
    let recovered = find(&node, &pod).expect("recovered");
    assert_eq!(recovered.global_data_dir, global);
    assert_eq!(recovered.rejected.len(), 1);
    assert_eq!(recovered.rejected[0].path, decoy);
}

#[test]
fn e3_when_every_reference_fails_the_error_lists_them_all() {
    let mut node = FixtureNode::new();
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    // Not named globalmount.
    node.mkdir("/mnt/somewhere");
    // A globalmount whose data lacks the handle.
    let no_handle = node.layout.plugin_dir().join(DRIVER).join("abc");
    node.mkdir(gm(&no_handle));
    node.voldata(&no_handle, &[("driverName", DRIVER)]);
    node.mount("8:16", "/", "/mnt/somewhere");
    node.mount("8:16", "/", gm(&no_handle));
    node.mount("8:16", "/", mnt(&pod));
    let err = find(&node, &pod).unwrap_err();
    let FallbackError::NoUsableReference { rejected, .. } = &err else {
        panic!("expected NoUsableReference, got {err}");
    };
    assert_eq!(rejected.len(), 2);
    assert!(
        rejected[0].reason.contains("not globalmount"),
        "{}",
        rejected[0].reason
    );
    assert!(
        rejected[1].reason.contains("volumeHandle"),
        "{}",
        rejected[1].reason
    );
    assert_eq!(err.decline_reason(), DeclineReason::NoUsableReference);
}

#[test]
fn e4_an_inline_volume_does_not_pair_with_a_staged_pv_of_the_same_name() {
    // Fixture 5: global PV "data" on 8:16, pod volume "data" on 8:32.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-data", Some("data"));
    let pod = node.pod_fs_volume("uid-1", "data", PodData::Missing);
    node.mount("8:16", "/", gm(&global));
    node.mount("8:32", "/", mnt(&pod));
    let err = find(&node, &pod).unwrap_err();
    assert!(
        matches!(err, FallbackError::NoGlobalMountReference { .. }),
        "{err}"
    );
}

#[test]
fn e5_naming_rule() {
    let pre_feature = VolumeData::from_pairs([("driverName", DRIVER), ("volumeHandle", "h")]);
    assert_eq!(
        spec_name_for_recovered("pvc-1", &pre_feature).unwrap(),
        "pvc-1"
    );
    let same = VolumeData::from_pairs([
        ("driverName", DRIVER),
        ("volumeHandle", "h"),
        ("specVolID", "pvc-1"),
    ]);
    assert_eq!(spec_name_for_recovered("pvc-1", &same).unwrap(), "pvc-1");
    let other = VolumeData::from_pairs([
        ("driverName", DRIVER),
        ("volumeHandle", "h"),
        ("specVolID", "pvc-2"),
    ]);
    let err = spec_name_for_recovered("pvc-1", &other).unwrap_err();
    assert!(
        matches!(err, FallbackError::SpecVolIdMismatch { .. }),
        "{err}"
    );
    assert_eq!(err.decline_reason(), DeclineReason::SpecVolIdMismatch);
}

#[test]
fn e5_a_global_file_naming_another_volume_is_refused_end_to_end() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-1", Some("pvc-other"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Truncated);
    node.bind("8:16", gm(&global), mnt(&pod));
    let fs = node.fs();
    let table = node.table();
    let err = recover_pod_volume(
        &fs,
        &SnapshotRefs {
            fs: &fs,
            table: &table,
        },
        &pod,
    )
    .unwrap_err();
    assert!(
        matches!(err, FallbackError::SpecVolIdMismatch { .. }),
        "{err}"
    );

    let pre_feature_global = node.stage_fs(DRIVER, "vol-2", None);
    let pod2 = node.pod_fs_volume("uid-2", "pvc-2", PodData::Empty);
    node.bind("8:17", gm(&pre_feature_global), mnt(&pod2));
    let table = node.table();
    let recovered = recover_pod_volume(
        &fs,
        &SnapshotRefs {
            fs: &fs,
            table: &table,
        },
        &pod2,
    )
    .expect("pre-feature file recovered");
    assert_eq!(recovered.spec_name, "pvc-2");
    assert_eq!(recovered.global.global_data_dir, pre_feature_global);
}

#[test]
fn e6_after_a_reboot_the_fallback_declines() {
    // Fixture 3 with a pod directory: nothing is mounted any more.
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, "vol-1", Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    let err = find(&node, &pod).unwrap_err();
    assert!(
        matches!(err, FallbackError::NoGlobalMountReference { .. }),
        "{err}"
    );
}

#[test]
fn e6_a_pod_directory_without_mount_has_no_references() {
    let node = FixtureNode::new();
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.remove(mnt(&pod));
    let err = find(&node, &pod).unwrap_err();
    assert!(
        matches!(err, FallbackError::NoGlobalMountReference { .. }),
        "{err}"
    );
}

#[test]
fn subdir_staging_is_declined_by_the_basename_rule() {
    // Fixture 13: the driver mounts at globalmount/inner and the pod binds from it.
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, "vol-1", Some("pvc-1"));
    let inner = gm(&global).join("inner");
    node.mkdir(&inner);
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Missing);
    node.bind("8:16", &inner, mnt(&pod));
    let err = find(&node, &pod).unwrap_err();
    let FallbackError::NoUsableReference { rejected, .. } = &err else {
        panic!("expected NoUsableReference, got {err}");
    };
    assert_eq!(rejected[0].path, inner);
}
