//! The accounting record as the tests see it: the schema's field list (the pin every record
//! is checked against, independent of the product's type) and a schema-valid record to start
//! a fixture from.

use serde_json::{Value, json};

/// The spec's record fields ("Record schema, version 1"), in schema order.
pub const RECORD_FIELDS: [&str; 41] = [
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

/// The schema's `reason` enum, in the spec's order.
pub const RECORD_REASONS: [&str; 11] = [
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

/// A complete, schema-valid record of a finished non-streaming request `request_id` for model
/// `m` (200, `completed`, everything the backend would report null), as a proxy sends it (`seq`
/// 0). Fixtures change the members they care about: `record["status"] = json!(503)`.
pub fn record_json(request_id: &str) -> Value {
    json!({
        "schema_version": 1, "seq": 0, "arrival_seq": 1, "request_id": request_id,
        "endpoint": "/v1/chat/completions", "stream": false, "model_requested": "m",
        "model_resolved": "m", "upstream_model": "m",
        "arrived_at": "2026-01-01T00:00:00.000Z", "completed_at": "2026-01-01T00:00:01.000Z",
        "lease_at": null, "first_token_at": null, "last_token_at": null,
        "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0, "queue_wait_ms": null,
        "model_switch": false, "model_load_ms": null, "upstream_headers_ms": null,
        "ttft_ms": null, "ttft_after_lease_ms": null, "generation_ms": null, "total_ms": 1000,
        "prompt_tokens": null, "completion_tokens": null, "reasoning_tokens": null,
        "prompt_n": null, "cache_n": null, "predicted_n": null, "prompt_ms": null,
        "predicted_ms": null, "prompt_per_second": null, "predicted_per_second": null,
        "finish_reason": null, "status": 200, "upstream_status": 200, "success": true,
        "reason": "completed", "response_bytes": 10, "disconnect_phase": null
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_has_exactly_the_schema_fields() {
        let record = record_json("r");
        let mut keys: Vec<&str> = record
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = RECORD_FIELDS.to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
    }
}
