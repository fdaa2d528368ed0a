//! The Dockerfile's dependency layer builds the workspace from its manifests and empty sources.
//! Cargo refuses a workspace whose member manifest is missing, or a target declared in a
//! manifest whose file is missing, so each member added and each target declared must be there
//! too. No container runtime is needed to check that: the Dockerfile is read as text.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
}

/// The workspace members, from the root manifest's `members = [...]`.
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("the root manifest");
    let line = manifest
        .lines()
        .find(|line| line.starts_with("members = ["))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The files cargo needs of `member`: its library root when it has one, and every target its
/// manifest declares (`[[bin]]`, `[[test]]`, `[[bench]]`, `[[example]]`), at its `path` or the
/// default one for its kind.
fn needed_files(member: &str) -> Vec<String> {
    let dir = root().join(member);
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a member's manifest");
    let mut files = Vec::new();
    if dir.join("src/lib.rs").exists() {
        files.push(format!("{member}/src/lib.rs"));
    }
    let mut kind: Option<&str> = None;
    let mut name: Option<String> = None;
    let mut path: Option<String> = None;
    let mut flush = |kind: Option<&str>, name: Option<String>, path: Option<String>| {
        let (Some(kind), Some(name)) = (kind, name) else {
            return;
        };
        let default = match kind {
            "bin" => format!("src/bin/{name}.rs"),
            "test" => format!("tests/{name}.rs"),
            "bench" => format!("benches/{name}.rs"),
            _ => format!("examples/{name}.rs"),
        };
        files.push(format!("{member}/{}", path.unwrap_or(default)));
    };
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(kind.take(), name.take(), path.take());
            kind = ["bin", "test", "bench", "example"]
                .into_iter()
                .find(|k| line == format!("[[{k}]]"));
            continue;
        }
        let value = || line.split('"').nth(1).map(str::to_owned);
        if kind.is_some() && line.starts_with("name") {
            name = value();
        } else if kind.is_some() && line.starts_with("path") {
            path = value();
        }
    }
    flush(kind, name, path);
    files
}

#[test]
fn the_dependency_layer_has_every_manifest_and_declared_target() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let layer = &dockerfile[..dockerfile.find("COPY . .").expect("the sources' COPY")];
    let mut missing = BTreeSet::new();
    let members = members();
    assert!(members.len() >= 5, "{members:?}");
    for member in &members {
        let manifest = format!("COPY {member}/Cargo.toml {member}/");
        if !layer.contains(&manifest) {
            missing.insert(manifest);
        }
        for file in needed_files(member) {
            // The stubs are listed as words of the RUN loop.
            if !layer
                .split_whitespace()
                .any(|word| word.trim_end_matches(';') == file)
            {
                missing.insert(format!("stub {file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the Dockerfile's dependency layer lacks: {missing:#?}"
    );
}

#[test]
fn declared_targets_are_found_in_the_manifests() {
    // The reader above is what the test stands on: it must see the targets the manifests declare.
    let files: Vec<String> = members().iter().flat_map(|m| needed_files(m)).collect();
    for expected in [
        "webhooks/src/main.rs",
        "tests/src/bin/baseline-webhook.rs",
        "tests/benches/load.rs",
        "globalmount/tests/behaviours/main.rs",
        "validation/src/lib.rs",
    ] {
        assert!(
            files.iter().any(|f| f == expected),
            "{expected} in {files:?}"
        );
    }
}
