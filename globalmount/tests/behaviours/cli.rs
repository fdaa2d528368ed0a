//! The built `csi-globalmount-doctor` binary, end to end: flags, environment,
//! JSON and text output, exit codes, and that it leaves the node untouched (B7).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use csi_globalmount::layout::{attachment_name, unique_volume_name};
use serde_json::Value;

use crate::fixture::{FixtureNode, NODE, PodData, gm, mnt, s};

const DRIVER: &str = "ebs.csi.aws.com";
const HANDLE: &str = "vol-0abc";
const ENV_VARS: [&str; 9] = [
    "CSI_GLOBALMOUNT_KUBELET_ROOT",
    "CSI_GLOBALMOUNT_MOUNTINFO",
    "CSI_GLOBALMOUNT_HOST_PREFIX",
    "CSI_GLOBALMOUNT_NODE_NAME",
    "CSI_GLOBALMOUNT_NODE_JSON",
    "CSI_GLOBALMOUNT_VOLUMEATTACHMENTS_JSON",
    "CSI_GLOBALMOUNT_KUBELET_VERSION",
    "CSI_GLOBALMOUNT_KUBELET_BINARY",
    "CSI_GLOBALMOUNT_FORMAT",
];

pub(crate) fn bare_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_csi-globalmount-doctor"));
    // The caller's environment must not configure the binary behind the test's back.
    for var in ENV_VARS {
        cmd.env_remove(var);
    }
    cmd
}

pub(crate) fn doctor_command(node: &FixtureNode, mountinfo: &Path) -> Command {
    let mut cmd = bare_command();
    cmd.arg("--kubelet-root")
        .arg(node.layout.root())
        .arg("--host-prefix")
        .arg(node.prefix())
        .arg("--mountinfo")
        .arg(mountinfo);
    cmd
}

pub(crate) fn run(node: &FixtureNode, extra: &[&str]) -> Output {
    let mountinfo = node.write_mountinfo();
    doctor_command(node, &mountinfo)
        .args(extra)
        .output()
        .expect("doctor runs")
}

pub(crate) fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn healthy() -> (FixtureNode, PathBuf, PathBuf) {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume(
        "uid-1",
        "pvc-1",
        PodData::Written {
            driver: DRIVER,
            handle: HANDLE,
        },
    );
    node.bind("8:16", gm(&global), mnt(&pod));
    (node, global, pod)
}

#[test]
fn a_clean_node_exits_0_with_the_json_report() {
    let (node, global, pod) = healthy();
    let output = run(&node, &["--node-name", NODE]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["kubeletRoot"], "/var/lib/kubelet");
    assert_eq!(report["nodeName"], NODE);
    assert_eq!(
        report["mountinfoSource"],
        s(node.prefix().join("mountinfo"))
    );
    let v = &report["globalVolumes"][0];
    assert_eq!(v["class"], "in_use");
    assert_eq!(v["mode"], "Filesystem");
    assert_eq!(v["driver"], DRIVER);
    assert_eq!(v["volumeHandle"], HANDLE);
    assert_eq!(v["specVolID"], "pvc-1");
    assert_eq!(v["specName"], "pvc-1");
    assert_eq!(v["specVolIDSource"], "file");
    assert_eq!(v["uniqueVolumeName"], unique_volume_name(DRIVER, HANDLE));
    assert_eq!(v["attachmentName"], attachment_name(HANDLE, DRIVER, NODE));
    assert_eq!(v["deviceMountPath"], s(gm(&global)));
    assert_eq!(v["mounted"], true);
    assert_eq!(v["podRefs"][0], s(mnt(&pod)));
    assert_eq!(v["podDirs"][0], s(&pod));
    assert_eq!(v["kubeletPlan"], "would_register_uncertain");
    assert_eq!(v["api"], Value::Null);
    assert_eq!(report["summary"]["findings"], 0);
    assert_eq!(report["podLocal"], Value::Array(vec![]));
    assert_eq!(report["skipped"], Value::Array(vec![]));
}

#[test]
fn a_node_without_csi_volumes_exits_0() {
    let node = FixtureNode::new();
    let output = run(&node, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(json(&output)["globalVolumes"], Value::Array(vec![]));
}

#[test]
fn the_121937_shape_exits_1_as_orphaned_staged() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let output = run(&node, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["globalVolumes"][0]["class"], "orphaned_staged");
    assert_eq!(
        report["globalVolumes"][0]["kubeletPlan"],
        "would_register_uncertain"
    );
    assert_eq!(report["summary"]["orphanedStaged"], 1);
    assert_eq!(report["summary"]["findings"], 1);
    assert!(output.stderr.is_empty(), "{}", stderr(&output));
}

