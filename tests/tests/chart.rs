//! The Helm chart `charts/volume-health` against the kustomize install it mirrors, with a real
//! helm (`make chart` builds the pinned one from `tests/e2e/tools/helm` and passes it in
//! `VOLUME_HEALTH_HELM`; these tests are ignored by `cargo test` and `make test`, which need
//! no Go).
//!
//! Each value set is rendered with `helm template` and compared, object by object, with
//! `kubectl kustomize` of the overlay or components that do the same, apart from the labels
//! only Helm sets. So the chart and the manifests cannot drift: a change to one fails here
//! until the other follows.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};
use volume_health_webhooks::config::Cli;

/// Labels Helm adds to the chart's objects and the kustomize install does not carry (or
/// carries on some objects only), left out of the comparison.
const HELM_LABELS: &[&str] = &[
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
];

/// The namespace the kustomize install uses; the chart takes the release's.
const NAMESPACE: &str = "volume-health";

/// Stand-ins for the operator's PEM files.
const PEM_FILES: &[(&str, &str)] = volume_health_tests::PEM_STAND_INS;

use volume_health_tests::repository;

fn chart() -> PathBuf {
    repository().join("charts/volume-health")
}

fn helm() -> Command {
    let helm = std::env::var_os("VOLUME_HEALTH_HELM")
        .expect("VOLUME_HEALTH_HELM must name the helm binary; `make chart` builds and sets it");
    Command::new(helm)
}

