//! Validation benchmarks (filled in below).

fn main() {}
