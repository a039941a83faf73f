//! Wait-first streaming clients through the real `strata-proxy`: `200` and SSE headers held
//! until the first byte or the first keepalive (4 s after arrival), a failure before that as a
//! real HTTP status, `: keep-alive` comments while a slow load runs, and a failure after the
//! headers as one `event: error` frame with `error.status` and no `[DONE]`.

use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::http::{self, Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, concrete_model};
use strata_protocol::config::ModelStatus;
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const B: &str = "flash-b";

/// The one `event: error` frame a failed wait-first stream ends with, checked: the last frame,
/// with `error.status` = `status`, and no `[DONE]` anywhere.
fn assert_ends_with_error(frames: &[Frame], status: u16, code: &str) {
    let last = frames.last().unwrap_or_else(|| panic!("no frames at all"));
    assert_eq!(last.event.as_deref(), Some("error"), "{frames:#?}");
    let error = last.error();
    assert_eq!(error.status, Some(status), "{error:?}");
    assert_eq!(error.code, code, "{error:?}");
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

/// A 6 s load: the headers are held until the first keepalive is due, 4 s after arrival, and
/// go out with that `: keep-alive` comment, before the first data frame; then the whole answer.
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
        headers_after >= Duration::from_secs(4),
        "headers are held until the first keepalive is due, came after {headers_after:?}"
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
        before_data.first().is_some_and(Frame::is_keepalive),
        "the head goes out with the first keepalive: {before_data:#?}"
    );
    assert!(
        first_data_after > headers_after,
        "the head came before the load ended ({headers_after:?}, data {first_data_after:?})"
    );
    // The comments say why the stream waits: the model's load, counted against startup_ms.
    let startup_s = stack.config().json["startup_ms"]
        .as_u64()
        .unwrap_or(120_000)
        .div_ceil(1000);
    for frame in &before_data[..before_data.len() - 1] {
        let line = frame
            .comment()
            .unwrap_or_else(|| panic!("one line: {frame:?}"));
        let seconds = line
            .strip_prefix(&format!("loading {A}, "))
            .and_then(|rest| rest.strip_suffix(&format!("s of {startup_s}s")))
            .unwrap_or_else(|| panic!("a load progress comment: {line:?}"));
        let seconds: u64 = seconds.parse().expect("whole seconds");
        assert!((3..=7).contains(&seconds), "{line:?}");
    }
    let rest = stream.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done), "{rest:#?}");
    assert_eq!(stack.fake_log().starts().len(), 1);
    stack.stop();
}

/// A stream queued behind another model's lease says so, in one comment line at a time,
/// on the keepalive clock (at least every 5 s), and every comment byte is in the record's
/// `response_bytes`.
#[test]
fn a_queued_stream_is_told_what_it_waits_for_on_the_keepalive_clock() {
    let config = ConfigBuilder::new("progress")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    // A's lease holds off the switch to B for about 12 s.
    let mut busy_body = chat_body(A, true);
    busy_body["fake"] = json!({"tokens": 120, "token_delay_ms": 100});
    let mut busy = stack.open_chat(&busy_body);
    busy.frames_until(DEADLINE, "A's first data", Frame::is_data);
    let mut waiting_body = chat_body(B, true);
    waiting_body["service_tier"] = json!("priority");
    let mut waiting = stack.open_chat(&waiting_body);
    let head_at = Instant::now();
    let mut comments = Vec::new();
    let mut last = head_at;
    loop {
        let frames = waiting.frames_until(Duration::from_secs(30), "a frame", |_| true);
        let frame = frames.last().unwrap().clone();
        let now = Instant::now();
        if frame.is_data() {
            break;
        }
        let line = frame
            .comment()
            .unwrap_or_else(|| panic!("a one-line comment: {frame:?}"))
            .to_owned();
        if line.starts_with("queued") {
            assert!(
                now - last < Duration::from_millis(6500),
                "comments at least every 5 s: {:?} after the last",
                now - last
            );
        }
        last = now;
        comments.push(line);
    }
    let queued: Vec<&String> = comments
        .iter()
        .filter(|line| line.starts_with(&format!("queued for {B} (priority), ")))
        .collect();
    assert!(queued.len() >= 2, "{comments:#?}");
    for line in &comments {
        assert!(
            line.starts_with(&format!("queued for {B} (priority), "))
                || line.starts_with(&format!("stopping the previous model to load {B}"))
                || line.starts_with(&format!("loading {B}, "))
                || line.starts_with(&format!("waiting for {B} to answer")),
            "{line:?} in {comments:#?}"
        );
        assert!(line.ends_with('s'), "{line:?}");
    }
    let rest = waiting.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done), "{rest:#?}");
    let id = waiting.header("x-strata-request-id").unwrap().to_owned();
    let total = waiting.received_len();
    drop(busy);
    let record = strata_e2e::accounting::wait_record(stack.addr(), &id);
    assert_eq!(record.response_bytes, total, "{record}");
    stack.stop();
}

