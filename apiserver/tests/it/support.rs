//! Starting the server in-process and talking to it over TLS.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::config::{Listen, ServingCert, Settings};
use apiserver::credentials::Reloads;
use apiserver::run::{Auth, Cluster, Setup};
use apiserver::serve::{self, Filter, Router, Server};
use apiserver::stack;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use scraper::inventory::Inventory;
use scraper::point::{ContainerSample, NodeName, NodeScrape, Sample};
use tls::issue::{Ca, LeafSpec};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

/// A server running in this process.
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    pub(crate) shutdown: CancellationToken,
    pub(crate) task: JoinHandle<Result<(), apiserver::run::Error>>,
    pub(crate) started: Instant,
    pub(crate) dir: PathBuf,
    /// What the credential reloaders did: wait on it after changing a file.
    pub(crate) reloads: apiserver::credentials::Reloads,
    _tmp: tempfile::TempDir,
}

impl Running {
    /// Where the self-signed certificate goes.
    pub(crate) fn cert_dir(&self) -> PathBuf {
        self.dir.join("certs")
    }
}

/// The settings every test server starts from: a 10 s resolution, 1 s kubelet timeout,
/// kubelet certificates not verified, a 5 s drain, the self-signed certificate in
/// `dir/certs`.
pub(crate) fn settings(dir: &Path) -> Settings {
    let mut settings = Settings::for_resolution(Duration::from_secs(10));
    settings.scrape.request_timeout = Duration::from_secs(1);
    settings.kubelet_client.timeout = Duration::from_secs(1);
    settings.kubelet.insecure_tls = true;
    settings.serving.drain_timeout = Duration::from_secs(5);
    settings.listen.cert = ServingCert::self_signed_in(dir.join("certs"));
    settings
}

/// Starts the server with a static (synced, empty) inventory, short timings, authentication
/// and authorization off, and the [`settings`] as `edit` leaves them, and waits until it
/// answers.
pub(crate) async fn start(edit: impl FnOnce(&mut Settings)) -> Running {
    start_with(edit, Vec::new(), None).await
}

/// [`start`] with filters, and a temporary directory of the caller's.
pub(crate) async fn start_with(
    edit: impl FnOnce(&mut Settings),
    filters: Vec<Arc<dyn Filter>>,
    tmp: Option<tempfile::TempDir>,
) -> Running {
    launch(edit, filters, tmp, Auth::DisabledForTesting).await
}

/// [`start_with`] with a choice of authentication and authorization.
pub(crate) async fn launch(
    edit: impl FnOnce(&mut Settings),
    filters: Vec<Arc<dyn Filter>>,
    tmp: Option<tempfile::TempDir>,
    auth: Auth,
) -> Running {
    tls::provider::install_default();
    let tmp = tmp.unwrap_or_else(|| tempfile::tempdir().unwrap());
    let dir = tmp.path().to_path_buf();
    let mut config = settings(&dir);
    edit(&mut config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let reloads = apiserver::credentials::Reloads::default();
    let setup = Setup {
        listener: Some(listener),
        cluster: Cluster::Static(Arc::new(Inventory::new())),
        cert_reload_interval: Duration::from_millis(200),
        reloads: reloads.clone(),
        auth,
        filters,
        ..Setup::default()
    };
    let task = tokio::spawn(apiserver::run::run_with(config, setup, shutdown.clone()));
    let running = Running {
        addr,
        shutdown,
        task,
        started,
        dir,
        reloads,
        _tmp: tmp,
    };
    // Ready to answer when a TLS handshake completes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if Client::insecure().connect(addr).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running
}

/// A server for `router` on a free port of 127.0.0.1, with a self-signed `localhost`
/// certificate in `dir` (the stacks tests assemble with [`stack::build_router`]).
pub(crate) async fn local_server(dir: &Path, router: Arc<Router>, config: serve::Config) -> Server {
    stack::serve(
        &Listen::local(dir),
        None,
        router,
        config,
        &Reloads::default(),
    )
    .await
    .unwrap()
    .0
}

/// A TLS client.
#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) verify: tls::client::Verify,
    pub(crate) identity: Option<tls::Identity>,
    pub(crate) alpn: Vec<Vec<u8>>,
    pub(crate) server_name: String,
}

impl Client {
    /// Trusts anything; offers h2 and http/1.1.
    pub(crate) fn insecure() -> Self {
        Client {
            verify: tls::client::Verify::Insecure,
            identity: None,
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            server_name: "localhost".to_owned(),
        }
    }

    /// Trusts only `roots`, checking the certificate against `server_name`.
    pub(crate) fn trusting(roots: Vec<tls::CertificateDer<'static>>, server_name: &str) -> Self {
        Client {
            verify: tls::client::Verify::Roots(roots),
            server_name: server_name.to_owned(),
            ..Client::insecure()
        }
    }

