//! The committed native policies are the generator's output: regenerating changes nothing.

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};
use volume_health_policies::{self as policies, Action};

#[test]
fn committed_native_policies_are_generated() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/components/native-policies");
    for (name, text) in policies::files() {
        let path = dir.join(&name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert!(
            committed == text,
            "{name} differs from the generator's output: run `volume-health-webhook policies`"
        );
    }
}

/// `kubectl kustomize` of an overlay, written in the target directory, whose `resources` and
/// `components` name directories of `manifests/`.
fn render(resources: &[&str], components: &[&str], extra: &str) -> String {
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
    let list = |key: &str, dirs: &[&str]| -> String {
        if dirs.is_empty() {
            return String::new();
        }
        let items: String = dirs
            .iter()
            .map(|d| format!("  - {up}{down}/{d}\n"))
            .collect();
        format!("{key}:\n{items}")
    };
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n{extra}{}{}",
        list("resources", resources),
        list("components", components),
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
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// An overlay with the component renders the policies, their Deny bindings and the writer list
/// beside what the overlay had.
#[test]
fn the_component_renders_in_an_overlay() {
    let text = render(
        &["overlays/cert-manager"],
        &["components/native-policies"],
        "",
    );
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

/// The writer list's binding names the ConfigMap in the namespace it is rendered into (an
/// overlay's `namespace:`, also over another overlay), and a missing ConfigMap is a refusal,
/// never a silent allow, with every action's bindings.
#[test]
fn the_writer_list_binding_follows_the_namespace_and_refuses_without_it() {
    for (resources, extra, namespace) in [
        (vec![], "", "volume-health"),
        (vec![], "namespace: storage-ops\n", "storage-ops"),
        (
            vec!["overlays/cert-manager"],
            "namespace: storage-ops\n",
            "storage-ops",
        ),
    ] {
        let objects = documents(&render(&resources, &["components/native-policies"], extra));
        let configmap = objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap" && o["metadata"]["name"] == policies::WRITERS_CONFIGMAP
            })
            .expect("the writer list");
        assert_eq!(configmap["metadata"]["namespace"], namespace);
        let bound: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
            .filter_map(|o| o.pointer("/spec/paramRef"))
            .collect();
        assert_eq!(bound.len(), 1, "{extra}: one binding takes the list");
        assert_eq!(
            *bound[0],
            json!({
                "name": policies::WRITERS_CONFIGMAP,
                "namespace": namespace,
                "parameterNotFoundAction": "Deny",
            }),
            "{extra}"
        );
    }
    // Warn and Audit bindings too: a missing list is never a silent allow.
    for action in Action::ALL {
        for binding in policies::bindings(action) {
            if let Some(param) = binding.pointer("/spec/paramRef") {
                assert_eq!(param["parameterNotFoundAction"], "Deny", "{action:?}");
            }
        }
    }
}
