//! Offline checks of Kubernetes objects against the volume health admission rules: what the
//! webhooks would answer if each object were written, decided by the same library code they run
//! (`volume_health_validation`).
//!
//! Objects come from files, directories or standard input, as JSON or YAML, one object or a
//! `List` (as `kubectl get -o json|yaml` prints it) per document. They are read one at a time:
//! a cluster dump of any size needs memory for its largest object, not for the whole dump.
//! Pods, PersistentVolumeClaims and CSINodes are checked; other kinds are counted and skipped.
//!
//! Each object is checked as an UPDATE of its `status` subresource that sets its volume health
//! field to what the object holds: over the old object with the same kind, namespace and name
//! when old objects are given (ratcheting applies, as in the webhook), else over the object
//! without that field (every rule applies). With an identity, the node rules apply to it; with
//! the feature gate off, the report says what drop on save would remove.
//!
//! ```
//! use volume_health_check::{Checker, Options, OutputFormat, Reporter};
//!
//! let dump = br#"{"apiVersion": "v1", "kind": "List", "items": [
//!   {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "shop"},
//!    "spec": {"volumes": [{"name": "data"}]},
//!    "status": {"volumeHealth": [{"name": "logs"}]}},
//!   {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
//! ]}"#;
//! let mut out = Vec::new();
//! let mut checker = Checker::new(Options::default(), Reporter::new(&mut out, OutputFormat::Text, false));
//! checker.check_reader("dump.json", &dump[..]);
//! let summary = checker.finish().unwrap();
//! assert_eq!(summary.invalid, 1);
//! assert_eq!(
//!     String::from_utf8(out).unwrap(),
//!     "Pod/shop/web-0: status.volumeHealth[0].name: Not found: \"logs\"\n\
//!      checked 1 object: 1 pod, 0 claims, 0 CSINodes; 1 invalid; 1 skipped\n"
//! );
//! ```

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::value::RawValue;
use volume_health_validation::rules::ConditionIdentity;
use volume_health_validation::status::MAX_REPORTED_ERRORS;
use volume_health_validation::{HealthResource, Settings, UserInfo};

mod input;
mod object;
mod report;

pub use input::{Format, InputError, Located, PathError, Position, Source, sources};
pub use object::{Denial, Finding, decide};
pub use report::{Checked, Failure, OutputFormat, Printable, Reporter, Skipped, Summary};

use object::Header;

/// How to check. The default: the gate on, no identity, no progress bar.
#[derive(Clone, Debug)]
pub struct Options {
    /// Whether `CSIVolumeHealth` is on. Off: report what drop on save removes (and validate
    /// what is left, as the apiserver would).
    pub gate_enabled: bool,
    /// The user writing, as `--as` names it; `None`: a user the node rules do not apply to.
    pub user: Option<String>,
    /// The user's groups, as `--as-group` names them.
    pub groups: Vec<String>,
    /// Show a progress bar on standard error for inputs that take more than a moment.
    pub progress: bool,
    /// This project's own rule of one identity per storage condition, or in-tree's answers, as
    /// the server's `--storage-health-unique-conditions` sets it.
    pub storage_condition_identity: ConditionIdentity,
    /// As the server's `--repair`: an object validation refuses is repaired as `/mutate` would
    /// repair it, the repairs reported, and the repaired object checked.
    pub repair: bool,
}

impl Default for Options {
    /// The gate on: checking is about what validation would refuse; with the gate off the
    /// fields are dropped rather than refused.
    fn default() -> Self {
        Options {
            gate_enabled: true,
            user: None,
            groups: Vec::new(),
            progress: false,
            storage_condition_identity: ConditionIdentity::Unique,
            repair: false,
        }
    }
}

/// The result of a run, as the command's exit code says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every object would be admitted (0).
    Passed,
    /// Something would be refused, or, with `--repair`, repaired: a writer to fix (1).
    Refused,
    /// An input could not be read, or is not JSON or YAML, or no object of a checked kind was
    /// read at all (2).
    BadInput,
}

impl Outcome {
    /// The exit code.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Passed => 0,
            Outcome::Refused => 1,
            Outcome::BadInput => 2,
        }
    }
}

type Key = (HealthResource, String, String);

/// Checks objects from inputs and writes the report as it goes.
pub struct Checker<W> {
    decider: Decider,
    old: HashMap<Key, Box<RawValue>>,
    reporter: Reporter<W>,
    summary: Summary,
    failures: Vec<Failure>,
    /// The input being checked: what was skipped of it.
    input: Skipped,
    skipped: Vec<Skipped>,
    progress: Progress,
}

impl<W: Write> Checker<W> {
    /// A checker that reports to `reporter`.
    pub fn new(options: Options, reporter: Reporter<W>) -> Self {
        Checker {
            progress: Progress::new(options.progress),
            decider: Decider::new(options),
            old: HashMap::new(),
            reporter,
            summary: Summary::default(),
            failures: Vec::new(),
            input: Skipped::default(),
            skipped: Vec::new(),
        }
    }

