//! The binary's command line: flags with metrics-server's names, defaults, help groups and
//! validation rules (metrics-server.md §1), plus a few of our own, marked as such in their
//! help, and their translation into the typed [`Settings`] the library runs with.
//!
//! Nothing else in the library depends on this module: the binary's `main` parses with it,
//! and so does the conformance harness, which starts replicas with a Deployment's arguments.
//!
//! [`Flags::validate`] reports the first violated rule, as metrics-server's `start.go` does;
//! [`Flags::settings`] validates and translates.

mod duration;
mod groups;
pub mod logging;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use scraper::selector::{LabelSelector, SelectorError};

use crate::config::{ServingCert, Settings};

pub use duration::{ByteSize, GoDuration, ParseError};
pub use groups::{
    Audit, Authentication, Authorization, Features, Generic, Kubelet, KubeletSource, Logging,
    LoggingFormat, MetricsServer, SecureServing, TlsVersion,
};

/// Every flag of the `metrics-server` binary, grouped as metrics-server groups them in `--help`.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "metrics-server",
    about = "Launch metrics-server",
    long_about = "Launch metrics-server: scrapes kubelets and serves the metrics.k8s.io API \
                  (v1 and v1beta1) behind kubectl top, the HPA and the VPA.",
    disable_version_flag = true,
    args_override_self = true,
    max_term_width = 100
)]
pub struct Flags {
    /// Metrics server flags.
    #[command(flatten)]
    pub server: MetricsServer,
    /// Generic flags.
    #[command(flatten)]
    pub generic: Generic,
    /// Kubelet client flags.
    #[command(flatten)]
    pub kubelet: Kubelet,
    /// Apiserver secure serving flags.
    #[command(flatten)]
    pub serving: SecureServing,
    /// Apiserver authentication flags.
    #[command(flatten)]
    pub authentication: Authentication,
    /// Apiserver authorization flags.
    #[command(flatten)]
    pub authorization: Authorization,
    /// Apiserver audit log flags.
    #[command(flatten)]
    pub audit: Audit,
    /// Features flags.
    #[command(flatten)]
    pub features: Features,
    /// Logging flags.
    #[command(flatten)]
    pub logging: Logging,
}

