//! Behaviours A1-A12: the listing of global volumes (a port of KEP-6058's
//! `ListGlobalVolumes` and its tests), on trees built in temporary directories.

use std::path::PathBuf;

use csi_globalmount::discover::SpecVolIdSource;
use csi_globalmount::layout::sha256_hex;
use csi_globalmount::{SkipReason, VolumeMode, list_global_volumes};

use crate::fixture::{FixtureNode, gm, s};

const DRIVER: &str = "ebs.csi.aws.com";

fn reasons(listing: &csi_globalmount::Listing) -> Vec<(String, SkipReason)> {
    listing
        .skipped
        .iter()
        .map(|k| (s(&k.path), k.reason))
        .collect()
}

#[test]
fn a1_missing_plugin_dir_gives_an_empty_listing_and_no_error() {
    let node = FixtureNode::new();
    let listing = node.list();
    assert!(listing.volumes.is_empty());
    assert!(listing.skipped.is_empty());
}

#[test]
fn a1_any_other_failure_to_read_the_plugin_dir_is_an_error() {
    let node = FixtureNode::new();
    // A file where the directory should be: reading it fails with ENOTDIR.
    node.write(node.layout.plugin_dir(), "not a directory");
    let err = list_global_volumes(&node.fs(), &node.layout).unwrap_err();
    assert_eq!(err.path, node.layout.plugin_dir());
}

#[test]
fn a2_entries_come_in_byte_order_and_filesystem_before_block() {
    let node = FixtureNode::new();
    node.stage_block("pvc-block", "blk.csi.io", "blk-1");
    node.stage_fs("b.csi.io", "h-b", Some("pvc-b"));
    node.stage_fs("a.csi.io", "h-a2", Some("pvc-a2"));
    node.stage_fs("a.csi.io", "h-a1", Some("pvc-a1"));
    node.stage_fs("B.csi.io", "h-B", Some("pvc-B"));
    let listing = node.list();
    let names: Vec<&str> = listing
        .volumes
        .iter()
        .map(|v| v.spec.name.as_str())
        .collect();
    // Driver order: "B.csi.io" < "a.csi.io" < "b.csi.io" (bytes); within
    // a.csi.io the sha256 directory names decide.
    let (first_a, second_a) = if sha256_hex("h-a1") < sha256_hex("h-a2") {
        ("pvc-a1", "pvc-a2")
    } else {
        ("pvc-a2", "pvc-a1")
    };
    assert_eq!(names, ["pvc-B", first_a, second_a, "pvc-b", "pvc-block"]);
    assert_eq!(listing.volumes[4].mode(), VolumeMode::Block);
}

#[test]
fn a3_non_directories_are_ignored_at_both_levels_symlinks_included() {
    let node = FixtureNode::new();
    let good = node.stage_fs(DRIVER, "vol-real", Some("pvc-real"));
    let plugin_dir = node.layout.plugin_dir();
    // Driver level: a file, and a symlink to a real driver directory.
    node.write(plugin_dir.join("stray-file"), "x");
    node.symlink(
        node.host(plugin_dir.join(DRIVER)),
        plugin_dir.join("link.csi.io"),
    );
    // Volume level: a file, and a symlink to a real volume directory whose
    // name is the correct sha of its handle.
    node.write(plugin_dir.join(DRIVER).join("stray-file"), "x");
    let linked = node.stage_fs("other.csi.io", "vol-linked", Some("pvc-linked"));
    node.symlink(
        node.host(&linked),
        plugin_dir.join(DRIVER).join(sha256_hex("vol-linked")),
    );

    let listing = node.list();
    let listed: Vec<PathBuf> = listing
        .volumes
        .iter()
        .map(|v| v.volume_dir.clone())
        .collect();
    assert_eq!(
        listed,
        [good, linked],
        "symlinked entries must not be listed twice"
    );
    let skipped = reasons(&listing);
    for path in [
        plugin_dir.join("link.csi.io"),
        plugin_dir.join("stray-file"),
        plugin_dir.join(DRIVER).join("stray-file"),
        plugin_dir.join(DRIVER).join(sha256_hex("vol-linked")),
    ] {
        assert!(
            skipped.contains(&(s(&path), SkipReason::NotADirectory)),
            "{} not reported as not_a_directory in {skipped:?}",
            path.display()
        );
    }
}

