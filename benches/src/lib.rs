//! benches.
