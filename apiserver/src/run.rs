//! Wiring: the Kubernetes client, inventory watches, store, scrape loop, API, health, delegated
//! authentication and authorization (with the ConfigMap watch), the HTTPS server and the
//! reloaders of every credential read from a file, all owned by one `JoinSet` and stopped on
//! shutdown.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use scraper::inventory::Inventory;
use scraper::kubelet;
use scraper::metrics::Metrics;
use scraper::scrape::Progress;
use scraper::store::Store;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Authenticator, Authorizer};
use crate::config::Settings;
use crate::credentials::{self, Reloads};
use crate::serve::{self, Filter, access};
use crate::{health, kubeconfig, stack};

pub mod scrape_thread;

pub use scrape_thread::ScrapeThread;

/// Why the server could not start or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig (or in-cluster configuration) could not be loaded (exit code 64).
    #[error("unable to construct lister client config: {0}")]
    KubeConfig(String),
    /// A file named by a flag could not be used (exit code 64).
    #[error("{flag}: {source}")]
    Credentials {
        /// The flag.
        flag: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The Kubernetes client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Kube(#[source] Box<kube::Error>),
    /// The kubelet client could not be built.
    #[error("building the kubelet client: {0}")]
    Kubelet(#[source] kubelet::client::Error),
    /// `--authentication-kubeconfig` / `--authorization-kubeconfig` (or the configuration they
    /// default to) could not be loaded (exit code 64).
    #[error("failed to get delegated {what} kubeconfig: {message}")]
    DelegatedKubeConfig {
        /// `authentication` or `authorization`.
        what: &'static str,
        /// The cause.
        message: String,
    },
    /// Delegated authentication could not start: an unusable CA file (exit code 64) or a
    /// failed ConfigMap lookup without `--authentication-tolerate-lookup-failure`.
    #[error(transparent)]
    Authn(#[from] auth::AuthnError),
    /// `--authorization-always-allow-paths` is malformed (exit code 64).
    #[error("--authorization-always-allow-paths: {0}")]
    Authz(#[from] auth::AuthzError),
    /// Serving could not start.
    #[error(transparent)]
    Serve(#[from] serve::Error),
    /// A task that should run until shutdown ended on its own.
    #[error("{0} stopped unexpectedly")]
    TaskEnded(&'static str),
    /// The Tokio runtime could not be started.
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The audit log could not start: its policy, its file (exit code 64).
    #[error(transparent)]
    Audit(crate::audit::Error),
}

impl Error {
    /// The process exit code: 64 (`EX_USAGE`) for bad configuration, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::KubeConfig(_)
            | Error::Credentials { .. }
            | Error::DelegatedKubeConfig { .. }
            | Error::Authn(auth::AuthnError::Config(_))
            | Error::Authz(_)
            | Error::Audit(_) => 64,
            _ => 1,
        }
    }
}

/// How long the audit webhook's last events may take to go out at shutdown.
pub const AUDIT_FLUSH: Duration = Duration::from_secs(10);

/// How far below serving's the kernel ranks the scrape threads: nice +10 (up to 19), a
/// weight of 110 against serving's 1024. Under contention scraping still gets about a tenth
/// of each core, what 15,000 nodes need (BENCHMARKS.md); when serving is idle it gets all of
/// it.
pub const SCRAPE_NICE: i32 = 10;

/// Scrape threads: one for every [`CORES_PER_SCRAPE_THREAD`] cores available, at least one and
/// at most this many. In steady state one thread is cheapest (each wakes once a
/// [`scrape_thread::ROUND`] at most, and one gathers the most answers a wake-up: on two cores
/// at 5,000 nodes two threads took 9 % more CPU a scrape than one, and started no faster, the
/// simulated kubelets sharing the cores); more cores get more threads for the first round's
/// handshakes (~1 ms of CPU each), which one core would take 15 s for at 15,000 nodes.
pub const MAX_SCRAPE_THREADS: usize = 4;

/// See [`MAX_SCRAPE_THREADS`].
pub const CORES_PER_SCRAPE_THREAD: usize = 2;

/// How many scrape threads `cores` available cores get.
pub fn scrape_threads(cores: usize) -> usize {
    cores
        .div_ceil(CORES_PER_SCRAPE_THREAD)
        .clamp(1, MAX_SCRAPE_THREADS)
}

/// What the binary's `main` does once its flags are settings: [`run()`] until SIGTERM or
/// SIGINT begins a graceful shutdown (a second signal exits at once). Serving (the API,
/// authentication, the watches) has a multi-threaded Tokio runtime, on threads named
/// `serve`; the scrape loop and the kubelet connections have [`scrape_threads`] threads of
/// their own ([`ScrapeThread`]), [`SCRAPE_NICE`] steps below serving, which handle the
/// kubelets' answers in rounds of [`scrape_thread::ROUND`] once the first round of scrapes is
/// done. One runtime would queue a request behind a scrape slice's burst (tens of kubelet
/// bodies decrypted, parsed and stored at once, a few ms of CPU); with two, the kernel runs
/// the request first. BENCHMARKS.md has what each bought.
pub fn run_until_signalled(settings: Settings) -> Result<(), Error> {
    // Rounds from the end of the first round on: until then every answer is handled as it
    // comes, so the first data is served as early as it can be (BENCHMARKS.md).
    let progress = Arc::new(Progress::default());
    let threads = scrape_threads(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let scraping = (0..threads)
        .map(|_| {
            let steady = progress.clone();
            ScrapeThread::start(
                scrape_thread::ROUND,
                || lower_priority(SCRAPE_NICE),
                move || steady.first_round_complete(),
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Runtime)?;
    let serving = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("serve")
        .build()
        .map_err(Error::Runtime)?;
    let setup = Setup {
        scrape_threads: scraping.iter().map(|t| t.handle().clone()).collect(),
        progress,
        ..Setup::default()
    };
    let result = serving.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        run_with(settings, setup, shutdown).await
    });
    // The scrape loop has ended; what is left (idle kubelet connections) goes with it.
    for thread in scraping {
        thread.stop(Duration::from_secs(1));
    }
    result
}

/// Raises the calling thread's nice value by `steps`, to at most 19 (Linux ranks threads, not
/// processes). That needs no privilege; where it fails anyway (a seccomp profile), the
/// thread runs at serving's priority and says so.
fn lower_priority(steps: i32) {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let thread = Some(rustix::thread::gettid());
        let lowered = getpriority_process(thread)
            .and_then(|nice| setpriority_process(thread, nice.saturating_add(steps).min(19)));
        if let Err(error) = lowered {
            tracing::warn!(%error, "cannot lower the scrape thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = steps;
}

/// SIGINT or SIGTERM begins a graceful shutdown; a second one exits at once.
async fn signals(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot listen for signals; stop with SIGKILL");
            return;
        };
        for round in 0..2 {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if round == 0 {
                tracing::info!("received a termination signal, shutting down gracefully");
                shutdown.cancel();
            } else {
                tracing::warn!("received a second termination signal, exiting now");
                std::process::exit(1);
            }
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_ok() {
            shutdown.cancel();
        }
    }
}

/// Where nodes and pods come from.
#[derive(Clone, Debug, Default)]
pub enum Cluster {
    /// The Kubernetes API of [`Settings::kubeconfig`] (`--kubeconfig`), or the in-cluster
    /// configuration.
    #[default]
    FromSettings,
    /// The Kubernetes API with this client configuration (the sandbox's control plane).
    Kube(Box<kube::Config>),
    /// An inventory its owner fills; no watches (benches, tests). It counts as synced, and
    /// kubelet credentials come from [`Settings::kubelet`] only.
    Static(Arc<Inventory>),
}

/// Who answers the delegated authentication and authorization questions.
///
/// There is deliberately no flag that turns authentication off: only code that builds a
/// [`Setup`] can choose [`Auth::DisabledForTesting`], as metrics-server's internal
/// `DisableAuthForTesting` option.
#[derive(Clone, Debug, Default)]
pub enum Auth {
    /// The Kubernetes API the settings name: [`Settings::authentication_kubeconfig`] for
    /// TokenReview and the `extension-apiserver-authentication` ConfigMap,
    /// [`Settings::authorization_kubeconfig`] for SubjectAccessReview; each defaults to the
    /// cluster's client configuration (`--kubeconfig`, in-cluster, or that of
    /// [`Cluster::Kube`]).
    #[default]
    FromSettings,
    /// This Kubernetes API for both (the sandbox's or a test's simulated control plane); every
    /// other authentication and authorization setting still applies.
    Kube(Box<kube::Config>),
    /// No authentication and no authorization: every request is served, with no user in its
    /// extensions. For tests of other layers only.
    DisabledForTesting,
}

/// What [`run_with`] takes besides the [`Settings`]: what no flag sets.
pub struct Setup {
    /// A bound listener (port 0 in tests); `None` binds [`Settings::listen`]'s address.
    pub listener: Option<TcpListener>,
    /// Where nodes and pods come from.
    pub cluster: Cluster,
    /// How often every credential file is checked for changes: `--tls-cert-file` /
    /// `--tls-private-key-file`, the kubelet token, client certificate and CA, and the client
    /// CA files of authentication.
    pub cert_reload_interval: Duration,
    /// Counts what the credential reloaders did (tests wait on it).
    pub reloads: Reloads,
    /// Who authenticates and authorizes requests.
    pub auth: Auth,
    /// Filters every request passes, in order, after authentication (the user is in the
    /// extensions) and before authorization: where k8s.io/apiserver sheds load.
    pub filters: Vec<Arc<dyn Filter>>,
    /// Where the scrape loop (on the first) and the scrapes (each node on one) run, and with
    /// them the kubelet connections and the store's ingest; empty: the runtime that runs
    /// [`run_with`]. See [`run_until_signalled`].
    pub scrape_threads: Vec<tokio::runtime::Handle>,
    /// Where the scrape loop reports its first round (the scrape thread reads it too).
    pub progress: Arc<Progress>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("listener", &self.listener)
            .field("cluster", &self.cluster)
            .field("cert_reload_interval", &self.cert_reload_interval)
            .field("reloads", &self.reloads.counts())
            .field("auth", &self.auth)
            .field("filters", &self.filters.len())
            .field("scrape_threads", &self.scrape_threads.len())
            .field(
                "first_round_complete",
                &self.progress.first_round_complete(),
            )
            .finish()
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            listener: None,
            cluster: Cluster::FromSettings,
            cert_reload_interval: Duration::from_secs(2),
            reloads: Reloads::default(),
            auth: Auth::FromSettings,
            filters: Vec::new(),
            scrape_threads: Vec::new(),
            progress: Arc::new(Progress::default()),
        }
    }
}

/// Runs metrics-server until `shutdown` is cancelled: connects to the cluster, scrapes
/// kubelets and serves HTTPS on [`Settings::listen`].
pub async fn run(settings: Settings, shutdown: CancellationToken) -> Result<(), Error> {
    run_with(settings, Setup::default(), shutdown).await
}

/// [`run`] with a pre-bound listener, another source of nodes and pods, or other timings.
pub async fn run_with(
    settings: Settings,
    setup: Setup,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let started_ns = serve::router::unix_now_ns();

    // The cluster: a Kubernetes client and the inventory it feeds, or a static inventory.
    let (kube_config, inventory, inventory_is_static) = match setup.cluster {
        Cluster::FromSettings => (
            Some(
                kubeconfig::load(settings.kubeconfig.as_deref())
                    .await
                    .map_err(Error::KubeConfig)?,
            ),
            Arc::new(Inventory::new()),
            false,
        ),
        Cluster::Kube(c) => (Some(*c), Arc::new(Inventory::new()), false),
        Cluster::Static(inventory) => {
            // Filled by its owner: as listed as it will ever be.
            inventory.mark_synced();
            (None, inventory, true)
        }
    };
    let kubelet_settings = credentials::kubelet::settings(
        &settings.kubelet,
        settings.kubelet_client.clone(),
        kube_config.as_ref(),
    )
    .map_err(|e| Error::Credentials {
        flag: e.flag,
        source: e.source,
    })?;
    let kubelet_client =
        kubelet::client::Client::new(kubelet_settings.config).map_err(Error::Kubelet)?;
    let mut reloaders = kubelet_settings
        .files
        .reloaders(&kubelet_client, &setup.reloads);

    // Shared state, the router and the server.
    let mut registry = Registry::default();
    // The store measures each pod's containers for the protobuf lists as it builds usage,
    // and takes a pod's usage only from the node the inventory places it on.
    let store = Arc::new(
        Store::new(
            settings
                .store
                .measured_by(crate::api::proto::containers_len),
        )
        .placed_by(inventory.clone()),
    );
    let progress = setup.progress.clone();
    let metrics = Arc::new(Metrics::new(&mut registry, settings.resolution()));
    let delegation = match setup.auth {
        Auth::DisabledForTesting => {
            tracing::warn!("authentication and authorization are disabled (tests only)");
            None
        }
        auth => Some(delegation(&settings, auth, kube_config.as_ref()).await?),
    };
    let audit_metrics = crate::audit::Metrics::register(&mut registry);
    let auditor = match &settings.audit {
        Some(config) => Some(Arc::new(
            crate::audit::Auditor::new(config, audit_metrics).map_err(Error::Audit)?,
        )),
        None => None,
    };
    let mut authentication: Vec<Arc<dyn Filter>> = Vec::new();
    let mut authorization: Vec<Arc<dyn Filter>> = Vec::new();
    if let Some(d) = &delegation {
        reloaders.extend(d.authenticator.ca_file_reloaders(&setup.reloads));
        authentication.push(Arc::new(access::Authentication::new(
            d.authenticator.clone(),
        )));
    }
    // Right after authentication and before impersonation, as `WithAudit` sits.
    if let Some(auditor) = &auditor {
        authentication.push(auditor.filter());
    }
    if let Some(d) = &delegation {
        authentication.push(Arc::new(access::Impersonation::new(d.authorizer.clone())));
        authorization.push(Arc::new(access::Authorization::new(d.authorizer.clone())));
    }
    // `setup.filters` see the user, and run before admission.
    authentication.extend(setup.filters);
    let stack = stack::build_router(
        stack::Parts {
            sources: health::Sources {
                inventory: inventory.clone(),
                store: store.clone(),
                progress: progress.clone(),
                inventory_is_static,
            },
            node_selector: settings.scrape.node_selector.clone(),
            health: health::Config {
                resolution: settings.resolution(),
                readiness_timeout: settings.readiness_timeout,
                started_ns,
            },
            shed: Some(settings.shed),
            authentication,
            authorization,
            clock: None,
            node_series: Some(metrics.node_series()),
            debug_flags: settings
                .debug_flags
                .then_some(crate::cli::logging::set_verbosity as serve::debugflags::Setter),
            audit: auditor.clone(),
        },
        registry,
    );
    let health = stack.health;
    let (server, reloader) = stack::serve(
        &settings.listen,
        setup.listener,
        stack.router,
        settings.serving.clone(),
        &setup.reloads,
    )
    .await?;
    reloaders.extend(reloader);
    let addr = server
        .local_addr()
        .map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
    tracing::info!(
        address = %addr,
        resolution = %scraper::go::duration_string(settings.resolution()),
        "serving securely"
    );

    let kube_client = match kube_config {
        Some(c) if !inventory_is_static => {
            Some(kube::Client::try_from(c).map_err(|e| Error::Kube(Box::new(e)))?)
        }
        _ => None,
    };

    // Every task, owned; `stop` ends them after the shutdown delay.
    let stop = CancellationToken::new();
    let mut tasks: JoinSet<&'static str> = JoinSet::new();
    {
        let stop = stop.clone();
        tasks.spawn(async move {
            server.run(stop).await;
            "the HTTPS server"
        });
    }
    if let Some(authenticator) = delegation
        .map(|d| d.authenticator)
        .filter(|a| a.watches_configmap())
    {
        let stop = stop.clone();
        tasks.spawn(async move {
            authenticator.run_watch(stop).await;
            "the authentication ConfigMap watch"
        });
    }
    for reloader in reloaders {
        let stop = stop.clone();
        let interval = setup.cert_reload_interval;
        tasks.spawn(async move {
            reloader.run(interval, stop).await;
            "a credential reloader"
        });
    }
    if let Some(client) = kube_client {
        let inventory = inventory.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            scraper::inventory::watch::run(client, inventory, stop).await;
            "the node and pod watches"
        });
    }
    {
        let scrape = scraper::scrape::Config {
            threads: setup.scrape_threads.clone(),
            ..settings.scrape.clone()
        };
        let stop = stop.clone();
        let scrape_loop = async move {
            scraper::scrape::run(
                scrape,
                inventory,
                store,
                kubelet_client,
                metrics,
                progress,
                stop,
            )
            .await;
            "the scrape loop"
        };
        match setup.scrape_threads.first() {
            Some(runtime) => tasks.spawn_on(scrape_loop, runtime),
            None => tasks.spawn(scrape_loop),
        };
    }

    let early = tokio::select! {
        () = shutdown.cancelled() => None,
        Some(ended) = tasks.join_next() => Some(ended.unwrap_or("a task (panicked)")),
    };
    health.begin_shutdown();
    if early.is_none() {
        let delay = settings.shutdown_delay;
        if !delay.is_zero() {
            tracing::info!(delay = %scraper::go::duration_string(delay), "shutting down: /readyz fails, still serving");
            tokio::time::sleep(delay).await;
        }
    }
    tracing::info!("stopping");
    stop.cancel();
    while let Some(ended) = tasks.join_next().await {
        tracing::debug!(task = ended.unwrap_or("a task (panicked)"), "stopped");
    }
    // The requests are done: what the audit webhook still holds goes out, as the batch
    // backend's Shutdown sends it.
    if let Some(auditor) = &auditor {
        auditor.shutdown(AUDIT_FLUSH).await;
    }
    match early {
        Some(name) => Err(Error::TaskEnded(name)),
        None => Ok(()),
    }
}

/// The delegated authenticator and authorizer.
struct Delegation {
    authenticator: Arc<Authenticator>,
    authorizer: Arc<Authorizer>,
}

/// Builds the authenticator (reading the CA files and, unless skipped, the ConfigMap once)
/// and the authorizer, each with a client for its own kubeconfig.
async fn delegation(
    settings: &Settings,
    auth: Auth,
    cluster: Option<&kube::Config>,
) -> Result<Delegation, Error> {
    let kube_error = |e: kube::Error| Error::Kube(Box::new(e));
    let authn_kube = delegated_kube_config(
        "authentication",
        &auth,
        settings.authentication_kubeconfig.as_deref(),
        cluster,
        settings.kubeconfig.as_deref(),
    )
    .await?;
    let authz_kube = delegated_kube_config(
        "authorization",
        &auth,
        settings.authorization_kubeconfig.as_deref(),
        cluster,
        settings.kubeconfig.as_deref(),
    )
    .await?;

    let authorizer = Authorizer::new(
        settings.authz.clone(),
        Some(auth::review_client(authz_kube).map_err(kube_error)?),
    )?;
    let watch_client = kube::Client::try_from(authn_kube.clone()).map_err(kube_error)?;
    let review_client = auth::review_client(authn_kube).map_err(kube_error)?;
    let authenticator = Authenticator::new(settings.authn.clone(), Some(review_client))
        .await?
        .with_watch_client(watch_client);
    Ok(Delegation {
        authenticator: Arc::new(authenticator),
        authorizer: Arc::new(authorizer),
    })
}

/// The client configuration for delegated `what` ([`kubeconfig::delegated`]).
async fn delegated_kube_config(
    what: &'static str,
    auth: &Auth,
    own: Option<&Path>,
    cluster: Option<&kube::Config>,
    main: Option<&Path>,
) -> Result<kube::Config, Error> {
    let given = match auth {
        Auth::Kube(c) => Some(&**c),
        _ => None,
    };
    kubeconfig::delegated(given, own, cluster, main)
        .await
        .map_err(|message| Error::DelegatedKubeConfig { what, message })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_scrape_thread_for_two_cores_up_to_four() {
        let threads: Vec<usize> = [0, 1, 2, 3, 4, 8, 9, 64].map(scrape_threads).to_vec();
        assert_eq!(threads, [1, 1, 1, 2, 2, 4, 4, 4]);
    }

    #[tokio::test]
    async fn an_unusable_delegated_kubeconfig_is_a_configuration_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent");
        let err = delegated_kube_config(
            "authentication",
            &Auth::FromSettings,
            Some(&missing),
            None,
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 64);
        assert!(
            err.to_string()
                .starts_with("failed to get delegated authentication kubeconfig: "),
            "{err}"
        );
    }
}
