//! `csi-globalmount-doctor`: a read-only report of the CSI volumes staged on a
//! node, which of them kubelet has lost track of, and which are at risk of
//! being detached while still mounted (KEP-6058).
//!
//! Exit status: 0 clean, 1 findings, 2 error (node-problem-detector's
//! convention). It never unmounts, removes, writes or calls a CSI driver, and
//! never lists or reads inside a global mount. With `--interval` it runs until
//! stopped, printing one report per run and serving metrics.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use csi_globalmount::Report;
use csi_globalmount::escape;
use csi_globalmount::fs::StatProber;
use csi_globalmount::inputs::{Sources, diagnose_from};
use csi_globalmount::metrics::DoctorMetrics;
use csi_globalmount::serve::{MetricsPort, ServeLimits, router};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// The JSON report.
    Json,
    /// A summary for people, with a plan for each finding.
    Text,
    /// One line for a node-problem-detector custom plugin.
    #[value(alias = "node-problem-detector")]
    Npd,
}

/// Finds CSI global mounts on this node and the ones kubelet lost track of. Read-only.
#[derive(Debug, Parser)]
#[command(name = "csi-globalmount-doctor", version)]
struct Args {
    /// Kubelet root directory (`--root-dir`). Symbolic links in it are
    /// resolved as kubelet resolves them.
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

    /// Any other `kubectl get ... -o json` output: Nodes, VolumeAttachments,
    /// PersistentVolumes, Pods, CSIDrivers, or a List mixing them. Names each
    /// volume's PV, claim and pods, and tells attachable drivers apart.
    /// Repeatable; comma-separated in the environment.
    #[arg(long, env = "CSI_GLOBALMOUNT_API_JSON", value_delimiter = ',')]
    api_json: Vec<PathBuf>,

    /// Kubelet's version, as `kubelet --version` prints it (for example v1.37.2); read from
    /// the Node (--node-json, --api-json) when not given. A plan offers to enable
    /// CSIGlobalMountReconstruction only for a kubelet known to have it: one without that
    /// gate refuses to start.
    #[arg(long, env = "CSI_GLOBALMOUNT_KUBELET_VERSION")]
    kubelet_version: Option<String>,

    /// Kubelet's binary (a host path, read through --host-prefix): whether it has
    /// CSIGlobalMountReconstruction, read from the gate names it holds. Decides over any
    /// version.
    #[arg(long, env = "CSI_GLOBALMOUNT_KUBELET_BINARY")]
    kubelet_binary: Option<PathBuf>,

    /// When kubelet started (RFC 3339, for example from
    /// `systemctl show kubelet -p ActiveEnterTimestamp`). Tells an unstage in
    /// progress from a lost volume when volumesInUse cannot.
    #[arg(long, env = "CSI_GLOBALMOUNT_KUBELET_START_TIME", value_parser = parse_time)]
    kubelet_start_time: Option<SystemTime>,

    /// How long to wait for a stat of a mounted or symlinked `globalmount`,
    /// which tells whether kubelet's listing would skip it; 0s never stats.
    #[arg(
        long,
        env = "CSI_GLOBALMOUNT_STAT_TIMEOUT",
        default_value = "2s",
        value_parser = humantime::parse_duration
    )]
    stat_timeout: Duration,

    /// Run again every INTERVAL (for example 10m) until stopped, printing one
    /// report per run; without it the doctor runs once and exits.
    #[arg(long, env = "CSI_GLOBALMOUNT_INTERVAL", value_parser = humantime::parse_duration)]
    interval: Option<Duration>,

    /// With --interval: serve Prometheus metrics on ADDR at /metrics.
    #[arg(long, env = "CSI_GLOBALMOUNT_METRICS_ADDR", requires = "interval")]
    metrics_addr: Option<SocketAddr>,

    /// With --metrics-addr: time allowed for a request's headers, and for
    /// the next request on a kept-alive connection.
    #[arg(
        long,
        env = "CSI_GLOBALMOUNT_METRICS_HEADER_TIMEOUT",
        default_value = "5s",
        value_parser = humantime::parse_duration
    )]
    metrics_header_timeout: Duration,

    /// With --metrics-addr: most connections served at once; further ones
    /// wait in the listen backlog.
    #[arg(
        long,
        env = "CSI_GLOBALMOUNT_METRICS_MAX_CONNECTIONS",
        default_value_t = csi_globalmount::serve::DEFAULT_MAX_CONNECTIONS
    )]
    metrics_max_connections: usize,

    /// Output format.
    #[arg(long, env = "CSI_GLOBALMOUNT_FORMAT", value_enum, default_value_t = Format::Json)]
    format: Format,
}

