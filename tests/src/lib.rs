//! Shared helpers for the end-to-end tests under `tests/tests/` and the load benchmark under
//! `tests/benches/`.

pub mod apiserver_order;
pub mod baseline;
pub mod bench_requests;
pub mod cluster;
pub mod router_call;
