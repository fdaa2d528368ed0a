//! The commands the README and `docs/` show: every command of their fenced shell blocks has a
//! rule saying how a test runs it (`docs_support`), and the ones that need no cluster, server
//! binary or helm run here: kustomizations rendered, files parsed, `make -n`, cargo targets
//! looked up, the shell recipes and certificate subshells run in a scratch checkout, the node
//! install under a temporary root. `docs_commands.rs` runs the rest (`make e2e`). The checks
//! below them keep the paths, make targets, chart values and server flags the text names in
//! prose pointing at things that exist.

mod docs_support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::Command;

use docs_support::{
    Class, DocCommand, RULES, Sandbox, after, classified, objects, pages, repository,
};
use serde_json::Value;

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
            if [".md", ".yaml", ".json", ".rs", ".toml"]
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

#[test]
fn every_command_of_the_docs_has_a_rule() {
    let all = classified();
    let mut per_rule: BTreeMap<&str, usize> = BTreeMap::new();
    for (command, _) in &all {
        let (_, rule) = docs_support::classify(command).expect("classified");
        *per_rule.entry(rule).or_default() += 1;
    }
    for (class, rule) in RULES {
        eprintln!(
            "{:>3}  {class:?}: {rule}",
            per_rule.get(rule).copied().unwrap_or(0)
        );
    }
    // Every page with a shell block, and enough commands that a broken extraction shows.
    let pages: BTreeSet<&str> = all.iter().map(|(c, _)| c.page.as_str()).collect();
    assert!(pages.len() >= 9, "commands found on only {pages:?}");
    assert!(all.len() >= 60, "only {} commands found", all.len());
    // A rule nothing matches any more is stale.
    for (_, rule) in RULES {
        assert!(
            per_rule.contains_key(rule),
            "no command matches the rule `{rule}`"
        );
    }
}

#[test]
fn the_extraction_reads_blocks_as_bash_would() {
    let all = docs_support::commands();
    let find = |start: &str| -> &DocCommand {
        all.iter()
            .find(|c| c.flat.starts_with(start))
            .unwrap_or_else(|| panic!("no command starts with `{start}`"))
    };
    let curl = find(
        "curl --cacert target/dev/ca.crt -H 'Content-Type: application/json' --data @examples/pod-status-review.json",
    );
    assert!(
        curl.flat.ends_with("https://localhost:8443/validate"),
        "{}",
        curl.flat
    );
    assert!(
        curl.output[0].starts_with("{\"apiVersion\""),
        "{:?}",
        curl.output
    );
    let can_i = find("kubectl auth can-i update csinodes.storage.k8s.io/node-2");
    assert_eq!(can_i.note.as_deref(), Some("no"));
    let heredoc = find("cat > my-overlay/kustomization.yaml");
    assert!(heredoc.script.ends_with("\nYAML"), "{}", heredoc.script);
    assert!(find("for node in").script.ends_with("\ndone"));
}

fn kubectl_kustomize(sandbox: &Sandbox, dir: &str) -> Vec<Value> {
    let out = Command::new("kubectl")
        .args(["kustomize", dir])
        .current_dir(sandbox.path())
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    objects(&String::from_utf8(out.stdout).expect("UTF-8"))
}

#[test]
fn shell_recipes_run_and_kubectl_renders_what_the_docs_apply() {
    let all = classified();
    let sandbox = Sandbox::new();
    let setup = sandbox.run_setup(&all);
    assert!(setup.len() >= 8, "only {} shell steps ran", setup.len());

    // The certificate subshells made certificates their CA signed, for the names the docs
    // give, and moved the CA key off the checkout.
    assert!(
        !sandbox.node_home().join("volume-health-authz").exists(),
        "the node keeps only the installed copies"
    );
    for (dir, name) in [
        (
            sandbox
                .path()
                .join("manifests/overlays/provided-certs/certs"),
            "DNS:volume-health-webhook.volume-health.svc",
        ),
        (
            sandbox.path().join("volume-health-authz"),
            "IP Address:127.0.0.1",
        ),
        (
            sandbox.node_root().join("etc/kubernetes/volume-health"),
            "IP Address:127.0.0.1",
        ),
    ] {
        assert!(
            !dir.join("ca.key").exists(),
            "{}: the CA key stayed",
            dir.display()
        );
        let verify = Command::new("openssl")
            .args(["verify", "-CAfile", "ca.crt", "tls.crt"])
            .current_dir(&dir)
            .output()
            .expect("openssl");
        assert!(
            verify.status.success(),
            "{}: {}",
            dir.display(),
            String::from_utf8_lossy(&verify.stderr)
        );
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in", "tls.crt"])
            .current_dir(&dir)
            .output()
            .expect("openssl");
        assert!(
            String::from_utf8_lossy(&text.stdout).contains(name),
            "{}: no {name}",
            dir.display()
        );
    }
    assert!(sandbox.safe.join("ca.key").exists());

    let mut rendered = 0;
    for (command, class) in &all {
        match class {
            Class::Kustomize => {
                let dir = command.flat.split_whitespace().last().expect("a directory");
                let objects = kubectl_kustomize(&sandbox, dir);
                assert!(
                    !objects.is_empty(),
                    "{}: {dir} renders nothing",
                    command.at()
                );
                if dir == "my-overlay" {
                    let image = &objects
                        .iter()
                        .find(|o| o["kind"] == "Deployment")
                        .expect("the Deployment")["spec"]["template"]["spec"]["containers"][0]["image"];
                    assert_eq!(
                        image,
                        "registry.example.com/storage/volume-health-webhook:v0.3.0",
                        "{}: the overlay's image",
                        command.at()
                    );
                }
            }
            Class::ApplyFile => {
                let file = after(command, "-f");
                let text = fs::read_to_string(sandbox.path().join(file))
                    .unwrap_or_else(|e| panic!("{}: {file}: {e}", command.at()));
                assert!(
                    !objects(&text).is_empty(),
                    "{}: {file} holds nothing",
                    command.at()
                );
            }
            _ => continue,
        }
        rendered += 1;
    }
    assert!(rendered >= 10, "only {rendered} renders");
}

