//! Shared helpers for the end-to-end tests under `tests/tests/`.
