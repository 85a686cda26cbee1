//! A JSON `PodMetricsList` written as the client reads it: each frame walks the next pods of
//! the source ([`Source::visit_pods_after`]) and writes them at once.
//!
//! The other lists select every item first and write them afterwards (protobuf needs the
//! whole list's length before its first byte, a Table its columns): at 150,000 pods each
//! record and usage is read twice, and by the second time it has long left the caches. Here
//! a pod is selected, its usage read and its JSON written within one walk step of
//! [`STEP`] pods, and no list of items exists. What the client sees is the same bytes as
//! the collected list; like a collected list (see `Inventory::visit_pods`) it is not one
//! snapshot: a pod added or removed while the list is read shows if the walk has not
//! passed its place yet.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use scraper::point::PodKey;

use super::body::{CHUNK_BYTES, FRAME_SLACK_BYTES, Frames, Streamed};
use super::encode::{self, Ctx};
use super::metrics::Freshness;
use super::respond::list_head;
use super::time::Stamps;
use super::{ListQuery, Source, select_batch};
use crate::body::Body;

/// Pods per walk step: the inventory's read lock is held for this many at most. A frame
/// stops after the batch that fills it (the rest of the step is walked again by the next
/// frame), so it overshoots [`CHUNK_BYTES`] by at most one batch's JSON.
const STEP: usize = 64;

/// A cluster-wide or namespaced pod list without a label selector, in JSON.
pub(super) struct PodStream<S> {
    source: Arc<S>,
    freshness: Arc<Freshness>,
    namespace: Option<String>,
    query: ListQuery,
    ctx: Ctx,
    now_ns: i64,
    /// `{"kind":"PodMetricsList",…,"items":[` until the first frame takes it.
    head: Vec<u8>,
    /// Where the walk resumes: the last pod visited.
    after: Option<PodKey>,
    /// Items written so far (a comma goes before every one but the first).
    written: usize,
    /// The usage timestamps' RFC 3339 strings met so far.
    stamps: Stamps,
    done: bool,
}

impl<S> std::fmt::Debug for PodStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodStream")
            .field("namespace", &self.namespace)
            .field("after", &self.after)
            .field("written", &self.written)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<S: Source> PodStream<S> {
    /// The list of `namespace`'s pods (all when `None`) that `query`'s field selector
    /// selects (its label selector must be empty), at `now_ns`.
    pub(super) fn new(
        source: Arc<S>,
        freshness: Arc<Freshness>,
        namespace: Option<String>,
        query: ListQuery,
        ctx: Ctx,
        now_ns: i64,
    ) -> Self {
        debug_assert!(query.labels.is_empty(), "a streamed list walks every pod");
        let mut head = Vec::with_capacity(128);
        list_head(&mut head, "PodMetricsList", ctx.api_version);
        head.push(b'[');
        PodStream {
            source,
            freshness,
            namespace,
            query,
            ctx,
            now_ns,
            head,
            after: None,
            written: 0,
            stamps: Stamps::default(),
            done: false,
        }
    }

    /// The response body: the first frame is written now; a list that ends within it is
    /// one buffer (with a Content-Length), a longer one a stream.
    pub(super) fn into_body(mut self) -> Body {
        let mut out = Vec::with_capacity(CHUNK_BYTES + FRAME_SLACK_BYTES);
        self.fill(&mut out, CHUNK_BYTES);
        if self.done {
            return crate::body::full(out);
        }
        Streamed::new(self, Some(Bytes::from(out))).boxed()
    }
}

impl<S: Source> Frames for PodStream<S> {
    fn done(&self) -> bool {
        self.done
    }