fn run(mut command: Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// `helm template` of the chart in the namespace `volume-health` with `args` added.
fn template(args: &[&str]) -> Vec<Value> {
    let mut command = helm();
    command
        .arg("template")
        .arg("volume-health")
        .arg(chart())
        .args(["--namespace", NAMESPACE, "--kube-version", "1.37.0"])
        .args(args);
    documents(&run(command))
}

/// Whether the server starts with `--pvc-health-writers=<list>`: its flags parse.
fn server_takes_writers(list: &str) -> Result<(), String> {
    let flag = format!("--pvc-health-writers={list}");
    Cli::try_parse_from(["volume-health-webhook", "serve", &flag])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether `helm template` refuses `args`, with a message containing `message`.
fn template_fails(args: &[&str], message: &str) {
    let mut command = helm();
    command
        .arg("template")
        .arg("volume-health")
        .arg(chart())
        .args(["--namespace", NAMESPACE, "--kube-version", "1.37.0"])
        .args(args);
    let output = command.output().expect("helm runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains(message),
        "{args:?}: expected a failure with {message:?}, got {stderr}"
    );
}

/// `kubectl kustomize` of an overlay written into a copy of `manifests/` (with stand-in PEM
/// files in `overlays/provided-certs/certs`), as an operator's own overlay would be.
fn kustomize(kustomization: &str) -> Vec<Value> {
    kustomize_with(kustomization, &[])
}

/// As [`kustomize`], with `files` (name, content) beside the overlay's kustomization.
fn kustomize_with(kustomization: &str, files: &[(&str, &str)]) -> Vec<Value> {
    let scratch = tempfile::Builder::new()
        .prefix("chart-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch directory");
    let root = scratch.path().join("manifests");
    copy_tree(&repository().join("manifests"), &root);
    let certs = root.join("overlays/provided-certs/certs");
    fs::create_dir_all(&certs).expect("certs directory");
    for (file, content) in PEM_FILES {
        fs::write(certs.join(file), content).expect("stand-in file");
    }
    let mine = root.join("overlays/operator");
    fs::create_dir_all(&mine).expect("overlay directory");
    fs::write(mine.join("kustomization.yaml"), kustomization).expect("kustomization");
    for (name, content) in files {
        fs::write(mine.join(name), content).expect("overlay file");
    }
    let mut command = Command::new("kubectl");
    command.arg("kustomize").arg(&mine);
    documents(&run(command))
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("directory");
    for entry in fs::read_dir(from).expect("readable directory") {
        let entry = entry.expect("directory entry");
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            if entry.file_name() != "certs" {
                copy_tree(&source, &target);
            }
        } else {
            fs::copy(&source, &target).expect("copy");
        }
    }
}

/// The objects by kind, namespace and name, without Helm's labels (and without an empty
/// `labels` left behind). Two spellings of one value are made one: containers' variables in
/// name order (none refers to another, so their order means nothing), and a `caBundle` or a
/// Secret's data without the line breaks kustomize puts into base64 (which the apiserver
/// skips).
fn comparable(objects: &[Value]) -> BTreeMap<String, Value> {
    objects
        .iter()
        .map(|object| {
            let mut object = object.clone();
            if let Some(containers) = object
                .pointer_mut("/spec/template/spec/containers")
                .and_then(Value::as_array_mut)
            {
                for container in containers {
                    if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                        env.sort_by_key(|v| v["name"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
            if object["kind"] == "Secret"
                && let Some(data) = object.get_mut("data").and_then(Value::as_object_mut)
            {
                for value in data.values_mut() {
                    if let Value::String(text) = value {
                        text.retain(|c| c != '\n');
                    }
                }
            }
            if let Some(webhooks) = object.get_mut("webhooks").and_then(Value::as_array_mut) {
                for webhook in webhooks {
                    if let Some(Value::String(bundle)) =
                        webhook.pointer_mut("/clientConfig/caBundle")
                    {
                        bundle.retain(|c| c != '\n');
                    }
                }
            }
            let metadata = object["metadata"]
                .as_object_mut()
                .expect("every object has metadata");
            if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
                for label in HELM_LABELS {
                    labels.remove(*label);
                }
                if labels.is_empty() {
                    metadata.remove("labels");
                }
            }
            let key = format!(
                "{}/{}/{}",
                object["kind"].as_str().expect("kind"),
                object["metadata"]["namespace"].as_str().unwrap_or(""),
                object["metadata"]["name"].as_str().expect("name")
            );
            (key, object)
        })
        .collect()
}

/// The first place where two values differ, as a JSON pointer with both sides.
fn first_difference(path: &str, chart: &Value, kustomize: &Value) -> Option<String> {
    match (chart, kustomize) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|key| {
                let (x, y) = (&a.get(key), &b.get(key));
                match (x, y) {
                    (Some(x), Some(y)) => first_difference(&format!("{path}/{key}"), x, y),
                    _ => Some(format!("{path}/{key}: chart {x:?}, kustomize {y:?}")),
                }
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(&format!("{path}/{i}"), x, y)),
        _ => (chart != kustomize).then(|| format!("{path}: chart {chart}, kustomize {kustomize}")),
    }
}

/// The chart's render equals the kustomize one, object for object; a difference is shown
/// at the first field that differs.
fn assert_same(what: &str, chart: &[Value], kustomize: &[Value]) {
    let (chart, kustomize) = (comparable(chart), comparable(kustomize));
    let keys = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&chart), keys(&kustomize), "{what}: the objects differ");
    for (key, object) in &chart {
        if let Some(difference) = first_difference("", object, &kustomize[key]) {
            panic!("{what}: {key} differs at {difference}");
        }
    }
}

fn without_namespace(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .filter(|o| o["kind"] != "Namespace" || o["metadata"]["name"] != NAMESPACE)
        .collect()
}

fn overlay(resources: &str, components: &[&str], extra: &str) -> String {
    let mut text = format!("resources:\n  - ../{resources}\n");
    if !components.is_empty() {
        text.push_str("components:\n");
        for component in components {
            text.push_str(&format!("  - ../../components/{component}\n"));
        }
    }
    text.push_str(extra);
    text
}

fn set_files(dir: &Path) -> Vec<String> {
    let mut args = vec![
        "--set".to_owned(),
        "certificates.source=provided".to_owned(),
    ];
    for (file, key) in [
        ("tls.crt", "tlsCrt"),
        ("tls.key", "tlsKey"),
        ("ca.crt", "caCrt"),
    ] {
        args.push("--set-file".to_owned());
        args.push(format!(
            "certificates.provided.{key}={}",
            dir.join(file).display()
        ));
    }
    args
}

fn webhook_container(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0"))
        .expect("the Deployment's container")
}

#[test]
#[ignore = "needs helm: make chart"]
fn the_chart_lints_with_every_certificate_source() {
    let pem = tempfile::tempdir().expect("scratch directory");
    for (file, content) in PEM_FILES {
        fs::write(pem.path().join(file), content).expect("stand-in file");
    }
    let provided = set_files(pem.path());
    let value_sets: Vec<Vec<String>> = vec![
        vec![],
        provided,
        vec![
            "--set".into(),
            "certificates.source=existingSecret".into(),
            "--set".into(),
            "certificates.existingSecret.caCrt=CA".into(),
        ],
        vec![
            "--set".into(),
            "monitoring.enabled=true,networkPolicy.enabled=true,doctor.enabled=true,namespace.create=true,repair.enabled=false".into(),
        ],
    ];
    for values in value_sets {
        let mut command = helm();
        command
            .args(["lint", "--strict", "--namespace", NAMESPACE])
            .arg(chart())
            .args(&values);
        run(command);
    }
}

/// The components the chart renders by default on top of an overlay.
const DEFAULT_COMPONENTS: &[&str] = &["network-policy"];

#[test]
#[ignore = "needs helm: make chart"]
fn the_default_render_is_the_cert_manager_install() {
    let kustomized = kustomize(&overlay("cert-manager", DEFAULT_COMPONENTS, ""));
    assert_same(
        "default values",
        &template(&[]),
        &without_namespace(kustomized.clone()),
    );
    assert_same(
        "namespace.create=true",
        &template(&["--set", "namespace.create=true"]),
        &kustomized,
    );
}

#[test]
#[ignore = "needs helm: make chart"]
fn warn_is_the_warn_overlay() {
    for (chart_args, overlay_name) in [
        (vec!["--set", "enforcementAction=warn"], "cert-manager-warn"),
        (vec![], "cert-manager"),
    ] {
        assert_same(
            overlay_name,
            &template(&chart_args),
            &without_namespace(kustomize(&overlay(overlay_name, DEFAULT_COMPONENTS, ""))),
        );
    }
}

#[test]
#[ignore = "needs helm: make chart"]
fn provided_certificates_are_the_provided_certs_overlays() {
    let pem = tempfile::tempdir().expect("scratch directory");
    for (file, content) in PEM_FILES {
        fs::write(pem.path().join(file), content).expect("stand-in file");
    }
    let files = set_files(pem.path());
    let mut args: Vec<&str> = files.iter().map(String::as_str).collect();
    assert_same(
        "certificates.source=provided",
        &template(&args),
        &without_namespace(kustomize(&overlay(
            "provided-certs",
            DEFAULT_COMPONENTS,
            "",
        ))),
    );
    args.extend(["--set", "enforcementAction=warn"]);
    assert_same(
        "certificates.source=provided, warn",
        &template(&args),
        &without_namespace(kustomize(&overlay(
            "provided-certs-warn",
            DEFAULT_COMPONENTS,
            "",
        ))),
    );
}

#[test]
#[ignore = "needs helm: make chart"]
fn an_existing_secret_is_mounted_and_its_ca_trusted() {
    let objects = template(&[
        "--set",
        "certificates.source=existingSecret",
        "--set-string",
        "certificates.existingSecret.caCrt=CA PEM",
    ]);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "Secret" || o["apiVersion"] == "cert-manager.io/v1"),
        "another tool writes the Secret"
    );
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let configuration = objects.iter().find(|o| o["kind"] == kind).expect(kind);
        assert!(configuration["metadata"]["annotations"].is_null());
        for webhook in configuration["webhooks"].as_array().expect("webhooks") {
            assert_eq!(webhook["clientConfig"]["caBundle"], "Q0EgUEVN", "{kind}");
        }
    }
    template_fails(
        &["--set", "certificates.source=existingSecret"],
        "certificates.existingSecret.caCrt is required",
    );
    template_fails(
        &["--set", "certificates.source=vault"],
        "'/certificates/source'",
    );
    template_fails(
        &["--set", "enforcementAction=block"],
        "'/enforcementAction'",
    );
}

