//! The per-request accounting record, schema version 1.
//!
//! One explicit type for both the JSONL line and the `/requests` item: the
//! supervisor serializes it once and stores and writes the same text.
//! Field names, order, types and nullability follow the spec's schema
//! table; every field is always serialized (`None` is JSON `null`). Counts
//! and router durations are unsigned integers, engine durations and rates
//! are numbers, timestamps are RFC3339 UTC strings with milliseconds.
//!
//! Nothing here may hold request or response content: only recognised
//! model identifiers, fixed strings, timestamps and numbers.

use serde::{Deserialize, Serialize};

/// The value of `schema_version`.
pub const SCHEMA_VERSION: u32 = 1;

/// The only endpoint that produces records.
pub const CHAT_ENDPOINT: &str = "/v1/chat/completions";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub schema_version: u32,
    /// Completion order, assigned by the supervisor when it stores the
    /// record (a proxy sends 0).
    pub seq: u64,
    /// Arrival order. A proxy that could not reach the supervisor at
    /// arrival sends 0 and the supervisor assigns one when it stores the
    /// record.
    pub arrival_seq: u64,
    pub request_id: String,
    pub endpoint: String,
    pub stream: bool,
    pub model_requested: Option<String>,
    pub model_resolved: Option<String>,
    pub upstream_model: Option<String>,
    pub arrived_at: String,
    pub completed_at: String,
    pub lease_at: Option<String>,
    pub first_token_at: Option<String>,
    pub last_token_at: Option<String>,
    pub queue_depth_at_arrival: u64,
    pub in_flight_at_arrival: u64,
    pub queue_wait_ms: Option<u64>,
    pub model_switch: bool,
    pub model_load_ms: Option<u64>,
    pub upstream_headers_ms: Option<u64>,
    pub ttft_ms: Option<u64>,
    pub ttft_after_lease_ms: Option<u64>,
    pub generation_ms: Option<u64>,
    pub total_ms: u64,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub prompt_n: Option<u64>,
    pub cache_n: Option<u64>,
    pub predicted_n: Option<u64>,
    pub prompt_ms: Option<f64>,
    pub predicted_ms: Option<f64>,
    pub prompt_per_second: Option<f64>,
    pub predicted_per_second: Option<f64>,
    pub finish_reason: Option<FinishReason>,
    pub status: Option<u16>,
    pub upstream_status: Option<u16>,
    pub success: bool,
    pub reason: Reason,
    pub response_bytes: u64,
    /// For client disconnects only.
    pub disconnect_phase: Option<Phase>,
}

/// The schema's `reason` enum: how a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    Completed,
    ClientDisconnect,
    UpstreamError,
    Timeout,
    QueueTimeout,
    RoutingOff,
    Shutdown,
    ModelLoadError,
    ModelNotPrepared,
    InvalidRequest,
    QueueFull,
}

impl Reason {
    /// Every reason, in the schema's order.
    pub const ALL: [Reason; 11] = [
        Reason::Completed,
        Reason::ClientDisconnect,
        Reason::UpstreamError,
        Reason::Timeout,
        Reason::QueueTimeout,
        Reason::RoutingOff,
        Reason::Shutdown,
        Reason::ModelLoadError,
        Reason::ModelNotPrepared,
        Reason::InvalidRequest,
        Reason::QueueFull,
    ];

    /// The record's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Completed => "completed",
            Reason::ClientDisconnect => "client_disconnect",
            Reason::UpstreamError => "upstream_error",
            Reason::Timeout => "timeout",
            Reason::QueueTimeout => "queue_timeout",
            Reason::RoutingOff => "routing_off",
            Reason::Shutdown => "shutdown",
            Reason::ModelLoadError => "model_load_error",
            Reason::ModelNotPrepared => "model_not_prepared",
            Reason::InvalidRequest => "invalid_request",
            Reason::QueueFull => "queue_full",
        }
    }
}

/// How far a request got, for `disconnect_phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before admission (body reading, routing, waiting in the queue).
    Queued,
    /// Admitted: loading the model or waiting for response headers.
    Loading,
    /// Upstream headers arrived.
    Generating,
}

impl Phase {
    /// The record's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Loading => "loading",
            Phase::Generating => "generating",
        }
    }
}

/// The schema's `finish_reason` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    FunctionCall,
    ContentFilter,
    /// Any string the schema does not know; the string itself is not kept.
    Other,
}

impl FinishReason {
    /// Every value, in the schema's order.
    pub const ALL: [FinishReason; 6] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::ToolCalls,
        FinishReason::FunctionCall,
        FinishReason::ContentFilter,
        FinishReason::Other,
    ];

    /// Maps the wire string; unknown strings become [`FinishReason::Other`].
    pub fn from_wire(s: &str) -> Self {
        match s {
            "stop" => Self::Stop,
            "length" => Self::Length,
            "tool_calls" => Self::ToolCalls,
            "function_call" => Self::FunctionCall,
            "content_filter" => Self::ContentFilter,
            _ => Self::Other,
        }
    }

    /// The record's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::FunctionCall => "function_call",
            Self::ContentFilter => "content_filter",
            Self::Other => "other",
        }
    }
}

/// RFC3339 UTC with milliseconds, ending in `Z`: every timestamp of a record.
const TIMESTAMP: &[time::format_description::FormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
);

/// A record timestamp (`arrived_at`, `lease_at`, ...) for a UTC time.
pub fn format_timestamp(at: time::OffsetDateTime) -> String {
    at.format(TIMESTAMP)
        .unwrap_or_else(|_| String::from("1970-01-01T00:00:00.000Z"))
}

/// A record timestamp for a time in milliseconds since the Unix epoch.
pub fn format_unix_ms(unix_ms: u64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format_timestamp(at)
}

/// The UTC time of a record timestamp: exactly the form
/// [`format_timestamp`] writes (`2025-11-30T03:40:00.250Z`), read with the
/// same format description; `None` for any other text or an impossible date.
pub fn parse_timestamp(text: &str) -> Option<time::OffsetDateTime> {
    time::PrimitiveDateTime::parse(text, TIMESTAMP)
        .ok()
        .map(time::PrimitiveDateTime::assume_utc)
}

/// Milliseconds since the Unix epoch of a record timestamp (the inverse of
/// [`format_unix_ms`]); `None` as for [`parse_timestamp`], and before the
/// epoch.
pub fn parse_unix_ms(text: &str) -> Option<u64> {
    let nanos = parse_timestamp(text)?.unix_timestamp_nanos();
    u64::try_from(nanos / 1_000_000).ok()
}

/// Milliseconds since the Unix epoch of a wall-clock time (0 before it).
pub fn unix_ms(at: std::time::SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

impl RequestRecord {
    /// The record as one JSON object text (no trailing newline).
    pub fn to_json(&self) -> String {
        // Serializing plain fields cannot fail; non-finite floats become
        // null, which the schema allows for those nullable fields.
        serde_json::to_string(self).expect("a record always serializes")
    }
}
