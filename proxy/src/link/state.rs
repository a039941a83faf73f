//! The link's shared vocabulary: what the proxy knows about its supervisor
//! ([`LinkState`]), what happens to a ticket ([`TicketEvent`]), and the
//! commands the handles send to the connection task ([`LinkCommand`]). Both
//! sides import it from here, so neither reaches into the other.

use bytes::Bytes;
use strata_protocol::page::RecordsPage;
use strata_protocol::wire::{
    ArrivalInfo, Grant, LeaseFailure, LoadPhase, RefuseReason, RevokeReason, RouterMetrics,
    RouterState, ServiceTier, SubmittedRecord, TicketId, TicketRequest,
};
use tokio::sync::{mpsc, oneshot};

/// What the proxy knows about its supervisor right now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkState {
    /// The hello was accepted and the connection is up.
    pub connected: bool,
    /// The router instance, from the last accepted hello.
    pub instance_id: Option<String>,
    /// The supervisor's latest state snapshot (kept while disconnected, so
    /// `/v1/models` can still show the last known statuses).
    pub router: Option<RouterState>,
    /// When `router` arrived (its cooldowns count down from then).
    pub router_at: Option<std::time::Instant>,
    /// The supervisor refused this proxy for good (not its user, a hello
    /// that was not one). The proxy must exit with this message.
    pub refused: Option<String>,
    /// The supervisor runs another build or other settings: the link keeps
    /// saying hello (with backoff) until one with the same answers, and
    /// requests get 503 naming the mismatch meanwhile.
    pub mismatch: Option<Mismatch>,
    /// The first try to reach a supervisor is over (it was reached, refused
    /// or found unreachable). Until then a chat request waits for it rather
    /// than being refused: a proxy that just started has usually not said
    /// hello yet.
    pub first_attempt_done: bool,
    /// Records finished here and not yet handed to a supervisor (kept while
    /// it is unreachable; a supervisor with other settings still takes
    /// them).
    pub unsent_records: usize,
}

/// Why the supervisor that answers is not this proxy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Its config fingerprint differs (a config change half applied).
    Config,
    /// Its protocol version differs (an upgrade half done).
    Version,
}

impl Mismatch {
    /// The mismatch a refusal names, if it is one a proxy can wait out.
    pub fn of(reason: &RefuseReason) -> Option<Mismatch> {
        match reason {
            RefuseReason::Fingerprint => Some(Mismatch::Config),
            RefuseReason::ProtocolVersion { .. } => Some(Mismatch::Version),
            _ => None,
        }
    }
}

/// The part of [`LinkState`] a chat request routes with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutingView {
    pub connected: bool,
    /// Why a supervisor that answers is not this proxy's, while it is not.
    pub mismatch: Option<Mismatch>,
    pub instance_id: Option<String>,
    pub loaded: Option<String>,
}

/// Something that happened to one ticket.
#[derive(Debug, Clone, PartialEq)]
pub enum TicketEvent {
    /// It waits in the supervisor's queue.
    Queued(ArrivalInfo),
    /// It left the queue for a load it now waits for.
    Admitted,
    /// That load moved on: milliseconds since it started, and how long
    /// this model's loads usually take (if learned).
    Progress(LoadPhase, u64, Option<u64>),
    /// It is a lease now. Boxed: every ticket's event channel allocates
    /// a block of 32 events up front, so the event's size is paid per
    /// waiting request (128 bytes with the grant inline, 72 boxed).
    Granted(Box<Grant>),
    Failed {
        arrival: ArrivalInfo,
        failure: LeaseFailure,
    },
    /// The supervisor asks for the lease to end now (operator `off --now`,
    /// forced shutdown): stop using it and finish.
    Revoked(RevokeReason),
    /// The connection to the supervisor was lost; the ticket is gone.
    LinkLost,
}

/// Why a granted lease may no longer be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    Revoked(RevokeReason),
    LinkLost,
}

pub(crate) enum LinkCommand {
    Enqueue {
        ticket: TicketId,
        model: String,
        tier: ServiceTier,
        request: TicketRequest,
        /// Kept while the ticket waits, for cache lookups.
        body: Bytes,
        events: mpsc::UnboundedSender<TicketEvent>,
    },
    HeadersReceived {
        ticket: TicketId,
    },
    Finish {
        ticket: TicketId,
        record: Box<SubmittedRecord>,
    },
    Arrive {
        reply: oneshot::Sender<ArrivalInfo>,
    },
    SetDraining(bool),
    SubmitRecord(Box<SubmittedRecord>),
    QueryRecords {
        after: Option<u64>,
        limit: u32,
        reply: oneshot::Sender<RecordsPage>,
    },
    QueryMetrics {
        reply: oneshot::Sender<RouterMetrics>,
    },
    /// Answered once every command sent before it has been written.
    Flush {
        reply: oneshot::Sender<()>,
    },
}
