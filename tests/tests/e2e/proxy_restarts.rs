//! Proxy restarts with the real binaries: a SIGKILLed proxy does not disturb a load in progress
//! (the supervisor finishes it, and the next proxy serves the model without a second start),
//! and SIGTERM drains: the listener closes at once, in-flight streams finish, then the proxy
//! exits 0, or leaves when `drain_ms` runs out.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;
use strata_e2e::http::{self, Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for, poll_until};
use strata_protocol::control::Status;
use strata_protocol::record::{Phase, Reason};

const A: &str = "flash-a";

fn is_content(frame: &Frame) -> bool {
    frame.is_data()
        && frame.json()["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
}

fn wait_listener_closed(stack: &Stack) {
    poll_until(DEADLINE, "the proxy's listener to close", || {
        matches!(
            http::try_request(stack.addr(), "GET", "/health", &[], b""),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
        )
    });
}

fn wait_no_leases(stack: &Stack) -> Status {
    poll_for(DEADLINE, "no active lease", || {
        let status = stack.status();
        (status.active_leases == 0).then_some(status)
    })
}

/// SIGKILL of the proxy while the model it asked for loads: the supervisor finishes the load
/// and keeps the model; a new proxy serves it with no second start.
#[test]
fn sigkill_during_a_load_keeps_the_load_and_a_new_proxy_serves_it() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("kill-load")
            .model(ModelSpec::new(A).load_ms(2000))
            .wait_when_busy(wait_first)
            .build();
        let mut stack = Stack::start(config);
        let log = stack.fake_log();
        let upstream = stack.config().upstream(A);
        // The client's connection dies with the proxy; the request is written raw so that
        // legacy mode (no headers before admission) works the same.
        let mut conn = http::Conn::connect(stack.addr()).unwrap();
        conn.write(&http::request_bytes(
            stack.addr(),
            "POST",
            http::CHAT_PATH,
            &[("content-type", "application/json")],
            chat_body(A, true).to_string().as_bytes(),
        ))
        .unwrap();
        poll_until(DEADLINE, "the load to start", || {
            log.start_count(&upstream) == 1
        });
        let started = Instant::now();
        stack.kill_proxy(Signal::SIGKILL);
        stack.wait_proxy_exit(DEADLINE);
        drop(conn);

        let status = poll_for(DEADLINE, "the supervisor to finish the load", || {
            let status = stack.status();
            (status.loaded.as_deref() == Some(A) && status.loading.is_none() && status.proxies == 0)
                .then_some(status)
        });
        assert_eq!(status.active_leases, 0, "{status:?}");
        assert!(
            log.index_of(log.starts()[0].pid, "ready").is_some(),
            "the backend finished its load\n{}",
            log.dump()
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the load was not cut short or restarted"
        );

        stack.start_proxy();
        let response = stack.chat(&chat_body(A, false));
        assert_eq!(response.status, 200, "{response}");
        let mut stream = stack.open_chat(&chat_body(A, true));
        let frames = stream.remaining_frames(DEADLINE);
        assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
        assert_eq!(
            log.start_count(&upstream),
            1,
            "no second start\n{}",
            log.dump()
        );
        assert!(log.events_named("stop").is_empty(), "{}", log.dump());
        stack.stop();
    }
}

/// SIGTERM with a stream in flight: the listener closes at once (new connections are
/// refused), the stream runs to `[DONE]`, and only then does the proxy exit 0. A new proxy
/// then serves the same loaded model.
#[test]
fn sigterm_drains_an_in_flight_stream_then_exits_zero() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("drain")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .drain_ms(0)
            .build();
        let mut stack = Stack::start(config);
        let log = stack.fake_log();
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 15, "token_delay_ms": 100});
        let mut stream = stack.open_chat(&body);
        let mut frames = stream.frames_until(DEADLINE, "the first content delta", is_content);

        stack.kill_proxy(Signal::SIGTERM);
        wait_listener_closed(&stack);
        assert!(
            stack.proxy().is_running(),
            "the proxy must wait for the stream"
        );
        assert!(!stream.is_finished());
        // The operator sees the drain in `status` (the spec: inspect `draining: true`).
        assert!(stack.status().draining);

        frames.extend(stream.remaining_frames(DEADLINE));
        assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
        let content = frames.iter().filter(|frame| is_content(frame)).count();
        assert_eq!(content, 15, "every delta arrived: {frames:#?}");
        let status = stack.wait_proxy_exit(DEADLINE);
        assert!(
            status.success(),
            "exit after draining: {status}\n{}",
            stack.proxy_stderr()
        );
        assert!(log.events_named("cancel").is_empty(), "{}", log.dump());

        let status = wait_no_leases(&stack);
        assert!(!status.draining, "{status:?}");
        stack.start_proxy();
        assert_eq!(stack.chat(&chat_body(A, false)).status, 200);
        assert_eq!(log.starts().len(), 1);
        stack.stop();
    }
}

