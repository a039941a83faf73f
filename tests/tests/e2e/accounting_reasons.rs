//! One accounting record for each `reason` the fake backend can produce, through the real
//! binaries, with the fields that tell the outcomes apart: `success`, `status`,
//! `upstream_status`, `disconnect_phase` and which timings are present or null.
//!
//! | reason | how |
//! |---|---|
//! | completed | stream and non-stream successes (wait-first and legacy) |
//! | client_disconnect | queued (non-stream: no status), loading (model load; header wait), generating |
//! | upstream_error | backend error status (non-stream passthrough; wait-first stream in band), an in-band error frame in a 2xx stream, backend death mid-stream |
//! | timeout | legacy `response_ms` before headers (504) and after them (transport error) |
//! | queue_timeout | legacy `queue_ms` behind another model's lease |
//! | routing_off | `off` then a request; `off --now` interrupting a stream |
//! | shutdown | a request during the supervisor's drain, and one waiting when it began |
//! | model_load_error | `start_failure`, then the cooldown |
//! | model_not_prepared | an uninstalled model |
//! | invalid_request | bad JSON, unknown model, oversized body, bad `stream`, bad `service_tier` |
//! | queue_full | legacy `max_pending` 1 with one active request |

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{
    Record, assert_all_schema, assert_fields, assert_schema, by_request_id, chat_request, page,
    wait_jsonl_within, wait_record, wait_record_where, wait_records, with_request_log,
};
use strata_e2e::http::{self, CHAT_PATH};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};
use strata_protocol::record::{Phase, Reason};

const A: &str = "flash-a";
const B: &str = "flash-b";
const SLOW_LOAD: &str = "flash-slow";
const BROKEN: &str = "flash-broken";
const UNINSTALLED: &str = "flash-uninstalled";

fn id_of(response: &http::Response) -> String {
    response
        .header("x-strata-request-id")
        .unwrap_or_else(|| panic!("no x-strata-request-id: {response}"))
        .to_owned()
}

/// The timing fields of a request that never reached the backend.
fn never_dispatched() -> Value {
    json!({
        "upstream_headers_ms": null, "upstream_status": null, "first_token_at": null,
        "last_token_at": null, "ttft_ms": null, "ttft_after_lease_ms": null,
        "generation_ms": null, "prompt_tokens": null, "completion_tokens": null,
        "predicted_n": null, "predicted_ms": null, "finish_reason": null, "success": false,
    })
}

/// ... and was not admitted either.
fn never_admitted() -> Value {
    let mut fields = never_dispatched();
    fields.as_object_mut().unwrap().extend(
        json!({"lease_at": null, "queue_wait_ms": null, "model_switch": false,
               "model_load_ms": null})
        .as_object()
        .unwrap()
        .clone(),
    );
    fields
}

/// Sends a non-stream chat request and closes the connection once `ready` holds (the request
/// reached the wanted point); the client never sees a response.
fn send_and_abandon(addr: std::net::SocketAddr, body: &Value, ready: impl FnMut() -> bool) {
    let conn = http::send_chat(addr, body);
    poll_until(DEADLINE, "the abandoned request to get there", ready);
    drop(conn);
}

