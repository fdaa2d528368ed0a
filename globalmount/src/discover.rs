//! `list_global_volumes`: the CSI volumes staged on a node, found from the
//! plugin's global directories alone (a port of KEP-6058's `ListGlobalVolumes`).
//!
//! Every entry that is passed over is reported with a reason code instead of
//! being dropped silently, so an operator sees exactly what kubelet would skip.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::fs::{EntryKind, NodeFs};
use crate::layout::{
    BLOCK_DATA_DIR, BLOCK_DEV_DIR, BLOCK_PUBLISH_DIR, BLOCK_STAGING_DIR, GLOBAL_MOUNT_DIR,
    KubeletLayout, LEGACY_PV_DIR, attachment_name, clean_path, is_single_component, sha256_hex,
    unique_volume_name,
};
use crate::voldata::{self, VolumeData};

/// Whether a volume is mounted as a filesystem or mapped as a raw block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum VolumeMode {
    /// `volumeMode: Filesystem`.
    Filesystem,
    /// `volumeMode: Block`.
    Block,
}

/// Where a volume's spec name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecVolIdSource {
    /// The `specVolID` key of the global file.
    File,
    /// The volume handle, because the file predates `specVolID` in global files.
    Handle,
}

/// The synthetic PV spec kubelet builds for a listed volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// PV name: `specVolID`, or the handle for a pre-feature file.
    pub name: String,
    /// CSI driver name.
    pub driver: String,
    /// CSI volume handle.
    pub volume_handle: String,
    /// Volume mode of the spec.
    pub mode: VolumeMode,
}

/// A staged volume found in the global directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalVolume {
    /// The spec kubelet would reconstruct.
    pub spec: VolumeSpec,
    /// `specVolID` as written in the file (empty for pre-feature files).
    pub spec_vol_id: String,
    /// Where `spec.name` came from.
    pub spec_vol_id_source: SpecVolIdSource,
    /// SELinux mount context from the file (filesystem only).
    pub se_linux_mount_context: String,
    /// Filesystem: `<volDir>/globalmount`. Block: the global map path `<volDir>/dev`.
    pub device_mount_path: PathBuf,
    /// The directory holding this volume's data.
    pub volume_dir: PathBuf,
    /// Block only: the `NodeStageVolume` target `volumeDevices/staging/<specVolID>`.
    pub staging_path: Option<PathBuf>,
    /// The whole decoded `vol_data.json`.
    pub data: VolumeData,
}

impl GlobalVolume {
    /// Filesystem or block.
    pub fn mode(&self) -> VolumeMode {
        self.spec.mode
    }

    /// `kubernetes.io/csi/<driver>^<handle>`.
    pub fn unique_volume_name(&self) -> String {
        unique_volume_name(&self.spec.driver, &self.spec.volume_handle)
    }

    /// The VolumeAttachment name of this volume on `node`.
    pub fn attachment_name(&self, node: &str) -> String {
        attachment_name(&self.spec.volume_handle, &self.spec.driver, node)
    }
}

/// Why an entry of the global directories was not listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Not a directory (symlinks included); kubelet ignores these.
    NotADirectory,
    /// A driver directory could not be listed.
    DriverDirUnreadable,
    /// The volume directory has no `globalmount`.
    NoGlobalmount,
    /// `vol_data.json` is missing, empty, truncated or not a map of strings.
    VoldataUnreadable,
    /// `vol_data.json` lacks `driverName` or `volumeHandle`.
    VoldataIncomplete,
    /// The directory is not where the file's identity says it should be.
    IdentityMismatch,
    /// A block volume whose `volumeDevices/staging/<name>` is gone: unstaged.
    BlockNotStaged,
    /// A block volume whose file has no `specVolID`; every teardown path needs it.
    BlockNoSpecvolid,
    /// The `volumeDevices` subtree exists but could not be listed.
    BlockDirUnreadable,
    /// The `pv/<pvName>/globalmount` layout kubelet used through 1.23, which
    /// kubelet 1.24 and later no longer lists.
    LegacyPvLayout,
}

