//! The two message enums of the supervisor socket, one per direction.
//!
//! A conversation: the proxy sends [`ProxyMessage::Hello`]; the supervisor
//! answers [`SupervisorMessage::Welcome`] (or [`SupervisorMessage::Refused`]
//! and closes), then immediately a [`SupervisorMessage::State`] snapshot,
//! and a new `State` whenever routing, draining, the loaded model or a
//! model's status changes.
//!
//! **Tickets.** The supervisor's engine is the only scheduler: a routed chat
//! request becomes a ticket in its one queue ([`ProxyMessage::Enqueue`]).
//! The first answer is `Queued`, `Granted` or `Failed`, each with the
//! request's [`ArrivalInfo`]. A queued ticket may get `Admitted` (it left
//! the queue for a load it now waits for) and `Progress` of that load, and
//! ends with exactly one `Granted` or `Failed`. A granted ticket is a
//! *lease*: send the request to `Grant::backend`, as long as
//! `Grant::instance` is still the serving backend. In legacy mode the proxy
//! reports the upstream response headers (`HeadersReceived`), which lets the
//! engine lock pass on. Whatever happened, the request ends with one
//! [`ProxyMessage::Finish`] carrying its record: that withdraws a waiting
//! ticket or ends a lease. A lease ends only with `Finish` (or the
//! connection closing); `Revoked` asks the proxy to drop its stream and
//! finish now. So while a lease exists, nothing can stop or replace the
//! backend instance it names, except a forced supervisor shutdown (after
//! which no backend of that supervisor is started again).
//!
//! The fast path, a request for the loaded model with a free slot: one
//! `Enqueue`, answered by one `Granted`, and one `Finish` at the end.
//!
//! **Cache lookups.** When tickets compete for the loaded model, the engine
//! asks each proxy holding some of them to score them
//! ([`SupervisorMessage::ScoreTickets`]): the proxy posts their bodies to
//! the backend's `/v1/cache/lookup` and answers `TicketScores`. Bodies never
//! cross this socket.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::api::InFlightRequest;
use crate::config::{ModelStatus, ReadinessChoice};
use crate::page::RecordsPage;
use crate::record::RequestRecord;
use crate::stats::RequestStats;

/// Bumped whenever a message or field changes shape.
pub const PROTOCOL_VERSION: u32 = 15;

/// The most bytes a frame from a proxy may have, for a config whose longest
/// `upstream_model` is `longest_upstream_model` bytes. The supervisor
/// refuses a longer frame as soon as its length prefix arrives, so a peer
/// cannot make it hold more than this (plus one read) per connection.
///
/// Sized from the largest real message, a record (`Finish`,
/// `SubmitRecord`): under 1 KiB of numbers, flags and fixed strings in
/// bincode, plus its request ID (under 64 bytes), three model names (config
/// IDs and aliases, at most 128 bytes each) and the upstream model name,
/// which the config does not bound. A cache-lookup answer holds at most the
/// 256 tickets asked for (about 6 KiB). 64 KiB plus twice the upstream name
/// leaves ample room (`protocol/tests/protocol/wire.rs` checks the largest of each).
pub fn proxy_frame_limit(longest_upstream_model: usize) -> u32 {
    let limit = 64 * 1024 + 2 * longest_upstream_model as u64;
    limit.min(u64::from(super::MAX_FRAME_BYTES)) as u32
}

/// A ticket's identifier, chosen by the proxy, unique within one
/// connection.
pub type TicketId = u64;

/// The OpenAI service tier a request waits in. Only orders waiting requests;
/// it never preempts an admitted one. The derived order is the scheduling
/// order: `Priority` first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ServiceTier {
    Priority,
    Default,
    Flex,
}

impl ServiceTier {
    /// Every tier, in scheduling order (also the index order of
    /// [`RouterMetrics::queue_depth_by_tier`]).
    pub const ALL: [ServiceTier; 3] = [
        ServiceTier::Priority,
        ServiceTier::Default,
        ServiceTier::Flex,
    ];

