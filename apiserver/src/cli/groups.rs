//! The flag groups, in metrics-server's `--help` order.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{ArgAction, Args, ValueEnum};

use super::{ByteSize, GoDuration};

/// Go's `strconv.ParseBool`, for `--flag=false` style bool flags.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing \"{s}\": invalid syntax"
        )),
    }
}

/// "Metrics server" group (`cmd/metrics-server/app/options/options.go`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Metrics server flags")]
pub struct MetricsServer {
    /// The path to the kubeconfig used to connect to the Kubernetes API server and the
    /// Kubelets (defaults to in-cluster config)
    #[arg(long, value_name = "string")]
    pub kubeconfig: Option<PathBuf>,

    /// The resolution at which metrics-server will retain metrics, must set value at least 10s.
    #[arg(long, value_name = "duration", default_value = "1m0s")]
    pub metric_resolution: GoDuration,

    /// Show version
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub version: bool,

    /// (ours) How long the last good data of a node and its pods is served after failed
    /// scrapes. Default: 2 x --metric-resolution.
    #[arg(long, value_name = "duration")]
    pub metric_staleness: Option<GoDuration>,

    /// (ours) After this long since start, /readyz's metric-storage-ready passes with node
    /// metrics alone: without pod metrics (a cluster with no running pods) or before every
    /// node of the first round answered. Without any node's metrics it never passes, as in
    /// metrics-server. 0s: never. Default: 2 x --metric-resolution.
    #[arg(long, value_name = "duration")]
    pub readiness_timeout: Option<GoDuration>,

    /// (ours) Kubelet scrapes in flight at most.
    #[arg(long, value_name = "int", default_value_t = 64)]
    pub scrape_max_in_flight: usize,
}

/// "Generic" group (`genericoptions.ServerRunOptions`). Every flag metrics-server accepts is
/// accepted, so that a Deployment's arguments carry over; those that change nothing here say
/// so in their help, and the server logs the ones set at start ([`super::Flags::without_effect`]).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Generic flags")]
pub struct Generic {
    /// The IP address on which to advertise the apiserver to members of the cluster. This
    /// address must be reachable by the rest of the cluster. If blank, the --bind-address
    /// will be used. If --bind-address is unspecified, the host's default interface will be
    /// used. Accepted; no effect (nothing is advertised).
    #[arg(long, value_name = "ip")]
    pub advertise_address: Option<IpAddr>,

    /// List of allowed origins for CORS, comma separated. An allowed origin can be a regular
    /// expression to support subdomain matching. If this list is empty CORS will not be
    /// enabled. Accepted; no effect (no browser client).
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub cors_allowed_origins: Vec<String>,

    /// The versions different components emulate their capabilities (APIs, features, ...)
    /// of. Version format could only be major.minor, for example:
    /// '--emulated-version=wardle=1.2,kube=1.31'. Accepted; no effect.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub emulated_version: Vec<String>,

    /// If true, for any beta+ APIs enabled by default or by --runtime-config at the
    /// emulation version, their future versions with higher priority/stability will be auto
    /// enabled even if they introduced after the emulation version. Accepted; no effect.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub emulation_forward_compatible: bool,

    /// The hostname to use when generating externalized URLs for this master (e.g. Swagger
    /// API Docs or OpenID Discovery). Accepted; no effect.
    #[arg(long, value_name = "string")]
    pub external_hostname: Option<String>,

