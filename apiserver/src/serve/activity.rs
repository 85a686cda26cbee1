//! What one connection is doing, for the bounds that need to know: its requests in flight
//! (each from the moment hyper hands it over until its response body is finished or dropped),
//! so a connection with none is closed after the idle timeout; and each request's
//! [`Deadline`], past which its response is cut: the HTTP/1.1 connection is closed, or the
//! h2 stream is reset (its task, spawned by [`Streams`], is dropped), as k8s.io/apiserver's
//! timeout filter aborts a handler that has already begun writing.
//!
//! Cutting has to come from outside the response body: hyper stops polling a body while the
//! socket (HTTP/1.1) or the stream's flow-control window (h2) is full, which is exactly when
//! a slow reader holds a response, and its load-shedding seat, open.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::body::Body;

/// One request's time limit (`--request-timeout` from when hyper handed it over), and when
/// its response, once it has one, is cut.
#[derive(Debug)]
pub(super) struct Deadline {
    at: Instant,
    /// Set when the response exists: the answer's own deadline, or a short grace for the 504
    /// that answers a request which had none in time.
    cut: Mutex<Option<Instant>>,
    armed: Notify,
}

impl Deadline {
    pub(super) fn new(at: Instant) -> Self {
        Deadline {
            at,
            cut: Mutex::new(None),
            armed: Notify::new(),
        }
    }

    /// When the request must have its answer.
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    /// The response exists; it is cut if it is still being written at `cut`.
    pub(super) fn arm(&self, cut: Instant) {
        *self.cut.lock() = Some(cut);
        self.armed.notify_one();
    }

    /// Resolves once the response exists and its cut has come.
    pub(super) async fn cut(&self) {
        loop {
            let armed = *self.cut.lock();
            match armed {
                Some(cut) => return tokio::time::sleep_until(cut).await,
                // `notify_one` keeps a permit when nobody waits yet: no arming is missed.
                None => self.armed.notified().await,
            }
        }
    }
}

/// Requests in flight on one connection.
#[derive(Debug, Default)]
pub(super) struct Activity {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    /// Bumped when a request begins, so an idle period that saw one is not taken as idle.
    begun: u64,
    /// The HTTP/1.1 request being answered (one at a time on a connection).
    http1: Option<Arc<Deadline>>,
}

impl Activity {
    /// A request begins; it is in flight until the returned guard is dropped (with the
    /// response body that holds it). An HTTP/1.1 request's deadline is watched by
    /// [`http1_cut`](Self::http1_cut).
    pub(super) fn begin(self: &Arc<Self>, http1: Option<Arc<Deadline>>) -> InFlight {
        {
            let mut state = self.state.lock();
            state.in_flight += 1;
            state.begun += 1;
            if http1.is_some() {
                state.http1 = http1;
            }
        }
        self.changed.notify_waiters();
        InFlight {
            activity: self.clone(),
        }
    }

    /// Requests in flight now.
    pub(super) fn in_flight(&self) -> usize {
        self.state.lock().in_flight
    }

    /// Resolves once the connection has had no request in flight for `idle`.
    pub(super) async fn idle_for(&self, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (in_flight, begun) = {
                let state = self.state.lock();
                (state.in_flight, state.begun)
            };
            if in_flight > 0 {
                changed.await;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(idle) => {
                    let state = self.state.lock();
                    if state.in_flight == 0 && state.begun == begun {
                        return;
                    }
                }
                () = changed => {}
            }
        }
    }

    /// Resolves when the HTTP/1.1 response being written passes its cut.
    pub(super) async fn http1_cut(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let current = self.state.lock().http1.clone();
            match current {
                Some(deadline) => tokio::select! {
                    () = deadline.cut() => return,
                    () = changed => {}
                },
                None => changed.await,
            }
        }
    }
}

/// A request in flight; dropping it (with its response body) ends it.
#[derive(Debug)]
pub(super) struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        {
            let mut state = self.activity.state.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
            // HTTP/1.1 answers one request at a time: the one that ends is the current one.
            state.http1 = None;
        }
        self.activity.changed.notify_waiters();
    }
}

/// A response body that keeps its request in flight until it is finished or dropped.
pub(super) struct Timed {
    inner: Body,
    _in_flight: InFlight,
}

impl Timed {
    pub(super) fn new(inner: Body, in_flight: InFlight) -> Self {
        Timed {
            inner,
            _in_flight: in_flight,
        }
    }
}