/// A load that fails within the header hold gives a stream the same real 503 a
/// non-streaming request gets (with the retry hints); one that fails after the head went out
/// with the first keepalive ends the stream with one `event: error` frame with `error.status`
/// 503 and no `[DONE]`. (`cooldown_ms: 0`, so each request tries its own load.)
#[test]
fn a_failed_load_is_a_real_503_within_the_hold_and_an_error_event_after_it() {
    let config = ConfigBuilder::new("loadfail")
        .model(ModelSpec::new(A).load_ms(300).start_failure("exit"))
        .model(ModelSpec::new(B).load_ms(5600).start_failure("exit"))
        .cooldown_ms(0)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let log = stack.fake_log();

    for stream in [true, false] {
        let response = stack.chat(&chat_body(A, stream));
        assert_eq!(response.status, 503, "stream {stream}: {response}");
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(response.error().code, "model_load_error");
        assert!(response.header("x-strata-request-id").is_some());
        // Even with no cooldown configured: come back in a second, and not automatically.
        assert_eq!(response.header("retry-after"), Some("1"), "{response}");
        assert_eq!(
            response.header("x-should-retry"),
            Some("false"),
            "{response}"
        );
    }
    assert_eq!(log.starts().len(), 2, "{}", log.dump());

    let mut stream = stack.open_chat(&chat_body(B, true));
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    let frames = stream.remaining_frames(DEADLINE);
    assert!(
        frames.first().is_some_and(Frame::is_keepalive),
        "{frames:#?}"
    );
    assert_ends_with_error(&frames, 503, "model_load_error");
    assert_eq!(log.starts().len(), 3, "{}", log.dump());
    assert!(stack.status().loaded.is_none());
    stack.stop();
}

