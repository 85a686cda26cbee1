//! The pluggable core API (`/api/v1/...`: nodes, pods, configmaps) behind the control plane,
//! and its implementation by the in-memory object server [`Objects`].

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::BodyExt;

use super::{Body, BoxError};
use crate::objects::Objects;

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

/// The object server answers `/api/v1` with list, get and watch (resource versions,
/// bookmarks, `410 Gone`, Table) of nodes, pods and ConfigMaps.
impl CoreApi for Objects {
    fn handle(&self, req: Request<Bytes>) -> BoxFuture<'_, Option<Response<Body>>> {
        Box::pin(async move {
            let resp = Objects::handle(self, req).await?;
            Some(resp.map(|body| body.map_err(|e| Box::new(e) as BoxError).boxed()))
        })
    }

    fn upsert_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        Objects::upsert_configmap(self, namespace, name, &data);
    }
}
