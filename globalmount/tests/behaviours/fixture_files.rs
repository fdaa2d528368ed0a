//! Checks against the committed fixture files (see `tests/fixtures/README.md`).

use std::path::{Path, PathBuf};

use csi_globalmount::MountTable;
use csi_globalmount::layout::{attachment_name, sha256_hex, unique_volume_name};
use csi_globalmount::voldata::{decode, encode};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn a_released_kubelets_global_file_has_no_spec_vol_id() {
    let bytes = fixture("vol_data-global-released.json");
    let data = decode(&bytes).expect("decodes");
    assert_eq!(encode(&data), bytes);
    assert_eq!(data.spec_vol_id(), "");
    assert!(data.missing_identity_keys().is_empty());
    let pod = decode(&fixture("vol_data-pod-topsc.json")).expect("decodes");
    assert_eq!(data.volume_handle(), pod.volume_handle());
    assert_eq!(data.driver_name(), pod.driver_name());
}

#[test]
fn the_real_pod_vol_data_line_roundtrips_byte_for_byte() {
    let bytes = fixture("vol_data-pod-topsc.json");
    let data = decode(&bytes).expect("decodes");
    assert_eq!(encode(&data), bytes);
    assert_eq!(data.driver_name(), "topsc.topke.io");
    assert_eq!(data.spec_vol_id(), data.volume_handle());
    assert_eq!(data.get("volumeLifecycleMode"), "Persistent");
    assert_eq!(
        data.get("attachmentID"),
        attachment_name(data.volume_handle(), data.driver_name(), data.node_name())
    );
    assert_eq!(
        unique_volume_name(data.driver_name(), data.volume_handle()),
        "kubernetes.io/csi/topsc.topke.io^pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c"
    );
}

fn corpus() -> MountTable {
    MountTable::parse(fixture("mountinfo-corpus.txt")).expect("corpus parses")
}

#[test]
fn the_mountinfo_corpus_parses_with_every_shape() {
    let table = corpus();
    let entries = table.entries();
    assert_eq!(entries.len(), 15);
    let by_id = |id: i64| entries.iter().find(|m| m.id == id).expect("entry present");

    let kernel = by_id(36);
    assert_eq!((kernel.parent_id, kernel.major, kernel.minor), (35, 98, 0));
    assert_eq!(kernel.super_options, ["rw", "errors=continue"]);
    assert!(by_id(40).optional_fields.is_empty());
    assert_eq!(by_id(41).optional_fields, ["shared:7", "master:2"]);
    assert_eq!(by_id(42).super_options, ["rw", "user_id=0", r#"opt="a,b""#]);

    let spaced = by_id(43);
    assert_eq!(spaced.mount_point, PathBuf::from("/mnt/with space"));
    assert_eq!(spaced.root, PathBuf::from("/srv/my data"));
    assert_eq!(spaced.mount_point_raw, r"/mnt/with\040space");

    let deleted = by_id(44);
    assert!(deleted.deleted);
    assert!(deleted.mount_point.ends_with("pvc-gone/mount"));
}

#[test]
fn duplicate_kubelet_paths_are_refs_of_the_global_mount() {
    let table = corpus();
    let gm = format!(
        "/var/lib/kubelet/plugins/kubernetes.io/csi/rook-ceph.cephfs.csi.ceph.com/{}/globalmount",
        sha256_hex("cephfs-samenode-test2")
    );
    let pod = "/var/lib/kubelet/pods/5f1c2a9e-0000-4000-8000-000000000001/volumes/kubernetes.io~csi/pvc-cephfs/mount";
    let refs = table.search_mount_points(Path::new(&gm)).expect("refs");
    assert_eq!(
        refs,
        [
            PathBuf::from(format!("/mnt/vda1{gm}")),
            PathBuf::from(pod),
            PathBuf::from(format!("/mnt/vda1{pod}")),
        ]
    );
}

#[test]
fn the_later_of_two_mounts_at_one_path_wins() {
    let refs = corpus()
        .search_mount_points(Path::new("/mnt/shadowed"))
        .expect("refs");
    assert_eq!(refs, [PathBuf::from("/srv/sdg-alias")]);
}

#[test]
fn a_global_mount_under_a_non_default_root_is_a_mount_point() {
    let gm = format!(
        "/var/lib/k0s/kubelet/plugins/kubernetes.io/csi/csi.proxmox.sinextra.dev/{}/globalmount",
        sha256_hex("pve-cluster/pve-1/local-lvm/vm-9999-disk-1")
    );
    assert!(corpus().is_mount_point(Path::new(&gm)));
}
