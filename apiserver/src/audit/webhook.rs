//! The audit webhook backend, as k8s.io/apiserver's `plugin/pkg/audit/webhook` behind
//! `plugin/pkg/audit/buffered` (`--audit-webhook-config-file`, `--audit-webhook-mode`,
//! `--audit-webhook-batch-*`, `--audit-webhook-initial-backoff`): events are POSTed, as an
//! `audit.k8s.io/v1` `EventList` in JSON, to the server of a kubeconfig file (Falco's
//! `https://falco.falco:9765/k8s-audit`, for one).
//!
//! Delivery (`webhook.GenericWebhook`): a 2xx answer is success. Connection errors, timeouts
//! (30 s a request), 500, 504, 429 and any answer with a `Retry-After` header are tried again
//! (`webhook.DefaultShouldRetry`) after an exponential backoff (`--audit-webhook-initial-backoff`,
//! factor 1.5, jitter 0.2), five attempts in all; any other answer, or a fifth failure, drops
//! the batch, logged and counted through the `on_error` callback.
//!
//! Modes:
//! - `batch` (the default), as the buffered backend: events wait in a queue of
//!   `--audit-webhook-batch-buffer-size` events (an event that finds it full is dropped and
//!   counted, "audit buffer queue blocked" logged at most once a second); a task takes batches
//!   of at most `--audit-webhook-batch-max-size` events, sending one when it is full or when
//!   `--audit-webhook-batch-max-wait` has passed since its first event, at most
//!   `--audit-webhook-batch-throttle-qps` batches a second (bursts of
//!   `--audit-webhook-batch-throttle-burst`) unless throttling is off. Go sends each batch in a
//!   goroutine of its own; here at most [`MAX_IN_FLIGHT`] are sent at once, so a dead webhook
//!   holds a bounded number of batches and the queue, not memory, absorbs the rest.
//! - `blocking` and `blocking-strict`: Go sends each event in the request's path and the
//!   request waits for it (`blocking-strict` failing the request when it cannot be sent). This
//!   server's callers cannot wait for the network, so each event goes through the same bounded
//!   queue ([`DEFAULT_BUFFER_SIZE`] events) and is sent as a batch of one as soon as it is
//!   taken, without batching wait or throttle. A request is not delayed by the network, and
//!   the only failure its caller sees is a full queue (`Webhook::process` returning false).
//!
//! On shutdown (`Webhook::shutdown`, or the `Webhook` dropped) no more events are taken and
//! what is queued is sent, as the buffered backend's `Shutdown` does, within a bound; what is
//! left when it passes is dropped and counted.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http::uri::PathAndQuery;
use http::{StatusCode, header};
use http_body_util::BodyExt as _;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Mode;
use super::OnDropped;
use super::event::Event;

/// `--audit-webhook-batch-buffer-size`'s default, and the queue of the blocking modes.
pub const DEFAULT_BUFFER_SIZE: usize = 10_000;
/// `--audit-webhook-batch-max-size`'s default.
pub const DEFAULT_MAX_BATCH_SIZE: usize = 400;
/// `--audit-webhook-batch-max-wait`'s default.
pub const DEFAULT_MAX_BATCH_WAIT: Duration = Duration::from_secs(30);
/// `--audit-webhook-batch-throttle-qps` and `-burst`'s defaults (throttling is on by default).
pub const DEFAULT_THROTTLE: (f64, u32) = (10.0, 15);
/// `--audit-webhook-initial-backoff`'s default.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// Batches sent at once.
pub const MAX_IN_FLIGHT: usize = 4;

/// One request's bound, answer body included (the webhook's REST client `Timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// `wait.Backoff{Steps: 5, Factor: 1.5, Jitter: 0.2}` of `webhook.DefaultRetryBackoffWithInitialDelay`.
const ATTEMPTS: u32 = 5;
const BACKOFF_FACTOR: f64 = 1.5;
const BACKOFF_JITTER: f64 = 0.2;
/// How long a dropped `Webhook` lets its task send what was queued.
const DROP_FLUSH: Duration = REQUEST_TIMEOUT;
/// How much of an error answer's body goes into the log.
const SNIPPET: usize = 512;
/// An `EventList`'s JSON around its items.
const LIST_HEAD: &[u8] =
    br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#;