impl HttpBody for Timed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The executor hyper spawns each h2 stream's task with (the request's handling, then the
/// writing of its response). Each task runs until its response is written, its [`Deadline`]
/// cuts it, or its connection ends (`closed`), whichever comes first; dropping the task makes
/// h2 reset the stream (`RST_STREAM`) and releases whatever the response held (a
/// load-shedding seat).
///
/// hyper calls the service for a stream and then, at once and on the same task, spawns that
/// stream's future: the service leaves the request's deadline in `handoff` for the spawn to
/// take.
#[derive(Clone, Debug)]
pub(super) struct Streams {
    handoff: Arc<Mutex<Option<Arc<Deadline>>>>,
    closed: CancellationToken,
}

impl Streams {
    /// Stream tasks of a connection that ends when `closed` is cancelled.
    pub(super) fn new(closed: CancellationToken) -> Self {
        Streams {
            handoff: Arc::default(),
            closed,
        }
    }

    /// The deadline of the stream hyper spawns next.
    pub(super) fn hand_off(&self, deadline: Arc<Deadline>) {
        *self.handoff.lock() = Some(deadline);
    }
}

impl<F> hyper::rt::Executor<F> for Streams
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        let deadline = self.handoff.lock().take();
        let closed = self.closed.clone();
        tokio::spawn(async move {
            let cut = async {
                match &deadline {
                    Some(deadline) => deadline.cut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stream => {}
                () = cut => tracing::debug!("h2 response past the request timeout; resetting its stream"),
                () = closed.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_request_that_ended() {
        let activity = Arc::new(Activity::default());
        let started = Instant::now();
        let request = activity.begin(None);
        let idle = {
            let activity = activity.clone();
            tokio::spawn(async move {
                activity.idle_for(Duration::from_secs(90)).await;
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!idle.is_finished(), "idle while a request is in flight");
        drop(request);
        let idle_at = idle.await.unwrap();
        assert_eq!(idle_at - started, Duration::from_secs(390));
        assert_eq!(activity.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_comes_and_goes_restarts_the_idle_period() {
        let activity = Arc::new(Activity::default());
        let started = Instant::now();
        let idle = {
            let activity = activity.clone();
            tokio::spawn(async move {
                activity.idle_for(Duration::from_secs(90)).await;
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(activity.begin(None));
        assert_eq!(idle.await.unwrap() - started, Duration::from_secs(150));
    }

    #[tokio::test(start_paused = true)]
    async fn an_http1_response_is_cut_at_its_deadline_and_not_after_it_ended() {
        let activity = Arc::new(Activity::default());
        let started = Instant::now();
        let deadline = Arc::new(Deadline::new(started + Duration::from_secs(60)));
        let request = activity.begin(Some(deadline.clone()));
        let cut = {
            let activity = activity.clone();
            tokio::spawn(async move {
                activity.http1_cut().await;
                Instant::now()
            })
        };
        // Not before the response exists.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(!cut.is_finished());
        deadline.arm(started + Duration::from_secs(180));
        assert_eq!(cut.await.unwrap() - started, Duration::from_secs(180));
        drop(request);

        // A response that ends before its cut is never cut.
        let deadline = Arc::new(Deadline::new(Instant::now() + Duration::from_secs(60)));
        let request = activity.begin(Some(deadline.clone()));
        deadline.arm(deadline.at());
        let cut = {
            let activity = activity.clone();
            tokio::spawn(async move { activity.http1_cut().await })
        };
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(request);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!cut.is_finished());
        cut.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_task_ends_at_its_cut_or_with_its_connection() {
        use hyper::rt::Executor as _;
        let closed = CancellationToken::new();
        let streams = Streams::new(closed.clone());
        let started = Instant::now();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<Instant>();
        struct OnDrop(Option<tokio::sync::oneshot::Sender<Instant>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                let _ = self.0.take().unwrap().send(Instant::now());
            }
        }
        let deadline = Arc::new(Deadline::new(started + Duration::from_secs(60)));
        streams.hand_off(deadline.clone());
        let guard = OnDrop(Some(ended_tx));
        streams.execute(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        deadline.arm(deadline.at());
        assert_eq!(ended_rx.await.unwrap() - started, Duration::from_secs(60));

        // No deadline handed off: the task lives until its connection ends.
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<Instant>();
        let guard = OnDrop(Some(ended_tx));
        streams.execute(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        closed.cancel();
        assert_eq!(ended_rx.await.unwrap() - started, Duration::from_secs(3660));
    }
}
