//! The `metrics.k8s.io` API (v1 and v1beta1): NodeMetrics/PodMetrics gets and lists with
//! selectors, Table output, discovery, OpenAPI and `/version`, answered without sockets by
//! [`Api::handle`] (or [`Handler::handle`] over any [`Source`]).
//!
//! # Layout
//! - [`routes`] maps a path → [`routes::Route`].
//! - [`accept`] does `Accept` negotiation (JSON, protobuf, Table, PartialObjectMetadata,
//!   discovery v2).
//! - [`query`] decodes the query string decoding as Go's `url.ParseQuery`.
//! - [`encode`], [`json`], [`quantity`], [`time`] are the hand-written JSON writers;
//!   [`scratch`] appends the short runs they (and [`proto`]) build on the stack.
//! - [`proto`] writes the same objects in Kubernetes protobuf.
//! - [`body`] streams list bodies; `respond` shapes an answer in the negotiated form;
//!   `stream` writes a JSON pod list as it walks the inventory, a frame at a time.
//! - [`discovery`], [`openapi`] hold the documents built once at startup.
//! - [`metrics`] holds `metrics_server_api_metric_freshness_seconds`.

pub mod accept;
pub mod body;
pub mod discovery;
pub mod encode;
pub mod json;
pub mod metrics;
pub mod openapi;
mod options;
pub mod proto;
pub mod quantity;
pub mod query;
mod respond;
pub mod routes;
pub mod scratch;
mod stream;
pub mod time;
pub mod yaml;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod proto_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod yaml_tests;

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode, header};
use prometheus_client::registry::Registry;
use scraper::inventory::{Inventory, NodeRecord, PodRecord, VISIT_BATCH};
use scraper::point::{PodKey, PodUsage, Usage};
use scraper::selector::{Field, FieldSelector, LabelSelector};
use scraper::store::Store;
use smallvec::SmallVec;

use self::accept::{Endpoint, Format, Target};
use self::body::BUFFERED_ITEMS;
use self::discovery::{AGGREGATED_CONTENT_TYPE, Discovery};
use self::encode::{Ctx, Include, NodeItem, PodItem};
use self::metrics::Freshness;
use self::openapi::{Doc, OpenApi};
use self::respond::{SingleItem, nodes_list, pods_list, single};
use self::routes::{Resource, Route, Version};
use crate::body::Body;
use crate::status::Status;

