//! config: owned by the serving work.