    /// Reads old objects to pair with the objects checked later. Returns whether the input was
    /// read to its end (a failure is reported with the rest).
    pub fn load_old(&mut self, source: &Source) -> bool {
        let name = source.name();
        self.progress.start(source.size());
        let old = &mut self.old;
        let progress = &mut self.progress;
        let spec = self.decider.options.user.is_some();
        let result = input::read_source(source, &mut |located| {
            progress.update(located.offset);
            remember(old, spec, located)
        });
        self.done(&name, result)
    }

    /// Reads old objects from `reader` (JSON or YAML), reported as from `name`.
    pub fn load_old_reader(&mut self, name: &str, reader: impl Read + Send) -> bool {
        self.progress.start(None);
        let old = &mut self.old;
        let spec = self.decider.options.user.is_some();
        let result = input::read(reader, None, &mut |located| remember(old, spec, located));
        self.done(name, result)
    }

    /// Checks every object of `source`. Returns whether the input was read to its end.
    pub fn check_source(&mut self, source: &Source) -> bool {
        let name = source.name();
        self.progress.start(source.size());
        self.start_input(&name);
        let result = input::read_source(source, &mut |located| self.check_one(&name, located));
        self.end_input(&name, result)
    }

    /// Checks every object read from `reader` (JSON or YAML, told apart by the first byte),
    /// reported as from `name`.
    pub fn check_reader(&mut self, name: &str, reader: impl Read + Send) -> bool {
        self.progress.start(None);
        self.start_input(name);
        let result = input::read(reader, None, &mut |located| self.check_one(name, located));
        self.end_input(name, result)
    }

    fn start_input(&mut self, name: &str) {
        self.input = Skipped {
            file: name.to_owned(),
            ..Skipped::default()
        };
    }

    /// Ends an input: its failure if any, and what was skipped of it.
    fn end_input(&mut self, name: &str, result: Result<(), InputError>) -> bool {
        let read = self.done(name, result);
        let input = std::mem::take(&mut self.input);
        if !input.kinds.is_empty() || (read && input.is_notable()) {
            self.skipped.push(input);
        }
        read
    }

    fn check_one(&mut self, file: &str, located: Located<'_>) -> Result<(), InputError> {
        self.progress.update(located.offset);
        let header = Header::parse(located.raw, self.decider.options.user.is_some())
            .map_err(|err| not_an_object(&located, &err))?;
        let Some(resource) = header.resource() else {
            self.summary.skipped += 1;
            self.input.count(header.label());
            return Ok(());
        };
        self.input.checked += 1;
        let paired = self.old.get(&key(resource, &header));
        let finding = self
            .decider
            .decide_header(resource, &header, located.raw, paired.map(|old| &**old))
            .map_err(|err| not_an_object(&located, &err))?;
        self.summary.count(resource, &finding);
        self.reporter
            .object(&Checked {
                resource,
                namespace: header.namespace(),
                name: header.name(),
                file,
                position: located.position,
                paired: paired.is_some(),
                finding: &finding,
            })
            .map_err(InputError::Output)
    }

    fn done(&mut self, file: &str, result: Result<(), InputError>) -> bool {
        let Err(err) = result else {
            return true;
        };
        self.summary.failed_inputs += 1;
        self.failures.push(match err {
            InputError::Syntax { position, message } => Failure {
                file: file.to_owned(),
                position: Some(position),
                message,
            },
            other => Failure {
                file: file.to_owned(),
                position: None,
                message: other.to_string(),
            },
        });
        false
    }

    /// The inputs that failed so far.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// The inputs checked so far that objects were skipped from, or that held no object.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The counts so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The options this checker runs with.
    pub fn options(&self) -> &Options {
        &self.decider.options
    }

    /// Ends the report; the counts.
    pub fn finish(mut self) -> std::io::Result<Summary> {
        self.progress.clear();
        self.reporter.finish(&self.summary, &self.failures)?;
        Ok(self.summary)
    }

    /// The exit status the counts call for.
    pub fn outcome(&self) -> Outcome {
        outcome(&self.summary)
    }
}

/// The decisions of `check` for one object at a time, without inputs, old objects kept or a
/// report: for callers that read objects elsewhere, such as the items of a cluster's list
/// pages (which carry no `kind`, so the caller says what they are). [`Checker`] decides with
/// one too, so both answer alike.
#[derive(Clone, Debug)]
pub struct Decider {
    options: Options,
    settings: Settings,
    user: UserInfo<'static>,
}

impl Decider {
    /// Decides as `options` say (`progress` is [`Checker`]'s alone).
    pub fn new(options: Options) -> Self {
        let user = UserInfo::new(options.user.clone().unwrap_or_default(), &options.groups);
        let settings = Settings {
            storage_condition_identity: options.storage_condition_identity,
            // The webhooks' bound, so that the answers are theirs.
            error_limit: Some(MAX_REPORTED_ERRORS),
            ..Settings::with_gate(options.gate_enabled)
        };
        Decider {
            options,
            settings,
            user,
        }
    }

