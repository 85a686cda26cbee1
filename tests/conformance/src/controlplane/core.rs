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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use futures::{StreamExt as _, TryStreamExt as _};
    use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
    use kube::api::{Api, ListParams, WatchEvent, WatchParams};
    use tokio_util::sync::CancellationToken;

    use crate::controlplane::{self, AUTHENTICATION_CONFIGMAP, ControlPlane};
    use crate::objects::{ContainerSpec, Objects};

    async fn client(cp: &ControlPlane) -> kube::Client {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        cp.kubeconfig(&path).unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    /// The control plane serves nodes, pods and ConfigMaps from the object server, watches
    /// included, and publishes the authentication ConfigMap into it.
    #[tokio::test]
    async fn objects_back_the_core_api() {
        tls::provider::install_default();
        let shutdown = CancellationToken::new();
        let objects = Objects::new();
        objects.add_node(
            "n1",
            &[("zone", "a")],
            &[("InternalIP", "127.0.0.1")],
            10250,
        );
        let cp = ControlPlane::start(
            controlplane::Config {
                core: std::sync::Arc::new(objects.clone()),
                ..controlplane::Config::default()
            },
            shutdown.clone(),
        )
        .await
        .unwrap();
        let client = client(&cp).await;

        let cm: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
        let auth = cm.get(AUTHENTICATION_CONFIGMAP).await.unwrap();
        assert_eq!(
            auth.data.unwrap()["requestheader-client-ca-file"],
            cp.front_proxy_ca().cert_pem()
        );

        let nodes: Api<Node> = Api::all(client.clone());
        let list = nodes.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 1);
        let rv = list.metadata.resource_version.unwrap();
        let mut watch = nodes
            .watch(&WatchParams::default().timeout(10), &rv)
            .await
            .unwrap()
            .boxed();
        objects.add_node("n2", &[], &[("InternalIP", "127.0.0.1")], 10251);
        let event = tokio::time::timeout(Duration::from_secs(5), watch.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            WatchEvent::Added(node) => assert_eq!(node.metadata.name.as_deref(), Some("n2")),
            other => panic!("{other:?}"),
        }

        objects.add_pod(
            "web",
            "p1",
            "n1",
            &[("app", "web")],
            "Running",
            &[ContainerSpec::new("c")],
        );
        objects.add_pod(
            "web",
            "p2",
            "n1",
            &[],
            "Pending",
            &[ContainerSpec::new("c")],
        );
        let pods: Api<Pod> = Api::all(client);
        let running = pods
            .list(&ListParams::default().fields("status.phase=Running"))
            .await
            .unwrap();
        let names: Vec<_> = running
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["p1"]);
        shutdown.cancel();
        cp.stopped().await;
    }
}