#[test]
#[ignore = "needs helm: make chart"]
fn monitoring_and_network_policy_are_the_components() {
    let values = "monitoring.enabled=true";
    assert_same(
        "plain Prometheus Operator",
        &template(&["--set", values]),
        &without_namespace(kustomize(&overlay(
            "cert-manager",
            &["monitoring", "network-policy"],
            "",
        ))),
    );
    // kube-prometheus-stack selects by its release label, and its Prometheus may run in
    // another namespace: the component and the one-line patch the docs show.
    let patch = "patches:
  - target:
      kind: NetworkPolicy
      name: volume-health-webhook
    patch: |-
      - op: replace
        path: /spec/ingress/1/from/0/namespaceSelector/matchLabels/kubernetes.io~1metadata.name
        value: prometheus
";
    assert_same(
        "kube-prometheus-stack",
        &template(&[
            "--set",
            values,
            "--set",
            "monitoring.labels.release=kube-prometheus-stack",
            "--set",
            "networkPolicy.prometheusNamespace=prometheus",
        ]),
        &without_namespace(kustomize(&overlay(
            "cert-manager",
            &["monitoring", "kube-prometheus-stack", "network-policy"],
            patch,
        ))),
    );
}

#[test]
#[ignore = "needs helm: make chart"]
fn the_writer_list_is_the_writer_list_component() {
    assert_same(
        "pvcHealthWriters",
        &template(&[
            "--set",
            "pvcHealthWriters={system:serviceaccount:kube-system:csi-health-monitor}",
        ]),
        &without_namespace(kustomize(&overlay(
            "cert-manager",
            &["network-policy", "pvc-health-writers"],
            "",
        ))),
    );
    // A list that cannot be said in the entry's CEL or the server's flag is refused at render
    // time, not rendered into another list: by the schema, and by the template without it.
    // Characters YAML reads as line breaks inside the block the CEL is written in (U+0085,
    // U+2028, U+2029: the first one here would render a second `expression:`), other
    // separators, format characters: refused as the server refuses them.
    let nel =
        serde_json::to_string(&json!(["a\u{85}        expression: size(\"\") == 1 //"])).unwrap();
    for bad in [
        r#"["a", " "]"#,
        r#"[""]"#,
        r#"["a,b"]"#,
        r#"["a\nb"]"#,
        "[7]",
        &nel,
        r#"["a\u2028b"]"#,
        r#"["a\u2029b"]"#,
        r#"["a\u00a0b"]"#,
        r#"["a\u200bb"]"#,
        r#"["a\u202eb"]"#,
    ] {
        let value = format!("pvcHealthWriters={bad}");
        template_fails(&["--set-json", &value], "'/pvcHealthWriters/");
        template_fails(
            &["--skip-schema-validation", "--set-json", &value],
            "is not a username",
        );
        // The server refuses the same list (a comma is its separator: there, the entry is two).
        let entries: Vec<Value> = serde_json::from_str(bad).unwrap();
        if entries
            .iter()
            .any(|e| e.as_str().is_some_and(|e| e.contains(',')))
        {
            continue;
        }
        let flag = entries
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(",");
        let refused = !matches!(server_takes_writers(&flag), Ok(()));
        assert!(
            refused || entries.iter().any(|e| !e.is_string()),
            "the server takes {bad}"
        );
    }
    // A name of any script, and one padded with spaces, is taken by both.
    template(&[
        "--set-json",
        r#"pvcHealthWriters=["oidc:josé@example.com", " bot "]"#,
    ]);
    assert_eq!(server_takes_writers("oidc:josé@example.com, bot "), Ok(()));
    // A quote or a backslash in a name is escaped in the CEL string.
    let objects = template(&["--set-json", r#"pvcHealthWriters=["o'brien\\x"]"#]);
    let validating = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .expect("ValidatingWebhookConfiguration");
    let expression = validating["webhooks"][1]["matchConditions"][1]["expression"]
        .as_str()
        .expect("the writer-not-listed condition");
    assert!(expression.contains(r"['o\'brien\\x']"), "{expression}");
}

/// The rendered MutatingWebhookConfiguration, as text to count entries in.
fn mutating(objects: &[Value]) -> String {
    objects
        .iter()
        .find(|o| o["kind"] == "MutatingWebhookConfiguration")
        .expect("MutatingWebhookConfiguration")
        .to_string()
}

#[test]
#[ignore = "needs helm: make chart"]
fn repair_off_is_the_no_repair_component() {
    // On by default, as in the kustomize base: the switch and the three entries.
    let default = template(&[]);
    let env = webhook_container(&default)["env"].to_string();
    assert!(
        env.contains(r#""name":"VOLUME_HEALTH_REPAIR","value":"true""#),
        "{env}"
    );
    assert_eq!(mutating(&default).matches(".repair.").count(), 3);
    let components: Vec<&str> = DEFAULT_COMPONENTS
        .iter()
        .copied()
        .chain(["no-repair"])
        .collect();
    let chart = template(&["--set", "repair.enabled=false"]);
    assert_same(
        "repair.enabled=false",
        &chart,
        &without_namespace(kustomize(&overlay("cert-manager", &components, ""))),
    );
    // Off: the switch says so, and no entry sends writes to a server that does not repair.
    let env = webhook_container(&chart)["env"].to_string();
    assert!(
        env.contains(r#""name":"VOLUME_HEALTH_REPAIR","value":"false""#),
        "{env}"
    );
    assert!(!mutating(&chart).contains(".repair."));
    template_fails(&["--set-string", "repair.enabled=yes"], "'/repair/enabled'");
}

#[test]
#[ignore = "needs helm: make chart"]
fn the_gate_off_is_the_volume_health_off_component() {
    // On by default: drop on save would change nothing, so it has no entry.
    assert_eq!(mutating(&template(&[])).matches(".mutate.").count(), 0);
    for (values, extra) in [
        ("featureGates.CSIVolumeHealth=false", &[][..]),
        (
            "featureGates.CSIVolumeHealth=false,repair.enabled=false",
            &["no-repair"][..],
        ),
    ] {
        let components: Vec<&str> = DEFAULT_COMPONENTS
            .iter()
            .copied()
            .chain(["volume-health-off"])
            .chain(extra.iter().copied())
            .collect();
        let chart = template(&["--set", values]);
        assert_same(
            values,
            &chart,
            &without_namespace(kustomize(&overlay("cert-manager", &components, ""))),
        );
        assert_eq!(mutating(&chart).matches(".mutate.").count(), 3, "{values}");
    }
}

#[test]
#[ignore = "needs helm: make chart"]
fn the_doctor_is_the_doctor_daemonset() {
    let doctor: Vec<Value> = template(&["--set", "doctor.enabled=true"])
        .into_iter()
        .filter(|o| {
            o["metadata"]["namespace"] == "csi-globalmount-doctor" || o["kind"] == "Namespace"
        })
        .collect();
    let mut command = Command::new("kubectl");
    command
        .arg("kustomize")
        .arg(repository().join("manifests/doctor/daemonset"));
    assert_same("doctor.enabled=true", &doctor, &documents(&run(command)));
}

#[test]
#[ignore = "needs helm: make chart"]
fn values_reach_the_server_as_flags_it_accepts() {
    let objects = template(&[
        "--set",
        "image.tag=v9.9.9,replicas=5,featureGates.CSIVolumeHealth=false,enforcementAction=dryrun",
        "--set",
        "pvcHealthWriters={system:serviceaccount:kube-system:csi-monitor,health-bot}",
        "--set",
        "shutdownDelay=7s,terminationGracePeriodSeconds=40",
    ]);
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 5);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        40
    );
    let container = webhook_container(&objects);
    assert_eq!(
        container["image"],
        "ghcr.io/volume-health/volume-health-webhook:v9.9.9"
    );
    let argv: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|part| container[part].as_array().expect("strings"))
        .map(|a| a.as_str().expect("a string"))
        .collect();
    assert!(argv.contains(&"--shutdown-delay=7s"), "{argv:?}");
    Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("the server refuses {argv:?}: {e}"));
    let env: BTreeMap<&str, &str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|v| {
            (
                v["name"].as_str().expect("name"),
                v["value"].as_str().expect("value"),
            )
        })
        .collect();
    assert_eq!(
        env["VOLUME_HEALTH_PVC_HEALTH_WRITERS"],
        "system:serviceaccount:kube-system:csi-monitor,health-bot"
    );
    assert_eq!(env["VOLUME_HEALTH_FEATURE_GATES"], "CSIVolumeHealth=false");
    assert_eq!(env["VOLUME_HEALTH_ENFORCEMENT_ACTION"], "dryrun");
    let quota = objects
        .iter()
        .find(|o| o["kind"] == "ResourceQuota")
        .expect("ResourceQuota");
    assert!(
        quota["spec"]["hard"]["pods"]
            .as_str()
            .and_then(|p| p.parse::<u64>().ok())
            .is_some_and(|p| p > 5 + 1),
        "the quota admits every replica and a surge pod: {quota}"
    );
}

