//! The plans never advise what the node's kubelet cannot do: the step that enables KEP-6058's
//! gate is offered only for a kubelet known to have it (its binary names it). A kubelet given
//! a gate it does not know refuses to start, so that step would take the node down.

use serde_json::Value;

use crate::cli::{json, run, stderr};
use crate::fixture::{FixtureNode, NODE, PodData, gm, mnt, s};

const DRIVER: &str = "ebs.csi.aws.com";
const HANDLE: &str = "vol-0abc";
const GATE_FLAG: &str = "--feature-gates=CSIGlobalMountReconstruction=true";

/// How the doctor learns of the kubelet.
#[derive(Clone, Copy, Debug)]
enum Kubelet {
    /// Nothing given.
    Unknown,
    /// The Node's `status.nodeInfo.kubeletVersion`.
    NodeVersion(&'static str),
    /// `--kubelet-version`.
    Flag(&'static str),
    /// `--kubelet-binary`, which names the gate or not, with `--kubelet-version v1.99.0`
    /// (the binary decides).
    Binary { names_gate: bool },
}

/// What part of a `kubelet --help` holds for a kubelet that has the gate (the gate list).
const HELP_WITH_GATE: &[u8] =
    b"\x00\x7fELF...CSIDriverRegistry=true|false\x00CSIGlobalMountReconstruction=true|false \
      (ALPHA - default=false)\x00ContextualLogging=true|false\x00";
const HELP_WITHOUT_GATE: &[u8] =
    b"\x00\x7fELF...CSIDriverRegistry=true|false\x00ContextualLogging=true|false\x00";

/// The doctor's JSON report of `node` with the kubelet given as `kubelet`.
fn report(node: &FixtureNode, kubelet: Kubelet) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut args: Vec<String> = Vec::new();
    match kubelet {
        Kubelet::Unknown => {}
        Kubelet::NodeVersion(version) => {
            let file = dir.path().join("node.json");
            std::fs::write(
                &file,
                format!(
                    r#"{{"kind":"Node","metadata":{{"name":"{NODE}"}},"status":{{"nodeInfo":{{"kubeletVersion":"{version}"}}}}}}"#
                ),
            )
            .expect("node json");
            args.extend(["--node-json".into(), s(&file)]);
        }
        Kubelet::Flag(version) => args.extend(["--kubelet-version".into(), version.into()]),
        Kubelet::Binary { names_gate } => {
            // A host path, read through --host-prefix as the node's files are.
            let host = node.prefix().join("usr/bin");
            std::fs::create_dir_all(&host).expect("bin dir");
            let bytes = if names_gate {
                HELP_WITH_GATE
            } else {
                HELP_WITHOUT_GATE
            };
            std::fs::write(host.join("kubelet"), bytes).expect("kubelet binary");
            args.extend(
                [
                    "--kubelet-binary",
                    "/usr/bin/kubelet",
                    "--kubelet-version",
                    "v1.99.0",
                ]
                .map(String::from),
            );
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(node, &args);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    json(&output)
}

fn steps(report: &Value) -> Vec<String> {
    report["globalVolumes"][0]["operatorPlan"]
        .as_array()
        .expect("a plan")
        .iter()
        .map(|step| step.as_str().expect("a step").to_owned())
        .collect()
}

/// The kubelets, what the doctor must conclude, and whether the gate step may appear.
const KUBELETS: [(Kubelet, &str, bool); 7] = [
    (Kubelet::NodeVersion("v1.37.2"), "lacks", false),
    (Kubelet::NodeVersion("v1.38.0"), "unknown", false),
    (Kubelet::Flag("v1.37.0"), "lacks", false),
    (Kubelet::Flag("v1.39.1"), "unknown", false),
    (Kubelet::Unknown, "unknown", false),
    (Kubelet::Binary { names_gate: true }, "has", true),
    (Kubelet::Binary { names_gate: false }, "lacks", false),
];

fn check_gate(report: &Value, kubelet: Kubelet, support: &str, offered: bool) -> Vec<String> {
    assert_eq!(
        report["kubeletGate"]["gate"],
        "CSIGlobalMountReconstruction"
    );
    assert_eq!(report["kubeletGate"]["support"], support, "{kubelet:?}");
    let plan = steps(report);
    assert_eq!(
        plan.iter().any(|step| step.contains(GATE_FLAG)),
        offered,
        "{kubelet:?}: {plan:#?}"
    );
    plan
}

#[test]
fn an_orphaned_volume_is_unstaged_by_the_driver_unless_kubelet_has_the_gate() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let call = format!(
        "NodeUnstageVolume with volume_id \"{HANDLE}\" and staging_target_path {}",
        s(gm(&global))
    );
    for (kubelet, support, offered) in KUBELETS {
        let report = report(&node, kubelet);
        assert_eq!(report["globalVolumes"][0]["class"], "orphaned_staged");
        let plan = check_gate(&report, kubelet, support, offered);
        // Whatever the kubelet, the driver's own call is in the plan, with its arguments.
        assert!(
            plan.iter().any(|step| step.contains(&call)),
            "{kubelet:?}: {plan:#?}"
        );
    }
}

#[test]
fn an_unreadable_pod_directory_is_released_by_the_driver_unless_kubelet_has_the_gate() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Truncated);
    node.bind("8:16", gm(&global), mnt(&pod));
    for (kubelet, support, offered) in KUBELETS {
        let report = report(&node, kubelet);
        assert_eq!(report["globalVolumes"][0]["class"], "pod_data_unreadable");
        let plan = check_gate(&report, kubelet, support, offered);
        if !offered {
            let unpublish = format!(
                "NodeUnpublishVolume with volume_id \"{HANDLE}\" and target_path {}",
                s(mnt(&pod))
            );
            assert!(
                plan.iter()
                    .any(|step| step.contains(&unpublish) && step.contains("NodeUnstageVolume")),
                "{kubelet:?}: {plan:#?}"
            );
        }
    }
}

#[test]
fn a_kubelet_binary_that_cannot_be_read_is_an_error() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let output = run(&node, &["--kubelet-binary", "/usr/bin/no-kubelet"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no-kubelet"),
        "{}",
        stderr(&output)
    );
}

/// `/usr/bin/kubelet` as a link to an absolute path is read in host path space, and a FIFO
/// is refused at once rather than waited on.
#[test]
fn a_kubelet_binary_behind_a_link_is_read_on_the_host_and_a_fifo_is_refused() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let prefix = node.prefix().to_path_buf();
    std::fs::create_dir_all(prefix.join("usr/local/bin")).expect("bin dir");
    std::fs::create_dir_all(prefix.join("usr/bin")).expect("bin dir");
    std::fs::write(prefix.join("usr/local/bin/kubelet"), HELP_WITH_GATE).expect("kubelet");
    std::os::unix::fs::symlink("/usr/local/bin/kubelet", prefix.join("usr/bin/kubelet"))
        .expect("link");
    let output = run(&node, &["--kubelet-binary", "/usr/bin/kubelet"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(json(&output)["kubeletGate"]["support"], "has");

    let fifo = prefix.join("usr/bin/fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let output = run(&node, &["--kubelet-binary", "/usr/bin/fifo"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("FIFO"), "{}", stderr(&output));
}
