//! Many simulated kubelets in one process: one HTTPS listener per node on its own `127.0.0.1`
//! port, one shared serving certificate and TLS configuration, one Tokio runtime. Each node
//! serves `/metrics/resource` and `/stats/summary` rendered at request time from its
//! [`SimNode`] model (as of each sample's last housekeeping), so counters move. Cheap enough for thousands of nodes (no per-node
//! certificate, fault switch or request log).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::{Body, Error, SimNode, full, metrics_answer, render};

/// The Unix-ms clock the fleet renders at (the wall clock in harnesses, a shared test time in
/// tests).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Request counters of a [`SimFleet`], summed over its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetCounts {
    /// Requests received (any path).
    pub requests: u64,
    /// Requests answered 200 with a metrics body.
    pub served: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// Bytes of the metrics bodies served, as sent (gzipped when asked).
    pub body_bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    served: AtomicU64,
    connections: AtomicU64,
    body_bytes: AtomicU64,
}

struct FleetNode {
    /// Changed by [`SimFleet::update`] (pod churn); rendering holds the read lock only while
    /// it samples the stats.
    model: RwLock<SimNode>,
    clock: Clock,
    counters: Arc<Counters>,
}

/// Many simulated kubelets sharing one certificate and runtime. Dropping it stops serving;
/// [`SimFleet::shutdown`] waits.
pub struct SimFleet {
    nodes: Vec<Arc<FleetNode>>,
    names: Vec<String>,
    addrs: Vec<SocketAddr>,
    counters: Arc<Counters>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

impl std::fmt::Debug for SimFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFleet")
            .field("nodes", &self.names.len())
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl SimFleet {
    /// Starts one HTTPS listener on `127.0.0.1:0` per model, all presenting one certificate
    /// issued by `ca` for `127.0.0.1` and `localhost`; bodies are rendered at `clock()`.
    pub async fn start(
        ca: &tls::issue::Ca,
        models: Vec<SimNode>,
        clock: Clock,
    ) -> Result<SimFleet, Error> {
        SimFleet::start_serving(&SimFleet::serving_identity(ca)?, models, clock).await
    }

    /// The certificate every node of a fleet presents: issued by `ca` for `127.0.0.1` and
    /// `localhost`.
    pub fn serving_identity(ca: &tls::issue::Ca) -> Result<tls::issue::Issued, Error> {
        Ok(ca.issue(&tls::issue::LeafSpec {
            common_name: "simulated-kubelet".to_owned(),
            organizations: Vec::new(),
            sans: vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            server: true,
            client: false,
        })?)
    }

    /// [`SimFleet::start`] with a given serving certificate (a fleet in another process
    /// presents the one its parent issued).
    pub async fn start_serving(
        serving: &tls::issue::Issued,
        models: Vec<SimNode>,
        clock: Clock,
    ) -> Result<SimFleet, Error> {
        let key = tls::server::certified_key(&serving.identity)?;
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(key));
        let acceptor = TlsAcceptor::from(Arc::new(tls::server::config(resolver, false)?));
        let counters = Arc::new(Counters::default());
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let mut names = Vec::with_capacity(models.len());
        let mut addrs = Vec::with_capacity(models.len());
        let mut nodes = Vec::with_capacity(models.len());
        for model in models {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            addrs.push(listener.local_addr()?);
            names.push(model.name.clone());
            let node = Arc::new(FleetNode {
                model: RwLock::new(model),
                clock: clock.clone(),
                counters: counters.clone(),
            });
            nodes.push(node.clone());
            tasks.spawn(accept(node, listener, acceptor.clone(), shutdown.clone()));
        }
        Ok(SimFleet {
            nodes,
            names,
            addrs,
            counters,
            shutdown,
            tasks,
        })
    }

    /// How many nodes it serves.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether it serves no node.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The name of node `i` (in the order of the models given to [`SimFleet::start`]).
    pub fn node_name(&self, i: usize) -> Option<&str> {
        self.names.get(i).map(String::as_str)
    }

