//! Builds kubelet directory trees in a temporary directory, plus the mount
//! table text that goes with them: the trees of the behaviour tests and the
//! dense-node benchmark (feature `fixture`, test code only). The temporary directory plays the host's
//! root (it is passed as the host prefix), so every path in the tree and in
//! the mount table is a real-looking host path such as `/var/lib/kubelet/...`.

use std::path::{Path, PathBuf};

use crate::api::{NodeView, VolumeAttachmentView};
use crate::layout::{GLOBAL_MOUNT_DIR, POD_MOUNT_DIR};
use crate::mountinfo::escape_octal;
use crate::voldata::{self, VOL_DATA_FILE, VolumeData};
use crate::{
    ExtraInputs, HostFs, KubeletLayout, Listing, MountTable, NodeInputs, Report, diagnose,
    diagnose_with, list_global_volumes,
};
use tempfile::TempDir;

/// The kubelet root most fixtures use.
pub const ROOT: &str = "/var/lib/kubelet";
/// The node name most fixtures use.
pub const NODE: &str = "node-a";

/// What a pod volume directory's `vol_data.json` looks like.
#[derive(Debug, Clone, Copy)]
pub enum PodData<'a> {
    /// The file as kubelet's SetUpAt writes it.
    Written {
        /// `driverName`.
        driver: &'a str,
        /// `volumeHandle`.
        handle: &'a str,
    },
    /// No file at all.
    Missing,
    /// Cut off mid-write: `{"volumeHandle":"x",`.
    Truncated,
    /// Zero bytes.
    Empty,
}

/// A node's host tree in a temporary directory, and its mount table.
pub struct FixtureNode {
    dir: TempDir,
    /// Where kubelet keeps its directories on this node.
    pub layout: KubeletLayout,
    mount_lines: Vec<String>,
    next_mount_id: i64,
}

impl Default for FixtureNode {
    fn default() -> Self {
        Self::new()
    }
}

impl FixtureNode {
    /// A node with `/var/lib/kubelet` and a root filesystem mount.
    pub fn new() -> Self {
        Self::with_root(ROOT)
    }

    /// A node whose kubelet root is `root`.
    pub fn with_root(root: &str) -> Self {
        let node = Self {
            dir: tempfile::tempdir().expect("temp dir"),
            layout: KubeletLayout::new(root),
            mount_lines: vec!["1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw".to_owned()],
            next_mount_id: 100,
        };
        node.mkdir(root);
        node
    }

    /// The temporary directory that plays the host root.
    pub fn prefix(&self) -> &Path {
        self.dir.path()
    }

    /// Where a host path lives in the temporary directory.
    pub fn host(&self, host_path: impl AsRef<Path>) -> PathBuf {
        let relative = host_path
            .as_ref()
            .strip_prefix("/")
            .expect("fixture paths are absolute");
        self.dir.path().join(relative)
    }

    /// The host tree as the doctor reads it.
    pub fn fs(&self) -> HostFs {
        HostFs::non_blocking(Some(self.prefix().to_path_buf()))
    }

    /// Creates a directory and its parents.
    pub fn mkdir(&self, host_path: impl AsRef<Path>) {
        std::fs::create_dir_all(self.host(host_path)).expect("create dir");
    }

    /// Writes a file, creating its parents.
    pub fn write(&self, host_path: impl AsRef<Path>, content: impl AsRef<[u8]>) {
        let path = self.host(host_path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create parent");
        std::fs::write(path, content).expect("write file");
    }

    /// Removes a file or a directory tree.
    pub fn remove(&self, host_path: impl AsRef<Path>) {
        let path = self.host(host_path);
        if path.is_dir() {
            std::fs::remove_dir_all(path).expect("remove dir");
        } else {
            std::fs::remove_file(path).expect("remove file");
        }
    }

    /// Creates a symbolic link at `host_path` to `target`.
    pub fn symlink(&self, target: impl AsRef<Path>, host_path: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, self.host(host_path)).expect("symlink");
    }

    /// Writes `<dir>/vol_data.json` as kubelet does (Go encoder format).
    pub fn voldata(&self, dir: impl AsRef<Path>, pairs: &[(&str, &str)]) {
        let data = VolumeData::from_pairs(pairs.iter().copied());
        self.write(dir.as_ref().join(VOL_DATA_FILE), voldata::encode(&data));
    }

    /// Stages a filesystem volume the way KEP-6058's MountDevice does:
    /// `<driver>/<sha256(handle)>/{globalmount/,vol_data.json}` with
    /// `specVolID` and `volumeLifecycleMode` when `spec_vol_id` is given,
    /// and only driver and handle (a pre-feature file) when it is not.
    pub fn stage_fs(&self, driver: &str, handle: &str, spec_vol_id: Option<&str>) -> PathBuf {
        let volume_dir = self.layout.fs_volume_dir(driver, handle);
        self.mkdir(volume_dir.join(GLOBAL_MOUNT_DIR));
        let mut pairs = vec![("driverName", driver), ("volumeHandle", handle)];
        if let Some(id) = spec_vol_id {
            pairs.push(("specVolID", id));
            pairs.push(("volumeLifecycleMode", "Persistent"));
        }
        self.voldata(&volume_dir, &pairs);
        volume_dir
    }

