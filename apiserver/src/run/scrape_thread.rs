//! The thread that scrapes: one current-thread Tokio runtime, below serving's priority, that
//! handles the kubelets' answers in rounds instead of waking for each.
//!
//! At 5,000 nodes and 15 s a steady scrape starts every 3 ms, and the kubelets' answers come
//! back one by one over the next milliseconds. A thread that parks as soon as it has nothing
//! to run is woken for every answer: a context switch in and out (~7 % of a scrape's CPU in
//! `epoll_wait` alone), and the scrape's code and data evicted by whatever ran in between.
//! This thread is woken at most once a [`ROUND`]: after a wake-up it runs what is ready and,
//! before it parks, sleeps out the rest of the round, so that the answers that arrived
//! meanwhile are all handled by the next wake-up, together. The first answer after an idle
//! spell is handled at once; the others wait at most a round, which a kubelet request (its
//! timeout, its histogram, a 15 s resolution) does not notice. The first round of scrapes
//! at start is not kept in rounds (the caller says when to begin): there each node's
//! handshake and requests follow one another, 64 nodes at a time, and rounds would stretch
//! the time to the first data by a few per cent. One thread with no work to
//! hand to another also has no wake-ups to send between workers (a multi-threaded runtime's
//! futex and eventfd per scrape).
//!
//! Measured side by side at 5,000 nodes (BENCHMARKS.md, "Kubelet answers handled in rounds"):
//! 0.72x the CPU a scrape of two multi-threaded workers woken per answer (one thread alone
//! 0.93x, the rounds the rest).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// How long the scrape thread gathers answers before it handles them: the most an answer
/// waits after it arrives.
pub const ROUND: Duration = Duration::from_millis(10);

/// The running scrape thread; stopped (its runtime's tasks dropped) by [`ScrapeThread::stop`]
/// or on drop.
#[derive(Debug)]
pub struct ScrapeThread {
    handle: Handle,
    wake_ups: Arc<WakeUps>,
    stop: Option<oneshot::Sender<Duration>>,
    thread: Option<JoinHandle<()>>,
}

impl ScrapeThread {
    /// Starts the thread, named `scrape`, with `on_start` run on it first (the priority);
    /// answers are handled in rounds while `rounds` says so, each as it comes otherwise.
    pub fn start(
        round: Duration,
        on_start: impl FnOnce() + Send + 'static,
        rounds: impl Fn() -> bool + Send + Sync + 'static,
    ) -> io::Result<Self> {
        let wake_ups = Arc::new(WakeUps::new(round, Box::new(rounds)));
        let runtime = {
            let (park, unpark) = (wake_ups.clone(), wake_ups.clone());
            Builder::new_current_thread()
                .enable_all()
                .on_thread_park(move || park.before_park())
                .on_thread_unpark(move || unpark.woke())
                .build()?
        };
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<Duration>();
        let thread = std::thread::Builder::new()
            .name("scrape".to_owned())
            .spawn(move || {
                on_start();
                // Runs the spawned tasks until told to stop (or the sender is dropped).
                let grace = runtime.block_on(stopped).unwrap_or(Duration::from_secs(1));
                runtime.shutdown_timeout(grace);
            })?;
        Ok(ScrapeThread {
            handle,
            wake_ups,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where to spawn the scrape loop.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// How many times the thread has woken to run its tasks.
    pub fn wake_ups(&self) -> u64 {
        self.wake_ups.count.load(Ordering::Relaxed)
    }

    /// Drops every task left (idle kubelet connections), waiting at most `grace` for them,
    /// and joins the thread.
    pub fn stop(mut self, grace: Duration) {
        self.stop_with(grace);
    }

    fn stop_with(&mut self, grace: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(grace);
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the scrape thread panicked");
        }
    }
}

impl std::fmt::Debug for WakeUps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeUps")
            .field("round", &self.round)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl Drop for ScrapeThread {
    fn drop(&mut self) {
        self.stop_with(Duration::from_secs(1));
    }
}

/// When the thread last woke, and how often it has: the runtime's park hooks.
struct WakeUps {
    round: Duration,
    /// Whether to keep rounds now.
    rounds: Box<dyn Fn() -> bool + Send + Sync>,
    base: Instant,
    /// Nanoseconds from `base` to the last wake-up; `u64::MAX` before the first.
    last_ns: AtomicU64,
    count: AtomicU64,
}

impl WakeUps {
    // The thread's own wall time, which a test's paused Tokio clock must not stop: the
    // sleep is the thread's.
    #[allow(clippy::disallowed_methods)]
    fn new(round: Duration, rounds: Box<dyn Fn() -> bool + Send + Sync>) -> Self {
        WakeUps {
            round,
            rounds,
            base: Instant::now(),
            last_ns: AtomicU64::new(u64::MAX),
            count: AtomicU64::new(0),
        }
    }

    fn woke(&self) {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.last_ns.store(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Sleeps out the round that the last wake-up began; the runtime then parks, and returns
    /// at once if anything arrived meanwhile.
    fn before_park(&self) {
        if !(self.rounds)() {
            return;
        }
        if let Some(rest) = self.rest(self.base.elapsed()) {
            std::thread::sleep(rest);
        }
    }

    /// What is left of the current round at `now` (from `base`), if anything.
    fn rest(&self, now: Duration) -> Option<Duration> {
        let last = self.last_ns.load(Ordering::Relaxed);
        if last == u64::MAX {
            return None;
        }
        let due = Duration::from_nanos(last).checked_add(self.round)?;
        due.checked_sub(now).filter(|rest| !rest.is_zero())
    }
}

#[cfg(test)]
mod tests;
