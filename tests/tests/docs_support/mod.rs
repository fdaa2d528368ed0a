//! The commands of the fenced shell blocks of README.md and `docs/`, and the rules that say how
//! a test runs each one. `docs.rs` runs the rules that need nothing but kubectl, make, cargo and
//! openssl; `docs_commands.rs` runs the rest against a real kube-apiserver, the release
//! binaries and the pinned helm. A command no rule covers fails `docs.rs`.

// Each of the two test files uses part of this module.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The languages of the fenced blocks whose lines are commands.
const SHELL: &[&str] = &["sh", "bash", "console", "shell", "shell-session", "zsh"];

pub(crate) use volume_health_tests::repository;

/// README.md, the code map and every page of docs/, with their names.
pub(crate) fn pages() -> Vec<(String, String)> {
    let root = repository();
    let mut names = vec!["README.md".to_owned(), "ARCHITECTURE.md".to_owned()];
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

/// One command of a fenced shell block.
#[derive(Clone, Debug)]
pub(crate) struct DocCommand {
    pub(crate) page: String,
    /// 1-based line of its first line.
    pub(crate) line: usize,
    /// As written (continuation lines, heredoc, subshell or loop body included), for bash.
    pub(crate) script: String,
    /// Comments removed, continuations joined: what the rules match.
    pub(crate) flat: String,
    /// The comment at the end of its last line: an answer the page shows (`# yes`).
    pub(crate) note: Option<String>,
    /// Comment lines right below it: the output the page shows.
    pub(crate) output: Vec<String>,
    /// Which fenced block of the page it is in.
    pub(crate) block: usize,
    /// The prose between the block before and this one, which may say how to run it
    /// (`make run ARGS='...'`).
    pub(crate) intro: String,
}

impl DocCommand {
    pub(crate) fn at(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

/// `line` without a trailing `# comment` (a `#` after a blank, outside quotes), and the comment.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                return (line[..at].trim_end(), Some(line[at + 1..].trim()));
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim_end(), None)
}

/// Every command of every fenced shell block, in page order.
pub(crate) fn commands() -> Vec<DocCommand> {
    let mut all = Vec::new();
    for (page, text) in pages() {
        let lines: Vec<&str> = text.lines().collect();
        let mut blocks = 0;
        let mut prose_from = 0;
        let mut i = 0;
        while i < lines.len() {
            let fence = lines[i].trim_start();
            i += 1;
            let Some(lang) = fence.strip_prefix("```") else {
                continue;
            };
            let intro = lines[prose_from..i - 1].join("\n");
            let indent = lines[i - 1].len() - fence.len();
            let mut block = Vec::new();
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                block.push((
                    i + 1,
                    lines[i].get(indent..).unwrap_or(lines[i].trim_start()),
                ));
                i += 1;
            }
            i += 1;
            prose_from = i;
            if SHELL.contains(&lang.trim()) {
                blocks += 1;
                let mut commands = block_commands(&page, blocks, &block);
                for command in &mut commands {
                    command.intro.clone_from(&intro);
                }
                all.extend(commands);
            }
        }
    }
    all
}

fn block_commands(page: &str, index: usize, block: &[(usize, &str)]) -> Vec<DocCommand> {
    let mut out: Vec<DocCommand> = Vec::new();
    let mut open = false;
    let mut j = 0;
    while j < block.len() {
        let (number, line) = block[j];
        j += 1;
        if line.trim().is_empty() {
            open = false;
            continue;
        }
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            if open {
                out.last_mut()
                    .expect("an open command")
                    .output
                    .push(comment.trim().to_owned());
            }
            continue;
        }
        let mut script = vec![line];
        // A subshell, a loop or a heredoc runs as one command up to its end.
        let end = if line.trim() == "(" {
            Some(")".to_owned())
        } else if line.starts_with("for ") {
            Some("done".to_owned())
        } else {
            line.split_once("<<'")
                .and_then(|(_, rest)| rest.split_once('\''))
                .map(|(word, _)| word.to_owned())
        };
        match end {
            Some(end) => {
                while j < block.len() {
                    script.push(block[j].1);
                    j += 1;
                    if block[j - 1].1.trim() == end {
                        break;
                    }
                }
            }
            None => {
                while split_comment(script[script.len() - 1]).0.ends_with('\\') && j < block.len() {
                    script.push(block[j].1);
                    j += 1;
                }
            }
        }
        let (_, note) = split_comment(script[script.len() - 1]);
        let flat = script
            .iter()
            .map(|l| split_comment(l).0.trim_end_matches('\\').trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        out.push(DocCommand {
            page: page.to_owned(),
            line: number,
            script: script.join("\n"),
            flat,
            note: note.map(str::to_owned),
            output: Vec::new(),
            block: index,
            intro: String::new(),
        });
        open = true;
    }
    out
}

