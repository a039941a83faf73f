//! The private supervisor socket: message types and framing.
//!
//! `strata-proxy` and `strata-supervisor` talk over a Unix stream socket in
//! length-prefixed frames: a 4-byte big-endian payload length, then the
//! payload serialized with bincode 1.3.3 under an explicit byte limit. The
//! first frame in each direction is the versioned hello
//! ([`ProxyMessage::Hello`] / [`SupervisorMessage::Welcome`]); the supervisor
//! refuses a proxy whose protocol version or config fingerprint differs,
//! so a proxy built or configured differently cannot misroute.
//!
//! These types are an IPC contract: changing a variant or field changes the
//! wire format and needs a [`PROTOCOL_VERSION`] bump. `protocol/tests/protocol/wire.rs`
//! pins a hash of every sample message's frame together with the version,
//! so a change fails that test until both are updated. The hello and its
//! two answers are the exception: they are how builds of different versions
//! tell each other apart, so `Hello`, `Welcome` and `Refused` keep their
//! variant index and fields in every version (pinned byte for byte there
//! too), and a proxy of any version can read why it was refused.

mod frame;
mod messages;
mod refuse;

pub use frame::{
    FrameReader, MAX_FRAME_BYTES, WireError, decode_payload, encode_frame, encode_frame_into,
    read_frame, write_frame,
};
pub use messages::{
    ArrivalInfo, BackendHealth, BackendInstance, BackendState, CacheScores, Grant, LeaseFailure,
    LoadPhase, LookupFailure, ModelStatusEntry, PROTOCOL_VERSION, PrefetchFigures, ProcessFigures,
    ProxyMessage, RequestLogStats, RevokeReason, RouterMetrics, RouterState, SWITCH_REASONS,
    ServiceTier, SubmittedRecord, SupervisorMessage, TicketId, TicketRequest, TicketScore,
    proxy_frame_limit, typical_load_seconds,
};
pub use refuse::RefuseReason;
