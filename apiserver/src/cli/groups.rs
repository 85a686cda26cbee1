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

    /// (ours) After this long since start, /readyz's metric-storage-ready passes even
    /// without data (a cluster with no running pods). 0s: never. Default: 2 x
    /// --metric-resolution.
    #[arg(long, value_name = "duration")]
    pub readiness_timeout: Option<GoDuration>,

    /// (ours) Kubelet scrapes in flight at most.
    #[arg(long, value_name = "int", default_value_t = 64)]
    pub scrape_max_in_flight: usize,
}

/// "Generic" group (`genericoptions.ServerRunOptions`): the ones that mean something here.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Generic flags")]
pub struct Generic {
    /// This and --max-mutating-requests-inflight are summed to determine the server's total
    /// concurrency limit (which must be positive) if --enable-priority-and-fairness is true.
    /// Otherwise, this flag limits the maximum number of non-mutating requests in flight, or
    /// a zero value disables the limit completely.
    #[arg(long, value_name = "int", default_value_t = 400)]
    pub max_requests_inflight: u32,

    /// Accepted for compatibility; this server has no mutating requests.
    #[arg(long, value_name = "int", default_value_t = 200)]
    pub max_mutating_requests_inflight: u32,

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

    /// Time to delay the termination. During that time the server keeps serving requests
    /// normally while /readyz fails.
    #[arg(long, value_name = "duration", default_value = "0s")]
    pub shutdown_delay_duration: GoDuration,
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
    /// interface(s) must be reachable by the rest of the cluster, and by CLI/web clients.
    #[arg(long, value_name = "ip", default_value = "0.0.0.0")]
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

    /// Comma-separated list of cipher suites for the server. Accepted for compatibility:
    /// rustls's safe defaults are always used.
    #[arg(long, value_name = "strings", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,

    /// Minimum TLS version supported. Possible values: VersionTLS10, VersionTLS11,
    /// VersionTLS12, VersionTLS13 (1.0 and 1.1 are never offered).
    #[arg(long, value_enum, value_name = "string", hide_possible_values = true)]
    pub tls_min_version: Option<TlsVersion>,

    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(long, value_name = "string")]
    pub tls_private_key_file: Option<PathBuf>,

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

/// "Features" group (`genericoptions.FeatureOptions`); accepted for compatibility.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Features flags")]
pub struct Features {
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

    /// Enable profiling via web interface host:port/debug/pprof/. Accepted; not served.
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
