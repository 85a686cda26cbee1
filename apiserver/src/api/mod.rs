//! The metrics.k8s.io API: owned by the API work.
