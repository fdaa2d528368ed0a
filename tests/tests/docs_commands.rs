//! The commands of the README and `docs/` that need a cluster, the server or doctor binary, or
//! helm, run as the docs give them, in page order, from a scratch checkout: kubectl against a
//! real kube-apiserver v1.37.2 (authorizing with the shipped AuthorizationConfiguration, the
//! project's authorizer the release binary), the release binaries on PATH, `helm template` with
//! the pinned helm, `curl` against the release binary started with `make run`'s flags. The
//! rules are in `docs_support`; `docs.rs` runs the others and fails on a command no rule
//! covers. Slow, so ignored: `make e2e` builds everything and runs it with `--ignored`.
//!
//! A bare apiserver has no controllers, no kubelet and no cert-manager or Prometheus operator:
//! - the CRDs the manifests use (cert-manager's Certificate and Issuer, the Prometheus
//!   operator's ServiceMonitor, PrometheusRule and Prometheus) are installed as stubs that
//!   accept any object, so `kubectl apply` stores them and the apiserver validates the rest;
//! - `rollout status` runs with `--watch=false` (no controller makes the new pods), and
//!   `rollout undo` with `--dry-run=server` over two ReplicaSets made as the Deployment
//!   controller would;
//! - deletions run with `--dry-run=server`, so the commands after them still find the objects;
//! - cert-manager's CA injector is played by a patch of the CA bundle;
//! - `kubectl logs` and `port-forward` need a kubelet: the object must exist, and the process
//!   they reach (the release binary, configured as that object configures it) runs locally;
//! - the namespace the kustomize install labeled loses its Pod Security labels before the
//!   `kubectl label` that follows `helm install --create-namespace` (whose namespace is bare).
//!
//! The doctor runs on the example node tree (`examples/node-tree`) as its host, given as the
//! DaemonSet gives it (`CSI_GLOBALMOUNT_HOST_PREFIX`, `CSI_GLOBALMOUNT_MOUNTINFO`), so that the
//! flags on the page still win.

// Test helpers unwrap: a panic here is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod docs_support;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use docs_support::{Class, DocCommand, Sandbox, after, classified, repository};
use serde_json::{Value, json};
use volume_health_tests::cluster::{
    Cluster, ClusterOptions, Identity, Role, WebhookServer, bin_dir, free_port, webhook_binary,
};
use volume_health_tests::phases::Phases;