#[test]
fn make_commands_dry_run_with_their_values() {
    let mut ran = 0;
    for (command, _) in classified().iter().filter(|(_, c)| *c == Class::Make) {
        let words: Vec<&str> = command.flat.split_whitespace().collect();
        let out = Command::new("make")
            .arg("-n")
            .args(&words[1..])
            .current_dir(repository())
            .output()
            .expect("make");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !printed.trim().is_empty(),
            "{}: `make -n {}`: {}",
            command.at(),
            words[1..].join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        for assignment in words[1..].iter().filter(|w| w.contains('=')) {
            let (_, value) = assignment.split_once('=').expect("=");
            assert!(
                printed.contains(value),
                "{}: `make -n` does not use {assignment}:\n{printed}",
                command.at()
            );
        }
        ran += 1;
    }
    assert!(ran >= 5, "only {ran} make commands");
}

#[test]
fn cargo_commands_name_packages_and_targets_that_exist() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(repository())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let mut ran = 0;
    for (command, _) in classified().iter().filter(|(_, c)| *c == Class::Cargo) {
        let (package, kind, target) = if command.flat.starts_with("cargo install") {
            let manifest = repository()
                .join(after(command, "--path"))
                .join("Cargo.toml");
            let package = packages
                .iter()
                .find(|p| p["manifest_path"] == manifest.display().to_string())
                .unwrap_or_else(|| {
                    panic!("{}: no package at {}", command.at(), manifest.display())
                });
            // `installs <binary> into ...`, or the package's one binary.
            let binary = match command
                .note
                .as_deref()
                .and_then(|n| n.strip_prefix("installs "))
            {
                Some(note) => note.split_whitespace().next().expect("a name").to_owned(),
                None => {
                    let bins: Vec<&Value> = package["targets"]
                        .as_array()
                        .expect("targets")
                        .iter()
                        .filter(|t| t["kind"][0] == "bin")
                        .collect();
                    assert_eq!(bins.len(), 1, "{}: which binary?", command.at());
                    bins[0]["name"].as_str().expect("a name").to_owned()
                }
            };
            (package, "bin", binary)
        } else {
            let name = after(command, "-p");
            let package = packages
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{}: no package {name}", command.at()));
            (package, "test", after(command, "--test").to_owned())
        };
        assert!(
            package["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .any(|t| {
                    t["name"] == target.as_str()
                        && t["kind"]
                            .as_array()
                            .expect("kind")
                            .iter()
                            .any(|k| k == kind)
                }),
            "{}: {} has no {kind} target {target}",
            command.at(),
            package["name"]
        );
        ran += 1;
    }
    assert!(ran >= 4, "only {ran} cargo commands");
}

/// The glossary's terms, as a page writes them, and their anchors in docs/glossary.md.
const GLOSSARY_TERMS: [(&str, &str); 5] = [
    ("drop on save", "drop-on-save"),
    ("ratchet", "ratcheting"),
    ("the hop", "the-hop"),
    ("open", "fails-open"),
    ("in-tree", "in-tree"),
];