    /// Comma-separated list of component:key=value pairs that describe feature gates for
    /// alpha/experimental features of different components. If the component is not
    /// specified, defaults to "kube". Checked for form; no gate changes anything here.
    #[arg(long, value_name = "colonSeparatedMultimapStringString", value_delimiter = ',',
          value_parser = feature_gate)]
    pub feature_gates: Vec<String>,

    /// To prevent HTTP/2 clients from getting stuck on a single apiserver, randomly close a
    /// connection (GOAWAY). The client's other in-flight requests won't be affected, and the
    /// client will reconnect, likely landing on a different apiserver after going through
    /// the load balancer again. This argument sets the fraction of requests that will be
    /// sent a GOAWAY. Min is 0 (off), Max is .02 (1/50 requests); .001 (1/1000) is a
    /// recommended starting point.
    #[arg(long, value_name = "float", default_value_t = 0.0, value_parser = goaway_chance)]
    pub goaway_chance: f64,

    /// This option represents the maximum amount of time it should take for apiserver to
    /// complete its startup sequence and become live. Accepted; /livez has no post-start
    /// hooks to wait for here.
    #[arg(long, value_name = "duration", default_value = "0s")]
    pub livez_grace_period: GoDuration,
    /// This and --max-mutating-requests-inflight are summed to determine the server's total
    /// concurrency limit (which must be positive) if --enable-priority-and-fairness is true.
    /// Otherwise, this flag limits the maximum number of non-mutating requests in flight, or
    /// a zero value disables the limit completely.
    #[arg(long, value_name = "int", default_value_t = 400)]
    pub max_requests_inflight: u32,

    /// Accepted for compatibility; this server has no mutating requests.
    #[arg(long, value_name = "int", default_value_t = 200)]
    pub max_mutating_requests_inflight: u32,

    /// The min version of the components the binary is compatible with, for example:
    /// '--min-compatibility-version=wardle=1.2,kube=1.31'. Accepted; no effect.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub min_compatibility_version: Vec<String>,

    /// An optional field indicating the minimum number of seconds a handler must keep a
    /// request open before timing it out. Currently only honored by the watch request
    /// handler. Accepted; no effect (there are no watches).
    #[arg(long, value_name = "int", default_value_t = 1800)]
    pub min_request_timeout: u32,

    /// (ours) Percent of --max-requests-inflight reserved for autoscalers (the HPA's and the
    /// VPA's identities, kube-system service accounts, kube-controller-manager); everyone else
    /// shares the rest. Each class gets at least one seat.
    #[arg(long, value_name = "percent", default_value_t = 25)]
    pub autoscaler_inflight_percent: u8,

    /// (ours) How long a request may wait, in its user's queue, for a free seat before it
    /// gets a 429. 0s: no queueing (a full class rejects at once, as max-in-flight).
    #[arg(long, value_name = "duration", default_value = "3s")]
    pub request_queue_wait: GoDuration,

    /// (ours) Requests one user may have waiting in its class; more get a 429 at once.
    /// 0: no queueing.
    #[arg(long, value_name = "int", default_value_t = 10)]
    pub request_queue_length_per_user: u32,

    /// (ours) While the store has no node or no pod usage yet, and for at most this long after
    /// start, cluster-wide lists get a 429 "storage is (re)initializing" (KEP-4568). 0s:
    /// never. Default: 2 x --metric-resolution, at least 1m.
    #[arg(long, value_name = "duration")]
    pub cold_store_window: Option<GoDuration>,

    /// An optional field indicating the duration a handler must keep a request open before
    /// timing it out. This is the default request timeout for requests. A request without an
    /// answer by then gets a 504; a response still being written then is cut.
    #[arg(long, value_name = "duration", default_value = "1m0s")]
    pub request_timeout: GoDuration,

    /// If true, APIs identified by group/version that are enabled in the --runtime-config
    /// flag will be installed even if it is introduced after the emulation version.
    /// Accepted; no effect.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub runtime_config_emulation_forward_compatible: bool,

    /// Time to delay the termination. During that time the server keeps serving requests
    /// normally while /readyz fails.
    #[arg(long, value_name = "duration", default_value = "0s")]
    pub shutdown_delay_duration: GoDuration,

    /// If true the HTTP Server will continue listening until all non long running
    /// request(s) in flight have been drained, during this window all incoming requests will
    /// be rejected with a status code 429 and a 'Retry-After' response header, in addition
    /// 'Connection: close' response header is set in order to tear down the TCP connection
    /// when idle.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub shutdown_send_retry_after: bool,

    /// This option, if set, represents the maximum amount of grace period the apiserver will
    /// wait for active watch request(s) to drain during the graceful server shutdown window.
    /// Accepted; no effect (there are no watches).
    #[arg(long, value_name = "duration", default_value = "0s")]
    pub shutdown_watch_termination_grace_period: GoDuration,

    /// Maximum amount of time to wait for storage initialization before declaring apiserver
    /// ready. Accepted; no effect (see --readiness-timeout).
    #[arg(long, value_name = "duration", default_value = "1m0s")]
    pub storage_initialization_timeout: GoDuration,

    /// List of directives for HSTS, comma separated. If this list is empty, then HSTS
    /// directives will not be added. Example: 'max-age=31536000,includeSubDomains,preload'
    #[arg(long, value_name = "strings", value_delimiter = ',', value_parser = hsts_directive)]
    pub strict_transport_security_directives: Vec<String>,
}