    /// The name used in `x-strata-service-tier` and `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceTier::Priority => "priority",
            ServiceTier::Default => "default",
            ServiceTier::Flex => "flex",
        }
    }

    /// The position in [`ServiceTier::ALL`].
    pub fn index(self) -> usize {
        self as usize
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
    /// A routed chat request for one concrete model ID wants to be served:
    /// queue it. Answered with `Queued`, `Granted` or `Failed`.
    Enqueue {
        ticket: TicketId,
        model: String,
        tier: ServiceTier,
        request: TicketRequest,
    },
    /// Legacy mode: the upstream response headers of this lease arrived, so
    /// the engine lock passes on. (Wait-first mode sends nothing here.)
    HeadersReceived { ticket: TicketId },
    /// The request of this ticket is over (served, failed, abandoned): the
    /// ticket leaves the queue or its lease ends, and the record is stored.
    /// No answer.
    Finish {
        ticket: TicketId,
        record: Box<SubmittedRecord>,
    },
    /// A chat request that ends before it gets a ticket (a rejected body,
    /// an unknown model) needs its arrival number for its request ID.
    /// `token` is echoed in the answer.
    Arrive { token: u64 },
    /// The record of a request that never had a ticket; the supervisor
    /// assigns its `seq` (and its `arrival_seq` when the proxy sent 0).
    /// No answer.
    SubmitRecord { record: Box<SubmittedRecord> },
    /// The proxy stopped accepting connections and is draining accepted work.
    SetDraining { draining: bool },
    /// A `/requests` read: records with `seq > after` (or the newest
    /// `limit` when `after` is `None`).
    QueryRecords {
        query: u64,
        after: Option<u64>,
        limit: u32,
    },
    /// The router-wide figures for `/metrics`.
    QueryMetrics { query: u64 },
    /// Answer to [`SupervisorMessage::ScoreTickets`].
    TicketScores {
        lookup: u64,
        scores: Result<CacheScores, LookupFailure>,
    },
}

/// What the supervisor keeps of an enqueued request besides its model and
/// tier, so that it can write the request's record itself when the proxy's
/// connection closes before the ticket's `Finish` (a proxy crash). Only
/// what a record may hold: a recognised model identifier, a flag, a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketRequest {
    /// The configured model ID or alias the client asked for.
    pub model_requested: String,
    pub stream: bool,
    /// When the proxy received the request's headers, in milliseconds since
    /// the Unix epoch (the record's `arrived_at`).
    pub arrived_unix_ms: u64,
}

/// A finished request's record as a proxy hands it over, with the tier it
/// waited in (for the router's counters; the tier is not a record field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmittedRecord {
    pub record: RequestRecord,
    pub tier: ServiceTier,
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
    /// `reason` is a [`RefuseReason`](super::RefuseReason)'s text: this
    /// frame reads the same in every protocol version, so a proxy of
    /// another build can still say why.
    Refused { reason: String },
    /// A full snapshot of what proxies need to know; sent after `Welcome`
    /// and on every change.
    State(RouterState),
    /// The ticket waits in the queue.
    Queued {
        ticket: TicketId,
        arrival: ArrivalInfo,
    },
    /// The ticket left the queue for a load it now waits for (admission:
    /// `lease_at`); `Progress` and then `Granted` or `Failed` follow.
    Admitted { ticket: TicketId },
    /// The load an admitted ticket waits for moved on (informational).
    Progress {
        ticket: TicketId,
        phase: LoadPhase,
        /// Milliseconds since the load started.
        elapsed_ms: u64,
        /// How long this model's loads usually take (the waiting stream's
        /// "usually"); `None` before its first, when the waiting stream
        /// shows the `startup_ms` limit instead.
        typical_load_ms: Option<u64>,
    },
    /// The ticket is a lease now: dispatch it.
    Granted(Grant),
    /// The ticket ended without a lease.
    Failed {
        ticket: TicketId,
        arrival: ArrivalInfo,
        failure: LeaseFailure,
    },
    /// The supervisor asks for a lease to end now (operator `off --now`, or
    /// a forced shutdown): drop the upstream stream, send nothing more under
    /// it, and `Finish` it. Until then the lease still holds the backend.
    Revoked {
        ticket: TicketId,
        reason: RevokeReason,
    },
    /// The last frame could not be understood; the connection stays usable.
    ProtocolError { message: String },
    /// Answer to [`ProxyMessage::Arrive`].
    Arrival { token: u64, arrival: ArrivalInfo },
    /// Answer to [`ProxyMessage::QueryRecords`]: the `/requests` page, each
    /// record as its stored text (byte for byte the JSONL line).
    Records { query: u64, page: RecordsPage },
    /// Answer to [`ProxyMessage::QueryMetrics`].
    Metrics {
        query: u64,
        metrics: Box<RouterMetrics>,
    },
    /// Score these waiting tickets against the loaded backend's prompt
    /// cache (`POST {backend}/v1/cache/lookup`, in batches), all within
    /// `budget_ms`; answer with `TicketScores`.
    ScoreTickets {
        lookup: u64,
        backend: SocketAddr,
        tickets: Vec<TicketId>,
        budget_ms: u64,
    },
}

