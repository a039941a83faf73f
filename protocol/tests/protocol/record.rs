//! The record serializes with exactly the schema's keys, in order, with
//! nulls present and the documented JSON types.

use serde_json::Value;
use strata_protocol::record::{
    FinishReason, Phase, Reason, RequestRecord, SCHEMA_VERSION, format_unix_ms, parse_timestamp,
    parse_unix_ms,
};
use strata_test_support::{RECORD_FIELDS as FIELDS, RECORD_REASONS};

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
        reason: Reason::InvalidRequest,
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
fn the_enums_serialize_as_the_schema_spells_them() {
    let spelled = |value: &dyn erased::Json| value.json();
    let reasons: Vec<String> = Reason::ALL.iter().map(|r| spelled(r)).collect();
    assert_eq!(reasons, RECORD_REASONS);
    for reason in Reason::ALL {
        assert_eq!(spelled(&reason), reason.as_str());
    }
    let finishes: Vec<String> = FinishReason::ALL.iter().map(|r| spelled(r)).collect();
    assert_eq!(
        finishes,
        [
            "stop",
            "length",
            "tool_calls",
            "function_call",
            "content_filter",
            "other"
        ]
    );
    for phase in [Phase::Queued, Phase::Loading, Phase::Generating] {
        assert_eq!(spelled(&phase), phase.as_str());
    }
    let mut with_phase = record();
    with_phase.reason = Reason::ClientDisconnect;
    with_phase.disconnect_phase = Some(Phase::Loading);
    with_phase.finish_reason = Some(FinishReason::ToolCalls);
    let value: Value = serde_json::from_str(&with_phase.to_json()).unwrap();
    assert_eq!(value["reason"], "client_disconnect");
    assert_eq!(value["disconnect_phase"], "loading");
    assert_eq!(value["finish_reason"], "tool_calls");
    let back: RequestRecord = serde_json::from_str(&with_phase.to_json()).unwrap();
    assert_eq!(back.reason, Reason::ClientDisconnect);
}

#[test]
fn a_timestamp_reads_back_as_the_millisecond_it_was_written_for() {
    // The epoch, a leap day's last millisecond, a date of the records'
    // era, the last millisecond of the year 9999 (the widest the format
    // writes), and a sweep of uneven steps between.
    let mut instants = vec![0, 1_709_251_199_999, 1_764_474_000_250, 253_402_300_799_999];
    instants.extend((0..2000u64).map(|i| i * 126_230_400_017 % 253_402_300_800_000));
    for ms in instants {
        let text = format_unix_ms(ms);
        assert_eq!(parse_unix_ms(&text), Some(ms), "{text}");
        assert_eq!(
            parse_timestamp(&text).map(|at| at.unix_timestamp_nanos()),
            Some(i128::from(ms) * 1_000_000),
            "{text}"
        );
    }
    assert_eq!(
        format_unix_ms(1_764_474_000_250),
        "2025-11-30T03:40:00.250Z"
    );
    assert_eq!(
        parse_unix_ms("2025-11-30T03:40:00.250Z"),
        Some(1_764_474_000_250)
    );
}

#[test]
fn only_the_written_timestamp_form_parses() {
    for bad in [
        "",
        "x",
        "2025-11-30 03:40:00.250Z",
        "2025-11-30T03:40:00.250",
        "2025-11-30T03:40:00.25Z",
        "2025-11-30T03:40:00.2500Z",
        "2025-11-30T03:40:00Z",
        "2025-11-30T03:40:00.250+00:00",
        "2025-11-30T03-40-00.250Z",
        "2025/11/30T03:40:00.250Z",
        "2025-13-30T03:40:00.250Z",
        "2025-02-30T03:40:00.250Z",
        "2025-11-30T24:00:00.250Z",
        "2025-11-30T03:60:00.250Z",
        "2025-11-3xT03:40:00.250Z",
        " 2025-11-30T03:40:00.250Z",
        "2025-11-30T03:40:00.250Z ",
    ] {
        assert_eq!(parse_timestamp(bad), None, "{bad:?}");
        assert_eq!(parse_unix_ms(bad), None, "{bad:?}");
    }
}

/// Serializing any of the enums as the JSON string they become.
mod erased {
    pub trait Json {
        fn json(&self) -> String;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            match serde_json::to_value(self).unwrap() {
                serde_json::Value::String(text) => text,
                other => panic!("not a string: {other}"),
            }
        }
    }
}