    /// A pod CSI volume directory `pods/<uid>/volumes/kubernetes.io~csi/<name>`
    /// with an empty `mount/` and the given data file.
    pub fn pod_fs_volume(&self, pod_uid: &str, name: &str, data: PodData<'_>) -> PathBuf {
        let dir = self.layout.pod_fs_volumes_dir(pod_uid).join(name);
        self.mkdir(dir.join(POD_MOUNT_DIR));
        match data {
            PodData::Written { driver, handle } => self.voldata(
                &dir,
                &[
                    ("attachmentID", "csi-0000"),
                    ("driverName", driver),
                    ("nodeName", NODE),
                    ("specVolID", name),
                    ("volumeHandle", handle),
                    ("volumeLifecycleMode", "Persistent"),
                ],
            ),
            PodData::Missing => {}
            PodData::Truncated => self.write(dir.join(VOL_DATA_FILE), "{\"volumeHandle\":\"x\","),
            PodData::Empty => self.write(dir.join(VOL_DATA_FILE), ""),
        }
        dir
    }

    /// Stages a block volume as NewBlockVolumeMapper and NodeStage leave it:
    /// `volumeDevices/<name>/data/vol_data.json` (five keys) and `volumeDevices/staging/<name>/`.
    pub fn stage_block(&self, spec_vol_id: &str, driver: &str, handle: &str) -> PathBuf {
        let volume_dir = self.layout.block_volume_dir(spec_vol_id);
        self.voldata(
            volume_dir.join("data"),
            &[
                ("attachmentID", "csi-0000"),
                ("driverName", driver),
                ("nodeName", NODE),
                ("specVolID", spec_vol_id),
                ("volumeHandle", handle),
            ],
        );
        self.mkdir(self.layout.block_staging_path(spec_vol_id));
        volume_dir
    }

    /// Adds a mount table line; `device` is `major:minor`.
    pub fn mount(&mut self, device: &str, root: &str, mount_point: impl AsRef<Path>) {
        self.mount_with(device, root, mount_point, "ext4", "/dev/sdx");
    }

    /// Adds a mount table line with its filesystem type and source.
    pub fn mount_with(
        &mut self,
        device: &str,
        root: &str,
        mount_point: impl AsRef<Path>,
        fs_type: &str,
        source: &str,
    ) {
        let mount_point = mount_point.as_ref().as_os_str().as_encoded_bytes();
        let line = format!(
            "{} 1 {device} {} {} rw,relatime shared:{} - {fs_type} {source} rw",
            self.next_mount_id,
            String::from_utf8_lossy(&escape_octal(root.as_bytes())),
            String::from_utf8_lossy(&escape_octal(mount_point)),
            self.next_mount_id,
        );
        self.next_mount_id += 1;
        self.mount_lines.push(line);
    }

    /// A bind of the device `device` at both `global` and `pod`, the layout a
    /// staged and published filesystem volume has.
    pub fn bind(&mut self, device: &str, global: impl AsRef<Path>, pod: impl AsRef<Path>) {
        self.mount(device, "/", global);
        self.mount(device, "/", pod);
    }

    /// The mount table as `/proc/self/mountinfo` shows it.
    pub fn mountinfo_text(&self) -> String {
        let mut text = self.mount_lines.join("\n");
        text.push('\n');
        text
    }

    /// Writes the mount table to a file outside the fake host tree.
    pub fn write_mountinfo(&self) -> PathBuf {
        let path = self.dir.path().join("mountinfo");
        std::fs::write(&path, self.mountinfo_text()).expect("write mountinfo");
        path
    }

    /// The mount table, parsed.
    pub fn table(&self) -> MountTable {
        MountTable::parse(self.mountinfo_text()).expect("fixture mount table parses")
    }

    /// The global volumes of the tree.
    pub fn list(&self) -> Listing {
        list_global_volumes(&self.fs(), &self.layout).expect("listing")
    }

    /// The doctor's report on this node, with no API objects.
    pub fn diagnose(&self) -> Report {
        self.diagnose_with(None, None)
    }

    /// The report with the Node, the VolumeAttachments and extra inputs given.
    pub fn diagnose_extra(
        &self,
        node: Option<NodeView>,
        volume_attachments: Option<Vec<VolumeAttachmentView>>,
        extra: &ExtraInputs,
    ) -> Report {
        let fs = self.fs();
        let table = self.table();
        let inputs = NodeInputs {
            fs: &fs,
            layout: &self.layout,
            table: &table,
            mountinfo_source: "fixture".to_owned(),
            node_name: Some(NODE.to_owned()),
            node,
            volume_attachments,
        };
        diagnose_with(&inputs, extra).expect("diagnose")
    }

    /// The report with the Node and the VolumeAttachments given.
    pub fn diagnose_with(
        &self,
        node: Option<NodeView>,
        volume_attachments: Option<Vec<VolumeAttachmentView>>,
    ) -> Report {
        let fs = self.fs();
        let table = self.table();
        let inputs = NodeInputs {
            fs: &fs,
            layout: &self.layout,
            table: &table,
            mountinfo_source: "fixture".to_owned(),
            node_name: Some(NODE.to_owned()),
            node,
            volume_attachments,
        };
        diagnose(&inputs).expect("diagnose")
    }
}

/// `<volume dir>/globalmount`.
pub fn gm(volume_dir: &Path) -> PathBuf {
    volume_dir.join(GLOBAL_MOUNT_DIR)
}

/// `<pod volume dir>/mount`.
pub fn mnt(pod_volume_dir: &Path) -> PathBuf {
    pod_volume_dir.join(POD_MOUNT_DIR)
}

/// Display form used in reports.
pub fn s(path: impl AsRef<Path>) -> String {
    path.as_ref().to_string_lossy().into_owned()
}