/// `--bind-address`: an IP address, blank meaning every address (as `0.0.0.0`).
fn bind_address(value: &str) -> Result<IpAddr, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(IpAddr::from([0, 0, 0, 0]));
    }
    value
        .parse()
        .map_err(|_| format!("invalid IP address {value:?}"))
}

/// One `--feature-gates` item: `[component:]Name=bool`, as k8s.io/component-base parses it.
fn feature_gate(item: &str) -> Result<String, String> {
    let item = item.trim();
    let gate = item.split_once(':').map_or(item, |(_, gate)| gate);
    match gate.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            go_bool(value.trim()).map_err(|_| format!("invalid value of {name}={value}"))?;
            Ok(item.to_owned())
        }
        _ => Err(format!("missing bool value for {item}")),
    }
}

/// `--goaway-chance`: k8s.io/apiserver's range check.
fn goaway_chance(value: &str) -> Result<f64, String> {
    let chance: f64 = value.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=0.02).contains(&chance) {
        Ok(chance)
    } else {
        Err("--goaway-chance can not be less than 0 or greater than 0.02".to_owned())
    }
}

/// One `--strict-transport-security-directives` item, as k8s.io/apiserver validates it.
fn hsts_directive(directive: &str) -> Result<String, String> {
    let directive = directive.trim();
    let valid = directive == "includeSubDomains"
        || directive == "preload"
        || directive
            .strip_prefix("max-age=")
            .is_some_and(|age| !age.is_empty() && age.bytes().all(|b| b.is_ascii_digit()));
    if valid || directive.is_empty() {
        Ok(directive.to_owned())
    } else {
        Err(
            "--strict-transport-security-directives invalid, allowed values: \
             max-age=expireTime, includeSubDomains, preload. \
             see https://tools.ietf.org/html/rfc6797#section-6.1 for more information"
                .to_owned(),
        )
    }
}

/// How kubelets are scraped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KubeletSource {
    /// `GET /metrics/resource` (Prometheus text), as metrics-server.
    Resource,
    /// `GET /stats/summary?only_cpu_and_memory=true` (JSON).
    Summary,
}

impl From<KubeletSource> for scraper::kubelet::Source {
    fn from(s: KubeletSource) -> Self {
        match s {
            KubeletSource::Resource => scraper::kubelet::Source::Resource,
            KubeletSource::Summary => scraper::kubelet::Source::Summary,
        }
    }
}

/// "Kubelet client" group (`cmd/metrics-server/app/options/kubelet_client.go`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Kubelet client flags")]
pub struct Kubelet {
    /// Path to the CA to use to validate the Kubelet's serving certificates.
    #[arg(long, value_name = "string")]
    pub kubelet_certificate_authority: Option<PathBuf>,

    /// CA text to use to validate the Kubelet's serving certificates.
    #[arg(long, value_name = "string")]
    pub kubelet_certificate_authority_text: Option<String>,

    /// Path to a client cert file for TLS.
    #[arg(long, value_name = "string")]
    pub kubelet_client_certificate: Option<PathBuf>,

    /// Path to a client key file for TLS.
    #[arg(long, value_name = "string")]
    pub kubelet_client_key: Option<PathBuf>,

    /// Do not verify CA of serving certificates presented by Kubelets.  For testing purposes
    /// only.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub kubelet_insecure_tls: bool,

    /// The port to use to connect to Kubelets.
    #[arg(long, value_name = "int", default_value_t = 10250)]
    pub kubelet_port: u16,

