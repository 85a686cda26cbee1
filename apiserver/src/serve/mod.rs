//! serve: owned by the serving work.
pub mod cert;