/// During the cooldown after a failed start, streams fail at once in-band and non-streaming
/// requests get 503 with `Retry-After`, without another launch. The 503 body and the model's
/// `/v1/models` entry say why (the supervisor's generic cause) and how long the cooldown
/// still runs; the cooldown is the broken model's only, so a healthy one loads meanwhile.
#[test]
fn cooldown_failures_get_a_real_status_and_retry_after() {
    let config = ConfigBuilder::new("cooldown")
        .model(ModelSpec::new(A).start_failure("exit"))
        .model(ModelSpec::new(B))
        .cooldown_ms(30_000)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let first = stack.chat(&chat_body(A, false));
    assert_eq!(first.status, 503, "{first}");
    // Refused at once (cooldown), so a wait-first stream gets the real status too: its SSE
    // headers wait for the supervisor's first answer.
    let stream = stack.chat(&chat_body(A, true));
    assert_eq!(stream.status, 503, "{stream}");
    assert_eq!(stream.error().code, "model_load_error", "{stream}");
    assert!(stream.header("retry-after").is_some(), "{stream}");
    assert_eq!(stream.header("x-should-retry"), Some("false"), "{stream}");
    let again = stack.chat(&chat_body(A, false));
    assert_eq!(again.status, 503, "{again}");
    let retry: u64 = again
        .header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After during the cooldown: {again}"))
        .parse()
        .expect("Retry-After in seconds");
    assert!((1..=30).contains(&retry), "{again}");
    assert_eq!(again.header("x-should-retry"), Some("false"), "{again}");
    let cause = "backend exited during startup (exit code 3)";
    for failed in [&first, &again] {
        let error = failed.error();
        assert_eq!(error.last_error.as_deref(), Some(cause), "{failed}");
        assert!(
            error
                .cooldown_remaining_ms
                .is_some_and(|ms| ms > 0 && ms <= 30_000),
            "{failed}"
        );
        // The fixed client message stays as it was.
        assert!(!error.message.contains("exit"), "{failed}");
    }
    assert_eq!(
        stack.fake_log().starts().len(),
        1,
        "no launch during cooldown"
    );
    let entry = |id: &str| concrete_model(&stack.models(), id).clone();
    let broken = entry(A);
    assert_eq!(broken.last_error.as_deref(), Some(cause), "{broken:?}");
    let left = broken
        .cooldown_remaining_ms
        .filter(|ms| *ms > 0 && *ms <= 30_000)
        .unwrap_or_else(|| panic!("A's cooldown runs: {broken:?}"));
    // A healthy model loads during A's cooldown, and its entry has no cause.
    let healthy = stack.chat(&chat_body(B, false));
    assert_eq!(healthy.status, 200, "{healthy}");
    let healthy = entry(B);
    assert_eq!(healthy.status, ModelStatus::Loaded, "{healthy:?}");
    assert_eq!(healthy.last_error, None, "{healthy:?}");
    assert_eq!(healthy.cooldown_remaining_ms, None, "{healthy:?}");
    // A's cause stays, its cooldown counts down.
    let broken = entry(A);
    assert_eq!(broken.last_error.as_deref(), Some(cause), "{broken:?}");
    assert!(
        broken.cooldown_remaining_ms.is_some_and(|ms| ms <= left),
        "{broken:?}"
    );
    stack.stop();
}

/// A backend error status that arrives within the header hold reaches a stream exactly as it
/// reaches a non-streaming request (status and body); after the head went out, it becomes one
/// `event: error` frame carrying the backend's status.
#[test]
fn backend_error_status_is_passed_through_within_the_hold_and_an_error_event_after_it() {
    let config = ConfigBuilder::new("upstream-err")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    for status in [409u16, 500] {
        // Within the hold a stream gets exactly what a non-streaming request gets: the
        // backend's status and its own error body.
        for stream in [true, false] {
            let mut body = chat_body(A, stream);
            body["fake"] = json!({"error_status": status, "header_delay_ms": 200});
            let response = stack.chat(&body);
            assert_eq!(response.status, status, "stream {stream}: {response}");
            // The fake backend's document, passed through: not the router's to type.
            assert!(
                response.json()["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(&status.to_string())),
                "the backend's own error body: {response}"
            );
        }
    }
    // After the head went out with the first keepalive: one `event: error` frame.
    let mut body = chat_body(A, true);
    body["fake"] = json!({"error_status": 409, "header_delay_ms": 5400});
    let mut stream = stack.open_chat(&body);
    assert_eq!(stream.status, 200);
    let frames = stream.remaining_frames(DEADLINE);
    assert!(
        frames.first().is_some_and(Frame::is_keepalive),
        "{frames:#?}"
    );
    assert_ends_with_error(&frames, 409, "upstream_error");
    stack.stop();
}

/// A streaming request queued behind another model's active stream waits with its head held,
/// then gets its headers (with the tier header) together with its first data once the other
/// stream ends and its model loads.
#[test]
fn a_queued_stream_gets_its_headers_with_its_first_data_after_the_switch() {
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
    let queued = http::send_chat(stack.addr(), &body);
    strata_e2e::poll_until(DEADLINE, "B waiting in the supervisor", || {
        stack.status().waiting_requests == 1
    });
    assert!(
        stack
            .fake_log()
            .starts_for(&stack.config().upstream(B))
            .is_empty()
    );
    let rest = holder.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done));
    // A finished in about a second, so B's first data came before its first keepalive was due:
    // the head went out with it.
    let mut queued = queued.into_stream(DEADLINE);
    assert_eq!(queued.status, 200);
    assert_eq!(queued.header("x-strata-service-tier"), Some("flex"));
    assert_eq!(queued.header("x-strata-concrete-model"), Some(B));
    let frames = queued.remaining_frames(DEADLINE);
    assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
    assert!(frames[0].is_data(), "no keepalive before it: {frames:#?}");
    assert_eq!(frames[0].json()["model"], json!(stack.config().upstream(B)));
    stack.stop();
}

