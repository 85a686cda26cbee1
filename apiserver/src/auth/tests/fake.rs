//! A fake Kubernetes API over HTTPS on 127.0.0.1:0: TokenReview, SubjectAccessReview and the
//! authentication ConfigMap (get, list and watch), counting and recording every review.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::body::Body;

type Answer = Box<dyn Fn(&Value) -> (u16, Value) + Send + Sync>;

const CM_PATH: &str = "/api/v1/namespaces/kube-system/configmaps";

/// What the fake API holds and has seen.
pub(crate) struct State {
    /// Bodies of every TokenReview received.
    pub(crate) token_reviews: Mutex<Vec<Value>>,
    /// Bodies of every SubjectAccessReview received.
    pub(crate) access_reviews: Mutex<Vec<Value>>,
    token_answer: Mutex<Answer>,
    access_answer: Mutex<Answer>,
    /// The ConfigMap's data, or `None` for 404.
    configmap: Mutex<Option<BTreeMap<String, String>>>,
    /// An HTTP status forced on ConfigMap GETs (e.g. 403).
    configmap_get_status: Mutex<Option<u16>>,
    resource_version: Mutex<u64>,
    /// One sender per open watch.
    watches: Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// When set, each review waits for a permit of it before it is answered.
    gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
}

/// A running fake API server.
pub(crate) struct FakeApi {
    pub(crate) state: Arc<State>,
    /// A client for it (retries off, as [`crate::auth::review_client`] makes it).
    pub(crate) client: kube::Client,
    shutdown: CancellationToken,
    _tasks: JoinSet<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl FakeApi {
    pub(crate) async fn start() -> FakeApi {
        tls::provider::install_default();
        let ca = tls::issue::Ca::new("fake-apiserver-ca").expect("CA");
        let serving = ca
            .issue(&tls::issue::LeafSpec {
                common_name: "kube-apiserver".into(),
                sans: vec!["127.0.0.1".into()],
                server: true,
                ..Default::default()
            })
            .expect("serving cert");
        let key = tls::server::certified_key(&serving.identity).expect("key");
        let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(key));
        let config = tls::server::config(resolver, false).expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");

        let state = Arc::new(State {
            token_reviews: Mutex::new(Vec::new()),
            access_reviews: Mutex::new(Vec::new()),
            token_answer: Mutex::new(Box::new(|_| (500, json!({})))),
            access_answer: Mutex::new(Box::new(|_| (500, json!({})))),
            configmap: Mutex::new(None),
            configmap_get_status: Mutex::new(None),
            resource_version: Mutex::new(1),
            watches: Mutex::new(Vec::new()),
            gate: Mutex::new(None),
        });
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let (st, stop) = (state.clone(), shutdown.clone());
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let (tcp, _) = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                };
                let (acceptor, st, stop) = (acceptor.clone(), st.clone(), stop.clone());
                connections.spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req| {
                        let st = st.clone();
                        // `None` drops the connection without an answer.
                        async move { handle(&st, req).await.ok_or("dropped") }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        () = stop.cancelled() => {}
                    }
                });
            }
        });

        let mut config = kube::Config::new(format!("https://{addr}").parse().expect("url"));
        config.root_cert = Some(vec![ca.cert().to_vec()]);
        let client = crate::auth::review_client(config).expect("client");
        FakeApi {
            state,
            client,
            shutdown,
            _tasks: tasks,
        }
    }

    /// Holds every review until [`FakeApi::release`] lets it through.
    pub(crate) fn hold_reviews(&self) {
        *self.state.gate.lock() = Some(Arc::new(tokio::sync::Semaphore::new(0)));
    }

    /// Lets `n` held reviews be answered.
    pub(crate) fn release(&self, n: usize) {
        if let Some(gate) = &*self.state.gate.lock() {
            gate.add_permits(n);
        }
    }

    /// How TokenReviews are answered: (HTTP status, `status` object of the review); status 0
    /// drops the connection instead.
    pub(crate) fn answer_tokens(&self, f: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static) {
        *self.state.token_answer.lock() = Box::new(f);
    }

    /// How SubjectAccessReviews are answered: (HTTP status, `status` object of the review).
    pub(crate) fn answer_access(&self, f: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static) {
        *self.state.access_answer.lock() = Box::new(f);
    }

    pub(crate) fn token_review_count(&self) -> usize {
        self.state.token_reviews.lock().len()
    }

    pub(crate) fn access_review_count(&self) -> usize {
        self.state.access_reviews.lock().len()
    }

    /// Sets (or, with `None`, deletes) the ConfigMap and tells watchers.
    pub(crate) fn set_configmap(&self, data: Option<BTreeMap<String, String>>) {
        let rv = {
            let mut rv = self.state.resource_version.lock();
            *rv += 1;
            *rv
        };
        let event = match &data {
            Some(d) => json!({"type": "MODIFIED", "object": configmap_json(d, rv)}),
            None => json!({"type": "DELETED", "object": configmap_json(&BTreeMap::new(), rv)}),
        };
        *self.state.configmap.lock() = data;
        let line = Bytes::from(format!("{event}\n"));
        self.state
            .watches
            .lock()
            .retain(|w| w.try_send(line.clone()).is_ok());
    }

    /// Open watches of the ConfigMap.
    pub(crate) fn watchers(&self) -> usize {
        let mut watches = self.state.watches.lock();
        watches.retain(|w| !w.is_closed());
        watches.len()
    }

    /// Forces this HTTP status on ConfigMap GETs.
    pub(crate) fn fail_configmap_get(&self, status: u16) {
        *self.state.configmap_get_status.lock() = Some(status);
    }
}