impl SkipReason {
    /// The reason code, as it appears in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotADirectory => "not_a_directory",
            Self::DriverDirUnreadable => "driver_dir_unreadable",
            Self::NoGlobalmount => "no_globalmount",
            Self::VoldataUnreadable => "voldata_unreadable",
            Self::VoldataIncomplete => "voldata_incomplete",
            Self::IdentityMismatch => "identity_mismatch",
            Self::BlockNotStaged => "block_not_staged",
            Self::BlockNoSpecvolid => "block_no_specvolid",
            Self::BlockDirUnreadable => "block_dir_unreadable",
            Self::LegacyPvLayout => "legacy_pv_layout",
        }
    }
}

/// An entry that was passed over, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// The entry.
    pub path: PathBuf,
    /// The reason code.
    pub reason: SkipReason,
    /// Human-readable detail.
    pub detail: String,
    /// For an identity mismatch: the path the file's identity implies.
    pub expected: Option<PathBuf>,
}

/// The result of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Listed volumes: filesystem entries first, then block entries.
    pub volumes: Vec<GlobalVolume>,
    /// Everything passed over, in walk order.
    pub skipped: Vec<Skip>,
}

/// The one failure that stops a listing.
#[derive(Debug, Error)]
#[error("listing {}", path.display())]
pub struct ListError {
    /// The CSI plugin directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

/// Lists the CSI volumes staged on a node from its global directories.
///
/// A missing plugin directory means no CSI volume was ever staged and gives an
/// empty listing; any other failure to list it is the only error. Everything
/// below it is skipped entry by entry, so one bad directory never hides another.
pub fn list_global_volumes(
    fs: &(impl NodeFs + ?Sized),
    layout: &KubeletLayout,
) -> Result<Listing, ListError> {
    let plugin_dir = layout.plugin_dir();
    let block_dir = layout.block_dir();
    let drivers = match fs.read_dir(&plugin_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(source) => {
            return Err(ListError {
                path: plugin_dir,
                source,
            });
        }
    };

    let mut listing = Listing::default();
    for driver_entry in drivers {
        let driver_dir = plugin_dir.join(&driver_entry.name);
        if driver_entry.kind != EntryKind::Dir {
            listing
                .skipped
                .push(not_a_directory(driver_dir, driver_entry.kind));
            continue;
        }
        // Whole-path comparison, as upstream does: the block subtree is never
        // a driver, however its content is dressed.
        if driver_dir == block_dir {
            continue;
        }
        let volume_entries = match fs.read_dir(&driver_dir) {
            Ok(entries) => entries,
            Err(e) => {
                listing.skipped.push(Skip {
                    path: driver_dir,
                    reason: SkipReason::DriverDirUnreadable,
                    detail: e.to_string(),
                    expected: None,
                });
                continue;
            }
        };
        let is_legacy_dir = driver_entry.name == LEGACY_PV_DIR;
        for volume_entry in volume_entries {
            let volume_dir = driver_dir.join(&volume_entry.name);
            if volume_entry.kind != EntryKind::Dir {
                listing
                    .skipped
                    .push(not_a_directory(volume_dir, volume_entry.kind));
                continue;
            }
            match describe_global_volume(fs, layout, &volume_dir) {
                Ok(volume) => listing.volumes.push(volume),
                Err(skip) if is_legacy_dir && skip.reason != SkipReason::NoGlobalmount => {
                    listing.skipped.push(Skip {
                        reason: SkipReason::LegacyPvLayout,
                        detail: format!(
                            "layout {LEGACY_PV_DIR}/<pvName>/{GLOBAL_MOUNT_DIR} of kubelet 1.23 and older (replaced in 1.24 by kubernetes#107065), not listed by kubelet ({}: {})",
                            skip.reason.as_str(),
                            skip.detail
                        ),
                        ..skip
                    });
                }
                Err(skip) => listing.skipped.push(skip),
            }
        }
    }

    list_global_block_volumes(fs, layout, &mut listing);
    Ok(listing)
}

fn not_a_directory(path: PathBuf, kind: EntryKind) -> Skip {
    Skip {
        path,
        reason: SkipReason::NotADirectory,
        detail: format!("entry is {kind:?}, not a directory"),
        expected: None,
    }
}

/// The `vol_data.json` in `data_dir`, which must name the driver and the volume handle; a
/// skip of `volume_dir` otherwise. `file` names the file in the skip's detail.
fn load_identity(
    fs: &(impl NodeFs + ?Sized),
    data_dir: &Path,
    volume_dir: &Path,
    file: &str,
) -> Result<VolumeData, Skip> {
    let data = voldata::load(fs, data_dir).map_err(|e| {
        skip(
            volume_dir,
            SkipReason::VoldataUnreadable,
            error_line::chain(&e),
        )
    })?;
    let missing = data.missing_identity_keys();
    if !missing.is_empty() {
        return Err(skip(
            volume_dir,
            SkipReason::VoldataIncomplete,
            format!("{file} has no {}", missing.join(" and no ")),
        ));
    }
    Ok(data)
}

fn skip(path: &Path, reason: SkipReason, detail: impl Into<String>) -> Skip {
    Skip {
        path: path.to_path_buf(),
        reason,
        detail: detail.into(),
        expected: None,
    }
}

/// Checks one `<driver>/<dir>` in the same order as kubelet, so the first
/// failing check is the reason reported.
fn describe_global_volume(
    fs: &(impl NodeFs + ?Sized),
    layout: &KubeletLayout,
    volume_dir: &Path,
) -> Result<GlobalVolume, Skip> {
    let global_mount = volume_dir.join(GLOBAL_MOUNT_DIR);
    match fs.entry_kind(&global_mount) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(skip(
                volume_dir,
                SkipReason::NoGlobalmount,
                "no globalmount entry",
            ));
        }
        Err(e) => return Err(skip(volume_dir, SkipReason::NoGlobalmount, e.to_string())),
    }
    let data = load_identity(fs, volume_dir, volume_dir, "vol_data.json")?;
    let driver = data.driver_name().to_owned();
    let handle = data.volume_handle().to_owned();
    let (name, source) = match data.spec_vol_id() {
        "" => (handle.clone(), SpecVolIdSource::Handle),
        spec_vol_id => (spec_vol_id.to_owned(), SpecVolIdSource::File),
    };

    // A driver name such as "d/." or "x/../d" cleans to the directory it sits
    // in, yet names another driver than the directory does.
    if !is_single_component(&driver) {
        return Err(skip(
            volume_dir,
            SkipReason::IdentityMismatch,
            format!("driverName {driver:?} is not a single path component"),
        ));
    }
    // Identity: the directory must be where makeDeviceMountPath puts this
    // driver and handle. Otherwise the file was copied, or describes another
    // volume, and acting on it could unstage the wrong thing.
    let expected = layout.device_mount_path(&driver, &handle);
    if expected != clean_path(&global_mount) {
        let dir_name = volume_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let driver_dir_name = volume_dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut reasons = Vec::new();
        if dir_name != sha256_hex(&handle) {
            reasons.push(format!(
                "directory name {dir_name} is not sha256 of volumeHandle {handle:?}"
            ));
        }
        if driver_dir_name != driver {
            reasons.push(format!(
                "driver directory {driver_dir_name} is not driverName {driver:?}"
            ));
        }
        if reasons.is_empty() {
            reasons.push("path differs after cleaning".to_owned());
        }
        return Err(Skip {
            path: volume_dir.to_path_buf(),
            reason: SkipReason::IdentityMismatch,
            detail: reasons.join("; "),
            expected: Some(expected),
        });
    }

    Ok(GlobalVolume {
        spec: VolumeSpec {
            name,
            driver,
            volume_handle: handle,
            mode: VolumeMode::Filesystem,
        },
        spec_vol_id: data.spec_vol_id().to_owned(),
        spec_vol_id_source: source,
        se_linux_mount_context: data.se_linux_mount_context().to_owned(),
        device_mount_path: global_mount,
        volume_dir: volume_dir.to_path_buf(),
        staging_path: None,
        data,
    })
}