#[test]
fn wait_first_reasons() {
    let config = ConfigBuilder::new("acct-reasons")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .model(ModelSpec::new(SLOW_LOAD).load_ms(1500))
        .model(ModelSpec::new(BROKEN).start_failure("exit"))
        .model(ModelSpec::new(UNINSTALLED).not_installed())
        .wait_when_busy(true)
        .set("max_request_body_bytes", 4096)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    let mut expected_records = 0u64;
    let mut count = |n: u64| expected_records += n;

    // completed, non-stream: token times are not observable in a JSON body.
    let done = stack.chat(&chat_request(A, false, "x", Value::Null));
    done.expect_status(200);
    count(1);
    let rec = wait_record(addr, &id_of(&done));
    assert_fields(
        &rec,
        json!({"reason": "completed", "success": true, "status": 200, "upstream_status": 200,
               "stream": false, "model_switch": true, "first_token_at": null, "ttft_ms": null,
               "generation_ms": null, "completion_tokens": 5, "finish_reason": "stop",
               "disconnect_phase": null, "response_bytes": done.body.len()}),
    );
    assert!(
        rec.model_load_ms.is_some() && rec.queue_wait_ms.is_some(),
        "{rec}"
    );

    // upstream_error, non-stream: the backend's status passes through.
    let failed = stack.chat(&chat_request(A, false, "x", json!({"error_status": 500})));
    failed.expect_status(500);
    count(1);
    let rec = wait_record(addr, &id_of(&failed));
    assert_fields(
        &rec,
        json!({"reason": "upstream_error", "success": false, "status": 500,
               "upstream_status": 500, "model_switch": false, "model_load_ms": null,
               "disconnect_phase": null, "response_bytes": failed.body.len()}),
    );
    assert!(
        rec.upstream_headers_ms.is_some() && rec.lease_at.is_some(),
        "{rec}"
    );

    // upstream_error, wait-first stream, within the header hold: the backend's status passes
    // through as for a non-streaming request.
    let held = stack.chat(&chat_request(A, true, "x", json!({"error_status": 503})));
    held.expect_status(503);
    count(1);
    let rec = wait_record(addr, &id_of(&held));
    assert_fields(
        &rec,
        json!({"reason": "upstream_error", "success": false, "status": 503,
               "upstream_status": 503, "stream": true, "first_token_at": null,
               "response_bytes": held.body.len()}),
    );

    // upstream_error, wait-first stream, after the head went out with the first keepalive:
    // 200 was sent; the error is one in-band frame.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"error_status": 503, "header_delay_ms": 5300}),
    ));
    assert_eq!(stream.status, 200);
    let frames = stream.remaining_frames(DEADLINE);
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("error"),
        "{frames:#?}"
    );
    count(1);
    let rec = wait_record(addr, stream.header("x-strata-request-id").unwrap());
    assert_fields(
        &rec,
        json!({"reason": "upstream_error", "success": false, "status": 200,
               "upstream_status": 503, "stream": true, "first_token_at": null,
               "response_bytes": stream.received_len()}),
    );

    // An in-band error inside a 2xx stream (Strata's mid-stream error frame): never a success.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"mid_stream": "error", "mid_stream_after": 2, "tokens": 4}),
    ));
    stream.remaining_frames(DEADLINE);
    count(1);
    let rec = wait_record(addr, stream.header("x-strata-request-id").unwrap());
    assert_fields(
        &rec,
        json!({"success": false, "status": 200, "upstream_status": 200,
               "disconnect_phase": null}),
    );
    // The transfer completed, but the backend reported a failure in band.
    assert_eq!(rec.reason, Reason::UpstreamError, "{rec}");
    assert!(rec.first_token_at.is_some(), "two deltas came first: {rec}");

    // client_disconnect while generating.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 400, "token_delay_ms": 20}),
    ));
    stream.frames_until(DEADLINE, "a content delta", |f| {
        f.is_data()
            && f.json()["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
    });
    let generating_id = stream.header("x-strata-request-id").unwrap().to_owned();
    let received = stream.received_len();
    stream.disconnect();
    count(1);
    let rec = wait_record(addr, &generating_id);
    assert_fields(
        &rec,
        json!({"reason": "client_disconnect", "disconnect_phase": "generating",
               "success": false, "status": 200, "upstream_status": 200,
               "finish_reason": null, "completion_tokens": null}),
    );
    assert!(
        rec.first_token_at.is_some() && rec.response_bytes >= received,
        "{rec}"
    );

    // client_disconnect while queued, non-stream: no response existed, so no status.
    let mut blocker = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 400, "token_delay_ms": 20}),
    ));
    blocker.frames_until(DEADLINE, "the first frame", http::Frame::is_data);
    send_and_abandon(addr, &chat_request(B, false, "x", Value::Null), || {
        stack.metrics().queue_depth == Some(1)
    });
    count(1);
    let rec = wait_record_where(addr, "B's queued cancellation", |r| {
        r.model_resolved.as_deref() == Some(B)
    });
    assert_fields(&rec, never_admitted());
    assert_fields(
        &rec,
        json!({"reason": "client_disconnect", "disconnect_phase": "queued", "status": null,
               "stream": false, "in_flight_at_arrival": 1, "response_bytes": 0}),
    );

    // client_disconnect while loading (header wait), non-stream: admitted and granted, the
    // backend has the request, no headers yet.
    let log = stack.fake_log();
    let before = log.events_named("request").len();
    send_and_abandon(
        addr,
        &chat_request(A, false, "x", json!({"header_delay_ms": 5000})),
        || log.events_named("request").len() > before,
    );
    count(1);
    let rec = wait_record_where(addr, "the header wait's cancellation", |r| {
        r.disconnect_phase == Some(Phase::Loading)
    });
    assert_fields(&rec, never_dispatched());
    assert_fields(
        &rec,
        json!({"reason": "client_disconnect", "status": null, "model_resolved": A,
               "in_flight_at_arrival": 1}),
    );
    assert!(
        rec.lease_at.is_some() && rec.queue_wait_ms.is_some(),
        "{rec}"
    );
    blocker.disconnect();
    count(1);

    // client_disconnect while the model loads, stream: admitted (lease_at), no lease granted
    // (queue_wait_ms null), the load's duration unknown, and no status: it leaves during the
    // 1.5 s load, within its header hold, so it never got headers.
    let loading = http::send_chat(addr, &chat_request(SLOW_LOAD, true, "x", Value::Null));
    // The supervisor admits the request (LeaseProgress Admitted) before it spawns the backend,
    // so once the fake logs its start the proxy has long known the request is loading.
    let upstream = stack.config().upstream(SLOW_LOAD);
    poll_until(DEADLINE, "the slow model's backend to start", || {
        stack.fake_log().start_count(&upstream) == 1
    });
    assert_eq!(stack.status().loading.as_deref(), Some(SLOW_LOAD));
    drop(loading);
    count(1);
    let rec = wait_record_where(addr, "the loading stream's disconnect", |record| {
        record.model_resolved.as_deref() == Some(SLOW_LOAD)
            && record.reason == Reason::ClientDisconnect
    });
    assert_fields(&rec, never_dispatched());
    assert_fields(
        &rec,
        json!({"reason": "client_disconnect", "disconnect_phase": "loading", "status": null,
               "queue_wait_ms": null, "model_load_ms": null, "model_resolved": SLOW_LOAD}),
    );
    assert!(rec.lease_at.is_some(), "{rec}");
    // The load goes on without the client; wait for it so the next steps see a quiet engine.
    poll_until(DEADLINE, "the slow model loaded", || {
        stack.status().loaded.as_deref() == Some(SLOW_LOAD)
    });

    // model_not_prepared: an uninstalled model is never launched.
    let refused = stack.chat(&chat_request(UNINSTALLED, false, "x", Value::Null));
    refused.expect_status(503);
    count(1);
    let rec = wait_record(addr, &id_of(&refused));
    assert_fields(&rec, never_admitted());
    assert_fields(
        &rec,
        json!({"reason": "model_not_prepared", "status": 503, "model_requested": UNINSTALLED,
               "model_resolved": UNINSTALLED, "response_bytes": refused.body.len()}),
    );

    // model_load_error: the start fails; then the cooldown refuses at once.
    let broken = stack.chat(&chat_request(BROKEN, false, "x", Value::Null));
    broken.expect_status(503);
    count(1);
    let rec = wait_record(addr, &id_of(&broken));
    assert_fields(&rec, never_dispatched());
    assert_fields(
        &rec,
        json!({"reason": "model_load_error", "status": 503, "model_resolved": BROKEN,
               "queue_wait_ms": null}),
    );
    let cooldown = stack.chat(&chat_request(BROKEN, false, "x", Value::Null));
    cooldown.expect_status(503);
    assert!(cooldown.header("retry-after").is_some(), "{cooldown}");
    count(1);
    let rec = wait_record(addr, &id_of(&cooldown));
    assert_fields(&rec, never_dispatched());
    assert_fields(&rec, json!({"reason": "model_load_error", "status": 503}));

    // invalid_request: each router-side rejection, with the client's status.
    for (body, status, stream) in [
        (b"{\"model\":".to_vec(), 400, false),
        (b"[]".to_vec(), 400, false),
        (
            chat_request("no-such-model", true, "x", Value::Null)
                .to_string()
                .into_bytes(),
            404,
            true,
        ),
        (
            chat_request(A, false, &"x".repeat(5000), Value::Null)
                .to_string()
                .into_bytes(),
            413,
            false,
        ),
        (
            br#"{"model":"flash-a","stream":"yes","messages":[]}"#.to_vec(),
            400,
            false,
        ),
        (
            br#"{"model":"flash-a","service_tier":"turbo","messages":[]}"#.to_vec(),
            400,
            false,
        ),
    ] {
        let response = http::request(
            addr,
            "POST",
            CHAT_PATH,
            &[("content-type", "application/json")],
            &body,
        );
        response.expect_status(status);
        count(1);
        let rec = wait_record(addr, &id_of(&response));
        assert_fields(&rec, never_admitted());
        assert_fields(
            &rec,
            json!({"reason": "invalid_request", "status": status, "stream": stream,
                   "response_bytes": response.body.len(), "disconnect_phase": null}),
        );
        if status == 404 {
            assert_fields(
                &rec,
                json!({"model_requested": null, "model_resolved": null, "upstream_model": null}),
            );
        }
    }

    // routing_off: off, then a request; on again.
    stack.control().off(false).assert_ok();
    let off = stack.chat(&chat_request(A, false, "x", Value::Null));
    off.expect_status(503);
    count(1);
    let rec = wait_record(addr, &id_of(&off));
    assert_fields(&rec, never_admitted());
    assert_fields(&rec, json!({"reason": "routing_off", "status": 503}));
    stack.control().on(Some(A)).assert_ok();

    // routing_off: `off --now` interrupts a stream that is generating.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 400, "token_delay_ms": 20}),
    ));
    stream.frames_until(DEADLINE, "the first frame", http::Frame::is_data);
    stack.control().off(true).assert_ok();
    let frames = stream.remaining_frames(DEADLINE);
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("error"),
        "{frames:#?}"
    );
    count(1);
    let rec = wait_record(addr, stream.header("x-strata-request-id").unwrap());
    assert_fields(
        &rec,
        json!({"reason": "routing_off", "status": 200, "upstream_status": 200,
               "success": false, "disconnect_phase": null}),
    );
    stack.control().on(Some(A)).assert_ok();

    let records = wait_records(addr, expected_records);
    let instance = page(addr, "").instance_id().to_owned();
    assert_all_schema(&records, &instance);
    stack.stop();
}

