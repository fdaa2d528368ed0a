//! `volume-health-webhook serve`: parse flags, start the server, stop on SIGTERM or SIGINT.
//! `volume-health-webhook check`: check objects offline (`volume_health_check`).
//! `volume-health-webhook policies`: write the native policies.

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
    }
}

fn policies(args: PoliciesArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    for (name, text) in volume_health_policies::files() {
        let path = args.out_dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
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
