//! conformance.