#[test]
#[ignore = "needs helm: make chart"]
fn the_chart_pins_the_workspace_version() {
    let chart: Value =
        serde_yaml::from_str(&fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml"))
            .expect("YAML");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
    let objects = template(&["--set", "doctor.enabled=true"]);
    let want = format!("v{}", env!("CARGO_PKG_VERSION"));
    let images: Vec<&str> = objects
        .iter()
        .filter_map(|o| o.pointer("/spec/template/spec/containers/0/image"))
        .map(|i| i.as_str().expect("image"))
        .collect();
    assert_eq!(images.len(), 2, "the webhook and the doctor");
    for image in images {
        assert!(image.ends_with(&format!(":{want}")), "{image}");
    }
}

/// Every value is typed by values.schema.json: a wrong one is refused by `helm template` (and
/// so by install and upgrade), naming the value, instead of rendering pods that crash-loop.
#[test]
#[ignore = "needs helm: make chart"]
fn the_schema_refuses_wrong_values() {
    for (args, at) in [
        // A string gate rendered `CSIVolumeHealth=%!t(string=true)`, which the server refuses.
        (
            vec!["--set-string", "featureGates.CSIVolumeHealth=true"],
            "'/featureGates/CSIVolumeHealth'",
        ),
        (vec!["--set", "featureGates.Bogus=true"], "'/featureGates'"),
        (vec!["--set", "replicas=0"], "'/replicas'"),
        (vec!["--set", "replicas=1.5"], "'/replicas'"),
        (vec!["--set-string", "replicas=3"], "'/replicas'"),
        (
            vec!["--set", "enforcementAction=Deny"],
            "'/enforcementAction'",
        ),
        (vec!["--set", "shutdownDelay=15"], "'/shutdownDelay'"),
        (vec!["--set", "shutdownTimeout=soon"], "'/shutdownTimeout'"),
        (
            vec!["--set", "doctor.interval=10 minutes"],
            "'/doctor/interval'",
        ),
        (
            vec!["--set", "image.pullPolicy=Sometimes"],
            "'/image/pullPolicy'",
        ),
        (
            vec!["--set", "readinessProbe.periodSeconds=0"],
            "'/readinessProbe/periodSeconds'",
        ),
        (
            vec!["--set-string", "namespace.create=yes"],
            "'/namespace/create'",
        ),
        (
            vec!["--set", "networkPolicy.prometheusNamespace=Not_A_Name"],
            "'/networkPolicy/prometheusNamespace'",
        ),
        // A misspelt value is not silently ignored.
        (vec!["--set", "replica=5"], "'replica' not allowed"),
    ] {
        template_fails(&args, at);
    }
    // The template refuses a string gate too, where the schema is skipped.
    template_fails(
        &[
            "--skip-schema-validation",
            "--set-string",
            "featureGates.CSIVolumeHealth=true",
        ],
        "featureGates.CSIVolumeHealth must be true or false",
    );
    // Every value the docs and the defaults use passes.
    template(&[
        "--set",
        "shutdownDelay=1m30s,shutdownTimeout=500ms,doctor.interval=1h,replicas=1",
    ]);
}

/// Every templated argument, environment value and image of the chart's pods is quoted, so
/// that a value YAML would read as another type (or as the end of the line) stays the string
/// it was.
#[test]
#[ignore = "needs helm: make chart"]
fn templated_arguments_and_values_are_quoted() {
    let mut checked = 0;
    for name in ["deployment.yaml", "doctor.yaml", "audit.yaml"] {
        let text = fs::read_to_string(chart().join("templates").join(name)).expect("template");
        for line in text.lines() {
            let item = line.trim_start();
            let templated = item.contains("{{") && !item.starts_with("{{");
            let field = [
                "- ",
                "value:",
                "image:",
                "imagePullPolicy:",
                "path:",
                "mountPath:",
            ]
            .iter()
            .any(|f| item.starts_with(f));
            if templated && field {
                checked += 1;
                assert!(
                    item.contains("| quote }}"),
                    "{name}: not quoted: {}",
                    line.trim()
                );
            }
        }
    }
    assert!(checked >= 10, "only {checked} templated lines found");
}

/// The NetworkPolicy is on by default with the webhook port open to any source (the
/// apiserver's addresses cannot be named for every cluster); named CIDRs are the
/// component's documented patch, admitting those only; off, neither the webhook's nor the
/// doctor's is rendered.
#[test]
#[ignore = "needs helm: make chart"]
fn the_network_policy_admits_the_named_apiserver_and_can_be_widened() {
    let patch = "patches:
  - target:
      kind: NetworkPolicy
      name: volume-health-webhook
    patch: |-
      - op: add
        path: /spec/ingress/0/from
        value:
          - ipBlock:
              cidr: 10.0.0.0/24
          - ipBlock:
              cidr: fd00:10::/64
";
    let named = template(&[
        "--set-json",
        r#"networkPolicy.apiserver.cidrs=["10.0.0.0/24","fd00:10::/64"]"#,
    ]);
    assert_same(
        "networkPolicy.apiserver.cidrs",
        &named,
        &without_namespace(kustomize(&overlay(
            "cert-manager",
            &["network-policy"],
            patch,
        ))),
    );
    let policy = named
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("the NetworkPolicy");
    for rule in policy["spec"]["ingress"].as_array().expect("rules") {
        assert!(
            !rule["from"].is_null(),
            "no rule open to every source: {rule}"
        );
    }

    let defaults = template(&["--set", "doctor.enabled=true"]);
    let policies: Vec<&Value> = defaults
        .iter()
        .filter(|o| o["kind"] == "NetworkPolicy")
        .collect();
    assert_eq!(
        policies.len(),
        2,
        "the webhook's and the doctor's, by default"
    );
    let off = template(&["--set", "networkPolicy.enabled=false,doctor.enabled=true"]);
    assert!(!off.iter().any(|o| o["kind"] == "NetworkPolicy"));
    assert_same(
        "networkPolicy.enabled=false",
        &template(&["--set", "networkPolicy.enabled=false"]),
        &without_namespace(kustomize(&overlay("cert-manager", &[], ""))),
    );
    template_fails(
        &[
            "--set-json",
            r#"networkPolicy.apiserver.cidrs=["10.0.0.1"]"#,
        ],
        "'/networkPolicy/apiserver/cidrs/0'",
    );
}

/// `clientCA.caCrt` is the client-ca component with the Secret generated beside it (without
/// kustomize's hash suffix, which the chart does not add); `clientCA.secretName` mounts an
/// existing Secret; either way the server gets a `--client-ca-file` it accepts.
#[test]
#[ignore = "needs helm: make chart"]
fn client_certificates_are_the_client_ca_component() {
    let ca = tempfile::tempdir().expect("scratch directory");
    let ca_file = ca.path().join("ca.crt");
    fs::write(&ca_file, "CLIENT CA PEM\n").expect("stand-in CA");
    let set_file = format!("clientCA.caCrt={}", ca_file.display());
    let generator = "secretGenerator:
  - name: volume-health-webhook-client-ca
    namespace: volume-health
    files:
      - ca.crt
    options:
      disableNameSuffixHash: true
      labels:
        app.kubernetes.io/name: volume-health-webhook
";
    let chart = template(&["--set-file", &set_file]);
    assert_same(
        "clientCA.caCrt",
        &chart,
        &without_namespace(kustomize_with(
            &overlay("cert-manager", &["network-policy", "client-ca"], generator),
            &[("ca.crt", "CLIENT CA PEM\n")],
        )),
    );
    let argv = |objects: &[Value]| -> Vec<String> {
        let container = webhook_container(objects);
        ["command", "args"]
            .iter()
            .flat_map(|part| container[part].as_array().expect("strings"))
            .map(|a| a.as_str().expect("a string").to_owned())
            .collect()
    };
    let existing = template(&["--set", "clientCA.secretName=apiserver-client-ca"]);
    assert!(!existing.iter().any(
        |o| o["kind"] == "Secret" && o["metadata"]["name"] == "volume-health-webhook-client-ca"
    ));
    let deployment = existing
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    assert!(
        volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "apiserver-client-ca"),
        "{volumes:?}"
    );
    for objects in [&chart, &existing] {
        let argv = argv(objects);
        assert!(
            argv.contains(&"--client-ca-file=/etc/volume-health/client-ca/ca.crt".to_owned()),
            "{argv:?}"
        );
        Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("the server refuses {argv:?}: {e}"));
    }
    assert!(
        !argv(&template(&[]))
            .iter()
            .any(|a| a.starts_with("--client-ca-file")),
        "no client certificates by default"
    );
    template_fails(
        &[
            "--set-file",
            &set_file,
            "--set",
            "clientCA.secretName=apiserver-client-ca",
        ],
        "give caCrt or secretName, not both",
    );
}

