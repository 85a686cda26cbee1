//! What the serving tests share.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::time::Instant;

/// A connection's or an h2 stream's future that spends the task's whole cooperative budget on
/// every poll, as one writing a list does while the socket keeps taking its frames. It says
/// when it is first polled, counts its polls once the clock has reached `due`, and reports
/// that count when it is dropped (with its task, or when cut).
pub(super) struct Busy {
    due: Instant,
    polls_when_due: usize,
    started: Option<oneshot::Sender<()>>,
    report: Option<oneshot::Sender<usize>>,
}

impl Busy {
    /// A future busy until dropped; with the receivers of its first poll and of its count.
    pub(super) fn new(due: Instant) -> (Busy, oneshot::Receiver<()>, oneshot::Receiver<usize>) {
        let (started, running) = oneshot::channel();
        let (report, polls) = oneshot::channel();
        let busy = Busy {
            due,
            polls_when_due: 0,
            started: Some(started),
            report: Some(report),
        };
        (busy, running, polls)
    }
}

impl Future for Busy {
    type Output = Result<(), Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(started) = self.started.take() {
            let _ = started.send(());
        }
        if Instant::now() >= self.due {
            self.polls_when_due += 1;
        }
        // Out of budget, Tokio polls the task again behind the others.
        while let Poll::Ready(unit) = tokio::task::coop::poll_proceed(cx) {
            unit.made_progress();
        }
        Poll::Pending
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(report) = self.report.take() {
            let _ = report.send(self.polls_when_due);
        }
    }
}
