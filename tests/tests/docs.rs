//! The commands the README and `docs/` show name things that exist: every kustomization or
//! file given to `kubectl`, every `make` target, every chart value set with `--set`, and every
//! server flag. The manifests and chart tests render what those commands apply; this keeps the
//! text pointing at them when a path, a target or a value is renamed.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the repository")
        .to_path_buf()
}

/// README.md and every page of docs/, with their names.
fn pages() -> Vec<(String, String)> {
    let root = repository();
    let mut names = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|name| {
            let text = fs::read_to_string(root.join(&name)).expect("a page");
            (name, text)
        })
        .collect()
}

/// The words that follow `prefix` wherever it occurs, up to a space, quote or backtick.
fn arguments<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | ')' | ','))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|word| !word.is_empty())
        .collect()
}

#[test]
fn kubectl_is_given_paths_that_exist() {
    let root = repository();
    let mut checked = 0;
    for (page, text) in pages() {
        for prefix in [
            "kubectl apply -k ",
            "kubectl delete -k ",
            "kubectl apply -f ",
            "kubectl kustomize ",
        ] {
            for path in arguments(&text, prefix) {
                // Paths of the repository; `-` and the operator's own overlay are not.
                if path.starts_with("manifests/") {
                    assert!(
                        root.join(path).exists(),
                        "{page}: `{prefix}{path}`: no such path"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(
        checked >= 10,
        "only {checked} paths found: did the commands change shape?"
    );
}

#[test]
fn make_targets_exist() {
    let makefile = fs::read_to_string(repository().join("Makefile")).expect("Makefile");
    let targets: BTreeSet<&str> = makefile
        .lines()
        .filter_map(|line| line.split_once(':').map(|(target, _)| target))
        .filter(|target| {
            !target.is_empty()
                && target
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .collect();
    let mut checked = 0;
    for (page, text) in pages() {
        for target in arguments(&text, "make ") {
            if target
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !target.starts_with('-')
            {
                assert!(
                    targets.contains(target),
                    "{page}: `make {target}`: no such target"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} make commands found");
}

#[test]
fn chart_values_that_the_docs_set_exist() {
    let values: Value = serde_yaml::from_str(
        &fs::read_to_string(repository().join("charts/volume-health/values.yaml"))
            .expect("values.yaml"),
    )
    .expect("values.yaml is YAML");
    let exists = |key: &str| -> bool {
        let mut at = &values;
        for part in key.split('.') {
            match at.get(part) {
                Some(next) => at = next,
                // A free-form map (`monitoring.labels: {}`) takes any key.
                None => return at.as_object().is_some_and(|map| map.is_empty()),
            }
        }
        true
    };
    let mut checked = 0;
    for (page, text) in pages() {
        for prefix in ["--set ", "--set-string ", "--set-file "] {
            for assignment in arguments(&text, prefix) {
                for pair in assignment.split(',') {
                    let Some((key, _)) = pair.split_once('=') else {
                        continue;
                    };
                    assert!(exists(key), "{page}: `{prefix}{pair}`: no value {key}");
                    checked += 1;
                }
            }
        }
        for key in arguments(&text, "`").into_iter().filter_map(|word| {
            // Values named in the chart's table: `image.tag` and the like.
            let key = word.trim_end_matches(['`', ':']);
            if [".md", ".yaml", ".json"]
                .iter()
                .any(|suffix| key.ends_with(suffix))
            {
                return None;
            }
            let first = key.split('.').next()?;
            (key.contains('.')
                && values.get(first).is_some()
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'))
            .then_some(key)
        }) {
            assert!(exists(key), "{page}: value `{key}` does not exist");
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} chart values found");
}

#[test]
fn server_flags_in_the_docs_exist() {
    use clap::CommandFactory;
    let command = volume_health_webhooks::config::Cli::command();
    let serve = command
        .find_subcommand("serve")
        .expect("the serve subcommand");
    let flags: BTreeSet<String> = serve
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .collect();
    let (_, configuration) = pages()
        .into_iter()
        .find(|(name, _)| name == "docs/configuration.md")
        .expect("docs/configuration.md");
    let table: BTreeSet<String> = configuration
        .lines()
        .filter(|line| line.starts_with("| `--"))
        .flat_map(|line| arguments(line, "`--").into_iter().map(str::to_owned))
        .map(|flag| flag.split(['[', '=']).next().unwrap_or_default().to_owned())
        .collect();
    let documented: BTreeSet<String> = flags
        .iter()
        .filter(|flag| !matches!(flag.as_str(), "help" | "version"))
        .cloned()
        .collect();
    assert_eq!(
        table, documented,
        "docs/configuration.md's flag table lists exactly the flags of `serve`"
    );
}