fn parse_time(text: &str) -> Result<SystemTime, humantime::TimestampError> {
    humantime::parse_rfc3339_weak(text)
}

/// The stat prober of `--stat-timeout`, none when it is 0.
fn prober(args: &Args) -> Option<StatProber> {
    (!args.stat_timeout.is_zero()).then(|| StatProber::new(args.stat_timeout))
}

/// One run. `prober` is shared by the runs of the continuous mode, so that a
/// stat stuck on a dead mount in one run is not started again by the next.
fn run(args: &Args, prober: Option<&StatProber>) -> Result<Report> {
    let sources = Sources {
        kubelet_root: args.kubelet_root.clone(),
        mountinfo: args.mountinfo.clone(),
        host_prefix: args.host_prefix.clone(),
        node_name: args.node_name.clone(),
        node_json: args.node_json.clone(),
        volume_attachments_json: args.volumeattachments_json.clone(),
        api_json: args.api_json.clone(),
        kubelet_version: args.kubelet_version.clone(),
        kubelet_binary: args.kubelet_binary.clone(),
        kubelet_started_at: args.kubelet_start_time,
        prober: prober.cloned(),
    };
    Ok(diagnose_from(&sources)?)
}

/// Writes `report` to stdout. JSON is streamed: on a node with thousands of
/// volumes, the document held whole in memory would cost as much again as the
/// report itself, in a pod whose memory is limited.
fn print_report(report: &Report, format: Format, continuous: bool) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match format {
        // One document per line when running continuously, so that log
        // collectors keep each run's report whole.
        Format::Json if continuous => serde_json::to_writer(&mut out, report)?,
        Format::Json => serde_json::to_writer_pretty(&mut out, report)?,
        Format::Text => out.write_all(report.to_text().as_bytes())?,
        Format::Npd => out.write_all(report.to_npd_line().as_bytes())?,
    }
    if format != Format::Text {
        out.write_all(b"\n")?;
    }
    out.flush().context("writing the report")
}

fn print(text: &str) -> Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the report")
}

fn once(args: &Args) -> ExitCode {
    let outcome = run(args, prober(args).as_ref()).and_then(|report| {
        print_report(&report, args.format, false)?;
        Ok(report.has_findings())
    });
    match outcome {
        Ok(true) => ExitCode::from(1),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => {
            if args.format == Format::Npd {
                // node-problem-detector reads the message from stdout.
                let _ = print(&format!("error: {}\n", escape::text(&format!("{e:#}"))));
            }
            eprintln!(
                "csi-globalmount-doctor: {}",
                escape::text(&format!("{e:#}"))
            );
            ExitCode::from(2)
        }
    }
}

/// Runs forever: one report per interval; failures are logged and counted,
/// never fatal, since the next run may succeed.
fn every(args: &Args, interval: Duration, metrics: &DoctorMetrics) {
    let prober = prober(args);
    loop {
        let started = Instant::now();
        match run(args, prober.as_ref()).and_then(|report| {
            print_report(&report, args.format, true)?;
            Ok(report)
        }) {
            Ok(report) => metrics.record(&report, started.elapsed()),
            Err(e) => {
                // Errors name paths, and paths come from the node.
                eprintln!(
                    "csi-globalmount-doctor: {}",
                    escape::text(&format!("{e:#}"))
                );
                metrics.record_error(started.elapsed());
            }
        }
        std::thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

fn serve_metrics(addr: SocketAddr, limits: ServeLimits, metrics: Arc<DoctorMetrics>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the metrics server")?;
    runtime.block_on(async move {
        let port = MetricsPort::bind(addr).await?;
        // The bound address, which differs from ADDR when its port is 0.
        eprintln!(
            "csi-globalmount-doctor: serving metrics on http://{}/metrics",
            port.local_addr()
        );
        port.serve(router(metrics), limits, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
        Ok(())
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(interval) = args.interval else {
        return once(&args);
    };
    if interval.is_zero() {
        eprintln!("csi-globalmount-doctor: --interval must be above 0");
        return ExitCode::from(2);
    }
    let metrics = Arc::new(DoctorMetrics::new());
    match args.metrics_addr {
        None => {
            every(&args, interval, &metrics);
            ExitCode::SUCCESS
        }
        Some(addr) => {
            let limits = ServeLimits {
                header_read_timeout: args.metrics_header_timeout,
                max_connections: args.metrics_max_connections,
            };
            let runner = Arc::clone(&metrics);
            std::thread::spawn(move || every(&args, interval, &runner));
            match serve_metrics(addr, limits, metrics) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("csi-globalmount-doctor: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
