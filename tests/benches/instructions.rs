//! Instructions per review, counted by valgrind's callgrind: the library's work on each of the
//! load benchmark's bodies, next to serde_json's pass over the same bytes into `IgnoredAny`,
//! and next to the counts recorded in `instructions.baseline`.
//!
//! The library's work is what the server's handler asks of it, the gate on:
//! `AdmissionReview::parse`, then `validate` (`/validate`) or `gated_field_to_drop`
//! (`/mutate`); for `/authorize`, the authorizer's `review`, which reads and decides. The
//! body's UTF-8 is checked once on both sides, as the server and the strict baseline do.
//!
//! The benchmark runs itself under callgrind in a worker mode, 200 and 600 reviews in one
//! process, and takes (I(600) - I(200)) / 400: start-up and the building of the body cancel
//! out. Instruction counts do not depend on the machine's load, so a change of a few percent
//! is a change of the code or of the compiler, unlike the load benchmark's times.
//!
//! `cargo bench -p volume-health-tests --bench instructions [-- <filter>]`. A count more than
//! 3 % above its recorded one is printed as a miss, and fails the run with `BENCH_ENFORCE=1`.
//! `VALGRIND` names the valgrind to run (by default the one on `PATH`).
//! `VOLUME_HEALTH_INSTRUCTIONS_OTHER_BUILD` names this benchmark built with another profile:
//! `make bench` gives it the `local` profile's build (`make run`'s, no LTO), whose library
//! counts are printed next to this build's, so that what the faster build costs is measured.

// Benchmark setup unwraps: a panic here is a broken fixture, reported with its location.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::Path;
use std::process::Command;

use volume_health_authz::{AuthzPolicy, Decision};
use volume_health_tests::{baseline, bench_requests};
use volume_health_validation::{AdmissionReview, Settings, Verdict};

/// The environment variable that makes the benchmark a worker: `<case>:<side>:<reviews>`.
const WORKER: &str = "VOLUME_HEALTH_INSTRUCTIONS_WORKER";
/// The same benchmark built with another profile (`make bench` builds it with `local`, `make
/// run`'s): its library counts are printed next to this build's.
const OTHER_BUILD: &str = "VOLUME_HEALTH_INSTRUCTIONS_OTHER_BUILD";
/// The two process sizes whose difference is counted.
const FEW: u64 = 200;
const MANY: u64 = 600;
/// How far above its recorded count a library count may go.
const TOLERANCE: f64 = 0.03;
/// The recorded counts: see the file's header for where they come from.
const RECORDED: &str = include_str!("instructions.baseline");

/// A body and the library's work on it; true when the review is allowed, as every body is.
struct Case {
    label: &'static str,
    body: fn() -> Vec<u8>,
    library: fn(&[u8]) -> bool,
}

const CASES: [Case; 5] = [
    Case {
        label: "pod status /validate",
        body: bench_requests::pod_status_update,
        library: validate,
    },
    Case {
        label: "pod status /mutate",
        body: bench_requests::pod_status_update,
        library: mutate,
    },
    Case {
        label: "PVC status /validate",
        body: bench_requests::pvc_status_update,
        library: validate,
    },
    Case {
        label: "CSINode status /validate",
        body: bench_requests::csinode_status_update,
        library: validate,
    },
    Case {
        label: "SAR /authorize",
        body: bench_requests::kubelet_csinode_status_access,
        library: authorize,
    },
];

fn validate(body: &[u8]) -> bool {
    let policy = Settings::with_gate(true);
    let text = std::str::from_utf8(body).unwrap();
    let review = AdmissionReview::parse(text).unwrap();
    matches!(review.request.validate(&policy), Ok(Verdict::Allowed))
}

fn mutate(body: &[u8]) -> bool {
    let text = std::str::from_utf8(body).unwrap();
    let review = AdmissionReview::parse(text).unwrap();
    matches!(review.request.gated_field_to_drop(true), Ok(None))
}

fn authorize(body: &[u8]) -> bool {
    let policy = AuthzPolicy {
        gate_enabled: true,
        deny_on_mismatch: false,
    };
    let answer = volume_health_authz::review(body, &policy).unwrap();
    answer.decision == Decision::Allow
}

/// Which work a worker does.
#[derive(Clone, Copy)]
enum Side {
    Library,
    Baseline,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Library => "library",
            Side::Baseline => "baseline",
        }
    }
}