#[test]
fn the_101791_shape_exits_1_as_pod_data_unreadable() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    let pod = node.pod_fs_volume("uid-1", "pvc-1", PodData::Truncated);
    node.bind("8:16", gm(&global), mnt(&pod));
    let output = run(&node, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["globalVolumes"][0]["class"], "pod_data_unreadable");
    let p = &report["podLocal"][0];
    assert_eq!(p["podUID"], "uid-1");
    assert_eq!(p["recoveredFrom"]["globalDataDir"], s(&global));
    assert_eq!(p["recoveredFrom"]["volumeHandle"], HANDLE);
    assert_eq!(p["declineReason"], Value::Null);
    assert_eq!(p["pairedBy"], "fallback");
}

#[test]
fn cross_checking_api_files_flags_a_volume_missing_from_volumes_in_use() {
    let (node, _, _) = healthy();
    let api_dir = tempfile::tempdir().expect("temp dir");
    let node_file = api_dir.path().join("node.json");
    std::fs::write(
        &node_file,
        format!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{NODE}"}},"status":{{"volumesInUse":[]}}}}"#
        ),
    )
    .expect("write node json");
    let va_file = api_dir.path().join("va.json");
    std::fs::write(
        &va_file,
        format!(
            r#"{{"kind":"VolumeAttachmentList","items":[{{"metadata":{{"name":"{}"}},"spec":{{"attacher":"{DRIVER}","nodeName":"{NODE}"}},"status":{{"attached":true}}}}]}}"#,
            attachment_name(HANDLE, DRIVER, NODE)
        ),
    )
    .expect("write va json");
    // The node name comes from the node JSON.
    let output = run(
        &node,
        &[
            "--node-json",
            &s(&node_file),
            "--volumeattachments-json",
            &s(&va_file),
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    let v = &report["globalVolumes"][0];
    assert_eq!(report["nodeName"], NODE);
    assert_eq!(v["class"], "in_use");
    assert_eq!(v["flags"], serde_json::json!(["at_risk"]));
    assert_eq!(v["api"]["inVolumesInUse"], false);
    assert_eq!(v["api"]["volumeAttachment"]["exists"], true);
    assert_eq!(v["api"]["volumeAttachment"]["attached"], true);
    assert_eq!(v["api"]["volumeAttachment"]["nodeMatches"], true);
    assert_eq!(report["summary"]["atRisk"], 1);

    // The same node listed in volumesInUse is clean.
    std::fs::write(
        &node_file,
        format!(
            r#"{{"kind":"Node","metadata":{{"name":"{NODE}"}},"status":{{"volumesInUse":["{}"]}}}}"#,
            unique_volume_name(DRIVER, HANDLE)
        ),
    )
    .expect("write node json");
    let output = run(&node, &["--node-json", &s(&node_file)]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn text_format_summarizes_for_people() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let output = run(&node, &["--format", "text"]);
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("orphaned_staged"), "{text}");
    assert!(text.contains(&s(gm(&global))), "{text}");
    assert!(text.contains("1 findings"), "{text}");
    assert!(serde_json::from_slice::<Value>(&output.stdout).is_err());
}

#[test]
fn every_flag_can_come_from_the_environment() {
    let mut node = FixtureNode::new();
    let global = node.stage_fs(DRIVER, HANDLE, Some("pvc-1"));
    node.mount("8:16", "/", gm(&global));
    let mountinfo = node.write_mountinfo();
    let output = bare_command()
        .env("CSI_GLOBALMOUNT_KUBELET_ROOT", node.layout.root())
        .env("CSI_GLOBALMOUNT_HOST_PREFIX", node.prefix())
        .env("CSI_GLOBALMOUNT_MOUNTINFO", &mountinfo)
        .env("CSI_GLOBALMOUNT_NODE_NAME", NODE)
        .env("CSI_GLOBALMOUNT_FORMAT", "json")
        .output()
        .expect("doctor runs");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = json(&output);
    assert_eq!(report["nodeName"], NODE);
    assert_eq!(report["globalVolumes"][0]["class"], "orphaned_staged");
}

#[test]
fn errors_exit_2() {
    let (node, _, _) = healthy();

    // A malformed mount table fails the whole run, naming the line.
    let bad_mountinfo = node.prefix().join("bad-mountinfo");
    std::fs::write(&bad_mountinfo, "1 0 8:1 / / rw - ext4\n").expect("write");
    let output = doctor_command(&node, &bad_mountinfo)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("line 1"), "{}", stderr(&output));
    assert!(output.stdout.is_empty());

    // A mount table that cannot be read.
    let output = doctor_command(&node, &node.prefix().join("absent"))
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));

    // A kubelet root that is not there must not look like a clean node.
    let mountinfo = node.write_mountinfo();
    let output = bare_command()
        .args(["--kubelet-root", "/var/lib/elsewhere", "--host-prefix"])
        .arg(node.prefix())
        .arg("--mountinfo")
        .arg(&mountinfo)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("/var/lib/elsewhere"),
        "{}",
        stderr(&output)
    );

    // VolumeAttachment names need the node name.
    let va = node.prefix().join("va.json");
    std::fs::write(&va, r#"{"items":[]}"#).expect("write");
    let output = run(&node, &["--volumeattachments-json", &s(&va)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("--node-name"),
        "{}",
        stderr(&output)
    );

    // Node JSON for another node than --node-name.
    let node_file = node.prefix().join("node.json");
    std::fs::write(
        &node_file,
        r#"{"kind":"Node","metadata":{"name":"node-b"}}"#,
    )
    .expect("write");
    let output = run(&node, &["--node-name", NODE, "--node-json", &s(&node_file)]);
    assert_eq!(output.status.code(), Some(2));

    // Unusable arguments.
    assert_eq!(run(&node, &["--format", "yaml"]).status.code(), Some(2));
    let output = bare_command()
        .args(["--kubelet-root", "relative/kubelet"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
}

/// Everything observable about a tree: type, mode, size, timestamps, owner,
/// content and link targets, keyed by relative path.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let content = if meta.is_file() {
                format!("{:?}", std::fs::read(&path).expect("read"))
            } else if meta.file_type().is_symlink() {
                format!("-> {:?}", std::fs::read_link(&path).expect("readlink"))
            } else {
                stack.push(path.clone());
                String::new()
            };
            out.insert(
                path.strip_prefix(root).expect("under root").to_path_buf(),
                format!(
                    "mode={:o} size={} mtime={}.{} ctime={}.{} uid={} {}",
                    meta.mode(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.ctime(),
                    meta.ctime_nsec(),
                    meta.uid(),
                    content
                ),
            );
        }
    }
    out
}

