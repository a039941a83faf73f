//! The two message enums of the supervisor socket, one per direction.
//!
//! A conversation: the proxy sends [`ProxyMessage::Hello`]; the supervisor
//! answers [`SupervisorMessage::Welcome`] (or [`SupervisorMessage::Refused`]
//! and closes), then immediately a [`SupervisorMessage::State`] snapshot, and
//! a new `State` whenever routing, draining, the loaded model or a model's
//! status changes. The proxy then asks for leases; each lease request gets
//! zero or more `LeaseProgress` events and exactly one `LeaseGranted` or
//! `LeaseFailed`. A granted lease ends only with `ReleaseLease` (or the
//! connection closing). The supervisor may ask for an early end with
//! `LeaseRevoked` (operator `off --now`); the proxy then drops the upstream
//! stream and releases the lease, and only the release ends it. So while a
//! lease exists, nothing can stop or replace the backend instance it names,
//! except a forced supervisor shutdown (after which no backend of that
//! instance is started again).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::ModelStatus;
use crate::record::RequestRecord;

/// Bumped whenever a message or field changes shape.
pub const PROTOCOL_VERSION: u32 = 2;

/// A lease request's identifier, chosen by the proxy, unique within one
/// connection.
pub type LeaseId = u64;

/// The OpenAI service tier a request waits in. Only orders waiting requests;
/// it never preempts an admitted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ServiceTier {
    Priority,
    Default,
    Flex,
}

impl ServiceTier {
    /// The name used in `x-strata-service-tier` and `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceTier::Priority => "priority",
            ServiceTier::Default => "default",
            ServiceTier::Flex => "flex",
        }
    }
}

/// Proxy to supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProxyMessage {
    /// First frame: who is calling and with which config.
    Hello {
        protocol_version: u32,
        /// [`crate::config::Config::fingerprint`] of the proxy's config.
        fingerprint: u64,
        pid: u32,
    },
    /// Ask for a lease on one concrete model ID.
    AcquireLease {
        lease: LeaseId,
        model: String,
        tier: ServiceTier,
    },
    /// End a granted lease, or withdraw a request that is still waiting.
    /// Withdrawing never cancels a load other requests may be waiting for.
    ReleaseLease { lease: LeaseId },
    /// The proxy stopped accepting connections and is draining accepted work.
    SetDraining { draining: bool },
    /// A chat request arrived: allocate its arrival sequence number.
    /// `token` is echoed in the answer so the proxy can match it.
    Arrive { token: u64 },
    /// A finished request's accounting record; the supervisor assigns its
    /// `seq` (and its `arrival_seq` when the proxy sent 0), keeps it in the
    /// ring and writes it to the JSONL file. No answer.
    SubmitRecord { record: Box<RequestRecord> },
    /// A `/requests` read: records with `seq > after` (or the newest
    /// `limit` when `after` is `None`).
    QueryRecords {
        query: u64,
        after: Option<u64>,
        limit: u32,
    },
    /// The `request_log` figures for `/metrics`.
    QueryRequestLog { query: u64 },
}

/// Supervisor to proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SupervisorMessage {
    /// The hello was accepted.
    Welcome {
        protocol_version: u32,
        /// Identifies this router instance (the supervisor process) in
        /// request IDs and accounting; a proxy-only restart keeps it.
        instance_id: String,
        supervisor_pid: u32,
    },
    /// The hello was refused; the supervisor closes the connection.
    Refused { reason: String },
    /// A full snapshot of what proxies need to know; sent after `Welcome`
    /// and on every change.
    State(RouterState),
    /// A waiting lease moved on. Purely informational except
    /// [`LeasePhase::Admitted`], which marks the end of queueing.
    LeaseProgress {
        lease: LeaseId,
        phase: LeasePhase,
        /// Milliseconds since the supervisor received the lease request.
        elapsed_ms: u64,
    },
    /// The lease is held: send the request to `grant.backend`, as long as
    /// `grant.instance` is still the serving backend.
    LeaseGranted(LeaseGrant),
    /// The lease request ended without a lease.
    LeaseFailed {
        lease: LeaseId,
        failure: LeaseFailure,
    },
    /// The supervisor asks for a granted lease to end now (operator
    /// `off --now`, or a forced shutdown): the proxy must drop the upstream
    /// stream at once, send nothing more under it, and release it. Until the
    /// release (or the connection closing) the lease still holds the backend.
    LeaseRevoked {
        lease: LeaseId,
        reason: RevokeReason,
    },
    /// The last frame could not be understood; the connection stays usable.
    ProtocolError { message: String },
    /// Answer to [`ProxyMessage::Arrive`]: the request's arrival sequence,
    /// from 1 per instance, unique across every proxy of the instance.
    Arrival { token: u64, arrival_seq: u64 },
    /// Answer to [`ProxyMessage::QueryRecords`]: the complete `/requests`
    /// JSON document, built where the records are stored so each item is
    /// byte-for-byte the JSONL line.
    Records { query: u64, body: String },
    /// Answer to [`ProxyMessage::QueryRequestLog`].
    RequestLog { query: u64, stats: RequestLogStats },
}

