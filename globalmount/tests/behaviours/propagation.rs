//! The doctor's pod must not keep a volume mounted after kubelet unstages it.
//!
//! A container runtime gives the pod a bind of the host's kubelet root in the
//! pod's own mount namespace: `rprivate` for `mountPropagation: None`, `rslave`
//! for `HostToContainer`. This test builds that on real mounts: a shared tmpfs
//! as the kubelet root, an ext4 loop device staged below it, and a child
//! process in its own mount namespace holding the bind with the propagation the
//! DaemonSet manifest names. The host then unmounts the staged volume, and the
//! device must be free (an `O_EXCL` open succeeds). With `None`, for contrast,
//! the copy in the child keeps the filesystem alive and the open fails with
//! EBUSY. Needs root (mounts, loop devices, namespaces).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::manifest::kubelet_root_propagation;

fn is_root() -> bool {
    // The owner of this process's /proc entry is its effective user.
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0
}

fn sh(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A mount, lazily unmounted when dropped (it may already be gone).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// A loop device, detached when dropped.
struct LoopDevice(String);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).output();
    }
}

/// The "container": a process in its own mount namespace, alive until its
/// stdin closes, killed when dropped.
struct Container {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for Container {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the runtime does for a hostPath volume with this propagation.
fn runtime_propagation(mode: &str) -> &'static str {
    match mode {
        "HostToContainer" => "rslave",
        "Bidirectional" => "rshared",
        "None" => "rprivate",
        other => panic!("unknown mountPropagation {other:?}"),
    }
}

/// Starts a process that binds `kubelet_root` at `at` in a new mount
/// namespace with `mode`'s propagation, and returns once the staged volume
/// is visible there.
fn container(kubelet_root: &Path, at: &Path, staged_below: &Path, mode: &str) -> Container {
    // The namespace's copies of the host's mounts are slaves, so nothing made
    // in it reaches the host; the bind then gets the pod's propagation.
    let script = format!(
        "mount --rbind '{root}' '{at}' && mount --make-{propagation} '{at}' \
         && mountpoint -q '{at}/{staged}' && echo ready && read _",
        root = kubelet_root.display(),
        at = at.display(),
        propagation = runtime_propagation(mode),
        staged = staged_below.display(),
    );
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "slave", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("unshare runs");
    let stdin = child.stdin.take();
    let mut ready = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout)
        .read_line(&mut ready)
        .expect("container output");
    let container = Container { child, stdin };
    assert_eq!(
        ready.trim(),
        "ready",
        "the container did not see the volume"
    );
    container
}

/// Whether the device can be opened exclusively: a block device whose
/// filesystem is mounted anywhere, in any namespace, gives EBUSY.
fn device_busy(device: &str) -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(device)
    {
        Ok(_) => false,
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => true,
        Err(e) => panic!("opening {device}: {e}"),
    }
}

/// Stages an ext4 volume below a shared kubelet root, starts the container
/// with `mode`, unmounts the volume on the host, and says whether its device
/// is still busy.
fn busy_after_unstage(mode: &str) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("kubelet");
    let in_container = dir.path().join("container-kubelet");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::create_dir_all(&in_container).expect("mkdir");
    let root_s = root.to_str().expect("utf-8 path");
    sh("mount", &["-t", "tmpfs", "kubelet-root", root_s]);
    let _root_mount = Mounted(root.clone());
    // A host with systemd has its mounts shared, so unmounts propagate.
    sh("mount", &["--make-shared", root_s]);

    let image = dir.path().join("disk.img");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(16 << 20))
        .expect("image");
    let image_s = image.to_str().expect("utf-8 path");
    sh("mkfs.ext4", &["-q", "-F", image_s]);
    let device = LoopDevice(sh("losetup", &["--find", "--show", image_s]));

    let staged_below = Path::new("plugins/kubernetes.io/csi/ebs.csi.aws.com")
        .join(csi_globalmount::layout::sha256_hex("vol-0propagation"))
        .join("globalmount");
    let staged = root.join(&staged_below);
    std::fs::create_dir_all(&staged).expect("mkdir");
    sh("mount", &[&device.0, staged.to_str().expect("utf-8 path")]);
    let staged_mount = Mounted(staged.clone());
    assert!(device_busy(&device.0), "a mounted device must be busy");

    let container = container(&root, &in_container, &staged_below, mode);
    // Kubelet unstages the volume.
    sh("umount", &[staged.to_str().expect("utf-8 path")]);
    let busy = device_busy(&device.0);
    drop(container);
    drop(staged_mount);
    // With the container gone, nothing may hold the device in either case.
    assert!(
        !device_busy(&device.0),
        "the device stays busy after the container exits"
    );
    busy
}

#[test]
fn an_unstaged_volume_is_not_kept_mounted_by_the_doctors_pod() {
    if !is_root() {
        eprintln!("skipping: needs root to mount, set up loop devices and namespaces");
        return;
    }
    let mode = kubelet_root_propagation();
    assert!(
        !busy_after_unstage(&mode),
        "with mountPropagation {mode}, the doctor's pod keeps the unstaged volume's device busy"
    );
    // The contrast shows the test can tell: propagation None pins the device.
    assert!(
        busy_after_unstage("None"),
        "with mountPropagation None the device should stay busy"
    );
}