    /// The priority of node address types to use when determining which address to use to
    /// connect to a particular node
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = crate::config::DEFAULT_ADDRESS_TYPES
    )]
    pub kubelet_preferred_address_types: Vec<String>,

    /// The length of time to wait before giving up on a single request to Kubelet. Non-zero
    /// values should contain a corresponding time unit (e.g. 1s, 2m, 3h).
    #[arg(long, value_name = "duration", default_value = "10s")]
    pub kubelet_request_timeout: GoDuration,

    /// Use the port in the node status. Takes precedence over --kubelet-port flag.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub kubelet_use_node_status_port: bool,

    /// DEPRECATED: Do not use any encryption, authorization, or authentication when
    /// communicating with the Kubelet. This is rarely the right option, since it leaves
    /// kubelet communication completely insecure.  If you encounter auth errors, make sure
    /// you've enabled token webhook auth on the Kubelet, and if you're in a test cluster with
    /// self-signed Kubelet certificates, consider using kubelet-insecure-tls instead.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub deprecated_kubelet_completely_insecure: bool,

    /// Selector (label query) to filter on, not including uninitialized ones, supports '=',
    /// '==', and '!='.(e.g. -l key1=value1,key2=value2).
    #[arg(short = 'l', long, value_name = "string", default_value = "")]
    pub node_selector: String,

    /// (ours) Which kubelet endpoint to scrape.
    #[arg(long, value_enum, value_name = "source", default_value = "resource")]
    pub kubelet_source: KubeletSource,

    /// (ours) With --kubelet-source=resource, a node's first scrape after start (or after it
    /// joins) also asks the kubelet's /stats/summary for the CPU rates the kubelet computed
    /// itself (usageNanoCores), so the node and its pods are served within a second of
    /// start rather than after the kubelet's next stats refresh (about 10 s); later scrapes
    /// pair /metrics/resource samples as usual. Needs get on nodes/stats; when a kubelet
    /// answers 403 it is turned off, with one log line.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub kubelet_summary_warmup: bool,

    /// (ours) Largest kubelet response body accepted (a quantity: 64Mi, 1Gi, bytes).
    #[arg(long, value_name = "quantity", default_value = "64Mi")]
    pub kubelet_max_body_bytes: ByteSize,

    /// (ours) Most bytes of kubelet response bodies held at once, over all scrapes in flight
    /// (a quantity); a body waits for room as it streams in. At least
    /// --kubelet-max-body-bytes.
    #[arg(long, value_name = "quantity", default_value = "256Mi")]
    pub kubelet_max_bodies_bytes: ByteSize,

    /// (ours) Keep one idle HTTPS connection per kubelet between scrapes. false closes it
    /// after each scrape: less memory per node, one TLS handshake per node per period.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub kubelet_keep_alive: bool,

    /// (ours) Ask kubelets to gzip their answers (Accept-Encoding: gzip), as metrics-server's
    /// Go client does: about 8x fewer bytes from each kubelet per scrape, for the kubelet's
    /// compression and this server's decompression. false asks for them uncompressed. A
    /// gzipped answer is read either way.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub kubelet_compression: bool,
}

/// `--tls-min-version` values (Go's names). rustls speaks TLS 1.2 and 1.3 only, so 1.0 and
/// 1.1 mean "1.2".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum TlsVersion {
    /// `VersionTLS10`.
    #[value(name = "VersionTLS10")]
    Tls10,
    /// `VersionTLS11`.
    #[value(name = "VersionTLS11")]
    Tls11,
    /// `VersionTLS12`.
    #[value(name = "VersionTLS12")]
    Tls12,
    /// `VersionTLS13`.
    #[value(name = "VersionTLS13")]
    Tls13,
}

/// "Apiserver secure serving" group (`genericoptions.SecureServingOptions`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Apiserver secure serving flags")]
pub struct SecureServing {
    /// The IP address on which to listen for the --secure-port port. The associated
    /// interface(s) must be reachable by the rest of the cluster, and by CLI/web clients. If
    /// blank or an unspecified address (0.0.0.0 or ::), all interfaces and IP address
    /// families will be used.
    #[arg(long, value_name = "ip", default_value = "0.0.0.0", value_parser = bind_address)]
    pub bind_address: IpAddr,