    /// The options it decides with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// What the webhooks would answer for a write of `object`'s status, `object` being a
    /// `resource` (its own `kind`, if any, is not read): over `old`, or without one over the
    /// object without its volume health field, so that every rule applies. An error only when
    /// `object` is not a JSON object with the members an object has.
    pub fn decide(
        &self,
        resource: HealthResource,
        object: &RawValue,
        old: Option<&RawValue>,
    ) -> Result<Finding, serde_json::Error> {
        let header = Header::parse(object, self.options.user.is_some())?;
        self.decide_header(resource, &header, object, old)
    }

    fn decide_header(
        &self,
        resource: HealthResource,
        header: &Header<'_>,
        object: &RawValue,
        old: Option<&RawValue>,
    ) -> Result<Finding, serde_json::Error> {
        let plain = self.options.user.is_none()
            && !object::may_carry_field(resource, object)
            && old.is_none_or(|old| !object::may_carry_field(resource, old));
        if plain {
            // No identity, and neither object carries the field: no rule has anything to
            // check and nothing is dropped, which is the library's answer without asking it
            // (the webhooks' configurations do not even send such writes). Most objects of a
            // dump are such, so a dump is checked at nearly the speed of parsing it.
            return Ok(Finding::default());
        }
        let blank;
        let old = match old {
            Some(old) => old,
            None => {
                blank = object::blank_old(header)?;
                &*blank
            }
        };
        let finding = decide(
            resource,
            header.name(),
            object,
            old,
            &self.user,
            &self.settings,
        );
        let invalid = finding.denial.as_ref().is_some_and(|d| d.code == 422);
        if self.options.repair && invalid {
            return Ok(object::repaired(
                resource,
                header.name(),
                object,
                old,
                &self.user,
                &self.settings,
            )
            .unwrap_or(finding));
        }
        Ok(finding)
    }
}

/// Keeps an old object, reduced to what the rules read of it.
fn remember(
    old: &mut HashMap<Key, Box<RawValue>>,
    spec: bool,
    located: Located<'_>,
) -> Result<(), InputError> {
    let Some((resource, header)) = identify(&located, spec)? else {
        return Ok(());
    };
    let reduced = object::reduce_old(resource, &header, located.raw)
        .map_err(|err| not_an_object(&located, &err))?;
    old.insert(key(resource, &header), reduced);
    Ok(())
}

/// The exit status a run's counts call for: bad input first, then refusals and repairs (a
/// report repair keeps flowing is still a driver or a sidecar to fix, and an audit job must
/// notice it). A run that read no
/// object of a checked kind is bad input, never a pass: an empty pipe from a `kubectl` that could
/// not reach its cluster must not read as "clean".
pub fn outcome(summary: &Summary) -> Outcome {
    if summary.failed_inputs > 0 || summary.objects == 0 {
        Outcome::BadInput
    } else if summary.refused() || summary.repaired > 0 {
        Outcome::Refused
    } else {
        Outcome::Passed
    }
}

/// The resource and header of an object with rules here; `None` for any other kind.
/// With `spec`, also `spec.nodeName`, which only the node rules read.
fn identify<'a>(
    located: &Located<'a>,
    spec: bool,
) -> Result<Option<(HealthResource, Header<'a>)>, InputError> {
    let header = Header::parse(located.raw, spec).map_err(|err| not_an_object(located, &err))?;
    Ok(header.resource().map(|resource| (resource, header)))
}

fn not_an_object(located: &Located<'_>, err: &serde_json::Error) -> InputError {
    InputError::Syntax {
        position: located.position,
        message: format!(
            "not a Kubernetes object: {}",
            volume_health_validation::json::message_without_position(err)
        ),
    }
}

fn key(resource: HealthResource, header: &Header<'_>) -> Key {
    (
        resource,
        header.namespace().unwrap_or_default().to_owned(),
        header.name().to_owned(),
    )
}

/// A progress bar on standard error, shown once an input has taken more than a moment.
struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
}

/// How long an input runs before the bar appears.
const PROGRESS_AFTER: Duration = Duration::from_millis(500);

impl Progress {
    fn new(enabled: bool) -> Self {
        Progress {
            bar: enabled.then(ProgressBar::hidden),
            started: Instant::now(),
            shown: false,
        }
    }

    fn start(&mut self, len: Option<u64>) {
        let Some(bar) = &self.bar else { return };
        self.started = Instant::now();
        let template = match len {
            Some(len) => {
                bar.set_length(len);
                "{spinner} {bytes}/{total_bytes} ({bytes_per_sec}, {eta}) {wide_bar}"
            }
            None => {
                bar.unset_length();
                "{spinner} {bytes} ({bytes_per_sec})"
            }
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_position(0);
    }

    fn update(&mut self, offset: u64) {
        let Some(bar) = &self.bar else { return };
        if !self.shown && self.started.elapsed() > PROGRESS_AFTER {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        bar.set_position(offset);
    }

    fn clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Whether standard output takes colours: a terminal, unless `NO_COLOR` is set
/// (`CLICOLOR_FORCE` forces them).
pub fn stdout_color() -> bool {
    anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
}
