//! Shared helpers for the end-to-end tests under `tests/tests/` and the load benchmark under
//! `tests/benches/`.

pub mod baseline;
pub mod bench_requests;
pub mod cluster;
pub mod drivers;
pub mod kustomize;
pub mod phases;
pub mod prom;
pub mod seeded;

use std::path::{Path, PathBuf};

/// The repository's root: this crate lives in `tests/`.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the repository")
        .to_path_buf()
}

/// Stand-ins for an operator's PEM files (`tls.crt`, `tls.key`, `ca.crt`): kustomize and helm
/// copy them, neither parses them.
pub const PEM_STAND_INS: &[(&str, &str)] = &[
    (
        "tls.crt",
        "-----BEGIN CERTIFICATE-----\nserving certificate stand-in\n-----END CERTIFICATE-----\n",
    ),
    (
        "tls.key",
        "-----BEGIN PRIVATE KEY-----\nprivate key stand-in\n-----END PRIVATE KEY-----\n",
    ),
    (
        "ca.crt",
        "-----BEGIN CERTIFICATE-----\nCA stand-in\n-----END CERTIFICATE-----\n",
    ),
];

/// Prints a table a suite measured, and checks that `doc` (relative to the repository) holds it
/// between the lines `begin` and `end`; with `VOLUME_HEALTH_E2E_WRITE_DOCS=1`, writes it there
/// instead.
pub fn documented(doc: &str, begin: &str, end: &str, measured: &str) {
    eprintln!("{measured}");
    let path = repository().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let (Some(from), Some(to)) = (text.find(begin), text.find(end)) else {
        panic!("{doc} has no measured table between {begin} and {end}");
    };
    let documented = text[from + begin.len()..to].trim();
    if std::env::var_os("VOLUME_HEALTH_E2E_WRITE_DOCS").is_some() {
        let updated = format!(
            "{}{begin}\n{}\n{}",
            &text[..from],
            measured.trim(),
            &text[to..]
        );
        std::fs::write(&path, updated)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    } else {
        assert_eq!(
            documented,
            measured.trim(),
            "{doc} does not say what was measured (VOLUME_HEALTH_E2E_WRITE_DOCS=1 writes it)"
        );
    }
}

/// `value` without null members, as the apiserver serves an object it was given with them.
pub fn without_nulls(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        v => v.clone(),
    }
}
