//! Kubelet's CSI directory layout and the names derived from a volume's identity.

use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// The CSI plugin's name; used unescaped as a path below `plugins/`, where it
/// therefore makes two segments.
pub const CSI_PLUGIN_NAME: &str = "kubernetes.io/csi";
/// The block subtree below the plugin directory.
pub const VOLUME_DEVICES_DIR: &str = "volumeDevices";
/// Name of the staging mount point of a filesystem volume.
pub const GLOBAL_MOUNT_DIR: &str = "globalmount";
/// Block `NodeStageVolume` targets live below `volumeDevices/staging`.
pub const BLOCK_STAGING_DIR: &str = "staging";
/// Block `NodePublishVolume` targets live below `volumeDevices/publish`.
pub const BLOCK_PUBLISH_DIR: &str = "publish";
/// Directory of a block volume's `vol_data.json`.
pub const BLOCK_DATA_DIR: &str = "data";
/// A block volume's global map path; `dev/<podUID>` are bind mounts of the device.
pub const BLOCK_DEV_DIR: &str = "dev";
/// Directory of a pod CSI volume's mount point.
pub const POD_MOUNT_DIR: &str = "mount";
/// The driver directory of the global mount layout `pv/<pvName>/globalmount`,
/// used through kubelet 1.23 (kubernetes#107065 replaced it in 1.24).
pub const LEGACY_PV_DIR: &str = "pv";

/// Lowercase hex SHA-256 of `s` (Go's `fmt.Sprintf("%x", sha256.Sum256(...))`).
pub fn sha256_hex(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    hex
}

/// Whether `s` names exactly one entry of a directory: not empty, not `.`
/// or `..`, and without `/` or NUL.
///
/// Names read from `vol_data.json` become path components (the driver
/// directory, a block volume's staging and publish paths). One that is not a
/// single component would point somewhere else once joined, so an identity
/// check never accepts it, even where kubelet's own path comparison would.
pub fn is_single_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0'])
}

/// Kubelet's `EscapeQualifiedName`: every `/` becomes `~`.
pub fn escape_qualified_name(s: &str) -> String {
    s.replace('/', "~")
}

/// Kubelet's `UnescapeQualifiedName`: every `~` becomes `/`.
pub fn unescape_qualified_name(s: &str) -> String {
    s.replace('~', "/")
}

/// The name under which kubelet's actual state, `volumesInUse` and
/// `volumesAttached` know a CSI volume: `kubernetes.io/csi/<driver>^<handle>`.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PLUGIN_NAME}/{driver}^{handle}")
}

/// The VolumeAttachment name for a volume on a node:
/// `csi-` + hex SHA-256 of the plain concatenation handle + driver + node.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// Lexical path cleaning with Go's `filepath.Clean` rules: repeated separators
/// and `.` vanish, `..` removes the previous element, and `..` at the root is dropped.
///
/// Kubelet builds every path with `filepath.Join`, which cleans, so identity
/// checks must compare cleaned paths to accept exactly what kubelet accepts.
pub fn clean_path(path: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) => {}
                _ => out.push(component),
            },
            other => out.push(other),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.into_iter().collect()
}

/// Path builders for one kubelet root directory, in host path space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletLayout {
    root: PathBuf,
}