/// The first use of `term` in a page's prose (not in a code block, a heading, inline code or
/// a link's text): its line.
fn first_use(text: &str, term: &str) -> Option<usize> {
    let mut fenced = false;
    for (number, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.trim_start().starts_with('#') {
            continue;
        }
        let lower = line.to_lowercase();
        for (at, _) in lower.match_indices(term) {
            let before = &lower[..at];
            let in_code = before.matches('`').count() % 2 == 1;
            let in_link_text = before.rfind('[').unwrap_or(0) > before.rfind(']').unwrap_or(0)
                && before.contains('[');
            // "open" is the glossary's only as "fail open" or "fails open".
            let whole = term != "open" || before.ends_with("fail ") || before.ends_with("fails ");
            if !in_code && !in_link_text && whole {
                return Some(number);
            }
        }
    }
    None
}

/// Every page links a glossary term's entry at or before the term's first use, so that no
/// reader meets "drop on save" or "fails open" before it is defined.
#[test]
fn glossary_terms_link_the_glossary_where_a_page_first_uses_them() {
    let mut missing = Vec::new();
    let mut pages: Vec<(String, String)> = fs::read_dir(repository().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter(|p| !p.ends_with("glossary.md"))
        .map(|p| {
            let name = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
            (name, fs::read_to_string(&p).unwrap())
        })
        .collect();
    pages.push((
        "README.md".to_owned(),
        fs::read_to_string(repository().join("README.md")).unwrap(),
    ));
    let glossary = fs::read_to_string(repository().join("docs/glossary.md")).unwrap();
    for (page, text) in &pages {
        let prefix = if page == "README.md" {
            "docs/glossary.md"
        } else {
            "glossary.md"
        };
        for (term, anchor) in GLOSSARY_TERMS {
            assert!(
                glossary
                    .lines()
                    .any(|l| l.starts_with("## ")
                        && l[3..].to_lowercase().replace(' ', "-") == anchor),
                "docs/glossary.md has no entry #{anchor}"
            );
            let Some(line) = first_use(text, term) else {
                continue;
            };
            let target = format!("{prefix}#{anchor}");
            let upto: Vec<&str> = text.lines().take(line + 1).collect();
            // The README's index row names the terms beside its link to the glossary.
            let linked = upto.iter().any(|l| l.contains(&target))
                || (page == "README.md" && upto[line].contains(&format!("({prefix})")));
            if !linked {
                missing.push(format!("{page}:{}: {term} (link {target})", line + 1));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "first uses of a glossary term without a link to its entry:\n{}",
        missing.join("\n")
    );
}

/// One version names one release everywhere a reader or an install meets it: the workspace
/// version is the CHANGELOG's newest release (dated, with its comparison link, and the
/// `[Unreleased]` link comparing from it), every image of the project the README and the docs
/// name is tagged with it, and the upgrade notes' newest section leads to it. The manifests'
/// and the chart's pins are checked by the manifests and chart suites.
#[test]
fn one_version_names_the_release_everywhere() {
    let version = env!("CARGO_PKG_VERSION");
    let changelog = fs::read_to_string(repository().join("CHANGELOG.md")).unwrap();
    let newest = changelog
        .lines()
        .find(|l| l.starts_with("## [") && !l.starts_with("## [Unreleased]"))
        .expect("CHANGELOG.md names a release");
    let dated = newest
        .strip_prefix(&format!("## [{version}] - "))
        .unwrap_or_else(|| panic!("CHANGELOG.md's newest release is `{newest}`, not {version}"));
    assert!(
        dated.len() == 10 && dated.chars().filter(|c| *c == '-').count() == 2,
        "{newest}: a release heading carries its date"
    );
    let base = "https://github.com/volume-health/volume-health-webhooks/compare";
    for link in [
        format!("[Unreleased]: {base}/v{version}...HEAD"),
        format!("[{version}]: {base}/v"),
    ] {
        assert!(
            changelog.lines().any(|l| l.starts_with(&link)),
            "CHANGELOG.md has no link `{link}`"
        );
    }
    let upgrading = fs::read_to_string(repository().join("docs/upgrading.md")).unwrap();
    let section = upgrading
        .lines()
        .find(|l| l.starts_with("## "))
        .expect("docs/upgrading.md has a section");
    assert!(
        section.ends_with(&format!(" to {version}")),
        "docs/upgrading.md's newest section is `{section}`, not one leading to {version}"
    );
    let mut named = 0;
    for (page, text) in pages() {
        for (at, _) in text.match_indices("ghcr.io/volume-health/") {
            let image: String = text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace() && !"`'\")".contains(*c))
                .collect();
            if let Some((_, tag)) = image.rsplit_once(':') {
                assert_eq!(tag, format!("v{version}"), "{page}: {image}");
                named += 1;
            }
        }
    }
    assert!(named >= 3, "only {named} tagged images in the docs");
}
