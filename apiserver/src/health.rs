//! health: owned by the serving work.