/// What the API reads: which nodes and pods exist (with labels) and their usage.
///
/// Implemented for the real [`Inventory`] + [`Store`] pair by [`Live`]; tests and benches
/// use in-memory fakes.
pub trait Source: Send + Sync + 'static {
    /// Every node, sorted by name.
    fn nodes(&self) -> Vec<Arc<NodeRecord>>;
    /// A node by name.
    fn node(&self, name: &str) -> Option<Arc<NodeRecord>>;
    /// Every pod of a namespace (or of all), sorted by namespace then name.
    fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>>;
    /// The pods of [`Source::pods`] that `labels` matches, in the same order (the inventory
    /// answers an equality requirement from its label index).
    fn pods_matching(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
    ) -> Vec<Arc<PodRecord>> {
        let mut pods = self.pods(namespace);
        pods.retain(|pod| labels.matches(&pod.labels));
        pods
    }
    /// Hands [`Source::pods_matching`]'s pods to `visit` in the same order, a few at a time
    /// (a batch's memory can be loaded together), without copying the list first.
    fn visit_pods(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) {
        scraper::inventory::in_batches(&self.pods_matching(namespace, labels), visit);
    }
    /// Up to `max` of [`Source::pods`]'s pods that come after `after` in namespace-then-name
    /// order (from the first when `None`), handed to `visit` a few at a time; returns the
    /// last key visited when it stopped at `max` (the next call resumes after it), `None`
    /// when no pod is left (`max` is at least 1). A streamed list reads a frame's worth per
    /// call. By default from a sorted copy of [`Source::pods`] per call, which is enough for
    /// a small source; a large one walks in place (one that keeps a sorted vector, with
    /// [`visit_sorted_pods_after`]).
    fn visit_pods_after(
        &self,
        namespace: Option<&str>,
        after: Option<&PodKey>,
        max: usize,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) -> Option<PodKey> {
        let mut pods = self.pods(namespace);
        if !self.pods_sorted() {
            pods.sort_by(|a, b| a.key.cmp(&b.key));
        }
        // Already only the namespace's pods.
        visit_sorted_pods_after(&pods, None, after, max, visit)
    }
    /// A pod by namespace and name.
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>>;
    /// A node's servable usage at `now_ns`.
    fn node_usage(&self, name: &str, now_ns: i64) -> Option<Usage>;
    /// A pod's servable usage at `now_ns`.
    fn pod_usage(&self, namespace: &str, name: &str, now_ns: i64) -> Option<Arc<PodUsage>>;
    /// The servable usage of the pod of `record` (one of [`Source::pods`]'s) at `now_ns`:
    /// what lists read per pod. By default [`Source::pod_usage`] of its key.
    fn record_usage(&self, record: &PodRecord, now_ns: i64) -> Option<Arc<PodUsage>> {
        self.pod_usage(&record.key.namespace, &record.key.name, now_ns)
    }
    /// [`Source::record_usage`] of each of `records` into `out` (same length): a list reads
    /// a batch at once, so the sources that can overlap the batch's memory reads do.
    fn record_usages(
        &self,
        records: &[&PodRecord],
        now_ns: i64,
        out: &mut [Option<Arc<PodUsage>>],
    ) {
        for (record, out) in records.iter().zip(out) {
            *out = self.record_usage(record, now_ns);
        }
    }
    /// Whether [`Source::pods`] is sorted by namespace then name by construction, so a list
    /// need not check it.
    fn pods_sorted(&self) -> bool {
        false
    }
    /// Loads what [`Source::record_usage`] will read for `record` and discards it; a list
    /// calls it for a batch of records ahead, so their cache misses overlap.
    fn warm(&self, _record: &PodRecord) {}
    /// How many pods there are (all namespaces): what tells a list that will take a while.
    fn pod_count(&self) -> usize {
        self.pods(None).len()
    }
}

/// Pods from which a cluster-wide list that selects every pod before its first byte
/// (protobuf, Tables, the collected forms) runs off the serving worker it came in on
/// ([`off_worker`]): at 10,000 pods the selection takes a few ms, at 150,000 tens of ms.
pub const OFF_WORKER_PODS: usize = 10_000;

