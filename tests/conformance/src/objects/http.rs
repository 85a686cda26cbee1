//! The wire side: routing, list (selectors, `limit`/`continue`, resourceVersion semantics),
//! get, watch (chunked JSON lines, bookmarks, `410 Gone`), Table output and Status errors.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::query::{Filter, Params};
use super::table::table_json;
use super::watch::{Watch, bookmark};
use super::{Key, Kind, Objects, State};

/// The response body of [`Objects::handle`]: a whole JSON document, or for a watch a stream of
/// newline-terminated JSON events, one per frame. Errors never occur (the type is
/// `std::io::Error` so it composes with file and proxy bodies).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A Kubernetes `Status` failure.
#[derive(Debug)]
pub(crate) struct Status {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
}

impl Status {
    fn bad_request(message: String) -> Status {
        Status {
            code: 400,
            reason: "BadRequest",
            message,
            details: None,
        }
    }

    fn expired(message: String) -> Status {
        Status {
            code: 410,
            reason: "Expired",
            message,
            details: None,
        }
    }

    fn not_found(kind: Kind, name: &str) -> Status {
        Status {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", kind.plural()),
            details: Some(json!({"name": name, "kind": kind.plural()})),
        }
    }

    fn too_large(rv: u64) -> Status {
        Status {
            code: 504,
            reason: "Timeout",
            message: format!("Too large resource version: {rv}"),
            details: None,
        }
    }

    pub(crate) fn json(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }

    fn response(&self) -> http::Response<Body> {
        json_response(
            self.code,
            serde_json::to_vec(&self.json()).unwrap_or_default(),
        )
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn json_response(code: u16, body: Vec<u8>) -> http::Response<Body> {
    let mut response = http::Response::new(full(body));
    *response.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// What a path names.
enum Route<'a> {
    List(Kind, Option<&'a str>),
    Get(Kind, &'a str, &'a str),
}

fn route(path: &str) -> Option<Route<'_>> {
    let rest = path.strip_prefix("/api/v1/")?;
    let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let kind = |plural: &str| match plural {
        "nodes" => Some(Kind::Node),
        "pods" => Some(Kind::Pod),
        "configmaps" => Some(Kind::ConfigMap),
        _ => None,
    };
    match parts.as_slice() {
        [plural] => Some(Route::List(kind(plural)?, None)),
        ["nodes", name] => Some(Route::Get(Kind::Node, "", name)),
        ["namespaces", ns, plural] => {
            let kind = kind(plural).filter(|k| k.namespaced())?;
            Some(Route::List(kind, Some(ns)))
        }
        ["namespaces", ns, plural, name] => {
            let kind = kind(plural).filter(|k| k.namespaced())?;
            Some(Route::Get(kind, ns, name))
        }
        _ => None,
    }
}

/// Continue tokens: the snapshot's resourceVersion and the last key returned.
fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token)
        .ok()?;
    let value: Value = serde_json::from_slice(&raw).ok()?;
    let rv = value["rv"].as_u64()?;
    let ns = value["ns"].as_str()?.to_owned();
    let name = value["name"].as_str()?.to_owned();
    Some((rv, (ns, name)))
}

fn parse_rv(rv: &str) -> Result<u64, Status> {
    rv.parse()
        .map_err(|_| Status::bad_request(format!("invalid resource version: {rv}")))
}

pub(crate) fn too_old(rv: u64, state: &State) -> Status {
    Status::expired(format!(
        "too old resource version: {rv} ({})",
        state.compacted_rv
    ))
}

/// The page of a list: items (as at the snapshot) and the continue token.
struct Page {
    rv: u64,
    items: Vec<Arc<Value>>,
    continue_token: Option<String>,
}

