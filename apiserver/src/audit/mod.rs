//! The audit log, as k8s.io/apiserver's log and webhook backends write it
//! (`--audit-policy-file` with `--audit-log-path` and/or `--audit-webhook-config-file`): one
//! `audit.k8s.io/v1` `Event` per request and stage that the policy records, to every backend
//! configured. The log backend writes a JSON line (`--audit-log-format=json`) or
//! `audit.EventString`'s text (`legacy`), to standard output (`-`) or to a file rotated as
//! lumberjack rotates it (`--audit-log-maxsize`, `-maxbackup`, `-maxage`, `-compress`); the
//! webhook backend ([`webhook`]) POSTs batches of events as an `EventList`.
//!
//! Where the events come from, in k8s.io/apiserver's handler-chain order:
//! - [`Auditor::filter`] runs right after authentication (`WithAudit`): it evaluates the
//!   policy for the authenticated user, fixes the request's audit ID and writes the
//!   `RequestReceived` event;
//! - [`Auditor::complete`] wraps the answer, whoever made it, and writes `ResponseComplete`
//!   when its body ends, with the status, whom the user impersonated, and the authorizer's
//!   decision; a request whose authentication failed gets one `ResponseStarted` event with
//!   its 401 (`WithFailedAuthenticationAudit`).
//!
//! Levels `Request` and `RequestResponse` record what `Metadata` does: every request here is
//! a GET without a body, and the response bodies (lists of up to hundreds of thousands of
//! pods, streamed) are not copied into events.
//!
//! `--audit-log-mode`: `blocking` and `blocking-strict` write each event before the request
//! goes on (`blocking-strict` answers 500 when its `RequestReceived` event cannot be written);
//! `batch` hands events to a writer thread through a queue of `--audit-log-batch-buffer-size`
//! events, and one that finds the queue full is dropped. What a backend drops is counted in
//! `apiserver_audit_error_total{plugin}`.

pub mod event;
mod log;
pub mod logfile;
pub mod policy;
pub mod webhook;

pub use self::log::{Destination, Format, Log};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use self::event::{Event, ObjectRef, ResponseStatus, User};
use self::log::LogBackend;
use self::policy::{Decision, Level, Policy, Stage};
use crate::auth::{self, Attributes, UserInfo};
use crate::body::Body;
use crate::serve::router::{AUDIT_ID, Filter, PeerCertificates, RemoteAddr, Verdict};
use crate::status::Status;

/// `--audit-log-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each event is written before the request goes on.
    Blocking,
    /// As `Blocking`, and a request whose `RequestReceived` event cannot be written fails.
    BlockingStrict,
    /// Events queue (at most `buffer`) for a writer thread.
    Batch {
        /// `--audit-log-batch-buffer-size`.
        buffer: usize,
    },
}

/// The audit settings: the policy and the backends its events go to (one at least).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--audit-policy-file`.
    pub policy_file: PathBuf,
    /// The log backend (`--audit-log-path`).
    pub log: Option<Log>,
    /// The webhook backend (`--audit-webhook-config-file`).
    pub webhook: Option<webhook::Config>,
}

/// Why the audit log could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy.
    #[error(transparent)]
    Policy(#[from] policy::Error),
    /// The log file.
    #[error("unable to open the audit log {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The writer thread.
    #[error("unable to start the audit log writer: {0}")]
    Thread(std::io::Error),
    /// The webhook's configuration.
    #[error(transparent)]
    Webhook(#[from] webhook::Error),
}

/// Called with the number of events a backend dropped (to count them).
pub type OnDropped = Arc<dyn Fn(usize) + Send + Sync>;

/// A report that is due at most once a second, so that a full queue or a failing disk, which
/// fail every event, are logged once a second and not once per request.
#[derive(Debug, Default)]
pub struct OncePerSecond(AtomicU64);

impl OncePerSecond {
    /// Whether to report now (and then not again within this second).
    pub fn due(&self) -> bool {
        let now = u64::try_from(crate::serve::router::unix_now_ns() / 1_000_000_000).unwrap_or(0);
        self.0.swap(now, Ordering::Relaxed) != now
    }
}

/// The audit families of `/metrics`, as k8s.io/apiserver names them and registers them
/// whether or not there is an audit log (so a dashboard or an alert finds them either way).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    events: Counter,
    errors: Family<Vec<(String, String)>, Counter>,
    levels: Family<Vec<(String, String)>, Counter>,
    rejected: Counter,
}

