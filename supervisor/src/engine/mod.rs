//! The engine: the one task that owns the Strata child.
//!
//! Everything that can change which model is loaded goes through here as a
//! [`Command`], processed in order by a single task (`state::Engine`):
//! lease requests and releases from proxies, operator `on`/`off`, the idle
//! tick, shutdown. Loads and stops run as child tasks of the engine that
//! report back with [`Command::OpFinished`]; while one runs, no other load,
//! switch or idle unload can start. That is the "engine lock": it is held
//! for the whole load, yet `status` and lease bookkeeping keep answering
//! because the engine loop itself never blocks on the backend.

mod control_ops;
mod ops;
mod state;
mod status;

use std::sync::Arc;

use strata_protocol::config::Config;
use strata_protocol::wire::{LeaseId, ServiceTier, SupervisorMessage};
use tokio::sync::{mpsc, oneshot};

pub use status::StatusSnapshot;

/// One proxy connection on the supervisor socket.
pub type ConnId = u64;

/// Identifies one control-socket `on`/`off` operation, so a late cancel
/// from a disconnected client cannot hit a newer operation.
pub type ControlOpId = u64;

/// What the engine sends back to a control client during `on`/`off`.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlEvent {
    Progress {
        op: &'static str,
        phase: &'static str,
        message: String,
        elapsed_ms: u64,
    },
    /// Exactly one per operation, last.
    Done {
        ok: bool,
        message: String,
        status: StatusSnapshot,
    },
}

/// Messages the engine task processes, in order.
#[derive(Debug)]
pub enum Command {
    /// A proxy finished its hello; `events` carries everything the engine
    /// sends to it (state snapshots, lease progress, grants).
    Connect {
        conn: ConnId,
        pid: u32,
        events: mpsc::UnboundedSender<SupervisorMessage>,
    },
    /// The proxy's connection closed: all its leases end and its waiting
    /// requests are withdrawn.
    Disconnect {
        conn: ConnId,
    },
    Acquire {
        conn: ConnId,
        lease: LeaseId,
        model: String,
        tier: ServiceTier,
    },
    Release {
        conn: ConnId,
        lease: LeaseId,
    },
    SetDraining {
        conn: ConnId,
        draining: bool,
    },
    Status {
        reply: oneshot::Sender<StatusSnapshot>,
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
    OpProgress(ops::OpProgress),
    /// Internal: a load or stop finished.
    OpFinished(ops::OpOutcome),
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
    pub async fn status(&self) -> Option<StatusSnapshot> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Status { reply }) {
            return None;
        }
        rx.await.ok()
    }
}

/// Starts the engine task on the current runtime. The task ends after a
/// [`Command::Shutdown`] has completed.
pub fn spawn(
    config: Arc<Config>,
    instance_id: String,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = EngineHandle { tx: tx.clone() };
    let engine = state::Engine::new(config, instance_id, tx);
    let task = tokio::spawn(engine.run(rx));
    (handle, task)
}
