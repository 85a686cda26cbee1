//! One class's seats and its fair queue: a hand-written semaphore whose waiters sit in one
//! bounded FIFO per flow (user), served round-robin across flows, with a bounded wait.
//!
//! What APF does with shuffle-sharded queues and virtual finish times
//! (`apiserver: pkg/util/flowcontrol/fairqueuing/queueset`), reduced to what a server with
//! two classes and a handful of clients needs: every flow with waiters gets the next free seat
//! in turn, so one user flooding cluster-wide lists cannot starve another user's requests.
//! Memory is bounded by the per-flow length and a class-wide total; when the total is reached,
//! the newest waiter of the longest flow is pushed out (a 429) in favour of a shorter flow.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::metrics::ClassMetrics;

/// How a class queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Seats: requests executing at once; 0 means unlimited.
    pub seats: usize,
    /// Waiters one flow may have; 0 means no queueing (a full class rejects at once).
    pub per_flow: usize,
    /// Waiters of all flows together.
    pub total: usize,
    /// How long a waiter waits for a seat.
    pub wait: Duration,
}

/// Why a request was not admitted: APF's reject reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rejection {
    /// No seat and no queueing configured (`concurrency-limit`).
    ConcurrencyLimit,
    /// The flow's queue (or the class's) is full, or the waiter was pushed out (`queue-full`).
    QueueFull,
    /// No seat within the wait limit (`time-out`).
    TimeOut,
}

impl Rejection {
    /// The `reason` label value, as APF's.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::QueueFull => "queue-full",
            Rejection::TimeOut => "time-out",
        }
    }
}

/// What a waiter is told.
#[derive(Debug)]
enum Dispatch {
    /// A seat is now yours.
    Seat,
    /// Pushed out by a shorter flow.
    Evicted,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    tx: oneshot::Sender<Dispatch>,
}

#[derive(Debug, Default)]
struct State {
    executing: usize,
    queued: usize,
    next_id: u64,
    /// Flows with waiters (never empty ones).
    flows: HashMap<Arc<str>, VecDeque<Waiter>>,
    /// The flows of `flows`, each once, in service order.
    turn: VecDeque<Arc<str>>,
}

/// One class's seats and queues.
#[derive(Debug)]
pub struct Level {
    limits: Limits,
    state: Mutex<State>,
    metrics: ClassMetrics,
}

/// A held seat; dropping it frees the seat for the next waiter.
#[derive(Debug)]
pub struct Seat {
    level: Arc<Level>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.level.release();
    }
}