/// The objects without the annotation only the chart's CRDs carry: Helm keeps them on
/// uninstall (other tools' reports live in them), which means nothing to kustomize.
fn without_keep(objects: Vec<Value>) -> Vec<Value> {
    objects
        .into_iter()
        .map(|mut object| {
            if object["kind"] == "CustomResourceDefinition" {
                let annotations = object["metadata"]["annotations"]
                    .as_object_mut()
                    .expect("the chart's CRDs are annotated");
                assert_eq!(
                    annotations.remove("helm.sh/resource-policy"),
                    Some(json!("keep")),
                    "the chart keeps the CRDs on uninstall"
                );
            }
            object
        })
        .collect()
}

/// `audit.enabled` is components/audit, with components/openreports-crds unless
/// `audit.installCRDs` is false; the chart's copies of the CRDs are the component's; off by
/// default.
#[test]
#[ignore = "needs helm: make chart"]
fn the_audit_is_the_audit_components() {
    assert!(
        !template(&[]).iter().any(|o| o["kind"] == "CronJob"),
        "the audit is off by default"
    );
    let with_crds = DEFAULT_COMPONENTS
        .iter()
        .copied()
        .chain(["audit", "openreports-crds"])
        .collect::<Vec<_>>();
    assert_same(
        "audit.enabled=true",
        &without_keep(template(&["--set", "audit.enabled=true"])),
        &without_namespace(kustomize(&overlay("cert-manager", &with_crds, ""))),
    );
    let without_crds = DEFAULT_COMPONENTS
        .iter()
        .copied()
        .chain(["audit"])
        .collect::<Vec<_>>();
    assert_same(
        "audit.installCRDs=false",
        &template(&["--set", "audit.enabled=true,audit.installCRDs=false"]),
        &without_namespace(kustomize(&overlay("cert-manager", &without_crds, ""))),
    );
    for file in [
        "openreports.io_reports.yaml",
        "openreports.io_clusterreports.yaml",
    ] {
        let read = |dir: &str| fs::read(repository().join(dir).join(file)).expect(file);
        assert_eq!(
            read("charts/volume-health/files/openreports-crds"),
            read("manifests/components/openreports-crds"),
            "{file}: the chart's copy differs from the component's"
        );
    }
    let objects = template(&[
        "--set",
        "audit.enabled=true",
        "--set-string",
        "audit.schedule=*/30 * * * *",
    ]);
    let cronjob = objects
        .iter()
        .find(|o| o["kind"] == "CronJob")
        .expect("the CronJob");
    assert_eq!(cronjob["spec"]["schedule"], "*/30 * * * *");
    template_fails(&["--set", "audit.schedule=hourly"], "'/audit/schedule'");
    template_fails(
        &["--set-string", "audit.installCRDs=yes"],
        "'/audit/installCRDs'",
    );
    let mut command = helm();
    command
        .args(["lint", "--strict", "--namespace", NAMESPACE])
        .arg(chart())
        .args(["--set", "audit.enabled=true"]);
    run(command);
}