impl Metrics {
    /// The families, added to `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        registry.register(
            "apiserver_audit_event",
            "[ALPHA] Counter of audit events generated and sent to the audit backend",
            metrics.events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "[ALPHA] Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error",
            metrics.errors.clone(),
        );
        registry.register(
            "apiserver_audit_level",
            "[ALPHA] Counter of policy levels for audit events (1 per request)",
            metrics.levels.clone(),
        );
        registry.register(
            "apiserver_audit_requests_rejected",
            "[ALPHA] Counter of apiserver requests rejected due to an error in audit logging backend",
            metrics.rejected.clone(),
        );
        metrics
    }

    /// `n` events that `plugin` (`log`, `webhook`) could not write.
    fn errors(&self, plugin: &str, n: usize) {
        self.errors
            .get_or_create(&vec![("plugin".to_owned(), plugin.to_owned())])
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    }
}

/// The webhook backend.
struct WebhookBackend {
    webhook: webhook::Webhook,
    strict: bool,
}

/// The audit log: the policy and where its events go.
pub struct Auditor {
    policy: Policy,
    log: Option<LogBackend>,
    webhook: Option<WebhookBackend>,
    metrics: Metrics,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("log", &self.log.is_some())
            .field("webhook", &self.webhook.is_some())
            .finish_non_exhaustive()
    }
}

/// What the filter leaves in a request's extensions for [`Auditor::complete`].
#[derive(Clone, Debug)]
struct Audited(Arc<Pending>);

/// A recorded request's event, minus what the answer adds.
#[derive(Debug)]
struct Pending {
    decision: Decision,
    user: UserInfo,
    event: Event,
}

/// The authorizer's answer, for the event's annotations (`WithAuthorization`'s
/// `authorization.k8s.io/decision` and `authorization.k8s.io/reason`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorized {
    /// Allowed, with the authorizer's reason (often empty).
    Allow(String),
    /// Forbidden, with the authorizer's reason.
    Forbid(String),
    /// The authorizer failed.
    Error,
}

/// When the request arrived (Unix nanoseconds), put in its extensions by the router when the
/// audit log is on: an event's `requestReceivedTimestamp`.
#[derive(Clone, Copy, Debug)]
pub struct Received(pub i64);

