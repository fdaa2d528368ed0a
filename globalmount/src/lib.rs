//! KEP-6058 (CSI global mount reconstruction) discovery logic, and the
//! read-only node diagnostic built on it.
//!
//! Kubelet stages a CSI volume once per node under
//! `plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount` and bind
//! mounts it into each pod. When kubelet restarts it rebuilds its state from
//! the pod directories only, so a staged volume whose pod directory is gone
//! (#121937), or whose pod `vol_data.json` is unreadable (#101791), is
//! forgotten: never unstaged, and dropped from `volumesInUse`, so it can be
//! detached while still mounted. KEP-6058 adds a listing of the global
//! directories; this crate reproduces it and classifies what it finds.
//!
//! * [`voldata`]: Go-compatible `vol_data.json` decoding.
//! * [`layout`]: paths, hashing, escaping and derived names.
//! * [`mountinfo`], [`mountrefs`]: the mount table and mount references.
//! * [`discover`]: [`list_global_volumes`] with a reason for every skip.
//! * [`podlocal`]: the pod scan and the pod-local fallback.
//! * [`plan`]: what kubelet with the feature would register.
//! * [`gate`]: whether this node's kubelet has the feature's gate, so plans offer it only then.
//! * [`api`]: Node and VolumeAttachment JSON.
//! * [`classify`], [`report`]: the diagnosis, with a plan for each finding.
//! * [`escape`]: names and values from the node, made safe to print.
//! * [`inputs`]: one run from the files the doctor is pointed at.
//! * [`metrics`]: Prometheus metrics of runs, for the continuous mode.
//! * [`serve`]: the continuous mode's metrics port, bounded against idle clients.
//!
//! Nothing in this crate writes to the node, and the default file access
//! ([`fs::HostFs::non_blocking`]) never enters a mount point, so a dead NFS or
//! FUSE mount cannot hang it. [`fs::HostFs::with_stat_probe`] adds the one
//! stat kubelet's listing makes of a mounted `globalmount`, on a helper
//! thread with a timeout.

mod advice;
pub mod api;
pub mod classify;
pub mod discover;
pub mod escape;
pub mod fs;
pub mod gate;
pub mod inputs;
pub mod layout;
pub mod metrics;
pub mod mountinfo;
pub mod mountrefs;
pub mod plan;
pub mod podlocal;
pub mod report;
pub mod serve;
pub mod voldata;

#[cfg(feature = "fixture")]
pub mod fixture;
#[cfg(test)]
mod testfs;

pub use classify::{DiagnoseError, ExtraInputs, NodeInputs, diagnose, diagnose_with};
pub use discover::{GlobalVolume, Listing, Skip, SkipReason, VolumeMode, list_global_volumes};
pub use fs::{HostFs, NodeFs};
pub use layout::KubeletLayout;
pub use mountrefs::MountTable;
pub use report::{Report, VolumeClass};