/// How a command is exercised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// `kubectl apply -k`, `delete -k`: rendered with `kubectl kustomize` in the
    /// sandbox checkout (docs.rs); applied, or for `delete` dry-run on the server, against the
    /// apiserver (docs_commands.rs).
    Kustomize,
    /// `kubectl apply -f <file>`: parsed (docs.rs), applied to the apiserver (docs_commands.rs).
    ApplyFile,
    /// `make <target> [VAR=value]`: `make -n`, which must print each given value (docs.rs).
    Make,
    /// `cargo install --path` and `cargo test --test`: the package and target exist (docs.rs).
    Cargo,
    /// `mkdir`, `rm`, heredocs, `set -o pipefail`, certificate subshells: run by bash in the
    /// sandbox checkout; a subshell also without `SOMEWHERE_SAFE`, where it must make nothing
    /// (docs.rs, and again as setup in docs_commands.rs).
    Shell,
    /// `sudo install ...` on a control plane node: run without sudo under a temporary root
    /// (docs.rs).
    NodeInstall,
    /// `kubectl get|auth|set|label|rollout|delete ...`: run against the apiserver, `rollout
    /// status` with `--watch=false` since no controller runs there, `rollout undo` and
    /// `delete` with `--dry-run=server`; `auth can-i` must answer as the page shows
    /// (docs_commands.rs).
    Kubectl,
    /// `kubectl logs`, `kubectl port-forward ... &` and the `curl` of the forwarded port: no
    /// kubelet runs pods on a bare apiserver; the object must exist, and the forwarded process
    /// (the release binary with the object's own arguments) is run locally and curled
    /// (docs_commands.rs).
    Kubelet,
    /// A pipe or loop of kubectl and the binaries: run by bash against the apiserver
    /// (docs_commands.rs).
    ClusterScript,
    /// `volume-health-webhook ...`, `csi-globalmount-doctor ...`: the release binaries on the
    /// repository's files (docs_commands.rs).
    Binary,
    /// `helm install ...`: `helm template` with the same arguments, applied with
    /// `--dry-run=server` (docs_commands.rs).
    Helm,
    /// `curl` of `make run`'s server: the release binary with `make run`'s flags, on free ports;
    /// the shown output must match (docs_commands.rs).
    Curl,
}

/// The rules, first match wins.
pub(crate) const RULES: &[(Class, &str)] = &[
    (Class::Kustomize, "kubectl apply -k <dir>"),
    (Class::Kustomize, "kubectl delete -k <dir>"),
    (Class::ApplyFile, "kubectl apply -f <file>"),
    (Class::Make, "make <target>"),
    (Class::Cargo, "cargo install --path <dir> --locked"),
    (Class::Cargo, "cargo test -p <package> --test <target>"),
    (Class::Shell, "set -o pipefail"),
    (Class::Shell, "mkdir -p <dir>"),
    (Class::Shell, "cat > <file> <<'END' ... END"),
    (Class::Shell, "rm -r <dir>"),
    (Class::Shell, "( ... openssl ... )"),
    (Class::NodeInstall, "sudo install ..."),
    (Class::Kubelet, "kubectl ... logs ..."),
    (Class::Kubelet, "kubectl ... port-forward ... &"),
    (
        Class::Kubelet,
        "curl -s [http://]localhost:<forwarded port>/metrics | grep ...",
    ),
    (Class::ClusterScript, "for ... kubectl ... done"),
    (Class::ClusterScript, "kubectl ... | ..."),
    (
        Class::Kubectl,
        "kubectl [-n <ns>] get|auth|set|label|rollout|delete ...",
    ),
    (Class::Binary, "volume-health-webhook ..."),
    (Class::Binary, "csi-globalmount-doctor ..."),
    (Class::Helm, "helm install ..."),
    (Class::Curl, "curl ... https://localhost:8443/..."),
    (Class::Curl, "curl http://localhost:8081/..."),
];