/// Runs `work`, a list's selection; when it is `long` (tens of ms without a yield), without
/// holding up the other tasks of the Tokio worker it runs on: on a multi-threaded runtime the
/// worker first hands its queue to another thread (`block_in_place`), so the HPA's short
/// requests on the connections it serves are taken by that thread meanwhile instead of
/// waiting for the list (BENCHMARKS.md, "h2, as kube-apiserver's aggregator asks"). A short
/// one, or one outside such a runtime, runs in line.
fn off_worker<R>(long: bool, work: impl FnOnce() -> R) -> R {
    let multi_thread = long
        && tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

/// [`Source::visit_pods_after`] over `pods` sorted by namespace then name: binary searches
/// for `namespace`'s run (all of `pods` when `None`) and for the first pod after `after`,
/// then up to `max` pods from there, in batches. For sources that keep a sorted vector.
pub fn visit_sorted_pods_after(
    pods: &[Arc<PodRecord>],
    namespace: Option<&str>,
    after: Option<&PodKey>,
    max: usize,
    visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
) -> Option<PodKey> {
    let pods = match namespace {
        Some(ns) => {
            let from = pods.partition_point(|p| &*p.key.namespace < ns);
            let to = pods.partition_point(|p| &*p.key.namespace <= ns);
            pods.get(from..to).unwrap_or_default()
        }
        None => pods,
    };
    let start = after.map_or(0, |a| pods.partition_point(|p| p.key <= *a));
    let end = start.saturating_add(max.max(1)).min(pods.len());
    scraper::inventory::in_batches(pods.get(start..end).unwrap_or_default(), visit);
    match end.checked_sub(1) {
        Some(last) if end < pods.len() => pods.get(last).map(|p| p.key.clone()),
        _ => None,
    }
}

/// The real source: the inventory for existence and labels, the store for usage.
#[derive(Clone, Debug)]
pub struct Live {
    /// Which nodes and pods exist.
    pub inventory: Arc<Inventory>,
    /// Their usage.
    pub store: Arc<Store>,
}

impl Source for Live {
    fn nodes(&self) -> Vec<Arc<NodeRecord>> {
        self.inventory.nodes()
    }
    fn node(&self, name: &str) -> Option<Arc<NodeRecord>> {
        self.inventory.node(name)
    }
    fn pods(&self, namespace: Option<&str>) -> Vec<Arc<PodRecord>> {
        self.inventory.pods(namespace)
    }
    fn pods_matching(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
    ) -> Vec<Arc<PodRecord>> {
        self.inventory.pods_matching(namespace, labels)
    }
    /// Under the inventory's read lock: each record is touched once, as it is selected.
    fn visit_pods(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) {
        self.inventory.visit_pods(namespace, labels, visit);
    }
    /// Under the inventory's read lock for `max` pods at a time.
    fn visit_pods_after(
        &self,
        namespace: Option<&str>,
        after: Option<&PodKey>,
        max: usize,
        visit: &mut dyn FnMut(&[&Arc<PodRecord>]),
    ) -> Option<PodKey> {
        self.inventory
            .visit_pods_after(namespace, after, max, visit)
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRecord>> {
        self.inventory.pod(namespace, name)
    }
    fn node_usage(&self, name: &str, now_ns: i64) -> Option<Usage> {
        self.store.node(name, now_ns)
    }
    fn pod_usage(&self, namespace: &str, name: &str, now_ns: i64) -> Option<Arc<PodUsage>> {
        self.store.pod(namespace, name, now_ns)
    }
    /// Through the record's link to the store's slot: no hash lookup once linked.
    fn record_usage(&self, record: &PodRecord, now_ns: i64) -> Option<Arc<PodUsage>> {
        let key = &record.key;
        self.store
            .pod_linked(&record.usage, &key.namespace, &key.name, now_ns)
    }
    /// The batch's usage lines are loaded together ([`Store::pods_linked`]).
    fn record_usages(
        &self,
        records: &[&PodRecord],
        now_ns: i64,
        out: &mut [Option<Arc<PodUsage>>],
    ) {
        let pods: SmallVec<[(&scraper::store::UsageLink, &scraper::point::PodKey); VISIT_BATCH]> =
            records.iter().map(|r| (&r.usage, &r.key)).collect();
        self.store.pods_linked(&pods, now_ns, out);
    }
    /// The inventory keeps pods in maps ordered by namespace, then name.
    fn pods_sorted(&self) -> bool {
        true
    }
    fn warm(&self, record: &PodRecord) {
        record.usage.warm();
    }
    fn pod_count(&self) -> usize {
        self.inventory.pod_count()
    }
}

/// Everything the API reads.
#[derive(Debug)]
pub struct Api {
    /// Which nodes and pods exist.
    pub inventory: Arc<Inventory>,
    /// Their usage.
    pub store: Arc<Store>,
    /// `--node-selector`: applied to node lists, not to node GET (as metrics-server).
    pub node_selector: LabelSelector,
    handler: Handler<Live>,
}

impl Api {
    /// Creates the API and registers its metric family
    /// (`metrics_server_api_metric_freshness_seconds`) on `registry`.
    pub fn new(
        inventory: Arc<Inventory>,
        store: Arc<Store>,
        node_selector: LabelSelector,
        registry: &mut Registry,
    ) -> Self {
        let live = Live {
            inventory: Arc::clone(&inventory),
            store: Arc::clone(&store),
        };
        Api {
            inventory,
            store,
            handler: Handler::new(live, node_selector.clone(), registry),
            node_selector,
        }
    }

    /// Answers a request for a path this module owns (`/apis`, `/apis/**`, `/openapi/**`,
    /// `/version`), or `None` when the path is not the API's.
    /// `now_ns` is the response time (creationTimestamp, staleness).
    pub fn handle(&self, parts: &Parts, now_ns: i64) -> Option<http::Response<Body>> {
        self.handler.handle(parts, now_ns)
    }
}

/// The API over any [`Source`].
pub struct Handler<S> {
    /// Shared with the list bodies that stream from it.
    source: Arc<S>,
    node_selector: LabelSelector,
    freshness: Arc<Freshness>,
    discovery: Arc<Discovery>,
    openapi: Arc<OpenApi>,
}

impl<S> std::fmt::Debug for Handler<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("node_selector", &self.node_selector)
            .finish_non_exhaustive()
    }
}