/// Objects a bare apiserver lacks and the commands read: the CRDs of cert-manager and the
/// Prometheus operator as stubs, two nodes, and a pod, claim and CSINode for `check`.
fn setup_objects() -> String {
    let crd = |group: &str, kind: &str, plural: &str, scope: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": scope,
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}})
    };
    let mut items = vec![
        crd(
            "cert-manager.io",
            "Certificate",
            "certificates",
            "Namespaced",
        ),
        crd("cert-manager.io", "Issuer", "issuers", "Namespaced"),
        crd(
            "monitoring.coreos.com",
            "ServiceMonitor",
            "servicemonitors",
            "Namespaced",
        ),
        crd(
            "monitoring.coreos.com",
            "PrometheusRule",
            "prometheusrules",
            "Namespaced",
        ),
        crd(
            "monitoring.coreos.com",
            "Prometheus",
            "prometheuses",
            "Namespaced",
        ),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}),
    ];
    for node in ["node-a", "node-b"] {
        items.push(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}));
        items.push(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": node}, "spec": {"drivers": []}}));
    }
    items.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-1", "namespace": "shop"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}));
    items.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}]}}));
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// A process killed by its PID when dropped.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn output_text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until `url` answers curl.
fn wait_for(url: &str, extra: &[&str]) {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null"])
            .args(extra)
            .arg(url)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        assert!(Instant::now() < give_up, "{url} did not answer");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The flags `make run` gives `serve`, read from the Makefile's recipe.
fn make_run_flags() -> Vec<String> {
    let makefile = fs::read_to_string(repository().join("Makefile")).unwrap();
    let recipe = makefile.split("\nrun:\n").nth(1).expect("a run target");
    let recipe: String = recipe
        .lines()
        .take_while(|l| l.starts_with('\t'))
        .collect::<Vec<_>>()
        .join(" ")
        .replace('\\', " ");
    let serve = recipe
        .split(" -- serve ")
        .nth(1)
        .expect("`-- serve` in make run");
    serve
        .split_whitespace()
        .filter(|w| *w != "$(ARGS)")
        .map(|w| w.replace("$(DEV_CA)", "target/dev/ca.crt"))
        .collect()
}

/// The release binary run as `make run ARGS=...` runs it, on free ports, in a directory of its
/// own (each writes its CA to `target/dev/ca.crt` there).
struct MakeRun {
    _process: Background,
    secure: u16,
    health: u16,
    ca: PathBuf,
}

impl MakeRun {
    fn start(webhook: &Path, sandbox: &Sandbox, args: &str) -> MakeRun {
        let dir = sandbox.path().join(format!("make-run-{}", args.len()));
        fs::create_dir_all(dir.join("target/dev")).unwrap();
        let (secure, health) = (free_port().unwrap(), free_port().unwrap());
        let process = Background(
            Command::new(webhook)
                .arg("serve")
                .args(make_run_flags())
                .args(args.split_whitespace())
                .args(["--secure-port", &secure.to_string()])
                .args(["--health-port", &health.to_string()])
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for(&format!("http://localhost:{health}/readyz"), &[]);
        MakeRun {
            _process: process,
            secure,
            health,
            ca: dir.join("target/dev/ca.crt"),
        }
    }
}

/// `expected` (the output a page shows, `...` for what varies) matches `actual`: its pieces
/// between the `...` appear in it in order.
fn shown_output_matches(expected: &str, actual: &str) -> bool {
    let mut rest = actual;
    for piece in expected
        .split("...")
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

struct Runner<'a> {
    sandbox: &'a Sandbox,
    env: Vec<(String, OsString)>,
    doctor: PathBuf,
}

impl Runner<'_> {
    fn run(&self, script: &str) -> Output {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
            .collect();
        self.sandbox.bash(script, &env)
    }

    fn ok(&self, command: &DocCommand, script: &str) -> String {
        let out = self.run(script);
        assert!(
            out.status.success(),
            "{}: `{}` (run as `{script}`) failed:\n{}",
            command.at(),
            command.flat,
            output_text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn kubectl_json(&self, args: &str) -> Value {
        let out = self.run(&format!("kubectl {args} -o json"));
        assert!(
            out.status.success(),
            "kubectl {args}: {}",
            output_text(&out)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Makes two ReplicaSets of `deployment/volume-health-webhook` as its controller would (no
/// controller runs here), so that `rollout undo` finds a previous revision.
fn rollout_history(runner: &Runner) {
    let deployment = runner.kubectl_json("-n volume-health get deployment/volume-health-webhook");
    let mut list = Vec::new();
    for revision in ["1", "2"] {
        let hash = format!("rev{revision}");
        let mut template = deployment["spec"]["template"].clone();
        template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
        if revision == "1" {
            template["spec"]["containers"][0]["image"] =
                json!("ghcr.io/volume-health/volume-health-webhook:v0.1.0");
        }
        let mut selector = deployment["spec"]["selector"].clone();
        selector["matchLabels"]["pod-template-hash"] = json!(hash);
        list.push(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": format!("volume-health-webhook-{hash}"), "namespace": "volume-health",
                "labels": template["metadata"]["labels"],
                "annotations": {"deployment.kubernetes.io/revision": revision},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                    "name": "volume-health-webhook", "uid": deployment["metadata"]["uid"],
                    "controller": true}]},
            "spec": {"replicas": 0, "selector": selector, "template": template}}));
    }
    let file = runner.sandbox.path().join("replicasets.json");
    fs::write(
        &file,
        json!({"apiVersion": "v1", "kind": "List", "items": list}).to_string(),
    )
    .unwrap();
    let out = runner.run("kubectl apply -f replicasets.json");
    assert!(out.status.success(), "{}", output_text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts kube-apiserver and etcd, runs the release binaries and helm: `make e2e`"]
async fn every_command_runs_as_the_docs_give_it() {
    // Each command is a phase: one failing does not hide the next. They run blocking, so the
    // timeout cannot cut a command short.
    let mut phases = Phases::new("docs_commands", Duration::from_secs(300));
    let all = classified();
    let sandbox = Sandbox::new();
    let started = phases
        .phase("setup")
        .run(async {
            sandbox.run_setup(&all);

            // The release binaries and helm on PATH, as `cargo install` and a helm install put them.
            let webhook = webhook_binary().unwrap();
            let doctor = webhook.with_file_name("csi-globalmount-doctor");
            assert!(
                doctor.exists(),
                "{} is missing: `make release` builds it",
                doctor.display()
            );
            let helm = std::env::var_os("VOLUME_HEALTH_HELM")
                .map(PathBuf::from)
                .expect("VOLUME_HEALTH_HELM is not set: run `make e2e`");
            let path_dir = sandbox.path().join("bin");
            fs::create_dir(&path_dir).unwrap();
            for (name, target) in [
                ("volume-health-webhook", &webhook),
                ("csi-globalmount-doctor", &doctor),
                ("helm", &helm),
            ] {
                std::os::unix::fs::symlink(target, path_dir.join(name)).unwrap();
            }

            // The apiserver, authorizing with the shipped AuthorizationConfiguration.
            let authorizer_port = free_port().unwrap();
            let cluster = Cluster::start(
                &bin_dir().unwrap(),
                ClusterOptions {
                    in_tree_gate: true,
                    authorizer: Some(([127, 0, 0, 1], authorizer_port).into()),
                },
            )
            .await
            .unwrap();
            let mut authorizer =
                WebhookServer::new(Role::Authorizer, webhook.clone(), &cluster, authorizer_port).unwrap();
            authorizer.start(&[]).await.unwrap();
            cluster.client(Identity::Admin).await.unwrap();
            let kubeconfig = cluster.dir().join("kubeconfig-admin.json");

            // `make run`'s server, and one for each `make run ARGS='...'` the prose asks for.
            let mut servers: BTreeMap<String, MakeRun> = BTreeMap::new();
            servers.insert(String::new(), MakeRun::start(&webhook, &sandbox, ""));
            let health = servers[""].health;

            let mut path = OsString::from(&path_dir);
            path.push(":");
            path.push(std::env::var_os("PATH").unwrap_or_default());
            let runner = Runner {
                sandbox: &sandbox,
                env: vec![
                    ("PATH".to_owned(), path),
                    ("KUBECONFIG".to_owned(), kubeconfig.into_os_string()),
                    ("NODE".to_owned(), "node-a".into()),
                ],
                doctor: doctor.clone(),
            };
            fs::write(sandbox.path().join("setup.json"), setup_objects()).unwrap();
            let out = runner.run(
                "kubectl apply -f setup.json && kubectl wait --for=condition=Established crd --all --timeout=60s",
            );
            assert!(out.status.success(), "setup: {}", output_text(&out));
            // What `check` reads in CI: the manifests and test fixtures a repository ships (this
            // project's install, a claim, a pod whose volume health is valid).
            for dir in ["deploy", "tests/fixtures"] {
                fs::create_dir_all(sandbox.path().join(dir)).unwrap();
            }
            fs::copy(
                sandbox
                    .path()
                    .join("manifests/install/cert-manager-warn.yaml"),
                sandbox.path().join("deploy/install.yaml"),
            )
            .unwrap();
            fs::write(
                sandbox.path().join("deploy/claim.yaml"),
                "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: shop\n\
                 spec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n",
            )
            .unwrap();
            fs::write(
                sandbox.path().join("tests/fixtures/pod.json"),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "shop"},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
                    "status": {"volumeHealth": [{"name": "data", "healthConditions": [
                        {"status": "Degraded", "reason": "DiskSlow", "message": "slow"}]}]}})
                .to_string(),
            )
            .unwrap();
            anyhow::Ok((cluster, authorizer, servers, health, runner, webhook))
        })
        .await;
    // The apiserver and the authorizer serve until the end.
    let Some((_cluster, _authorizer, mut servers, health, runner, webhook)) = started else {
        return phases.finish();
    };

    let mut exercised: BTreeMap<Class, usize> = BTreeMap::new();
    for (command, class) in &all {
        if matches!(
            class,
            Class::Make | Class::Cargo | Class::Shell | Class::NodeInstall
        ) {
            continue;
        }
        let shown: String = command.flat.chars().take(60).collect();
        phases
            .phase(&format!("{} {shown}", command.at()))
            .run(async {
                let f = command.flat.as_str();
                match class {
                    // Run by docs.rs, and in setup: passed over above.
                    Class::Make | Class::Cargo | Class::Shell | Class::NodeInstall => {
                        unreachable!()
                    }
                    Class::Kustomize => {
                        let dir = f.split_whitespace().last().unwrap();
                        let script = if f.starts_with("kubectl delete -k ") {
                            format!("kubectl delete --dry-run=server -k {dir}")
                        } else if f.starts_with("kubectl apply -k ") {
                            f.to_owned()
                        } else {
                            format!("{f} | kubectl apply --dry-run=server -f -")
                        };
                        let printed = runner.ok(command, &script);
                        assert!(!printed.is_empty(), "{}: nothing applied", command.at());
                    }
                    Class::ApplyFile => {
                        runner.ok(command, f);
                    }
                    Class::Kubectl => kubectl(&runner, command),
                    Class::ClusterScript => cluster_script(&runner, command),
                    Class::Binary => binary(&runner, command),
                    Class::Helm => {
                        let args = f.strip_prefix("helm install ").unwrap();
                        let printed = runner.ok(
                            command,
                            &format!("helm template {args} | kubectl apply --dry-run=server -f -"),
                        );
                        assert!(
                            printed.contains("deployment.apps/volume-health-webhook"),
                            "{printed}"
                        );
                    }
                    Class::Curl => {
                        // The paragraph just above the block says how the server runs.
                        let args = command
                            .intro
                            .trim_end()
                            .rsplit("\n\n")
                            .next()
                            .unwrap_or_default()
                            .split("make run ARGS='")
                            .nth(1)
                            .and_then(|rest| rest.split('\'').next())
                            .unwrap_or_default()
                            .to_owned();
                        let server = servers
                            .entry(args.clone())
                            .or_insert_with(|| MakeRun::start(&webhook, &sandbox, &args));
                        let script = f
                            .replace("localhost:8443", &format!("localhost:{}", server.secure))
                            .replace("localhost:8081", &format!("localhost:{}", server.health))
                            .replace(
                                "--cacert target/dev/ca.crt",
                                &format!("--cacert {}", server.ca.display()),
                            );
                        let printed = runner.ok(
                            command,
                            &format!("curl -sS --fail-with-body {}", &script[5..]),
                        );
                        if command.output.is_empty() {
                            assert!(!printed.is_empty(), "{}: no output", command.at());
                        } else {
                            let shown: String = command.output.iter().map(|l| l.trim()).collect();
                            assert!(
                                shown_output_matches(&shown, &printed),
                                "{}: the page shows\n{shown}\nthe server answered\n{printed}",
                                command.at()
                            );
                        }
                    }
                    Class::Kubelet => kubelet(&runner, command, health),
                }
            })
            .await;
        *exercised.entry(*class).or_default() += 1;
    }
    drop(servers);
    phases
        .phase("every class of command exercised")
        .run(async {
            for class in [
                Class::Kustomize,
                Class::ApplyFile,
                Class::Kubectl,
                Class::ClusterScript,
                Class::Binary,
                Class::Helm,
                Class::Curl,
                Class::Kubelet,
            ] {
                let expected = all.iter().filter(|(_, c)| *c == class).count();
                assert_eq!(
                    exercised.get(&class).copied().unwrap_or(0),
                    expected,
                    "{class:?}"
                );
                assert!(expected > 0, "no command of class {class:?}");
            }
        })
        .await;
    phases.finish();
}

/// A kubectl command against the apiserver.
fn kubectl(runner: &Runner, command: &DocCommand) {
    let f = command.flat.as_str();
    if f.contains(" auth can-i ") {
        // `no` exits 1, and says why after ` - `: the answer is what the page shows.
        let out = runner.run(f);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer = stdout.split_whitespace().next().unwrap_or_default();
        assert_eq!(
            Some(answer),
            command.note.as_deref(),
            "{}: `{f}`\n{}",
            command.at(),
            output_text(&out)
        );
        return;
    }
    if f.contains(" rollout status ") {
        let printed = runner.ok(command, &format!("{f} --watch=false"));
        assert!(
            printed.contains("deployment"),
            "{}: {printed}",
            command.at()
        );
        return;
    }
    if f.contains(" rollout undo ") {
        rollout_history(runner);
        let printed = runner.ok(command, &format!("{f} --dry-run=server"));
        assert!(
            printed.contains("rolled back"),
            "{}: {printed}",
            command.at()
        );
        return;
    }
    if f.starts_with("kubectl delete ") {
        let printed = runner.ok(command, &format!("{f} --dry-run=server"));
        assert!(printed.contains("deleted"), "{}: {printed}", command.at());
        return;
    }
    if f.contains(" get pods -l ") {
        // No controller makes the Deployment's pods: make one from its template.
        let deployment =
            runner.kubectl_json("-n volume-health get deployment/volume-health-webhook");
        let template = &deployment["spec"]["template"];
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "volume-health-webhook-0", "namespace": "volume-health",
                "labels": template["metadata"]["labels"]},
            "spec": template["spec"]});
        fs::write(runner.sandbox.path().join("pod.json"), pod.to_string()).unwrap();
        runner.ok(command, "kubectl apply -f pod.json");
        let printed = runner.ok(command, f);
        let image = template["spec"]["containers"][0]["image"].as_str().unwrap();
        assert_eq!(
            printed,
            format!("volume-health-webhook-0 {image}\n"),
            "{}",
            command.at()
        );
        return;
    }
    if f.contains(" get prometheus ") {
        let prometheus = json!({"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": "k8s", "namespace": "monitoring"},
            "spec": {"serviceMonitorSelector": {"matchLabels": {"release": "prometheus"}},
                "ruleSelector": {"matchLabels": {"release": "prometheus"}}}});
        fs::write(
            runner.sandbox.path().join("prometheus.json"),
            prometheus.to_string(),
        )
        .unwrap();
        runner.ok(command, "kubectl apply -f prometheus.json");
        let printed = runner.ok(command, f);
        assert!(
            printed.starts_with("monitoring/k8s: {\"matchLabels\""),
            "{}: {printed}",
            command.at()
        );
        return;
    }
    if f.starts_with("kubectl label namespace volume-health ") {
        // It follows `helm install --create-namespace`, whose namespace is bare; the one here
        // is the kustomize install's, which has these labels already.
        runner.ok(
            command,
            "kubectl label namespace volume-health pod-security.kubernetes.io/enforce- \
             pod-security.kubernetes.io/enforce-version-",
        );
    }
    let printed = runner.ok(command, f);
    if f.contains(" get jobs") {
        // One Job per node, from the loop above it.
        let jobs = printed.matches("csi-globalmount-doctor-").count();
        assert_eq!(jobs, 2, "{}: {printed}", command.at());
    }
    if let Some(file) = f.split(" > ").nth(1) {
        let saved: Value =
            serde_json::from_str(&fs::read_to_string(runner.sandbox.path().join(file)).unwrap())
                .unwrap_or_else(|e| panic!("{}: {file}: {e}", command.at()));
        assert!(saved.get("kind").is_some(), "{}: {file}", command.at());
    }
}

