//! The webhooks' integration tests, in one binary: the router in-process, the server over TLS
//! and as a process, its clients, its drain, its logs, and the binary's command line.

// Test code unwraps: a panic is a failed test with its location.
#![allow(clippy::unwrap_used)]

mod admission;
mod apiserver_load;
mod check;
mod clients;
mod flags;
mod hostile;
mod hostile_scale;
mod hostile_server;
mod lifecycle;
mod log_injection;
mod logging;
mod properties;
mod repair;
mod shutdown;
mod support;
mod tls;

// Counts the heap of the threads that ask for it, and only theirs: `hostile_scale` measures the
// answer to one review while the other tests run beside it.
#[global_allocator]
static HEAP: volume_health_test_kit::alloc::Counting = volume_health_test_kit::alloc::Counting;
