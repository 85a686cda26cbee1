//! The pluggable core API (`/api/v1/...`: nodes, pods, configmaps) behind the control plane,
//! and [`ConfigMaps`], a minimal implementation that serves only ConfigMaps.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Body, json_response, status_response};

/// Serves the core (`/api/v1`) objects: list, get and watch of nodes, pods and ConfigMaps.
/// The control plane passes every `/api/v1/...` request it does not answer itself.
pub trait CoreApi: Send + Sync + 'static {
    /// Answers a request (its body already read), or `None` when the path is not served,
    /// which the control plane turns into a 404 Status.
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<Body>>>;

    /// Creates or replaces a ConfigMap; the control plane publishes
    /// `kube-system/extension-apiserver-authentication` through it.
    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>);
}

/// A ConfigMap-only core API: GET of one ConfigMap, LIST (with a `metadata.name` field
/// selector), and WATCH as an open stream that sends nothing until `timeoutSeconds`.
#[derive(Debug, Default)]
pub struct ConfigMaps {
    inner: Mutex<Store>,
}

#[derive(Debug, Default)]
struct Store {
    resource_version: u64,
    maps: BTreeMap<(String, String), (u64, BTreeMap<String, String>)>,
}

impl ConfigMaps {
    /// An empty store.
    pub fn new() -> Self {
        ConfigMaps::default()
    }

    fn object(ns: &str, name: &str, rv: u64, data: &BTreeMap<String, String>) -> Value {
        json!({
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                         "uid": format!("cm-{ns}-{name}"), "creationTimestamp": "2026-01-01T00:00:00Z"},
            "data": data,
        })
    }
}

impl CoreApi for ConfigMaps {
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<Body>>> {
        Box::pin(async move {
            if req.method() != Method::GET {
                return None;
            }
            let path = req.uri().path().trim_end_matches('/');
            let rest = path.strip_prefix("/api/v1/namespaces/")?;
            let mut parts = rest.split('/');
            let ns = parts.next()?.to_owned();
            if parts.next()? != "configmaps" {
                return None;
            }
            let name = parts.next().map(str::to_owned);
            if parts.next().is_some() {
                return None;
            }
            let query = crate::aggregator::query::parse(req.uri().query().unwrap_or(""));
            let get = |k: &str| {
                query
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            if get("watch").is_some_and(|w| w == "true" || w == "1") {
                let secs = get("timeoutSeconds")
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(300)
                    .min(1800);
                let stream = futures::stream::once(async move {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    Ok::<_, super::BoxError>(http_body::Frame::data(Bytes::new()))
                });
                let body = http_body_util::BodyExt::boxed(http_body_util::StreamBody::new(stream));
                return Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .ok();
            }
            let store = self.inner.lock();
            match name {
                Some(name) => Some(match store.maps.get(&(ns.clone(), name.clone())) {
                    Some((rv, data)) => {
                        json_response(StatusCode::OK, &Self::object(&ns, &name, *rv, data))
                    }
                    None => status_response(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        &format!("configmaps \"{name}\" not found"),
                    ),
                }),
                None => {
                    let wanted = get("fieldSelector")
                        .and_then(|f| f.strip_prefix("metadata.name=").map(str::to_owned));
                    let items: Vec<Value> = store
                        .maps
                        .iter()
                        .filter(|((n, m), _)| *n == ns && wanted.as_ref().is_none_or(|w| w == m))
                        .map(|((n, m), (rv, data))| Self::object(n, m, *rv, data))
                        .collect();
                    let list = json!({
                        "kind": "ConfigMapList",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": store.resource_version.to_string()},
                        "items": items,
                    });
                    Some(json_response(StatusCode::OK, &list))
                }
            }
        })
    }

    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        let mut store = self.inner.lock();
        store.resource_version += 1;
        let rv = store.resource_version;
        store
            .maps
            .insert((namespace.to_owned(), name.to_owned()), (rv, data));
    }
}
