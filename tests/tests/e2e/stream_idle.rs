//! `stream_idle_ms` end to end (docs/http-api.md#silent-streams-stream_idle_ms): a leased
//! streaming response whose
//! backend sends nothing for that long ends with one in-band `event: error` (`error.status`
//! 504, code `timeout`), or a real 504 while a wait-first head is still held; either way
//! the record says `reason: "timeout"` and the lease is free for the next request at once.
//! The backend's own keep-alive comments count as bytes; a non-streaming answer, silent
//! until it is whole, is not bounded by it. The stalls are the fake's `token_delay_ms` (its
//! engine's heartbeat comes only after 10 s of silence, as Strata's) and `header_delay_ms`;
//! the comments are its prompt-progress lines (`prefill_ms`, `prompt_progress`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::accounting::{assert_fields, chat_request, wait_record};
use strata_e2e::http::Frame;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec};

const A: &str = "flash-a";
const IDLE_MS: u64 = 1500;

/// Wait-first, one dispatch slot (so a lease that was not freed would hold the next request),
/// no response deadline: only `stream_idle_ms` can end a silent stream.
fn stack(tag: &str) -> Stack {
    let config = ConfigBuilder::new(tag)
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .set("max_pending", 1)
        .set("response_ms", 0)
        .set("stream_idle_ms", IDLE_MS)
        .build();
    Stack::start(config)
}

fn body(tag: &str, stream: bool, fake: Value) -> Value {
    chat_request(A, stream, tag, fake)
}

/// A quick request after a failed one: served at once, so the lease was freed.
fn the_slot_is_free(stack: &Stack) {
    let started = Instant::now();
    let next = stack.chat(&body("next", false, Value::Null));
    assert_eq!(next.status, 200, "{next}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the next request waited {:?}",
        started.elapsed()
    );
}

#[test]
fn a_stream_that_goes_silent_ends_at_stream_idle_ms_with_its_record() {
    let stack = stack("idle-stall");
    // The role frame goes out at once, then 30 s of silence (no comments either).
    let mut stream = stack.open_chat(&body(
        "stall",
        true,
        json!({"tokens": 2, "token_delay_ms": 30_000}),
    ));
    assert_eq!(stream.status, 200);
    let id = stream.header("x-strata-request-id").unwrap().to_owned();
    stream.frames_until(DEADLINE, "the first data frame", Frame::is_data);
    let silent_from = Instant::now();
    let rest = stream.remaining_frames(DEADLINE);
    let ended_after = silent_from.elapsed();
    let last = rest
        .last()
        .unwrap_or_else(|| panic!("no frames after the first"));
    assert_eq!(last.event.as_deref(), Some("error"), "{rest:#?}");
    let error = last.error();
    assert_eq!(error.status, Some(504), "{error:?}");
    assert_eq!(error.code, "timeout", "{error:?}");
    assert!(rest.iter().all(|frame| !frame.is_done()), "{rest:#?}");
    assert!(
        ended_after >= Duration::from_millis(IDLE_MS - 200)
            && ended_after < Duration::from_secs(10),
        "ended {ended_after:?} after the last backend byte"
    );
    let record = wait_record(stack.addr(), &id);
    assert_fields(
        &record,
        json!({"reason": "timeout", "status": 200, "stream": true}),
    );
    the_slot_is_free(&stack);
    stack.stop();
}

#[test]
fn a_backend_silent_before_its_headers_gets_a_real_504() {
    let stack = stack("idle-head");
    let started = Instant::now();
    let response = stack.chat(&body("head", true, json!({"header_delay_ms": 30_000})));
    assert_eq!(response.status, 504, "{response}");
    assert_eq!(response.error().code, "timeout", "{response}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let record = wait_record(stack.addr(), response.request_id());
    assert_fields(&record, json!({"reason": "timeout", "status": 504}));
    the_slot_is_free(&stack);
    stack.stop();
}

#[test]
fn backend_comments_keep_a_slow_stream_alive_and_non_streams_are_not_bounded() {
    let stack = stack("idle-alive");
    // A 2.5 s prompt read reported in 5 progress lines, each a backend comment (one every
    // 0.5 s): never 1.5 s without a byte.
    let slow = stack.chat(&body(
        "slow",
        true,
        json!({"tokens": 2, "prefill_ms": 2500, "prompt_progress": 5}),
    ));
    assert_eq!(slow.status, 200, "{slow}");
    assert!(slow.frames().last().is_some_and(Frame::is_done), "{slow}");
    // A non-streaming answer is silent for its whole 3 s generation.
    let whole = stack.chat(&body(
        "whole",
        false,
        json!({"tokens": 3, "token_delay_ms": 1000}),
    ));
    assert_eq!(whole.status, 200, "{whole}");
    let record = wait_record(stack.addr(), whole.request_id());
    assert_fields(&record, json!({"reason": "completed"}));
    stack.stop();
}
