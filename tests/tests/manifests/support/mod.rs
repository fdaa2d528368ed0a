//! Helpers for the manifest tests: rendering kustomizations, reading YAML, looking up
//! objects, and modelling what the kube-apiserver and the server do with them.

pub(crate) mod apiserver;
pub(crate) mod server;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

/// The kustomizations under `manifests/`, relative to it. A kustomization added there
/// without being listed here fails `every_kustomization_is_listed_and_renders`.
pub(crate) const KUSTOMIZATIONS: &[&str] = &[
    "base",
    "overlays/cert-manager",
    "overlays/cert-manager-warn",
    "overlays/provided-certs",
    "overlays/provided-certs-warn",
    "overlays/native",
    "overlays/native-warn",
];

/// The native mode overlays: admission policies alone, no webhook (the native policy tests
/// check them).
pub(crate) const NATIVE: &[&str] = &["overlays/native", "overlays/native-warn"];

/// The overlays an operator installs; `base` alone lacks certificates.
pub(crate) const INSTALLABLE: &[&str] = &[
    "overlays/cert-manager",
    "overlays/cert-manager-warn",
    "overlays/provided-certs",
    "overlays/provided-certs-warn",
];

/// The overlays that roll field validation out in `warn` mode, each with the overlay it
/// differs from in that alone.
pub(crate) const WARN: &[(&str, &str)] = &[
    ("overlays/cert-manager-warn", "overlays/cert-manager"),
    ("overlays/provided-certs-warn", "overlays/provided-certs"),
];

/// The single-file installs under `manifests/install/`, each with the overlay it is the
/// rendering of (`make install-manifests`).
pub(crate) const STATIC_INSTALLS: &[(&str, &str)] = &[
    ("install/cert-manager.yaml", "overlays/cert-manager"),
    (
        "install/cert-manager-warn.yaml",
        "overlays/cert-manager-warn",
    ),
    ("install/native.yaml", "overlays/native"),
    ("install/native-warn.yaml", "overlays/native-warn"),
];

/// Directories under `manifests/` that belong to other components.
const NOT_OURS: &[&str] = &["doctor"];

/// Optional kustomize components, added to an overlay by the operator, in the order an
/// overlay lists them (kube-prometheus-stack labels what monitoring adds); the tests render
/// them on top of every installable overlay.
pub(crate) const COMPONENTS: &[&str] = &[
    "components/monitoring",
    "components/kube-prometheus-stack",
    "components/network-policy",
    "components/pvc-health-writers",
    "components/repair",
    "components/client-ca",
    "components/volume-health-off",
];

/// The in-cluster audit and the CRDs of its reports, rendered and checked by `audit.rs`.
pub(crate) const AUDIT_COMPONENTS: &[&str] = &["components/audit", "components/openreports-crds"];

/// Components that undo what the base or another component sets, rendered on their own:
/// `no-repair` removes the base's repair entries.
pub(crate) const UNDOING_COMPONENTS: &[&str] = &["components/no-repair"];

/// The runtime switch: the webhook's gate off and drop on save's entries.
pub(crate) const VOLUME_HEALTH_OFF: &str = "components/volume-health-off";

/// The native policies' component: generated, rendered and checked by `native_policies.rs`.
pub(crate) const NATIVE_POLICIES: &str = "components/native-policies";

/// The overlay that generates its Secret from PEM files the operator puts into `certs/`
/// (and the overlays built on it).
pub(crate) const PROVIDED_CERTS: &str = "overlays/provided-certs";

/// Stand-ins for the operator's PEM files.
pub(crate) const PROVIDED_CERT_FILES: &[(&str, &str)] = volume_health_tests::PEM_STAND_INS;

/// The namespace the webhooks run in.
pub(crate) const NAMESPACE: &str = "volume-health";

/// `manifests/` of this repository.
pub(crate) fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the repository")
        .join("manifests")
}

/// Every directory under `manifests/` (outside other components' directories) that holds
/// a `kustomization.yaml`, relative to `manifests/`.
pub(crate) fn kustomization_dirs() -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, found: &mut BTreeSet<String>) {
        let entries =
            fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let relative = path.strip_prefix(root).expect("below the root");
            if NOT_OURS
                .iter()
                .chain(COMPONENTS)
                .chain(UNDOING_COMPONENTS)
                .chain(AUDIT_COMPONENTS)
                .chain(&[NATIVE_POLICIES])
                .any(|skip| relative == Path::new(skip))
            {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, found);
            } else if path
                .file_name()
                .is_some_and(|n| n == "kustomization.yaml" || n == "kustomization.yml")
            {
                let dir = relative.parent().expect("a file has a parent");
                found.insert(dir.to_string_lossy().into_owned());
            }
        }
    }
    let root = manifests_dir();
    let mut found = BTreeSet::new();
    walk(&root, &root, &mut found);
    found
}

/// One rendered kustomization.
#[derive(Clone)]
pub(crate) struct Rendered {
    /// Path relative to `manifests/`.
    pub(crate) name: &'static str,
    /// The objects `kubectl kustomize` printed.
    pub(crate) objects: Vec<Value>,
}

impl Rendered {
    /// All objects of a kind.
    pub(crate) fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The only object of a kind.
    pub(crate) fn one(&self, kind: &str) -> &Value {
        let all = self.all(kind);
        assert_eq!(
            all.len(),
            1,
            "{}: expected exactly one {kind}, found {}",
            self.name,
            all.len()
        );
        all[0]
    }

    /// The object of a kind with a name (and namespace, for namespaced kinds).
    pub(crate) fn find(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<&Value> {
        self.objects.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns)
        })
    }
}

