//! Behaviour tests for `csi-globalmount`, one test or more per statement of
//! the specification (A listing, B classification, E fallback, G plan), on
//! kubelet trees built in temporary directories, plus end-to-end runs of the
//! `csi-globalmount-doctor` binary.

mod advice;
mod classify;
mod cli;
mod fallback;
mod fixture_files;
mod hostile_files;
mod hostile_names;
mod listing;
mod manifest;
mod metrics_flood;
mod owners;
mod propagation;
mod real_nodes;
mod scaling;
mod stuck_probes;
mod traversal;

use csi_globalmount::fixture;

/// The address the doctor announces on its first line of standard error
/// (`... http://ADDR/metrics`).
fn metrics_address(stderr: &mut impl std::io::BufRead) -> String {
    let mut announce = String::new();
    stderr
        .read_line(&mut announce)
        .expect("the metrics address");
    announce
        .trim()
        .rsplit("http://")
        .next()
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("address in the announcement")
        .to_owned()
}
