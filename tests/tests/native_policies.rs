//! The committed native policies are the generator's output: regenerating changes nothing.

use std::path::Path;

#[test]
fn committed_native_policies_are_generated() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/components/native-policies");
    for (name, text) in volume_health_webhooks::policies::files() {
        let path = dir.join(&name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert!(
            committed == text,
            "{name} differs from the generator's output: run `volume-health-webhook policies`"
        );
    }
}

#[test]
fn the_component_renders() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/components/native-policies");
    let text = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization");
    for file in ["policies.yaml", "bindings-deny.yaml", "writers.yaml"] {
        assert!(text.contains(&format!("  - {file}")), "{file} listed");
    }
}