/// Every kustomization of the webhooks (not native mode's), rendered once per test run.
pub(crate) fn rendered() -> &'static [Rendered] {
    static WEBHOOKS: OnceLock<Vec<Rendered>> = OnceLock::new();
    WEBHOOKS.get_or_init(|| {
        all_rendered()
            .iter()
            .filter(|r| !NATIVE.contains(&r.name))
            .cloned()
            .collect()
    })
}

/// Every kustomization rendered, the native ones too.
pub(crate) fn all_rendered() -> &'static [Rendered] {
    static RENDERED: OnceLock<Vec<Rendered>> = OnceLock::new();
    RENDERED.get_or_init(|| {
        KUSTOMIZATIONS
            .iter()
            .map(|&name| {
                let objects = if name.starts_with(PROVIDED_CERTS) {
                    render_with_provided_certs(name)
                } else {
                    kustomize(&manifests_dir().join(name))
                };
                Rendered { name, objects }
            })
            .collect()
    })
}

/// Every installable overlay rendered with the runtime switch (`components/volume-health-off`)
/// added, as an operator turns volume health off.
pub(crate) fn switched() -> &'static [Rendered] {
    static SWITCHED: OnceLock<Vec<Rendered>> = OnceLock::new();
    SWITCHED.get_or_init(|| {
        INSTALLABLE
            .iter()
            .map(|&name| Rendered {
                name,
                objects: render_with_components(name, &[VOLUME_HEALTH_OFF]),
            })
            .collect()
    })
}

/// The rendering of one kustomization.
pub(crate) fn rendering(name: &str) -> &'static Rendered {
    all_rendered()
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("{name} is not a listed kustomization"))
}

/// The overlays for operator-provided certificates need PEM files that are never part of
/// the repository. Render a copy of `manifests/` with stand-in files, in a scratch
/// directory of the test build.
fn render_with_provided_certs(overlay: &str) -> Vec<Value> {
    let scratch = tempfile::Builder::new()
        .prefix("provided-certs-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    let root = scratch.path().join("manifests");
    copy_tree(&manifests_dir(), &root);
    let certs = root.join(PROVIDED_CERTS).join("certs");
    fs::create_dir_all(&certs).expect("certs directory");
    for (file, content) in PROVIDED_CERT_FILES {
        fs::write(certs.join(file), content).expect("stand-in certificate file");
    }
    kustomize(&root.join(overlay))
}

/// Renders an overlay an operator writes, `kustomization` (relative to a directory beside
/// the shipped overlays), in a copy of `manifests/` with the stand-in PEM files.
pub(crate) fn render_operator_overlay(kustomization: &str) -> Vec<Value> {
    let scratch = tempfile::Builder::new()
        .prefix("operator-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    let root = scratch.path().join("manifests");
    copy_tree(&manifests_dir(), &root);
    let certs = root.join(PROVIDED_CERTS).join("certs");
    fs::create_dir_all(&certs).expect("certs directory");
    for (file, content) in PROVIDED_CERT_FILES {
        fs::write(certs.join(file), content).expect("stand-in certificate file");
    }
    let mine = root.join("overlays/operator");
    fs::create_dir_all(&mine).expect("overlay directory");
    fs::write(mine.join("kustomization.yaml"), kustomization).expect("kustomization");
    kustomize(&mine)
}

/// Renders an installable overlay with `components` added, as an operator's own overlay
/// would: `resources: [<overlay>]` and `components: [...]`, in a copy of `manifests/`.
pub(crate) fn render_with_components(overlay: &str, components: &[&str]) -> Vec<Value> {
    let mut kustomization = format!("resources:\n  - ../../{overlay}\ncomponents:\n");
    for component in components {
        kustomization.push_str(&format!("  - ../../{component}\n"));
    }
    render_operator_overlay(&kustomization)
}

/// Every directory under `manifests/components/` that holds a kustomization.
pub(crate) fn component_dirs() -> BTreeSet<String> {
    let dir = manifests_dir().join("components");
    fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.join("kustomization.yaml").is_file())
        .map(|path| {
            format!(
                "components/{}",
                path.file_name().expect("a name").to_string_lossy()
            )
        })
        .filter(|dir| dir != NATIVE_POLICIES)
        .collect()
}

/// Copies the files of a directory tree, leaving out `certs/`, where an operator may keep
/// real keys.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    for entry in fs::read_dir(from).unwrap_or_else(|e| panic!("reading {}: {e}", from.display())) {
        let entry = entry.expect("directory entry");
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            if entry.file_name() != "certs" {
                copy_tree(&source, &target);
            }
        } else {
            fs::copy(&source, &target)
                .unwrap_or_else(|e| panic!("copying {}: {e}", source.display()));
        }
    }
}

pub(crate) use volume_health_tests::kustomize::kustomize;

/// Parses a file of `manifests/` that is not a kustomization (apiserver and kubelet inputs).
pub(crate) fn read_manifest(relative: &str) -> Vec<Value> {
    let path = manifests_dir().join(relative);
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    volume_health_tests::kustomize::documents(&text, relative)
}

/// The only document of a file of `manifests/`.
pub(crate) fn read_single_manifest(relative: &str) -> Value {
    let mut documents = read_manifest(relative);
    assert_eq!(documents.len(), 1, "{relative}: expected one YAML document");
    documents.remove(0)
}

/// A string field, or a panic naming the field.
pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("expected a string at {pointer} in {value}"))
}

/// An array field (absent counts as empty).
pub(crate) fn array_at<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Strings of an array field.
pub(crate) fn strings_at(value: &Value, pointer: &str) -> Vec<String> {
    array_at(value, pointer)
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("expected strings at {pointer}"))
                .to_owned()
        })
        .collect()
}