#[test]
fn a4_the_volume_devices_subtree_is_never_a_driver_even_when_dressed_as_one() {
    // Fixture 8: volumeDevices/<sha>/globalmount with driverName "volumeDevices".
    let node = FixtureNode::new();
    let decoy = node.layout.block_dir().join(sha256_hex("decoy-handle"));
    node.mkdir(gm(&decoy));
    node.voldata(
        &decoy,
        &[
            ("driverName", "volumeDevices"),
            ("volumeHandle", "decoy-handle"),
        ],
    );
    assert_eq!(
        node.layout.fs_volume_dir("volumeDevices", "decoy-handle"),
        decoy,
        "the decoy passes every identity check of the filesystem walk"
    );
    let listing = node.list();
    assert!(
        listing
            .volumes
            .iter()
            .all(|v| v.mode() != VolumeMode::Filesystem),
        "{:?}",
        listing.volumes
    );
    // The block walk sees it as a block volume that was never staged.
    assert_eq!(reasons(&listing), [(s(&decoy), SkipReason::BlockNotStaged)]);
}

#[test]
fn a5_broken_entries_are_skipped_with_reasons_without_hiding_the_good_one() {
    // Fixture 9. Broken directories are named to sort before the good one.
    let node = FixtureNode::new();
    let driver_dir = node.layout.plugin_dir().join(DRIVER);
    let good_handle = "vol-good";
    assert!(sha256_hex(good_handle).as_str() > "00");

    let no_globalmount = driver_dir.join("00-no-globalmount");
    node.voldata(
        &no_globalmount,
        &[("driverName", DRIVER), ("volumeHandle", "x")],
    );
    let cases: [(&str, Option<&str>, SkipReason); 7] = [
        ("00-missing", None, SkipReason::VoldataUnreadable),
        ("00-empty", Some(""), SkipReason::VoldataUnreadable),
        (
            "00-truncated",
            Some("{\"volumeHandle\":\"x\","),
            SkipReason::VoldataUnreadable,
        ),
        (
            "00-non-string",
            Some("{\"driverName\":1,\"volumeHandle\":\"x\"}"),
            SkipReason::VoldataUnreadable,
        ),
        (
            "00-no-driver",
            Some("{\"volumeHandle\":\"x\"}\n"),
            SkipReason::VoldataIncomplete,
        ),
        (
            "00-empty-handle",
            Some("{\"driverName\":\"ebs.csi.aws.com\",\"volumeHandle\":\"\"}\n"),
            SkipReason::VoldataIncomplete,
        ),
        ("00-null", Some("null\n"), SkipReason::VoldataIncomplete),
    ];
    for (name, content, _) in &cases {
        let dir = driver_dir.join(name);
        node.mkdir(gm(&dir));
        if let Some(content) = content {
            node.write(dir.join("vol_data.json"), content);
        }
    }
    let good = node.stage_fs(DRIVER, good_handle, Some("pvc-good"));

    let listing = node.list();
    assert_eq!(listing.volumes.len(), 1);
    assert_eq!(listing.volumes[0].volume_dir, good);
    let skipped = reasons(&listing);
    assert!(skipped.contains(&(s(&no_globalmount), SkipReason::NoGlobalmount)));
    for (name, _, reason) in cases {
        assert!(
            skipped.contains(&(s(driver_dir.join(name)), reason)),
            "{name}: expected {reason:?} in {skipped:?}"
        );
    }
    assert_eq!(skipped.len(), 8);
}

#[test]
fn a6_a_directory_named_for_another_handle_is_an_identity_mismatch() {
    // Fixture 6: sha("some-other-handle") holding data for handle-of-the-staged-pv.
    let node = FixtureNode::new();
    let dir = node
        .layout
        .plugin_dir()
        .join(DRIVER)
        .join(sha256_hex("some-other-handle"));
    node.mkdir(gm(&dir));
    node.voldata(
        &dir,
        &[
            ("driverName", DRIVER),
            ("specVolID", "pvc-staged"),
            ("volumeHandle", "handle-of-the-staged-pv"),
        ],
    );
    let listing = node.list();
    assert!(listing.volumes.is_empty());
    let skip = &listing.skipped[0];
    assert_eq!(skip.reason, SkipReason::IdentityMismatch);
    assert_eq!(skip.path, dir);
    assert_eq!(
        skip.expected.as_deref(),
        Some(
            node.layout
                .device_mount_path(DRIVER, "handle-of-the-staged-pv")
                .as_path()
        )
    );
    assert!(skip.detail.contains("sha256"), "{}", skip.detail);
}

#[test]
fn a6_a_driver_directory_that_is_not_the_files_driver_is_an_identity_mismatch() {
    let node = FixtureNode::new();
    let dir = node
        .layout
        .plugin_dir()
        .join("other.csi.io")
        .join(sha256_hex("vol-1"));
    node.mkdir(gm(&dir));
    node.voldata(&dir, &[("driverName", DRIVER), ("volumeHandle", "vol-1")]);
    let listing = node.list();
    assert!(listing.volumes.is_empty());
    assert_eq!(listing.skipped[0].reason, SkipReason::IdentityMismatch);
    assert_eq!(
        listing.skipped[0].expected,
        Some(node.layout.device_mount_path(DRIVER, "vol-1"))
    );
    assert!(listing.skipped[0].detail.contains("driver directory"));
}