/// A pipe or loop of kubectl and the binaries.
fn cluster_script(runner: &Runner, command: &DocCommand) {
    let f = command.flat.as_str();
    if f.contains("caBundle") {
        // cert-manager's CA injector: the CA of the certificates made for the provided-certs
        // overlay stands in for the one cert-manager would issue.
        let ca = fs::read(
            runner
                .sandbox
                .path()
                .join("manifests/overlays/provided-certs/certs/ca.crt"),
        )
        .unwrap();
        use base64::Engine;
        let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
            "value": base64::engine::general_purpose::STANDARD.encode(ca)}]);
        runner.ok(
            command,
            &format!(
                "kubectl patch validatingwebhookconfiguration volume-health --type=json -p '{patch}'"
            ),
        );
        let printed = runner.ok(command, &command.script);
        assert!(
            printed.starts_with("subject=") && printed.contains("volume-health-webhook-ca"),
            "{}: {printed}",
            command.at()
        );
        return;
    }
    let printed = runner.ok(command, &command.script);
    if f.contains("volume-health-webhook check") {
        assert!(printed.contains("checked "), "{}: {printed}", command.at());
    }
    if f.starts_with("for node in") {
        let jobs = runner.kubectl_json("-n csi-globalmount-doctor get jobs");
        for node in ["node-a", "node-b"] {
            let found = jobs["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|job| job.to_string().contains(&format!("\"{node}\"")));
            assert!(found, "{}: no Job for {node}", command.at());
        }
    }
}

