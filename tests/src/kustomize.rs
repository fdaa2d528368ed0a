//! `kubectl kustomize` and YAML streams, as the manifest, native-policy and docs suites read
//! them.

use std::io::ErrorKind;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

/// Runs `kubectl kustomize DIR` and parses its output; panics with the reason when it fails.
pub fn kustomize(dir: &Path) -> Vec<Value> {
    let output = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "kubectl is required to render the manifests (`kubectl kustomize`), but it is not on PATH; \
             install kubectl to run these tests"
        ),
        Err(e) => panic!("running kubectl kustomize {}: {e}", dir.display()),
    };
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("kubectl prints UTF-8");
    documents(&text, &dir.display().to_string())
}

/// The documents of a YAML stream, empty ones left out; `origin` names it in a panic.
pub fn documents(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|e| panic!("{origin}: invalid YAML: {e}"))
        })
        .filter(|document| !document.is_null())
        .collect()
}
