//! The engine's input: every [`Command`] it processes, in order, and the
//! identifiers they carry.

use strata_protocol::api::InFlightRequest;
use strata_protocol::control::{ControlEvent, ModelsAnswer, Status};
use strata_protocol::wire::{
    CacheScores, LookupFailure, ServiceTier, SupervisorMessage, TicketId, TicketRequest,
};
use strata_scheduler::ConnId;
use tokio::sync::{mpsc, oneshot};

use super::backend_ops::{OpOutcome, OpProgress};
use super::ledger::OpenTicket;

/// Identifies one control-socket `on`/`off` operation, so a late cancel
/// from a disconnected client cannot hit a newer operation.
pub type ControlOpId = u64;

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
    /// One probe of the serving backend's `/health`.
    ProbeResult {
        instance: strata_protocol::wire::BackendInstance,
        outcome: crate::backend::ProbeOutcome,
    },
    /// Every configured model's status and learned load time (`models`).
    Models {
        reply: oneshot::Sender<ModelsAnswer>,
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
    OpProgress(OpProgress),
    /// Internal: a load or stop finished.
    OpFinished(OpOutcome),
    /// Tests: make the engine task fail.
    #[cfg(test)]
    Panic,
}
