//! `volume-health-webhook serve`: parse flags, start the server, stop on SIGTERM or SIGINT.
//! `volume-health-webhook check`: check objects offline (`volume_health_check`).

use anyhow::Context;
use clap::Parser;
use std::process::ExitCode;
use tokio::signal::unix::{SignalKind, signal};

use volume_health_webhooks::config::{Cli, Command, ServeArgs};
use volume_health_webhooks::server::Server;
use volume_health_webhooks::telemetry;

fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Serve(args) => serve(args).map(|()| ExitCode::SUCCESS),
        Command::Check(args) => Ok(args.run()),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format);
    let ca_file = args.self_signed_ca_file.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
        let server = Server::bind(args.into_config())
            .await
            .context("starting the server")?;
        if let Some(ca) = server.generated_ca() {
            match &ca_file {
                Some(path) => tracing::info!(ca_file = %path.display(), "generated a self-signed certificate for localhost; clients can verify it with the CA file"),
                None => eprintln!("generated a self-signed certificate for localhost; its CA:\n{ca}"),
            }
        }
        let (first_signal, signalled) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::select! { _ = terminate.recv() => {}, _ = interrupt.recv() => {} }
            let _ = first_signal.send(());
            tokio::select! { _ = terminate.recv() => {}, _ = interrupt.recv() => {} }
            tracing::warn!("second signal: exiting without draining");
            std::process::exit(1);
        });
        server
            .run(async {
                let _ = signalled.await;
            })
            .await;
        anyhow::Ok(())
    })
}