    /// Walks and writes until `out` holds `target` bytes or the list ends.
    fn fill(&mut self, out: &mut Vec<u8>, target: usize) {
        let PodStream {
            source,
            freshness,
            namespace,
            query,
            ctx,
            now_ns,
            head,
            after,
            written,
            stamps,
            done,
        } = self;
        let (namespace, now_ns) = (namespace.as_deref(), *now_ns);
        out.append(head);
        let mut batch = freshness.batch();
        while !*done && out.len() < target {
            // Set when the frame filled up inside the step: the last pod written.
            let mut full_after: Option<PodKey> = None;
            let next = source.visit_pods_after(namespace, after.as_ref(), STEP, &mut |records| {
                if full_after.is_some() {
                    return;
                }
                // The names are read only by the writer: loaded with the batch's records.
                records.iter().for_each(|r| encode::warm_name(r));
                select_batch(
                    &**source,
                    records,
                    namespace,
                    query,
                    now_ns,
                    |record, usage| {
                        batch.observe(now_ns, usage.timestamp_ns);
                        if *written > 0 {
                            out.push(b',');
                        }
                        let stamp = stamps.get(usage.timestamp_ns);
                        encode::write_pod_stamped(out, ctx, record, &usage, false, &stamp);
                        *written += 1;
                    },
                );
                if out.len() >= target {
                    full_after = records.last().map(|r| r.key.clone());
                }
            });
            match full_after.or(next) {
                Some(key) => *after = Some(key),
                None => {
                    out.extend_from_slice(b"]}\n");
                    *done = true;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use std::collections::BTreeSet;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body::Body as _;

    use prometheus_client::registry::Registry;
    use scraper::inventory::{Inventory, PodRecord};
    use scraper::point::{ContainerSample, NodeName, NodeScrape, Sample};
    use scraper::selector::LabelSelector;
    use scraper::store::{Config, Store, UsageLink};

    use super::*;
    use crate::api::{Handler, Live};

    const SECOND: i64 = 1_000_000_000;
    // The handler tests' clock, so their helpers ask at the time this cluster was scraped for.
    const NOW_NS: i64 = crate::api::tests::NOW;

    /// Namespaces `a` (3 pods), `big` (8,000: many frames), `c` (150: more items than a
    /// collected list buffers, less than a frame); every pod labelled
    /// `app`, every 7th pod without usage (its node reported nothing for it); usage also for
    /// `big/web-late`, a pod the inventory does not know yet.
    pub(in crate::api) fn cluster() -> (Live, usize) {
        let inventory = Arc::new(Inventory::new());
        let store = Arc::new(Store::new(Config::new(std::time::Duration::from_secs(15))));
        let interner = inventory.interner();
        let mut records = Vec::new();
        let mut reported = Vec::new();
        for (ns, count) in [("a", 3), ("big", 8_000), ("c", 150)] {
            for i in 0..count {
                let name = format!("web-{i:05}");
                let app = format!("app-{}", i % 5);
                records.push(PodRecord {
                    usage: UsageLink::new(),
                    key: PodKey::new(ns, &name),
                    labels: interner.labels([("app", app.as_str()), ("tier", "x<y")]),
                    node_name: Some(NodeName::from("node-0")),
                });
                if i % 7 != 3 {
                    reported.push((ns, name));
                }
            }
        }
        inventory.replace_pods(records);
        let with_usage = reported.len();
        reported.push(("big", "web-late".to_owned()));
        for (round, ts) in [NOW_NS - 22 * SECOND, NOW_NS - 7 * SECOND]
            .into_iter()
            .enumerate()
        {
            let containers = reported
                .iter()
                .enumerate()
                .map(|(i, (ns, pod))| ContainerSample {
                    namespace: (*ns).into(),
                    pod: pod.as_str().into(),
                    container: "app".into(),
                    sample: Sample {
                        timestamp_ns: ts,
                        cpu_usage_ns_total: Some(
                            (round as u64 + 1) * 1_000_000_000 * (i as u64 + 1),
                        ),
                        cpu_nanocores: None,
                        memory_working_set_bytes: Some(4096 * (i as u64 + 1)),
                        start_time_ns: Some(NOW_NS - 3600 * SECOND),
                        swap_bytes: (i % 2 == 0).then_some(i as u64),
                    },
                })
                .collect();
            let scrape = NodeScrape {
                node: None,
                containers,
            };
            store.ingest(&NodeName::from("node-0"), &scrape, ts);
        }
        (Live { inventory, store }, with_usage)
    }

    pub(in crate::api) fn handler(live: &Live) -> Handler<Live> {
        Handler::new(
            live.clone(),
            LabelSelector::default(),
            &mut Registry::default(),
        )
    }

    /// The body's frames, and whether it was one buffer.
    fn frames(h: &Handler<Live>, path: &str) -> (Vec<Bytes>, Option<u64>) {
        let (parts, ()) = http::Request::get(path)
            .header("accept", "application/json")
            .body(())
            .unwrap()
            .into_parts();
        let response = h.handle(&parts, NOW_NS).unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        let mut body = response.into_body();
        let exact = body.size_hint().exact();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            out.push(frame.unwrap().into_data().unwrap());
        }
        (out, exact)
    }

    fn body(h: &Handler<Live>, path: &str) -> Vec<u8> {
        frames(h, path).0.concat()
    }

    /// Streamed lists (no label selector) are byte for byte the lists the collected path
    /// writes (a label selector that every pod matches goes through the index and collects
    /// every item first), cluster-wide, per namespace and with field selectors; each pod
    /// is counted once in the freshness histogram either way.
    #[test]
    fn a_streamed_list_is_the_collected_list() {
        let (live, with_usage) = cluster();
        let h = handler(&live);
        let base = "/apis/metrics.k8s.io/v1beta1";
        for (streamed, collected) in [
            (
                format!("{base}/pods"),
                format!("{base}/pods?labelSelector=app"),
            ),
            (
                format!("{base}/namespaces/big/pods"),
                format!("{base}/namespaces/big/pods?labelSelector=app"),
            ),
            (
                format!("{base}/namespaces/c/pods"),
                format!("{base}/namespaces/c/pods?labelSelector=app"),
            ),
            (
                format!("{base}/pods?fieldSelector=metadata.namespace%3Dc"),
                format!("{base}/pods?fieldSelector=metadata.namespace%3Dc&labelSelector=app"),
            ),
            (
                format!("{base}/pods?fieldSelector=metadata.name%3Dweb-00001"),
                format!("{base}/pods?fieldSelector=metadata.name%3Dweb-00001&labelSelector=app"),
            ),
            (
                format!("{base}/namespaces/none/pods"),
                format!("{base}/namespaces/none/pods?labelSelector=app"),
            ),
        ] {
            let before = h.freshness().count();
            let got = body(&h, &streamed);
            let counted = h.freshness().count() - before;
            let want = body(&h, &collected);
            assert_eq!(
                String::from_utf8(got.clone()).unwrap(),
                String::from_utf8(want).unwrap(),
                "{streamed}"
            );
            let list: serde_json::Value = serde_json::from_slice(&got).unwrap();
            let items = list["items"].as_array().unwrap().len();
            assert_eq!(counted, items as u64, "{streamed}");
        }
        let all: serde_json::Value =
            serde_json::from_slice(&body(&h, &format!("{base}/pods"))).unwrap();
        assert_eq!(all["items"].as_array().unwrap().len(), with_usage);
    }

    /// A list that ends within the first frame is one buffer with a known length, even one
    /// with more items than a collected list buffers; a longer one is streamed in frames of
    /// about [`CHUNK_BYTES`].
    #[test]
    fn short_lists_are_one_buffer_and_long_ones_stream_in_frames() {
        let (live, _) = cluster();
        let h = handler(&live);
        let (short, exact) = frames(&h, "/apis/metrics.k8s.io/v1/namespaces/c/pods");
        assert_eq!(short.len(), 1);
        assert_eq!(exact, Some(short[0].len() as u64));
        let list: serde_json::Value = serde_json::from_slice(&short[0]).unwrap();
        assert!(list["items"].as_array().unwrap().len() > crate::api::body::BUFFERED_ITEMS);
        let (long, exact) = frames(&h, "/apis/metrics.k8s.io/v1/pods");
        assert_eq!(exact, None);
        assert!(long.len() > 5, "{} frames", long.len());
        for frame in &long[..long.len() - 1] {
            assert!(frame.len() >= CHUNK_BYTES, "{}", frame.len());
            assert!(
                frame.len() <= CHUNK_BYTES + FRAME_SLACK_BYTES,
                "{}",
                frame.len()
            );
        }
    }

    /// Pods removed and added while a list is being read: the answer stays a valid sorted
    /// list without duplicates, a pod removed after it was written stays written, one the
    /// walk has not reached is gone, and one added ahead of the walk is there.
    #[test]
    fn pods_that_change_while_a_list_is_read_show_as_the_walk_finds_them() {
        let (live, _) = cluster();
        let h = handler(&live);
        let (parts, ()) = http::Request::get("/apis/metrics.k8s.io/v1/pods")
            .header("accept", "application/json")
            .body(())
            .unwrap()
            .into_parts();
        let mut body = h.handle(&parts, NOW_NS).unwrap().into_body();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        let Poll::Ready(Some(first)) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("no first frame");
        };
        out.extend_from_slice(&first.unwrap().into_data().unwrap());
        // The first frame ends inside `big`; change pods well ahead of it and behind it.
        let written = String::from_utf8_lossy(&out);
        assert!(
            written.contains(r#""namespace":"big""#),
            "the first frame reached big"
        );
        assert!(
            !written.contains(r#""name":"web-02000""#),
            "but not web-02000"
        );
        live.inventory.remove_pod("big", "web-02000");
        live.inventory.remove_pod("a", "web-00000");
        let other = live.inventory.pod("big", "web-02001").unwrap();
        live.inventory.upsert_pod(PodRecord {
            usage: UsageLink::new(),
            key: PodKey::new("big", "web-late"),
            labels: other.labels.clone(),
            node_name: other.node_name.clone(),
        });
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            out.extend_from_slice(&frame.unwrap().into_data().unwrap());
        }
        let list: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let keys: Vec<(String, String)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let m = &i["metadata"];
                (
                    m["namespace"].as_str().unwrap().to_owned(),
                    m["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert!(keys.is_sorted(), "sorted");
        assert_eq!(
            keys.iter().collect::<BTreeSet<_>>().len(),
            keys.len(),
            "no duplicates"
        );
        let has = |ns: &str, name: &str| keys.contains(&(ns.to_owned(), name.to_owned()));
        assert!(has("a", "web-00000"), "written before it was removed");
        assert!(
            !has("big", "web-02000"),
            "removed before the walk got there"
        );
        assert!(has("big", "web-late"), "added ahead of the walk");
        assert!(has("big", "web-02001"));
    }
}
