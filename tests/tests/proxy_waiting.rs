//! Wait-first streaming clients through the real `strata-proxy`: `200` and SSE headers at once,
//! `: keep-alive` comments while a slow load runs, and a failure after the headers as one
//! `event: error` frame with `error.status` and no `[DONE]`; non-streaming requests keep plain
//! HTTP statuses.

use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::http::{Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec};

const A: &str = "flash-a";
const B: &str = "flash-b";

/// The one `event: error` frame a failed wait-first stream ends with, checked: the last frame,
/// with `error.status` = `status`, and no `[DONE]` anywhere.
fn assert_ends_with_error(frames: &[Frame], status: u16, code: &str) {
    let last = frames.last().unwrap_or_else(|| panic!("no frames at all"));
    assert_eq!(last.event.as_deref(), Some("error"), "{frames:#?}");
    let error = last.json();
    assert_eq!(error["error"]["status"], json!(status), "{error}");
    assert_eq!(error["error"]["code"], code, "{error}");
    assert!(error["error"]["message"].is_string(), "{error}");
    assert!(
        frames.iter().all(|frame| !frame.is_done()),
        "no [DONE] after a failure: {frames:#?}"
    );
    assert_eq!(
        frames
            .iter()
            .filter(|frame| frame.event.as_deref() == Some("error"))
            .count(),
        1,
        "exactly one error frame: {frames:#?}"
    );
}

/// A 6 s load (the keepalive interval is 5 s): the client gets its headers at once, then at
/// least one `: keep-alive` comment before the first data frame, then the whole answer.
#[test]
fn keepalive_comments_while_a_slow_load_runs() {
    let config = ConfigBuilder::new("keepalive")
        .model(ModelSpec::new(A).load_ms(6000))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let started = Instant::now();
    let mut stream = stack.open_chat(&chat_body(A, true));
    let headers_after = started.elapsed();
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    assert_eq!(stream.header("x-strata-concrete-model"), Some(A));
    assert_eq!(stream.header("x-strata-service-tier"), Some("default"));
    assert!(
        headers_after < Duration::from_secs(3),
        "headers must come before the load ends, took {headers_after:?}"
    );
    let before_data = stream.frames_until(Duration::from_secs(30), "the first data frame", |f| {
        f.is_data()
    });
    let first_data_after = started.elapsed();
    let keepalives = before_data.iter().filter(|f| f.is_keepalive()).count();
    assert!(
        keepalives >= 1,
        "expected a keep-alive comment during the 6 s load: {before_data:#?}"
    );
    assert!(
        before_data[..before_data.len() - 1]
            .iter()
            .all(Frame::is_keepalive),
        "only comments before the first data frame: {before_data:#?}"
    );
    assert!(
        first_data_after >= Duration::from_secs(5),
        "the load takes 6 s, yet data came after {first_data_after:?}"
    );
    let rest = stream.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done), "{rest:#?}");
    assert_eq!(stack.fake_log().starts().len(), 1);
    stack.stop();
}

/// The load fails after the stream's headers went out: one `event: error` frame with
/// `error.status` 503 and no `[DONE]`. A non-streaming request on a failing load gets a plain
/// 503 JSON answer instead. (`cooldown_ms: 0`, so each request tries its own load.)
#[test]
fn a_failed_load_after_headers_is_an_error_event_and_non_stream_keeps_503() {
    let config = ConfigBuilder::new("loadfail")
        .model(ModelSpec::new(A).load_ms(300).start_failure("exit"))
        .cooldown_ms(0)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let log = stack.fake_log();

    let mut stream = stack.open_chat(&chat_body(A, true));
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    let frames = stream.remaining_frames(DEADLINE);
    assert_ends_with_error(&frames, 503, "model_load_error");
    assert_eq!(log.starts().len(), 1, "{}", log.dump());

    let response = stack.chat(&chat_body(A, false));
    assert_eq!(response.status, 503, "{response}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(response.json()["error"]["code"], "model_load_error");
    assert!(response.header("x-strata-request-id").is_some());
    assert_eq!(log.starts().len(), 2, "{}", log.dump());
    assert!(stack.status()["loaded"].is_null());
    stack.stop();
}

/// During the cooldown after a failed start, streams fail at once in-band and non-streaming
/// requests get 503 with `Retry-After`, without another launch.
#[test]
fn cooldown_failures_in_band_and_with_retry_after() {
    let config = ConfigBuilder::new("cooldown")
        .model(ModelSpec::new(A).start_failure("exit"))
        .cooldown_ms(30_000)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let first = stack.chat(&chat_body(A, false));
    assert_eq!(first.status, 503, "{first}");
    let mut stream = stack.open_chat(&chat_body(A, true));
    let frames = stream.remaining_frames(DEADLINE);
    assert_ends_with_error(&frames, 503, "model_load_error");
    let again = stack.chat(&chat_body(A, false));
    assert_eq!(again.status, 503, "{again}");
    let retry: u64 = again
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After during the cooldown: {again}"))
        .parse()
        .expect("Retry-After in seconds");
    assert!((1..=30).contains(&retry), "{again}");
    assert_eq!(
        stack.fake_log().starts().len(),
        1,
        "no launch during cooldown"
    );
    stack.stop();
}

/// A backend error status after the early headers: one `event: error` frame carrying the
/// backend's status; the same request without streaming gets the backend's status and body.
#[test]
fn backend_error_status_after_headers_is_an_error_event() {
    let config = ConfigBuilder::new("upstream-err")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    for status in [409u16, 500] {
        let mut body = chat_body(A, true);
        body["fake"] = json!({"error_status": status, "header_delay_ms": 200});
        let mut stream = stack.open_chat(&body);
        assert_eq!(stream.status, 200);
        let frames = stream.remaining_frames(DEADLINE);
        assert_ends_with_error(&frames, status, "upstream_error");

        body["stream"] = json!(false);
        let response = stack.chat(&body);
        assert_eq!(response.status, status, "{response}");
        assert!(
            response.json()["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&status.to_string())),
            "the backend's own error body: {response}"
        );
    }
    stack.stop();
}

/// A streaming request queued behind another model's active stream gets its headers (and the
/// tier header) at once, and its data after the other stream ends and its model loads.
#[test]
fn a_queued_stream_gets_headers_at_once_and_data_after_the_switch() {
    let config = ConfigBuilder::new("queued")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 6, "token_delay_ms": 200});
    let mut holder = stack.open_chat(&body);
    holder.frames_until(DEADLINE, "A's first data frame", Frame::is_data);

    let mut body = chat_body(B, true);
    body["service_tier"] = json!("flex");
    let mut queued = stack.open_chat(&body);
    assert_eq!(queued.status, 200);
    assert_eq!(queued.header("x-strata-service-tier"), Some("flex"));
    assert_eq!(queued.header("x-strata-concrete-model"), Some(B));
    strata_e2e::poll_until(DEADLINE, "B waiting in the supervisor", || {
        stack.status()["waiting_requests"] == json!(1)
    });
    assert!(
        stack
            .fake_log()
            .starts_for(&stack.config().upstream(B))
            .is_empty()
    );
    let rest = holder.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done));
    let frames = queued.remaining_frames(DEADLINE);
    assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
    assert_eq!(frames[0].json()["model"], json!(stack.config().upstream(B)));
    stack.stop();
}
