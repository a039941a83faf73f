//! The router's first promise, end to end: a request is never answered by a model other than
//! the one it was routed to, and no client can wedge the router by not reading.
//!
//! The setups follow the reproductions of the defects they guard against: wait-first mode with
//! `max_pending: 1`, one streaming client that stops reading (it holds the one dispatch slot),
//! and three more streams for the same model waiting behind it. Then the loaded model goes
//! away under them (an operator `off --now` followed by `on` of another model, or a supervisor
//! crash and restart followed by a request for another model) and the stalled client finally
//! lets go. The waiting requests must end with the spec's error, never reach the new model.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::accounting::{chat_request, wait_record};
use strata_e2e::http::{self, Conn, Frame, Stream};
use strata_e2e::net::wait_reader_stalled;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};
use strata_protocol::record::Reason;

const M1: &str = "flash-one";
const M2: &str = "flash-two";

/// A stream big enough (100 MB) that a client that does not read fills every buffer on the way:
/// 10 MB once fit into the kernel's autotuned socket buffers (up to 4 MB sending and 6 MB
/// receiving per socket), so the fake finished writing and no reader ever looked stalled. The
/// fake writes only as fast as the buffers drain, so the size costs nothing while stalled.
fn big_stream(model: &str) -> Value {
    chat_request(
        model,
        true,
        "big",
        json!({"tokens": 100000, "content_bytes": 1000}),
    )
}

/// Opens a streaming chat whose client reads the response headers and then nothing more, with
/// a small receive buffer so the proxy's side fills up quickly.
fn stalled_client(stack: &Stack, body: &Value) -> Stream {
    let addr = stack.addr();
    let mut conn = Conn::connect_with_recv_buffer(addr, 4096).expect("connect");
    conn.write(&http::request_bytes(
        addr,
        "POST",
        http::CHAT_PATH,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    ))
    .expect("send the request");
    let stream = conn.into_stream(DEADLINE);
    assert_eq!(stream.status, 200);
    stream
}

/// `active_leases + waiting_requests` from the supervisor's status: every request the router
/// has accepted for routing and not finished.
fn routed(stack: &Stack) -> usize {
    let status = stack.status();
    status.active_leases + status.waiting_requests
}

/// Chat requests the backend process `pid` received (the fake logs each one).
fn chat_requests_of(stack: &Stack, pid: u32) -> usize {
    stack
        .fake_log()
        .events_of(pid)
        .into_iter()
        .filter(|(_, event)| event["event"] == "request")
        .count()
}

/// The PID of the backend that serves `model` now (the newest `start` of its upstream name).
fn backend_pid(stack: &Stack, model: &str) -> u32 {
    let upstream = stack.config().upstream(model);
    stack
        .fake_log()
        .starts_for(&upstream)
        .last()
        .unwrap_or_else(|| panic!("no backend was started for {model}"))
        .pid
}

/// The setup of both reproductions: `M1` loaded, one stalled stream holding the one dispatch
/// slot, three more `M1` streams accepted behind it. Returns (stalled, waiting).
fn stalled_and_three_waiting(stack: &Stack) -> (Stream, Vec<Stream>) {
    stack.warm(M1);
    let stalled = stalled_client(stack, &big_stream(M1));
    let m1 = backend_pid(stack, M1);
    poll_until(DEADLINE, "the stalled stream to reach the backend", || {
        chat_requests_of(stack, m1) == 2
    });
    // The proxy stopped reading the backend: its forwarding waits for the client.
    wait_reader_stalled(stack.config().backend_port, DEADLINE);
    let waiting: Vec<Stream> = (0..3)
        .map(|i| {
            let stream = stack.open_chat(&chat_request(
                M1,
                true,
                &format!("w{i}"),
                json!({"tokens": 3}),
            ));
            assert_eq!(
                stream.status, 200,
                "wait-first streams get their headers at once"
            );
            stream
        })
        .collect();
    poll_until(DEADLINE, "four M1 requests accepted for routing", || {
        routed(stack) == 4
    });
    assert_eq!(
        chat_requests_of(stack, m1),
        2,
        "max_pending: 1 holds the waiting streams back from the backend"
    );
    (stalled, waiting)
}