/// The rule of `command`, or `None`.
pub(crate) fn classify(command: &DocCommand) -> Option<(Class, &'static str)> {
    let f = command.flat.as_str();
    let words: Vec<&str> = f.split_whitespace().collect();
    let piped = f.contains(" | ");
    let rule = |pattern: &str| RULES.iter().copied().find(|(_, p)| *p == pattern);
    if words.len() == 4 && f.starts_with("kubectl apply -k ") {
        return rule("kubectl apply -k <dir>");
    }
    if words.len() == 4 && f.starts_with("kubectl delete -k ") {
        return rule("kubectl delete -k <dir>");
    }
    if words.len() == 4 && f.starts_with("kubectl apply -f ") && words[3] != "-" {
        return rule("kubectl apply -f <file>");
    }
    if words.first() == Some(&"make") && words.len() >= 2 && !piped {
        return rule("make <target>");
    }
    if f.starts_with("cargo install --path ") && words.len() == 5 && words[4] == "--locked" {
        return rule("cargo install --path <dir> --locked");
    }
    if f.starts_with("cargo test -p ") && words.len() == 6 && words[4] == "--test" {
        return rule("cargo test -p <package> --test <target>");
    }
    if f == "set -o pipefail" {
        return rule("set -o pipefail");
    }
    if words.len() == 3 && f.starts_with("mkdir -p ") {
        return rule("mkdir -p <dir>");
    }
    if f.starts_with("cat > ") && command.script.contains("<<'") {
        return rule("cat > <file> <<'END' ... END");
    }
    if words.len() == 3 && f.starts_with("rm -r ") {
        return rule("rm -r <dir>");
    }
    if command.script.starts_with("(\n") && f.contains("openssl ") && f.ends_with(')') {
        return rule("( ... openssl ... )");
    }
    if f.starts_with("sudo install ") {
        return rule("sudo install ...");
    }
    if words.first() == Some(&"kubectl") && !piped {
        if words.contains(&"logs") {
            return rule("kubectl ... logs ...");
        }
        if words.contains(&"port-forward") && f.ends_with(" &") {
            return rule("kubectl ... port-forward ... &");
        }
    }
    if f.starts_with("curl -s ") && f.contains("localhost:") && piped {
        return rule("curl -s [http://]localhost:<forwarded port>/metrics | grep ...");
    }
    if f.starts_with("for ") && f.contains("kubectl ") && f.ends_with("done") {
        return rule("for ... kubectl ... done");
    }
    if words.first() == Some(&"kubectl") && piped {
        return rule("kubectl ... | ...");
    }
    if words.first() == Some(&"kubectl")
        && ["get", "auth", "set", "label", "rollout", "delete"]
            .iter()
            .any(|verb| words.contains(verb))
    {
        return rule("kubectl [-n <ns>] get|auth|set|label|rollout|delete ...");
    }
    if words.first() == Some(&"volume-health-webhook") && !piped {
        return rule("volume-health-webhook ...");
    }
    if words.first() == Some(&"csi-globalmount-doctor") && !piped {
        return rule("csi-globalmount-doctor ...");
    }
    if f.starts_with("helm install ") {
        return rule("helm install ...");
    }
    if f.starts_with("curl ") && f.contains(" https://localhost:8443/") {
        return rule("curl ... https://localhost:8443/...");
    }
    if f.starts_with("curl http://localhost:8081/") && words.len() == 2 {
        return rule("curl http://localhost:8081/...");
    }
    None
}

