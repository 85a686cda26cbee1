//! Streaming list bodies: items are encoded lazily, about [`CHUNK_BYTES`] per frame, as the
//! client reads, so a 150,000-pod list never exists as one buffer.

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::encode::Ctx;
use crate::body::Body;

/// Target size of one streamed frame. 256 KiB rather than 64: four alternated pairs of
/// 150,000-pod lists over HTTPS (BENCHMARKS.md, "Streamed lists in 256 KiB frames") took
/// 0.80-0.87 of the server CPU per JSON list and 0.77-0.96 per gzip one, for 192 KiB more
/// per list in flight.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Lists with at most this many items are encoded into one buffer (with a Content-Length).
pub const BUFFERED_ITEMS: usize = 128;

/// Writes one item.
pub type WriteItem<T> = fn(&mut Vec<u8>, &Ctx, &T);

/// Reads the memory an item's writer is about to read (see [`ListBody::warming`]).
pub type WarmItem<T> = fn(&T);

/// How many items a list warms at once, ahead of the ones it reads: a batch's loads are
/// independent, so their cache misses overlap instead of following each other.
pub const WARM_BATCH: usize = 32;

/// How the bytes an item's writer writes become the document's.
enum Form {
    /// As written, after the separator that precedes every item but the first: JSON's
    /// comma, or nothing (protobuf's repeated field).
    Separated(&'static [u8]),
    /// Written as JSON into `json`, then as an entry of a YAML block sequence.
    Yaml { json: Vec<u8> },
}

/// A list: `head`, the items (separated by commas in JSON), `tail`.
pub struct ListBody<T> {
    head: Vec<u8>,
    /// The items not yet written; each is dropped as soon as it is written, while what it
    /// references is still in cache.
    items: std::vec::IntoIter<T>,
    /// Items written so far.
    next: usize,
    /// The current frame's written items, dropped together at its end (kept for its
    /// capacity between frames).
    written: Vec<T>,
    tail: Cow<'static, [u8]>,
    form: Form,
    ctx: Ctx,
    write: WriteItem<T>,
    warm: WarmItem<T>,
    done: bool,
}

impl<T> std::fmt::Debug for ListBody<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListBody")
            .field("items", &(self.next + self.items.len()))
            .field("next", &self.next)
            .field("done", &self.done)
            .finish()
    }
}

impl<T: Send + Sync + Unpin + 'static> ListBody<T> {
    /// A list body; `head` must end where the first item starts, `tail` closes the document.
    pub fn new(
        head: Vec<u8>,
        items: Vec<T>,
        tail: impl Into<Cow<'static, [u8]>>,
        ctx: Ctx,
        write: WriteItem<T>,
    ) -> Self {
        ListBody {
            head,
            items: items.into_iter(),
            next: 0,
            written: Vec::new(),
            tail: tail.into(),
            form: Form::Separated(b","),
            ctx,
            write,
            warm: |_| {},
            done: false,
        }
    }

    /// Has each item's memory read before it is written, [`WARM_BATCH`] items at a time: a
    /// long list's items are far larger than the caches, so the writer mostly waits for
    /// memory, and one item's misses after another's (the reference-count updates of the
    /// items dropped on the way serialise them); a batch of plain loads overlaps them.
    pub fn warming(mut self, warm: WarmItem<T>) -> Self {
        self.warm = warm;
        self
    }

    /// Items follow each other with nothing between them (protobuf's repeated field),
    /// instead of JSON's comma.
    pub fn without_separator(mut self) -> Self {
        self.form = Form::Separated(b"");
        self
    }

    /// Each item, written as JSON by the item writer, becomes an entry of a YAML block
    /// sequence at column 0 ([`super::yaml::entry_from_json`]): `head` ends with the key
    /// the sequence is the value of.
    pub fn as_yaml(mut self) -> Self {
        self.form = Form::Yaml { json: Vec::new() };
        self
    }

    /// The response body: one buffer for short lists, a stream for long ones.
    pub fn into_body(mut self) -> Body {
        if self.items.len() <= BUFFERED_ITEMS {
            let mut out = Vec::with_capacity(self.head.len() + self.items.len() * 512 + 8);
            self.fill(&mut out, usize::MAX);
            return crate::body::full(out);
        }
        Streamed::new(self, None).boxed()
    }
}

