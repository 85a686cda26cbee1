//! The typed configuration [`run`](crate::run()) takes: [`Settings`], one plain value per part
//! (the scrape loop's, the store's, the kubelet client's, load shedding's, serving's,
//! delegated authentication's and authorization's). The binary builds it from its flags
//! ([`cli`](crate::cli)); tests and benches build it as a value.
//!
//! [`Settings::default`] is what metrics-server's flag defaults mean; `cli`'s tests check that
//! parsing no flags gives exactly it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use scraper::selector::LabelSelector;

use crate::auth::{AuthnConfig, AuthzConfig};
use crate::credentials::kubelet::Config as KubeletConfig;

/// `--kubelet-preferred-address-types`' default, in priority order.
pub const DEFAULT_ADDRESS_TYPES: &str = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP";
/// `--cert-dir`'s default.
pub const DEFAULT_CERT_DIR: &str = "apiserver.local.config/certificates";
/// `--serving-cert-sans`' default.
pub const DEFAULT_SERVING_CERT_SANS: &str = "localhost,127.0.0.1,metrics-server,\
    metrics-server.kube-system,metrics-server.kube-system.svc,\
    metrics-server.kube-system.svc.cluster.local";
/// `--metric-resolution`'s default.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(60);
/// `--secure-port`'s default.
pub const DEFAULT_SECURE_PORT: u16 = 443;

/// Everything [`run`](crate::run()) needs to know.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The kubeconfig of the Kubernetes API (`--kubeconfig`); `None`: in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig for TokenReview and the authentication ConfigMap
    /// (`--authentication-kubeconfig`); `None`: the cluster's.
    pub authentication_kubeconfig: Option<PathBuf>,
    /// The kubeconfig for SubjectAccessReview (`--authorization-kubeconfig`); `None`: the
    /// cluster's.
    pub authorization_kubeconfig: Option<PathBuf>,
    /// The scrape loop (its `resolution` is `--metric-resolution`, its `request_timeout`
    /// also bounds each kubelet request).
    pub scrape: scraper::scrape::Config,
    /// The store.
    pub store: scraper::store::Config,
    /// Where the kubelet client's verification and credentials come from, before the
    /// cluster's.
    pub kubelet: KubeletConfig,
    /// The kubelet client's transport: plain HTTP or not, body limits, keep-alive, and its
    /// `timeout` (`--kubelet-request-timeout`, as `scrape.request_timeout`); verification and
    /// credentials are filled in from `kubelet` and the cluster.
    pub kubelet_client: scraper::kubelet::client::Config,
    /// After this long since start, `/readyz` passes without data; `None`: never.
    pub readiness_timeout: Option<Duration>,
    /// Load shedding.
    pub shed: Shed,
    /// Where to listen and with which certificate.
    pub listen: Listen,
    /// The HTTPS server's bounds and timeouts.
    pub serving: crate::serve::Config,
    /// Delegated authentication.
    pub authn: AuthnConfig,
    /// Delegated authorization.
    pub authz: AuthzConfig,
    /// How long `/readyz` fails, while serving goes on, once shutdown has begun.
    pub shutdown_delay: Duration,
    /// `--profiling`: serve `/debug/flags/v`, where a `PUT` changes the log verbosity.
    pub debug_flags: bool,
    /// The audit log; `None`: none.
    pub audit: Option<crate::audit::Config>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::for_resolution(DEFAULT_RESOLUTION)
    }
}

impl Settings {
    /// The defaults, with this `--metric-resolution` and what defaults to a multiple of it
    /// (staleness, readiness timeout, cold-store window).
    pub fn for_resolution(resolution: Duration) -> Self {
        Settings {
            kubeconfig: None,
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            scrape: scraper::scrape::Config {
                resolution,
                request_timeout: Duration::from_secs(10),
                max_in_flight: 64,
                slot_hold: scraper::scrape::DEFAULT_SLOT_HOLD,
                source: scraper::kubelet::Source::Resource,
                summary_warmup: true,
                address_types: split(DEFAULT_ADDRESS_TYPES),
                kubelet_port: 10250,
                use_node_status_port: false,
                node_selector: LabelSelector::default(),
                threads: Vec::new(),
            },
            store: scraper::store::Config::new(resolution),
            kubelet: KubeletConfig::default(),
            kubelet_client: scraper::kubelet::client::Config::default(),
            readiness_timeout: Some(resolution * 2),
            shed: Shed {
                cold_store_window: cold_store_window(resolution),
                ..Shed::default()
            },
            listen: Listen::default(),
            serving: crate::serve::Config::default(),
            authn: AuthnConfig::default(),
            authz: AuthzConfig::default(),
            shutdown_delay: Duration::ZERO,
            debug_flags: true,
            audit: None,
        }
    }

    /// `--metric-resolution`.
    pub fn resolution(&self) -> Duration {
        self.scrape.resolution
    }

    /// Changes the resolution and what [`Settings::for_resolution`] derives from it
    /// (staleness, readiness timeout, cold-store window), capping the kubelet request timeout
    /// at 9/10 of it, as the flag rules require. Unlike `--metric-resolution` it takes
    /// periods under 10 s: for harnesses that compress time (the soak run), not for serving.
    pub fn set_resolution(&mut self, resolution: Duration) {
        let derived = Settings::for_resolution(resolution);
        self.scrape.resolution = resolution;
        self.store = derived.store;
        self.readiness_timeout = derived.readiness_timeout;
        self.shed.cold_store_window = derived.shed.cold_store_window;
        let timeout = self.scrape.request_timeout.min(resolution * 9 / 10);
        self.scrape.request_timeout = timeout;
        self.kubelet_client.timeout = timeout;
    }
}