fn main() {
    if let Ok(work) = std::env::var(WORKER) {
        worker(&work);
        return;
    }
    // `cargo bench` passes `--bench`; a further argument keeps only the bodies whose label
    // contains it, as the load benchmark's filter does.
    let filter = std::env::args()
        .skip(1)
        .find(|arg| !arg.starts_with("--"))
        .unwrap_or_default();
    let enforce = std::env::var("BENCH_ENFORCE").is_ok_and(|v| !v.is_empty() && v != "0");
    let valgrind = std::env::var("VALGRIND").unwrap_or_else(|_| "valgrind".to_owned());
    let recorded = recorded();
    let this = std::env::current_exe().unwrap();
    let other = std::env::var_os(OTHER_BUILD).map(std::path::PathBuf::from);

    let cases: Vec<usize> = (0..CASES.len())
        .filter(|&case| CASES[case].label.contains(&filter))
        .collect();
    if cases.is_empty() {
        println!("instructions: no body label contains {filter:?}; nothing to run");
        return;
    }
    println!(
        "instructions per review: callgrind, (I({MANY}) - I({FEW})) / {}, gate on, every review allowed",
        MANY - FEW
    );
    println!(
        "{:<26} {:>10} {:>10} {:>9} {:>12} {:>12}{}",
        "body",
        "library",
        "baseline",
        "lib/base",
        "lib/recorded",
        "base/recorded",
        if other.is_some() {
            format!(" {:>10} {:>9}", "other", "other/lib")
        } else {
            String::new()
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let mut missed = 0;
    for case in cases {
        let label = CASES[case].label;
        let library = per_review(&valgrind, &this, dir.path(), case, Side::Library);
        let base = per_review(&valgrind, &this, dir.path(), case, Side::Baseline);
        let other = other.as_ref().map(|exe| {
            let count = per_review(&valgrind, exe, dir.path(), case, Side::Library);
            format!(" {count:>10} {:>8.3}x", count as f64 / library as f64)
        });
        let (vs_recorded, base_vs_recorded, miss) = match recorded.iter().find(|r| r.2 == label) {
            Some(&(lib_recorded, base_recorded, _)) => {
                let miss = library as f64 > lib_recorded as f64 * (1.0 + TOLERANCE);
                (
                    change(library, lib_recorded),
                    change(base, base_recorded),
                    miss,
                )
            }
            None => ("none".to_owned(), "none".to_owned(), false),
        };
        missed += usize::from(miss);
        println!(
            "{label:<26} {library:>10} {base:>10} {:>8.3}x {vs_recorded:>12} {base_vs_recorded:>12}{}{}",
            library as f64 / base as f64,
            other.unwrap_or_default(),
            if miss { "  MISS" } else { "" }
        );
    }
    match (missed, enforce) {
        (0, _) => {}
        (missed, true) => {
            println!(
                "instructions: {missed} body(ies) more than {}% above the recorded count and BENCH_ENFORCE is set",
                TOLERANCE * 100.0
            );
            std::process::exit(1);
        }
        (missed, false) => println!(
            "instructions: {missed} body(ies) more than {}% above the recorded count (not enforced; BENCH_ENFORCE=1 makes a miss fail the run)",
            TOLERANCE * 100.0
        ),
    }
}

/// The change from `recorded` to `now`, in percent.
fn change(now: u64, recorded: u64) -> String {
    format!("{:+.2}%", (now as f64 / recorded as f64 - 1.0) * 100.0)
}

/// The recorded counts: `(library, baseline, label)` of each line that is not a comment.
fn recorded() -> Vec<(u64, u64, &'static str)> {
    RECORDED
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut fields = line.splitn(3, ' ');
            let library = fields.next().unwrap().parse().unwrap();
            let base = fields.next().unwrap().parse().unwrap();
            (library, base, fields.next().unwrap().trim())
        })
        .collect()
}

/// Instructions per review of one side on one body.
fn per_review(valgrind: &str, exe: &Path, dir: &Path, case: usize, side: Side) -> u64 {
    let few = instructions(valgrind, exe, dir, case, side, FEW);
    let many = instructions(valgrind, exe, dir, case, side, MANY);
    assert!(
        many > few,
        "{} on {}: {many} instructions for {MANY} reviews, {few} for {FEW}",
        side.name(),
        CASES[case].label
    );
    (many - few + (MANY - FEW) / 2) / (MANY - FEW)
}

/// The instructions of a whole worker process that does `reviews` reviews.
fn instructions(
    valgrind: &str,
    exe: &Path,
    dir: &Path,
    case: usize,
    side: Side,
    reviews: u64,
) -> u64 {
    let out = dir.join(format!("callgrind.{case}.{}.{reviews}", side.name()));
    let status = Command::new(valgrind)
        .args(["--tool=callgrind", "--quiet"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .env(WORKER, format!("{case}:{}:{reviews}", side.name()))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "running {valgrind}: {e}; install valgrind or run `make bench`, which unpacks it"
            )
        });
    assert!(status.success(), "callgrind worker failed: {status}");
    let profile = std::fs::read_to_string(&out).unwrap();
    // callgrind writes the whole program's count as `summary:` (and again as `totals:`).
    profile
        .lines()
        .find_map(|line| line.strip_prefix("summary:"))
        .or_else(|| {
            profile
                .lines()
                .find_map(|line| line.strip_prefix("totals:"))
        })
        .and_then(|count| count.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no instruction count in {}", out.display()))
}

/// Worker mode: builds the body, then does `reviews` reviews of it, each checked.
fn worker(work: &str) {
    let mut parts = work.split(':');
    let case = &CASES[parts.next().unwrap().parse::<usize>().unwrap()];
    let side = parts.next().unwrap();
    let reviews: u64 = parts.next().unwrap().parse().unwrap();
    let body = (case.body)();
    let review: fn(&[u8]) -> bool = match side {
        "library" => case.library,
        "baseline" => baseline::is_json,
        other => panic!("unknown side {other:?}"),
    };
    for _ in 0..reviews {
        assert!(review(black_box(&body)), "{}: not allowed", case.label);
    }
}