/// Every command with its class; panics naming the page and line of each command no rule
/// covers.
pub(crate) fn classified() -> Vec<(DocCommand, Class)> {
    let mut unclassified = Vec::new();
    let mut out = Vec::new();
    for command in commands() {
        match classify(&command) {
            Some((class, _)) => out.push((command, class)),
            None => unclassified.push(format!("{}: `{}`", command.at(), command.flat)),
        }
    }
    assert!(
        unclassified.is_empty(),
        "no rule of tests/tests/docs_support/mod.rs says how to run these commands of the \
         docs; add one (and its test) or change the command:\n{}",
        unclassified.join("\n")
    );
    out
}

/// A scratch checkout: the parts of the repository the commands read, copied, so that the
/// commands run from its root as the docs say, and whatever they write stays out of the
/// repository.
pub(crate) struct Sandbox {
    pub(crate) dir: tempfile::TempDir,
    /// Where the certificate subshells move the CA key.
    pub(crate) safe: PathBuf,
}

impl Sandbox {
    pub(crate) fn new() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("volume-health-docs")
            .tempdir()
            .expect("a temporary directory");
        let root = repository();
        for part in ["manifests", "charts", "examples"] {
            let to = dir.path().join(part);
            fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
            let status = Command::new("cp")
                .arg("-R")
                .arg(root.join(part))
                .arg(&to)
                .status()
                .expect("cp");
            assert!(status.success(), "copying {part}");
        }
        let safe = dir.path().join("off-the-checkout");
        fs::create_dir(&safe).expect("mkdir");
        Sandbox { dir, safe }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `script` with bash from the sandbox's root, with `set -o pipefail`.
    pub(crate) fn bash(&self, script: &str, env: &[(&str, &str)]) -> Output {
        self.bash_in(self.path(), script, env)
    }

