//! The node manifests under `manifests/doctor` (the Job, and the DaemonSet in
//! `manifests/doctor/daemonset`) must configure the binary with variables it
//! reads and mount the host read-only.

use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

fn manifest(relative: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/doctor")
        .join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text).expect("manifest parses")
}

fn job() -> Value {
    manifest("job.yaml")
}

fn workloads() -> [Value; 2] {
    [manifest("job.yaml"), manifest("daemonset/daemonset.yaml")]
}

fn pod_spec(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]
}

#[test]
fn the_job_sets_only_variables_the_doctor_reads() {
    let help = Command::new(env!("CARGO_BIN_EXE_csi-globalmount-doctor"))
        .arg("--help")
        .output()
        .expect("doctor runs");
    let help = String::from_utf8_lossy(&help.stdout);
    for workload in workloads() {
        let env = pod_spec(&workload)["containers"][0]["env"]
            .as_sequence()
            .expect("env list");
        assert!(!env.is_empty());
        for var in env {
            let name = var["name"].as_str().expect("env name");
            assert!(
                help.contains(&format!("[env: {name}=")),
                "{name} is not a variable of the doctor:\n{help}"
            );
        }
    }
}

fn env_value<'a>(workload: &'a Value, name: &str) -> Option<&'a str> {
    pod_spec(workload)["containers"][0]["env"]
        .as_sequence()?
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .and_then(|v| v["value"].as_str())
}

#[test]
fn the_daemonset_loops_serves_metrics_on_its_port_and_the_service_selects_it() {
    let daemonset = manifest("daemonset/daemonset.yaml");
    let interval = env_value(&daemonset, "CSI_GLOBALMOUNT_INTERVAL").expect("interval");
    assert!(humantime::parse_duration(interval).is_ok(), "{interval}");
    let addr = env_value(&daemonset, "CSI_GLOBALMOUNT_METRICS_ADDR").expect("metrics address");
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let container = &pod_spec(&daemonset)["containers"][0];
    assert_eq!(
        container["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(port))
    );
    assert!(pod_spec(&daemonset)["nodeName"].is_null());
    // The Job runs once and exits; it must not loop.
    assert_eq!(env_value(&job(), "CSI_GLOBALMOUNT_INTERVAL"), None);

    let service = manifest("daemonset/service.yaml");
    let selector = service["spec"]["selector"].as_mapping().expect("selector");
    let labels = &daemonset["spec"]["template"]["metadata"]["labels"];
    for (key, value) in selector {
        assert_eq!(&labels[key], value, "{key:?}");
    }
    // The Job's pods carry another component label, so the Service never selects them.
    assert_ne!(
        job()["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        labels["app.kubernetes.io/component"]
    );
}

#[test]
fn the_job_mounts_the_host_read_only_and_drops_every_capability() {
    for workload in workloads() {
        host_read_only_and_no_capability(&workload);
    }
}

fn host_read_only_and_no_capability(job: &Value) {
    let spec = pod_spec(job);
    let container = &spec["containers"][0];
    let mounts = container["volumeMounts"].as_sequence().expect("mounts");
    assert_eq!(mounts.len(), 2);
    for mount in mounts {
        assert_eq!(mount["readOnly"], Value::Bool(true), "{mount:?}");
    }
    let host_paths: Vec<&str> = spec["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .map(|v| v["hostPath"]["path"].as_str().expect("hostPath volume"))
        .collect();
    assert_eq!(host_paths, ["/var/lib/kubelet", "/proc/1/mountinfo"]);
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], Value::Bool(false));
    assert_eq!(security["readOnlyRootFilesystem"], Value::Bool(true));
    assert_eq!(security["privileged"], Value::Bool(false));
    assert_eq!(
        security["capabilities"]["drop"],
        serde_yaml::from_str::<Value>("[ALL]").expect("yaml")
    );
    assert!(security["capabilities"]["add"].is_null());
    assert_eq!(spec["automountServiceAccountToken"], Value::Bool(false));
    assert!(spec["hostPID"].is_null() && spec["hostNetwork"].is_null());
}

/// Every YAML document under `manifests/doctor`, with the file it came from.
fn every_doctor_document() -> Vec<(String, Value)> {
    fn walk(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("manifest directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                found.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/doctor");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("manifest reads");
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde::Deserialize::deserialize(document).expect("manifest parses");
            documents.push((file.display().to_string(), value));
        }
    }
    documents
}