/// What the spec says about admission for a request whose model load fails: it was admitted
/// ("lease_at: admission before backend loading starts"), the admission found no loaded model
/// ("model_switch: ... Includes cold starts. False before admission."), and the load's work is
/// measured ("model_load_ms: backend stop/start/readiness work, including cleanup on failed
/// starts").
#[test]
fn a_failed_load_is_an_admitted_switch_with_a_load_duration() {
    let config = ConfigBuilder::new("acct-loadfail")
        .model(ModelSpec::new(BROKEN).start_failure("exit").load_ms(300))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    let broken = stack.chat(&chat_request(BROKEN, false, "x", Value::Null));
    broken.expect_status(503);
    let rec = wait_record(addr, &id_of(&broken));
    assert_schema(&rec);
    assert_fields(
        &rec,
        json!({"reason": "model_load_error", "queue_wait_ms": null}),
    );
    assert!(rec.lease_at.is_some(), "admitted before the load: {rec}");
    assert!(rec.model_switch, "a cold start: {rec}");
    assert!(
        rec.model_load_ms.is_some_and(|ms| ms >= 300),
        "the failed start's work: {rec}"
    );
    stack.stop();
}

/// The backend process dies in the middle of a stream (`mid_stream: "die"`). Strata's bodies
/// are close-delimited (HTTP/1.0, `Connection: close`), so the EOF itself looks clean, but the
/// stream stopped without its final frame (no `finish_reason`, no usage) and without the
/// `data: [DONE]` Strata always sends, even after an in-band error. The spec: "Upstream errors
/// after those headers become event: error frames with error.status and no success [DONE]",
/// and `success` is "true only for completed responses ... and no detected failure".
#[test]
fn a_backend_that_dies_mid_stream_is_an_upstream_error() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("acct-die")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let addr = stack.addr();
        let mut stream = stack.open_chat(&chat_request(
            A,
            true,
            "x",
            json!({"mid_stream": "die", "mid_stream_after": 2, "tokens": 5}),
        ));
        let id = stream.header("x-strata-request-id").unwrap().to_owned();
        if wait_first {
            // The router's own SSE headers went out: the failure is one event: error frame.
            let frames = stream.remaining_frames(DEADLINE);
            assert!(!frames.iter().any(http::Frame::is_done), "{frames:#?}");
            assert_eq!(
                frames.last().unwrap().event.as_deref(),
                Some("error"),
                "the client learns the stream failed: {frames:#?}"
            );
        } else {
            // The backend's headers passed through: the transfer ends with a transport error.
            assert!(
                stream.try_read_to_end(DEADLINE).is_err(),
                "a transport error"
            );
        }
        let rec = wait_record(addr, &id);
        assert_schema(&rec);
        assert_fields(
            &rec,
            json!({"reason": "upstream_error", "success": false, "status": 200,
                   "upstream_status": 200, "finish_reason": null, "disconnect_phase": null}),
        );
        assert!(rec.first_token_at.is_some(), "two deltas came first: {rec}");
        stack.stop();
    }
}

