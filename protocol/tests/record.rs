//! The record serializes with exactly the schema's keys, in order, with
//! nulls present and the documented JSON types.

use serde_json::Value;
use strata_protocol::record::{FIELDS, REASONS, RequestRecord, SCHEMA_VERSION};

fn record() -> RequestRecord {
    RequestRecord {
        schema_version: SCHEMA_VERSION,
        seq: 3,
        arrival_seq: 2,
        request_id: "9-1-2".into(),
        endpoint: "/v1/chat/completions".into(),
        stream: false,
        model_requested: None,
        model_resolved: None,
        upstream_model: None,
        arrived_at: "2026-11-30T04:58:45.123Z".into(),
        completed_at: "2026-11-30T04:58:45.125Z".into(),
        lease_at: None,
        first_token_at: None,
        last_token_at: None,
        queue_depth_at_arrival: 0,
        in_flight_at_arrival: 0,
        queue_wait_ms: None,
        model_switch: false,
        model_load_ms: None,
        upstream_headers_ms: None,
        ttft_ms: None,
        ttft_after_lease_ms: None,
        generation_ms: None,
        total_ms: 2,
        prompt_tokens: None,
        completion_tokens: None,
        reasoning_tokens: None,
        prompt_n: None,
        cache_n: None,
        predicted_n: None,
        prompt_ms: Some(11.25),
        predicted_ms: None,
        prompt_per_second: None,
        predicted_per_second: Some(f64::NAN),
        finish_reason: None,
        status: Some(400),
        upstream_status: None,
        success: false,
        reason: "invalid_request".into(),
        response_bytes: 120,
        disconnect_phase: None,
    }
}

#[test]
fn every_field_is_present_in_schema_order() {
    let text = record().to_json();
    let value: Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted_fields = FIELDS.to_vec();
    sorted_fields.sort();
    let mut sorted_keys = keys.clone();
    sorted_keys.sort();
    assert_eq!(sorted_keys, sorted_fields);
    // serde_json's map is sorted; check the text's own order instead.
    let mut last = 0;
    for field in FIELDS {
        let at = text.find(&format!("\"{field}\":")).unwrap();
        assert!(at >= last, "{field} is out of order");
        last = at;
    }
}

#[test]
fn nulls_are_null_and_numbers_have_their_types() {
    let value: Value = serde_json::from_str(&record().to_json()).unwrap();
    assert!(value["model_requested"].is_null());
    assert!(value["lease_at"].is_null());
    assert!(value["disconnect_phase"].is_null());
    assert_eq!(value["schema_version"], 1);
    assert!(value["total_ms"].is_u64());
    assert!(value["prompt_ms"].is_f64());
    // A non-finite engine figure cannot be a JSON number: it becomes null.
    assert!(value["predicted_per_second"].is_null());
    assert!(value["status"].is_u64());
    assert!(value["success"].is_boolean());
}

#[test]
fn reasons_are_the_schema_enum() {
    assert_eq!(REASONS.len(), 11);
    assert!(REASONS.contains(&"queue_full"));
}