fn list_global_block_volumes(
    fs: &(impl NodeFs + ?Sized),
    layout: &KubeletLayout,
    listing: &mut Listing,
) {
    let block_dir = layout.block_dir();
    let entries = match fs.read_dir(&block_dir) {
        Ok(entries) => entries,
        // No block volume was ever mapped on this node.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            // Upstream returns no block entries and no error here; the skip
            // keeps the reason visible.
            listing.skipped.push(skip(
                &block_dir,
                SkipReason::BlockDirUnreadable,
                e.to_string(),
            ));
            return;
        }
    };
    // Every volume's check asks whether staging/<name> exists; listing the
    // staging directory once per volume made the walk quadratic.
    let staging_dir = block_dir.join(BLOCK_STAGING_DIR);
    let staged: Option<HashMap<OsString, EntryKind>> = match fs.listing_for_existence(&staging_dir)
    {
        Some(Ok(entries)) => Some(entries.into_iter().map(|e| (e.name, e.kind)).collect()),
        Some(Err(e)) if e.kind() == io::ErrorKind::NotFound => Some(HashMap::new()),
        // Each volume's own check then reports the error.
        Some(Err(_)) | None => None,
    };
    for entry in entries {
        let volume_dir = block_dir.join(&entry.name);
        if entry.kind != EntryKind::Dir {
            listing
                .skipped
                .push(not_a_directory(volume_dir, entry.kind));
            continue;
        }
        if entry.name == BLOCK_STAGING_DIR || entry.name == BLOCK_PUBLISH_DIR {
            continue;
        }
        let staging_kind = match &staged {
            Some(staged) => Ok(staged.get(&entry.name).copied()),
            None => fs.entry_kind(&staging_dir.join(&entry.name)),
        };
        match describe_global_block_volume(
            fs,
            layout,
            &volume_dir,
            &entry.name.to_string_lossy(),
            staging_kind,
        ) {
            Ok(volume) => listing.volumes.push(volume),
            Err(skip) => listing.skipped.push(skip),
        }
    }
}