/// `--cold-store-window`'s default: 2 x resolution, at least 1m.
pub fn cold_store_window(resolution: Duration) -> Duration {
    (resolution * 2).max(Duration::from_secs(60))
}

/// A comma-separated default as a list.
fn split(list: &str) -> Vec<String> {
    list.split(',').map(str::to_owned).collect()
}

/// Where the server listens, and the certificate it presents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// `--bind-address`:`--secure-port` (a pre-bound listener of
    /// [`Setup`](crate::run::Setup) wins).
    pub address: SocketAddr,
    /// The serving certificate.
    pub cert: ServingCert,
    /// `--permit-port-sharing`: `SO_REUSEPORT`, so that more than one process may listen on
    /// the address and port.
    pub reuse_port: bool,
    /// `--tls-sni-cert-key`: certificates for the names clients ask for, in priority order.
    pub sni: Vec<SniCert>,
}

/// A `--tls-sni-cert-key` pair, reloaded when its files change as the default one is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SniCert {
    /// The certificate file (PEM, the chain after the leaf).
    pub cert: PathBuf,
    /// Its private key file.
    pub key: PathBuf,
    /// Domain patterns (`foo.com`, `*.foo.com`) it is served for; none: the certificate's
    /// own names.
    pub names: Vec<String>,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            address: SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), DEFAULT_SECURE_PORT),
            cert: ServingCert::self_signed_in(DEFAULT_CERT_DIR),
            reuse_port: false,
            sni: Vec::new(),
        }
    }
}

impl Listen {
    /// A free port on 127.0.0.1 and a self-signed certificate for `localhost` in `dir`: a
    /// test's or a benchmark's server.
    pub fn local(dir: impl Into<PathBuf>) -> Self {
        Listen {
            address: SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0),
            cert: ServingCert::SelfSigned {
                dir: dir.into(),
                sans: vec!["localhost".to_owned()],
            },
            reuse_port: false,
            sni: Vec::new(),
        }
    }
}

/// The serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServingCert {
    /// `--tls-cert-file` and `--tls-private-key-file`, reloaded when they change.
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// Its key.
        key: PathBuf,
    },
    /// A self-signed certificate for these names, made (or reused) in `--cert-dir`.
    SelfSigned {
        /// `--cert-dir`.
        dir: PathBuf,
        /// `--serving-cert-sans`.
        sans: Vec<String>,
    },
}

impl ServingCert {
    /// A self-signed certificate for the default `--serving-cert-sans`, in `dir`.
    pub fn self_signed_in(dir: impl Into<PathBuf>) -> Self {
        ServingCert::SelfSigned {
            dir: dir.into(),
            sans: split(DEFAULT_SERVING_CERT_SANS),
        }
    }
}

/// Load-shedding settings (flags `--max-requests-inflight`, `--autoscaler-inflight-percent`,
/// `--request-queue-wait`, `--request-queue-length-per-user`, `--cold-store-window`); what
/// [`shed`](crate::shed) calls its `Config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed {
    /// Seats of both classes together; 0 means unlimited (max-in-flight's meaning).
    pub max_in_flight: usize,
    /// Percent of the seats reserved for autoscalers (at least one seat each).
    pub autoscaler_percent: u8,
    /// Requests one user may have waiting in a class; 0: no queueing.
    pub queue_length_per_user: usize,
    /// How long a request may wait for a seat; zero: no queueing.
    pub queue_wait: Duration,
    /// How long after start a cold store rejects cluster-wide lists; zero: never.
    pub cold_store_window: Duration,
    /// The adaptive Retry-After's ceiling (APF: 32 s).
    pub max_retry_after: Duration,
}

impl Default for Shed {
    fn default() -> Self {
        Shed {
            max_in_flight: 400,
            autoscaler_percent: 25,
            queue_length_per_user: 10,
            queue_wait: Duration::from_secs(3),
            cold_store_window: Duration::from_secs(60),
            max_retry_after: Duration::from_secs(32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_resolution_moves_what_derives_from_it_and_caps_the_kubelet_timeout() {
        let mut settings = Settings::default();
        settings.set_resolution(Duration::from_secs(1));
        assert_eq!(settings.resolution(), Duration::from_secs(1));
        assert_eq!(settings.store.staleness, Duration::from_secs(2));
        assert_eq!(settings.readiness_timeout, Some(Duration::from_secs(2)));
        assert_eq!(settings.shed.cold_store_window, Duration::from_secs(60));
        assert_eq!(settings.scrape.request_timeout, Duration::from_millis(900));
        assert_eq!(settings.kubelet_client.timeout, Duration::from_millis(900));

        // A longer resolution keeps a shorter request timeout.
        settings.set_resolution(Duration::from_secs(120));
        assert_eq!(settings.scrape.request_timeout, Duration::from_millis(900));
        assert_eq!(settings.shed.cold_store_window, Duration::from_secs(240));
    }
}
