//! One run of the doctor from the files it is pointed at: the kubelet root,
//! the mount table and any `kubectl get -o json` output, assembled into the
//! inputs of [`diagnose_with`] and diagnosed.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use thiserror::Error;

use crate::api::{ApiDump, ApiError, parse_node, parse_volume_attachments};
use crate::classify::{DiagnoseError, ExtraInputs, NodeInputs, diagnose_with};
use crate::fs::{HostFs, NodeFs, StatProber, open_regular_file};
use crate::gate::{KubeletGate, binary_names_gate};
use crate::layout::KubeletLayout;
use crate::mountinfo::MountInfoFile;
use crate::mountrefs::{MountRefsError, RetryPolicy, SystemClock, read_mount_table};
use crate::report::Report;

/// Where one run reads its inputs; each field is a flag of the doctor.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Kubelet root (`--kubelet-root`), absolute; its links are resolved.
    pub kubelet_root: PathBuf,
    /// Mount table file (`--mountinfo`), read as given.
    pub mountinfo: PathBuf,
    /// Where the host's root is visible (`--host-prefix`).
    pub host_prefix: Option<PathBuf>,
    /// This node's name (`--node-name`).
    pub node_name: Option<String>,
    /// `kubectl get node NAME -o json` output (`--node-json`).
    pub node_json: Option<PathBuf>,
    /// `kubectl get volumeattachments -o json` output (`--volumeattachments-json`).
    pub volume_attachments_json: Option<PathBuf>,
    /// Any other `kubectl get -o json` output (`--api-json`).
    pub api_json: Vec<PathBuf>,
    /// Kubelet's version (`--kubelet-version`), as `kubelet --version` prints it.
    pub kubelet_version: Option<String>,
    /// Kubelet's binary (`--kubelet-binary`), a host path: whether it names KEP-6058's gate.
    pub kubelet_binary: Option<PathBuf>,
    /// When kubelet started (`--kubelet-start-time`).
    pub kubelet_started_at: Option<SystemTime>,
    /// The stat prober, shared by the runs of the continuous mode; none
    /// never stats (`--stat-timeout 0s`).
    pub prober: Option<StatProber>,
}

/// Why a run produced no report.
#[derive(Debug, Error)]
pub enum RunError {
    /// The kubelet root is relative.
    #[error("--kubelet-root must be absolute, got {}", .0.display())]
    RelativeRoot(PathBuf),
    /// The mount table did not parse; the error names the line.
    #[error("parsing {}", path.display())]
    ParseMountTable {
        /// The mount table file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: MountRefsError,
    },
    /// The mount table could not be read.
    #[error(transparent)]
    ReadMountTable(MountRefsError),
    /// An API file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// An API file could not be used.
    #[error("reading {}", path.display())]
    Api {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ApiError,
    },
    /// Several nodes in the API files and no node name to choose one.
    #[error("--api-json holds {0} nodes; pass --node-name to choose one")]
    AmbiguousNode(usize),
    /// VolumeAttachment names are computed from the node name.
    #[error(
        "--volumeattachments-json needs --node-name or --node-json to compute attachment names"
    )]
    AttachmentsNeedNodeName,
    /// The diagnosis itself failed.
    #[error(transparent)]
    Diagnose(#[from] DiagnoseError),
}

