//! The serving stack, assembled one way for the binary ([`run`](crate::run())), the tests and
//! the load benchmark: [`build_router`] puts the API, health and self-metrics behind the
//! filter chain, and [`serve()`] puts the HTTPS server in front of it.
//!
//! The chain, in k8s.io/apiserver's order:
//! 1. authentication (the user goes into the request's extensions);
//! 2. admission ([`crate::shed`]: it needs the user, and a shed request costs no
//!    SubjectAccessReview);
//! 3. authorization;
//! 4. the cold-store check (the storage layer's place: an unauthorized caller still gets its
//!    403);
//! 5. the API, health and `/metrics` ([`Router`]).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use rustls::server::ResolvesServerCert;
use scraper::inventory::Inventory;
use scraper::metrics::NodeSeries;
use scraper::scrape::Progress;
use scraper::selector::LabelSelector;
use scraper::store::Store;
use tokio::net::TcpListener;

use crate::api::Api;
use crate::config::{Listen, ServingCert};
use crate::credentials::{Reloader, Reloads};
use crate::health::{self, Health};
use crate::selfmetrics::{self, Requests};
use crate::serve::{self, Filter, Router, Server, cert};
use crate::shed::{self, Admission};

/// What [`build_router`] assembles.
pub struct Parts {
    /// Where nodes, pods and their usage come from; what the health checks look at.
    pub sources: health::Sources,
    /// Which nodes are served (`--node-selector`).
    pub node_selector: LabelSelector,
    /// Readiness.
    pub health: health::Config,
    /// Load shedding; `None`: no admission and no cold-store check (tests of other layers,
    /// the load benchmark's baseline).
    pub shed: Option<shed::Config>,
    /// Step 1: who is asking (delegated authentication in `run`, a stand-in in tests).
    pub authentication: Vec<Arc<dyn Filter>>,
    /// Step 3: whether they may (delegated authorization in `run`).
    pub authorization: Vec<Arc<dyn Filter>>,
    /// The wall clock (Unix ns) of responses and of the cold-store rule; `None`: the real one.
    pub clock: Option<fn() -> i64>,
    /// The scrape loop's per-node metric families, which `/metrics` writes after the
    /// registry's (`scraper::metrics::Metrics::node_series`); `None`: no scrape loop.
    pub node_series: Option<Arc<NodeSeries>>,
    /// What `PUT /debug/flags/v` calls; `None`: `/debug/flags` is not served.
    pub debug_flags: Option<serve::debugflags::Setter>,
    /// The audit log, whose filter is already among `authentication`.
    pub audit: Option<Arc<crate::audit::Auditor>>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("shed", &self.shed)
            .field("authentication", &self.authentication.len())
            .field("authorization", &self.authorization.len())
            .finish_non_exhaustive()
    }
}

impl Parts {
    /// An inventory and a store their owner fills (tests, benchmarks): synced and scraped
    /// from the start, every node served, no readiness timeout, started now, default load
    /// shedding, no filters, the real clock.
    pub fn filled(inventory: Arc<Inventory>, store: Arc<Store>, resolution: Duration) -> Self {
        Parts {
            sources: health::Sources {
                inventory,
                store,
                progress: Arc::new(Progress::completed()),
                inventory_is_static: true,
            },
            node_selector: LabelSelector::default(),
            health: health::Config {
                resolution,
                readiness_timeout: None,
                started_ns: serve::router::unix_now_ns(),
            },
            shed: Some(shed::Config::default()),
            authentication: Vec::new(),
            authorization: Vec::new(),
            clock: None,
            node_series: None,
            debug_flags: None,
            audit: None,
        }
    }
}

/// What [`build_router`] made.
#[derive(Debug)]
pub struct Stack {
    /// Where each request goes.
    pub router: Arc<Router>,
    /// The health checks (`run` begins their shutdown).
    pub health: Arc<Health>,
    /// The admission filter, when shedding.
    pub admission: Option<Arc<Admission>>,
    /// Every metric family, as `/metrics` serves them.
    pub registry: Arc<Registry>,
}

/// The router over `parts`, with its metric families added to `registry` after those
/// already in it (the scrape loop's).
pub fn build_router(parts: Parts, mut registry: Registry) -> Stack {
    let sources = parts.sources;
    let api = Arc::new(Api::new(
        sources.inventory.clone(),
        sources.store.clone(),
        parts.node_selector,
        &mut registry,
    ));
    let requests = Requests::new(&mut registry);
    let admission = parts.shed.map(|config| {
        let admission = Admission::new(
            config,
            sources.store.clone(),
            sources.progress.clone(),
            &mut registry,
        );
        Arc::new(match parts.clock {
            Some(clock) => admission.with_clock(clock),
            None => admission,
        })
    });
    selfmetrics::register_process_metrics(&mut registry);
    let registry = Arc::new(registry);
    let health = Arc::new(Health::new(parts.health, Arc::new(sources)));

    let mut filters = parts.authentication;
    if let Some(admission) = &admission {
        filters.push(admission.clone());
    }
    filters.extend(parts.authorization);
    if let Some(admission) = &admission {
        filters.push(Arc::new(admission.cold_store()));
    }
    let mut router = Router::new(health.clone(), api, registry.clone(), requests);
    if let Some(clock) = parts.clock {
        router = router.with_clock(clock);
    }
    if let Some(series) = parts.node_series {
        router = router.with_node_series(series);
    }
    if let Some(set) = parts.debug_flags {
        router = router.with_debug_flags(set);
    }
    if let Some(auditor) = parts.audit {
        router = router.with_audit(auditor);
    }
    let router = filters.into_iter().fold(router, Router::with_filter);
    Stack {
        router: Arc::new(router),
        health,
        admission,
        registry,
    }
}

/// The HTTPS server over `router`, on `listener` or else bound to `listen.address`,
/// presenting `listen.cert`, and `listen.sni`'s certificates to clients asking for their
/// names; with a reloader for each certificate that comes from files.
pub async fn serve(
    listen: &Listen,
    listener: Option<TcpListener>,
    router: Arc<Router>,
    config: serve::Config,
    reloads: &Reloads,
) -> Result<(Server, Vec<Reloader>), serve::Error> {
    let (default, mut reloaders) = match &listen.cert {
        ServingCert::Files { cert, key } => {
            let (certs, reloader) = cert::reloaded(cert, key, reloads)?;
            (certs, vec![reloader])
        }
        ServingCert::SelfSigned { dir, sans } => (
            Arc::new(cert::Certs::new(cert::self_signed_in(dir, sans)?)),
            Vec::new(),
        ),
    };
    let certs: Arc<dyn ResolvesServerCert> = if listen.sni.is_empty() {
        default
    } else {
        let mut named = Vec::with_capacity(listen.sni.len());
        for sni in &listen.sni {
            let (certs, reloader) = cert::reloaded(&sni.cert, &sni.key, reloads)?;
            reloaders.push(reloader);
            named.push(cert::Named::new(certs, &sni.names));
        }
        Arc::new(cert::Sni::new(default, named))
    };
    let listener = match listener {
        Some(listener) => listener,
        None => serve::bind(listen.address, listen.reuse_port)?,
    };
    Ok((Server::new(listener, certs, router, config)?, reloaders))
}