/// A request's place in the instance, fixed when the supervisor first saw
/// it: its arrival number and the engine's counts just before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrivalInfo {
    /// From 1 per instance, unique across every proxy of the instance.
    pub arrival_seq: u64,
    /// Waiting tickets (`queue_depth_at_arrival`).
    pub queue_depth: u64,
    /// Admitted tickets and leases (`in_flight_at_arrival`).
    pub in_flight: u64,
}

/// The router-wide figures behind `/metrics`, counted by the engine over
/// every proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterMetrics {
    pub queue_depth: u64,
    /// Indexed by [`ServiceTier::index`].
    pub queue_depth_by_tier: [u64; 3],
    /// Waiting tickets per model, every configured model listed.
    pub queue_depth_by_model: BTreeMap<String, u64>,
    pub in_flight: u64,
    /// Connected proxies.
    pub proxies: u64,
    /// Finished loads by (model, outcome: `verified`, `failed`, `cancelled`).
    pub model_loads: BTreeMap<(String, String), u64>,
    /// Model switches and unloads by reason (`grace_expired`, `bound_due`,
    /// `queue_drained`, `priority`, `operator`, `idle`, `abandoned`); a
    /// reason not seen yet is absent.
    pub model_switches: BTreeMap<String, u64>,
    /// Counted over every stored record of this instance.
    pub requests: RequestStats,
    /// The oldest requests held (waiting, loading, leased), oldest first.
    pub in_flight_requests: Vec<InFlightRequest>,
    pub request_log: RequestLogStats,
    /// The weights prefetch, per model that has been prefetched or loaded
    /// with a weights list.
    pub prefetch: BTreeMap<String, PrefetchFigures>,
    /// The supervisor process's own figures, read when the metrics were
    /// asked for (the proxy exports them beside its own).
    pub supervisor_process: ProcessFigures,
}

/// The `reason` label values of `strata_router_model_switches_total`, in
/// the order they are written (the scheduler's `SwitchReason`s).
pub const SWITCH_REASONS: [&str; 7] = [
    "grace_expired",
    "bound_due",
    "queue_drained",
    "priority",
    "operator",
    "idle",
    "abandoned",
];

/// One daemon process's figures behind the standard `process_*` families.
/// A figure the system would not tell is `None`, exported as absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFigures {
    /// User and system CPU time.
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors.
    pub max_fds: Option<u64>,
    /// Seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// One model's weights prefetch figures since the supervisor started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrefetchFigures {
    /// Bytes read into the page cache that were not resident before.
    pub bytes: u64,
    /// Time spent reading them.
    pub seconds: f64,
    /// The fraction of its weights in the page cache when its last load
    /// started (0 to 1); `None` before a load with a weights list.
    pub resident_at_load: Option<f64>,
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

/// Where the load an admitted ticket waits for is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadPhase {
    /// The previous backend is being stopped.
    StoppingOldBackend,
    /// The backend process was spawned.
    Starting,
    /// The backend is loading; waiting for its ready file.
    WaitingForReadiness,
    /// The ready file appeared (or, without one, the port opened); `/health`
    /// is being checked. Sent also so that an idle proxy is awake by the time
    /// the grant comes (a wakeup after a long idle costs ~0.3 ms on a VM).
    CheckingHealth,
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
pub struct Grant {
    pub ticket: TicketId,
    pub arrival: ArrivalInfo,
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
    /// The backend stopped answering its probes and is being restarted
    /// (`backend_unresponsive_action: "restart"`).
    BackendUnresponsive,
}

/// Why a ticket ended without a lease. Each maps to one accounting `reason`
/// and one HTTP status in the proxy.
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
    /// cleanup took. `cooldown_ms` is the cooldown the failure started
    /// (the config's `cooldown_ms`), for the client's `Retry-After`.
    LoadFailed {
        message: String,
        model_switch: bool,
        load_ms: Option<u64>,
        cooldown_ms: u64,
        /// The model's usual load time, if one was learned: `Retry-After`
        /// adds it to the cooldown.
        typical_load_ms: Option<u64>,
    },
    /// A recent start failed; no new launch until the cooldown ends.
    Cooldown {
        message: String,
        remaining_ms: u64,
        /// As for `LoadFailed`.
        typical_load_ms: Option<u64>,
    },
    /// Legacy mode: `max_pending` requests are already active or waiting.
    QueueFull,
    /// Legacy mode: the ticket waited longer than `queue_ms` for its lease.
    QueueTimeout,
    /// The supervisor is shutting down.
    ShuttingDown,
}

