//! `vol_data.json` files no kubelet writes: a FIFO (opening it for reading
//! would wait for a writer for ever), a huge file, a symbolic link. Each is a
//! finding about its directory; none hangs the run, crashes it, or is read
//! past the bound.

use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use csi_globalmount::voldata::VOL_DATA_FILE;
use csi_globalmount::{Report, SkipReason};

use crate::fixture::{FixtureNode, PodData, gm, s};

const EBS: &str = "ebs.csi.aws.com";

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The diagnosis of `node`, or a failure if it does not finish in time.
fn diagnose_in_time(node: FixtureNode) -> Report {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(node.diagnose());
    });
    receiver
        .recv_timeout(Duration::from_secs(30))
        .expect("the diagnosis finishes instead of waiting on the file")
}

/// A mounted global volume whose data file is replaced by `make(path)`.
fn global_volume_with(make: impl FnOnce(&FixtureNode, &Path)) -> (Report, String) {
    let mut node = FixtureNode::new();
    let dir = node.stage_fs(EBS, "vol-0hostile", None);
    let file = node.host(dir.join(VOL_DATA_FILE));
    std::fs::remove_file(&file).expect("remove the data file");
    make(&node, &file);
    node.mount("259:1", "/", gm(&dir));
    (diagnose_in_time(node), s(dir))
}

fn the_skip_says(report: &Report, dir: &str, detail: &str) {
    let skip = report
        .skipped
        .iter()
        .find(|skip| skip.path == dir)
        .unwrap_or_else(|| panic!("{dir} not skipped: {:#?}", report.skipped));
    assert_eq!(skip.reason, SkipReason::VoldataUnreadable);
    assert!(skip.detail.contains(detail), "{}", skip.detail);
    assert!(skip.mounted);
    assert!(report.has_findings());
}

#[test]
fn a_fifo_as_vol_data_json_is_a_finding_not_a_hang() {
    let (report, dir) = global_volume_with(|_, file| mkfifo(file));
    the_skip_says(&report, &dir, "a FIFO, not a regular file");
}

#[test]
fn a_huge_vol_data_json_is_a_finding_and_is_not_read() {
    let (report, dir) = global_volume_with(|_, file| {
        // Sparse: a gigabyte that costs no disk, and would cost a gigabyte
        // of memory if read whole.
        let huge = std::fs::File::create(file).expect("create");
        huge.set_len(1 << 30).expect("set_len");
    });
    the_skip_says(&report, &dir, "larger than 65536 bytes");
}

#[test]
fn a_symlinked_vol_data_json_is_a_finding_and_is_not_followed() {
    let (report, dir) = global_volume_with(|node, file| {
        let elsewhere = node.prefix().join("elsewhere.json");
        std::fs::write(
            &elsewhere,
            r#"{"driverName":"ebs.csi.aws.com","volumeHandle":"vol-0hostile"}"#,
        )
        .expect("write");
        std::os::unix::fs::symlink(&elsewhere, file).expect("symlink");
    });
    the_skip_says(&report, &dir, "a symbolic link, not followed");
}

#[test]
fn a_fifo_as_a_pods_vol_data_json_is_reported_unreadable_not_a_hang() {
    let node = FixtureNode::new();
    let pod = node.pod_fs_volume("uid-fifo", "pvc-fifo", PodData::Missing);
    mkfifo(&node.host(pod.join(VOL_DATA_FILE)));
    let report = diagnose_in_time(node);
    let local = report
        .pod_local
        .iter()
        .find(|p| p.path == s(&pod))
        .unwrap_or_else(|| panic!("{:#?}", report.pod_local));
    assert!(
        local.voldata_error.contains("a FIFO, not a regular file"),
        "{}",
        local.voldata_error
    );
}