impl Auditor {
    /// Loads the policy, opens the log and starts the webhook's sender (on the current Tokio
    /// runtime); what happens is counted in `metrics`.
    pub fn new(config: &Config, metrics: Metrics) -> Result<Auditor, Error> {
        let policy = Policy::load(&config.policy_file)?;
        let dropped = |plugin: &'static str| -> OnDropped {
            let metrics = metrics.clone();
            Arc::new(move |n| metrics.errors(plugin, n))
        };
        let log = config
            .log
            .as_ref()
            .map(|log| LogBackend::open(log, dropped("log")))
            .transpose()?;
        let webhook = match &config.webhook {
            Some(webhook) => Some(WebhookBackend {
                webhook: webhook::Webhook::start(webhook, dropped("webhook"))?,
                strict: webhook.mode == Mode::BlockingStrict,
            }),
            None => None,
        };
        Ok(Auditor {
            policy,
            log,
            webhook,
            metrics,
        })
    }

    /// The filter that goes right after authentication.
    pub fn filter(self: &Arc<Self>) -> Arc<dyn Filter> {
        Arc::new(AuditFilter(self.clone()))
    }

    /// Sends what the webhook still holds, waiting at most `within` (the log backend writes
    /// as it goes).
    pub async fn shutdown(&self, within: std::time::Duration) {
        if let Some(backend) = &self.webhook {
            backend.webhook.shutdown(within).await;
        }
    }

    /// Hands `event` to every backend; false when a `blocking-strict` one could not take it.
    fn write(&self, event: &Event) -> bool {
        self.metrics.events.inc();
        // Each backend counts what it drops (the webhook also a batch that fails later).
        let mut stored = true;
        if let Some(log) = &self.log
            && !log.write(event)
        {
            stored &= !log.strict;
        }
        if let Some(backend) = &self.webhook
            && !backend.webhook.process(event)
        {
            stored &= !backend.strict;
        }
        stored
    }

    /// Wraps `response` so that its `ResponseComplete` event is written when its body ends;
    /// a 401 whose request the filter never saw (authentication failed) gets its one
    /// `ResponseStarted` event now.
    pub fn complete(self: &Arc<Self>, parts: &Parts, response: Response<Body>) -> Response<Body> {
        let Some(Audited(pending)) = parts.extensions.get::<Audited>() else {
            if response.status() == StatusCode::UNAUTHORIZED {
                self.failed_authentication(parts, &response);
            }
            return response;
        };
        if !pending.decision.records(Stage::ResponseComplete) {
            return response;
        }
        let mut event = pending.event.clone();
        event.stage = Stage::ResponseComplete.as_str();
        event.response_status = Some(ResponseStatus::new(
            response.status().as_u16(),
            response.extensions().get::<Status>(),
        ));
        if let Some(current) = parts.extensions.get::<UserInfo>()
            && *current != pending.user
        {
            event.impersonated_user = Some(User::from(current));
        }
        // `WithAuthorization`'s annotations: the decision and its reason, or on an
        // authorizer's error the reason alone.
        let (decision, reason) = match parts.extensions.get::<Authorized>() {
            Some(Authorized::Allow(reason)) => (Some("allow"), Some(reason.clone())),
            Some(Authorized::Forbid(reason)) => (Some("forbid"), Some(reason.clone())),
            Some(Authorized::Error) => (None, Some("internal error".to_owned())),
            None => (None, None),
        };
        if let Some(decision) = decision {
            event
                .annotations
                .insert("authorization.k8s.io/decision", decision.to_owned());
        }
        if let Some(reason) = reason {
            event
                .annotations
                .insert("authorization.k8s.io/reason", reason);
        }
        let auditor = self.clone();
        response.map(|inner| {
            crate::body::on_end(inner, move || {
                let mut event = event;
                event.stage_timestamp = event::micro_time(crate::serve::router::unix_now_ns());
                auditor.write(&event);
            })
        })
    }

    /// `WithFailedAuthenticationAudit`: the policy for no user; one `ResponseStarted` event
    /// whose status says which credentials were tried.
    fn failed_authentication(&self, parts: &Parts, response: &Response<Body>) {
        let attributes = auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
        let decision = self.policy.decide(None, &attributes);
        self.count_level(decision.level);
        if !decision.records(Stage::ResponseStarted) {
            return;
        }
        let now = crate::serve::router::unix_now_ns();
        let received = parts.extensions.get::<Received>().map_or(now, |r| r.0);
        let audit_id = response
            .headers()
            .get(AUDIT_ID)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let mut event = base_event(
            parts,
            decision.level,
            Stage::ResponseStarted,
            audit_id,
            User::default(),
            &attributes,
            received,
            now,
        );
        let mut status = ResponseStatus::new(StatusCode::UNAUTHORIZED.as_u16(), None);
        status.set_message(authentication_methods(parts));
        event.response_status = Some(status);
        self.write(&event);
    }

    fn count_level(&self, level: Level) {
        self.metrics
            .levels
            .get_or_create(&vec![("level".to_owned(), level.as_str().to_owned())])
            .inc();
    }
}