#[test]
fn legacy_reasons() {
    let config = ConfigBuilder::new("acct-legacy")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(false)
        .set("queue_ms", 300)
        .set("response_ms", 1500)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    // Load A first: in legacy mode queue_ms also bounds a cold start, which a loaded machine
    // can stretch past 300 ms.
    stack.control().on(Some(A)).assert_ok();

    // completed, stream, legacy: the backend's own headers pass through.
    let mut stream = stack.open_chat(&chat_request(A, true, "x", json!({"tokens": 3})));
    stream.remaining_frames(DEADLINE);
    let rec = wait_record(addr, stream.header("x-strata-request-id").unwrap());
    assert_fields(
        &rec,
        json!({"reason": "completed", "success": true, "status": 200, "upstream_status": 200,
               "stream": true, "completion_tokens": 3, "response_bytes": stream.received_len()}),
    );
    assert!(
        rec.first_token_at.is_some() && rec.generation_ms.is_some(),
        "{rec}"
    );

    // timeout before the headers: 504, no upstream status.
    let late = stack.chat(&chat_request(
        A,
        false,
        "x",
        json!({"header_delay_ms": 4000}),
    ));
    late.expect_status(504);
    let rec = wait_record(addr, &id_of(&late));
    assert_fields(&rec, never_dispatched());
    assert_fields(&rec, json!({"reason": "timeout", "status": 504}));
    assert!(
        rec.lease_at.is_some() && rec.queue_wait_ms.is_some(),
        "{rec}"
    );
    assert!(rec.total_ms >= 1500, "{rec}");

    // timeout after the headers: the transfer ends with a transport error.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 400, "token_delay_ms": 20}),
    ));
    assert!(
        stream.try_read_to_end(DEADLINE).is_err(),
        "a transport error"
    );
    let rec = wait_record(addr, stream.header("x-strata-request-id").unwrap());
    assert_fields(
        &rec,
        json!({"reason": "timeout", "success": false, "status": 200, "upstream_status": 200,
               "disconnect_phase": null}),
    );
    assert!(rec.first_token_at.is_some(), "{rec}");

    // queue_timeout: B waits for A's lease longer than queue_ms.
    let mut blocker = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 50, "token_delay_ms": 20}),
    ));
    blocker.frames_until(DEADLINE, "the first frame", http::Frame::is_data);
    let expired = stack.chat(&chat_request(B, false, "x", Value::Null));
    expired.expect_status(504);
    let rec = wait_record(addr, &id_of(&expired));
    assert_fields(&rec, never_admitted());
    assert_fields(
        &rec,
        json!({"reason": "queue_timeout", "status": 504, "model_resolved": B,
               "in_flight_at_arrival": 1}),
    );
    assert!(rec.total_ms >= 300, "{rec}");
    // However the blocker ends (a slow machine can take it past response_ms), it is one more
    // record.
    blocker.disconnect();
    let records = wait_records(addr, 5);
    let instance = page(addr, "").instance_id().to_owned();
    assert_all_schema(&records, &instance);
    stack.stop();
}