    /// The directory where the TLS certs are located. If --tls-cert-file and
    /// --tls-private-key-file are provided, this flag will be ignored.
    #[arg(long, value_name = "string", default_value = crate::config::DEFAULT_CERT_DIR)]
    pub cert_dir: PathBuf,

    /// If true, HTTP2 serving will be disabled
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub disable_http2_serving: bool,

    /// The limit that the server gives to clients for the maximum number of streams in an
    /// HTTP/2 connection. Zero means to use golang's default.
    #[arg(long, value_name = "int", default_value_t = 0)]
    pub http2_max_streams_per_connection: u32,

    /// If true, SO_REUSEADDR will be used when binding the port. This allows binding to
    /// wildcard IPs like 0.0.0.0 and specific IPs in parallel, and it avoids waiting for the
    /// kernel to release sockets in TIME_WAIT state. (The listener always sets SO_REUSEADDR,
    /// as Go's does.)
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub permit_address_sharing: bool,

    /// If true, SO_REUSEPORT will be used when binding the port, which allows more than one
    /// instance to bind on the same address and port.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub permit_port_sharing: bool,

    /// (ours) Connections the server keeps open at once; further ones wait in the listen
    /// backlog until one closes. Each idle TLS connection costs memory (see BENCHMARKS.md,
    /// "Idle connections").
    #[arg(long, value_name = "int", default_value_t = crate::serve::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// The port on which to serve HTTPS with authentication and authorization. 0 picks a
    /// free port (ours; tests).
    #[arg(long, value_name = "int", default_value_t = crate::config::DEFAULT_SECURE_PORT)]
    pub secure_port: u16,

    /// File containing the default x509 Certificate for HTTPS. (CA cert, if any,
    /// concatenated after server cert). If HTTPS serving is enabled, and --tls-cert-file and
    /// --tls-private-key-file are not provided, a self-signed certificate and key are
    /// generated for the public address and saved to the directory specified by --cert-dir.
    /// Reloaded when it changes on disk.
    #[arg(long, value_name = "string")]
    pub tls_cert_file: Option<PathBuf>,

    /// Comma-separated list of cipher suites for the server. If omitted, the default Go
    /// cipher suites will be used. As in Go, it restricts the TLS 1.2 suites (TLS 1.3's are
    /// not configurable) and its order does not matter; names Go knows that this server does
    /// not implement (CBC, RSA key exchange, RC4, 3DES) are left out with a warning.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,

    /// Comma-separated list of key exchange curves for the server, as Go curve names
    /// (X25519, CurveP256, CurveP384, CurveP521, X25519MLKEM768) or decimal curve IDs. If
    /// omitted, the defaults are used. Curves this server does not implement (CurveP521,
    /// X25519MLKEM768) are left out with a warning; at least one listed must remain.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub tls_curve_preferences: Vec<String>,

    /// Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11,
    /// VersionTLS12, VersionTLS13 (1.0 and 1.1 are never offered).
    #[arg(long, value_enum, value_name = "string", hide_possible_values = true)]
    pub tls_min_version: Option<TlsVersion>,

    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long, value_name = "string")]
    pub tls_private_key_file: Option<PathBuf>,

    /// A pair of x509 certificate and private key file paths, optionally suffixed with a
    /// list of domain patterns which are fully qualified domain names, possibly with prefixed
    /// wildcard segments. If no domain patterns are provided, the names of the certificate
    /// are extracted. Non-wildcard matches trump over wildcard matches, explicit domain
    /// patterns trump over extracted names. For multiple key/certificate pairs, use the
    /// --tls-sni-cert-key multiple times. Examples: "example.crt,example.key" or
    /// "foo.crt,foo.key:*.foo.com,foo.com". Reloaded when the files change.
    #[arg(long, value_name = "namedCertKey", action = ArgAction::Append)]
    pub tls_sni_cert_key: Vec<String>,

    /// (ours) Subject alternative names of the self-signed certificate made when no
    /// --tls-cert-file is given.
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = crate::config::DEFAULT_SERVING_CERT_SANS
    )]
    pub serving_cert_sans: Vec<String>,
}

