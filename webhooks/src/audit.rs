//! `volume-health-webhook audit`: the flags, handed to `volume_health_cluster::audit`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{ArgAction, Args};
use volume_health_cluster::audit::{self, Options, Status};
use volume_health_validation::rules::ConditionIdentity;

/// Flags of `audit`. Environment variables are `VOLUME_HEALTH_AUDIT_<FLAG>`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The kubeconfig context to use (by default the current one; in a pod, its service account).
    #[arg(long, env = "VOLUME_HEALTH_AUDIT_CONTEXT")]
    pub context: Option<String>,
    /// Print what is found and write no report (nor delete one).
    #[arg(
        long,
        env = "VOLUME_HEALTH_AUDIT_DRY_RUN",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = crate::parse::go_bool
    )]
    pub dry_run: bool,
    /// Objects per list request: memory holds one page of them.
    #[arg(
        long,
        env = "VOLUME_HEALTH_AUDIT_PAGE_SIZE",
        default_value_t = audit::DEFAULT_PAGE_SIZE,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub page_size: u32,
    /// Most results in one report (a namespace's, or the cluster's); the report's summary
    /// counts the rest. Each report also stays within 768 KiB.
    #[arg(
        long,
        env = "VOLUME_HEALTH_AUDIT_MAX_RESULTS",
        default_value_t = audit::DEFAULT_MAX_RESULTS as u64,
        value_parser = clap::value_parser!(u64).range(1..=5_000)
    )]
    pub max_results: u64,
    /// Also write the counts as Prometheus text into this file (replaced whole), for
    /// node-exporter's textfile collector.
    #[arg(long, value_name = "PATH", env = "VOLUME_HEALTH_AUDIT_METRICS_FILE")]
    pub metrics_file: Option<PathBuf>,
    /// As the server's flag: `false` checks CSINode storage conditions exactly as in-tree,
    /// without this project's rule of one identity per condition within a driver.
    #[arg(
        long,
        env = "VOLUME_HEALTH_AUDIT_STORAGE_HEALTH_UNIQUE_CONDITIONS",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = crate::parse::go_bool
    )]
    pub storage_health_unique_conditions: bool,
}

/// Exit code for bad usage and a cluster that could not be audited, as `check`'s bad input.
const FAILED: u8 = 2;

impl AuditArgs {
    /// Runs the audit; the exit code: 0 nothing found, 1 findings, 2 the cluster could not be
    /// listed or a report not written.
    pub fn run(self) -> ExitCode {
        let Self {
            context,
            dry_run,
            page_size,
            max_results,
            metrics_file,
            storage_health_unique_conditions,
        } = self;
        let options = Options {
            dry_run,
            page_size,
            // At most 5,000 (the flag's range): fits any usize.
            max_results: usize::try_from(max_results).unwrap_or(audit::DEFAULT_MAX_RESULTS),
            storage_condition_identity: ConditionIdentity::unique_if(
                storage_health_unique_conditions,
            ),
        };
        let result = volume_health_cluster::run_with_client(context.as_deref(), |client| {
            audit::run(client, &options)
        });
        let ended = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(e) => {
                // A message from the cluster may hold any byte: escaped for the terminal.
                eprintln!("error: {}", escaped(&error_line::chain(e.as_ref())));
                write_metrics(metrics_file.as_deref(), &audit::failed_metrics(ended));
                return ExitCode::from(FAILED);
            }
        };
        // Notes name resources and escaped namespaces only.
        for note in &outcome.notes {
            eprintln!("note: {note}");
        }
        for failure in &outcome.failures {
            eprintln!("error: {}", escaped(&error_line::chain(failure)));
        }
        print!("{}", outcome.text());
        if !write_metrics(metrics_file.as_deref(), &outcome.metrics(ended)) {
            return ExitCode::from(FAILED);
        }
        ExitCode::from(match outcome.status() {
            Status::Clean => 0,
            Status::Findings => 1,
            Status::Incomplete => FAILED,
        })
    }
}

/// A message that quotes the cluster, as `check` escapes what it prints: control and
/// invisible characters escaped, so that no escape sequence reaches a terminal or a log line.
fn escaped(message: &str) -> String {
    // Messages are already bounded by `error_line`.
    volume_health_check::Printable(message, error_line::MAX_MESSAGE_BYTES).to_string()
}

/// Writes the metrics file when one is asked for; whether that went well.
fn write_metrics(path: Option<&std::path::Path>, text: &str) -> bool {
    let Some(path) = path else {
        return true;
    };
    match audit::write_metrics(path, text) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "error: writing {}: {}",
                path.display().to_string().escape_debug(),
                e
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use crate::config::{Cli, Command};

    fn parse(args: &[&str]) -> Result<super::AuditArgs, clap::Error> {
        let argv = ["volume-health-webhook", "audit"]
            .into_iter()
            .chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Audit(args) => Ok(args),
            other => panic!("not audit: {other:?}"),
        }
    }

    #[test]
    fn every_flag_is_also_an_environment_variable_of_its_own_name() {
        let cli = Cli::command();
        let audit = cli.find_subcommand("audit").expect("audit");
        for arg in audit.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let expected = format!(
                "VOLUME_HEALTH_AUDIT_{}",
                long.to_uppercase().replace('-', "_")
            );
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(expected.as_str()),
                "--{long}"
            );
        }
    }

    #[test]
    fn defaults_and_bounds() {
        let args = parse(&[]).unwrap();
        assert!(!args.dry_run);
        assert_eq!(args.page_size, 500);
        assert_eq!(args.max_results, 1000);
        assert!(args.storage_health_unique_conditions);
        assert!(parse(&["--dry-run"]).unwrap().dry_run);
        assert!(!parse(&["--dry-run=false"]).unwrap().dry_run);
        for refused in [
            "--page-size=0",
            "--page-size=10001",
            "--max-results=0",
            "--max-results=5001",
            "--dry-run=maybe",
        ] {
            assert!(parse(&[refused]).is_err(), "{refused}");
        }
    }
}
