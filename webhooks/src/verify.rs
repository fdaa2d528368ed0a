//! `volume-health-webhook verify`: the flags, handed to `volume_health_cluster::verify`.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use volume_health_cluster::verify::{self, Options, Status};

/// Flags of `verify`. Environment variables are `VOLUME_HEALTH_VERIFY_<FLAG>`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The kubeconfig context to use (by default the current one; in a pod, its service
    /// account).
    #[arg(long, env = "VOLUME_HEALTH_VERIFY_CONTEXT")]
    pub context: Option<String>,
    /// The name of the webhook configurations, mutating and validating.
    #[arg(
        long,
        env = "VOLUME_HEALTH_VERIFY_NAME",
        default_value = "volume-health"
    )]
    pub name: String,
    /// The webhooks' namespace: the probe claim is stored there, where the installed entries
    /// never look.
    #[arg(
        long,
        env = "VOLUME_HEALTH_VERIFY_NAMESPACE",
        default_value = "volume-health"
    )]
    pub namespace: String,
    /// How long to wait for the apiserver to call each probe entry.
    #[arg(long, env = "VOLUME_HEALTH_VERIFY_WAIT", default_value = "20s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// `text`: a line per installed entry; `json`: one document.
    #[arg(long, short = 'o', env = "VOLUME_HEALTH_VERIFY_OUTPUT", value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A line per entry, then a summary line.
    Text,
    /// One JSON document.
    Json,
}

impl VerifyArgs {
    /// Runs the checks: exit code 0 when every installed entry answered, 1 when one failed
    /// or nothing is installed, 2 when the cluster could not be asked, 3 when an answer was
    /// not shown.
    pub fn run(self) -> ExitCode {
        let options = Options {
            configuration_name: self.name,
            namespace: self.namespace,
            wait: self.wait,
        };
        let report = volume_health_cluster::run_with_client(self.context.as_deref(), |client| {
            verify::verify(client, &options)
        });
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                // A message from the cluster may hold any byte: escaped for the terminal.
                eprintln!("error: {}", error_line::chain(e.as_ref()).escape_debug());
                return ExitCode::from(2);
            }
        };
        match self.output {
            Output::Text => print!("{}", report.text()),
            Output::Json => match serde_json::to_string_pretty(&report) {
                Ok(json) => println!("{json}"),
                Err(e) => {
                    eprintln!("error: writing the report: {e}");
                    return ExitCode::from(2);
                }
            },
        }
        ExitCode::from(match report.status() {
            Status::Verified => 0,
            Status::Failed => 1,
            Status::Unshown => 3,
        })
    }
}
