//! Accounting records, schema version 1, through the real binaries: the exact key set and the
//! type of every field for a streamed success, a queued cancellation and a rejection, read
//! through `GET /requests` and from the JSONL file (the same bytes); the file's mode; and that
//! no record carries request or response content.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};
use strata_e2e::accounting::{
    Record, all_records, assert_all_schema, assert_fields, assert_schema, by_request_id,
    chat_request, page, wait_jsonl, wait_records, with_request_log,
};
use strata_e2e::http::{self, CHAT_PATH};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};
use strata_protocol::record::{FinishReason, Phase, Reason};

const A: &str = "flash-a";
const B: &str = "flash-b";

fn close_to(value: Option<f64>, expected: f64) -> bool {
    value.is_some_and(|v| (v - expected).abs() < 0.0011)
}

/// (a) a streamed success, (b) a queued streaming cancellation, (c) a rejection; plus the
/// record of the stream that (b) waited behind, cancelled while generating.
#[test]
fn success_queued_cancellation_and_rejection_match_the_schema_in_both_places() {
    let mut config = ConfigBuilder::new("acct-schema")
        .model(ModelSpec::new(A).load_ms(200))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let log = with_request_log(&mut config, json!({}));
    // Keeps the directory (and the file) after the stack is stopped.
    let _dir = config.dir.clone();
    let stack = Stack::start(config);
    let addr = stack.addr();

    // (a) A streamed success with reasoning deltas, usage and timings.
    let fake = json!({"tokens": 5, "reasoning_tokens": 2, "token_delay_ms": 30,
                      "prompt_tokens": 40, "cached_tokens": 8});
    let mut stream = stack.open_chat(&chat_request(A, true, "hello", fake));
    assert_eq!(stream.status, 200);
    let success_id = stream.header("x-strata-request-id").unwrap().to_owned();
    let frames = stream.remaining_frames(DEADLINE);
    assert!(
        frames.last().is_some_and(http::Frame::is_done),
        "{frames:#?}"
    );
    let success_bytes = stream.received_len();

    // (c) A rejection: the body is not JSON.
    let rejected = http::request(
        addr,
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        b"{\"model\": \"flash-a\", \"stream\": tr",
    );
    rejected.expect_status(400);
    let rejected_id = rejected.header("x-strata-request-id").unwrap().to_owned();

    // (b) A queued cancellation: a streaming request for B waits behind A's slow stream, gets
    // its 200 and SSE headers at once (wait-first), and leaves while still queued.
    let slow = json!({"tokens": 400, "token_delay_ms": 25});
    let mut blocker = stack.open_chat(&chat_request(A, true, "slow", slow));
    blocker.frames_until(DEADLINE, "a content delta", |f| {
        f.is_data()
            && f.json()["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
    });
    let blocker_id = blocker.header("x-strata-request-id").unwrap().to_owned();
    let queued = stack.open_chat(&chat_request(B, true, "queued", Value::Null));
    assert_eq!(queued.status, 200, "wait-first: headers before admission");
    let queued_id = queued.header("x-strata-request-id").unwrap().to_owned();
    poll_until(DEADLINE, "B queued behind A", || {
        stack.metrics().queue_depth == Some(1)
    });
    queued.disconnect();
    poll_until(DEADLINE, "the queued request's record", || {
        all_records(addr).iter().any(|r| r.request_id == queued_id)
    });
    // Then the blocker leaves too (a cancellation while generating).
    blocker.disconnect();
    let records = wait_records(addr, 4);
    let instance = page(addr, "").instance_id().to_owned();
    assert_all_schema(&records, &instance);

    let success = by_request_id(&records, &success_id);
    let expected = json!({
        "schema_version": 1, "endpoint": "/v1/chat/completions", "stream": true,
        "model_requested": A, "model_resolved": A, "upstream_model": "up-flash-a",
        "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0, "model_switch": true,
        "prompt_tokens": 40, "completion_tokens": 7, "reasoning_tokens": null,
        "prompt_n": 32, "cache_n": 8, "predicted_n": 7,
        "finish_reason": "stop", "status": 200, "upstream_status": 200, "success": true,
        "reason": "completed", "response_bytes": success_bytes, "disconnect_phase": null,
    });
    assert_fields(success, expected);
    assert!(
        success.lease_at.is_some()
            && success.first_token_at.is_some()
            && success.last_token_at.is_some()
            && success.queue_wait_ms.is_some()
            && success.upstream_headers_ms.is_some(),
        "{success}"
    );
    let ms = |figure: Option<u64>, name: &str| {
        figure.unwrap_or_else(|| panic!("{name} of a success: {success}"))
    };
    let load = ms(success.model_load_ms, "model_load_ms");
    assert!(load >= 200, "{success}");
    // TTFT includes the load, and both TTFTs see it (only the first includes the queue).
    assert!(ms(success.ttft_ms, "ttft_ms") >= load, "{success}");
    assert!(
        ms(success.ttft_after_lease_ms, "ttft_after_lease_ms") >= 200,
        "{success}"
    );
    // 7 deltas, each 30 ms after the previous one (6 gaps); the proxy reading the first one
    // late under load shortens what it observes, so only one gap is required.
    assert!(
        ms(success.generation_ms, "generation_ms") >= 30,
        "{success}"
    );
    // Engine figures are copied: prompt_ms = 0.5 * 32 + 0.25, predicted_ms = 7 * 30 + 0.25.
    assert!(close_to(success.prompt_ms, 16.25), "{success}");
    assert!(close_to(success.predicted_ms, 210.25), "{success}");
    assert!(close_to(success.prompt_per_second, 1969.231), "{success}");
    assert!(close_to(success.predicted_per_second, 33.294), "{success}");

    let rejection = by_request_id(&records, &rejected_id);
    let expected = json!({
        "stream": false, "model_requested": null, "model_resolved": null, "upstream_model": null,
        "lease_at": null, "first_token_at": null, "last_token_at": null, "queue_wait_ms": null,
        "model_switch": false, "model_load_ms": null, "upstream_headers_ms": null,
        "ttft_ms": null, "ttft_after_lease_ms": null, "generation_ms": null,
        "prompt_tokens": null, "completion_tokens": null, "reasoning_tokens": null,
        "prompt_n": null, "cache_n": null, "predicted_n": null, "prompt_ms": null,
        "predicted_ms": null, "prompt_per_second": null, "predicted_per_second": null,
        "finish_reason": null, "status": 400, "upstream_status": null, "success": false,
        "reason": "invalid_request", "response_bytes": rejected.body.len(),
        "disconnect_phase": null,
    });
    assert_fields(rejection, expected);

    let cancelled = by_request_id(&records, &queued_id);
    let expected = json!({
        "stream": true, "model_requested": B, "model_resolved": B, "upstream_model": "up-flash-b",
        "lease_at": null, "first_token_at": null, "last_token_at": null,
        "queue_depth_at_arrival": 0, "in_flight_at_arrival": 1, "queue_wait_ms": null,
        "model_switch": false, "model_load_ms": null, "upstream_headers_ms": null,
        "ttft_ms": null, "ttft_after_lease_ms": null, "generation_ms": null,
        "prompt_tokens": null, "completion_tokens": null, "predicted_n": null,
        "finish_reason": null,
        // Its 200 and SSE headers had gone out; the backend never answered.
        "status": 200, "upstream_status": null, "success": false,
        "reason": "client_disconnect", "disconnect_phase": "queued",
    });
    assert_fields(cancelled, expected);

    let generating = by_request_id(&records, &blocker_id);
    assert_eq!(generating.reason, Reason::ClientDisconnect, "{generating}");
    assert_eq!(
        generating.disconnect_phase,
        Some(Phase::Generating),
        "{generating}"
    );
    assert_eq!(generating.status, Some(200), "{generating}");
    assert_eq!(generating.upstream_status, Some(200), "{generating}");
    assert!(!generating.success, "{generating}");
    assert!(generating.first_token_at.is_some(), "{generating}");

    // The JSONL file holds the same bytes, one record per line, in seq order; mode 0600.
    let lines = wait_jsonl(&log, records.len());
    let raw: Vec<&str> = records.iter().map(|r| r.raw.as_str()).collect();
    assert_eq!(lines, raw);
    for line in &lines {
        assert_schema(&Record::new(line));
    }
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", log.display());

    stack.stop();
    // A clean stop leaves the file complete.
    assert_eq!(
        strata_e2e::accounting::jsonl_lines(&log),
        raw,
        "the file after the supervisor stopped"
    );
}

/// Records carry only identifiers, fixed strings, timestamps and numbers: no prompt, no
/// generated text or tool call, no header (Authorization, User-Agent), no client address, no
/// error body and no unrecognised model string, in `/requests` or in the file; and none of the
/// request's content, headers, key or the backend's error text in either daemon's log.
#[test]
fn records_never_contain_content() {
    let mut config = ConfigBuilder::new("acct-content")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let log = with_request_log(&mut config, json!({}));
    // Debug logging: the most the daemons ever say.
    let stack = Stack::start_logging(config, "debug");
    let addr = stack.addr();

    const PROMPT: &str = "zebra-quartz-prompt-7731";
    const SECRET: &str = "sk-zebra-secret-9f8e7d";
    const AGENT: &str = "zebra-agent/4.2";
    const ERROR: &str = "zebra-error-body-5150";
    const UNKNOWN_MODEL: &str = "zebra-model-unknown";
    let headers = [
        ("content-type", "application/json"),
        ("authorization", "Bearer sk-zebra-secret-9f8e7d"),
        ("user-agent", AGENT),
        ("x-api-key", SECRET),
    ];
    let send = |body: &Value| {
        http::request(
            addr,
            "POST",
            CHAT_PATH,
            &headers,
            body.to_string().as_bytes(),
        )
    };

    // A stream with reasoning, a tool call and content; a non-stream answer; a backend
    // error with a message; an unknown model; a body that is not JSON but holds the prompt.
    send(&chat_request(
        A,
        true,
        PROMPT,
        json!({"reasoning_tokens": 2, "tool_call": true, "tokens": 3}),
    ))
    .expect_status(200);
    send(&chat_request(A, false, PROMPT, Value::Null)).expect_status(200);
    send(&chat_request(
        A,
        false,
        PROMPT,
        json!({"error_status": 500, "error_message": ERROR}),
    ))
    .expect_status(500);
    send(&chat_request(UNKNOWN_MODEL, false, PROMPT, Value::Null)).expect_status(404);
    let broken = format!("{{\"model\":\"{A}\",\"messages\":[{{\"content\":\"{PROMPT}\"");
    http::request(addr, "POST", CHAT_PATH, &headers, broken.as_bytes()).expect_status(400);

    let records = wait_records(addr, 5);
    let tool = records
        .iter()
        .find(|r| r.finish_reason == Some(FinishReason::ToolCalls))
        .expect("the tool-call stream's record");
    assert!(tool.success, "{tool}");
    let lines = wait_jsonl(&log, 5);
    let body = page(addr, "after=0").raw;
    let file = std::fs::read_to_string(&log).unwrap();
    for text in [&body, &file] {
        for needle in [
            PROMPT,
            "zebra",
            SECRET,
            "Bearer",
            AGENT,
            ERROR,
            UNKNOWN_MODEL,
            "get_weather",
            "Paris",
            "hmm",
            "tok ",
            "127.0.0.1",
            "messages",
            "content",
        ] {
            assert!(!text.contains(needle), "{needle:?} leaked into: {text}");
        }
    }
    assert_eq!(lines.len(), records.len());
    // Nor do the daemons' logs, at their most verbose.
    let logs = format!("{}\n{}", stack.proxy_stderr(), stack.supervisor_stderr());
    for needle in [
        PROMPT,
        "zebra",
        SECRET,
        "Bearer",
        AGENT,
        ERROR,
        "get_weather",
        "Paris",
    ] {
        assert!(
            !logs.contains(needle),
            "{needle:?} leaked into the logs: {logs}"
        );
    }
    assert!(
        logs.contains("DEBUG"),
        "the daemons did not log at debug: {logs}"
    );
    stack.stop();
}

/// A second look at the types: every record a wait-first and a legacy stack produce in a
/// varied run (non-stream success, stream success, backend errors, 404, 413) passes the schema
/// check, in `/requests` and in the file.
#[test]
fn varied_records_all_pass_the_schema_check() {
    for wait_first in [true, false] {
        let mut config = ConfigBuilder::new("acct-types")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .set("max_request_body_bytes", 4096)
            .build();
        let log = with_request_log(&mut config, json!({}));
        let stack = Stack::start(config);
        let addr = stack.addr();
        let json_ok = stack.chat(&chat_request(A, false, "x", Value::Null));
        json_ok.expect_status(200);
        let json_ok_id = json_ok.header("x-strata-request-id").unwrap().to_owned();
        let mut stream = stack.open_chat(&chat_request(A, true, "x", json!({"timings": false})));
        let no_timings_id = stream.header("x-strata-request-id").unwrap().to_owned();
        stream.remaining_frames(DEADLINE);
        stack
            .chat(&chat_request(A, false, "x", json!({"error_status": 503})))
            .expect_status(503);
        let mut failing =
            stack.open_chat(&chat_request(A, true, "x", json!({"error_status": 409})));
        let _ = failing.try_read_to_end(DEADLINE);
        stack
            .chat(&chat_request("nope", true, "x", Value::Null))
            .expect_status(404);
        stack
            .chat(&chat_request(A, false, &"x".repeat(5000), Value::Null))
            .expect_status(413);
        let records = wait_records(addr, 6);
        let instance = page(addr, "").instance_id().to_owned();
        assert_all_schema(&records, &instance);
        let no_timings = by_request_id(&records, &no_timings_id);
        assert_fields(
            no_timings,
            json!({"prompt_ms": null, "predicted_ms": null, "prompt_per_second": null,
                   "predicted_per_second": null, "prompt_n": null, "predicted_n": null}),
        );
        // Non-stream JSON: tokens are known, token times are not observable.
        let json_ok = by_request_id(&records, &json_ok_id);
        assert!(json_ok.completion_tokens.is_some(), "{json_ok}");
        assert_fields(
            json_ok,
            json!({"first_token_at": null, "last_token_at": null, "ttft_ms": null,
                   "ttft_after_lease_ms": null, "generation_ms": null}),
        );
        let lines = wait_jsonl(&log, 6);
        let raw: Vec<&str> = records.iter().map(|r| r.raw.as_str()).collect();
        assert_eq!(lines, raw);
        stack.stop();
    }
}
