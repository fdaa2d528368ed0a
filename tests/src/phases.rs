//! The phases of a slow suite, each reported on its own.
//!
//! An e2e suite starts one control plane and runs many steps against it, because starting it is
//! slow. As one test, its first failure would hide every later step. [`Phases`] runs each step
//! as a named phase instead: a phase that panics, answers an error or outlasts its timeout is
//! reported with its name and message, and the next phases still run. A phase that needs an
//! earlier one to have passed says so ([`Phase::after`]) and is skipped when it did not.
//! [`Phases::finish`] prints one line per phase and fails the test naming every failed phase.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use volume_health_tests::phases::Phases;
//! # async fn suite() {
//! let mut phases = Phases::new("e2e_example", Duration::from_secs(120));
//! // A phase whose value the others need ends the suite when it fails.
//! let Some(cluster) = phases.phase("control plane").run(async { anyhow::Ok(1) }).await else {
//!     return phases.finish();
//! };
//! phases.phase("first").run(async { assert_eq!(cluster, 1) }).await;
//! phases.phase("second").after("first").run(async {}).await;
//! phases.finish();
//! # }
//! ```
//!
//! A phase runs on the test's own task, so it may borrow the suite's state. Its panic is caught
//! where the step is polled (`catch_unwind` around each poll), which needs no `'static` step, as
//! `tokio::spawn` would. The timeout acts at the step's awaits: a step that blocks its thread
//! is timed, but cannot be cut short.

use std::any::Any;
use std::fmt::Display;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Poll;
use std::time::{Duration, Instant};

/// How a phase ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The step finished and answered no error.
    Ok,
    /// The step panicked, answered an error or timed out: the message says which.
    Failed(String),
    /// Not run: `after` is a phase it needs that did not pass.
    Skipped {
        /// The phase it needed.
        after: String,
    },
}

/// What a step answers: `()` for a step that asserts, or a `Result` whose error fails the
/// phase.
pub trait StepOutput {
    /// The value [`Phase::run`] answers when the phase passes.
    type Value;
    /// The value, or the message of the failure.
    fn into_result(self) -> Result<Self::Value, String>;
}

impl StepOutput for () {
    type Value = ();
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<T, E: Display> StepOutput for Result<T, E> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        // `{:#}` prints an `anyhow::Error`'s causes too.
        self.map_err(|error| format!("{error:#}"))
    }
}

/// A suite's phases, run in order; [`Phases::finish`] reports them.
#[derive(Debug)]
pub struct Phases {
    suite: String,
    timeout: Duration,
    done: Vec<Done>,
    finished: bool,
}

#[derive(Debug)]
struct Done {
    name: String,
    outcome: Outcome,
    took: Duration,
}

impl Phases {
    /// The phases of `suite`, each bounded by `timeout` unless it sets its own.
    pub fn new(suite: &str, timeout: Duration) -> Phases {
        Phases {
            suite: suite.to_owned(),
            timeout,
            done: Vec::new(),
            finished: false,
        }
    }

    /// A phase named `name`, unique in the suite; it runs when [`Phase::run`] is awaited.
    pub fn phase(&mut self, name: &str) -> Phase<'_> {
        assert!(
            self.outcome(name).is_none(),
            "{}: two phases are named {name:?}",
            self.suite
        );
        let timeout = self.timeout;
        Phase {
            phases: self,
            name: name.to_owned(),
            after: Vec::new(),
            timeout,
        }
    }

    /// How the phase `name` ended, if it has run or been skipped.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.done
            .iter()
            .find(|done| done.name == name)
            .map(|done| &done.outcome)
    }

    /// Whether every phase so far passed (none failed or was skipped).
    pub fn all_passed(&self) -> bool {
        self.done.iter().all(|done| done.outcome == Outcome::Ok)
    }

    /// Prints one line per phase, then fails naming every failed phase.
    pub fn finish(mut self) {
        self.finished = true;
        let count = |ok: fn(&Outcome) -> bool| self.done.iter().filter(|d| ok(&d.outcome)).count();
        eprintln!(
            "{}: {} phases, {} ok, {} FAILED, {} skipped",
            self.suite,
            self.done.len(),
            count(|o| *o == Outcome::Ok),
            count(|o| matches!(o, Outcome::Failed(_))),
            count(|o| matches!(o, Outcome::Skipped { .. })),
        );
        for Done {
            name,
            outcome,
            took,
        } in &self.done
        {
            match outcome {
                Outcome::Ok => eprintln!("  ok       {name} ({took:.1?})"),
                Outcome::Failed(message) => {
                    eprintln!("  FAILED   {name} ({took:.1?}): {}", one_line(message))
                }
                Outcome::Skipped { after } => {
                    eprintln!("  skipped  {name}: needs {after}, which did not pass")
                }
            }
        }
        let failed: Vec<&str> = self
            .done
            .iter()
            .filter(|done| matches!(done.outcome, Outcome::Failed(_)))
            .map(|done| done.name.as_str())
            .collect();
        assert!(
            failed.is_empty(),
            "{}: {} of {} phases failed: {}",
            self.suite,
            failed.len(),
            self.done.len(),
            failed.join("; ")
        );
    }
}