/// "Apiserver authentication" group (`genericoptions.DelegatingAuthenticationOptions`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Apiserver authentication flags")]
pub struct Authentication {
    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// tokenreviews.authentication.k8s.io. Defaults to --kubeconfig or in-cluster.
    #[arg(long, value_name = "string")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// If false, the authentication-kubeconfig will be used to lookup missing authentication
    /// configuration from the cluster.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub authentication_skip_lookup: bool,

    /// The duration to cache responses from the webhook token authenticator.
    #[arg(long, value_name = "duration", default_value = "10s")]
    pub authentication_token_webhook_cache_ttl: GoDuration,

    /// If true, failures to look up missing authentication configuration from the cluster are
    /// not considered fatal. Note that this can result in authentication that treats all
    /// requests as anonymous.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub authentication_tolerate_lookup_failure: bool,

    /// If set, any request presenting a client certificate signed by one of the authorities
    /// in the client-ca-file is authenticated with an identity corresponding to the
    /// CommonName of the client certificate.
    #[arg(long, value_name = "string")]
    pub client_ca_file: Option<PathBuf>,

    /// List of client certificate common names to allow to provide usernames in headers
    /// specified by --requestheader-username-headers. If empty, any client certificate
    /// validated by the authorities in --requestheader-client-ca-file is allowed.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,

    /// Root certificate bundle to use to verify client certificates on incoming requests
    /// before trusting usernames in headers specified by --requestheader-username-headers.
    #[arg(long, value_name = "string")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = "x-remote-extra-"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = "x-remote-group"
    )]
    pub requestheader_group_headers: Vec<String>,

    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub requestheader_uid_headers: Vec<String>,

    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = "x-remote-user"
    )]
    pub requestheader_username_headers: Vec<String>,
}

/// "Apiserver authorization" group (`genericoptions.DelegatingAuthorizationOptions`).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Apiserver authorization flags")]
pub struct Authorization {
    /// A list of HTTP paths to skip during authorization, i.e. these are authorized without
    /// contacting the 'core' kubernetes server.
    #[arg(
        long,
        value_name = "strings",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// subjectaccessreviews.authorization.k8s.io. Defaults to --kubeconfig or in-cluster.
    #[arg(long, value_name = "string")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long, value_name = "duration", default_value = "10s")]
    pub authorization_webhook_cache_authorized_ttl: GoDuration,

    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long, value_name = "duration", default_value = "10s")]
    pub authorization_webhook_cache_unauthorized_ttl: GoDuration,

    /// (ours) TokenReviews, and apart from them SubjectAccessReviews, sent per second at
    /// most, in bursts of twice that; a request whose review would pass it gets 429 with
    /// Retry-After. Answers from the caches cost nothing. 0: unlimited.
    #[arg(long, value_name = "int", default_value_t = 200)]
    pub delegated_review_qps: u32,

    /// (ours) The same for one client address, for requests that do not come through the
    /// front proxy (whose requests carry every user's). 0: unlimited.
    #[arg(long, value_name = "int", default_value_t = 20)]
    pub delegated_review_qps_per_source: u32,
}

/// "Apiserver audit log" group (`genericoptions.AuditOptions`): the log and webhook backends,
/// applied ([`super::Flags::audit`], [`crate::audit`]); the truncate flags have nothing to
/// truncate (events carry no request or response bodies here).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Apiserver audit log flags")]
pub struct Audit {
    /// The size of the buffer to store events before batching and writing. Only used in batch
    /// mode.
    #[arg(long, value_name = "int", default_value_t = 10000)]
    pub audit_log_batch_buffer_size: i64,

    /// The maximum size of a batch. Only used in batch mode.
    #[arg(long, value_name = "int", default_value_t = 1)]
    pub audit_log_batch_max_size: i64,

    /// The amount of time to wait before force writing the batch that hadn't reached the max
    /// size. Only used in batch mode.
    #[arg(long, value_name = "duration", default_value = "0s")]
    pub audit_log_batch_max_wait: GoDuration,

    /// Maximum number of requests sent at the same moment if ThrottleQPS was not utilized
    /// before. Only used in batch mode.
    #[arg(long, value_name = "int", default_value_t = 0)]
    pub audit_log_batch_throttle_burst: i64,

    /// Whether batching throttling is enabled. Only used in batch mode.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub audit_log_batch_throttle_enable: bool,