    /// Offers only these ALPN protocols.
    pub(crate) fn alpn(mut self, protocols: &[&[u8]]) -> Self {
        self.alpn = protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    pub(crate) async fn connect(&self, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
        let mut config = tls::client::config(&self.verify, self.identity.as_ref())
            .map_err(std::io::Error::other)?;
        config.alpn_protocols = self.alpn.clone();
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::try_from(self.server_name.clone())
            .map_err(std::io::Error::other)?;
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// GET `path_and_query` on a new connection, over whatever ALPN chose.
    pub(crate) async fn get(&self, addr: SocketAddr, path_and_query: &str) -> Reply {
        self.get_with(addr, path_and_query, &[]).await
    }

    pub(crate) async fn get_with(
        &self,
        addr: SocketAddr,
        path_and_query: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let stream = self.connect(addr).await.expect("TLS connection");
        get_on(stream, path_and_query, headers).await
    }
}

/// What came back.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
    /// The body as text (lossy: protobuf bodies are read from `bytes`).
    pub(crate) body: String,
    pub(crate) bytes: Vec<u8>,
}

/// GET on an established TLS stream, HTTP/2 when ALPN chose h2, else HTTP/1.1.
pub(crate) async fn get_on(
    stream: TlsStream<TcpStream>,
    path_and_query: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(stream);
    let mut request = if h2 {
        Request::get(format!("https://localhost{path_and_query}"))
    } else {
        Request::get(path_and_query).header(http::header::HOST, "localhost")
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = send(io, h2, request.body(Empty::<Bytes>::new()).unwrap()).await;
    let status = response.status();
    let version = response.version();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        version,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        bytes: body.to_vec(),
    }
}

/// The leaf certificate the server presents.
pub(crate) async fn served_leaf(client: &Client, addr: SocketAddr) -> std::io::Result<Vec<u8>> {
    let stream = client.connect(addr).await?;
    let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
    Ok(chain.first().map(|c| c.to_vec()).unwrap_or_default())
}

/// DNS and IP SANs of a DER certificate.
pub(crate) fn sans_of(der: &[u8]) -> Vec<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    apiserver::serve::cert::subject_alt_names(&cert)
}

/// Polls `f` every 50 ms until it returns `Some`, for at most `within`.
pub(crate) async fn eventually<T, F, Fut>(within: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `request` on a new HTTP/1.1 or h2 client connection over `io`; the response head.
pub(crate) async fn send<B>(
    io: TokioIo<TlsStream<TcpStream>>,
    h2: bool,
    request: Request<B>,
) -> http::Response<hyper::body::Incoming>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await.unwrap()
    }
}

/// Two scrapes of `node` 15 s apart and ending now, one `app` container per pod of
/// `default`: usage for the node and every pod.
pub(crate) fn ingest_two_scrapes(store: &scraper::store::Store, node: &NodeName, pods: &[String]) {
    const SECOND: i64 = 1_000_000_000;
    let now = serve::router::unix_now_ns();
    for round in 0..2_i64 {
        let ts = now - (1 - round) * 15 * SECOND;
        let sample = Sample {
            timestamp_ns: ts,
            cpu_usage_ns_total: Some(u64::try_from(round + 1).unwrap() * 3_000_000_000),
            cpu_nanocores: None,
            memory_working_set_bytes: Some(64 << 20),
            start_time_ns: Some(now - 3600 * SECOND),
            swap_bytes: None,
        };
        let scrape = NodeScrape {
            node: Some(sample),
            containers: pods
                .iter()
                .map(|pod| ContainerSample {
                    namespace: Cow::Borrowed("default"),
                    pod: Cow::Borrowed(pod.as_str()),
                    container: Cow::Borrowed("app"),
                    sample,
                })
                .collect(),
        };
        store.ingest(node, &scrape, ts);
    }
}

/// A kubeconfig whose API server is nowhere: the watches retry, serving starts regardless.
pub(crate) fn write_unreachable_kubeconfig(path: &Path) {
    std::fs::write(
        path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\n",
    )
    .unwrap();
}

/// Whether the binary `child` (its stderr piped) logs "serving securely" within 20 s.
pub(crate) fn serving(child: &mut std::process::Child) -> bool {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("serving securely") {
                let _ = seen_tx.send(());
            }
        }
    });
    seen_rx.recv_timeout(Duration::from_secs(20)).is_ok()
}

/// A client presenting a certificate for `cn` in organizations `orgs`, issued by `ca`.
pub(crate) fn with_cert(ca: &Ca, cn: &str, orgs: &[&str]) -> Client {
    let issued = ca
        .issue(&LeafSpec {
            common_name: cn.to_owned(),
            organizations: orgs.iter().map(|o| (*o).to_owned()).collect(),
            client: true,
            ..LeafSpec::default()
        })
        .unwrap();
    Client {
        identity: Some(issued.identity),
        ..Client::insecure()
    }
}