impl KubeletLayout {
    /// A layout rooted at `root` (usually `/var/lib/kubelet`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: clean_path(&root.into()),
        }
    }

    /// The kubelet root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/pods`.
    pub fn pods_dir(&self) -> PathBuf {
        self.root.join("pods")
    }

    /// `<root>/plugins/kubernetes.io/csi`.
    pub fn plugin_dir(&self) -> PathBuf {
        self.root.join("plugins").join(CSI_PLUGIN_NAME)
    }

    /// `<pluginDir>/volumeDevices`.
    pub fn block_dir(&self) -> PathBuf {
        self.plugin_dir().join(VOLUME_DEVICES_DIR)
    }

    /// `<pluginDir>/<driver>/<sha256(handle)>`: the directory of `vol_data.json`
    /// and `globalmount` of a staged filesystem volume.
    pub fn fs_volume_dir(&self, driver: &str, handle: &str) -> PathBuf {
        clean_path(&self.plugin_dir().join(driver).join(sha256_hex(handle)))
    }

    /// `<pluginDir>/<driver>/<sha256(handle)>/globalmount` (`makeDeviceMountPath`).
    pub fn device_mount_path(&self, driver: &str, handle: &str) -> PathBuf {
        self.fs_volume_dir(driver, handle).join(GLOBAL_MOUNT_DIR)
    }

    /// `<blockDir>/<escape(specVolID)>` (`getVolumePluginDir`).
    pub fn block_volume_dir(&self, spec_vol_id: &str) -> PathBuf {
        clean_path(&self.block_dir().join(escape_qualified_name(spec_vol_id)))
    }

    /// `<blockDir>/staging/<specVolID>`: the block `NodeStageVolume` target. Current
    /// kubelet joins the raw name; for valid PV names that equals the escaped one.
    pub fn block_staging_path(&self, spec_vol_id: &str) -> PathBuf {
        self.block_dir().join(BLOCK_STAGING_DIR).join(spec_vol_id)
    }

    /// `<blockDir>/publish/<specVolID>`: holds one `NodePublishVolume` target file per pod.
    pub fn block_publish_dir(&self, spec_vol_id: &str) -> PathBuf {
        self.block_dir().join(BLOCK_PUBLISH_DIR).join(spec_vol_id)
    }

    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi`.
    pub fn pod_fs_volumes_dir(&self, pod_uid: &str) -> PathBuf {
        self.pods_dir()
            .join(pod_uid)
            .join("volumes")
            .join(escape_qualified_name(CSI_PLUGIN_NAME))
    }

    /// `<root>/pods/<uid>/volumeDevices/kubernetes.io~csi`.
    pub fn pod_block_volumes_dir(&self, pod_uid: &str) -> PathBuf {
        self.pods_dir()
            .join(pod_uid)
            .join(VOLUME_DEVICES_DIR)
            .join(escape_qualified_name(CSI_PLUGIN_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_name_is_a_single_component() {
        for bad in ["", ".", "..", "a/b", "a/../../x", "/", "x/.", "a\0b"] {
            assert!(!is_single_component(bad), "{bad:?}");
        }
        for good in ["pvc-1", "a~b", "..a", "a..", "ebs.csi.aws.com", "x y"] {
            assert!(is_single_component(good), "{good:?}");
        }
    }
    use proptest::prelude::*;

    #[test]
    fn sha256_vectors_from_real_staging_paths() {
        let vectors = [
            // cephfs.manila staging path (ceph/ceph-csi#4249)
            (
                "4e3a7638-a627-488c-9b53-e396b1a9fdb7",
                "b6110aa34e2b984d9aebeb152de08974617a411c3d956c4b90c640a7c320886c",
            ),
            // driver.longhorn.io staging path (longhorn/longhorn#6472)
            (
                "pvc-8df1241b-ef5e-44b4-9851-e5861b22abe3",
                "16582cb939c77d4011bdbed2dbfc6993236eac609a6244d348fe94329173e318",
            ),
            (
                "handle-of-the-staged-pv",
                "2076ca554c1b8c1c88f33eaceb7425110a057d4b73d80f418f7f53750062cde4",
            ),
        ];
        for (handle, expected) in vectors {
            let got = sha256_hex(handle);
            assert_eq!(got, expected, "handle {handle}");
            assert_eq!(got.len(), 64);
            assert!(
                got.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
            );
        }
    }

    #[test]
    fn attachment_name_vector() {
        assert_eq!(
            attachment_name(
                "pvc-dca8527d-0939-4c6a-a2cc-e66a673f062c",
                "topsc.topke.io",
                "haaaa-10-30-100-149"
            ),
            "csi-f68a9cdf83f572a3de797db507b8dd615595cf7054db3057b9e681bbbadab56a"
        );
    }

    #[test]
    fn unique_volume_name_vector() {
        assert_eq!(
            unique_volume_name("rook-ceph.cephfs.csi.ceph.com", "cephfs-samenode-test2"),
            "kubernetes.io/csi/rook-ceph.cephfs.csi.ceph.com^cephfs-samenode-test2"
        );
    }

    #[test]
    fn escaping() {
        assert_eq!(escape_qualified_name("a/b"), "a~b");
        assert_eq!(
            unescape_qualified_name("kubernetes.io~csi"),
            "kubernetes.io/csi"
        );
        assert_eq!(escape_qualified_name("pvc-1"), "pvc-1");
    }

    #[test]
    fn clean_path_table() {
        let cases = [
            ("/a/b/../c", "/a/c"),
            ("/a/./b//c/", "/a/b/c"),
            ("/../a", "/a"),
            ("a/../..", ".."),
            ("", "."),
            ("/", "/"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                clean_path(Path::new(input)),
                PathBuf::from(expected),
                "{input}"
            );
        }
    }

    #[test]
    fn layout_paths() {
        let layout = KubeletLayout::new("/var/lib/kubelet/");
        assert_eq!(
            layout.device_mount_path("ebs.csi.aws.com", "handle-of-the-staged-pv"),
            PathBuf::from(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/ebs.csi.aws.com/2076ca554c1b8c1c88f33eaceb7425110a057d4b73d80f418f7f53750062cde4/globalmount"
            )
        );
        assert_eq!(
            layout.block_dir(),
            PathBuf::from("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices")
        );
        assert_eq!(
            layout.block_volume_dir("pvc-b"),
            PathBuf::from("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pvc-b")
        );
        assert_eq!(
            layout.block_staging_path("pvc-b"),
            PathBuf::from("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pvc-b")
        );
        assert_eq!(
            layout.pod_fs_volumes_dir("uid-1"),
            PathBuf::from("/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi")
        );
        assert_eq!(
            layout.pod_block_volumes_dir("uid-1"),
            PathBuf::from("/var/lib/kubelet/pods/uid-1/volumeDevices/kubernetes.io~csi")
        );
        // filepath.Join semantics: a driver name with `..` is cleaned, not kept literally.
        assert_eq!(
            layout.fs_volume_dir("x/../d", "h"),
            layout.fs_volume_dir("d", "h")
        );
    }

    proptest! {
        #[test]
        fn escape_roundtrips_names_without_tildes(name in "[a-z0-9./-]{0,40}") {
            let escaped = escape_qualified_name(&name);
            prop_assert!(!escaped.contains('/'));
            prop_assert_eq!(unescape_qualified_name(&escaped), name);
        }
    }
}