impl Drop for Phases {
    /// A suite that never reports would pass whatever failed.
    fn drop(&mut self) {
        if !self.finished && !std::thread::panicking() {
            panic!("{}: the phases were never finished", self.suite);
        }
    }
}

/// A phase about to run: its name, the phases it needs and its timeout.
#[must_use = "a phase runs when `run` is awaited"]
#[derive(Debug)]
pub struct Phase<'a> {
    phases: &'a mut Phases,
    name: String,
    after: Vec<String>,
    timeout: Duration,
}

impl Phase<'_> {
    /// Runs only if the earlier phase `phase` passed; else it is skipped.
    pub fn after(mut self, phase: &str) -> Self {
        assert!(
            self.phases.outcome(phase).is_some(),
            "{}: {:?} needs {phase:?}, which is no earlier phase",
            self.phases.suite,
            self.name
        );
        self.after.push(phase.to_owned());
        self
    }

    /// Bounds this phase by `timeout` instead of the suite's.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs `step` unless a phase it needs did not pass: its value if it passes, else `None`.
    pub async fn run<S: StepOutput>(self, step: impl Future<Output = S>) -> Option<S::Value> {
        let Phase {
            phases,
            name,
            after,
            timeout,
        } = self;
        let needed = after
            .into_iter()
            .find(|phase| phases.outcome(phase) != Some(&Outcome::Ok));
        if let Some(after) = needed {
            eprintln!("== {name}: skipped, needs {after}, which did not pass");
            phases.done.push(Done {
                name,
                outcome: Outcome::Skipped { after },
                took: Duration::ZERO,
            });
            return None;
        }
        eprintln!("== {name}");
        let started = Instant::now();
        let result = match tokio::time::timeout(timeout, caught(step)).await {
            Err(_) => Err(format!("timed out after {timeout:?}")),
            Ok(Err(panic)) => Err(panic_message(&*panic)),
            Ok(Ok(output)) => output.into_result(),
        };
        let took = started.elapsed();
        let (outcome, value) = match result {
            Ok(value) => {
                eprintln!("== {name}: ok in {took:.1?}");
                (Outcome::Ok, Some(value))
            }
            Err(message) => {
                eprintln!("== {name}: FAILED after {took:.1?}: {message}");
                (Outcome::Failed(message), None)
            }
        };
        phases.done.push(Done {
            name,
            outcome,
            took,
        });
        value
    }
}

/// `message` on one line of at most 200 characters: `assert_eq!` writes its values on lines
/// of their own.
fn one_line(message: &str) -> String {
    let joined = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    match joined.char_indices().nth(200) {
        Some((at, _)) => format!("{}...", &joined[..at]),
        None => joined,
    }
}