fn describe_global_block_volume(
    fs: &(impl NodeFs + ?Sized),
    layout: &KubeletLayout,
    volume_dir: &Path,
    name: &str,
    staging_kind: io::Result<Option<EntryKind>>,
) -> Result<GlobalVolume, Skip> {
    // Only the staging directory shows the volume is still staged: the
    // volume directory outlives an unstage, and dev/ appears only once a pod
    // maps the volume.
    let staging = layout.block_dir().join(BLOCK_STAGING_DIR).join(name);
    match staging_kind {
        Ok(Some(_)) => {}
        Ok(None) => {
            return Err(skip(
                volume_dir,
                SkipReason::BlockNotStaged,
                format!("{} does not exist", staging.display()),
            ));
        }
        Err(e) => return Err(skip(volume_dir, SkipReason::BlockNotStaged, e.to_string())),
    }
    let data = load_identity(
        fs,
        &volume_dir.join(BLOCK_DATA_DIR),
        volume_dir,
        "data/vol_data.json",
    )?;
    let spec_vol_id = data.spec_vol_id().to_owned();
    // No fallback to the handle here: every block teardown path is built
    // from the spec name, so a guessed one would point at the wrong files.
    if spec_vol_id.is_empty() {
        return Err(skip(
            volume_dir,
            SkipReason::BlockNoSpecvolid,
            "data/vol_data.json has no specVolID",
        ));
    }
    // The staging and publish paths join the raw specVolID: "a/../../x"
    // escapes to a directory name that matches, and then points outside the
    // tree.
    if !is_single_component(&spec_vol_id) {
        return Err(skip(
            volume_dir,
            SkipReason::IdentityMismatch,
            format!("specVolID {spec_vol_id:?} is not a single path component"),
        ));
    }
    let expected = layout.block_volume_dir(&spec_vol_id);
    if expected != clean_path(volume_dir) {
        return Err(Skip {
            path: volume_dir.to_path_buf(),
            reason: SkipReason::IdentityMismatch,
            detail: format!("directory {name} does not match specVolID {spec_vol_id:?}"),
            expected: Some(expected),
        });
    }
    Ok(GlobalVolume {
        spec: VolumeSpec {
            name: spec_vol_id.clone(),
            driver: data.driver_name().to_owned(),
            volume_handle: data.volume_handle().to_owned(),
            mode: VolumeMode::Block,
        },
        staging_path: Some(layout.block_staging_path(&spec_vol_id)),
        spec_vol_id,
        spec_vol_id_source: SpecVolIdSource::File,
        se_linux_mount_context: String::new(),
        device_mount_path: volume_dir.join(BLOCK_DEV_DIR),
        volume_dir: volume_dir.to_path_buf(),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testfs::MemFs;

    const ROOT: &str = "/var/lib/kubelet";

    #[test]
    fn reason_codes_match_their_json_form() {
        let all = [
            SkipReason::NotADirectory,
            SkipReason::DriverDirUnreadable,
            SkipReason::NoGlobalmount,
            SkipReason::VoldataUnreadable,
            SkipReason::VoldataIncomplete,
            SkipReason::IdentityMismatch,
            SkipReason::BlockNotStaged,
            SkipReason::BlockNoSpecvolid,
            SkipReason::BlockDirUnreadable,
            SkipReason::LegacyPvLayout,
        ];
        for reason in all {
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                serde_json::Value::String(reason.as_str().to_owned())
            );
        }
    }

    #[test]
    fn an_unreadable_driver_directory_is_skipped_and_its_siblings_listed() {
        let layout = KubeletLayout::new(ROOT);
        let mut fs = MemFs::new();
        fs.unreadable_dir(layout.plugin_dir().join("a.csi.io"));
        let good = layout.fs_volume_dir("b.csi.io", "h");
        fs.dir(good.join(GLOBAL_MOUNT_DIR)).file(
            good.join(voldata::VOL_DATA_FILE),
            br#"{"driverName":"b.csi.io","volumeHandle":"h"}"#,
        );
        let listing = list_global_volumes(&fs, &layout).unwrap();
        assert_eq!(listing.volumes.len(), 1);
        assert_eq!(listing.skipped[0].reason, SkipReason::DriverDirUnreadable);
        assert_eq!(
            listing.skipped[0].path,
            layout.plugin_dir().join("a.csi.io")
        );
    }

    #[test]
    fn an_unreadable_plugin_directory_is_the_one_error() {
        let layout = KubeletLayout::new(ROOT);
        let mut fs = MemFs::new();
        fs.unreadable_dir(layout.plugin_dir());
        let err = list_global_volumes(&fs, &layout).unwrap_err();
        assert_eq!(err.source.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn an_unreadable_block_directory_is_a_skip_not_an_error() {
        let layout = KubeletLayout::new(ROOT);
        let mut fs = MemFs::new();
        fs.unreadable_dir(layout.block_dir());
        let listing = list_global_volumes(&fs, &layout).unwrap();
        assert!(listing.volumes.is_empty());
        assert_eq!(listing.skipped.len(), 1);
        assert_eq!(listing.skipped[0].reason, SkipReason::BlockDirUnreadable);
    }

    #[test]
    fn a_symlinked_globalmount_exists_for_the_listing() {
        // With kubelet's following stat a dangling link would be skipped; the
        // non-blocking check cannot follow it and accepts the name.
        let layout = KubeletLayout::new(ROOT);
        let dir = layout.fs_volume_dir("d", "h");
        let mut fs = MemFs::new();
        fs.symlink(dir.join(GLOBAL_MOUNT_DIR)).file(
            dir.join(voldata::VOL_DATA_FILE),
            br#"{"driverName":"d","volumeHandle":"h"}"#,
        );
        assert_eq!(list_global_volumes(&fs, &layout).unwrap().volumes.len(), 1);
    }
}