/// Reads a stream to its end: the frames, and how it ended (`Err` for a transport error).
fn read_all(stream: &mut strata_e2e::http::Stream) -> (Vec<Frame>, std::io::Result<()>) {
    let mut frames = Vec::new();
    loop {
        match stream.try_next_frame(DEADLINE) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return (frames, Ok(())),
            Err(err) => return (frames, Err(err)),
        }
    }
}

/// The fake's `mid_stream: "die"` after two deltas: the backend process exits mid-stream.
fn dying_stream_body() -> serde_json::Value {
    let mut body = chat_body(A, true);
    body["fake"] = json!({"mid_stream": "die", "tokens": 5, "mid_stream_after": 2});
    body
}

fn generated_frames(frames: &[Frame]) -> usize {
    frames
        .iter()
        .filter(|f| f.is_data() && f.event.is_none())
        .count()
}

/// The backend dies part-way through a stream. Wait-first: the client gets everything the
/// backend sent, then one `event: error` frame (502) and no `[DONE]`. Legacy: the transfer ends
/// with a transport error (the chunked body is cut off), never a clean end, and without
/// `[DONE]` or a router-made frame. A non-streaming request whose backend dies gets a 502. Once
/// the supervisor has noticed the death, the next request loads the model again and succeeds.
#[test]
fn a_backend_dying_mid_stream_ends_the_stream_as_an_error() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("die")
            .model(ModelSpec::new(A))
            .cooldown_ms(0)
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let log = stack.fake_log();
        let wait_dead = |starts: usize| {
            strata_e2e::poll_until(DEADLINE, "the supervisor to notice the death", || {
                stack.status().child_pid.is_none() && log.starts().len() == starts
            })
        };

        let mut stream = stack.open_chat(&dying_stream_body());
        assert_eq!(stream.status, 200);
        let (frames, ended) = read_all(&mut stream);
        if wait_first {
            assert!(ended.is_ok(), "{ended:?}");
            assert_eq!(
                generated_frames(&frames),
                3,
                "the role frame and two deltas: {frames:#?}"
            );
            assert_ends_with_error(&frames, 502, "upstream_error");
        } else {
            let err = ended.expect_err("legacy: a transport error, not a clean end");
            assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
            assert!(!frames.iter().any(Frame::is_done), "{frames:#?}");
            assert!(frames.iter().all(|f| f.event.is_none()), "{frames:#?}");
        }
        wait_dead(1);

        let mut body = chat_body(A, false);
        body["fake"] = json!({"mid_stream": "die"});
        let response = stack.chat(&body);
        assert_eq!(response.status, 502, "{response}");
        assert_eq!(response.error().code, "upstream_error");
        wait_dead(2);

        let mut stream = stack.open_chat(&chat_body(A, true));
        let frames = stream.remaining_frames(DEADLINE);
        assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
        assert_eq!(log.starts().len(), 3, "{}", log.dump());
        stack.stop();
    }
}

/// Legacy mode passes the backend's stream through; when the backend dies mid-stream, what it
/// sent before dying must still reach the client before the transport error. Repeated, since
/// the loss depends on timing.
#[test]
fn legacy_delivers_what_the_backend_sent_before_dying() {
    let config = ConfigBuilder::new("die-legacy")
        .model(ModelSpec::new(A))
        .cooldown_ms(0)
        .wait_when_busy(false)
        .build();
    let stack = Stack::start(config);
    let log = stack.fake_log();
    for round in 1..=15 {
        let mut stream = stack.open_chat(&dying_stream_body());
        let (frames, ended) = read_all(&mut stream);
        assert!(ended.is_err(), "round {round}: a transport error");
        assert_eq!(
            generated_frames(&frames),
            3,
            "round {round}: the role frame and the two deltas sent before the death ({ended:?}): {frames:#?}"
        );
        strata_e2e::poll_until(DEADLINE, "the supervisor to notice the death", || {
            stack.status().child_pid.is_none() && log.starts().len() == round
        });
    }
    stack.stop();
}

