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
    /// `stop`, `length`, `tool_calls`, `function_call`, `content_filter` or
    /// `other`.
    pub finish_reason: Option<String>,
    pub status: Option<u16>,
    pub upstream_status: Option<u16>,
    pub success: bool,
    /// One of [`REASONS`].
    pub reason: String,
    pub response_bytes: u64,
    /// `queued`, `loading` or `generating`, for client disconnects only.
    pub disconnect_phase: Option<String>,
}

/// Every allowed `reason`.
pub const REASONS: [&str; 11] = [
    "completed",
    "client_disconnect",
    "upstream_error",
    "timeout",
    "queue_timeout",
    "routing_off",
    "shutdown",
    "model_load_error",
    "model_not_prepared",
    "invalid_request",
    "queue_full",
];

/// The field names in schema order; a test pins the serialized key set.
pub const FIELDS: [&str; 41] = [
    "schema_version",
    "seq",
    "arrival_seq",
    "request_id",
    "endpoint",
    "stream",
    "model_requested",
    "model_resolved",
    "upstream_model",
    "arrived_at",
    "completed_at",
    "lease_at",
    "first_token_at",
    "last_token_at",
    "queue_depth_at_arrival",
    "in_flight_at_arrival",
    "queue_wait_ms",
    "model_switch",
    "model_load_ms",
    "upstream_headers_ms",
    "ttft_ms",
    "ttft_after_lease_ms",
    "generation_ms",
    "total_ms",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "prompt_n",
    "cache_n",
    "predicted_n",
    "prompt_ms",
    "predicted_ms",
    "prompt_per_second",
    "predicted_per_second",
    "finish_reason",
    "status",
    "upstream_status",
    "success",
    "reason",
    "response_bytes",
    "disconnect_phase",
];

impl RequestRecord {
    /// The record as one JSON object text (no trailing newline).
    pub fn to_json(&self) -> String {
        // Serializing plain fields cannot fail; non-finite floats become
        // null, which the schema allows for those nullable fields.
        serde_json::to_string(self).expect("a record always serializes")
    }
}