/// Cache matches of the scored tickets, as the backend reported them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheScores {
    /// The backend's `conversation_cache_min_tokens`.
    pub min_tokens: u64,
    pub results: Vec<TicketScore>,
}

/// One ticket's cache match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketScore {
    pub ticket: TicketId,
    pub input_tokens: u64,
    pub cached_tokens: u64,
}

/// Why a cache lookup gave no scores; every one falls back to tier,
/// model-group and arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookupFailure {
    /// 404: a Strata without the extension.
    Unsupported,
    /// 409: the engine is busy.
    Busy,
    /// The budget ran out.
    Timeout,
    /// The backend could not be reached.
    Unavailable,
    /// Another status, or a reply that is not the documented shape.
    Invalid,
    /// The proxy no longer holds (some of) the tickets.
    UnknownTickets,
}

impl LookupFailure {
    /// The failure as the log names it.
    pub fn as_str(self) -> &'static str {
        match self {
            LookupFailure::Unsupported => "unsupported",
            LookupFailure::Busy => "busy",
            LookupFailure::Timeout => "timeout",
            LookupFailure::Unavailable => "unavailable",
            LookupFailure::Invalid => "invalid",
            LookupFailure::UnknownTickets => "unknown_tickets",
        }
    }
}

/// One model's current status, as `/v1/models` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelStatusEntry {
    pub id: String,
    pub status: ModelStatus,
    /// The generic cause of this model's last failed start, until it next
    /// starts (`/v1/models` `last_error`).
    pub last_error: Option<String>,
    /// What was left of this model's start cooldown when the state was
    /// made (the proxy counts it down from the state's arrival).
    pub cooldown_remaining_ms: Option<u64>,
    /// How long this model's loads usually take: the median of its last
    /// successful loads since the supervisor started (`/v1/models`
    /// `typical_load_ms`, the waiting stream's "usually"); `None` before the
    /// first.
    pub typical_load_ms: Option<u64>,
}

/// A learned load time (`typical_load_ms`) in whole seconds, rounded to the
/// nearest and at least 1: how every "usually Ns" says it (the waiting
/// stream's comment, `strata-ctl on` and `top`).
pub fn typical_load_seconds(ms: u64) -> u64 {
    ms.saturating_add(500).div_euclid(1000).max(1)
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
    /// The backend's state as the probes see it.
    pub backend_health: BackendHealth,
    /// The readiness mode the last start used and why; `None` before a
    /// start with `readiness: "auto"` has asked the Strata.
    pub readiness: Option<ReadinessChoice>,
}

/// The backend's state (`/health`, `status`, `/v1/models`, `top`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackendState {
    /// A verified backend serves, and answers its probes.
    Serving,
    /// A backend is starting (or a stop runs).
    Loading,
    /// No backend runs and no start cooldown runs.
    #[default]
    Idle,
    /// The serving backend stopped answering its probes (or answers as
    /// another model, or not loaded).
    Unresponsive,
    /// No backend runs, and a failed start's cooldown does.
    Cooling,
    /// Only the proxy says this (`/health`): it cannot reach its supervisor
    /// (or that one has other settings), so it does not know.
    Unknown,
}

impl BackendState {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendState::Serving => "serving",
            BackendState::Loading => "loading",
            BackendState::Idle => "idle",
            BackendState::Unresponsive => "unresponsive",
            BackendState::Cooling => "cooling",
            BackendState::Unknown => "unknown",
        }
    }
}

/// The backend's state and its probes, as of the state's making.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BackendHealth {
    pub state: BackendState,
    /// When the serving backend last answered a probe well (its
    /// verification counts), in Unix milliseconds; `None` when nothing
    /// serves or probes are off. A time, not an age: states are sent on
    /// changes, not on every good probe, so an age would be stale at once.
    pub last_good_probe_unix_ms: Option<u64>,
    /// Why it is unresponsive (generic: no backend text).
    pub cause: Option<String>,
}

impl BackendHealth {
    /// How long ago the backend last answered a probe well, as of `now_unix_ms` (both processes
    /// read the same host clock; a clock step back reads as 0).
    pub fn last_good_probe_age_ms(&self, now_unix_ms: u64) -> Option<u64> {
        self.last_good_probe_unix_ms
            .map(|at| now_unix_ms.saturating_sub(at))
    }
}
