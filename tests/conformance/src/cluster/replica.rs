//! The server's replicas, as the pods of its Deployment: each one in-process server
//! ([`apiserver::run::run_with`]) on its own loopback port (its pod IP) with its own
//! `--cert-dir` (its emptyDir) and the same flags (parsed with [`apiserver::cli`], as the
//! binary parses its container's arguments), and an endpoint of the metrics-server
//! Service behind both APIServices; and the [`Cluster`] methods that wait for them, restart
//! them one at a time as a rollout does, and talk to one directly.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser as _;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Cluster, Error, io};
use crate::aggregator::{EndpointStatus, METRICS_SERVER_SERVICE};

/// What a replica's task returns.
pub(super) type Task = JoinHandle<Result<(), apiserver::run::Error>>;

/// One running (or stopping) replica.
pub(super) struct Replica {
    /// Where it listens.
    pub(super) addr: SocketAddr,
    /// 0 for the first pod of this replica, one more after each restart.
    pub(super) generation: u32,
    /// Cancelling it begins the server's graceful shutdown.
    pub(super) stop: CancellationToken,
    /// The server; `None` once taken by a restart or by [`super::Cluster::stop`].
    pub(super) task: Option<Task>,
}

impl Replica {
    /// `https://127.0.0.1:<port>`: its endpoint.
    pub(super) fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

/// Starts pod `generation` of replica `index` with `args` (the program name first) and a
/// fresh `--cert-dir` under `dir`; it stops when `parent` or its own token is cancelled.
pub(super) async fn start(
    args: &[String],
    dir: &Path,
    index: usize,
    generation: u32,
    parent: &CancellationToken,
) -> Result<Replica, Error> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io("binding the server's listener"))?;
    let addr = listener
        .local_addr()
        .map_err(io("the server's listener address"))?;
    let cert_dir = dir
        .join(format!("replica-{index}-{generation}"))
        .join("certs");
    let mut argv = args.to_vec();
    argv.insert(
        argv.len().min(1),
        format!("--cert-dir={}", cert_dir.display()),
    );
    let settings = apiserver::cli::Flags::try_parse_from(&argv)
        .map_err(|e| Error::Flags(e.to_string()))?
        .settings()
        .map_err(|e| Error::Flags(e.to_string()))?;
    let setup = apiserver::run::Setup {
        listener: Some(listener),
        ..apiserver::run::Setup::default()
    };
    let stop = parent.child_token();
    let task = tokio::spawn(apiserver::run::run_with(settings, setup, stop.clone()));
    Ok(Replica {
        addr,
        generation,
        stop,
        task: Some(task),
    })
}

/// What a finished server task means: `Ok` when it stopped cleanly.
pub(super) fn outcome(
    joined: Result<Result<(), apiserver::run::Error>, tokio::task::JoinError>,
) -> Result<(), Error> {
    match joined {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Server(Box::new(e))),
        Err(_) => Err(Error::ServerEnded),
    }
}

/// How long a restarted replica may take to exit: its shutdown delay and drain.
const REPLICA_EXIT_TIMEOUT: Duration = Duration::from_secs(90);

impl Cluster {
    /// Waits until every replica's endpoint is ready (its `/readyz` passed) and both
    /// APIServices are Available.
    pub async fn wait_ready(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + self.config.ready_timeout;
        for index in 0..self.replicas() {
            self.wait_replica_ready_until(index, deadline).await?;
        }
        let aggregator = self.control_plane().aggregator();
        for name in ["v1beta1.metrics.k8s.io", "v1.metrics.k8s.io"] {
            loop {
                self.check_server()?;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return Err(Error::Timeout(format!("APIService {name} to be Available")));
                }
                if aggregator
                    .wait_available(name, left.min(Duration::from_millis(500)))
                    .await
                {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Waits until replica `index`'s current endpoint is ready (its readiness probe passed),
    /// for at most [`super::ClusterConfig::ready_timeout`].
    pub async fn wait_replica_ready(&self, index: usize) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + self.config.ready_timeout;
        self.wait_replica_ready_until(index, deadline).await
    }

    async fn wait_replica_ready_until(
        &self,
        index: usize,
        deadline: tokio::time::Instant,
    ) -> Result<(), Error> {
        let url = self.replica_url(index)?;
        let aggregator = self.control_plane().aggregator();
        loop {
            self.check_server()?;
            if !aggregator
                .endpoints(METRICS_SERVER_SERVICE)
                .iter()
                .any(|e| e.url == url)
            {
                return Err(Error::EndpointGone(url));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!(
                    "replica {index} ({url}) to be ready"
                )));
            }
            // Woken by the readiness change; the bound only lets a crashed server be noticed.
            if aggregator
                .wait_endpoint_ready(
                    METRICS_SERVER_SERVICE,
                    &url,
                    left.min(Duration::from_millis(500)),
                )
                .await
            {
                return Ok(());
            }
        }
    }

