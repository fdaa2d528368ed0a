//! What the test suites and benchmarks of the workspace share. It depends on no crate of the
//! product, so that each of them can take it as a dev-dependency.

pub mod alloc;
pub mod apiserver_order;
pub mod router_call;