#[test]
fn legacy_queue_full() {
    let config = ConfigBuilder::new("acct-full")
        .model(ModelSpec::new(A))
        .wait_when_busy(false)
        .set("max_pending", 1)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    let mut active = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 100, "token_delay_ms": 20}),
    ));
    active.frames_until(DEADLINE, "the first frame", http::Frame::is_data);
    let full = stack.chat(&chat_request(A, false, "x", Value::Null));
    full.expect_status(429);
    let rec = wait_record(addr, &id_of(&full));
    assert_schema(&rec);
    assert_fields(&rec, never_admitted());
    assert_fields(
        &rec,
        json!({"reason": "queue_full", "status": 429, "model_resolved": A,
               "in_flight_at_arrival": 1, "response_bytes": full.body.len()}),
    );
    active.disconnect();
    stack.stop();
}

/// `shutdown`: a request that arrives while the supervisor drains (refused at once), and, once
/// a second signal forces the drain, the request that was still waiting and the stream that was
/// still running (both interrupted in band). Every record is in the ring during the drain and in
/// the file after the stop.
#[test]
fn shutdown_reason() {
    let mut config = ConfigBuilder::new("acct-shutdown")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let log = with_request_log(&mut config, json!({}));
    let _dir = config.dir.clone();
    let mut stack = Stack::start(config);
    let addr = stack.addr();

    // A stream keeps the drain going; B waits behind it.
    let mut active = stack.open_chat(&chat_request(
        A,
        true,
        "x",
        json!({"tokens": 400, "token_delay_ms": 20}),
    ));
    let active_id = active.header("x-strata-request-id").unwrap().to_owned();
    active.frames_until(DEADLINE, "the first frame", http::Frame::is_data);
    let mut waiting = stack.open_chat(&chat_request(B, true, "x", Value::Null));
    let waiting_id = waiting.header("x-strata-request-id").unwrap().to_owned();
    poll_until(DEADLINE, "B queued", || {
        stack.metrics().queue_depth == Some(1)
    });

    stack.supervisor().terminate();
    poll_until(DEADLINE, "the supervisor to drain", || {
        stack.health().draining == Some(true)
    });
    let refused = stack.chat(&chat_request(A, false, "x", Value::Null));
    refused.expect_status(503);
    assert_eq!(refused.error().code, "shutting_down");
    let rec = wait_record(addr, &id_of(&refused));
    assert_schema(&rec);
    assert_fields(&rec, never_admitted());
    assert_fields(&rec, json!({"reason": "shutdown", "status": 503}));

    // The second signal forces the drain: the waiting request and the stream end in band.
    stack.supervisor().daemon().kill(Signal::SIGTERM);
    let frames = waiting.remaining_frames(DEADLINE);
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("error"),
        "{frames:#?}"
    );
    let frames = active.remaining_frames(DEADLINE);
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"), "{frames:#?}");
    assert_eq!(last.error().code, "shutting_down");

    // A forced shutdown kills the backend at once, so the supervisor may be gone before
    // `/requests` could be asked: the records are read from the file it wrote before exiting.
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    let lines = wait_jsonl_within(&log, 3, Duration::from_secs(1));
    let records: Vec<Record> = lines.iter().map(|line| Record::new(line)).collect();
    let reasons: Vec<Reason> = records.iter().map(|record| record.reason).collect();
    assert_eq!(reasons, [Reason::Shutdown; 3]);
    let rec = by_request_id(&records, &waiting_id);
    assert_schema(rec);
    assert_fields(rec, never_admitted());
    assert_fields(
        rec,
        json!({"reason": "shutdown", "status": 200, "stream": true}),
    );
    let rec = by_request_id(&records, &active_id);
    assert_fields(rec, json!({"reason": "shutdown", "status": 200}));
    // The proxy lost its supervisor; stop it.
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}