/// The accounting store's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLogStats {
    pub write_errors: u64,
    pub write_drops: u64,
    pub evicted: u64,
    pub records_in_ring: u64,
    /// The next completion sequence to allocate.
    pub next_seq: u64,
    pub instance_id: String,
}

/// Where a waiting lease request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeasePhase {
    /// Waiting for every lease on another model to end.
    QueuedBehindOtherModel,
    /// Admission: the request left the queue; a load may follow.
    Admitted,
    /// The previous backend is being stopped.
    StoppingOldBackend,
    /// The backend process was spawned.
    Starting,
    /// The backend is loading; waiting for its ready file.
    WaitingForReadiness,
    /// Ready file and `/health` agree with the configured identity.
    Verified,
}

/// One verified backend process: the supervisor's start counter and the
/// child's PID. The backend address is the same for every model
/// (`127.0.0.1:backend_port`), so the address alone cannot tell one backend
/// from the next; this can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackendInstance {
    /// Counts verified starts within one supervisor instance, from 1.
    pub epoch: u64,
    /// The child's PID, as the ready file and the spawn agreed.
    pub pid: u32,
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub lease: LeaseId,
    /// Loopback address of the verified backend.
    pub backend: SocketAddr,
    /// The backend process the lease is valid for. The proxy sends nothing
    /// under this lease unless [`RouterState::backend`] still names it.
    pub instance: BackendInstance,
    /// The backend profile's model name (what the backend answers with).
    pub upstream_model: String,
    /// Admission found a different model, or none, loaded.
    pub model_switch: bool,
    /// Stop/start/readiness work done for this lease, if any ran.
    pub load_ms: Option<u64>,
}

/// Why the supervisor asked for a lease to end early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RevokeReason {
    /// Operator `off --now`.
    RoutingOff,
    /// The supervisor's drain ran out (`drain_ms`) or a second signal came.
    Shutdown,
}

/// Why a lease request ended without a lease. Each maps to one accounting
/// `reason` and one HTTP status in the proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LeaseFailure {
    /// Routing is off (operator `off`), before or while waiting.
    RoutingOff,
    /// The model is not configured on the supervisor's side.
    UnknownModel,
    /// The model is not installed, not compatible, or its profile is
    /// missing or invalid; nothing was launched.
    NotPrepared { status: ModelStatus },
    /// The backend failed to start; `message` is bounded and generic. The
    /// request was admitted, so the load's figures are reported as for a
    /// grant: whether it was a switch, and how long the failed load and its
    /// cleanup took.
    LoadFailed {
        message: String,
        model_switch: bool,
        load_ms: Option<u64>,
    },
    /// A recent start failed; no new launch until the cooldown ends.
    Cooldown { message: String, remaining_ms: u64 },
    /// The supervisor is shutting down.
    ShuttingDown,
}

/// One model's current status, as `/v1/models` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatusEntry {
    pub id: String,
    pub status: ModelStatus,
}

/// What the supervisor streams to every proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterState {
    pub routing: bool,
    pub draining: bool,
    /// The verified, loaded model's public ID.
    pub loaded: Option<String>,
    /// The model being loaded right now, if any.
    pub loading: Option<String>,
    /// The verified backend serving `loaded`; `None` while nothing serves
    /// (loading, stopping, after the child died, or unloaded).
    pub backend: Option<BackendInstance>,
    pub last_startup_error: Option<String>,
    /// Every configured model, in ID order.
    pub statuses: Vec<ModelStatusEntry>,
}
