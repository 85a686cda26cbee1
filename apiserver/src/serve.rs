//! serve: owned by the serving work.