    /// Maximum average number of batches per second. Only used in batch mode.
    #[arg(long, value_name = "float", default_value_t = 0.0)]
    pub audit_log_batch_throttle_qps: f64,

    /// If set, the rotated log files will be compressed using gzip.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub audit_log_compress: bool,

    /// Format of saved audits. "legacy" indicates 1-line text format for each event. "json"
    /// indicates structured json format. Known formats are legacy,json.
    #[arg(long, value_name = "string", default_value = "json", value_parser = ["legacy", "json"])]
    pub audit_log_format: String,

    /// The maximum number of days to retain old audit log files based on the timestamp encoded
    /// in their filename.
    #[arg(long, value_name = "int", default_value_t = 366)]
    pub audit_log_maxage: i64,

    /// The maximum number of old audit log files to retain. Setting a value of 0 will mean
    /// there's no restriction on the number of files.
    #[arg(long, value_name = "int", default_value_t = 100)]
    pub audit_log_maxbackup: i64,

    /// The maximum size in megabytes of the audit log file before it gets rotated.
    #[arg(long, value_name = "int", default_value_t = 100)]
    pub audit_log_maxsize: i64,

    /// Strategy for sending audit events. Blocking indicates sending events should block server
    /// responses. Batch causes the backend to buffer and write events asynchronously. Known
    /// modes are batch,blocking,blocking-strict.
    #[arg(long, value_name = "string", default_value = "blocking", value_parser = ["batch", "blocking", "blocking-strict"])]
    pub audit_log_mode: String,

    /// If set, all requests coming to the apiserver will be logged to this file.  '-' means
    /// standard out.
    #[arg(long, value_name = "string")]
    pub audit_log_path: Option<String>,

    /// Whether event and batch truncating is enabled.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub audit_log_truncate_enabled: bool,

    /// Maximum size of the batch sent to the underlying backend. Actual serialized size can be
    /// several hundreds of bytes greater. If a batch exceeds this limit, it is split into
    /// several batches of smaller size.
    #[arg(long, value_name = "int", default_value_t = 10485760)]
    pub audit_log_truncate_max_batch_size: i64,

    /// Maximum size of the audit event sent to the underlying backend. If the size of an event
    /// is greater than this number, first request and response are removed, and if this doesn't
    /// reduce the size enough, event is discarded.
    #[arg(long, value_name = "int", default_value_t = 102400)]
    pub audit_log_truncate_max_event_size: i64,

    /// API group and version used for serializing audit events written to log.
    #[arg(long, value_name = "string", default_value = "audit.k8s.io/v1")]
    pub audit_log_version: String,

    /// Path to the file that defines the audit policy configuration.
    #[arg(long, value_name = "string")]
    pub audit_policy_file: Option<String>,

    /// The size of the buffer to store events before batching and writing. Only used in batch
    /// mode.
    #[arg(long, value_name = "int", default_value_t = 10000)]
    pub audit_webhook_batch_buffer_size: i64,

    /// The maximum size of a batch. Only used in batch mode.
    #[arg(long, value_name = "int", default_value_t = 400)]
    pub audit_webhook_batch_max_size: i64,

    /// The amount of time to wait before force writing the batch that hadn't reached the max
    /// size. Only used in batch mode.
    #[arg(long, value_name = "duration", default_value = "30s")]
    pub audit_webhook_batch_max_wait: GoDuration,

    /// Maximum number of requests sent at the same moment if ThrottleQPS was not utilized
    /// before. Only used in batch mode.
    #[arg(long, value_name = "int", default_value_t = 15)]
    pub audit_webhook_batch_throttle_burst: i64,

    /// Whether batching throttling is enabled. Only used in batch mode.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub audit_webhook_batch_throttle_enable: bool,

    /// Maximum average number of batches per second. Only used in batch mode.
    #[arg(long, value_name = "float", default_value_t = 10.0)]
    pub audit_webhook_batch_throttle_qps: f64,

    /// Path to a kubeconfig formatted file that defines the audit webhook configuration.
    #[arg(long, value_name = "string")]
    pub audit_webhook_config_file: Option<String>,