fn response(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_response(body: Body) -> Response<Body> {
    response(StatusCode::OK, "application/json", body)
}

fn header_str<'a>(parts: &'a Parts, name: header::HeaderName) -> Option<Cow<'a, str>> {
    parts
        .headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()))
}

/// `GET`/`HEAD` only; anything else is go-restful's 405 through the apiserver's error handler.
fn method_not_allowed(accept: Option<&str>) -> Response<Body> {
    Status::method_not_allowed_generic().into_response_for(accept)
}

fn not_acceptable() -> Response<Body> {
    Status::not_acceptable(accept::NOT_ACCEPTABLE).into_response()
}

/// The 406 of NodeMetrics / PodMetrics: always JSON (`WriteObjectNegotiated` writes the
/// negotiation failure with `WriteRawJSON`).
fn not_acceptable_resource() -> Response<Body> {
    Status::not_acceptable(accept::NOT_ACCEPTABLE_RESOURCE).into_response()
}

/// A list request's selectors, once its options passed every check ([`options`]).
#[derive(Debug)]
struct ListQuery {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl ListQuery {
    /// The namespace a pod list reads: the path's, or on a cluster-wide list the one a
    /// `metadata.namespace=x` field selector requires (only that namespace is walked).
    fn namespace<'a>(&'a self, path: Option<&'a str>) -> Option<&'a str> {
        path.or_else(|| self.fields.required(Field::Namespace))
    }
}

impl<S: Source> Handler<S> {
    /// Builds the documents and registers the freshness histogram on `registry`.
    pub fn new(source: S, node_selector: LabelSelector, registry: &mut Registry) -> Self {
        let freshness = Arc::new(Freshness::new());
        registry.register_collector(Box::new(Arc::clone(&freshness)));
        Handler {
            source: Arc::new(source),
            node_selector,
            freshness,
            discovery: Arc::new(Discovery::new()),
            openapi: Arc::new(OpenApi::new()),
        }
    }

    /// The freshness histogram (for tests and the self-metrics endpoint).
    pub fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    /// See [`Api::handle`].
    pub fn handle(&self, parts: &Parts, now_ns: i64) -> Option<Response<Body>> {
        let route = routes::route(parts.uri.path())?;
        let accept = header_str(parts, header::ACCEPT);
        let accept = accept.as_deref();
        if route == Route::NotFound {
            return Some(Status::no_route().into_response_for(accept));
        }
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return Some(method_not_allowed(accept));
        }
        Some(match route {
            Route::Apis => self.apis(parts, accept),
            Route::Group => plain(accept, &self.discovery.group),
            Route::Discovery(v) => plain(accept, self.discovery.resources(v)),
            Route::Resource(v, r) => self.resource(parts, accept, v, r, now_ns),
            Route::OpenApiV2 => negotiated_doc(parts, &self.openapi.v2, None, now_ns),
            Route::OpenApiV3 => serve_doc(parts, &self.openapi.v3_index, None, now_ns),
            Route::OpenApiV3Group(v) => {
                let path = format!("/openapi/v3/apis/metrics.k8s.io/{}", v.as_str());
                negotiated_doc(parts, self.openapi.v3(v), Some(&path), now_ns)
            }
            Route::Version => json_response(crate::body::full(self.discovery.version.clone())),
            Route::NotFound => Status::no_route().into_response_for(accept),
        })
    }

    /// `/apis`: the aggregated v2 document when asked for (with ETag / 304), else the legacy
    /// APIGroupList.
    fn apis(&self, parts: &Parts, accept: Option<&str>) -> Response<Body> {
        if accept::negotiate(accept, Endpoint::AggregatedDiscovery) != Some(Target::DiscoveryV2) {
            return plain(accept, &self.discovery.apis);
        }
        let etag = &self.discovery.aggregated_etag;
        let mut r = unless_not_modified(parts, etag, || {
            response(
                StatusCode::OK,
                AGGREGATED_CONTENT_TYPE,
                crate::body::full(self.discovery.aggregated.clone()),
            )
        });
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
        if let Ok(v) = HeaderValue::from_str(etag) {
            h.insert(header::ETAG, v);
        }
        r
    }

