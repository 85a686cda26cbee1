//! Integration tests: the real server in-process on 127.0.0.1:0 over TLS, and the binary.

#![allow(clippy::unwrap_used)]
// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

mod audit;
mod binary;
mod bounds;
mod certs;
mod gzip;
mod h2;
mod health;
mod http;
mod k8s_proto;
mod metrics;
mod protobuf;
mod security;
mod serving;
mod shed;
mod support;
