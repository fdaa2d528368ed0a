//! `volume-health-webhook check`: the flags, handed to `volume_health_check`.

use std::io::{BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Args, ValueEnum};
use volume_health_check::{Checker, Options, OutputFormat, Reporter, Source, sources};
use volume_health_validation::rules::ConditionIdentity;

use crate::gates::FeatureGates;

/// Flags of `check`. Environment variables are `VOLUME_HEALTH_CHECK_<FLAG>`, apart from the
/// server's own, so that `check` run beside `serve` does not pick up its settings.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Files, directories (their *.yaml, *.yml and *.json files, recursively), or `-` for
    /// standard input (the default).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Old objects (repeatable): check each object as an update of the old one with the same
    /// kind, namespace and name, with ratcheting as in the webhook.
    #[arg(
        long,
        value_name = "PATH",
        env = "VOLUME_HEALTH_CHECK_OLD",
        value_delimiter = ','
    )]
    pub old: Vec<PathBuf>,
    /// The user writing, e.g. `system:node:node-1`: adds the node rules for that identity.
    #[arg(long = "as", value_name = "USER", env = "VOLUME_HEALTH_CHECK_AS")]
    pub as_user: Option<String>,
    /// A group of that user (repeatable), e.g. `system:nodes`.
    #[arg(
        long = "as-group",
        value_name = "GROUP",
        env = "VOLUME_HEALTH_CHECK_AS_GROUP",
        value_delimiter = ',',
        requires = "as_user"
    )]
    pub as_group: Vec<String>,
    /// Feature gates, as the server takes them. With `CSIVolumeHealth=false` the report says
    /// what drop on save would remove.
    #[arg(
        long,
        env = "VOLUME_HEALTH_CHECK_FEATURE_GATES",
        default_value = "CSIVolumeHealth=true"
    )]
    pub feature_gates: FeatureGates,
    /// As the server's flag: `false` checks CSINode storage conditions exactly as in-tree,
    /// without this project's rule of one identity per condition within a driver.
    #[arg(
        long,
        env = "VOLUME_HEALTH_CHECK_STORAGE_HEALTH_UNIQUE_CONDITIONS",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        value_parser = crate::parse::go_bool
    )]
    pub storage_health_unique_conditions: bool,
    /// As the server's `--repair`: report what `/mutate` would repair in an object that
    /// validation refuses, and check the repaired object instead.
    #[arg(
        long,
        env = "VOLUME_HEALTH_CHECK_REPAIR",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = crate::parse::go_bool
    )]
    pub repair: bool,
    /// Report format.
    #[arg(
        short = 'o',
        long,
        value_enum,
        env = "VOLUME_HEALTH_CHECK_OUTPUT",
        default_value_t = Output::Text
    )]
    pub output: Output,
}

/// `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A line per refused object's error, then a summary.
    Text,
    /// One JSON report.
    Json,
}

/// Exit code for bad usage and unreadable input.
const BAD_INPUT: u8 = 2;

impl CheckArgs {
    /// Runs the check; the exit code: 0 all pass, 1 something would be refused, 2 bad input.
    pub fn run(self) -> ExitCode {
        let Self {
            paths,
            old,
            as_user,
            as_group,
            feature_gates,
            storage_health_unique_conditions,
            repair,
            output,
        } = self;
        let (sources, old) = match (sources(&paths), old_sources(&old)) {
            (Ok(sources), Ok(old)) => (sources, old),
            (Err(err), _) | (_, Err(err)) => {
                eprintln!("error: {err}");
                return ExitCode::from(BAD_INPUT);
            }
        };
        if old.contains(&Source::Stdin) && sources.contains(&Source::Stdin) {
            eprintln!(
                "error: standard input (-) can be read only once: give --old or the objects as files"
            );
            return ExitCode::from(BAD_INPUT);
        }
        // Standard input from a terminal is rarely meant: say what is being waited for.
        if (sources.contains(&Source::Stdin) || old.contains(&Source::Stdin))
            && std::io::stdin().is_terminal()
        {
            eprintln!(
                "check: reading objects (YAML or JSON) from standard input; end with Ctrl-D, \
                 or give files: volume-health-webhook check FILE... (--help)"
            );
        }
        let options = Options {
            gate_enabled: feature_gates.csi_volume_health,
            user: as_user,
            groups: as_group,
            progress: std::io::stderr().is_terminal(),
            storage_condition_identity: ConditionIdentity::unique_if(
                storage_health_unique_conditions,
            ),
            repair,
        };
        let (format, color) = match output {
            Output::Text => (OutputFormat::Text, volume_health_check::stdout_color()),
            Output::Json => (OutputFormat::Json, false),
        };
        let reporter = Reporter::new(BufWriter::new(std::io::stdout().lock()), format, color);
        let mut checker = Checker::new(options, reporter);
        for source in &old {
            checker.load_old(source);
        }
        for source in &sources {
            checker.check_source(source);
        }
        for failure in checker.failures() {
            eprintln!("error: {failure}");
        }
        for skipped in checker.skipped() {
            eprintln!("note: {skipped}");
        }
        let outcome = checker.outcome();
        let summary = checker.summary();
        if summary.objects == 0 && summary.failed_inputs == 0 {
            eprintln!(
                "error: no Pod, PersistentVolumeClaim or CSINode was read ({} objects of other kinds skipped): nothing was checked",
                summary.skipped
            );
        }
        if let Err(err) = checker.finish() {
            eprintln!("error: writing the report: {err}");
            return ExitCode::from(BAD_INPUT);
        }
        ExitCode::from(outcome.code())
    }
}

/// `--old` paths; none means none (not standard input).
fn old_sources(paths: &[PathBuf]) -> Result<Vec<Source>, volume_health_check::PathError> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    sources(paths)
}
