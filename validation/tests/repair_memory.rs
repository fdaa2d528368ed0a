//! `/mutate --repair` on the largest review a server takes, in the worst shapes: the heap of
//! reading it, repairing it and writing the answer stays below the body's own size, and twice
//! the items cost no more than twice the heap. The heap is counted by a global allocator that
//! counts only the measured thread.

// Test code unwraps: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

use volume_health_test_kit::alloc::{Counting, measure};
use volume_health_validation::admission::RepairError;
use volume_health_validation::status::MAX_REPORTED_ERRORS;
use volume_health_validation::{AdmissionReview, Settings};

#[global_allocator]
static HEAP: Counting = Counting;

/// The server's largest body (`--max-request-bytes`, 7 MiB).
const BODY: usize = 7 * 1024 * 1024;

fn review(resource: &str, group: &str, object: &str) -> String {
    format!(
        concat!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"#,
            r#""uid":"u","resource":{{"group":"{}","version":"v1","resource":"{}"}},"#,
            r#""subResource":"status","name":"x","operation":"UPDATE","userInfo":{{"username":"system:admin"}},"#,
            r#""object":{},"oldObject":{{"metadata":{{"name":"x"}}}}}}}}"#
        ),
        group, resource, object
    )
}

/// `item(i)` repeated until the review is about `size` bytes, as a JSON array.
fn list(size: usize, item: impl Fn(usize) -> String) -> String {
    let mut out = String::from("[");
    let mut i = 0;
    while out.len() < size {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item(i));
        i += 1;
    }
    out.push(']');
    out
}

/// The shapes: every condition a duplicate, every message over the limit, every reason
/// impossible, a pod's entries each given twice, a CSINode's drivers each with 17 conditions.
fn shapes(size: usize) -> Vec<(&'static str, String)> {
    let claim = |conditions: String| {
        review(
            "persistentvolumeclaims",
            "",
            &format!(
                r#"{{"metadata":{{"name":"x"}},"status":{{"healthStatus":{{"healthConditions":{conditions}}}}}}}"#
            ),
        )
    };
    let long = "m".repeat(1100);
    vec![
        (
            "claim, every condition a duplicate",
            claim(list(size, |_| {
                r#"{"status":"Degraded","reason":"Slow","message":"m"}"#.to_owned()
            })),
        ),
        (
            "claim, every message over the limit",
            claim(list(size, |i| {
                format!(r#"{{"status":"Degraded","reason":"R{i}","message":"{long}"}}"#)
            })),
        ),
        (
            "claim, every reason impossible",
            claim(list(size, |i| {
                format!(r#"{{"status":"DataLoss","reason":"bad reason {i}!"}}"#)
            })),
        ),
        ("pod, every entry given twice", {
            let volumes = list(size / 4, |i| format!(r#"{{"name":"v{i}"}}"#));
            let n = volumes.matches("name").count();
            let entries = list(size / 2, |i| {
                format!(
                    r#"{{"name":"v{}","healthConditions":[{{"status":"Degraded","reason":"R{i}","message":"{}"}}]}}"#,
                    (i / 2) % n,
                    &long[..64]
                )
            });
            review(
                "pods",
                "",
                &format!(
                    r#"{{"metadata":{{"name":"x"}},"spec":{{"volumes":{volumes}}},"status":{{"volumeHealth":{entries}}}}}"#
                ),
            )
        }),
        ("CSINode, every driver with 17 long conditions", {
            let drivers = list(size, |d| {
                let conditions: Vec<String> = (0..17)
                    .map(|i| {
                        format!(
                            r#"{{"status":"StorageDegraded","reason":"R{i}","message":"{long}"}}"#
                        )
                    })
                    .collect();
                format!(
                    r#"{{"name":"d{d}.example.com","healthConditions":[{}]}}"#,
                    conditions.join(",")
                )
            });
            review(
                "csinodes",
                "storage.k8s.io",
                &format!(r#"{{"metadata":{{"name":"x"}},"status":{{"storageHealth":{drivers}}}}}"#),
            )
        }),
    ]
}

/// The peak heap of reading `body`, repairing it and writing the answer's body.
fn peak_of(body: &str) -> (usize, usize) {
    // As a server sets it: a body's errors are counted past the first few, not kept.
    let settings = Settings {
        error_limit: Some(MAX_REPORTED_ERRORS),
        ..Settings::with_gate(true)
    };
    let (_, validated) = measure(|| {
        let request = AdmissionReview::parse(body).unwrap().request;
        matches!(
            request.validate(&settings),
            Ok(volume_health_validation::Verdict::Invalid(_))
        )
    });
    eprintln!("  of which validation alone: {validated} bytes");
    let (answer, peak) = measure(|| {
        let request = AdmissionReview::parse(body).unwrap().request;
        match request.repair(&settings) {
            Ok(Some(repaired)) => {
                let mut response = request.allow_patching(&repaired.patch());
                response.warnings = repaired.warnings();
                response.into_body().len()
            }
            Ok(None) => 0,
            // Answered as without repair: the list would be larger than any stored object.
            Err(RepairError::TooLarge { .. }) => usize::MAX,
            Err(err) => panic!("{err}"),
        }
    });
    (answer, peak)
}

#[test]
fn repair_of_the_largest_review_holds_less_than_its_body() {
    for ((what, half), (_, whole)) in shapes(BODY / 2 - 64 * 1024)
        .into_iter()
        .zip(shapes(BODY - 64 * 1024))
    {
        assert!(whole.len() <= BODY, "{what}: {} bytes", whole.len());
        let (answer, peak) = peak_of(&whole);
        let (_, half_peak) = peak_of(&half);
        eprintln!(
            "{what}: a {}-byte review, peak heap {peak} bytes ({:.2} of the body), answer {answer} bytes; half the review: {half_peak}",
            whole.len(),
            peak as f64 / whole.len() as f64
        );
        assert!(answer > 0, "{what}: repaired, or too large to repair");
        // The body is the server's already; what repair adds to a claim stays below it, so the
        // request holds at most twice its body. Validating a pod whose entries are many holds
        // about the body again (its names hashed): below one and a half times for now.
        let bound = if what.starts_with("claim") { 2 } else { 3 };
        assert!(
            2 * peak < bound * whole.len(),
            "{what}: {peak} bytes for {}",
            whole.len()
        );
        assert!(
            peak <= 2 * half_peak + 64 * 1024,
            "{what}: {half_peak} bytes for half, {peak} for the whole"
        );
    }
}
