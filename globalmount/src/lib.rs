//! KEP-6058 global-mount discovery (work in progress).