/// Keep-alive comments also flow while a stream is queued behind another model and while a
/// generation pauses: a 6 s gap between deltas of A (the fake's own comments, its engine's
/// heartbeat, come only after 10 s) gets a comment from the router at a frame boundary, and B,
/// queued behind A meanwhile, gets comments before its first data frame.
#[test]
fn keepalive_comments_while_queued_and_while_generating() {
    let config = ConfigBuilder::new("ka-gen")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 1, "token_delay_ms": 6000});
    let mut holder = stack.open_chat(&body);
    holder.frames_until(DEADLINE, "A's role frame", Frame::is_data);
    let mut queued = stack.open_chat(&chat_body(B, true));
    assert_eq!(queued.status, 200);

    let during_generation = holder.frames_until(DEADLINE, "A's delta", |frame| {
        frame.is_data()
            && frame.json()["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|text| !text.is_empty())
    });
    assert!(
        during_generation.iter().any(Frame::is_keepalive),
        "a comment during the 6 s pause: {during_generation:#?}"
    );
    let rest = holder.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done));
    assert_eq!(
        stack.fake_log().events_named("response_done")[0]["keepalives"],
        json!(0),
        "the comments were the router's, not the backend's"
    );

    let before_data = queued.frames_until(DEADLINE, "B's first data frame", Frame::is_data);
    assert!(
        before_data.iter().filter(|f| f.is_keepalive()).count() >= 1,
        "comments while queued: {before_data:#?}"
    );
    let rest = queued.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done));
    stack.stop();
}

/// The backend's own mid-stream error (Strata's `data: {"error":...}` then `data: [DONE]`):
/// in a stream the router committed it becomes the router's one `event: error` frame with
/// `error.status` 502 and no `[DONE]`, after the deltas that came before it; the record keeps
/// the backend's 200 and says `upstream_error`. In legacy mode, where the backend's own headers
/// went out, its frames pass unchanged.
#[test]
fn a_backend_error_frame_mid_stream_becomes_the_routers_error_event() {
    let body = || {
        let mut body = chat_body(A, true);
        body["fake"] = json!({"mid_stream": "error", "mid_stream_after": 2, "tokens": 4});
        body
    };
    for wait_first in [true, false] {
        let config = ConfigBuilder::new(if wait_first {
            "frame-wf"
        } else {
            "frame-legacy"
        })
        .model(ModelSpec::new(A))
        .wait_when_busy(wait_first)
        .build();
        let stack = Stack::start(config);
        let mut stream = stack.open_chat(&body());
        assert_eq!(stream.status, 200);
        let id = stream.header("x-strata-request-id").unwrap().to_owned();
        let frames = stream.remaining_frames(DEADLINE);
        let backend_error = |frame: &Frame| {
            frame.is_data()
                && frame.event.is_none()
                && frame.data.iter().any(|line| line.contains("\"error\""))
        };
        if wait_first {
            assert_ends_with_error(&frames, 502, "upstream_error");
            assert!(
                !frames.iter().any(backend_error),
                "the backend's error frame is not forwarded: {frames:#?}"
            );
            assert_eq!(
                generated_frames(&frames),
                3,
                "the role frame and the two deltas before it: {frames:#?}"
            );
        } else {
            assert!(frames.iter().any(backend_error), "{frames:#?}");
            assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
            assert!(
                frames.iter().all(|frame| frame.event.is_none()),
                "{frames:#?}"
            );
        }
        let record = strata_e2e::accounting::wait_record(stack.addr(), &id);
        assert_eq!(record.reason, Reason::UpstreamError, "{}", record.raw);
        assert_eq!(record.upstream_status, Some(200), "{}", record.raw);
        assert_eq!(record.status, Some(200), "{}", record.raw);
        stack.stop();
    }
}
