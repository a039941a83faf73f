//! The JSON documents of the router's own HTTP API (router spec, "HTTP
//! API"): what `strata-proxy` serves besides the backend's passthrough.
//!
//! The proxy builds these and serializes them; Rust clients
//! (`strata-ctl`, the tests) can read them back with the same types. A
//! field here is part of the public API: renaming one is a breaking change
//! for clients, so the black-box contract (names, types, nulls) is pinned
//! by `protocol/tests/protocol/api.rs`.
//!
//! `null` has one meaning throughout: the figure lives in the supervisor,
//! and the supervisor is not reachable right now.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ModelStatus;

/// Every router-made error: `{"error":{"message","type","code"}}`, plus
/// `status` in the in-band SSE form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A fixed sentence chosen by the error, never request or backend text.
    pub message: String,
    /// The OpenAI error type (`invalid_request_error`, `server_error`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    pub code: String,
    /// The HTTP status an in-band error frame stands for (only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// A failed or cooling-down start (`model_load_error`): the generic
    /// cause the supervisor made of it (only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// With `last_error`: what is left of the model's start cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_remaining_ms: Option<u64>,
}

/// `GET /health`: 200 with `status: "ok"` while the supervisor is
/// reachable, 503 with `"unavailable"` otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub status: HealthStatus,
    pub supervisor: LinkStatus,
    pub routing: Option<bool>,
    pub loaded_model: Option<String>,
    pub draining: Option<bool>,
    /// `serving`, `loading`, `idle`, `unresponsive` or `cooling`; null while
    /// the supervisor is unreachable.
    pub backend_state: Option<crate::wire::BackendState>,
    /// How long ago the serving backend last answered its probe well.
    pub last_good_probe_age_ms: Option<u64>,
    /// Why the backend is unresponsive (or why nothing can be served).
    pub cause: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
    Unavailable,
}

/// `/health.supervisor`: whether the proxy's link to the supervisor is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkStatus {
    Connected,
    Disconnected,
    /// The supervisor runs with other settings (its config fingerprint
    /// differs): the proxy waits for one with the same.
    ConfigMismatch,
    /// The supervisor is another build (protocol version): the proxy waits
    /// for a matching one.
    VersionMismatch,
}

/// `GET /metrics` (JSON). Queue and in-flight counts are the router's
/// totals over every proxy, as the supervisor counts them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub loaded_model: Option<String>,
    pub loading_model: Option<String>,
    pub routing: Option<bool>,
    pub supervisor_connected: bool,
    pub in_flight: Option<u64>,
    pub queue_depth: Option<u64>,
    pub queue_depth_by_tier: TierCounts,
    /// Waiting requests per configured model (every one listed, in ID
    /// order).
    pub queue_depth_by_model: Option<BTreeMap<String, u64>>,
    pub max_request_body_bytes: u64,
    pub last_stream_ttft_ms: Option<u64>,
    pub last_stream_decode_tokens_per_second: Option<f64>,
    pub request_log: RequestLogMetrics,
    /// The oldest requests the router holds (at most 50), oldest first.
    pub in_flight_requests: Option<Vec<InFlightRequest>>,
}

/// One request the router holds (waiting, loading or leased), oldest first
/// in `/metrics.in_flight_requests`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlightRequest {
    pub request_id: String,
    /// The concrete model ID it is for.
    pub model: String,
    pub tier: String,
    /// `waiting` (queued), `loading` (admitted to a load) or `leased`
    /// (sent to the backend).
    pub stage: String,
    /// Since it arrived.
    pub age_ms: u64,
}

/// Waiting requests per service tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierCounts {
    pub priority: Option<u64>,
    pub default: Option<u64>,
    pub flex: Option<u64>,
}

/// The `request_log` object of `/metrics`: the configured values, and the
/// supervisor's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLogMetrics {
    pub path: Option<String>,
    pub max_bytes: u64,
    pub rotate_files: u32,
    pub capacity: u64,
    pub write_errors: Option<u64>,
    pub write_drops: Option<u64>,
    pub evicted: Option<u64>,
    pub records_in_ring: Option<u64>,
    pub next_seq: Option<u64>,
    pub instance_id: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: ListObject,
    pub data: Vec<ModelItem>,
    /// How the supervisor checks a start (an addition to OpenAI's list: the
    /// `readiness` setting, the mode in use and why).
    pub readiness: crate::config::ReadinessReport,
}

/// The OpenAI `object` of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListObject {
    List,
}

/// The OpenAI `object` of a model entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelObject {
    Model,
}

/// One entry of the listing: a concrete model or a family alias.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelItem {
    Concrete(ConcreteModel),
    Alias(AliasModel),
}

impl ModelItem {
    /// The entry's `id`: the model's or the alias's.
    pub fn id(&self) -> &str {
        match self {
            ModelItem::Concrete(model) => &model.id,
            ModelItem::Alias(alias) => &alias.id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcreteModel {
    pub id: String,
    pub object: ModelObject,
    pub owned_by: String,
    pub family: String,
    pub fine_tune: Option<String>,
    pub quantization: String,
    pub status: ModelStatus,
    /// The generic cause of the model's last failed start (until it starts
    /// again), or null.
    pub last_error: Option<String>,
    /// What is left of the model's start cooldown, or null when none runs.
    pub cooldown_remaining_ms: Option<u64>,
    /// How long the model's loads usually take: the median of its last
    /// successful loads (at most five) since the supervisor started; null
    /// before the first, or while the supervisor is unreachable.
    pub typical_load_ms: Option<u64>,
    /// The backend's state for the model in it (loaded or loading:
    /// `serving`, `loading`, `unresponsive`); null for every other model.
    pub backend_state: Option<crate::wire::BackendState>,
    /// Operator metadata from the config, passed through as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasModel {
    pub id: String,
    pub object: ModelObject,
    pub owned_by: String,
    pub family: String,
    /// The enabled members, in preference order.
    pub allowed_models: Vec<String>,
    /// The first of `allowed_models`, if any.
    pub preferred: Option<String>,
}
