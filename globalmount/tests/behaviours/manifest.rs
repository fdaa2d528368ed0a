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