/// Asserts that `frames` end with the one `event: error` frame (status and code given), carry
/// no `[DONE]` and no data frame from `wrong_upstream`.
fn assert_failed_not_served(frames: &[Frame], status: u16, code: &str, wrong_upstream: &str) {
    for frame in frames
        .iter()
        .filter(|frame| frame.is_data() && !frame.is_done())
    {
        let json = frame.json();
        assert_ne!(
            json["model"], wrong_upstream,
            "a request for {M1} was generated by {wrong_upstream}: {frames:#?}"
        );
    }
    assert!(frames.iter().all(|frame| !frame.is_done()), "{frames:#?}");
    let last = frames.last().unwrap_or_else(|| panic!("no frames"));
    assert_eq!(last.event.as_deref(), Some("error"), "{frames:#?}");
    let error = last.error();
    assert_eq!(error.status, Some(status), "{error:?}");
    assert_eq!(error.code, code, "{error:?}");
}

fn wait_first_config(tag: &str) -> ConfigBuilder {
    ConfigBuilder::new(tag)
        .model(ModelSpec::new(M1))
        .model(ModelSpec::new(M2))
        .wait_when_busy(true)
        .set("max_pending", 1)
        .model_grace_ms(0)
}

/// The operator path: `off --now` interrupts the stalled stream and fails the waiting ones
/// with `routing_off`; a following `on M2` loads `M2`, and when the stalled client finally
/// goes away nothing of the earlier requests is sent to `M2`.
#[test]
fn off_now_then_on_another_model_never_serves_the_waiting_requests() {
    let stack = Stack::start(wait_first_config("offnow-m2").set("response_ms", 0).build());
    let (stalled, waiting) = stalled_and_three_waiting(&stack);
    let stalled_id = stalled.request_id().to_owned();

    let off = stack.control().off(true);
    off.assert_ok();
    let on = stack.control().on(Some(M2));
    on.assert_ok();
    let m2 = backend_pid(&stack, M2);
    drop(stalled);

    let wrong = stack.config().upstream(M2);
    for mut stream in waiting {
        let id = stream.request_id().to_owned();
        let frames = stream.remaining_frames(DEADLINE);
        assert_failed_not_served(&frames, 503, "routing_off", &wrong);
        let record = wait_record(stack.addr(), &id);
        assert_eq!(record.reason, Reason::RoutingOff, "{}", record.raw);
        assert!(!record.success, "{}", record.raw);
    }
    let record = wait_record(stack.addr(), &stalled_id);
    assert_eq!(record.reason, Reason::RoutingOff, "{}", record.raw);
    assert_eq!(chat_requests_of(&stack, m2), 0, "M2 served nothing of M1's");
    stack.stop();
}

/// The same without an operator: the supervisor crashes and is restarted (what systemd does),
/// which kills `M1`'s backend; a request for `M2` loads `M2`. The streams that were waiting
/// behind the stalled one lost their leases with the old supervisor: they end with an
/// in-band 503, never on `M2`.
#[test]
fn a_supervisor_restart_never_lets_waiting_requests_reach_the_next_model() {
    let mut stack = Stack::start(wait_first_config("crash-m2").set("response_ms", 0).build());
    let (stalled, waiting) = stalled_and_three_waiting(&stack);
    let old_m1 = backend_pid(&stack, M1);

    stack.supervisor().crash_and_restart();
    stack.fake_log().wait_no_backends_left(DEADLINE);
    poll_until(DEADLINE, "the proxy to reach the new supervisor", || {
        stack.status().proxies == 1
    });
    let wrong = stack.config().upstream(M2);
    // Read the waiting streams' outcome first: they must not wait for a new model at all.
    let mut outcomes = Vec::new();
    for mut stream in waiting {
        let id = stream.request_id().to_owned();
        outcomes.push((id, stream.remaining_frames(DEADLINE)));
    }
    // The stalled client lets go; a request for M2 loads it.
    drop(stalled);
    let answer = stack.chat(&chat_request(M2, false, "next", Value::Null));
    answer.expect_status(200);
    let m2 = backend_pid(&stack, M2);
    assert_ne!(m2, old_m1);

    for (id, frames) in outcomes {
        assert_failed_not_served(&frames, 503, "supervisor_unavailable", &wrong);
        let record = wait_record(stack.addr(), &id);
        assert!(!record.success, "{}", record.raw);
    }
    // Give a wrongly released request every chance to show up at M2 before counting.
    poll_until(DEADLINE, "no request in flight", || {
        stack.metrics().in_flight == Some(0)
    });
    assert_eq!(
        chat_requests_of(&stack, m2),
        1,
        "M2 served only its own request"
    );
    stack.stop();
}