    /// Runs `script` with bash from `dir`, with `set -o pipefail`.
    pub(crate) fn bash_in(&self, dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("set -o pipefail\n{script}"))
            .current_dir(dir)
            .env("SOMEWHERE_SAFE", &self.safe);
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().expect("bash")
    }

    /// The temporary root of the control plane node the NodeInstall commands install into.
    pub(crate) fn node_root(&self) -> PathBuf {
        self.path().join("node-root")
    }

    /// The directory on that node the docs copy `volume-health-authz/` and `manifests/authz/`
    /// to, where the commands of a block with a NodeInstall run.
    pub(crate) fn node_home(&self) -> PathBuf {
        self.node_root().join("home")
    }

    /// Runs every Shell and NodeInstall command, in page order, as an operator following the
    /// docs would before the commands that use what they make; subshells also without
    /// SOMEWHERE_SAFE first. Returns the commands run.
    pub(crate) fn run_setup(&self, all: &[(DocCommand, Class)]) -> Vec<DocCommand> {
        let mut ran = Vec::new();
        // A kubeadm node has the static pod directory already.
        fs::create_dir_all(self.node_root().join("etc/kubernetes/manifests")).expect("mkdir");
        let on_node: Vec<(&str, usize)> = all
            .iter()
            .filter(|(_, class)| *class == Class::NodeInstall)
            .map(|(c, _)| (c.page.as_str(), c.block))
            .collect();
        for (command, class) in all {
            if *class == Class::NodeInstall {
                if !self.node_home().exists() {
                    // `scp -r volume-health-authz manifests/authz node:`
                    fs::create_dir_all(self.node_home()).expect("mkdir");
                    let out = self.bash(
                        &format!(
                            "cp -R volume-health-authz manifests/authz {}/",
                            self.node_home().display()
                        ),
                        &[],
                    );
                    assert!(
                        out.status.success(),
                        "{}: nothing to copy to the node",
                        command.at()
                    );
                }
                self.node_install(command);
                ran.push(command.clone());
                continue;
            }
            if *class != Class::Shell {
                continue;
            }
            let dir = if on_node.contains(&(command.page.as_str(), command.block)) {
                self.node_home()
            } else {
                self.path().to_path_buf()
            };
            if command.script.starts_with("(\n") {
                let before = listing(self.path());
                let out = self.bash(&command.script, &[("SOMEWHERE_SAFE", "")]);
                assert!(
                    !out.status.success(),
                    "{}: the subshell succeeds without SOMEWHERE_SAFE",
                    command.at()
                );
                assert_eq!(
                    before,
                    listing(self.path()),
                    "{}: without SOMEWHERE_SAFE the subshell made files",
                    command.at()
                );
            }
            let out = self.bash_in(&dir, &command.script, &[]);
            assert!(
                out.status.success(),
                "{}: `{}` failed: {}",
                command.at(),
                command.flat,
                String::from_utf8_lossy(&out.stderr)
            );
            ran.push(command.clone());
        }
        ran
    }

    /// Runs a `sudo install` command under `node_root()`, without sudo (and without `-o`/`-g`
    /// when not root), and checks that it installed each file with its mode.
    fn node_install(&self, command: &DocCommand) {
        let root = self.node_root();
        let script = command.script.replace("sudo install ", "install ").replace(
            " /etc/kubernetes/",
            &format!(" {}/etc/kubernetes/", root.display()),
        );
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
        let shim = if as_root {
            ""
        } else {
            // Only root gives files away; the modes are still checked.
            "install() { local a=(); while [ $# -gt 0 ]; do case $1 in -o|-g) shift 2;; \
             *) a+=(\"$1\"); shift;; esac; done; command install \"${a[@]}\"; }\n"
        };
        let out = self.bash_in(&self.node_home(), &format!("{shim}{script}"), &[]);
        assert!(
            out.status.success(),
            "{}: `{}` failed: {}",
            command.at(),
            command.flat,
            String::from_utf8_lossy(&out.stderr)
        );
        let words: Vec<&str> = command.flat.split_whitespace().skip(2).collect();
        let (mut mode, mut owner, mut directories, mut paths) = (None, None, false, Vec::new());
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                "-m" => mode = Some(u32::from_str_radix(words[i + 1], 8).expect("octal mode")),
                "-o" => owner = Some(words[i + 1]),
                "-g" => {}
                "-d" => {
                    directories = true;
                    i += 1;
                    continue;
                }
                path => {
                    paths.push(path);
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        let mode = mode.expect("install -m");
        let installed: Vec<PathBuf> = if directories {
            paths.iter().map(|p| root.join(&p[1..])).collect()
        } else {
            let (dest, sources) = paths.split_last().expect("sources and a directory");
            sources
                .iter()
                .map(|s| {
                    root.join(&dest[1..])
                        .join(Path::new(s).file_name().expect("a file"))
                })
                .collect()
        };
        for path in installed {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let meta = fs::metadata(&path).unwrap_or_else(|e| {
                panic!("{}: {} not installed: {e}", command.at(), path.display())
            });
            assert_eq!(
                meta.permissions().mode() & 0o7777,
                mode,
                "{}: mode of {}",
                command.at(),
                path.display()
            );
            if let (true, Some(owner)) = (as_root, owner) {
                let uid = if owner == "root" {
                    0
                } else {
                    owner.parse().expect("a UID")
                };
                assert_eq!(
                    meta.uid(),
                    uid,
                    "{}: owner of {}",
                    command.at(),
                    path.display()
                );
            }
        }
    }
}

/// Every path under `dir`, sorted.
pub(crate) fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() && !path.is_symlink() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The objects of a YAML stream.
pub(crate) fn objects(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The argument of a command after `flag`.
pub(crate) fn after<'a>(command: &'a DocCommand, flag: &str) -> &'a str {
    let words: Vec<&str> = command.flat.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| *w == flag)
        .unwrap_or_else(|| panic!("{}: no {flag}", command.at()));
    words[at + 1]
}