/// The release binaries on the repository's files.
fn binary(runner: &Runner, command: &DocCommand) {
    let f = command.flat.as_str();
    // The doctor runs on a node: the example node tree is this one's host, given as the
    // DaemonSet gives it, so that the flags on the page still win.
    let script = if f.starts_with("csi-globalmount-doctor ") {
        let mut host = "examples/node-tree".to_owned();
        if f.contains(" --kubelet-root ") {
            // A node whose kubelet root is elsewhere (k0s): the example tree, moved there.
            let root = after(command, "--kubelet-root");
            host = format!("node{}", root.replace('/', "-"));
            runner.ok(
                command,
                &format!(
                    "cp -R examples/node-tree {host} && mkdir -p {host}{parent} \
                     && mv {host}/var/lib/kubelet {host}{root} \
                     && sed -i 's#/var/lib/kubelet#{root}#g' {host}/mountinfo",
                    parent = Path::new(root).parent().unwrap().display()
                ),
            );
        }
        format!(
            "CSI_GLOBALMOUNT_HOST_PREFIX={host} CSI_GLOBALMOUNT_MOUNTINFO={host}/mountinfo {}",
            command.script
        )
    } else {
        command.script.clone()
    };
    let out = runner.run(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if f.ends_with(" --version") {
        assert!(
            out.status.success(),
            "{}: {}",
            command.at(),
            output_text(&out)
        );
        assert_eq!(
            Some(stdout.trim()),
            command.note.as_deref(),
            "{}: the version the page shows",
            command.at()
        );
        return;
    }
    let code = out.status.code();
    if f.contains(" verify") {
        // The install here has no pods behind its Service: verify runs its probes and says
        // which entries failed (1), or, where nothing is installed yet, that nothing is.
        assert!(
            matches!(code, Some(0 | 1 | 3)),
            "{}: `{f}` failed:\n{}",
            command.at(),
            output_text(&out)
        );
        assert!(stdout.contains("verify: "), "{}: {stdout}", command.at());
        return;
    }
    // The doctor exits 0 clean, 1 with findings, 2 on an error; `check` likewise.
    assert!(
        matches!(code, Some(0 | 1)),
        "{}: `{f}` failed:\n{}",
        command.at(),
        output_text(&out)
    );
    if f.contains("--host-prefix examples/node-tree") {
        // The page says it exits 1 with one volume of each of these classes.
        assert_eq!(code, Some(1), "{}", command.at());
        for class in ["in_use", "orphaned_staged", "pod_data_unreadable"] {
            assert!(
                stdout.contains(class),
                "{}: no {class}:\n{stdout}",
                command.at()
            );
        }
    }
    if f.contains(" -o json ") {
        let file = f.split(" > ").nth(1).unwrap();
        let report: Value =
            serde_json::from_str(&fs::read_to_string(runner.sandbox.path().join(file)).unwrap())
                .unwrap();
        assert!(report.is_object(), "{}: {report}", command.at());
    } else if f.contains(" check ") {
        assert!(stdout.contains("checked "), "{}: {stdout}", command.at());
    }
    if f.contains(" check ") {
        // What it reads here is valid: the install, a claim, a pod with valid health.
        assert_eq!(code, Some(0), "{}: {}", command.at(), output_text(&out));
    }
}

/// Commands that reach a pod through its kubelet.
fn kubelet(runner: &Runner, command: &DocCommand, health: u16) {
    let f = command.flat.as_str();
    if f.contains(" logs ") {
        // The Job exists under the name the loop gave it.
        let node = "node-a";
        let suffix = runner.ok(
            command,
            &format!("printf %s {node} | sha256sum | cut -c1-10"),
        );
        let object = f
            .split_whitespace()
            .last()
            .unwrap()
            .replace("<suffix>", suffix.trim());
        let namespace = after(command, "-n");
        runner.ok(command, &format!("kubectl -n {namespace} get {object}"));
        return;
    }
    if f.contains(" port-forward ") {
        let words: Vec<&str> = f.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "port-forward").unwrap();
        let namespace = after(command, "-n");
        // The object exists and declares the forwarded port.
        let object = runner.kubectl_json(&format!("-n {namespace} get {}", words[at + 1]));
        let port = words[at + 2];
        assert!(
            object["spec"]["template"]["spec"]["containers"]
                .to_string()
                .contains(&format!("\"containerPort\":{port}")),
            "{}: {} does not serve port {port}",
            command.at(),
            words[at + 1]
        );
        return;
    }
    // `curl -s localhost:<port>/metrics | grep ...`: the process behind the forwarded port,
    // here.
    let port: u16 = f
        .split("localhost:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{}: which port?", command.at()));
    let (local, _child) = match port {
        8080 => (health, None),
        9809 => {
            let daemonset = runner
                .kubectl_json("-n csi-globalmount-doctor get daemonset/csi-globalmount-doctor");
            let container = &daemonset["spec"]["template"]["spec"]["containers"][0];
            let local = free_port().unwrap();
            let mut doctor = Command::new(&runner.doctor);
            // The DaemonSet's configuration, the example node tree for the host's.
            for env in container["env"].as_array().unwrap() {
                if let Some(value) = env["value"].as_str() {
                    doctor.env(env["name"].as_str().unwrap(), value);
                }
            }
            doctor
                .env("CSI_GLOBALMOUNT_HOST_PREFIX", "examples/node-tree")
                .env("CSI_GLOBALMOUNT_MOUNTINFO", "examples/node-tree/mountinfo")
                .env("CSI_GLOBALMOUNT_NODE_NAME", "node-a")
                .env("CSI_GLOBALMOUNT_METRICS_ADDR", format!("127.0.0.1:{local}"))
                .current_dir(runner.sandbox.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let child = Background(doctor.spawn().unwrap());
            wait_for(&format!("http://localhost:{local}/healthz"), &[]);
            (local, Some(child))
        }
        other => panic!("{}: no process behind port {other}", command.at()),
    };
    let script = command
        .script
        .replace(&format!("localhost:{port}"), &format!("localhost:{local}"));
    let printed = runner.ok(command, &script);
    assert!(
        !printed.trim().is_empty(),
        "{}: grep found nothing",
        command.at()
    );
}