#[test]
fn a7_a_pre_feature_file_is_named_by_its_handle() {
    // Fixture 7: only driverName and volumeHandle.
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, "vol-0abc", None);
    let listing = node.list();
    let v = &listing.volumes[0];
    assert_eq!(v.spec.name, "vol-0abc");
    assert_eq!(v.spec_vol_id, "");
    assert_eq!(v.spec_vol_id_source, SpecVolIdSource::Handle);
    assert_eq!(
        v.unique_volume_name(),
        "kubernetes.io/csi/ebs.csi.aws.com^vol-0abc"
    );
}

#[test]
fn a8_a_filesystem_entry_reports_its_globalmount_mode_and_selinux_context() {
    let node = FixtureNode::new();
    let dir = node.layout.fs_volume_dir(DRIVER, "vol-se");
    node.mkdir(gm(&dir));
    node.voldata(
        &dir,
        &[
            ("driverName", DRIVER),
            (
                "seLinuxMountContext",
                "system_u:object_r:container_file_t:s0:c1,c2",
            ),
            ("specVolID", "pvc-se"),
            ("volumeHandle", "vol-se"),
            ("volumeLifecycleMode", "Persistent"),
        ],
    );
    let v = &node.list().volumes[0];
    assert_eq!(v.device_mount_path, gm(&dir));
    assert_eq!(v.mode(), VolumeMode::Filesystem);
    assert_eq!(v.spec.mode, VolumeMode::Filesystem);
    assert_eq!(v.spec.name, "pvc-se");
    assert_eq!(v.spec.driver, DRIVER);
    assert_eq!(v.spec.volume_handle, "vol-se");
    assert_eq!(v.spec_vol_id_source, SpecVolIdSource::File);
    assert_eq!(
        v.se_linux_mount_context,
        "system_u:object_r:container_file_t:s0:c1,c2"
    );
}

#[test]
fn a9_block_walk_rules() {
    // Fixture 10 variants, all on one node; each must not disturb the others.
    let node = FixtureNode::new();
    let block_dir = node.layout.block_dir();
    let staged = node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    // Staging removed: unstage succeeded, cleanup did not finish.
    let unstaged = node.stage_block("pvc-gone", "blk.csi.io", "blk-gone");
    node.remove(node.layout.block_staging_path("pvc-gone"));
    // A name mismatch: the file names another specVolID.
    let renamed = block_dir.join("pvc-renamed");
    node.voldata(
        renamed.join("data"),
        &[
            ("driverName", "blk.csi.io"),
            ("specVolID", "pvc-other"),
            ("volumeHandle", "blk-r"),
        ],
    );
    node.mkdir(block_dir.join("staging/pvc-renamed"));
    // No specVolID: there is no fallback to the handle.
    let anonymous = block_dir.join("pvc-anon");
    node.voldata(
        anonymous.join("data"),
        &[("driverName", "blk.csi.io"), ("volumeHandle", "blk-anon")],
    );
    node.mkdir(block_dir.join("staging/pvc-anon"));
    // staging and publish dressed as volumes, with their own staging entries.
    for reserved in ["staging", "publish"] {
        node.voldata(
            block_dir.join(reserved).join("data"),
            &[
                ("driverName", "blk.csi.io"),
                ("specVolID", reserved),
                ("volumeHandle", "blk-x"),
            ],
        );
        node.mkdir(block_dir.join("staging").join(reserved));
    }

    let listing = node.list();
    let listed: Vec<PathBuf> = listing
        .volumes
        .iter()
        .map(|v| v.volume_dir.clone())
        .collect();
    assert_eq!(listed, [staged]);
    let mut skipped = reasons(&listing);
    skipped.sort();
    let mut expected = vec![
        (s(&anonymous), SkipReason::BlockNoSpecvolid),
        (s(&unstaged), SkipReason::BlockNotStaged),
        (s(&renamed), SkipReason::IdentityMismatch),
    ];
    expected.sort();
    assert_eq!(skipped, expected);
    let mismatch = listing
        .skipped
        .iter()
        .find(|k| k.reason == SkipReason::IdentityMismatch)
        .expect("mismatch reported");
    assert_eq!(mismatch.expected, Some(block_dir.join("pvc-other")));
}

