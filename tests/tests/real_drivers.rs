//! The real-driver fixtures (`tests/fixtures/real-drivers/`) through the library: each write
//! is made a review as the apiserver sends it, against what the fixture records as stored
//! before it, and decided as `/validate` and in-tree decide it (admitted, or refused with the
//! exact message) and as `/mutate` with repair does (the field stored after the repair's patch,
//! and its warnings); each writer's comparison (`repair::unchanged`) says whether it sends it.
//! Every answer must equal the one the file records.
//!
//! `VOLUME_HEALTH_WRITE_FIXTURES=1` writes the library's answers into the files instead, for a
//! new fixture; `make e2e` checks the same records against a real kube-apiserver
//! (`e2e_drivers.rs`).

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

use volume_health_tests::drivers::{
    Answer, Fixture, Sent, fixture_files, library_answer, stored_after,
};

#[test]
fn real_driver_fixtures_get_the_recorded_answers() {
    let write = std::env::var_os("VOLUME_HEALTH_WRITE_FIXTURES").is_some();
    let files = fixture_files().unwrap();
    assert!(files.len() >= 5, "fixtures missing: {files:?}");
    let (mut admitted, mut refused, mut not_written) = (0, 0, 0);
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut fixture = Fixture::read(path).unwrap();
        assert!(
            !fixture.source.is_empty(),
            "{name} says nowhere where it comes from"
        );
        let read = fixture.clone();
        let mut stored = None;
        for (i, step) in fixture.writes.iter_mut().enumerate() {
            let context = format!("{name}, write {i} ({})", step.probe);
            let (changed, answer) = library_answer(&read, stored.as_ref(), step)
                .unwrap_or_else(|e| panic!("{context}: {e:#}"));
            if write {
                step.changed = changed;
                step.answer = Some(answer.clone());
            } else {
                assert_eq!(step.changed, changed, "{context}: who sends it");
                assert_eq!(step.answer.as_ref(), Some(&answer), "{context}: the answer");
            }
            match &answer {
                Answer::Admitted => admitted += 1,
                Answer::Refused { .. } => refused += 1,
                Answer::NotWritten => not_written += 1,
            }
            assert_eq!(
                step.rpc_error.is_some(),
                step.report == Sent::Nothing,
                "{context}: a probe writes unless its RPC failed"
            );
            stored = stored_after(stored.as_ref(), step, &answer).unwrap();
        }
        if write {
            fixture.write(path).unwrap();
        }
    }
    eprintln!(
        "{} fixtures: {admitted} writes admitted, {refused} refused and repaired, {not_written} not written",
        files.len()
    );
    // The fixtures cover each kind of answer.
    assert!(admitted > 0 && refused > 0 && not_written > 0);
}