fn read(path: &Path) -> Result<Vec<u8>, RunError> {
    std::fs::read(path).map_err(|source| RunError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn api_error(path: &Path) -> impl FnOnce(ApiError) -> RunError + '_ {
    move |source| RunError::Api {
        path: path.to_path_buf(),
        source,
    }
}

/// What the operator gave about kubelet's gate: its binary tells either way, a version
/// given by hand comes next; without either, the diagnosis reads the Node's version.
fn kubelet_gate(sources: &Sources, fs: &HostFs) -> Result<Option<KubeletGate>, RunError> {
    if let Some(binary) = &sources.kubelet_binary {
        // `/usr/bin/kubelet` is often a link: resolved in host path space, then opened as
        // every other file of the node is (never waiting on a FIFO).
        let names = fs
            .resolve_symlinks(binary)
            .map(|host| fs.access_path(&host))
            .and_then(|path| open_regular_file(&path))
            .and_then(binary_names_gate)
            .map_err(|source| RunError::Read {
                path: binary.clone(),
                source,
            })?;
        return Ok(Some(KubeletGate::from_binary(
            &binary.display().to_string(),
            names,
        )));
    }
    Ok(sources
        .kubelet_version
        .as_deref()
        .map(|version| KubeletGate::from_version(version, "--kubelet-version")))
}

/// Reads every input `sources` names and diagnoses the node.
pub fn diagnose_from(sources: &Sources) -> Result<Report, RunError> {
    if !sources.kubelet_root.is_absolute() {
        return Err(RunError::RelativeRoot(sources.kubelet_root.clone()));
    }
    let mut fs = HostFs::non_blocking(sources.host_prefix.clone());
    if let Some(prober) = &sources.prober {
        fs = fs.with_stat_prober(prober.clone());
    }
    // Kubelet resolves its root directory's links; the mount table spells the target.
    let root = match fs.resolve_symlinks(&sources.kubelet_root) {
        Ok(root) => root,
        // A missing root is reported by the diagnosis, naming the root as given.
        Err(_) => sources.kubelet_root.clone(),
    };
    let layout = KubeletLayout::new(&root);

    let mut mountinfo = MountInfoFile::new(&sources.mountinfo);
    let table = read_mount_table(&mut mountinfo, RetryPolicy::default(), &SystemClock).map_err(
        |e| match e {
            // The parse error names the line, not the file.
            MountRefsError::Parse(_) => RunError::ParseMountTable {
                path: sources.mountinfo.clone(),
                source: e,
            },
            other => RunError::ReadMountTable(other),
        },
    )?;

    let mut dump = ApiDump::default();
    for path in &sources.api_json {
        dump.add(&read(path)?).map_err(api_error(path))?;
    }

    let node = match &sources.node_json {
        // With a node name, a node of another name is an error rather than
        // a silent cross-check against the wrong node.
        Some(path) => {
            Some(parse_node(&read(path)?, sources.node_name.as_deref()).map_err(api_error(path))?)
        }
        None => match (&sources.node_name, dump.nodes.len()) {
            (Some(name), _) => dump.nodes.iter().find(|n| &n.name == name).cloned(),
            (None, 1) => dump.nodes.first().cloned(),
            (None, 0) => None,
            (None, count) => return Err(RunError::AmbiguousNode(count)),
        },
    };
    let node_name = sources
        .node_name
        .clone()
        .or_else(|| node.as_ref().map(|n| n.name.clone()));

    let volume_attachments = match &sources.volume_attachments_json {
        Some(path) => {
            if node_name.is_none() {
                return Err(RunError::AttachmentsNeedNodeName);
            }
            Some(parse_volume_attachments(&read(path)?).map_err(api_error(path))?)
        }
        None => dump
            .has_kind("VolumeAttachment")
            .then(|| dump.volume_attachments.clone()),
    };

    let inputs = NodeInputs {
        fs: &fs,
        layout: &layout,
        table: &table,
        mountinfo_source: sources.mountinfo.display().to_string(),
        node_name,
        node,
        volume_attachments,
    };
    let extra = ExtraInputs {
        persistent_volumes: dump
            .has_kind("PersistentVolume")
            .then(|| dump.persistent_volumes.clone()),
        pods: dump.has_kind("Pod").then(|| dump.pods.clone()),
        csi_drivers: dump.has_kind("CSIDriver").then(|| dump.csi_drivers.clone()),
        kubelet_started_at: sources.kubelet_started_at,
        kubelet_root_given: Some(sources.kubelet_root.clone()),
        kubelet_gate: kubelet_gate(sources, &fs)?,
    };
    Ok(diagnose_with(&inputs, &extra)?)
}