fn set_tree_writable(root: &Path, writable: bool) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read dir") {
                stack.push(entry.expect("entry").path());
            }
        }
        let mode = match (meta.is_dir(), writable) {
            (true, true) => 0o755,
            (true, false) => 0o555,
            (false, true) => 0o644,
            (false, false) => 0o444,
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

#[test]
fn b7_the_doctor_changes_nothing_on_the_node() {
    // Every kind of finding at once, so every code path runs.
    let (mut node, _, _) = healthy();
    let orphan = node.stage_fs(DRIVER, "vol-orphan", Some("pvc-orphan"));
    node.mount("8:32", "/", gm(&orphan));
    let broken = node.stage_fs(DRIVER, "vol-broken", Some("pvc-broken"));
    let pod = node.pod_fs_volume("uid-2", "pvc-broken", PodData::Empty);
    node.bind("8:48", gm(&broken), mnt(&pod));
    node.stage_block("pvc-b", "blk.csi.io", "blk-b");
    let legacy = node.layout.plugin_dir().join("pv/pvc-x");
    node.mkdir(gm(&legacy));
    let mountinfo = node.write_mountinfo();

    let kubelet_tree = node.host(node.layout.root());
    set_tree_writable(&kubelet_tree, false);
    let before = snapshot(node.prefix());
    let output = doctor_command(&node, &mountinfo)
        .args(["--format", "text"])
        .output()
        .expect("doctor runs");
    let json_output = doctor_command(&node, &mountinfo)
        .output()
        .expect("doctor runs");
    let after = snapshot(node.prefix());
    set_tree_writable(&kubelet_tree, true);

    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        json_output.status.code(),
        Some(1),
        "{}",
        stderr(&json_output)
    );
    assert_eq!(json(&json_output)["summary"]["globalVolumes"], 4);
    assert_eq!(before, after, "the doctor modified the node's files");
}
