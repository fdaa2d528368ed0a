//! `csi-globalmount-doctor`: a read-only report of the CSI volumes staged on a
//! node, which of them kubelet has lost track of, and which are at risk of
//! being detached while still mounted (KEP-6058).
//!
//! Exit status: 0 clean, 1 findings, 2 error. It never unmounts, removes,
//! writes or calls a CSI driver, and never looks inside a global mount.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use csi_globalmount::api::{parse_node, parse_volume_attachments};
use csi_globalmount::mountinfo::MountInfoFile;
use csi_globalmount::mountrefs::{RetryPolicy, SystemClock, read_mount_table};
use csi_globalmount::{HostFs, KubeletLayout, NodeInputs, Report, diagnose};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// The JSON report.
    Json,
    /// A summary for people.
    Text,
}

/// Finds CSI global mounts on this node and the ones kubelet lost track of. Read-only.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Kubelet root directory, spelled as the mount table spells it.
    #[arg(
        long,
        env = "CSI_GLOBALMOUNT_KUBELET_ROOT",
        default_value = "/var/lib/kubelet"
    )]
    kubelet_root: PathBuf,

    /// Mount table to read. In a pod, mount the host's /proc/1/mountinfo.
    /// Read as given; --host-prefix does not apply to it.
    #[arg(
        long,
        env = "CSI_GLOBALMOUNT_MOUNTINFO",
        default_value = "/proc/self/mountinfo"
    )]
    mountinfo: PathBuf,

    /// Where the host's root is visible to this process (for example /host);
    /// file access goes through it, while paths in the report and the mount
    /// table stay host paths.
    #[arg(long, env = "CSI_GLOBALMOUNT_HOST_PREFIX")]
    host_prefix: Option<PathBuf>,

    /// This node's name; needed to compute VolumeAttachment names.
    #[arg(long, env = "CSI_GLOBALMOUNT_NODE_NAME")]
    node_name: Option<String>,

    /// Output of `kubectl get node NAME -o json`, to check `volumesInUse` and `volumesAttached`.
    #[arg(long, env = "CSI_GLOBALMOUNT_NODE_JSON")]
    node_json: Option<PathBuf>,

    /// Output of `kubectl get volumeattachments -o json`.
    #[arg(long, env = "CSI_GLOBALMOUNT_VOLUMEATTACHMENTS_JSON")]
    volumeattachments_json: Option<PathBuf>,

    /// Output format.
    #[arg(long, env = "CSI_GLOBALMOUNT_FORMAT", value_enum, default_value_t = Format::Json)]
    format: Format,
}

fn run(args: &Args) -> Result<Report> {
    if !args.kubelet_root.is_absolute() {
        bail!(
            "--kubelet-root must be absolute, got {}",
            args.kubelet_root.display()
        );
    }
    let layout = KubeletLayout::new(&args.kubelet_root);
    let fs = HostFs::non_blocking(args.host_prefix.clone());

    let mut source = MountInfoFile::new(&args.mountinfo);
    let table = read_mount_table(&mut source, RetryPolicy::default(), &SystemClock)
        .with_context(|| format!("reading mount table {}", args.mountinfo.display()))?;

    let node = match &args.node_json {
        None => None,
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            // With --node-name, a node of another name is an error rather than
            // a silent cross-check against the wrong node.
            let node = parse_node(&bytes, args.node_name.as_deref())
                .with_context(|| format!("reading {}", path.display()))?;
            Some(node)
        }
    };
    let node_name = args
        .node_name
        .clone()
        .or_else(|| node.as_ref().map(|n| n.name.clone()));

    let volume_attachments = match &args.volumeattachments_json {
        None => None,
        Some(path) => {
            if node_name.is_none() {
                bail!(
                    "--volumeattachments-json needs --node-name or --node-json to compute attachment names"
                );
            }
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(
                parse_volume_attachments(&bytes)
                    .with_context(|| format!("reading {}", path.display()))?,
            )
        }
    };

    let inputs = NodeInputs {
        fs: &fs,
        layout: &layout,
        table: &table,
        mountinfo_source: args.mountinfo.display().to_string(),
        node_name,
        node,
        volume_attachments,
    };
    Ok(diagnose(&inputs)?)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(report) => {
            let rendered = match args.format {
                Format::Json => match serde_json::to_string_pretty(&report) {
                    Ok(json) => json + "\n",
                    Err(e) => {
                        eprintln!("csi-globalmount-doctor: encoding the report: {e}");
                        return ExitCode::from(2);
                    }
                },
                Format::Text => report.to_text(),
            };
            if let Err(e) = std::io::stdout().write_all(rendered.as_bytes()) {
                eprintln!("csi-globalmount-doctor: writing the report: {e}");
                return ExitCode::from(2);
            }
            if report.has_findings() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("csi-globalmount-doctor: {e:#}");
            ExitCode::from(2)
        }
    }
}
