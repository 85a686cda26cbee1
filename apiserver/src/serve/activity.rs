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
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::conn::TIMEOUT_ANSWER_GRACE;
use crate::body::Body;

/// One request's time limit (`--request-timeout` from when hyper handed it over), and when
/// its response, once it has one, is cut.
#[derive(Debug)]
pub(super) struct Deadline {
    at: Instant,
    /// Set when the response exists: the answer's own deadline, or a short grace for the 504
    /// that answers a request which had none in time.
    cut: Mutex<Option<Instant>>,
}

impl Deadline {
    pub(super) fn new(at: Instant) -> Self {
        Deadline {
            at,
            cut: Mutex::new(None),
        }
    }

    /// When the request must have its answer.
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    /// The response exists; it is cut if it is still being written at `cut`. Wakes nobody:
    /// the watchers look at the deadline when their timers fire (see [`Activity`]).
    pub(super) fn arm(&self, cut: Instant) {
        *self.cut.lock() = Some(cut);
    }

    /// When to look at this deadline next, looking at `now`: `None` if its response is past
    /// its cut. An answer is armed by the request's deadline (for a cut at the deadline) or,
    /// when late, after it (for a cut [`TIMEOUT_ANSWER_GRACE`] after it was armed): so the
    /// first look is at the deadline, and one that finds no answer yet looks again a grace
    /// later, which is no later than the cut.
    fn next_look(&self, now: Instant) -> Option<Instant> {
        match *self.cut.lock() {
            Some(cut) if cut <= now => None,
            Some(cut) => Some(cut),
            None if self.at > now => Some(self.at),
            None => Some(now + TIMEOUT_ANSWER_GRACE),
        }
    }

    /// Resolves once the response exists and its cut has come.
    pub(super) async fn cut(&self) {
        let mut next = self.at;
        loop {
            tokio::time::sleep_until(next).await;
            match self.next_look(Instant::now()) {
                Some(at) => next = at,
                None => return,
            }
        }
    }
}

/// Requests in flight on one connection.
///
/// Its watchers ([`idle_for`](Self::idle_for), [`http1_cut`](Self::http1_cut)) look at it
/// when a timer of theirs fires, never because a request came or went: the requests are
/// served inside the connection's own task, and a notification from there would wake that
/// running task once more per request, which Tokio answers by requeueing it and waking an
/// idle worker to steal it (two futex calls and a thread switch per request; ~8 % of the CPU
/// of an HPA-shaped request when requests arrive one at a time, BENCHMARKS.md).
#[derive(Debug)]
pub(super) struct Activity {
    state: Mutex<State>,
    /// Whether the client has sent any bytes after the TLS handshake ([`Activity::heard`]).
    heard: AtomicBool,
    /// Whether HTTP/1.1 request heads are timed here ([`Activity::head_late`]).
    heads: bool,
}

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// Since when no request has been in flight: the connection's start, or the end of the
    /// last request.
    idle_since: Instant,
    /// The HTTP/1.1 request being answered (one at a time on a connection).
    http1: Option<Arc<Deadline>>,
    /// Since when an HTTP/1.1 request head is being read: the connection's start for the
    /// first, then the first bytes that come while no request is in flight.
    head_since: Option<Instant>,
}