    fn resource(
        &self,
        parts: &Parts,
        accept: Option<&str>,
        v: Version,
        r: Resource<'_>,
        now_ns: i64,
    ) -> Response<Body> {
        let Some((format, target)) = accept::negotiate_resource(accept) else {
            return not_acceptable_resource();
        };
        let query = parts.uri.query();
        let mut ctx = Ctx::new(v.group_version(), now_ns);
        if let Target::Table(m) | Target::Partial(m) | Target::PartialList(m) = target {
            ctx.meta_api_version = m.api_version();
        }
        // An unknown `includeObject` is only noticed while converting rows (`asTable`), so it
        // is a 400 only when there is at least one row.
        let mut bad_include = None;
        if let Target::Table(_) = target {
            match query::get(query, "includeObject").as_deref() {
                None | Some("") | Some("Metadata") => ctx.include = Include::Metadata,
                Some("None") => ctx.include = Include::None,
                Some("Object") => ctx.include = Include::Object,
                Some(other) => bad_include = Some(other.to_owned()),
            }
        }
        let bad = |value: &str| {
            Status::bad_request(format!(
                "unrecognized includeObject value: {}",
                scraper::go::quote(value)
            ))
            .into_response_for(accept)
        };
        match r {
            Resource::Nodes | Resource::Pods(_) => {
                let list = match self.list_query(query, &r) {
                    Ok(q) => q,
                    Err(status) => return status.into_response_for(accept),
                };
                let long = |ns: Option<&str>| {
                    list.namespace(ns).is_none() && self.source.pod_count() >= OFF_WORKER_PODS
                };
                match r {
                    Resource::Pods(ns)
                        if format == Format::Json
                            && matches!(target, Target::Object | Target::DiscoveryV2)
                            && list.labels.is_empty() =>
                    {
                        // Written as it is read: each frame walks the next pods and writes
                        // them while their memory is in cache (no list of items first). A
                        // label selector goes through the inventory's index instead, and
                        // the other forms need every item first (protobuf's length, a
                        // Table's columns).
                        let namespace = list.namespace(ns.as_deref()).map(str::to_owned);
                        let stream = stream::PodStream::new(
                            Arc::clone(&self.source),
                            Arc::clone(&self.freshness),
                            namespace,
                            list,
                            ctx,
                            now_ns,
                        );
                        json_response(stream.into_body())
                    }
                    Resource::Pods(ns)
                        if format == Format::Protobuf
                            && matches!(
                                target,
                                Target::Object | Target::DiscoveryV2 | Target::PartialList(_)
                            ) =>
                    {
                        let ns = ns.as_deref();
                        off_worker(long(ns), || {
                            self.protobuf_pods(ns, &list, target, &ctx, now_ns)
                        })
                    }
                    Resource::Pods(ns) => {
                        let ns = ns.as_deref();
                        let items = off_worker(long(ns), || self.list_pods(ns, &list, now_ns));
                        match bad_include {
                            Some(v) if !items.is_empty() => bad(&v),
                            _ => pods_list(format, target, ctx, items, accept),
                        }
                    }
                    _ => {
                        let items = self.list_nodes(&list, now_ns);
                        match bad_include {
                            Some(v) if !items.is_empty() => bad(&v),
                            _ => nodes_list(format, target, ctx, items, accept),
                        }
                    }
                }
            }
            Resource::Node(name) => match (self.get_node(&name, now_ns), bad_include) {
                (Err(status), _) => status.into_response_for(accept),
                (Ok(_), Some(v)) => bad(&v),
                (Ok(item), None) => single(format, target, &ctx, SingleItem::Node(&item), accept),
            },
            Resource::Pod(ns, name) => match (self.get_pod(&ns, &name, now_ns), bad_include) {
                (Err(status), _) => status.into_response_for(accept),
                (Ok(_), Some(v)) => bad(&v),
                (Ok(item), None) => single(format, target, &ctx, SingleItem::Pod(&item), accept),
            },
        }
    }