    /// The amount of time to wait before retrying the first failed request.
    #[arg(long, value_name = "duration", default_value = "10s")]
    pub audit_webhook_initial_backoff: GoDuration,

    /// Strategy for sending audit events. Blocking indicates sending events should block server
    /// responses. Batch causes the backend to buffer and write events asynchronously. Known
    /// modes are batch,blocking,blocking-strict.
    #[arg(long, value_name = "string", default_value = "batch", value_parser = ["batch", "blocking", "blocking-strict"])]
    pub audit_webhook_mode: String,

    /// Whether event and batch truncating is enabled.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub audit_webhook_truncate_enabled: bool,

    /// Maximum size of the batch sent to the underlying backend. Actual serialized size can be
    /// several hundreds of bytes greater. If a batch exceeds this limit, it is split into
    /// several batches of smaller size.
    #[arg(long, value_name = "int", default_value_t = 10485760)]
    pub audit_webhook_truncate_max_batch_size: i64,

    /// Maximum size of the audit event sent to the underlying backend. If the size of an event
    /// is greater than this number, first request and response are removed, and if this doesn't
    /// reduce the size enough, event is discarded.
    #[arg(long, value_name = "int", default_value_t = 102400)]
    pub audit_webhook_truncate_max_event_size: i64,

    /// API group and version used for serializing audit events written to webhook.
    #[arg(long, value_name = "string", default_value = "audit.k8s.io/v1")]
    pub audit_webhook_version: String,
}

/// "Features" group (`genericoptions.FeatureOptions`); accepted for compatibility.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Features flags")]
pub struct Features {
    /// Path to the socket where the debug handlers will be exposed. Accepted; not served.
    #[arg(long, value_name = "string")]
    pub debug_socket_path: Option<String>,

    /// Enable block profiling, if profiling is enabled. Accepted; not served.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub contention_profiling: bool,

    /// If true, replace the max-in-flight handler with an enhanced one that queues and
    /// dispatches with priority and fairness. Accepted; our own admission control is used.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub enable_priority_and_fairness: bool,

    /// Enable profiling via web interface host:port/debug/pprof/. Here: serves
    /// /debug/flags/v (PUT a log verbosity); there is no /debug/pprof.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool")]
    pub profiling: bool,
}

/// `--logging-format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LoggingFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// "Logging" group (`logsapi.AddFlags` and klog's flags).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Logging flags")]
pub struct Logging {
    /// Maximum number of seconds between log flushes. Accepted; logs are not buffered.
    #[arg(long, value_name = "duration", default_value = "5s")]
    pub log_flush_frequency: GoDuration,

    /// [Alpha] In JSON format with split output streams, the info messages can be buffered
    /// for a while to increase performance. The default value of zero bytes disables
    /// buffering. Accepted; logs are not buffered.
    #[arg(long, value_name = "quantity", default_value = "0")]
    pub log_json_info_buffer_size: ByteSize,

    /// [Alpha] In JSON format, write error messages to stderr and info messages to stdout.
    /// The default is to write a single stream to stdout.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub log_json_split_stream: bool,

    /// [Alpha] In text format with split output streams, the info messages can be buffered
    /// for a while to increase performance. The default value of zero bytes disables
    /// buffering. Accepted; logs are not buffered.
    #[arg(long, value_name = "quantity", default_value = "0")]
    pub log_text_info_buffer_size: ByteSize,

    /// [Alpha] In text format, write error messages to stderr and info messages to stdout.
    /// The default is to write a single stream to stderr.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "false", value_parser = go_bool, action = ArgAction::Set,
          value_name = "bool", hide_default_value = true)]
    pub log_text_split_stream: bool,

    /// Sets the log format. Permitted formats: "json", "text".
    #[arg(long, value_enum, value_name = "string", default_value = "text")]
    pub logging_format: LoggingFormat,

    /// number for the log level verbosity
    #[arg(short = 'v', long = "v", value_name = "Level", default_value_t = 0)]
    pub verbosity: u8,

    /// comma-separated list of pattern=N settings for file-filtered logging. Accepted;
    /// ignored.
    #[arg(long, value_name = "pattern=N,...", default_value = "")]
    pub vmodule: String,
}