/// `response_ms: 5000` and a client that stops reading: the deadline still cuts its stream at
/// about 5 s, which frees the one dispatch slot, and the next request is served.
#[test]
fn a_client_that_stops_reading_is_cut_off_at_response_ms_and_frees_its_slot() {
    let stack = Stack::start(
        wait_first_config("stall-deadline")
            .set("response_ms", 5000)
            .build(),
    );
    stack.warm(M1);
    let stalled = stalled_client(&stack, &big_stream(M1));
    let stalled_id = stalled.request_id().to_owned();
    let m1 = backend_pid(&stack, M1);
    poll_until(DEADLINE, "the stalled stream to reach the backend", || {
        chat_requests_of(&stack, m1) == 2
    });
    wait_reader_stalled(stack.config().backend_port, DEADLINE);
    let started = Instant::now();
    let next = stack.chat(&chat_request(M1, false, "next", Value::Null));
    let waited = started.elapsed();
    next.expect_status(200);
    assert!(
        waited < Duration::from_secs(15),
        "the next request waited {waited:?}: the stalled stream kept its slot past response_ms"
    );
    let record = wait_record(stack.addr(), &stalled_id);
    assert_eq!(record.reason, Reason::Timeout, "{}", record.raw);
    assert!(!record.success, "{}", record.raw);
    let total = record.total_ms;
    assert!((4500..15000).contains(&total), "cut off after {total} ms");
    poll_until(DEADLINE, "no request in flight", || {
        stack.metrics().in_flight == Some(0)
    });
    drop(stalled);
    stack.stop();
}

/// `response_ms: 0` disables the deadline, so only the operator can end a stream whose client
/// stopped reading: `off --now` must do it, with a `routing_off` record, and `off` completes.
#[test]
fn off_now_interrupts_a_client_that_stopped_reading() {
    let stack = Stack::start(
        wait_first_config("stall-offnow")
            .set("response_ms", 0)
            .build(),
    );
    stack.warm(M1);
    let stalled = stalled_client(&stack, &big_stream(M1));
    let stalled_id = stalled.request_id().to_owned();
    let m1 = backend_pid(&stack, M1);
    poll_until(DEADLINE, "the stalled stream to reach the backend", || {
        chat_requests_of(&stack, m1) == 2
    });
    wait_reader_stalled(stack.config().backend_port, DEADLINE);
    let off = stack.control().off(true);
    off.assert_ok();
    let record = wait_record(stack.addr(), &stalled_id);
    assert_eq!(record.reason, Reason::RoutingOff, "{}", record.raw);
    assert_eq!(record.disconnect_phase, None, "{}", record.raw);
    assert_eq!(stack.metrics().in_flight, Some(0));
    stack.fake_log().wait_no_backends_left(DEADLINE);
    drop(stalled);
    stack.stop();
}