/// Every pod spec in `value`: any mapping with a `containers` list, wherever
/// the kind nests it (Pod, Job, DaemonSet, CronJob, ...).
fn pod_specs(value: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    match value {
        Value::Mapping(map) => {
            if map.get("containers").is_some_and(Value::is_sequence) {
                found.push(value);
            }
            for child in map.values() {
                found.extend(pod_specs(child));
            }
        }
        Value::Sequence(items) => items.iter().for_each(|i| found.extend(pod_specs(i))),
        _ => {}
    }
    found
}

/// Whether one of two absolute paths contains the other (or they are equal).
fn nested(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The hostPath mounts of `spec` that cover the kubelet root (the root itself,
/// an ancestor such as `/`, or anything below it) without HostToContainer
/// propagation, as `container/volume: reason`.
fn pinning_mounts(spec: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    let volumes = spec["volumes"].as_sequence().cloned().unwrap_or_default();
    let host_path = |name: &str| {
        volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .and_then(|v| v["hostPath"]["path"].as_str())
            .map(str::to_owned)
    };
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|key| spec[*key].as_sequence())
        .flatten();
    for container in containers {
        let root = container["env"]
            .as_sequence()
            .and_then(|env| {
                env.iter()
                    .find(|v| v["name"].as_str() == Some("CSI_GLOBALMOUNT_KUBELET_ROOT"))
            })
            .and_then(|v| v["value"].as_str())
            .unwrap_or("/var/lib/kubelet");
        for mount in container["volumeMounts"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            let name = mount["name"].as_str().unwrap_or_default();
            let Some(path) = host_path(name) else {
                continue;
            };
            if !nested(Path::new(&path), Path::new(root)) {
                continue;
            }
            let what = format!(
                "{}/{name} ({path})",
                container["name"].as_str().unwrap_or("?")
            );
            match mount["mountPropagation"].as_str() {
                Some("HostToContainer") => {}
                other => wrong.push(format!("{what}: mountPropagation {other:?}")),
            }
            if !mount["recursiveReadOnly"].is_null() {
                wrong.push(format!("{what}: recursiveReadOnly needs propagation None"));
            }
        }
    }
    wrong
}

#[test]
fn no_doctor_mount_keeps_a_private_copy_of_the_volumes_below_the_kubelet_root() {
    let documents = every_doctor_document();
    let mut checked = 0;
    for (file, document) in &documents {
        for spec in pod_specs(document) {
            checked += 1;
            let wrong = pinning_mounts(spec);
            assert!(wrong.is_empty(), "{file}: {wrong:?}");
        }
    }
    // The Job and the DaemonSet, at least.
    assert!(checked >= 2, "{checked} pod specs found");
}

#[test]
fn the_propagation_check_catches_the_host_root_the_root_and_a_mount_below_it() {
    let spec: Value = serde_yaml::from_str(
        r#"
containers:
  - name: doctor
    volumeMounts:
      - {name: host, mountPath: /host, readOnly: true}
      - {name: var, mountPath: /host/var, mountPropagation: None}
      - {name: root, mountPath: /r, readOnly: true, recursiveReadOnly: IfPossible, mountPropagation: HostToContainer}
      - {name: csi, mountPath: /csi, mountPropagation: None}
      - {name: fine, mountPath: /k, mountPropagation: HostToContainer}
      - {name: elsewhere, mountPath: /etc-host}
volumes:
  - {name: host, hostPath: {path: /}}
  - {name: var, hostPath: {path: /var/}}
  - {name: root, hostPath: {path: /var/lib/kubelet}}
  - {name: csi, hostPath: {path: /var/lib/kubelet/plugins/kubernetes.io/csi}}
  - {name: fine, hostPath: {path: /var/lib/kubelet}}
  - {name: elsewhere, hostPath: {path: /etc}}
"#,
    )
    .expect("yaml");
    let wrong = pinning_mounts(&spec);
    assert_eq!(wrong.len(), 4, "{wrong:#?}");
    for name in ["doctor/host", "doctor/var", "doctor/root", "doctor/csi"] {
        assert!(
            wrong.iter().any(|w| w.starts_with(name)),
            "{name}: {wrong:#?}"
        );
    }
}

/// The propagation the shipped DaemonSet gives the kubelet root; the Job must agree.
pub(crate) fn kubelet_root_propagation() -> String {
    let modes: Vec<String> = workloads()
        .iter()
        .map(|workload| {
            let mounts = pod_spec(workload)["containers"][0]["volumeMounts"]
                .as_sequence()
                .expect("mounts");
            let mount = mounts
                .iter()
                .find(|m| m["name"].as_str() == Some("kubelet-root"))
                .expect("kubelet-root mount");
            mount["mountPropagation"]
                .as_str()
                .unwrap_or("None")
                .to_owned()
        })
        .collect();
    assert!(modes.windows(2).all(|w| w[0] == w[1]), "{modes:?}");
    modes[0].clone()
}
