//! Behaviour tests for `csi-globalmount`, one test or more per statement of
//! the specification (A listing, B classification, E fallback, G plan), on
//! kubelet trees built in temporary directories, plus end-to-end runs of the
//! `csi-globalmount-doctor` binary.

mod classify;
mod cli;
mod fallback;
mod fixture;
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