impl<T: Send + Sync + Unpin + 'static> Frames for ListBody<T> {
    /// Appends output to `out` until it reaches `target` bytes or the document ends.
    fn fill(&mut self, out: &mut Vec<u8>, target: usize) {
        if self.next == 0 && !self.head.is_empty() {
            out.append(&mut self.head);
        }
        // The frame's items are dropped together once it is written, not one by one: a
        // drop's reference-count update is a locked instruction, which waits for every load
        // in flight, the warm-up's included.
        let mut written = std::mem::take(&mut self.written);
        while out.len() < target {
            let Some(item) = self.items.next() else {
                break;
            };
            if self.next.is_multiple_of(WARM_BATCH) {
                self.items
                    .as_slice()
                    .iter()
                    .take(WARM_BATCH)
                    .for_each(self.warm);
            }
            match &mut self.form {
                Form::Separated(separator) => {
                    if self.next > 0 {
                        out.extend_from_slice(separator);
                    }
                    (self.write)(out, &self.ctx, &item);
                }
                Form::Yaml { json } => {
                    json.clear();
                    (self.write)(json, &self.ctx, &item);
                    super::yaml::entry_from_json(out, json);
                }
            }
            written.push(item);
            self.next += 1;
        }
        written.clear();
        self.written = written;
        if self.items.as_slice().is_empty() {
            out.extend_from_slice(&self.tail);
            self.done = true;
            // Release the item buffers as soon as everything is written.
            self.items = Vec::new().into_iter();
            self.written = Vec::new();
        }
    }

    fn done(&self) -> bool {
        self.done
    }

    fn frame(&self) -> (usize, usize) {
        match self.form {
            Form::Separated(_) => FRAME,
            Form::Yaml { .. } => YAML_FRAME,
        }
    }
}

/// A document written a frame at a time, as the client reads it.
pub trait Frames: Send + Sync + Unpin + 'static {
    /// Appends output to `out` until it reaches `target` bytes or the document ends.
    fn fill(&mut self, out: &mut Vec<u8>, target: usize);
    /// Whether the document has ended.
    fn done(&self) -> bool;
    /// The size of a frame and what writing it takes of the task's budget: [`FRAME`] unless
    /// the bytes cost more to write.
    fn frame(&self) -> (usize, usize) {
        FRAME
    }
}

/// A frame's size and what writing it takes of the task's budget.
pub const FRAME: (usize, usize) = (CHUNK_BYTES, BUDGET_PER_FRAME);

/// A YAML list's frame: its items cost ~15-20 times JSON's to write (each item's JSON is read
/// back and written again as YAML: 1.2-2.2 s against 63-90 ms for 150,000 pods,
/// BENCHMARKS.md, "YAML lists"), so its frames are an eighth of JSON's and take twice the
/// budget. A turn of its task then writes two frames, ~2.5 ms of work, instead of holding its
/// worker for tens of ms.
pub const YAML_FRAME: (usize, usize) = (CHUNK_BYTES / 8, 2 * BUDGET_PER_FRAME);

/// Room past [`CHUNK_BYTES`] in a frame's buffer for the item (or batch of items) that
/// crosses it.
pub const FRAME_SLACK_BYTES: usize = 8 * 1024;

/// What writing one frame takes of the Tokio task's cooperative budget (128 per turn): a
/// long list gives up its worker after four frames (about 1 MiB, a few ms of work) so that
/// the other requests on that worker, an HPA's among them, are not held for the whole list;
/// outside a runtime nothing is counted. Units, not bytes or time: what the socket writes in
/// between take their own.
pub const BUDGET_PER_FRAME: usize = 32;

