//! The engine: the one task that owns the Strata child and the one queue.
//!
//! Everything that can change which model is loaded or who is served next
//! goes through here as a [`Command`], processed in order by a single task
//! (`state::Engine`): tickets and their ends from every proxy, operator
//! `on`/`off`, cache scores, the maintenance tick, shutdown. Who goes next
//! is decided by [`scheduler::decide`], a pure function of the engine's
//! state and `now`; the task applies its plan. Loads and stops run as child
//! tasks of the engine that report back with [`Command::OpFinished`]; while
//! one runs, no other load, switch or idle unload can start. That is the
//! "engine lock": it is held for the whole load, yet `status` and ticket
//! bookkeeping keep answering because the engine loop itself never blocks
//! on the backend.

mod backend_ops;
mod backend_slot;
mod drain;
mod leases;
mod ledger;
mod operator;
mod queue;
mod report;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use strata_protocol::config::Config;
use strata_protocol::wire::{
    ArrivalInfo, CacheScores, LookupFailure, ServiceTier, SupervisorMessage, TicketId,
    TicketRequest,
};
use tokio::sync::{mpsc, oneshot};

pub use ledger::OpenTicket;
pub use strata_protocol::api::InFlightRequest;

/// The scheduling decision lives in its own crate, shared with the
/// simulator; inside the engine it is `scheduler`.
use strata_scheduler as scheduler;
pub use strata_scheduler::ConnId;

/// Identifies one control-socket `on`/`off` operation, so a late cancel
/// from a disconnected client cannot hit a newer operation.
pub type ControlOpId = u64;

/// What the engine sends back to a control client during `on`/`off`: the
/// control socket's own event type. Exactly one `Done` per operation, last,
/// also for a cancelled operation (whose client is gone): it tells the
/// control layer the operation slot is free again.
pub use strata_protocol::control::ControlEvent;
/// The status document (`status`, and the fields of every `done`).
pub use strata_protocol::control::Status;

/// Messages the engine task processes, in order.
#[derive(Debug)]
pub enum Command {
    /// A proxy finished its hello; `events` carries everything the engine
    /// sends to it (state snapshots, ticket answers, lookups).
    Connect {
        conn: ConnId,
        pid: u32,
        events: mpsc::UnboundedSender<SupervisorMessage>,
    },
    /// The proxy's connection closed: all its leases end and its tickets
    /// leave the queue. `orphans` gets the tickets whose `Finish` never
    /// came, so the link can write their records.
    Disconnect {
        conn: ConnId,
        orphans: oneshot::Sender<Vec<OpenTicket>>,
    },
    Enqueue {
        conn: ConnId,
        ticket: TicketId,
        model: String,
        tier: ServiceTier,
        request: TicketRequest,
    },
    HeadersReceived {
        conn: ConnId,
        ticket: TicketId,
    },
    /// The ticket's request is over (its record is already stored).
    Finish {
        conn: ConnId,
        ticket: TicketId,
    },
    Scores {
        conn: ConnId,
        lookup: u64,
        scores: Result<CacheScores, LookupFailure>,
    },
    SetDraining {
        conn: ConnId,
        draining: bool,
    },
    Status {
        reply: oneshot::Sender<Status>,
    },
    /// The oldest open tickets (for `/metrics`), at most `limit`.
    InFlight {
        limit: usize,
        reply: oneshot::Sender<Vec<InFlightRequest>>,
    },
    /// Legacy bare `on`/`off`: flips the routing flag only.
    SetRouting {
        routing: bool,
        reply: oneshot::Sender<bool>,
    },
    /// `{"cmd":"on","model":...}`.
    On {
        id: ControlOpId,
        model: Option<String>,
        events: mpsc::UnboundedSender<ControlEvent>,
    },
    /// `{"cmd":"off","now":...}`.
    Off {
        id: ControlOpId,
        now: bool,
        events: mpsc::UnboundedSender<ControlEvent>,
    },
    /// The control client of operation `id` went away.
    CancelControl {
        id: ControlOpId,
    },
    /// Stop serving: fail waiting requests, let leases end (bounded by the
    /// drain deadline), stop the backend, then answer.
    Shutdown {
        done: oneshot::Sender<()>,
    },
    /// A second shutdown signal or the drain deadline: interrupt leases.
    ForceShutdown,
    /// Internal: progress of the running load.
    OpProgress(backend_ops::OpProgress),
    /// Internal: a load or stop finished.
    OpFinished(backend_ops::OpOutcome),
    /// Tests: make the engine task fail.
    #[cfg(test)]
    Panic,
}

