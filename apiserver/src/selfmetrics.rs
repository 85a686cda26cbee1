//! selfmetrics: owned by the serving work.