#[test]
fn a9_block_entries_with_unusable_data_are_skipped_and_the_good_one_kept() {
    let node = FixtureNode::new();
    let block_dir = node.layout.block_dir();
    let unreadable = block_dir.join("pvc-a-unreadable");
    node.write(unreadable.join("data/vol_data.json"), "{\"driverName\":");
    node.mkdir(block_dir.join("staging/pvc-a-unreadable"));
    let no_driver = block_dir.join("pvc-b-nodriver");
    node.voldata(
        no_driver.join("data"),
        &[("specVolID", "pvc-b-nodriver"), ("volumeHandle", "h")],
    );
    node.mkdir(block_dir.join("staging/pvc-b-nodriver"));
    let good = node.stage_block("pvc-z-good", "blk.csi.io", "blk-z");
    let listing = node.list();
    assert_eq!(listing.volumes.len(), 1);
    assert_eq!(listing.volumes[0].volume_dir, good);
    assert_eq!(
        reasons(&listing),
        [
            (s(&unreadable), SkipReason::VoldataUnreadable),
            (s(&no_driver), SkipReason::VoldataIncomplete),
        ]
    );
}

#[test]
fn a10_a_block_entry_reports_block_mode_and_the_global_map_path_without_dev() {
    let node = FixtureNode::new();
    let dir = node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let listing = node.list();
    let v = &listing.volumes[0];
    assert!(!node.host(dir.join("dev")).exists(), "the pod never ran");
    assert_eq!(v.mode(), VolumeMode::Block);
    assert_eq!(v.spec.mode, VolumeMode::Block);
    assert_eq!(v.spec.name, "pvc-b");
    assert_eq!(v.spec.driver, "blk.csi.io");
    assert_eq!(v.spec.volume_handle, "blk-b");
    assert_eq!(v.device_mount_path, dir.join("dev"));
    assert_eq!(
        v.staging_path,
        Some(node.layout.block_staging_path("pvc-b"))
    );
    assert_eq!(v.se_linux_mount_context, "");
}

#[test]
fn a10_filesystem_and_block_volumes_are_reported_together_each_with_its_mode() {
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, "vol-fs", Some("pvc-fs"));
    node.stage_block("pvc-blk", "blk.csi.io", "blk-1");
    let modes: Vec<(String, VolumeMode)> = node
        .list()
        .volumes
        .iter()
        .map(|v| (v.spec.name.clone(), v.mode()))
        .collect();
    assert_eq!(
        modes,
        [
            ("pvc-fs".to_owned(), VolumeMode::Filesystem),
            ("pvc-blk".to_owned(), VolumeMode::Block)
        ]
    );
}

#[test]
fn a11_an_unreadable_block_subtree_gives_no_block_entries_and_no_error() {
    let node = FixtureNode::new();
    let good = node.stage_fs(DRIVER, "vol-fs", Some("pvc-fs"));
    node.write(node.layout.block_dir(), "not a directory");
    let listing = node.list();
    assert_eq!(listing.volumes.len(), 1);
    assert_eq!(listing.volumes[0].volume_dir, good);
    assert!(
        reasons(&listing).contains(&(s(node.layout.block_dir()), SkipReason::BlockDirUnreadable))
    );
}

#[test]
fn a11_no_block_subtree_gives_no_block_entries_and_no_skip() {
    let node = FixtureNode::new();
    node.stage_fs(DRIVER, "vol-fs", Some("pvc-fs"));
    let listing = node.list();
    assert_eq!(listing.volumes.len(), 1);
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
}

#[test]
fn a12_the_legacy_pv_layout_is_reported_and_never_listed() {
    // Fixture 11: plugins/kubernetes.io/csi/pv/<pvName>/globalmount.
    let node = FixtureNode::new();
    let legacy = node.layout.plugin_dir().join("pv/pvc-x");
    node.mkdir(gm(&legacy));
    node.voldata(
        &legacy,
        &[
            ("driverName", "smb.csi.k8s.io"),
            ("volumeHandle", "//srv/share"),
        ],
    );
    let legacy_without_data = node.layout.plugin_dir().join("pv/pvc-y");
    node.mkdir(gm(&legacy_without_data));
    let listing = node.list();
    assert!(listing.volumes.is_empty());
    assert_eq!(
        reasons(&listing),
        [
            (s(&legacy), SkipReason::LegacyPvLayout),
            (s(&legacy_without_data), SkipReason::LegacyPvLayout),
        ]
    );
}

#[test]
fn a12_a_driver_really_named_pv_is_still_listed() {
    let node = FixtureNode::new();
    let dir = node.stage_fs("pv", "vol-1", Some("pvc-1"));
    let listing = node.list();
    assert_eq!(listing.volumes.len(), 1);
    assert_eq!(listing.volumes[0].volume_dir, dir);
}
