// The scrape thread's rounds are in the thread's wall time, as its hooks measure them.
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::AtomicBool;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;

/// `n` tasks on `thread`, each waiting for one byte on its own socket (a kubelet's answer):
/// the other ends, and where each task reports its index and when it read its byte.
fn waiting(
    thread: &ScrapeThread,
    n: usize,
) -> (
    Vec<std::os::unix::net::UnixStream>,
    std::sync::mpsc::Receiver<(usize, Instant)>,
) {
    let (handled, handled_rx) = std::sync::mpsc::channel();
    let _guard = thread.handle().enter();
    let kubelets = (0..n)
        .map(|i| {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
            ours.set_nonblocking(true).expect("non-blocking");
            let mut ours = UnixStream::from_std(ours).expect("registered");
            let handled = handled.clone();
            thread.handle().spawn(async move {
                let mut byte = [0u8; 1];
                ours.read_exact(&mut byte).await.expect("an answer");
                let _ = handled.send((i, Instant::now()));
            });
            theirs
        })
        .collect();
    (kubelets, handled_rx)
}

#[test]
fn a_round_begins_at_a_wake_up() {
    let w = WakeUps::new(Duration::from_millis(10), Box::new(|| true));
    assert_eq!(
        w.rest(Duration::from_secs(5)),
        None,
        "before the first wake-up"
    );
    w.woke();
    let woke = Duration::from_nanos(w.last_ns.load(Ordering::Relaxed));
    assert_eq!(w.rest(woke), Some(Duration::from_millis(10)));
    assert_eq!(
        w.rest(woke + Duration::from_millis(4)),
        Some(Duration::from_millis(6))
    );
    assert_eq!(w.rest(woke + Duration::from_millis(10)), None);
    assert_eq!(w.rest(woke + Duration::from_secs(60)), None);
    assert_eq!(w.count.load(Ordering::Relaxed), 1);
}

/// Answers that arrive while the thread is handling another wait for the round's end, and are
/// then handled on one wake-up; the one that woke it was handled at once.
#[test]
fn answers_that_arrive_within_a_round_are_handled_together_at_its_end() {
    let round = Duration::from_millis(300);
    let thread = ScrapeThread::start(round, || {}, || true).expect("the scrape thread");
    let pairs: Vec<(
        std::os::unix::net::UnixStream,
        std::os::unix::net::UnixStream,
    )> = (0..3)
        .map(|_| std::os::unix::net::UnixStream::pair().expect("a socket pair"))
        .collect();
    let (handled, handled_rx) = std::sync::mpsc::channel::<(usize, Instant)>();
    let mut kubelets = Vec::new();
    for (i, (ours, theirs)) in pairs.into_iter().enumerate() {
        ours.set_nonblocking(true).expect("non-blocking");
        let handled = handled.clone();
        let _guard = thread.handle().enter();
        let mut ours = UnixStream::from_std(ours).expect("registered");
        thread.handle().spawn(async move {
            let mut byte = [0u8; 1];
            ours.read_exact(&mut byte).await.expect("an answer");
            let _ = handled.send((i, Instant::now()));
        });
        kubelets.push(theirs);
    }
    let answer = |i: usize| {
        use std::io::Write;
        (&kubelets[i]).write_all(b"x").expect("answered");
    };

    answer(0);
    let (first, at_first) = handled_rx.recv().expect("the first answer handled");
    assert_eq!(first, 0);
    let wake_ups = thread.wake_ups();
    answer(1);
    answer(2);
    let later: Vec<(usize, Instant)> = (0..2)
        .map(|_| handled_rx.recv().expect("a later answer handled"))
        .collect();
    for (i, at) in &later {
        let waited = at.duration_since(at_first);
        assert!(
            waited >= round / 2,
            "answer {i} was handled {waited:?} after the first, inside its round"
        );
    }
    assert!(
        thread.wake_ups() - wake_ups <= 2,
        "the answers of one round took {} wake-ups",
        thread.wake_ups() - wake_ups
    );
    thread.stop(Duration::from_secs(1));
}

/// Until the caller says so (the first round of scrapes done), each answer is handled as it
/// comes; from then on, in rounds.
#[test]
fn rounds_begin_when_the_caller_says() {
    let round = Duration::from_secs(1);
    let steady = Arc::new(AtomicBool::new(false));
    let thread = {
        let steady = steady.clone();
        ScrapeThread::start(round, || {}, move || steady.load(Ordering::SeqCst))
            .expect("the scrape thread")
    };
    let (kubelets, handled_rx) = waiting(&thread, 4);
    let answer = |i: usize| {
        use std::io::Write;
        (&kubelets[i]).write_all(b"x").expect("answered");
        handled_rx.recv().expect("the answer handled").1
    };

    let first = answer(0);
    let second = answer(1);
    assert!(
        second.duration_since(first) < round / 2,
        "before the rounds began, an answer waited {:?}",
        second.duration_since(first)
    );
    steady.store(true, Ordering::SeqCst);
    let third = answer(2);
    let fourth = answer(3);
    assert!(
        fourth.duration_since(third) >= round / 2,
        "in rounds, an answer was handled {:?} after the one before",
        fourth.duration_since(third)
    );
    thread.stop(Duration::from_secs(1));
}

#[test]
fn timers_fire_and_tasks_spawned_from_elsewhere_run() {
    let thread = ScrapeThread::start(ROUND, || {}, || true).expect("the scrape thread");
    let on_start = Arc::new(AtomicBool::new(false));
    let thread_b = {
        let on_start = on_start.clone();
        ScrapeThread::start(
            ROUND,
            move || on_start.store(true, Ordering::SeqCst),
            || true,
        )
        .expect("a second scrape thread")
    };
    let (done, done_rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    thread.handle().spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = done.send(std::thread::current().name().map(str::to_owned));
    });
    let name = done_rx.recv().expect("the timer fired");
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(name.as_deref(), Some("scrape"));
    thread.stop(Duration::from_secs(1));
    drop(thread_b);
    assert!(
        on_start.load(Ordering::SeqCst),
        "on_start ran on the thread"
    );
}

/// Stopping drops what is left, a kubelet connection waiting for an answer that never comes
/// among it, and returns.
#[test]
fn stopping_drops_the_tasks_left_and_joins_the_thread() {
    struct Closed(Arc<AtomicBool>);
    impl Drop for Closed {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let thread = ScrapeThread::start(ROUND, || {}, || true).expect("the scrape thread");
    let closed = Arc::new(AtomicBool::new(false));
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
    ours.set_nonblocking(true).expect("non-blocking");
    let (running, running_rx) = std::sync::mpsc::channel();
    {
        let closed = Closed(closed.clone());
        let _guard = thread.handle().enter();
        let mut ours = UnixStream::from_std(ours).expect("registered");
        thread.handle().spawn(async move {
            let _closed = closed;
            let _ = running.send(());
            let mut rest = Vec::new();
            let _ = ours.read_to_end(&mut rest).await;
            let _ = ours.shutdown().await;
        });
    }
    running_rx.recv().expect("the task ran");
    thread.stop(Duration::from_millis(200));
    assert!(
        closed.load(Ordering::SeqCst),
        "the waiting task was dropped"
    );
    drop(theirs);
}