/// With a small `drain_ms` and a stream far longer than it, the proxy leaves when the deadline
/// passes: the client's stream is cut short (no `[DONE]`), the backend sees the cancellation,
/// and the supervisor releases the lease.
#[test]
fn sigterm_with_drain_ms_leaves_a_very_slow_stream_behind() {
    let config = ConfigBuilder::new("drain-ms")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .drain_ms(500)
        .build();
    let mut stack = Stack::start(config);
    let log = stack.fake_log();
    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 60, "token_delay_ms": 500});
    let mut stream = stack.open_chat(&body);
    stream.frames_until(DEADLINE, "the first content delta", is_content);

    let signalled = Instant::now();
    stack.kill_proxy(Signal::SIGTERM);
    let status = stack.wait_proxy_exit(DEADLINE);
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(10),
        "the proxy should leave about drain_ms (500 ms) after SIGTERM, took {took:?}"
    );
    assert!(status.code().is_some(), "exited on its own: {status}");

    // The stream ends without [DONE] (cut off), well before its 30 s.
    let mut rest = Vec::new();
    loop {
        match stream.try_next_frame(DEADLINE) {
            Ok(Some(frame)) => rest.push(frame),
            Ok(None) => break,
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(err) => panic!("{err}; frames: {rest:#?}"),
        }
    }
    assert!(!rest.iter().any(Frame::is_done), "{rest:#?}");
    let cancel = poll_for(DEADLINE, "the backend to see the cancellation", || {
        log.events_named("cancel").into_iter().next()
    });
    assert_eq!(cancel["reason"], "client_disconnect", "{cancel}");
    wait_no_leases(&stack);
    stack.start_proxy();
    assert_eq!(stack.chat(&chat_body(A, false)).status, 200);
    stack.stop();
}

/// The last client of a draining proxy goes away: the connection ends at once, but the record
/// is finished by the request's forwarding task, which the drain waits for too. The record of
/// that request (a `client_disconnect` while generating) reaches the supervisor before the proxy
/// exits; the next proxy serves it from the same ring.
#[test]
fn a_client_that_leaves_during_the_drain_still_gets_its_record() {
    let config = ConfigBuilder::new("drain-record")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let mut stack = Stack::start(config);
    for round in 0..5 {
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 600, "token_delay_ms": 50});
        let mut stream = stack.open_chat(&body);
        let id = stream.header("x-strata-request-id").unwrap().to_owned();
        stream.frames_until(DEADLINE, "the first content frame", is_content);
        stack.kill_proxy(Signal::SIGTERM);
        wait_listener_closed(&stack);
        stream.disconnect();
        let status = stack.wait_proxy_exit(DEADLINE);
        assert!(status.success(), "round {round}: {status}");
        stack.start_proxy();
        let record = strata_e2e::accounting::wait_record(stack.addr(), &id);
        assert_eq!(record.reason, Reason::ClientDisconnect, "{}", record.raw);
        assert_eq!(
            record.disconnect_phase,
            Some(Phase::Generating),
            "{}",
            record.raw
        );
        wait_no_leases(&stack);
    }
    stack.stop();
}

/// The proxy's systemd notifications: `READY=1` only once it reached its supervisor (the
/// supervisor already counts it when the datagram arrives), `STOPPING=1` when SIGTERM starts
/// its drain, then a clean exit.
#[test]
fn the_proxy_notifies_ready_after_its_supervisor_and_stopping_on_sigterm() {
    use std::os::unix::net::UnixDatagram;

    let config = ConfigBuilder::new("proxy-notify")
        .model(ModelSpec::new(A))
        .build();
    let notify_path = config.dir.join("proxy-notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    notify
        .set_read_timeout(Some(DEADLINE))
        .expect("notify read timeout");
    let mut stack = Stack::supervisor_only(config);
    stack.spawn_proxy_with(|mut command| {
        command.env("NOTIFY_SOCKET", &notify_path);
        command
    });
    let mut datagram = [0u8; 512];
    let n = notify.recv(&mut datagram).expect("READY=1 from the proxy");
    let text = String::from_utf8_lossy(&datagram[..n]).into_owned();
    assert!(text.lines().any(|line| line == "READY=1"), "{text:?}");
    assert_eq!(
        stack.status().proxies,
        1,
        "READY=1 came before the proxy's supervisor link"
    );
    stack.wait_proxy_serving(DEADLINE);

    stack.kill_proxy(Signal::SIGTERM);
    let n = notify
        .recv(&mut datagram)
        .expect("STOPPING=1 from the proxy");
    let text = String::from_utf8_lossy(&datagram[..n]).into_owned();
    assert!(text.lines().any(|line| line == "STOPPING=1"), "{text:?}");
    let status = stack.wait_proxy_exit(DEADLINE);
    assert_eq!(status.code(), Some(0), "{}", stack.proxy_stderr());
    stack.stop();
}
