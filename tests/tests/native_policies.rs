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

/// An overlay with the component renders the policies, their Deny bindings and the writer list
/// beside what the overlay had.
#[test]
fn the_component_renders_in_an_overlay() {
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests")
        .canonicalize()
        .expect("manifests");
    // Kustomize takes relative paths only: the overlay lives in the target directory.
    let overlay = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let from = overlay.path().canonicalize().expect("the overlay");
    let common = from
        .ancestors()
        .find(|a| manifests.starts_with(a))
        .expect("a common ancestor");
    let up = "../".repeat(
        from.strip_prefix(common)
            .expect("below")
            .components()
            .count(),
    );
    let down = manifests.strip_prefix(common).expect("below").display();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {up}{down}/overlays/cert-manager\ncomponents:\n  - {up}{down}/components/native-policies\n"
    );
    std::fs::write(overlay.path().join("kustomization.yaml"), kustomization).expect("written");
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(overlay.path())
        .output()
        .expect("kubectl on PATH");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let count = |kind: &str| text.matches(&format!("\nkind: {kind}\n")).count();
    assert_eq!(count("MutatingAdmissionPolicy"), 3);
    assert_eq!(count("ValidatingAdmissionPolicy"), 2);
    assert_eq!(count("ValidatingAdmissionPolicyBinding"), 2);
    assert_eq!(
        count("MutatingAdmissionPolicyBinding"),
        0,
        "drop on save stays unbound"
    );
    assert!(text.contains("name: volume-health-pvc-health-writers\n  namespace: volume-health"));
}