/// `off --now` while requests wait for the backend's response headers: the outcome is
/// `routing_off` (an in-band error for a wait-first stream, a 503 otherwise), like every other
/// interrupted phase, never "the backend could not be reached".
#[test]
fn off_now_during_the_header_wait_is_routing_off() {
    for wait_first in [true, false] {
        let stack = Stack::start(
            ConfigBuilder::new(if wait_first { "hdr-wf" } else { "hdr-legacy" })
                .model(ModelSpec::new(M1))
                .wait_when_busy(wait_first)
                .build(),
        );
        stack.warm(M1);
        let slow = json!({"header_delay_ms": 60000});
        let streaming =
            wait_first.then(|| stack.open_chat(&chat_request(M1, true, "s", slow.clone())));
        let addr = stack.addr();
        let plain =
            std::thread::spawn(move || http::chat(addr, &chat_request(M1, false, "p", slow)));
        let m1 = backend_pid(&stack, M1);
        let expected = if wait_first { 3 } else { 2 };
        poll_until(
            DEADLINE,
            "the requests to wait for headers at the backend",
            || chat_requests_of(&stack, m1) == expected,
        );
        stack.control().off(true).assert_ok();
        let plain = plain.join().expect("the plain request");
        assert_eq!(plain.status, 503, "{plain}");
        assert_eq!(plain.error().code, "routing_off", "{plain}");
        let record = wait_record(addr, plain.header("x-strata-request-id").unwrap());
        assert_eq!(record.reason, Reason::RoutingOff, "{}", record.raw);
        assert_eq!(record.status, Some(503), "{}", record.raw);
        if let Some(mut stream) = streaming {
            let id = stream.request_id().to_owned();
            let frames = stream.remaining_frames(DEADLINE);
            assert_failed_not_served(&frames, 503, "routing_off", "none");
            let record = wait_record(addr, &id);
            assert_eq!(record.reason, Reason::RoutingOff, "{}", record.raw);
        }
        stack.stop();
    }
}

/// The last line of defence: a backend that answers as another model (the fake's
/// `response_model`) gets its response stopped before any of it reaches the client: a
/// wait-first stream still holds its head then, so it gets a real 502 `upstream_error`; where
/// the backend's own headers were passed through, a transport error. The record says
/// `upstream_error`.
#[test]
fn a_response_from_another_model_never_reaches_the_client() {
    for wait_first in [true, false] {
        let stack = Stack::start(
            ConfigBuilder::new(if wait_first { "gate-wf" } else { "gate-legacy" })
                .model(ModelSpec::new(M1))
                .wait_when_busy(wait_first)
                .build(),
        );
        let impostor = json!({"response_model": "up-impostor"});
        for stream in [true, false] {
            let body = chat_request(M1, stream, "who", impostor.clone());
            if wait_first && stream {
                let response = stack.chat(&body);
                assert_eq!(response.status, 502, "{response}");
                assert_eq!(response.error().code, "upstream_error", "{response}");
                assert!(!response.text().contains("up-impostor"), "{response}");
                let id = response
                    .header("x-strata-request-id")
                    .expect("x-strata-request-id")
                    .to_owned();
                let record = wait_record(stack.addr(), &id);
                assert_eq!(record.reason, Reason::UpstreamError, "{}", record.raw);
                assert!(!record.success, "{}", record.raw);
                assert_eq!(record.status, Some(502), "{}", record.raw);
                continue;
            }
            let mut response = stack.open_chat(&body);
            assert_eq!(response.status, 200, "the backend's headers");
            let id = response.request_id().to_owned();
            let outcome = response.try_read_to_end(DEADLINE);
            let received = String::from_utf8_lossy(response.received()).into_owned();
            assert!(
                !received.contains("up-impostor"),
                "stream {stream}, wait-first {wait_first}: {received}"
            );
            assert!(
                outcome.is_err(),
                "stream {stream}, wait-first {wait_first}: a transport error, got {received:?}"
            );
            let record = wait_record(stack.addr(), &id);
            assert_eq!(record.reason, Reason::UpstreamError, "{}", record.raw);
            assert!(!record.success, "{}", record.raw);
        }
        // The model itself is fine: the next honest request is served.
        stack
            .chat(&chat_request(M1, false, "honest", Value::Null))
            .expect_status(200);
        stack.stop();
    }
}