/// `step`'s output, or the payload of its panic.
async fn caught<F: Future>(step: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut step = std::pin::pin!(step);
    std::future::poll_fn(move |cx| {
        match catch_unwind(AssertUnwindSafe(|| step.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            // Never polled again: the phase failed.
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
    .await
}

/// The message a panic was given (`panic!`, `assert!`, `unwrap`).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with no message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish_message(phases: Phases) -> Option<String> {
        catch_unwind(AssertUnwindSafe(|| phases.finish()))
            .err()
            .map(|panic| panic_message(&*panic))
    }

    #[tokio::test]
    async fn a_failed_phase_does_not_stop_the_next() {
        let mut phases = Phases::new("suite", Duration::from_secs(10));
        let mut ran = Vec::new();
        phases
            .phase("first")
            .run(async { assert_eq!(1, 2, "one is not two") })
            .await;
        phases
            .phase("second")
            .run(async { ran.push("second") })
            .await;
        assert_eq!(ran, ["second"]);
        let Some(Outcome::Failed(message)) = phases.outcome("first") else {
            panic!("{:?}", phases.outcome("first"))
        };
        assert!(message.contains("one is not two"), "{message}");
        assert_eq!(phases.outcome("second"), Some(&Outcome::Ok));
        assert_eq!(
            finish_message(phases).as_deref(),
            Some("suite: 1 of 2 phases failed: first")
        );
    }

    #[tokio::test]
    async fn a_phase_after_a_failed_one_is_skipped_and_so_are_its_own() {
        let mut phases = Phases::new("suite", Duration::from_secs(10));
        let mut ran = false;
        phases
            .phase("setup")
            .run(async { Err::<(), _>(anyhow::anyhow!("no etcd").context("starting")) })
            .await;
        phases
            .phase("uses it")
            .after("setup")
            .run(async { ran = true })
            .await;
        phases
            .phase("uses that")
            .after("uses it")
            .run(async { ran = true })
            .await;
        phases.phase("independent").run(async {}).await;
        assert!(!ran, "a skipped phase ran");
        assert_eq!(
            phases.outcome("setup"),
            Some(&Outcome::Failed("starting: no etcd".to_owned()))
        );
        assert_eq!(
            phases.outcome("uses that"),
            Some(&Outcome::Skipped {
                after: "uses it".to_owned()
            })
        );
        assert_eq!(phases.outcome("independent"), Some(&Outcome::Ok));
        assert_eq!(
            finish_message(phases).as_deref(),
            Some("suite: 1 of 4 phases failed: setup")
        );
    }

    #[tokio::test]
    async fn a_hang_names_its_phase() {
        let mut phases = Phases::new("suite", Duration::from_secs(600));
        phases
            .phase("hangs")
            .timeout(Duration::from_millis(50))
            .run(std::future::pending::<()>())
            .await;
        phases
            .phase("next")
            .run(tokio::time::sleep(Duration::from_millis(10)))
            .await;
        assert_eq!(
            phases.outcome("hangs"),
            Some(&Outcome::Failed("timed out after 50ms".to_owned()))
        );
        assert_eq!(phases.outcome("next"), Some(&Outcome::Ok));
        assert_eq!(
            finish_message(phases).as_deref(),
            Some("suite: 1 of 2 phases failed: hangs")
        );
    }

    #[tokio::test]
    async fn a_phase_answers_its_value_and_every_failure_is_named() {
        let mut phases = Phases::new("suite", Duration::from_secs(10));
        let value = phases.phase("value").run(async { anyhow::Ok(7) }).await;
        assert_eq!(value, Some(7));
        let none = phases
            .phase("panics")
            .run(async { anyhow::Ok("x".parse::<u8>().unwrap()) })
            .await;
        assert_eq!(none, None);
        phases
            .phase("errs")
            .run(async { Err::<u8, _>("refused") })
            .await;
        assert_eq!(
            finish_message(phases).as_deref(),
            Some("suite: 2 of 3 phases failed: panics; errs")
        );
    }

    #[test]
    fn a_message_is_reported_on_one_short_line() {
        assert_eq!(
            one_line("assertion `left == right` failed\n  left: 1\n right: 2\n"),
            "assertion `left == right` failed | left: 1 | right: 2"
        );
        let long = "é".repeat(300);
        assert_eq!(one_line(&long), format!("{}...", "é".repeat(200)));
    }

    #[tokio::test]
    async fn all_passed_is_no_failure() {
        let mut phases = Phases::new("suite", Duration::from_secs(10));
        phases.phase("one").run(async {}).await;
        phases.phase("two").after("one").run(async {}).await;
        assert_eq!(finish_message(phases), None);
    }

    #[test]
    #[should_panic(expected = "\"b\" needs \"a\", which is no earlier phase")]
    fn a_need_must_be_an_earlier_phase() {
        let mut phases = Phases::new("suite", Duration::from_secs(10));
        let _ = phases.phase("b").after("a");
    }

    #[test]
    #[should_panic(expected = "suite: the phases were never finished")]
    fn a_suite_must_finish() {
        drop(Phases::new("suite", Duration::from_secs(10)));
    }
}
