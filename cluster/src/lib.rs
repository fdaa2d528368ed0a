//! Checks of a live cluster, through its apiserver.
//!
//! - [`verify`]: proves that the apiserver reaches each installed entry of this project (a
//!   webhook entry or a native policy), by server-side dry-run writes only that entry can
//!   answer, and says which mode is installed.
//! - [`audit`]: runs the offline checks over the objects a cluster holds, and writes what it
//!   finds where operators look.
//!
//! The program chooses the Kubernetes version of the types (k8s-openapi's `v1_37` feature).

mod apiserver;
pub mod audit;
mod client;
pub mod verify;

pub use apiserver::{RequestError, warning_text};
pub use client::{ClientError, RunError, client, run_with_client};
