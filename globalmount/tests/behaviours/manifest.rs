//! The node manifest under `manifests/doctor` must configure the binary with
//! variables it reads and mount the host read-only.

use std::path::Path;
use std::process::Command;

use serde_yaml::Value;

fn job() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/doctor/job.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text).expect("job.yaml parses")
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
    let job = job();
    let env = pod_spec(&job)["containers"][0]["env"]
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

#[test]
fn the_job_mounts_the_host_read_only_and_drops_every_capability() {
    let job = job();
    let spec = pod_spec(&job);
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