const LIST_TAIL: &[u8] = b"]}";

/// `--audit-webhook-*`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--audit-webhook-config-file`: a kubeconfig whose cluster is the webhook.
    pub kubeconfig: PathBuf,
    /// `--audit-webhook-mode`; for `Batch`, `buffer` is `--audit-webhook-batch-buffer-size`.
    pub mode: Mode,
    /// `--audit-webhook-batch-max-size`.
    pub max_batch_size: usize,
    /// `--audit-webhook-batch-max-wait`.
    pub max_batch_wait: Duration,
    /// `--audit-webhook-batch-throttle-qps` and `-burst`; `None` when
    /// `--audit-webhook-batch-throttle-enable=false` (a QPS that is not positive also turns
    /// throttling off, where Go's flag validation refuses it).
    pub throttle: Option<(f64, u32)>,
    /// `--audit-webhook-initial-backoff`.
    pub initial_backoff: Duration,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read.
    #[error("unable to read the audit webhook kubeconfig {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig was read but no client could be made from it.
    #[error("unable to use the audit webhook kubeconfig {path}: {reason}")]
    Use {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// The webhook backend: the sending side of its queue.
pub struct Webhook {
    queue: mpsc::Sender<Vec<u8>>,
    /// When the task must be done flushing; set once, by `shutdown` or `drop`.
    stop: watch::Sender<Option<Instant>>,
    /// True once the task has ended.
    finished: watch::Receiver<bool>,
    closed: AtomicBool,
    on_error: OnDropped,
    /// Why events are dropped, logged at most once a second.
    report: super::OncePerSecond,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field(
                "queued",
                &(self.queue.max_capacity() - self.queue.capacity()),
            )
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// Loads the kubeconfig and starts the sending task on the current Tokio runtime (it
    /// panics outside one, as `tokio::spawn` does). `on_error` is called once per event that
    /// is dropped (queue full, or its batch failed for good), with how many.
    pub fn start(config: &Config, on_error: OnDropped) -> Result<Webhook, Error> {
        let delivery = Arc::new(Delivery::new(config)?);
        let (buffer, plan) = match config.mode {
            Mode::Batch { buffer } => (
                buffer,
                Plan {
                    max_batch_size: config.max_batch_size.max(1),
                    max_batch_wait: config.max_batch_wait,
                    throttle: config.throttle.and_then(limiter),
                },
            ),
            Mode::Blocking | Mode::BlockingStrict => (
                DEFAULT_BUFFER_SIZE,
                Plan {
                    max_batch_size: 1,
                    max_batch_wait: Duration::ZERO,
                    throttle: None,
                },
            ),
        };
        let (queue, receiver) = mpsc::channel(buffer.max(1));
        let (stop, stopping) = watch::channel(None);
        let (done, finished) = watch::channel(false);
        tokio::spawn(run(
            receiver,
            stopping,
            plan,
            delivery,
            on_error.clone(),
            done,
        ));
        Ok(Webhook {
            queue,
            stop,
            finished,
            closed: AtomicBool::new(false),
            on_error,
            report: super::OncePerSecond::default(),
        })
    }

    /// Queues an event; false when it was dropped (queue full, or shut down), which
    /// `on_error` counts.
    pub fn process(&self, event: &Event) -> bool {
        let reason = if self.closed.load(Ordering::Relaxed) {
            "audit backend shut down"
        } else {
            match event.list_item_json() {
                Ok(item) => match self.queue.try_send(item) {
                    Ok(()) => return true,
                    Err(TrySendError::Full(_)) => "audit buffer queue blocked",
                    Err(TrySendError::Closed(_)) => "audit backend shut down",
                },
                Err(_) => "unable to encode the audit event",
            }
        };
        (self.on_error)(1);
        if self.report.due() {
            tracing::error!(
                plugin = "webhook",
                "{reason}: audit events are being dropped"
            );
        }
        false
    }

    /// Stops taking events and sends what is queued, waiting at most `within` for it to be
    /// sent; what is not sent by then is dropped and counted (which takes a moment more).
    pub async fn shutdown(&self, within: Duration) {
        self.closed.store(true, Ordering::Relaxed);
        let deadline = later(within);
        self.stop.send_if_modified(|stop| {
            let first = stop.is_none();
            if first {
                *stop = Some(deadline);
            }
            first
        });
        let mut finished = self.finished.clone();
        // The task gives up at the deadline; the second is for it to count what it drops.
        let _ = tokio::time::timeout_at(
            later(within.saturating_add(Duration::from_secs(1))),
            finished.wait_for(|done| *done),
        )
        .await;
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop.send_if_modified(|stop| {
            let first = stop.is_none();
            if first {
                *stop = Some(later(DROP_FLUSH));
            }
            first
        });
    }
}

/// Now plus `wait`, or far away.
fn later(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

/// How the task makes batches.
struct Plan {
    max_batch_size: usize,
    max_batch_wait: Duration,
    throttle: Option<DefaultDirectRateLimiter>,
}

/// `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`; `None` for a QPS that is not positive.
fn limiter((qps, burst): (f64, u32)) -> Option<DefaultDirectRateLimiter> {
    let period = Duration::try_from_secs_f64(1.0 / qps).ok()?;
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Some(RateLimiter::direct(
        Quota::with_period(period)?.allow_burst(burst),
    ))
}

/// Waits for the throttle's next token.
async fn throttle(limiter: Option<&DefaultDirectRateLimiter>) {
    let Some(limiter) = limiter else {
        return;
    };
    let clock = DefaultClock::default();
    while let Err(not_until) = limiter.check() {
        tokio::time::sleep(not_until.wait_time_from(clock.now())).await;
    }
}

/// Events on their way (serialized): dropped undelivered, they are counted.
struct Batch {
    items: Vec<Vec<u8>>,
    on_error: OnDropped,
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.items.is_empty() {
            (self.on_error)(self.items.len());
        }
    }
}

impl Batch {
    fn new(on_error: &OnDropped) -> Batch {
        Batch {
            items: Vec::new(),
            on_error: on_error.clone(),
        }
    }

    /// The `EventList`.
    fn body(&self) -> Bytes {
        let size = self.items.iter().map(|i| i.len() + 1).sum::<usize>();
        let mut body = Vec::with_capacity(LIST_HEAD.len() + size + LIST_TAIL.len());
        body.extend_from_slice(LIST_HEAD);
        for (n, item) in self.items.iter().enumerate() {
            if n > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(LIST_TAIL);
        Bytes::from(body)
    }
}

/// The sending task: batches until told to stop, then the flush.
async fn run(
    mut queue: mpsc::Receiver<Vec<u8>>,
    mut stop: watch::Receiver<Option<Instant>>,
    plan: Plan,
    delivery: Arc<Delivery>,
    on_error: OnDropped,
    done: watch::Sender<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut sending = JoinSet::new();
    let carried = loop {
        let batch = match collect(&mut queue, &mut stop, &plan, &on_error).await {
            (Some(batch), false) => batch,
            (batch, _) => break batch,
        };
        let ready = async {
            throttle(plan.throttle.as_ref()).await;
            slots.clone().acquire_owned().await
        };
        let permit = tokio::select! {
            biased;
            _ = stop.changed() => break Some(batch),
            permit = ready => permit,
        };
        let Ok(permit) = permit else {
            break Some(batch);
        };
        sending.spawn(deliver(delivery.clone(), batch, permit));
        while sending.try_join_next().is_some() {}
    };

    // The flush, as the buffered backend's `Run` after its stop channel closes: what is
    // queued goes out in batches (throttled still), without waiting for more.
    queue.close();
    let deadline = stop.borrow().unwrap_or_else(|| later(DROP_FLUSH));
    let flush = async {
        let mut carried = carried;
        loop {
            let batch = match carried.take() {
                Some(batch) => batch,
                None => {
                    let mut batch = Batch::new(&on_error);
                    while batch.items.len() < plan.max_batch_size {
                        match queue.recv().await {
                            Some(item) => batch.items.push(item),
                            None => break,
                        }
                    }
                    if batch.items.is_empty() {
                        break;
                    }
                    batch
                }
            };
            throttle(plan.throttle.as_ref()).await;
            let Ok(permit) = slots.clone().acquire_owned().await else {
                break;
            };
            sending.spawn(deliver(delivery.clone(), batch, permit));
        }
        while sending.join_next().await.is_some() {}
    };
    if tokio::time::timeout_at(deadline, flush).await.is_err() {
        tracing::error!(
            plugin = "webhook",
            "audit events not sent when the backend shut down are dropped"
        );
        // Aborted sends drop their batches, which counts them.
        sending.abort_all();
        while sending.join_next().await.is_some() {}
        let mut left = 0;
        while queue.try_recv().is_ok() {
            left += 1;
        }
        if left > 0 {
            on_error(left);
        }
    }
    let _ = done.send(true);
}

/// The next batch: full, or `max_batch_wait` after its first event; with true when the
/// task is to stop (the batch, if any, is then to be flushed).
async fn collect(
    queue: &mut mpsc::Receiver<Vec<u8>>,
    stop: &mut watch::Receiver<Option<Instant>>,
    plan: &Plan,
    on_error: &OnDropped,
) -> (Option<Batch>, bool) {
    let first = tokio::select! {
        biased;
        _ = stop.changed() => return (None, true),
        item = queue.recv() => item,
    };
    let Some(first) = first else {
        return (None, true);
    };
    let mut batch = Batch::new(on_error);
    batch.items.push(first);
    let deadline = later(plan.max_batch_wait);
    while batch.items.len() < plan.max_batch_size {
        tokio::select! {
            biased;
            _ = stop.changed() => return (Some(batch), true),
            item = queue.recv() => match item {
                Some(item) => batch.items.push(item),
                None => return (Some(batch), true),
            },
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    (Some(batch), false)
}

/// Sends one batch, holding one of the in-flight slots.
async fn deliver(delivery: Arc<Delivery>, batch: Batch, _slot: OwnedSemaphorePermit) {
    match delivery.send(batch.body()).await {
        Ok(()) => {
            let mut batch = batch;
            batch.items.clear();
        }
        Err(error) => tracing::error!(
            plugin = "webhook",
            events = batch.items.len(),
            %error,
            "unable to send audit events to the webhook; dropping them"
        ),
    }
}

/// The client and where it posts.
///
/// The client is a `kube::Client` made from the kubeconfig's `kube::Config`, not a hyper
/// client of our own: kube already applies everything a kubeconfig can say about the
/// connection (CA data or file, `insecure-skip-tls-verify`, `tls-server-name`, client
/// certificate and key, token or token file, exec plugins, proxy), as it does for this
/// crate's other kubeconfigs. Its base-URI layer joins the cluster URL's path with the
/// request's (`https://h/k8s-audit` and `/` would make `/k8s-audit/`), so the cluster URL
/// is cut to its scheme and authority and each request carries the whole path. The POST goes
/// to the server URL as client-go's REST client makes its request URL: the server's path
/// joined with `/` (`path.Join`, which leaves no trailing slash: `https://h/k8s-audit/` posts
/// to `/k8s-audit`), without the server's query. kube's own retries are turned off for ours.
struct Delivery {
    client: kube::Client,
    target: PathAndQuery,
    initial_backoff: Duration,
}

/// Why an attempt failed, and whether to try again.
enum Failure {
    Retry(String),
    Fail(String),
}

impl Delivery {
    fn new(config: &Config) -> Result<Delivery, Error> {
        let path = config.kubeconfig.display().to_string();
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&config.kubeconfig).map_err(|source| {
                Error::Read {
                    path: path.clone(),
                    source,
                }
            })?;
        // `from_custom_kubeconfig` is async but never waits (it only picks the context,
        // cluster and user and reads the CA), so it is done here, in `start`.
        let loaded = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .now_or_never()
        .ok_or_else(|| Error::Use {
            path: path.clone(),
            reason: "loading it did not complete".into(),
        })?;
        let mut client_config = loaded.map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
        let use_error = |reason: String| Error::Use {
            path: path.clone(),
            reason,
        };
        let server = client_config.cluster_url.clone();
        let (Some(scheme), Some(authority)) = (server.scheme(), server.authority()) else {
            return Err(use_error(format!(
                "the server {server} has no scheme or host"
            )));
        };
        let target = match server.path().trim_end_matches('/') {
            "" => "/",
            path => path,
        }
        .parse::<PathAndQuery>()
        .map_err(|e| use_error(e.to_string()))?;
        client_config.cluster_url = http::Uri::builder()
            .scheme(scheme.clone())
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| use_error(e.to_string()))?;
        client_config.default_retry = false;
        let client = kube::Client::try_from(client_config).map_err(|e| use_error(e.to_string()))?;
        Ok(Delivery {
            client,
            target,
            initial_backoff: config.initial_backoff,
        })
    }

    /// `WithExponentialBackoff`: up to five attempts, sleeping the backoff (with jitter)
    /// between them.
    async fn send(&self, body: Bytes) -> Result<(), String> {
        let mut backoff = self.initial_backoff;
        let mut attempt = 1;
        loop {
            let error = match self.attempt(body.clone()).await {
                Ok(()) => return Ok(()),
                Err(Failure::Fail(error)) => return Err(error),
                Err(Failure::Retry(error)) => error,
            };
            if attempt >= ATTEMPTS {
                return Err(error);
            }
            tracing::debug!(plugin = "webhook", attempt, %error, "audit webhook request failed; retrying");
            tokio::time::sleep(jittered(backoff)).await;
            backoff = Duration::try_from_secs_f64(backoff.as_secs_f64() * BACKOFF_FACTOR)
                .unwrap_or(backoff);
            attempt += 1;
        }
    }

    /// One POST, within [`REQUEST_TIMEOUT`].
    async fn attempt(&self, body: Bytes) -> Result<(), Failure> {
        let request = http::Request::post(http::Uri::from(self.target.clone()))
            .header(header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(body))
            .map_err(|e| Failure::Fail(e.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .send(request)
                .await
                .map_err(|e| Failure::Retry(e.to_string()))?;
            let status = response.status();
            let retry_after = response.headers().contains_key(header::RETRY_AFTER);
            // Read to the end (so the connection can be reused), keeping the start for the log.
            let mut body = response.into_body();
            let mut snippet = Vec::new();
            while let Some(Ok(frame)) = body.frame().await {
                if let Ok(data) = frame.into_data() {
                    let room = SNIPPET.saturating_sub(snippet.len()).min(data.len());
                    snippet.extend_from_slice(&data[..room]);
                }
            }
            if status.is_success() {
                return Ok(());
            }
            let error = format!(
                "the webhook answered {status}: {}",
                String::from_utf8_lossy(&snippet).trim()
            );
            Err(if retryable(status, retry_after) {
                Failure::Retry(error)
            } else {
                Failure::Fail(error)
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::Retry("the request timed out".into())))
    }
}

/// `webhook.DefaultShouldRetry` for an answer: 500, 504 and 429, and any answer that asks
/// to be retried later.
fn retryable(status: StatusCode, retry_after: bool) -> bool {
    retry_after
        || matches!(
            status,
            StatusCode::INTERNAL_SERVER_ERROR
                | StatusCode::GATEWAY_TIMEOUT
                | StatusCode::TOO_MANY_REQUESTS
        )
}

/// `wait.Jitter(d, 0.2)`: `d` plus up to a fifth of it, at random.
fn jittered(d: Duration) -> Duration {
    let random = (uuid::Uuid::new_v4().as_u64_pair().0 >> 11) as f64 / (1u64 << 53) as f64;
    Duration::try_from_secs_f64(d.as_secs_f64() * (1.0 + BACKOFF_JITTER * random)).unwrap_or(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use base64::Engine as _;
    use http::{Request, Response};
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use parking_lot::Mutex;
    use serde_json::Value;
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::audit::event::User;
    use crate::audit::policy::{Level, Stage};

    const WAIT: Duration = Duration::from_secs(10);

    /// A request the webhook server received.
    #[derive(Debug)]
    struct Received {
        method: http::Method,
        path: String,
        content_type: Option<String>,
        authorization: Option<String>,
        body: Value,
    }

    /// A local HTTPS webhook: records every request, answers the queued statuses (then
    /// 200), or holds every request while `stall` is not cancelled.
    struct Server {
        received: mpsc::UnboundedReceiver<Received>,
        answers: Arc<Mutex<VecDeque<u16>>>,
        stall: Option<CancellationToken>,
        kubeconfig: PathBuf,
        task: tokio::task::JoinHandle<()>,
        _dir: tempfile::TempDir,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            if let Some(stall) = &self.stall {
                stall.cancel();
            }
            self.task.abort();
        }
    }

    impl Server {
        async fn start(stalls: bool) -> Server {
            tls::provider::install_default();
            let ca = tls::issue::Ca::new("webhook-ca").unwrap();
            let serving = ca
                .issue(&tls::issue::LeafSpec {
                    common_name: "falco".into(),
                    sans: vec!["127.0.0.1".into()],
                    server: true,
                    ..Default::default()
                })
                .unwrap();
            let key = tls::server::certified_key(&serving.identity).unwrap();
            let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(key));
            let acceptor =
                TlsAcceptor::from(Arc::new(tls::server::config(resolver, false).unwrap()));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr: SocketAddr = listener.local_addr().unwrap();
            let (record, received) = mpsc::unbounded_channel();
            let answers = Arc::new(Mutex::new(VecDeque::new()));
            let stall = stalls.then(CancellationToken::new);
            let (answers2, stall2) = (answers.clone(), stall.clone());
            let task = tokio::spawn(async move {
                let mut connections = JoinSet::new();
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, record, answers, stall) = (
                        acceptor.clone(),
                        record.clone(),
                        answers2.clone(),
                        stall2.clone(),
                    );
                    connections.spawn(async move {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = service_fn(move |req: Request<Incoming>| {
                            let (record, answers, stall) =
                                (record.clone(), answers.clone(), stall.clone());
                            async move {
                                let (parts, body) = req.into_parts();
                                let body = body.collect().await.unwrap().to_bytes();
                                let text = |name| {
                                    parts
                                        .headers
                                        .get(name)
                                        .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
                                };
                                let _ = record.send(Received {
                                    method: parts.method.clone(),
                                    path: parts.uri.to_string(),
                                    content_type: text(header::CONTENT_TYPE),
                                    authorization: text(header::AUTHORIZATION),
                                    body: serde_json::from_slice(&body).unwrap(),
                                });
                                if let Some(stall) = stall {
                                    stall.cancelled().await;
                                }
                                let status = answers.lock().pop_front().unwrap_or(200);
                                let response = Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from_static(b"{}")))
                                    .unwrap();
                                Ok::<_, Infallible>(response)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
            let dir = tempfile::tempdir().unwrap();
            let kubeconfig = dir.path().join("webhook.kubeconfig");
            let ca_data = base64::engine::general_purpose::STANDARD.encode(ca.cert_pem());
            std::fs::write(
                &kubeconfig,
                format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: falco\n  cluster:\n    \
                     server: https://{addr}/k8s-audit\n    certificate-authority-data: {ca_data}\n\
                     users:\n- name: apiserver\n  user:\n    token: secret\n\
                     contexts:\n- name: webhook\n  context:\n    cluster: falco\n    user: apiserver\n\
                     current-context: webhook\n"
                ),
            )
            .unwrap();
            Server {
                received,
                answers,
                stall,
                kubeconfig,
                task,
                _dir: dir,
            }
        }

        fn config(&self, buffer: usize, max_batch_size: usize, max_batch_wait: Duration) -> Config {
            Config {
                kubeconfig: self.kubeconfig.clone(),
                mode: Mode::Batch { buffer },
                max_batch_size,
                max_batch_wait,
                throttle: Some(DEFAULT_THROTTLE),
                initial_backoff: Duration::from_millis(20),
            }
        }

        async fn next(&mut self) -> Received {
            tokio::time::timeout(WAIT, self.received.recv())
                .await
                .expect("the webhook got no request")
                .unwrap()
        }
    }

    /// An `on_error` that reports on a channel.
    fn counter() -> (OnDropped, mpsc::UnboundedReceiver<usize>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            Arc::new(move |n| {
                let _ = sender.send(n);
            }),
            receiver,
        )
    }

    /// Waits until `errors` has counted `n` events, and no more.
    async fn counted(errors: &mut mpsc::UnboundedReceiver<usize>, n: usize) {
        let mut total = 0;
        while total < n {
            total += tokio::time::timeout(WAIT, errors.recv())
                .await
                .expect("errors not counted")
                .unwrap();
        }
        assert_eq!(total, n);
    }

    fn event(n: usize) -> Event {
        Event::new(
            Level::Metadata,
            Stage::ResponseComplete,
            format!("audit-{n}"),
            "/apis/metrics.k8s.io/v1beta1/pods".into(),
            "list".into(),
            User {
                username: "system:kube-controller-manager".into(),
                ..User::default()
            },
            vec!["10.0.0.7".into()],
            "kube-controller-manager".into(),
            None,
            1_765_025_405_000_000_000,
            1_765_025_405_100_000_000,
        )
    }

    fn ids(received: &Received) -> Vec<String> {
        received.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["auditID"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn batches_are_posted_to_the_exact_url_when_full_or_after_the_wait() {
        let mut server = Server::start(false).await;
        let (on_error, mut errors) = counter();
        let webhook =
            Webhook::start(&server.config(100, 3, Duration::from_millis(200)), on_error).unwrap();
        let queued = Instant::now();
        for n in 0..7 {
            assert!(webhook.process(&event(n)));
        }
        let mut batches = Vec::new();
        for _ in 0..3 {
            let received = server.next().await;
            assert_eq!(received.method, http::Method::POST);
            assert_eq!(received.path, "/k8s-audit");
            assert_eq!(received.content_type.as_deref(), Some("application/json"));
            assert_eq!(received.authorization.as_deref(), Some("Bearer secret"));
            assert_eq!(received.body["kind"], "EventList");
            assert_eq!(received.body["apiVersion"], "audit.k8s.io/v1");
            assert_eq!(received.body["metadata"], serde_json::json!({}));
            assert_eq!(
                received.body["items"][0]["user"]["username"],
                "system:kube-controller-manager"
            );
            batches.push(ids(&received));
        }
        // The last batch, not full, waited for `max_batch_wait`.
        assert!(queued.elapsed() >= Duration::from_millis(200));
        // Batches may be sent concurrently: in order within each, in any order between them.
        batches.sort_by_key(|ids| ids.first().cloned());
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        let all: Vec<String> = batches.concat();
        let expected: Vec<String> = (0..7).map(|n| format!("audit-{n}")).collect();
        assert_eq!(all, expected);
        webhook.shutdown(WAIT).await;
        assert!(server.received.try_recv().is_err());
        assert!(errors.try_recv().is_err());
    }

    #[tokio::test]
    async fn blocking_modes_send_each_event_alone() {
        let mut server = Server::start(false).await;
        let (on_error, _errors) = counter();
        let mut config = server.config(100, 400, Duration::from_secs(60));
        config.mode = Mode::BlockingStrict;
        let webhook = Webhook::start(&config, on_error).unwrap();
        for n in 0..3 {
            assert!(webhook.process(&event(n)));
        }
        let mut batches = Vec::new();
        for _ in 0..3 {
            batches.push(ids(&server.next().await));
        }
        batches.sort();
        assert_eq!(batches, [["audit-0"], ["audit-1"], ["audit-2"]]);
    }

    #[tokio::test]
    async fn a_500_is_retried_and_a_400_is_not() {
        let mut server = Server::start(false).await;
        server.answers.lock().push_back(500);
        let (on_error, mut errors) = counter();
        let webhook =
            Webhook::start(&server.config(100, 2, Duration::from_secs(60)), on_error).unwrap();
        assert!(webhook.process(&event(0)));
        assert!(webhook.process(&event(1)));
        let first = server.next().await;
        let second = server.next().await;
        assert_eq!(ids(&first), ["audit-0", "audit-1"]);
        assert_eq!(first.body, second.body);
        webhook.shutdown(WAIT).await;
        assert!(server.received.try_recv().is_err(), "delivered once");
        assert!(errors.try_recv().is_err());

        server.answers.lock().push_back(400);
        let (on_error, mut errors) = counter();
        let webhook =
            Webhook::start(&server.config(100, 2, Duration::from_secs(60)), on_error).unwrap();
        assert!(webhook.process(&event(2)));
        assert!(webhook.process(&event(3)));
        assert_eq!(ids(&server.next().await), ["audit-2", "audit-3"]);
        counted(&mut errors, 2).await;
        webhook.shutdown(WAIT).await;
        assert!(server.received.try_recv().is_err(), "not retried");
        assert!(errors.try_recv().is_err());
    }

    #[test]
    fn what_is_retried_and_how_long_after() {
        assert!(retryable(StatusCode::INTERNAL_SERVER_ERROR, false));
        assert!(retryable(StatusCode::GATEWAY_TIMEOUT, false));
        assert!(retryable(StatusCode::TOO_MANY_REQUESTS, false));
        assert!(retryable(StatusCode::SERVICE_UNAVAILABLE, true));
        assert!(retryable(StatusCode::FORBIDDEN, true));
        assert!(!retryable(StatusCode::SERVICE_UNAVAILABLE, false));
        assert!(!retryable(StatusCode::BAD_REQUEST, false));
        let d = Duration::from_secs(10);
        for _ in 0..100 {
            let j = jittered(d);
            assert!(j >= d && j <= Duration::from_secs(12), "{j:?}");
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let mut server = Server::start(true).await;
        let (on_error, mut errors) = counter();
        let mut config = server.config(1, 1, Duration::from_secs(60));
        config.throttle = None;
        let webhook = Webhook::start(&config, on_error).unwrap();
        // The task cannot run between these calls (a current-thread runtime): one event is
        // queued, the others find the queue full.
        assert!(webhook.process(&event(0)));
        for n in 1..10 {
            assert!(!webhook.process(&event(n)));
        }
        counted(&mut errors, 9).await;
        // The queued event reaches the webhook, which holds it: shutdown gives up on it.
        assert_eq!(ids(&server.next().await), ["audit-0"]);
        webhook.shutdown(Duration::from_millis(200)).await;
        counted(&mut errors, 1).await;
        assert!(!webhook.process(&event(10)));
        counted(&mut errors, 1).await;
    }

    #[tokio::test]
    async fn shutdown_flushes_what_is_queued() {
        let mut server = Server::start(false).await;
        let (on_error, mut errors) = counter();
        let webhook =
            Webhook::start(&server.config(100, 400, Duration::from_secs(60)), on_error).unwrap();
        for n in 0..5 {
            assert!(webhook.process(&event(n)));
        }
        webhook.shutdown(WAIT).await;
        let received = server
            .received
            .try_recv()
            .expect("flushed before shutdown returned");
        assert_eq!(
            ids(&received),
            ["audit-0", "audit-1", "audit-2", "audit-3", "audit-4"]
        );
        assert!(errors.try_recv().is_err());
    }

    #[tokio::test]
    async fn requests_go_to_the_server_path_as_client_go_joins_it() {
        tls::provider::install_default();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("webhook.kubeconfig");
        for (server, target) in [
            ("https://falco.falco:9765/k8s-audit", "/k8s-audit"),
            ("https://falco.falco:9765/k8s-audit/", "/k8s-audit"),
            ("https://10.0.0.1:9765/a/b?x=1", "/a/b"),
            ("https://10.0.0.1:9765", "/"),
            ("https://10.0.0.1:9765/", "/"),
        ] {
            std::fs::write(
                &kubeconfig,
                format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    \
                     server: {server}\n    insecure-skip-tls-verify: true\n\
                     contexts:\n- name: c\n  context:\n    cluster: c\n\
                     current-context: c\n"
                ),
            )
            .unwrap();
            let delivery = Delivery::new(&Config {
                kubeconfig: kubeconfig.clone(),
                mode: Mode::Blocking,
                max_batch_size: 1,
                max_batch_wait: Duration::ZERO,
                throttle: None,
                initial_backoff: DEFAULT_INITIAL_BACKOFF,
            })
            .unwrap();
            assert_eq!(delivery.target.as_str(), target, "{server}");
        }
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.kubeconfig");
        let config = Config {
            kubeconfig: path.clone(),
            mode: Mode::Batch {
                buffer: DEFAULT_BUFFER_SIZE,
            },
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            max_batch_wait: DEFAULT_MAX_BATCH_WAIT,
            throttle: Some(DEFAULT_THROTTLE),
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
        };
        let (on_error, _errors) = counter();
        let error = Webhook::start(&config, on_error).unwrap_err();
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
    }
}