    /// Where node `i` listens.
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        self.addrs.get(i).copied()
    }

    /// Changes node `i`'s model (its pods, their containers), as a kubelet sees pods come
    /// and go: the next request renders the changed model. `false`: no such node.
    pub fn update(&self, i: usize, f: impl FnOnce(&mut SimNode)) -> bool {
        let Some(node) = self.nodes.get(i) else {
            return false;
        };
        f(&mut node.model.write().unwrap_or_else(|e| e.into_inner()));
        true
    }

    /// Request counters summed over every node.
    pub fn counts(&self) -> FleetCounts {
        FleetCounts {
            requests: self.counters.requests.load(Ordering::Relaxed),
            served: self.counters.served.load(Ordering::Relaxed),
            connections: self.counters.connections.load(Ordering::Relaxed),
            body_bytes: self.counters.body_bytes.load(Ordering::Relaxed),
        }
    }

    /// A node record for node `i`: InternalIP 127.0.0.1 and its port in the node status.
    pub fn node_record(&self, i: usize) -> Option<scraper::inventory::NodeRecord> {
        let (name, addr) = (self.names.get(i)?, self.addrs.get(i)?);
        Some(scraper::inventory::NodeRecord {
            name: scraper::point::NodeName::from(name.as_str()),
            labels: scraper::inventory::Labels::default(),
            addresses: vec![scraper::inventory::NodeAddress {
                kind: "InternalIP".into(),
                address: "127.0.0.1".into(),
            }],
            kubelet_port: Some(addr.port()),
            metrics_path: None,
        })
    }

    /// Stops every listener and connection and waits for them.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Drop for SimFleet {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept(
    node: Arc<FleetNode>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shutdown: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                node.counters.connections.fetch_add(1, Ordering::Relaxed);
                let node = node.clone();
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let node = node.clone();
                        async move { Ok::<_, Infallible>(handle(&node, &req)) }
                    });
                    if let Ok(tls) = acceptor.accept(stream).await {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

fn handle(node: &FleetNode, req: &Request<Incoming>) -> Response<Body> {
    node.counters.requests.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path();
    let summary = if path.starts_with("/stats/summary") {
        true
    } else if path.ends_with("/metrics/resource") {
        false
    } else {
        return full(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n");
    };
    let stats = {
        let model = node.model.read().unwrap_or_else(|e| e.into_inner());
        model.stats_at((node.clock)())
    };
    let (response, len) = metrics_answer(req.headers(), summary, render(&stats, summary));
    node.counters.served.fetch_add(1, Ordering::Relaxed);
    node.counters
        .body_bytes
        .fetch_add(u64::try_from(len).unwrap_or(u64::MAX), Ordering::Relaxed);
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn get(
        ca: &tls::issue::Ca,
        addr: SocketAddr,
        path: &str,
    ) -> (StatusCode, String, tokio::task::JoinHandle<()>) {
        let config =
            tls::client::config(&tls::client::Verify::Roots(vec![ca.cert().clone()]), None)
                .unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::get(path)
            .header("host", "127.0.0.1")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let status = resp.status();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap(), driver)
    }

    #[tokio::test]
    async fn each_node_serves_its_own_model_on_its_own_port_with_moving_counters() {
        tls::provider::install_default();
        let ca = tls::issue::Ca::new("fleet-test-ca").unwrap();
        let now = Arc::new(AtomicU64::new(1_000_000));
        let clock: Clock = {
            let now = now.clone();
            Arc::new(move || now.load(Ordering::SeqCst) as i64)
        };
        let models = vec![
            SimNode::generate("node-a", 2, 1, 0),
            SimNode::generate("node-b", 3, 2, 0),
        ];
        let fleet = SimFleet::start(&ca, models, clock).await.unwrap();
        assert_eq!(fleet.len(), 2);
        let (a, b) = (fleet.addr(0).unwrap(), fleet.addr(1).unwrap());
        assert_ne!(a.port(), b.port());
        assert_eq!(fleet.node_record(1).unwrap().kubelet_port, Some(b.port()));

        let (status, body_a, _d1) = get(&ca, a, "/metrics/resource").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body_a.contains("pod=\"node-a-pod-1\""), "{body_a}");
        assert!(!body_a.contains("node-b"));
        let (_, body_b, _d2) = get(&ca, b, "/stats/summary?only_cpu_and_memory=true").await;
        assert!(body_b.contains("\"nodeName\": \"node-b\""), "{body_b}");

        // The clock moves: the CPU counter line of one container changes.
        let cpu_line = |body: &str| {
            body.lines()
                .find(|l| l.starts_with("container_cpu_usage_seconds_total{"))
                .map(str::to_owned)
                .unwrap()
        };
        now.store(1_015_000, Ordering::SeqCst);
        let (_, later, _d3) = get(&ca, a, "/metrics/resource").await;
        assert_ne!(cpu_line(&body_a), cpu_line(&later));

        let (status, _, _d4) = get(&ca, a, "/other").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let counts = fleet.counts();
        assert_eq!(counts.requests, 4);
        assert_eq!(counts.served, 3);
        assert_eq!(counts.connections, 4);
        fleet.shutdown().await;
    }

    #[tokio::test]
    async fn an_updated_model_is_what_the_next_request_renders() {
        tls::provider::install_default();
        let ca = tls::issue::Ca::new("fleet-test-ca").unwrap();
        let clock: Clock = Arc::new(|| 1_000_000);
        let fleet = SimFleet::start(&ca, vec![SimNode::generate("node-a", 2, 1, 0)], clock)
            .await
            .unwrap();
        let addr = fleet.addr(0).unwrap();
        let (_, before, _d1) = get(&ca, addr, "/metrics/resource").await;
        assert!(before.contains("pod=\"node-a-pod-1\""), "{before}");

        assert!(fleet.update(0, |m| m.pods[1].name = "node-a-replacement".to_owned()));
        assert!(!fleet.update(1, |_| {}));
        let (_, after, _d2) = get(&ca, addr, "/metrics/resource").await;
        assert!(!after.contains("pod=\"node-a-pod-1\""), "{after}");
        assert!(after.contains("pod=\"node-a-replacement\""), "{after}");
        assert!(after.contains("pod=\"node-a-pod-0\""), "{after}");
        fleet.shutdown().await;
    }
}