impl Level {
    /// A class with these limits, reporting to `metrics`.
    pub fn new(limits: Limits, metrics: ClassMetrics) -> Arc<Self> {
        metrics.limit(limits.seats);
        Arc::new(Level {
            limits,
            state: Mutex::new(State::default()),
            metrics,
        })
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Requests executing now.
    pub fn executing(&self) -> usize {
        self.state.lock().executing
    }

    /// Requests waiting now.
    pub fn queued(&self) -> usize {
        self.state.lock().queued
    }

    /// Takes a seat for `flow`, waiting in the flow's queue for at most the wait limit.
    pub async fn acquire(self: &Arc<Self>, flow: &str) -> Result<Seat, Rejection> {
        let (id, key, rx) = {
            let mut s = self.state.lock();
            if self.limits.seats == 0 || (s.executing < self.limits.seats && s.queued == 0) {
                s.executing += 1;
                self.metrics.executing(s.executing);
                return Ok(Seat {
                    level: Arc::clone(self),
                });
            }
            if self.limits.per_flow == 0 || self.limits.wait.is_zero() {
                return Err(Rejection::ConcurrencyLimit);
            }
            let key: Arc<str> = Arc::from(flow);
            let mine = s.flows.get(&key).map_or(0, VecDeque::len);
            if mine >= self.limits.per_flow {
                return Err(Rejection::QueueFull);
            }
            if s.queued >= self.limits.total && !push_out_longest(&mut s, mine) {
                return Err(Rejection::QueueFull);
            }
            let (tx, rx) = oneshot::channel();
            let id = s.next_id;
            s.next_id += 1;
            if !s.flows.contains_key(&key) {
                s.turn.push_back(Arc::clone(&key));
            }
            s.flows
                .entry(Arc::clone(&key))
                .or_default()
                .push_back(Waiter { id, tx });
            s.queued += 1;
            self.metrics.queued(s.queued);
            (id, key, rx)
        };
        let mut waiting = Waiting {
            level: self,
            key,
            id,
            rx,
            settled: false,
        };
        match tokio::time::timeout(self.limits.wait, &mut waiting.rx).await {
            Ok(Ok(Dispatch::Seat)) => {
                waiting.settled = true;
                Ok(Seat {
                    level: Arc::clone(self),
                })
            }
            Ok(Ok(Dispatch::Evicted)) => {
                waiting.settled = true;
                Err(Rejection::QueueFull)
            }
            // The sender is never dropped unsent while the waiter is queued; treat it as full.
            Ok(Err(_)) => {
                waiting.settled = true;
                Err(Rejection::QueueFull)
            }
            Err(_elapsed) => waiting.give_up(),
        }
    }

    /// Frees a seat: hands it to the next waiter in turn, or returns it to the pool.
    fn release(&self) {
        let mut s = self.state.lock();
        while let Some(waiter) = pop_next(&mut s) {
            s.queued -= 1;
            if waiter.tx.send(Dispatch::Seat).is_ok() {
                self.metrics.queued(s.queued);
                return;
            }
        }
        self.metrics.queued(s.queued);
        s.executing = s.executing.saturating_sub(1);
        self.metrics.executing(s.executing);
    }
}

/// Takes the next waiter, round-robin over flows.
fn pop_next(s: &mut State) -> Option<Waiter> {
    let key = s.turn.pop_front()?;
    let queue = s.flows.get_mut(&key)?;
    let waiter = queue.pop_front();
    if queue.is_empty() {
        s.flows.remove(&key);
    } else {
        s.turn.push_back(key);
    }
    waiter
}

/// Makes room for a flow that has `mine` waiters by rejecting the newest waiter of the
/// longest flow, when that flow would still be longer than `mine + 1`. False when no flow is.
fn push_out_longest(s: &mut State, mine: usize) -> bool {
    let Some(longest) = s
        .flows
        .iter()
        .max_by_key(|(_, q)| q.len())
        .filter(|(_, q)| q.len() > mine + 1)
        .map(|(k, _)| Arc::clone(k))
    else {
        return false;
    };
    let Some(queue) = s.flows.get_mut(&longest) else {
        return false;
    };
    if let Some(victim) = queue.pop_back() {
        // The victim may already be gone (its request dropped); room is made either way.
        let _ = victim.tx.send(Dispatch::Evicted);
        s.queued -= 1;
    }
    true
}

/// A queued waiter; if its request is dropped while waiting, its place (or the seat it was
/// just handed) is given back.
struct Waiting<'a> {
    level: &'a Arc<Level>,
    key: Arc<str>,
    id: u64,
    rx: oneshot::Receiver<Dispatch>,
    settled: bool,
}

impl Waiting<'_> {
    /// The wait limit passed: leave the queue, unless a seat (or a push-out) arrived in the
    /// meantime.
    fn give_up(&mut self) -> Result<Seat, Rejection> {
        self.settled = true;
        match self.leave() {
            None => Err(Rejection::TimeOut),
            Some(Dispatch::Seat) => Ok(Seat {
                level: Arc::clone(self.level),
            }),
            Some(Dispatch::Evicted) => Err(Rejection::QueueFull),
        }
    }

    /// Removes this waiter from its flow; `None` if it was still queued, else what it was sent.
    fn leave(&mut self) -> Option<Dispatch> {
        let level = self.level;
        let mut s = level.state.lock();
        if let Some(queue) = s.flows.get_mut(&self.key)
            && let Some(at) = queue.iter().position(|w| w.id == self.id)
        {
            queue.remove(at);
            if queue.is_empty() {
                s.flows.remove(&self.key);
                s.turn.retain(|k| *k != self.key);
            }
            s.queued -= 1;
            level.metrics.queued(s.queued);
            return None;
        }
        // Sent under the lock we hold, so it is there to read.
        self.rx.try_recv().ok()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.settled && matches!(self.leave(), Some(Dispatch::Seat)) {
            self.level.release();
        }
    }
}
