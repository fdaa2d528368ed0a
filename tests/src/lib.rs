//! Shared helpers for the end-to-end tests under `tests/tests/` and the load benchmark under
//! `tests/benches/`.

pub mod baseline;
pub mod bench_requests;
pub mod cluster;
pub mod phases;
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