/// The generated policies with `writers`, the bindings of `action` and the repair bindings
/// (repair is on by default), as objects.
fn native(writers: &[&str], action: volume_health_policies::Action) -> Vec<Value> {
    volume_health_policies::policies(writers)
        .into_iter()
        .chain(volume_health_policies::bindings(action))
        .chain(volume_health_policies::repair_bindings())
        .collect()
}

#[test]
#[ignore = "needs helm: make chart"]
fn native_mode_is_the_native_overlays() {
    use volume_health_policies::Action;

    // The chart's copies of the component's files are the files.
    let component = repository().join("manifests/components/native-policies");
    for file in [
        "policies.yaml",
        "bindings-deny.yaml",
        "bindings-warn.yaml",
        "bindings-audit.yaml",
        "drop-on-save-bindings.yaml",
        "repair-bindings.yaml",
    ] {
        assert_eq!(
            fs::read_to_string(chart().join("files/native-policies").join(file)).expect("copy"),
            fs::read_to_string(component.join(file)).expect("component file"),
            "charts/volume-health/files/native-policies/{file}: copy it from the component"
        );
    }
    for (args, overlay_name) in [
        (vec!["--set", "mode=native"], "native"),
        (
            vec!["--set", "mode=native", "--set", "enforcementAction=warn"],
            "native-warn",
        ),
    ] {
        assert_same(
            overlay_name,
            &template(&args),
            &kustomize(&overlay(overlay_name, &[], "")),
        );
    }
    // dryrun is the Audit bindings; the writer list is written into its policy as the
    // generator writes it; the gate off binds drop on save.
    assert_same(
        "mode=native, enforcementAction=dryrun",
        &template(&["--set", "mode=native", "--set", "enforcementAction=dryrun"]),
        &native(&[], Action::Audit),
    );
    let monitor = "system:serviceaccount:kube-system:csi-health-monitor";
    assert_same(
        "mode=native with pvcHealthWriters",
        &template(&[
            "--set",
            "mode=native",
            "--set",
            &format!("pvcHealthWriters={{{monitor},alice}}"),
        ]),
        &native(&[monitor, "alice"], Action::Deny),
    );
    let mut gate_off = native(&[], Action::Deny);
    gate_off.extend(volume_health_policies::drop_on_save_bindings());
    assert_same(
        "mode=native, featureGates.CSIVolumeHealth=false",
        &template(&[
            "--set",
            "mode=native",
            "--set",
            "featureGates.CSIVolumeHealth=false",
        ]),
        &gate_off,
    );
    // Repair off leaves its bindings out, as the webhooks' install leaves its entries out.
    let no_repair: Vec<Value> = volume_health_policies::policies(&[])
        .into_iter()
        .chain(volume_health_policies::bindings(Action::Deny))
        .collect();
    assert_same(
        "mode=native, repair.enabled=false",
        &template(&["--set", "mode=native", "--set", "repair.enabled=false"]),
        &no_repair,
    );
    // A name the chart cannot quote as the generator does is refused, never mangled.
    template_fails(
        &[
            "--set",
            "mode=native",
            "--set",
            "pvcHealthWriters={o'brien}",
        ],
        "holds a quote or backslash",
    );
}