    /// The list's options, checked in the apiserver's order ([`options`]).
    fn list_query(&self, query: Option<&str>, r: &Resource<'_>) -> Result<ListQuery, Box<Status>> {
        let resource = match r {
            Resource::Nodes | Resource::Node(_) => "nodes",
            _ => "pods",
        };
        options::list_options(query, resource)
    }

    /// Nodes matching `--node-selector`, the label and the field selector, with usage, sorted
    /// by name. One freshness observation per item.
    pub fn list_nodes_for(
        &self,
        labels: &LabelSelector,
        fields: &FieldSelector,
        now_ns: i64,
    ) -> Vec<NodeItem> {
        let mut nodes = self.source.nodes();
        if !nodes.is_sorted_by(|a, b| a.name <= b.name) {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut batch = self.freshness.batch();
        let mut items = Vec::with_capacity(nodes.len());
        for record in nodes {
            if !self.node_selector.matches(&record.labels)
                || !labels.matches(&record.labels)
                || !fields.matches(record.name.as_str(), "")
            {
                continue;
            }
            if let Some(usage) = self.source.node_usage(record.name.as_str(), now_ns) {
                batch.observe(now_ns, usage.timestamp_ns);
                items.push(NodeItem { record, usage });
            }
        }
        items
    }

    fn list_nodes(&self, q: &ListQuery, now_ns: i64) -> Vec<NodeItem> {
        self.list_nodes_for(&q.labels, &q.fields, now_ns)
    }

    /// Pods matching the selectors, with usage, sorted by namespace and name.
    fn list_pods(&self, namespace: Option<&str>, q: &ListQuery, now_ns: i64) -> Vec<PodItem> {
        let mut items = Vec::new();
        let sorted = self.select_pods(
            q.namespace(namespace),
            q,
            now_ns,
            |_| {},
            |record, usage| {
                items.push(PodItem {
                    record: Arc::clone(record),
                    usage,
                });
            },
        );
        if !sorted {
            items.sort_by(|a, b| a.record.key.cmp(&b.record.key));
        }
        items
    }

    /// What every pod list reads: the pods of `namespace` (all when `None`) that `q`
    /// selects and that have usage, handed to `each` with their usage in the source's order,
    /// each counted once in the freshness histogram; `batch` sees each batch of records
    /// first. Returns whether they came in namespace/name order: the source promises it
    /// (`Source::pods_sorted`), or it is checked on the way.
    fn select_pods(
        &self,
        namespace: Option<&str>,
        q: &ListQuery,
        now_ns: i64,
        mut batch: impl FnMut(&[&Arc<PodRecord>]),
        mut each: impl FnMut(&Arc<PodRecord>, Arc<PodUsage>),
    ) -> bool {
        let mut freshness = self.freshness.batch();
        let check = !self.source.pods_sorted();
        let mut sorted = true;
        let mut last: Option<Arc<PodRecord>> = None;
        self.source
            .visit_pods(namespace, &q.labels, &mut |records| {
                if check {
                    for &record in records {
                        sorted &= last.as_ref().is_none_or(|l| l.key <= record.key);
                        last = Some(Arc::clone(record));
                    }
                }
                batch(records);
                select_batch(
                    &*self.source,
                    records,
                    namespace,
                    q,
                    now_ns,
                    |record, usage| {
                        freshness.observe(now_ns, usage.timestamp_ns);
                        each(record, usage);
                    },
                );
            });
        sorted
    }

    /// A pod list in protobuf (a `PodMetricsList`, or a `PartialObjectMetadataList` for
    /// `target` [`Target::PartialList`]). From a source that visits pods in order, its first
    /// [`BUFFERED_ITEMS`] pods (all of an HPA's) are written as they are selected, while their
    /// memory is in cache, with no item that owns them (the record's reference count is
    /// neither taken nor dropped) and no pass over them afterwards; such a list is answered
    /// in one buffer, its length put in front at the end. The pods past them (every pod, from
    /// a source that does not promise the order, sorted afterwards) are collected and
    /// measured as they are selected, and streamed after the written ones: protobuf needs
    /// the length of the whole list before its first byte.
    fn protobuf_pods(
        &self,
        namespace: Option<&str>,
        q: &ListQuery,
        target: Target,
        ctx: &Ctx,
        now_ns: i64,
    ) -> Response<Body> {
        let partial = matches!(target, Target::PartialList(_));
        let (api_version, kind, (writer, write)) = if partial {
            (
                ctx.meta_api_version,
                "PartialObjectMetadataList",
                (
                    proto::POD_PARTIAL,
                    proto::pod_partial_item as body::WriteItem<PodItem>,
                ),
            )
        } else {
            (
                ctx.api_version,
                "PodMetricsList",
                (proto::POD, proto::pod_item as body::WriteItem<PodItem>),
            )
        };
        let direct = if self.source.pods_sorted() {
            BUFFERED_ITEMS
        } else {
            0
        };
        let mut list = proto::ListWriter::new(api_version, kind, direct);
        let written = std::cell::Cell::new(0usize);
        let mut rest: Vec<PodItem> = Vec::new();
        let mut rest_len = 0usize;
        let sorted = self.select_pods(
            q.namespace(namespace),
            q,
            now_ns,
            |records| {
                if written.get() < direct {
                    // The names are read only by the writer: loaded with the batch's records.
                    records.iter().for_each(|r| encode::warm_name(r));
                }
            },
            |record, usage| {
                if written.get() < direct {
                    // A branch the predictor learns, not a call through a pointer: the
                    // writer inlines into the loop.
                    if partial {
                        proto::pod_partial_list_item(list.items(), ctx, record);
                    } else {
                        proto::pod_list_item(list.items(), ctx, record, &usage);
                    }
                    written.set(written.get() + 1);
                } else {
                    let item = PodItem {
                        record: Arc::clone(record),
                        usage,
                    };
                    rest_len += proto::field_len(2, (writer.len)(ctx, &item));
                    rest.push(item);
                }
            },
        );
        if !sorted {
            // Nothing was written as selected (`direct` is 0 for such a source).
            rest.sort_by(|a, b| a.record.key.cmp(&b.record.key));
        }
        if rest.is_empty() {
            return response(
                StatusCode::OK,
                accept::PROTOBUF,
                crate::body::full(list.finish()),
            );
        }
        let raw_len = list.raw_len() + rest_len;
        let head = list.into_head(raw_len);
        let body = body::ListBody::new(head, rest, proto::ENVELOPE_TAIL, ctx.clone(), write)
            .warming(PodItem::warm)
            .without_separator();
        response(StatusCode::OK, accept::PROTOBUF, body.into_body())
    }

    fn get_node(&self, name: &str, now_ns: i64) -> Result<NodeItem, Box<Status>> {
        // client-go's node lister reports the singular resource: `node "<name>" not found`.
        let record = self
            .source
            .node(name)
            .ok_or_else(|| Box::new(Status::not_found("node", "", name)))?;
        let usage = self
            .source
            .node_usage(name, now_ns)
            .ok_or_else(|| Box::new(Status::not_found("nodemetrics", "metrics.k8s.io", name)))?;
        self.freshness.batch().observe(now_ns, usage.timestamp_ns);
        Ok(NodeItem { record, usage })
    }

    fn get_pod(&self, namespace: &str, name: &str, now_ns: i64) -> Result<PodItem, Box<Status>> {
        let record = self
            .source
            .pod(namespace, name)
            .ok_or_else(|| Box::new(Status::not_found("pods", "", name)))?;
        let usage = self
            .source
            .pod_usage(namespace, name, now_ns)
            .ok_or_else(|| {
                Box::new(Status::not_found(
                    "podmetrics",
                    "metrics.k8s.io",
                    &format!("{namespace}/{name}"),
                ))
            })?;
        self.freshness.batch().observe(now_ns, usage.timestamp_ns);
        Ok(PodItem { record, usage })
    }
}

/// The pods of a batch of `records` that `namespace` and `q`'s field selector select and
/// that have usage, each handed to `each` with its usage, in order: what every pod list reads
/// per batch. `q`'s label selector is the visit's to apply ([`Source::visit_pods`] hands over
/// only the pods it matches, through the inventory's label index; a streamed list has none),
/// so no pod's labels are matched twice. The batch's records and slots are loaded at once
/// (independent loads whose misses overlap), before the reads that take locks; then the
/// batch's usage is read together.
fn select_batch<S: Source + ?Sized>(
    source: &S,
    records: &[&Arc<PodRecord>],
    namespace: Option<&str>,
    q: &ListQuery,
    now_ns: i64,
    mut each: impl FnMut(&Arc<PodRecord>, Arc<PodUsage>),
) {
    records.iter().for_each(|r| source.warm(r));
    let selected: SmallVec<[&Arc<PodRecord>; VISIT_BATCH]> = records
        .iter()
        .copied()
        .filter(|record| {
            let key = &record.key;
            namespace.is_none_or(|ns| *key.namespace == *ns)
                && q.fields.matches(&key.name, &key.namespace)
        })
        .collect();
    let mut usages: SmallVec<[Option<Arc<PodUsage>>; VISIT_BATCH]> =
        smallvec::smallvec![None; selected.len()];
    let refs: SmallVec<[&PodRecord; VISIT_BATCH]> = selected.iter().map(|r| &***r).collect();
    source.record_usages(&refs, now_ns, &mut usages);
    for (record, usage) in selected.into_iter().zip(usages) {
        if let Some(usage) = usage {
            each(record, usage);
        }
    }
}

/// An empty response with `status`.
fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(crate::body::full(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// An empty 304 when the request's `If-None-Match` is `etag`, else `fresh()`.
fn unless_not_modified(
    parts: &Parts,
    etag: &str,
    fresh: impl FnOnce() -> Response<Body>,
) -> Response<Body> {
    let not_modified = parts
        .headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    if not_modified {
        empty(StatusCode::NOT_MODIFIED)
    } else {
        fresh()
    }
}

/// A discovery document with plain negotiation: its JSON, or that in YAML (406 when neither
/// is acceptable).
fn plain(accept: Option<&str>, body: &Bytes) -> Response<Body> {
    match accept::negotiate_document(accept) {
        Some(format) => respond::whole(format, body.clone()),
        None => not_acceptable(),
    }
}

/// `/openapi/v2` or a v3 group document, negotiated as kube-openapi's handlers do: `Vary:
/// Accept` on every answer, 406 (no body) unless JSON is acceptable, else [`serve_doc`]. (The
/// v3 index is served whatever the `Accept`, as kube-openapi's `HandleDiscovery` serves it.)
fn negotiated_doc(parts: &Parts, doc: &Doc, v3_path: Option<&str>, now_ns: i64) -> Response<Body> {
    let mut r = if accept::openapi_json(header_str(parts, header::ACCEPT).as_deref()) {
        serve_doc(parts, doc, v3_path, now_ns)
    } else {
        empty(StatusCode::NOT_ACCEPTABLE)
    };
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// An OpenAPI document: ETag, `If-None-Match` → 304, and for v3 group documents the `hash`
/// query (mismatch → 301 to the current hash; match → immutable caching), as kube-openapi.
fn serve_doc(parts: &Parts, doc: &Doc, v3_path: Option<&str>, now_ns: i64) -> Response<Body> {
    let etag = doc.etag();
    let mut immutable = false;
    if let Some(path) = v3_path
        && let Some(hash) = query::get(parts.uri.query(), "hash")
        && !hash.is_empty()
    {
        if hash != doc.hash {
            let mut r = empty(StatusCode::MOVED_PERMANENTLY);
            if let Ok(v) = HeaderValue::from_str(&format!("{path}?hash={}", doc.hash)) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            return r;
        }
        immutable = true;
    }
    let mut r = unless_not_modified(parts, &etag, || {
        json_response(crate::body::full(doc.body.clone()))
    });
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if immutable {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable"),
        );
        let mut expires = Vec::with_capacity(32);
        time::write_rfc1123(
            &mut expires,
            now_ns.saturating_add(365 * 86_400 * 1_000_000_000),
        );
        if let Ok(v) = HeaderValue::from_bytes(&expires) {
            h.insert(header::EXPIRES, v);
        }
    }
    r
}
