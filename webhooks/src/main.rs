//! `volume-health-webhook serve`: parse flags, start the server, stop on SIGTERM or SIGINT.
//! `volume-health-webhook check`: check objects offline (`volume_health_check`).
//! `volume-health-webhook policies`: write the native policies.
//! `volume-health-webhook verify`: prove the apiserver reaches each installed entry.
//! `volume-health-webhook audit`: check the objects a cluster holds, and report.

use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;

use volume_health_webhooks::config::{Cli, Command, PoliciesArgs, ServeArgs};
use volume_health_webhooks::server::{Server, Shutdown, Stopped};
use volume_health_webhooks::telemetry;

fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Serve(args) => serve(args),
        Command::Check(args) => Ok(args.run()),
        Command::Policies(args) => policies(args),
        Command::Verify(args) => Ok(args.run()),
        Command::Audit(args) => Ok(args.run()),
    }
}

fn policies(args: PoliciesArgs) -> anyhow::Result<ExitCode> {
    let writers: Vec<&str> = args.pvc_health_writers.iter().map(String::as_str).collect();
    let component = volume_health_policies::files(&writers);
    let static_files = volume_health_policies::static_files(
        &writers,
        args.static_action.into(),
        &args.static_host_dir,
    );
    for (dir, files) in [
        (&args.out_dir, component),
        (&args.static_out_dir, static_files),
    ] {
        for (name, text) in files {
            let path = dir.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("{}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    telemetry::init(args.log_format);
    let ca_file = args.self_signed_ca_file.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let shutdown = Shutdown::on_signals()?;
        let server = Server::bind(args.into_config())
            .await
            .context("starting the server")?;
        if let Some(ca) = server.generated_ca() {
            match &ca_file {
                Some(path) => tracing::info!(ca_file = %path.display(), "generated a self-signed certificate for localhost; clients can verify it with the CA file"),
                None => eprintln!("generated a self-signed certificate for localhost; its CA:\n{ca}"),
            }
        }
        Ok(match server.run(shutdown).await {
            // A second signal: in-flight requests were cut, not a clean shutdown.
            Stopped::Aborted => ExitCode::FAILURE,
            Stopped::Drained | Stopped::TimedOut(_) => ExitCode::SUCCESS,
        })
    })
}