/// `getAuthMethods`: the credentials a request that failed authentication carried.
fn authentication_methods(parts: &Parts) -> String {
    let mut methods = Vec::new();
    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .unwrap_or_default();
    match authorization
        .split_once(' ')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
    {
        Some(scheme) if scheme == "basic" => methods.push("basic"),
        Some(scheme) if scheme == "bearer" => methods.push("bearer"),
        _ => {}
    }
    if crate::api::query::get(parts.uri.query(), "access_token").is_some_and(|t| !t.is_empty()) {
        methods.push("access_token");
    }
    if parts
        .extensions
        .get::<PeerCertificates>()
        .is_some_and(|c| !c.0.is_empty())
    {
        methods.push("x509");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".to_owned()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

/// The fields every event of a request has.
#[allow(clippy::too_many_arguments)]
fn base_event(
    parts: &Parts,
    level: Level,
    stage: Stage,
    audit_id: String,
    user: User,
    attributes: &Attributes,
    received_ns: i64,
    stage_ns: i64,
) -> Event {
    Event::new(
        level,
        stage,
        audit_id,
        parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        attributes.verb().to_owned(),
        user,
        event::source_ips(
            &parts.headers,
            parts.extensions.get::<RemoteAddr>().map(|a| a.0),
        ),
        parts
            .headers
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default(),
        ObjectRef::of(attributes),
        received_ns,
        stage_ns,
    )
}

/// [`Auditor::filter`]'s filter.
struct AuditFilter(Arc<Auditor>);

impl std::fmt::Debug for AuditFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditFilter")
    }
}

impl Filter for AuditFilter {
    fn filter<'a>(&'a self, parts: &'a mut Parts) -> BoxFuture<'a, Verdict> {
        Box::pin(async move { self.record(parts) })
    }
}

impl AuditFilter {
    fn record(&self, parts: &mut Parts) -> Verdict {
        let auditor = &self.0;
        let user = parts
            .extensions
            .get::<UserInfo>()
            .cloned()
            .unwrap_or_else(UserInfo::anonymous);
        let attributes = auth::attributes(&parts.method, parts.uri.path(), parts.uri.query());
        let decision = auditor.policy.decide(Some(&user), &attributes);
        auditor.count_level(decision.level);
        if decision.level == Level::None {
            return Verdict::Pass(None);
        }
        // The ID the answer will carry: the request's own (kube-apiserver's), else a new one,
        // left in the request's headers where the router takes it from.
        let audit_id = match parts.headers.get(AUDIT_ID).filter(|id| !id.is_empty()) {
            Some(id) => String::from_utf8_lossy(id.as_bytes()).into_owned(),
            None => {
                let id = uuid::Uuid::new_v4().hyphenated().to_string();
                if let Ok(value) = HeaderValue::from_str(&id) {
                    parts.headers.insert(AUDIT_ID, value);
                }
                id
            }
        };
        let now = crate::serve::router::unix_now_ns();
        let received = parts.extensions.get::<Received>().map_or(now, |r| r.0);
        let event = base_event(
            parts,
            decision.level,
            Stage::RequestReceived,
            audit_id,
            User::from(&user),
            &attributes,
            received,
            now,
        );
        if decision.records(Stage::RequestReceived) && !auditor.write(&event) {
            auditor.metrics.rejected.inc();
            return Verdict::Reject(failed_to_store(parts));
        }
        parts.extensions.insert(Audited(Arc::new(Pending {
            decision,
            user,
            event,
        })));
        Verdict::Pass(None)
    }
}

/// `responsewriters.InternalError` with "failed to store audit event" (`blocking-strict`).
fn failed_to_store(parts: &Parts) -> Response<Body> {
    let uri = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let text = format!(
        "Internal Server Error: {}: failed to store audit event\n",
        scraper::go::quote(&uri)
    )
    .replace('&', "&amp;")
    .replace('<', "&lt;")
    .replace('>', "&gt;");
    crate::body::text(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain; charset=utf-8",
        text,
    )
}