    /// Does to replica `index` what a rollout does to one pod: removes its endpoint (no new
    /// request reaches it), begins its graceful shutdown (`--shutdown-delay-duration`, then
    /// the drain of requests in flight) and waits for it to exit, then starts a new server
    /// for the replica on a new port (a new pod IP) and adds it as a new endpoint, not
    /// ready until its readiness probe passes ([`Cluster::wait_replica_ready`]).
    pub async fn restart_replica(&self, index: usize) -> Result<(), Error> {
        let _one_at_a_time = self.restarting.lock().await;
        let (url, stop, task, generation) = {
            let mut replicas = self.replicas.lock();
            let r = replicas.get_mut(index).ok_or(Error::NoSuchReplica(index))?;
            (r.url(), r.stop.clone(), r.task.take(), r.generation)
        };
        let aggregator = self.control_plane().aggregator();
        aggregator.remove_endpoint(METRICS_SERVER_SERVICE, &url);
        stop.cancel();
        if let Some(task) = task {
            let exited = tokio::time::timeout(REPLICA_EXIT_TIMEOUT, task)
                .await
                .map_err(|_| Error::Timeout(format!("replica {index} ({url}) to exit")))?;
            outcome(exited)?;
        }
        let replica = start(
            &self.server_args,
            self.dir.path(),
            index,
            generation + 1,
            &self.stop,
        )
        .await?;
        let url = replica.url();
        if let Some(slot) = self.replicas.lock().get_mut(index) {
            *slot = replica;
        }
        aggregator.add_endpoint(METRICS_SERVER_SERVICE, &url)?;
        Ok(())
    }

    /// How many replicas the server has.
    pub fn replicas(&self) -> usize {
        self.replicas.lock().len()
    }

    /// Replica `index`'s current address.
    pub fn replica_addr(&self, index: usize) -> Result<SocketAddr, Error> {
        self.replicas
            .lock()
            .get(index)
            .map(|r| r.addr)
            .ok_or(Error::NoSuchReplica(index))
    }

    fn replica_url(&self, index: usize) -> Result<String, Error> {
        Ok(format!("https://{}", self.replica_addr(index)?))
    }

    /// The endpoints of the Service behind both APIServices.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.control_plane()
            .aggregator()
            .endpoints(METRICS_SERVER_SERVICE)
    }

    /// An error when a replica's server has ended without being asked to.
    fn check_server(&self) -> Result<(), Error> {
        let finished = {
            let mut replicas = self.replicas.lock();
            replicas
                .iter_mut()
                .find(|r| r.task.as_ref().is_some_and(|t| t.is_finished()))
                .and_then(|r| r.task.take())
        };
        match finished {
            // The task has finished: polling it once yields its result.
            Some(task) => Err(match futures::FutureExt::now_or_never(task) {
                Some(Ok(Err(e))) => Error::Server(Box::new(e)),
                _ => Error::ServerEnded,
            }),
            None => Ok(()),
        }
    }

    /// Replica 0's own address (not through the aggregator).
    pub fn server_addr(&self) -> SocketAddr {
        self.replica_addr(0)
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// `GET path` on replica 0 directly (as a kubelet probe or a Prometheus scraper would),
    /// as the admin (bearer token) or anonymously; the status and the body.
    pub async fn server_get(&self, path: &str, admin: bool) -> Result<(StatusCode, String), Error> {
        self.replica_get(0, path, admin).await
    }

    /// [`Cluster::server_get`] on replica `index`.
    pub async fn replica_get(
        &self,
        index: usize,
        path: &str,
        admin: bool,
    ) -> Result<(StatusCode, String), Error> {
        let addr = self.replica_addr(index)?;
        let client = crate::https::client::<Empty<Bytes>>(&tls::client::Verify::Insecure, None)?;
        let mut req = Request::get(format!("https://{addr}{path}"));
        if admin {
            req = req.header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.control_plane().admin_token()),
            );
        }
        let req = req
            .body(Empty::new())
            .map_err(|e| Error::Request(e.to_string()))?;
        let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
            .await
            .map_err(|_| Error::Request("timed out".to_owned()))?
            .map_err(|e| Error::Request(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| Error::Request(e.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}
