//! The conformance tests, one integration-test binary with a module per area (as
//! `apiserver/tests/it`): one link of the simulated cluster and the server instead of one per
//! area. Filter with `-E 'binary(it) & test(security::)'`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

mod controlplane;
mod credentials;
mod deploy;
mod kubectl;
mod rollout;
mod scrape;
mod security;
mod startup;
mod watch;