impl Activity {
    /// A connection that starts, idle, at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Self::starting(now, false)
    }

    /// An HTTP/1.1 connection that starts at `now`, whose request heads are timed by
    /// [`head_late`](Self::head_late): the first from `now`, each next one from its first
    /// bytes.
    pub(super) fn timing_heads(now: Instant) -> Self {
        Self::starting(now, true)
    }

    fn starting(now: Instant, heads: bool) -> Self {
        Activity {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: now,
                http1: None,
                head_since: heads.then_some(now),
            }),
            heard: AtomicBool::new(false),
            heads,
        }
    }

    /// The client sent bytes over the connection (the h2 preface, a request head, a request
    /// body). With no request in flight, they begin the next HTTP/1.1 head.
    pub(super) fn heard(&self) {
        if !self.heard.load(Ordering::Relaxed) {
            self.heard.store(true, Ordering::Relaxed);
        }
        if self.heads {
            let mut state = self.state.lock();
            if state.in_flight == 0 && state.head_since.is_none() {
                state.head_since = Some(Instant::now());
            }
        }
    }

    /// Resolves at `at` if the client has sent nothing by then; never otherwise. Never for a
    /// connection that times heads: its first head's timer, from the start, bounds its first
    /// bytes too ([`head_late`](Self::head_late)).
    pub(super) async fn silent_at(&self, at: Instant) {
        if self.heads {
            return std::future::pending().await;
        }
        tokio::time::sleep_until(at).await;
        if self.heard.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    }

    /// A request begins; it is in flight until the returned guard is dropped (with the
    /// response body that holds it). An HTTP/1.1 request's deadline is watched by
    /// [`http1_cut`](Self::http1_cut).
    pub(super) fn begin(self: &Arc<Self>, http1: Option<Arc<Deadline>>) -> InFlight {
        let mut state = self.state.lock();
        state.in_flight += 1;
        if http1.is_some() {
            state.http1 = http1;
            state.head_since = None;
        }
        InFlight {
            activity: self.clone(),
        }
    }

    /// Requests in flight now.
    pub(super) fn in_flight(&self) -> usize {
        self.state.lock().in_flight
    }

    /// Resolves once the connection has had no request in flight for `idle`: exactly `idle`
    /// after the last request ended (or after the start). A look that finds a request in
    /// flight looks again `idle` later, which is no later than the end of that request plus
    /// `idle`.
    pub(super) async fn idle_for(&self, idle: Duration) {
        let mut next = self.state.lock().idle_since + idle;
        loop {
            tokio::time::sleep_until(next).await;
            let now = Instant::now();
            let state = self.state.lock();
            if state.in_flight > 0 {
                next = now + idle;
                continue;
            }
            next = state.idle_since + idle;
            if next <= now {
                return;
            }
        }
    }

    /// Resolves once an HTTP/1.1 request head has been read for `timeout` without being
    /// complete, exactly then (k8s.io/apiserver's `ReadHeaderTimeout`). It looks every
    /// `timeout` while none is being read: a head that begins after one look is due no
    /// earlier than the next. Never resolves for a connection that does not time heads.
    ///
    /// Go's server waits `IdleTimeout` for the first bytes of a keep-alive connection's next
    /// request, and only then `ReadHeaderTimeout` for its head; hyper's own header timer
    /// also runs while the connection waits, which would close an idle HTTP/1.1 connection
    /// at 32 s instead of 90 s. Bytes read ahead while a request is in flight (pipelining)
    /// start no timer: such a head is bounded by the idle timeout instead.
    pub(super) async fn head_late(&self, timeout: Duration) {
        if !self.heads {
            return std::future::pending().await;
        }
        let timeout = timeout.max(Duration::from_millis(1));
        loop {
            let now = Instant::now();
            let next = match self.state.lock().head_since {
                Some(since) if since + timeout <= now => return,
                Some(since) => since + timeout,
                None => now + timeout,
            };
            tokio::time::sleep_until(next).await;
        }
    }

    /// Resolves when the HTTP/1.1 response being written passes its cut, exactly then. With
    /// nothing to watch it looks every `every`, which must not exceed the request timeout:
    /// a request that begins after one look has its deadline, and so its cut, no earlier than
    /// the next look. With a request (also one already in flight when this is called), it
    /// looks when [`Deadline`] says.
    pub(super) async fn http1_cut(&self, every: Duration) {
        let every = every.max(Duration::from_millis(1));
        loop {
            let now = Instant::now();
            let current = self.state.lock().http1.clone();
            let next = match current {
                None => now + every,
                Some(deadline) => match deadline.next_look(now) {
                    Some(at) => at,
                    None => return,
                },
            };
            tokio::time::sleep_until(next).await;
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
        let mut state = self.activity.state.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
        }
        // HTTP/1.1 answers one request at a time: the one that ends is the current one.
        state.http1 = None;
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
            // Outside the task's cooperative budget, which the stream's body spends: a due
            // cut must not wait for the body to run out of frames.
            let cut = tokio::task::coop::unconstrained(async {
                match &deadline {
                    Some(deadline) => deadline.cut().await,
                    None => std::future::pending().await,
                }
            });
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

    /// When `watch` of `activity` resolves, from a task of its own.
    fn when<F>(
        activity: &Arc<Activity>,
        watch: impl FnOnce(Arc<Activity>) -> F,
    ) -> tokio::task::JoinHandle<Instant>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let watching = watch(activity.clone());
        tokio::spawn(async move {
            watching.await;
            Instant::now()
        })
    }

    /// When `activity` has been idle for `idle`.
    fn when_idle(activity: &Arc<Activity>, idle: Duration) -> tokio::task::JoinHandle<Instant> {
        when(activity, |a| async move { a.idle_for(idle).await })
    }

    /// When `activity`'s HTTP/1.1 response is cut (looking every minute when there is none).
    fn when_cut(activity: &Arc<Activity>) -> tokio::task::JoinHandle<Instant> {
        when(activity, |a| async move {
            a.http1_cut(Duration::from_secs(60)).await
        })
    }

    /// When `activity`'s HTTP/1.1 head is late at a header timeout of 32 s.
    fn when_head_late(activity: &Arc<Activity>) -> tokio::task::JoinHandle<Instant> {
        when(activity, |a| async move {
            a.head_late(Duration::from_secs(32)).await
        })
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_request_that_ended() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let started = Instant::now();
        let request = activity.begin(None);
        let idle = when_idle(&activity, Duration::from_secs(90));
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert!(!idle.is_finished(), "idle while a request is in flight");
        drop(request);
        let idle_at = idle.await.unwrap();
        assert_eq!(idle_at - started, Duration::from_secs(390));
        assert_eq!(activity.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_comes_and_goes_restarts_the_idle_period() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let started = Instant::now();
        let idle = when_idle(&activity, Duration::from_secs(90));
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(activity.begin(None));
        assert_eq!(idle.await.unwrap() - started, Duration::from_secs(150));
    }

    #[tokio::test(start_paused = true)]
    async fn heads_are_timed_from_the_start_then_from_the_first_bytes_after_a_request() {
        let activity = Arc::new(Activity::timing_heads(Instant::now()));
        let started = Instant::now();
        // The first head is due 32 s after the start, bytes or not.
        let late = when_head_late(&activity);
        tokio::time::sleep(Duration::from_secs(10)).await;
        activity.heard();
        assert_eq!(late.await.unwrap() - started, Duration::from_secs(32));

        // A head that completes stops the timer; bytes read while the request is in flight
        // (its body) start none; the connection then waits for its next request untimed.
        let activity = Arc::new(Activity::timing_heads(Instant::now()));
        let late = when_head_late(&activity);
        let request = activity.begin(Some(Arc::new(Deadline::new(
            Instant::now() + Duration::from_secs(60),
        ))));
        activity.heard();
        tokio::time::sleep(Duration::from_secs(40)).await;
        drop(request);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(
            !late.is_finished(),
            "an idle keep-alive connection is not late"
        );
        // The next head's first bytes start its 32 s.
        let first_bytes = Instant::now();
        activity.heard();
        tokio::time::sleep(Duration::from_secs(5)).await;
        activity.heard();
        assert_eq!(late.await.unwrap() - first_bytes, Duration::from_secs(32));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_does_not_time_heads_is_never_late() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let late = when_head_late(&activity);
        activity.heard();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!late.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn an_http1_response_is_cut_at_its_deadline_and_not_after_it_ended() {
        let activity = Arc::new(Activity::new(Instant::now()));
        let started = Instant::now();
        let deadline = Arc::new(Deadline::new(started + Duration::from_secs(60)));
        let request = activity.begin(Some(deadline.clone()));
        let cut = when_cut(&activity);
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
        let cut = when_cut(&activity);
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(request);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!cut.is_finished());
        cut.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_cut_watcher_started_mid_request_still_cuts_at_the_deadline() {
        // The connection's loop makes its watchers anew when it starts closing, which can be
        // in the middle of a request: the cut still comes at that request's deadline, not a
        // look interval after the watcher started.
        let activity = Arc::new(Activity::new(Instant::now()));
        let started = Instant::now();
        let deadline = Arc::new(Deadline::new(started + Duration::from_secs(60)));
        let _request = activity.begin(Some(deadline.clone()));
        deadline.arm(deadline.at());
        tokio::time::sleep(Duration::from_secs(50)).await;
        let cut_at = when_cut(&activity);
        assert_eq!(cut_at.await.unwrap() - started, Duration::from_secs(60));
    }

    /// Counts wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn serving_a_request_wakes_neither_watcher() {
        // The watchers run in the connection's own task; a wake-up from a request's begin,
        // answer or end would make that task run again for nothing (and Tokio wake a second
        // worker to steal it), once per request.
        let activity = Arc::new(Activity::new(Instant::now()));
        let wakes = Arc::new(Wakes::default());
        let waker = futures::task::waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut idle = std::pin::pin!(activity.idle_for(Duration::from_secs(90)));
        let mut cut = std::pin::pin!(activity.http1_cut(Duration::from_secs(60)));
        assert!(idle.as_mut().poll(&mut cx).is_pending());
        assert!(cut.as_mut().poll(&mut cx).is_pending());
        for _ in 0..3 {
            let deadline = Arc::new(Deadline::new(Instant::now() + Duration::from_secs(60)));
            let request = activity.begin(Some(deadline.clone()));
            deadline.arm(deadline.at());
            drop(request);
        }
        assert_eq!(wakes.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Each still fires when its time comes.
        let started = Instant::now();
        let idle_at = async {
            idle.await;
            Instant::now()
        };
        assert_eq!(idle_at.await - started, Duration::from_secs(90));
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

    #[tokio::test(start_paused = true)]
    async fn a_due_cut_ends_a_stream_that_spends_its_whole_budget() {
        // The task polls the cut after the stream in a random share of its polls, when the
        // stream has left no budget: the cut must fire anyway, on the first poll after its
        // timer (the one before may still see it unfired), not whenever it happens to be
        // polled first. Trials, because the order is random.
        use hyper::rt::Executor as _;
        let streams = Streams::new(CancellationToken::new());
        for trial in 0..32 {
            let due = Instant::now() + Duration::from_secs(60);
            let deadline = Arc::new(Deadline::new(due));
            deadline.arm(due);
            streams.hand_off(deadline);
            let (busy, running, polls) = super::super::testing::Busy::new(due);
            streams.execute(async move {
                let _ = busy.await;
            });
            // The cut is waiting on its timer when its time comes.
            running.await.unwrap();
            tokio::time::advance(Duration::from_secs(60)).await;
            let polls = polls.await.unwrap();
            assert!(
                polls <= 2,
                "trial {trial}: cut after {polls} polls past its time"
            );
        }
    }
}
