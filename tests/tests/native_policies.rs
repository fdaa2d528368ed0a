//! The committed native policies are the generator's output: regenerating changes nothing.

use std::path::Path;

use serde_json::Value;
use volume_health_policies as policies;
use volume_health_tests::kustomize::kustomize;

/// Each of `files` equals its committed copy under `manifests/<dir>`.
fn assert_committed(dir: &str, files: Vec<(String, String)>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests")
        .join(dir);
    for (name, text) in files {
        let path = root.join(&name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        assert!(
            committed == text,
            "{dir}/{name} differs from the generator's output: run `volume-health-webhook policies`"
        );
    }
}

#[test]
fn committed_native_policies_are_generated() {
    assert_committed("components/native-policies", policies::files(&[]));
    assert_committed(
        "static-policies",
        policies::static_files(
            &[],
            policies::Action::Deny,
            "/etc/kubernetes/volume-health/static-policies",
        ),
    );
}

/// `kubectl kustomize` of an overlay, written in the target directory, whose `resources` and
/// `components` name directories of `manifests/`.
fn render(resources: &[&str], components: &[&str], extra: &str) -> Vec<Value> {
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
    kustomize(overlay.path())
}

/// An overlay with the component renders the policies, their Deny bindings and the repair
/// policies' bindings beside what the overlay had.
#[test]
fn the_component_renders_in_an_overlay() {
    let objects = render(
        &["overlays/cert-manager"],
        &["components/native-policies"],
        "",
    );
    let count = |kind: &str| objects.iter().filter(|o| o["kind"] == kind).count();
    assert_eq!(
        count("MutatingAdmissionPolicy"),
        6,
        "drop on save and repair"
    );
    assert_eq!(count("ValidatingAdmissionPolicy"), 2);
    assert_eq!(count("ValidatingAdmissionPolicyBinding"), 2);
    let names = |objects: &[Value]| -> Vec<String> {
        let mut names: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicyBinding")
            .map(|o| o["metadata"]["name"].to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&objects),
        names(&policies::repair_bindings()),
        "repair is bound, drop on save stays unbound"
    );
    assert_eq!(count("ConfigMap"), 0, "the writer list is in its policy");
}

/// Nothing the component renders is namespaced or takes a param: no object an uninstall of
/// the webhooks (or a namespace's deletion) removes can turn a rule into "refuse every claim
/// status write". docs/native-policies.md's patch lists a writer exactly as
/// `policies --pvc-health-writers` writes it.
#[test]
fn the_component_is_cluster_scoped_and_its_writer_list_is_one_patch() {
    let objects = render(&[], &["components/native-policies"], "");
    assert_eq!(objects.len(), 13, "6 + 2 policies, 2 + 3 bindings");
    for object in &objects {
        assert!(object["metadata"].get("namespace").is_none(), "{object}");
        assert!(object["spec"].get("paramKind").is_none(), "{object}");
        assert!(object["spec"].get("paramRef").is_none(), "{object}");
    }
    let monitor = "system:serviceaccount:kube-system:csi-health-monitor";
    let patch = format!(
        "patches:\n  - target:\n      kind: ValidatingAdmissionPolicy\n      name: volume-health-pvc-health-writers\n    patch: |\n      - op: replace\n        path: /spec/variables/0/expression\n        value: \"['{monitor}']\"\n"
    );
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/native-policies.md"),
    )
    .expect("docs/native-policies.md");
    assert!(
        docs.contains(&patch),
        "docs/native-policies.md shows this patch"
    );
    let patched = render(&[], &["components/native-policies"], &patch);
    let policy = patched
        .iter()
        .find(|o| o["metadata"]["name"] == policies::pvc_health_writers_name())
        .expect("the writer list's policy");
    assert_eq!(*policy, policies::pvc_health_writers(&[monitor]));
}

/// The native mode overlays (and so their one-file installs) are the generated policies, the
/// bindings of their action and the repair bindings, nothing more: `overlays/native` with
/// Deny, `native-warn` with the component's `bindings-warn.yaml`.
#[test]
fn the_native_overlays_are_the_policies_and_their_bindings() {
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    for (overlay, action) in [
        ("overlays/native", policies::Action::Deny),
        ("overlays/native-warn", policies::Action::Warn),
    ] {
        let key = |o: &Value| serde_json::to_string(o).expect("JSON");
        let mut rendered: Vec<String> = kustomize(&manifests.join(overlay))
            .iter()
            .map(key)
            .collect();
        let mut expected: Vec<String> = policies::policies(&[])
            .iter()
            .chain(&policies::bindings(action))
            .chain(&policies::repair_bindings())
            .map(key)
            .collect();
        rendered.sort();
        expected.sort();
        assert_eq!(rendered, expected, "{overlay}");
    }
}
