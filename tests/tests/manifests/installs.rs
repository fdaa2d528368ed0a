//! The static installs and the image tags.

use super::*;

/// Each file of `manifests/install/` is its overlay as `kubectl kustomize` renders it today;
/// `make install-manifests` writes them.
#[test]
fn static_installs_are_their_overlays_rendered() {
    let dir = manifests_dir().join("install");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("manifests/install")
        .map(|e| {
            format!(
                "install/{}",
                e.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    let listed: BTreeSet<String> = STATIC_INSTALLS
        .iter()
        .map(|(f, _)| (*f).to_owned())
        .collect();
    assert_eq!(files, listed, "every static install is listed here");
    for (file, overlay) in STATIC_INSTALLS {
        assert_eq!(
            read_manifest(file),
            rendering(overlay).objects,
            "{file} is out of date: run `make install-manifests`"
        );
    }
}

/// Every image of the project that the manifests, the static installs and the chart pin is
/// tagged with the workspace version, which `make image` also tags by default; the CHANGELOG
/// has a section for it.
#[test]
fn images_are_tagged_with_the_workspace_version() {
    let want = format!("v{}", env!("CARGO_PKG_VERSION"));
    let mut images = Vec::new();
    let mut collect = |what: &str, value: &Value| {
        fn walk(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    for (key, value) in map {
                        match (key.as_str(), value) {
                            ("image", Value::String(image)) => found.push(image.clone()),
                            _ => walk(value, found),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        walk(value, &mut found);
        images.extend(found.into_iter().map(|image| (what.to_owned(), image)));
    };
    for rendering in rendered() {
        for object in &rendering.objects {
            collect(rendering.name, object);
        }
    }
    for (file, _) in STATIC_INSTALLS {
        for object in read_manifest(file) {
            collect(file, &object);
        }
    }
    for object in read_manifest(STATIC_POD) {
        collect(STATIC_POD, &object);
    }
    for doctor in ["doctor", "doctor/daemonset"] {
        for object in support::kustomize(&manifests_dir().join(doctor)) {
            collect(doctor, &object);
        }
    }
    let repository = manifests_dir().parent().expect("repository").to_path_buf();
    let chart_values: Value = serde_yaml::from_str(
        &std::fs::read_to_string(repository.join("charts/volume-health/Chart.yaml"))
            .expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    assert_eq!(chart_values["appVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart_values["version"], env!("CARGO_PKG_VERSION"));
    let ours: Vec<&(String, String)> = images
        .iter()
        .filter(|(_, image)| image.starts_with("ghcr.io/volume-health/"))
        .collect();
    assert_eq!(
        ours.len(),
        images.len(),
        "only the project's images: {images:?}"
    );
    assert!(ours.len() >= 8, "{ours:?}");
    for (what, image) in ours {
        assert!(
            image.ends_with(&format!(":{want}")),
            "{what}: {image} is not tagged {want}, the workspace version"
        );
    }
    let changelog = std::fs::read_to_string(repository.join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## [{}]", env!("CARGO_PKG_VERSION"))),
        "CHANGELOG.md has no section for {}",
        env!("CARGO_PKG_VERSION")
    );
}