/// A configuration that cannot run; the message is metrics-server's where it has one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Two flags that exclude each other.
    #[error("cannot use both --{0} and --{1}")]
    Conflict(&'static str, &'static str),
    /// Only one of `--kubelet-client-key` / `--kubelet-client-certificate`.
    #[error("need both --kubelet-client-key and --kubelet-client-certificate")]
    KubeletKeyPair,
    /// `--kubelet-request-timeout` is zero.
    #[error("kubelet-request-timeout should be positive")]
    RequestTimeout,
    /// `--metric-resolution` under 10s.
    #[error("metric-resolution should be a time duration at least 10s, but value {0} provided")]
    ResolutionTooShort(GoDuration),
    /// `--metric-resolution` x 9/10 below `--kubelet-request-timeout`.
    #[error("metric-resolution should be larger than kubelet-request-timeout")]
    ResolutionBelowTimeout,
    /// Only one of `--tls-cert-file` / `--tls-private-key-file`.
    #[error("need both --tls-cert-file and --tls-private-key-file")]
    ServingKeyPair,
    /// `--node-selector` did not parse.
    #[error("invalid --node-selector: {0}")]
    NodeSelector(#[source] SelectorError),
    /// A flag of ours out of range.
    #[error("--{0} must be positive")]
    NotPositive(&'static str),
    /// A percentage flag of ours outside 1..=99.
    #[error("--{0} must be between 1 and 99")]
    Percent(&'static str),
    /// `--tls-cipher-suites` or `--tls-curve-preferences` named something unknown.
    #[error(transparent)]
    Tls(#[from] tls::policy::PolicyError),
    /// An audit log flag out of range (`AuditOptions.Validate`).
    #[error("{0}")]
    Audit(String),
    /// A `--tls-sni-cert-key` value that is not `cert,key[:patterns]`.
    #[error(
        "invalid argument {0:?} for \"--tls-sni-cert-key\" flag: expected comma separated \
         certificate and key file paths"
    )]
    SniCertKey(String),
}

/// The smallest `--metric-resolution` metrics-server accepts.
pub const MIN_RESOLUTION: Duration = Duration::from_secs(10);

impl Flags {
    /// Checks every rule and returns the first violation, in metrics-server's order: the
    /// kubelet client rules, then the resolution rules, then ours.
    pub fn validate(&self) -> Result<(), Error> {
        let k = &self.kubelet;
        let ca_file = k.kubelet_certificate_authority.is_some();
        let ca_text = k.kubelet_certificate_authority_text.is_some();
        let key = k.kubelet_client_key.is_some();
        let cert = k.kubelet_client_certificate.is_some();
        let insecure = k.kubelet_insecure_tls;
        let plain = k.deprecated_kubelet_completely_insecure;
        let rules: [(bool, fn() -> Error); 10] = [
            (ca_file && ca_text, || {
                Error::Conflict(
                    "kubelet-certificate-authority",
                    "kubelet-certificate-authority-text",
                )
            }),
            (ca_text && insecure, || {
                Error::Conflict("kubelet-certificate-authority-text", "kubelet-insecure-tls")
            }),
            (ca_file && insecure, || {
                Error::Conflict("kubelet-certificate-authority", "kubelet-insecure-tls")
            }),
            (key != cert, || Error::KubeletKeyPair),
            (key && plain, || {
                Error::Conflict(
                    "kubelet-client-key",
                    "deprecated-kubelet-completely-insecure",
                )
            }),
            (cert && plain, || {
                Error::Conflict(
                    "kubelet-client-certificate",
                    "deprecated-kubelet-completely-insecure",
                )
            }),
            (insecure && plain, || {
                Error::Conflict(
                    "kubelet-insecure-tls",
                    "deprecated-kubelet-completely-insecure",
                )
            }),
            (ca_text && plain, || {
                Error::Conflict(
                    "kubelet-certificate-authority-text",
                    "deprecated-kubelet-completely-insecure",
                )
            }),
            (ca_file && plain, || {
                Error::Conflict(
                    "kubelet-certificate-authority",
                    "deprecated-kubelet-completely-insecure",
                )
            }),
            (k.kubelet_request_timeout.0.is_zero(), || {
                Error::RequestTimeout
            }),
        ];
        if let Some((_, error)) = rules.iter().find(|(violated, _)| *violated) {
            return Err(error());
        }
        let resolution = self.server.metric_resolution;
        if resolution.0 < MIN_RESOLUTION {
            return Err(Error::ResolutionTooShort(resolution));
        }
        if resolution.0 * 9 / 10 < k.kubelet_request_timeout.0 {
            return Err(Error::ResolutionBelowTimeout);
        }
        let s = &self.serving;
        if s.tls_cert_file.is_some() != s.tls_private_key_file.is_some() {
            return Err(Error::ServingKeyPair);
        }
        self.node_selector()?;
        if self.server.scrape_max_in_flight == 0 {
            return Err(Error::NotPositive("scrape-max-in-flight"));
        }
        if k.kubelet_max_body_bytes.0 == 0 {
            return Err(Error::NotPositive("kubelet-max-body-bytes"));
        }
        if !(1..=99).contains(&self.generic.autoscaler_inflight_percent) {
            return Err(Error::Percent("autoscaler-inflight-percent"));
        }
        if self.generic.request_timeout.0.is_zero() {
            return Err(Error::NotPositive("request-timeout"));
        }
        if self.serving.max_connections == 0 {
            return Err(Error::NotPositive("max-connections"));
        }
        self.sni_certs()?;
        self.tls_policy()?;
        Ok(())
    }

    /// `--tls-sni-cert-key`, each `cert,key[:pattern,...]`.
    pub fn sni_certs(&self) -> Result<Vec<crate::config::SniCert>, Error> {
        self.serving
            .tls_sni_cert_key
            .iter()
            .filter(|v| !v.trim().is_empty())
            .map(|v| sni_cert(v).ok_or_else(|| Error::SniCertKey(v.clone())))
            .collect()
    }

    /// What `--tls-min-version`, `--tls-cipher-suites` and `--tls-curve-preferences` ask of
    /// the serving config, with the names left out because this server does not implement
    /// them (to be logged).
    pub fn tls_policy(&self) -> Result<(tls::policy::Policy, Vec<String>), Error> {
        let s = &self.serving;
        let suites = tls::policy::cipher_suites(&s.tls_cipher_suites)?;
        let curves = tls::policy::curves(&s.tls_curve_preferences)?;
        let given = |v: &[String]| v.iter().any(|n| !n.trim().is_empty());
        let policy = tls::policy::Policy {
            tls13_only: s.tls_min_version == Some(TlsVersion::Tls13),
            tls12_suites: given(&s.tls_cipher_suites).then_some(suites.offered),
            groups: given(&s.tls_curve_preferences).then_some(curves.offered),
        };
        let left_out = suites
            .unsupported
            .into_iter()
            .chain(curves.unsupported)
            .collect();
        Ok((policy, left_out))
    }

    /// The flags set on the command line that change nothing in this server (metrics-server
    /// accepts them, so they are accepted too, so that a Deployment's arguments carry over;
    /// the binary logs them at start).
    pub fn without_effect(&self) -> Vec<&'static str> {
        let (g, s, a) = (&self.generic, &self.serving, &self.audit);
        let (f, l) = (&self.features, &self.logging);
        let given = |v: &[String]| v.iter().any(|n| !n.trim().is_empty());
        let set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        [
            ("advertise-address", g.advertise_address.is_some()),
            ("cors-allowed-origins", given(&g.cors_allowed_origins)),
            ("emulated-version", given(&g.emulated_version)),
            (
                "emulation-forward-compatible",
                g.emulation_forward_compatible,
            ),
            ("external-hostname", set(&g.external_hostname)),
            ("feature-gates", given(&g.feature_gates)),
            ("livez-grace-period", !g.livez_grace_period.0.is_zero()),
            (
                "min-compatibility-version",
                given(&g.min_compatibility_version),
            ),
            (
                "runtime-config-emulation-forward-compatible",
                g.runtime_config_emulation_forward_compatible,
            ),
            (
                "storage-initialization-timeout",
                g.storage_initialization_timeout.0 != Duration::from_secs(60),
            ),
            // A policy without a backend, or a backend without a policy, records nothing (as
            // in Go).
            (
                "audit-policy-file",
                set(&a.audit_policy_file)
                    && !set(&a.audit_log_path)
                    && !set(&a.audit_webhook_config_file),
            ),
            (
                "audit-log-path",
                set(&a.audit_log_path) && !set(&a.audit_policy_file),
            ),
            (
                "audit-webhook-config-file",
                set(&a.audit_webhook_config_file) && !set(&a.audit_policy_file),
            ),
            ("debug-socket-path", set(&f.debug_socket_path)),
            ("contention-profiling", f.contention_profiling),
            (
                "log-json-info-buffer-size",
                l.log_json_info_buffer_size.0 != 0,
            ),
            (
                "log-text-info-buffer-size",
                l.log_text_info_buffer_size.0 != 0,
            ),
            ("vmodule", !l.vmodule.trim().is_empty()),
            ("permit-address-sharing", s.permit_address_sharing),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    /// The parsed `--node-selector`.
    pub fn node_selector(&self) -> Result<LabelSelector, Error> {
        LabelSelector::parse(&self.kubelet.node_selector).map_err(Error::NodeSelector)
    }

    /// `--metric-resolution`.
    pub fn resolution(&self) -> Duration {
        self.server.metric_resolution.0
    }

    /// `--metric-staleness`, defaulting to 2 x resolution.
    pub fn staleness(&self) -> Duration {
        self.server
            .metric_staleness
            .map_or(self.resolution() * 2, |d| d.0)
    }

    /// `--readiness-timeout`, defaulting to 2 x resolution; `None` when set to `0s` (never).
    pub fn readiness_timeout(&self) -> Option<Duration> {
        let timeout = self
            .server
            .readiness_timeout
            .map_or(self.resolution() * 2, |d| d.0);
        Some(timeout).filter(|t| !t.is_zero())
    }

    /// `--cold-store-window`, defaulting to 2 x resolution and at least 1m; zero: never.
    pub fn cold_store_window(&self) -> Duration {
        self.generic
            .cold_store_window
            .map_or(crate::config::cold_store_window(self.resolution()), |d| d.0)
    }

    /// The audit settings: `--audit-policy-file` with the log backend (`--audit-log-path`)
    /// and the webhook backend (`--audit-webhook-config-file`), checked as
    /// `AuditOptions.Validate` checks them; `None` unless the policy and a backend are given
    /// (either alone records nothing, as in Go).
    pub fn audit(&self) -> Result<Option<crate::audit::Config>, Error> {
        let a = &self.audit;
        let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        let Some(policy) = given(&a.audit_policy_file) else {
            return Ok(None);
        };
        let log = given(&a.audit_log_path)
            .map(|path| self.audit_log(path))
            .transpose()?;
        let webhook = given(&a.audit_webhook_config_file)
            .map(|file| self.audit_webhook(file))
            .transpose()?;
        if log.is_none() && webhook.is_none() {
            return Ok(None);
        }
        Ok(Some(crate::audit::Config {
            policy_file: policy.into(),
            log,
            webhook,
        }))
    }

    /// The log backend's flags.
    fn audit_log(&self, path: String) -> Result<crate::audit::Log, Error> {
        let a = &self.audit;
        for (name, value) in [
            ("audit-log-maxage", a.audit_log_maxage),
            ("audit-log-maxbackup", a.audit_log_maxbackup),
            ("audit-log-maxsize", a.audit_log_maxsize),
        ] {
            if value < 0 {
                return Err(Error::Audit(format!(
                    "--{name} {value} can't be a negative number"
                )));
            }
        }
        audit_version("log", &a.audit_log_version)?;
        let mode = audit_mode(
            "log",
            &a.audit_log_mode,
            a.audit_log_batch_buffer_size,
            a.audit_log_batch_max_size,
            None,
        )?;
        let destination = if path == "-" {
            crate::audit::Destination::Stdout
        } else {
            let count = |v: i64| u64::try_from(v).unwrap_or(0);
            // lumberjack: a size of 0 is its default, 100 MB.
            let megabytes = match count(a.audit_log_maxsize) {
                0 => 100,
                n => n,
            };
            crate::audit::Destination::File(
                path.into(),
                crate::audit::logfile::Rotation {
                    max_bytes: megabytes.saturating_mul(1024 * 1024),
                    max_backups: usize::try_from(count(a.audit_log_maxbackup))
                        .unwrap_or(usize::MAX),
                    max_age: Some(count(a.audit_log_maxage))
                        .filter(|days| *days > 0)
                        .map(|days| Duration::from_secs(days.saturating_mul(86_400))),
                    compress: a.audit_log_compress,
                },
            )
        };
        Ok(crate::audit::Log {
            destination,
            format: if a.audit_log_format == "legacy" {
                crate::audit::Format::Legacy
            } else {
                crate::audit::Format::Json
            },
            mode,
        })
    }

    /// The webhook backend's flags.
    fn audit_webhook(&self, file: String) -> Result<crate::audit::webhook::Config, Error> {
        let a = &self.audit;
        audit_version("webhook", &a.audit_webhook_version)?;
        let throttle = a.audit_webhook_batch_throttle_enable.then_some((
            a.audit_webhook_batch_throttle_qps,
            a.audit_webhook_batch_throttle_burst,
        ));
        let mode = audit_mode(
            "webhook",
            &a.audit_webhook_mode,
            a.audit_webhook_batch_buffer_size,
            a.audit_webhook_batch_max_size,
            throttle,
        )?;
        Ok(crate::audit::webhook::Config {
            kubeconfig: file.into(),
            mode,
            max_batch_size: usize::try_from(a.audit_webhook_batch_max_size).unwrap_or(1),
            max_batch_wait: a.audit_webhook_batch_max_wait.0,
            throttle: throttle.map(|(qps, burst)| (qps, u32::try_from(burst).unwrap_or(u32::MAX))),
            initial_backoff: a.audit_webhook_initial_backoff.0,
        })
    }

    /// Validates the flags and translates them into the library's settings.
    pub fn settings(&self) -> Result<Settings, Error> {
        self.validate()?;
        let (k, g, s) = (&self.kubelet, &self.generic, &self.serving);
        let (authn, authz) = (&self.authentication, &self.authorization);
        let review_limits = crate::auth::ReviewLimits {
            qps: authz.delegated_review_qps,
            per_source_qps: authz.delegated_review_qps_per_source,
        };
        let bytes = |b: ByteSize| usize::try_from(b.0).unwrap_or(usize::MAX);
        let non_empty_path =
            |p: &Option<std::path::PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
        Ok(Settings {
            audit: self.audit()?,
            kubeconfig: self.server.kubeconfig.clone(),
            authentication_kubeconfig: authn.authentication_kubeconfig.clone(),
            authorization_kubeconfig: authz.authorization_kubeconfig.clone(),
            scrape: scraper::scrape::Config {
                resolution: self.resolution(),
                request_timeout: k.kubelet_request_timeout.0,
                max_in_flight: self.server.scrape_max_in_flight,
                slot_hold: scraper::scrape::DEFAULT_SLOT_HOLD,
                source: k.kubelet_source.into(),
                summary_warmup: k.kubelet_summary_warmup,
                address_types: k.kubelet_preferred_address_types.clone(),
                kubelet_port: k.kubelet_port,
                use_node_status_port: k.kubelet_use_node_status_port,
                node_selector: self.node_selector()?,
                threads: Vec::new(),
            },
            store: scraper::store::Config {
                staleness: self.staleness(),
                ..scraper::store::Config::new(self.resolution())
            },
            kubelet: crate::credentials::kubelet::Config {
                ca_file: k.kubelet_certificate_authority.clone(),
                ca_text: k.kubelet_certificate_authority_text.clone(),
                client_cert: k
                    .kubelet_client_certificate
                    .clone()
                    .zip(k.kubelet_client_key.clone()),
                insecure_tls: k.kubelet_insecure_tls,
            },
            kubelet_client: scraper::kubelet::client::Config {
                plain_http: k.deprecated_kubelet_completely_insecure,
                timeout: k.kubelet_request_timeout.0,
                max_body_bytes: bytes(k.kubelet_max_body_bytes),
                max_bodies_bytes: bytes(k.kubelet_max_bodies_bytes),
                keep_alive: k.kubelet_keep_alive,
                compression: k.kubelet_compression,
                ..scraper::kubelet::client::Config::default()
            },
            readiness_timeout: self.readiness_timeout(),
            shed: crate::config::Shed {
                max_in_flight: usize::try_from(g.max_requests_inflight).unwrap_or(usize::MAX),
                autoscaler_percent: g.autoscaler_inflight_percent,
                queue_length_per_user: usize::try_from(g.request_queue_length_per_user)
                    .unwrap_or(usize::MAX),
                queue_wait: g.request_queue_wait.0,
                cold_store_window: self.cold_store_window(),
                ..crate::config::Shed::default()
            },
            listen: crate::config::Listen {
                address: SocketAddr::new(s.bind_address, s.secure_port),
                cert: match (&s.tls_cert_file, &s.tls_private_key_file) {
                    (Some(cert), Some(key)) => ServingCert::Files {
                        cert: cert.clone(),
                        key: key.clone(),
                    },
                    _ => ServingCert::SelfSigned {
                        dir: s.cert_dir.clone(),
                        sans: s.serving_cert_sans.clone(),
                    },
                },
                reuse_port: s.permit_port_sharing,
                sni: self.sni_certs()?,
            },
            serving: crate::serve::Config {
                http2: !s.disable_http2_serving,
                http2_max_streams: s.http2_max_streams_per_connection,
                tls: self.tls_policy()?.0,
                max_connections: s.max_connections,
                request_timeout: g.request_timeout.0,
                hsts: hsts(&g.strict_transport_security_directives),
                shutdown_send_retry_after: g.shutdown_send_retry_after,
                goaway_chance: g.goaway_chance,
                ..crate::serve::Config::default()
            },
            authn: crate::auth::AuthnConfig {
                client_ca_file: non_empty_path(&authn.client_ca_file),
                requestheader_client_ca_file: non_empty_path(&authn.requestheader_client_ca_file),
                requestheader_allowed_names: non_empty(&authn.requestheader_allowed_names),
                requestheader_username_headers: non_empty(&authn.requestheader_username_headers),
                requestheader_uid_headers: non_empty(&authn.requestheader_uid_headers),
                requestheader_group_headers: non_empty(&authn.requestheader_group_headers),
                requestheader_extra_headers_prefix: non_empty(
                    &authn.requestheader_extra_headers_prefix,
                ),
                token_webhook_cache_ttl: authn.authentication_token_webhook_cache_ttl.0,
                skip_lookup: authn.authentication_skip_lookup,
                tolerate_lookup_failure: authn.authentication_tolerate_lookup_failure,
                review_limits,
                ..crate::auth::AuthnConfig::default()
            },
            // `system:masters` is always allowed, as k8s.io/apiserver's library default.
            authz: crate::auth::AuthzConfig {
                always_allow_paths: non_empty(&authz.authorization_always_allow_paths),
                authorized_ttl: authz.authorization_webhook_cache_authorized_ttl.0,
                unauthorized_ttl: authz.authorization_webhook_cache_unauthorized_ttl.0,
                review_limits,
                ..crate::auth::AuthzConfig::default()
            },
            shutdown_delay: g.shutdown_delay_duration.0,
            debug_flags: self.features.profiling,
        })
    }
}

/// One `--tls-sni-cert-key`: `cert,key` or `cert,key:pattern,pattern`
/// (k8s.io/component-base's `NamedCertKey`); `None` unless both paths are there.
fn sni_cert(value: &str) -> Option<crate::config::SniCert> {
    let (pair, patterns) = value.split_once(':').unwrap_or((value, ""));
    let (cert, key) = pair.split_once(',')?;
    let (cert, key) = (cert.trim(), key.trim());
    if cert.is_empty() || key.is_empty() || key.contains(',') {
        return None;
    }
    Some(crate::config::SniCert {
        cert: cert.into(),
        key: key.into(),
        names: non_empty(&patterns.split(',').map(str::to_owned).collect::<Vec<_>>()),
    })
}

/// The `Strict-Transport-Security` value of `--strict-transport-security-directives`
/// (k8s.io/apiserver joins them with "; "); `None` when there are none.
/// `validateBackendMode` and `validateBackendBatchOptions` for `plugin` (`log`, `webhook`).
fn audit_mode(
    plugin: &str,
    mode: &str,
    buffer: i64,
    max_batch: i64,
    throttle: Option<(f64, i64)>,
) -> Result<crate::audit::Mode, Error> {
    match mode {
        "blocking" => return Ok(crate::audit::Mode::Blocking),
        "blocking-strict" => return Ok(crate::audit::Mode::BlockingStrict),
        _ => {}
    }
    let positive = |what: &str, value: String| {
        Err(Error::Audit(format!(
            "invalid audit batch {plugin} {what} {value}, must be a positive number"
        )))
    };
    if buffer <= 0 {
        return positive("buffer size", buffer.to_string());
    }
    if max_batch <= 0 {
        return positive("max batch size", max_batch.to_string());
    }
    if let Some((qps, burst)) = throttle {
        if qps <= 0.0 {
            return positive("throttle QPS", qps.to_string());
        }
        if burst <= 0 {
            return positive("throttle burst", burst.to_string());
        }
    }
    Ok(crate::audit::Mode::Batch {
        buffer: usize::try_from(buffer).unwrap_or(usize::MAX),
    })
}

/// `--audit-{plugin}-version`: only `audit.k8s.io/v1` is served.
fn audit_version(plugin: &str, version: &str) -> Result<(), Error> {
    if version == "audit.k8s.io/v1" {
        Ok(())
    } else {
        Err(Error::Audit(format!(
            "invalid audit {plugin} version {version}, only audit.k8s.io/v1 is supported"
        )))
    }
}

fn hsts(directives: &[String]) -> Option<http::HeaderValue> {
    let directives = non_empty(directives);
    if directives.is_empty() {
        return None;
    }
    http::HeaderValue::from_str(&directives.join("; ")).ok()
}

/// A string-list flag without empty items: `--flag=` is an empty list, as pflag's
/// `StringSlice` reads it, not a list of one empty string.
fn non_empty(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}