/// A [`Frames`] document as a streamed body: frames of about [`CHUNK_BYTES`].
pub struct Streamed<F> {
    frames: F,
    /// A frame written before the body was handed out.
    first: Option<Bytes>,
}

impl<F: Frames> Streamed<F> {
    /// Streams `frames`, starting with `first` when it was written already.
    pub fn new(frames: F, first: Option<Bytes>) -> Self {
        Streamed { frames, first }
    }
}

impl<F> std::fmt::Debug for Streamed<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamed")
            .field("first", &self.first.as_ref().map(Bytes::len))
            .finish_non_exhaustive()
    }
}

impl<F: Frames> HttpBody for Streamed<F> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if this.frames.done() {
            return Poll::Ready(None);
        }
        // Out of budget: Pending, and Tokio wakes the task again behind the others queued.
        let (bytes, budget) = this.frames.frame();
        for _ in 0..budget {
            std::task::ready!(tokio::task::coop::poll_proceed(cx)).made_progress();
        }
        let mut out = Vec::with_capacity(bytes + FRAME_SLACK_BYTES);
        this.frames.fill(&mut out, bytes);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.frames.done()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static WARMED: AtomicUsize = AtomicUsize::new(0);

    fn drain(body: ListBody<u32>) -> Vec<u8> {
        let mut body = Box::pin(Streamed::new(body, None));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = body.as_mut().poll_frame(&mut cx) {
            out.extend_from_slice(&frame.into_data().unwrap());
        }
        out
    }

    /// An item is released by the end of the frame that wrote it (they are dropped together,
    /// not one by one), and the items not yet written are still held.
    #[test]
    fn items_are_released_with_the_frame_that_wrote_them() {
        let items: Vec<Arc<u32>> = (0..100_000).map(Arc::new).collect();
        let body = ListBody::new(
            b"[".to_vec(),
            items.clone(),
            b"]",
            Ctx::new("v", 0),
            |out, _, i: &Arc<u32>| out.extend_from_slice(i.to_string().as_bytes()),
        );
        let mut body = Box::pin(Streamed::new(body, None));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let (mut written, mut frames) = (0, 0);
        while let Poll::Ready(Some(Ok(frame))) = body.as_mut().poll_frame(&mut cx) {
            let frame = frame.into_data().unwrap();
            written += frame.iter().filter(|&&b| b == b',').count();
            frames += 1;
            let held = items.iter().filter(|i| Arc::strong_count(i) > 1).count();
            if body.is_end_stream() {
                assert_eq!(held, 0, "every item released at the end");
            } else {
                // Items 0..=written are written (the last one's comma is in the next frame).
                assert_eq!(held, items.len() - written - 1, "frame {frames}");
            }
        }
        assert!(frames > 2, "several frames: {frames}");
    }

    /// Warming reads items ahead of the writer, each once, and changes no byte.
    #[test]
    fn warming_visits_every_item_ahead_once_and_changes_nothing() {
        let items: Vec<u32> = (0..150_000).collect();
        let body = |warm: Option<WarmItem<u32>>| {
            let body = ListBody::new(
                b"[".to_vec(),
                items.clone(),
                b"]",
                Ctx::new("v", 0),
                |out, _, i| out.extend_from_slice(i.to_string().as_bytes()),
            );
            match warm {
                Some(warm) => body.warming(warm),
                None => body,
            }
        };
        let plain = drain(body(None));
        let warmed = drain(body(Some(|_| {
            WARMED.fetch_add(1, Ordering::Relaxed);
        })));
        assert_eq!(plain, warmed);
        assert!(plain.len() > 2 * CHUNK_BYTES, "streamed in several frames");
        // Every item but the first is warmed before it is written, exactly once.
        assert_eq!(WARMED.load(Ordering::Relaxed), items.len() - 1);
    }
}