impl Objects {
    /// Serves `GET` of nodes, pods and configmaps under `/api/v1` (list, get, watch, Table);
    /// returns `None` for any other path so a router can try its next handler.
    pub async fn handle<B>(&self, req: http::Request<B>) -> Option<http::Response<Body>> {
        let route = route(req.uri().path())?;
        if req.method() != http::Method::GET {
            return Some(
                Status {
                    code: 405,
                    reason: "MethodNotAllowed",
                    message: format!(
                        "the server does not allow this method on the requested resource: {}",
                        req.method()
                    ),
                    details: None,
                }
                .response(),
            );
        }
        let params = Params::parse(req.uri().query());
        let table = req
            .headers()
            .get_all(http::header::ACCEPT)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.contains("as=Table")));
        let response = match route {
            Route::Get(kind, ns, name) => self.get_one(kind, ns, name, table),
            Route::List(kind, ns) if params.watch => self.watch(kind, ns, &params),
            Route::List(kind, ns) => self.list(kind, ns, &params, table),
        };
        Some(response.unwrap_or_else(|status| status.response()))
    }

    fn get_one(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        table: bool,
    ) -> Result<http::Response<Body>, Status> {
        let key = (ns.to_owned(), name.to_owned());
        let state = self.shared.state.lock();
        let object = state
            .map(kind)
            .get(&key)
            .cloned()
            .ok_or_else(|| Status::not_found(kind, name))?;
        let rv = state.rv;
        drop(state);
        let body = if table {
            serde_json::to_vec(&table_json(kind, rv, &[object], None))
        } else {
            serde_json::to_vec(&*object)
        };
        Ok(json_response(200, body.unwrap_or_default()))
    }

    fn page(&self, kind: Kind, filter: &Filter, params: &Params) -> Result<Page, Status> {
        let state = self.shared.state.lock();
        let (snapshot_rv, after) = match params.continue_token.as_deref() {
            Some(token) => {
                let (rv, key) = decode_continue(token)
                    .ok_or_else(|| Status::bad_request("continue key is not valid".into()))?;
                if rv < state.compacted_rv {
                    return Err(Status::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
                    ));
                }
                (rv, Some(key))
            }
            None => {
                let exact = match params.resource_version_match.as_deref() {
                    Some("Exact") => true,
                    Some("NotOlderThan") | None => {
                        // Legacy semantics: a non-zero version with a limit is exact.
                        params.resource_version_match.is_none() && params.limit.is_some()
                    }
                    Some(other) => {
                        return Err(Status::bad_request(format!(
                            "resourceVersionMatch: Unsupported value: \"{other}\""
                        )));
                    }
                };
                match params.resource_version.as_deref() {
                    None | Some("0") => (state.rv, None),
                    Some(rv) => {
                        let rv = parse_rv(rv)?;
                        if rv > state.rv {
                            return Err(Status::too_large(rv));
                        }
                        if !exact {
                            (state.rv, None)
                        } else if rv < state.compacted_rv {
                            return Err(too_old(rv, &state));
                        } else {
                            (rv, None)
                        }
                    }
                }
            }
        };
        // Objects as they were at the snapshot: the first change after it holds the old value.
        let mut overlay: BTreeMap<&Key, Option<&Arc<Value>>> = BTreeMap::new();
        for change in state.changes_after(snapshot_rv) {
            if change.kind == kind {
                overlay.entry(&change.key).or_insert(change.prev.as_ref());
            }
        }
        let namespace = filter.namespace.clone();
        let lower: Bound<Key> = match (&after, &namespace) {
            (Some(key), _) => Bound::Excluded(key.clone()),
            (None, Some(ns)) => Bound::Included((ns.clone(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let lower_ref: Bound<&Key> = match &lower {
            Bound::Included(k) => Bound::Included(k),
            Bound::Excluded(k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut current = state
            .map(kind)
            .range::<Key, _>((lower.clone(), Bound::Unbounded))
            .peekable();
        let mut old = overlay
            .range::<&Key, _>((lower_ref, Bound::Unbounded))
            .peekable();
        let limit = params.limit.unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last: Option<Key> = None;
        let mut continue_token = None;
        loop {
            let (key, value): (&Key, Option<&Arc<Value>>) = match (current.peek(), old.peek()) {
                (None, None) => break,
                (Some((ck, _)), Some((ok, _))) if *ck == **ok => {
                    current.next();
                    match old.next() {
                        Some((k, v)) => (*k, *v),
                        None => break,
                    }
                }
                (Some((ck, _)), Some((ok, _))) if **ok < *ck => match old.next() {
                    Some((k, v)) => (*k, *v),
                    None => break,
                },
                (Some(_), _) => match current.next() {
                    Some((k, v)) => (k, Some(v)),
                    None => break,
                },
                (None, Some(_)) => match old.next() {
                    Some((k, v)) => (*k, *v),
                    None => break,
                },
            };
            if namespace.as_deref().is_some_and(|ns| key.0 != ns) {
                break;
            }
            if items.len() == limit {
                continue_token = last.as_ref().map(|k| encode_continue(snapshot_rv, k));
                break;
            }
            last = Some(key.clone());
            if let Some(value) = value.filter(|v| filter.matches(v)) {
                items.push(value.clone());
            }
        }
        Ok(Page {
            rv: snapshot_rv,
            items,
            continue_token,
        })
    }

    fn list(
        &self,
        kind: Kind,
        ns: Option<&str>,
        params: &Params,
        table: bool,
    ) -> Result<http::Response<Body>, Status> {
        let filter = Filter::new(kind, ns, params).map_err(Status::bad_request)?;
        let page = self.page(kind, &filter, params)?;
        self.shared
            .lists_served
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if table {
            let body = table_json(kind, page.rv, &page.items, page.continue_token.as_deref());
            return Ok(json_response(
                200,
                serde_json::to_vec(&body).unwrap_or_default(),
            ));
        }
        let mut metadata = json!({"resourceVersion": page.rv.to_string()});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = json!(token);
        }
        let mut body = Vec::with_capacity(256 + page.items.len() * 2048);
        body.extend_from_slice(
            format!(
                "{{\"kind\":\"{}List\",\"apiVersion\":\"v1\",\"metadata\":{metadata},\"items\":[",
                kind.name()
            )
            .as_bytes(),
        );
        for (i, item) in page.items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            if serde_json::to_writer(&mut body, &**item).is_err() {
                return Err(Status::bad_request("unencodable object".into()));
            }
        }
        body.extend_from_slice(b"]}");
        Ok(json_response(200, body))
    }

    fn watch(
        &self,
        kind: Kind,
        ns: Option<&str>,
        params: &Params,
    ) -> Result<http::Response<Body>, Status> {
        let filter = Filter::new(kind, ns, params).map_err(Status::bad_request)?;
        let timeout = params
            .timeout_seconds
            .filter(|&s| s > 0)
            .map(Duration::from_secs)
            .unwrap_or(self.shared.default_watch_timeout);
        let requested = match params.resource_version.as_deref() {
            None | Some("0") => None,
            Some(rv) => Some(parse_rv(rv)?),
        };
        self.shared
            .watches_served
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let now = Instant::now();
        let interval = self.shared.bookmark_interval;
        let mut watch = Watch {
            objects: self.clone(),
            kind,
            filter,
            rv: 0,
            deadline: now + timeout,
            next_bookmark: params.allow_bookmarks.then(|| now + interval),
            changed: self.shared.changed.subscribe(),
            pending: VecDeque::new(),
            done: false,
            generation: self
                .shared
                .dropped
                .load(std::sync::atomic::Ordering::SeqCst),
        };
        watch.changed.borrow_and_update();
        let state = self.shared.state.lock();
        match requested {
            Some(rv) if !params.send_initial_events => watch.rv = rv,
            _ => {
                // Synthetic ADDED events for the current state, as kube-apiserver sends for a
                // watch from "", "0" or with sendInitialEvents.
                watch.rv = state.rv;
                for object in state.map(kind).values() {
                    if watch.filter.matches(object) {
                        watch.push("ADDED", object);
                    }
                }
                if params.send_initial_events && params.allow_bookmarks {
                    let mark = bookmark(kind, state.rv, true);
                    watch.push("BOOKMARK", &mark);
                }
            }
        }
        drop(state);
        let stream = futures::stream::unfold(watch, Watch::next_frame);
        let mut response = http::Response::new(StreamBody::new(stream).boxed());
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }
}

/// Serves [`Objects::handle`] over HTTPS (HTTP/1.1 and HTTP/2) on `listener` until `shutdown`;
/// other paths get a 404 Status. For tests; the simulated control plane composes `handle`
/// into its own router.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    objects: Objects,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let acceptor = acceptor.clone();
        let objects = objects.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let objects = objects.clone();
                    async move {
                        let response = match objects.handle(req).await {
                            Some(response) => response,
                            None => Status {
                                code: 404,
                                reason: "NotFound",
                                message: "the server could not find the requested resource".into(),
                                details: None,
                            }
                            .response(),
                        };
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            tokio::select! {
                _ = connection => {}
                () = shutdown.cancelled() => {}
            }
        });
    }
    connections.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(objects: &Objects, uri: &str, accept: &str) -> (u16, Value) {
        let req = http::Request::get(uri)
            .header(http::header::ACCEPT, accept)
            .body(())
            .expect("request");
        let response = objects.handle(req).await.expect("served path");
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (code, serde_json::from_slice(&body).expect("json"))
    }

    #[tokio::test]
    async fn tables_for_kubectl_get() {
        let objects = Objects::new();
        objects.add_node(
            "n1",
            &[("node-role.kubernetes.io/control-plane", "")],
            &[("InternalIP", "10.0.0.1")],
            10250,
        );
        objects.add_pod(
            "default",
            "p",
            "n1",
            &[],
            "Running",
            &[super::super::ContainerSpec::new("c")],
        );
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        let (code, nodes) = call(&objects, "/api/v1/nodes", table).await;
        assert_eq!(code, 200);
        assert_eq!(nodes["kind"], "Table");
        assert_eq!(nodes["rows"][0]["cells"][0], "n1");
        assert_eq!(nodes["rows"][0]["cells"][1], "Ready");
        assert_eq!(nodes["rows"][0]["cells"][2], "control-plane");
        assert_eq!(nodes["rows"][0]["cells"][4], "v1.33.1");
        assert_eq!(nodes["rows"][0]["object"]["metadata"]["name"], "n1");
        let (_, pods) = call(&objects, "/api/v1/namespaces/default/pods", table).await;
        assert_eq!(pods["rows"][0]["cells"][1], "1/1");
        assert_eq!(pods["rows"][0]["cells"][2], "Running");
        let (_, plain) = call(&objects, "/api/v1/pods", "application/json").await;
        assert_eq!(plain["kind"], "PodList");
        assert_eq!(
            plain["items"][0]["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "100m"
        );
    }

    #[tokio::test]
    async fn errors_are_status_objects() {
        let objects = Objects::new();
        let (code, status) = call(&objects, "/api/v1/nodes/gone", "application/json").await;
        assert_eq!(code, 404);
        assert_eq!(
            status,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "nodes \"gone\" not found", "reason": "NotFound",
                   "details": {"name": "gone", "kind": "nodes"}, "code": 404})
        );
        let rv = objects.add_node("n1", &[], &[], 10250);
        objects.compact();
        let (code, status) = call(
            &objects,
            &format!(
                "/api/v1/nodes?resourceVersion={}&resourceVersionMatch=Exact",
                rv - 1
            ),
            "",
        )
        .await;
        assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")));
        assert_eq!(
            status["message"],
            format!("too old resource version: {} ({rv})", rv - 1)
        );
        let (code, _) = call(&objects, "/api/v1/nodes?labelSelector=a%20in%20b", "").await;
        assert_eq!(code, 400);
        let post = http::Request::post("/api/v1/nodes")
            .body(())
            .expect("request");
        let response = objects.handle(post).await.expect("served");
        assert_eq!(response.status().as_u16(), 405);
        assert!(
            objects
                .handle(http::Request::get("/healthz").body(()).expect("request"))
                .await
                .is_none()
        );
    }

    #[test]
    fn routes() {
        assert!(matches!(
            route("/api/v1/nodes"),
            Some(Route::List(Kind::Node, None))
        ));
        assert!(matches!(
            route("/api/v1/namespaces/a/pods/b"),
            Some(Route::Get(Kind::Pod, "a", "b"))
        ));
        assert!(matches!(
            route("/api/v1/namespaces/a/configmaps"),
            Some(Route::List(Kind::ConfigMap, Some("a")))
        ));
        assert!(route("/api/v1/namespaces/a/nodes").is_none());
        assert!(route("/apis/metrics.k8s.io/v1beta1/nodes").is_none());
        assert!(route("/api/v1/services").is_none());
    }
}
