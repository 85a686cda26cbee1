//! Watch streams: the events of each change for one watcher's selection, bookmarks, the
//! deadline, and `410 Gone` once the history the watcher needs is compacted away.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::http::too_old;
use super::query::Filter;
use super::{Change, Kind, Objects};

pub(crate) fn bookmark(kind: Kind, rv: u64, initial_events_end: bool) -> Value {
    let mut mark = json!({
        "kind": kind.name(),
        "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null}
    });
    if initial_events_end {
        mark["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    mark
}

/// One watch stream's cursor.
pub(crate) struct Watch {
    pub(crate) objects: Objects,
    pub(crate) kind: Kind,
    pub(crate) filter: Filter,
    /// Every change up to this resourceVersion has been considered.
    pub(crate) rv: u64,
    pub(crate) deadline: Instant,
    pub(crate) next_bookmark: Option<Instant>,
    pub(crate) changed: tokio::sync::watch::Receiver<u64>,
    pub(crate) pending: VecDeque<Bytes>,
    pub(crate) done: bool,
    /// [`Shared::dropped`](super::Shared) when the watch opened.
    pub(crate) generation: u64,
}

impl Watch {
    pub(crate) fn push(&mut self, kind: &str, object: &Value) {
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        self.pending.push_back(Bytes::from(line));
    }

    /// The event a change means for this watch (kube-apiserver `cacheWatcher`): an object
    /// entering the selection is ADDED, leaving it DELETED (its previous state, with the
    /// change's resourceVersion).
    fn event(&mut self, change: &Change) {
        let cur = change.cur.as_ref().filter(|c| self.filter.matches(c));
        let prev = change.prev.as_ref().filter(|p| self.filter.matches(p));
        match (cur, prev) {
            (Some(cur), None) => self.push("ADDED", &cur.clone()),
            (Some(cur), Some(_)) => self.push("MODIFIED", &cur.clone()),
            (None, Some(prev)) => {
                let mut gone = (**prev).clone();
                gone["metadata"]["resourceVersion"] = json!(change.rv.to_string());
                self.push("DELETED", &gone);
            }
            (None, None) => {}
        }
    }

    /// Queues the events of every change since the cursor, or a 410 when they are gone.
    fn catch_up(&mut self) {
        let objects = self.objects.clone();
        let state = objects.shared.state.lock();
        if self.rv < state.compacted_rv {
            let status = too_old(self.rv, &state).json();
            self.push("ERROR", &status);
            self.done = true;
            return;
        }
        for change in state.changes_after(self.rv) {
            if change.kind == self.kind {
                self.event(change);
            }
        }
        self.rv = self.rv.max(state.rv);
    }

    pub(crate) async fn next_frame(
        mut self,
    ) -> Option<(Result<Frame<Bytes>, std::io::Error>, Watch)> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some((Ok(Frame::data(line)), self));
            }
            if self.done {
                return None;
            }
            let dropped = self
                .objects
                .shared
                .dropped
                .load(std::sync::atomic::Ordering::SeqCst);
            if dropped != self.generation {
                self.done = true;
                let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "dropped");
                return Some((Err(reset), self));
            }
            self.changed.borrow_and_update();
            if !self
                .objects
                .shared
                .paused
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                self.catch_up();
            }
            if !self.pending.is_empty() || self.done {
                continue;
            }
            let far = self.deadline + Duration::from_secs(1);
            tokio::select! {
                changed = self.changed.changed() => {
                    if changed.is_err() {
                        self.done = true;
                    }
                }
                () = tokio::time::sleep_until(self.next_bookmark.unwrap_or(far)), if self.next_bookmark.is_some() => {
                    let mark = bookmark(self.kind, self.rv, false);
                    self.push("BOOKMARK", &mark);
                    self.next_bookmark = Some(Instant::now() + self.objects.shared.bookmark_interval);
                }
                () = tokio::time::sleep_until(self.deadline) => self.done = true,
            }
        }
    }
}