/// Router-wide counts, published by the engine after every change so the
/// link can answer arrivals and `/metrics` without waiting for the engine.
#[derive(Debug, Default)]
pub struct Counters {
    /// The last arrival number handed out; the next is one more.
    arrivals: AtomicU64,
    queue_depth: AtomicU64,
    queue_by_tier: [AtomicU64; 3],
    in_flight: AtomicU64,
    /// Waiting tickets per configured model.
    queue_by_model: Mutex<BTreeMap<String, u64>>,
    proxies: AtomicU64,
    /// Finished loads by (model, outcome).
    loads: Mutex<BTreeMap<(String, String), u64>>,
}

impl Counters {
    /// Numbers one more arrival and snapshots the counts it found.
    pub fn arrive(&self) -> ArrivalInfo {
        ArrivalInfo {
            arrival_seq: self.next_arrival(),
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
        }
    }

    /// The next arrival number alone (for a record that has none).
    pub fn next_arrival(&self) -> u64 {
        self.arrivals.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Waiting requests, by tier, and admitted ones.
    pub fn totals(&self) -> (u64, [u64; 3], u64) {
        (
            self.queue_depth.load(Ordering::Relaxed),
            [0, 1, 2].map(|i| self.queue_by_tier[i].load(Ordering::Relaxed)),
            self.in_flight.load(Ordering::Relaxed),
        )
    }

    fn publish(
        &self,
        by_tier: [u64; 3],
        in_flight: u64,
        count_by_model: impl FnOnce(&mut BTreeMap<String, u64>),
        proxies: u64,
    ) {
        for (slot, count) in self.queue_by_tier.iter().zip(by_tier) {
            slot.store(count, Ordering::Relaxed);
        }
        self.queue_depth
            .store(by_tier.iter().sum(), Ordering::Relaxed);
        self.in_flight.store(in_flight, Ordering::Relaxed);
        count_by_model(&mut lock(&self.queue_by_model));
        self.proxies.store(proxies, Ordering::Relaxed);
    }

    /// Waiting tickets per model, and connected proxies.
    pub fn by_model_and_proxies(&self) -> (BTreeMap<String, u64>, u64) {
        (
            lock(&self.queue_by_model).clone(),
            self.proxies.load(Ordering::Relaxed),
        )
    }

    /// One finished load of `model`: `verified`, `failed`, `cancelled` or
    /// `abandoned`.
    fn count_load(&self, model: &str, outcome: &str) {
        *lock(&self.loads)
            .entry((model.to_owned(), outcome.to_owned()))
            .or_default() += 1;
    }

    /// Finished loads so far.
    pub fn loads(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.loads).clone()
    }
}

/// Every change under these locks is one assignment, so a poisoned lock
/// still holds consistent data.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// A cheap, cloneable handle to the engine task.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl EngineHandle {
    /// Sends a command; returns false once the engine has stopped.
    pub fn send(&self, command: Command) -> bool {
        self.tx.send(command).is_ok()
    }

    /// Current status, without waiting for any operation.
    pub async fn status(&self) -> Option<Status> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Status { reply }) {
            return None;
        }
        rx.await.ok()
    }

    /// Tests: a handle with no engine task behind it; its commands arrive
    /// on the receiver, so a test can play the engine and see exactly what
    /// was asked of it.
    #[cfg(test)]
    pub(crate) fn detached() -> (EngineHandle, mpsc::UnboundedReceiver<Command>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EngineHandle { tx }, rx)
    }
}

/// Starts the engine task on the current runtime. The task ends after a
/// [`Command::Shutdown`] has completed.
pub fn spawn(
    config: Arc<Config>,
    instance_id: String,
    counters: Arc<Counters>,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = EngineHandle { tx: tx.clone() };
    let ops = backend_ops::OpRunner::Tasks {
        engine: tx,
        shutdown: std::time::Duration::from_millis(config.timers.shutdown_ms),
    };
    let engine = state::Engine::new(
        config,
        instance_id,
        counters,
        ops,
        tokio::time::Instant::now(),
    );
    let task = tokio::spawn(engine.run(rx));
    (handle, task)
}