fn configmap_json(data: &BTreeMap<String, String>, rv: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system",
                     "resourceVersion": rv.to_string()},
        "data": data,
    })
}

fn status_json(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

fn respond(code: u16, body: &Value) -> Response<Body> {
    let mut response = Response::new(crate::body::full(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

async fn handle(state: &State, req: Request<Incoming>) -> Option<Response<Body>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path();
    let query = parts.uri.query().unwrap_or("");
    let gate = state.gate.lock().clone();
    Some(match (&parts.method, path) {
        (&Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews") => {
            return held(gate, &body, &state.token_reviews, &state.token_answer).await;
        }
        (&Method::POST, "/apis/authorization.k8s.io/v1/subjectaccessreviews") => {
            return held(gate, &body, &state.access_reviews, &state.access_answer).await;
        }
        (&Method::GET, p) if p == format!("{CM_PATH}/extension-apiserver-authentication") => {
            let data = state.configmap.lock().clone();
            let forced = *state.configmap_get_status.lock();
            let rv = *state.resource_version.lock();
            match (forced, data) {
                (Some(code), _) => respond(code, &status_json(code, "Forbidden")),
                (None, Some(d)) => respond(200, &configmap_json(&d, rv)),
                (None, None) => respond(404, &status_json(404, "NotFound")),
            }
        }
        (&Method::GET, CM_PATH) if query.contains("watch=true") => {
            let (tx, rx) = mpsc::channel(16);
            state.watches.lock().push(tx);
            let mut response = Response::new(EventBody(rx).boxed());
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            response
        }
        (&Method::GET, CM_PATH) => {
            let data = state.configmap.lock().clone();
            let rv = *state.resource_version.lock();
            let items: Vec<Value> = data.iter().map(|d| configmap_json(d, rv)).collect();
            respond(
                200,
                &json!({"apiVersion": "v1", "kind": "ConfigMapList",
                        "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
            )
        }
        _ => respond(404, &status_json(404, "NotFound")),
    })
}

/// [`review`], once `gate` (if any) lets it through.
async fn held(
    gate: Option<Arc<tokio::sync::Semaphore>>,
    body: &[u8],
    seen: &Mutex<Vec<Value>>,
    answer: &Mutex<Answer>,
) -> Option<Response<Body>> {
    if let Some(gate) = gate
        && let Ok(permit) = gate.acquire().await
    {
        permit.forget();
    }
    review(body, seen, answer)
}

fn review(body: &[u8], seen: &Mutex<Vec<Value>>, answer: &Mutex<Answer>) -> Option<Response<Body>> {
    let mut request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    seen.lock().push(request.clone());
    let (code, status) = (answer.lock())(&request);
    match code {
        0 => None,
        200 => {
            request["status"] = status;
            Some(respond(201, &request))
        }
        _ => Some(respond(code, &status_json(code, "InternalError"))),
    }
}

/// A watch response: one JSON event per line, for as long as the watch is open.
struct EventBody(mpsc::Receiver<Bytes>);

impl http_body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|line| line.map(|l| Ok(Frame::data(l))))
    }
}
