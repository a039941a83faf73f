//! The supervisor's SIGTERM drain, through the real binaries: like the spec's daemon, it stops
//! taking new proxies and requests but keeps routing for accepted work (queued requests are
//! still admitted and served, a load in progress finishes, `drain_ms: 0` waits for all of it),
//! then stops the backend and removes its sockets. A second signal or the `drain_ms` deadline
//! forces the end. `strata-ctl status` answers all along and says `draining: true`.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use strata_e2e::accounting::chat_request;
use strata_e2e::http::{self, Response, spawn_chat};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until, procs};

const A: &str = "flash-a";
const B: &str = "flash-b";

/// `drain_ms: 0`: the SIGTERM drain serves everything accepted before it: the active stream,
/// the queued requests for the loaded model and, with a switch, for another model. New requests
/// get 503 `shutting_down`, `status` keeps answering with `draining: true`, and once the last
/// response ends the backend stops and the supervisor exits 0 with its sockets gone.
#[test]
fn sigterm_serves_accepted_work_then_stops() {
    let mut stack = Stack::start(
        ConfigBuilder::new("drain-serve")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B))
            .wait_when_busy(true)
            .set("max_pending", 1)
            .model_grace_ms(0)
            .drain_ms(0)
            .build(),
    );
    stack.warm(A);
    let holder = stack.hold(A, "hold");
    let queued_a = spawn_chat(stack.addr(), chat_request(A, false, "qa", Value::Null));
    poll_until(DEADLINE, "qa queued", || stack.waiting() == 1);
    let queued_b = spawn_chat(stack.addr(), chat_request(B, false, "qb", Value::Null));
    poll_until(DEADLINE, "qb queued", || stack.waiting() == 2);
    let backend = stack.status().child_pid.unwrap();

    stack.supervisor().terminate();
    poll_until(DEADLINE, "status says draining", || stack.status().draining);
    let refused = stack.chat(&chat_request(A, false, "late", Value::Null));
    assert_eq!(refused.status, 503, "{refused}");
    assert_eq!(refused.error().code, "shutting_down");
    assert_eq!(stack.waiting(), 2, "the queue is kept, not failed");
    assert!(procs::is_alive(backend));

    holder.disconnect();
    for handle in [queued_a, queued_b] {
        let response = handle.join().unwrap();
        assert_eq!(response.status, 200, "{response}");
    }
    let upstream_b = stack.config().upstream(B);
    assert_eq!(
        stack.fake_log().start_count(&upstream_b),
        1,
        "a switch during the drain"
    );
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    for socket in [
        &stack.config().control_socket,
        &stack.config().supervisor_socket,
    ] {
        assert!(!socket.exists(), "{} left behind", socket.display());
    }
    stack.fake_log().wait_no_backends_left(DEADLINE);
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// A load in progress when the SIGTERM comes finishes, and its request is served.
#[test]
fn a_load_in_progress_finishes_during_the_drain() {
    let mut stack = Stack::start(
        ConfigBuilder::new("drain-load")
            .model(ModelSpec::new(A).load_ms(2000))
            .wait_when_busy(true)
            .drain_ms(0)
            .build(),
    );
    let request = spawn_chat(stack.addr(), chat_request(A, false, "x", Value::Null));
    poll_until(DEADLINE, "the load to start", || {
        stack.status().loading.as_deref() == Some(A)
    });
    stack.supervisor().terminate();
    let response = request.join().unwrap();
    assert_eq!(response.status, 200, "{response}");
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    assert_eq!(stack.fake_log().events_named("ready").len(), 1);
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// A second SIGTERM ends an unbounded drain: active streams end with an in-band
/// `shutting_down` error, queued requests fail, and a load in progress is cancelled at its next
/// readiness poll; the supervisor exits 0 long before the load would have finished.
#[test]
fn a_second_signal_forces_the_end() {
    let mut stack = Stack::start(
        ConfigBuilder::new("drain-force")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B).load_ms(30_000))
            .wait_when_busy(true)
            .model_grace_ms(0)
            .drain_ms(0)
            .build(),
    );
    stack.warm(A);
    let mut holder = stack.hold(A, "hold");
    let queued = spawn_chat(stack.addr(), chat_request(B, false, "qb", Value::Null));
    poll_until(DEADLINE, "qb queued", || stack.waiting() == 1);
    stack.supervisor().terminate();
    poll_until(DEADLINE, "draining", || stack.status().draining);
    let asked = Instant::now();
    stack.supervisor().daemon().kill(Signal::SIGTERM);
    let frames = holder.remaining_frames(DEADLINE);
    let last = frames.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"), "{frames:#?}");
    assert_eq!(last.error().code, "shutting_down");
    let queued = queued.join().unwrap();
    assert_eq!(queued.status, 503, "{queued}");
    assert_eq!(queued.error().code, "shutting_down");
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    stack.fake_log().wait_no_backends_left(DEADLINE);
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// A positive `drain_ms` bounds the drain: after it, accepted work is interrupted.
#[test]
fn drain_ms_bounds_the_wait() {
    let mut stack = Stack::start(
        ConfigBuilder::new("drain-bound")
            .model(ModelSpec::new(A))
            .wait_when_busy(true)
            .drain_ms(1000)
            .build(),
    );
    stack.warm(A);
    let mut holder = stack.hold(A, "hold");
    let asked = Instant::now();
    stack.supervisor().terminate();
    let frames = holder.remaining_frames(DEADLINE);
    let took = asked.elapsed();
    assert_eq!(
        frames.last().unwrap().event.as_deref(),
        Some("error"),
        "{frames:#?}"
    );
    assert!(
        took >= Duration::from_millis(900),
        "interrupted after {took:?}"
    );
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// During the drain a new proxy cannot connect (the supervisor takes no new proxies) and an
/// operator `on` is refused, while `status` answers.
#[test]
fn the_drain_takes_no_new_proxies_or_loads() {
    let mut stack = Stack::start(
        ConfigBuilder::new("drain-new")
            .model(ModelSpec::new(A))
            .wait_when_busy(true)
            .drain_ms(0)
            .build(),
    );
    stack.warm(A);
    let holder = stack.hold(A, "hold");
    stack.supervisor().terminate();
    poll_until(DEADLINE, "draining", || stack.status().draining);
    let on = stack.control().on(Some(A));
    on.assert_failed();
    assert_eq!(on.message(), "on: the daemon is shutting down");
    let second = stack.spawn_extra_proxy();
    let health = poll_until_health(second);
    assert_eq!(health.status, 503, "{health}");
    assert_eq!(stack.status().proxies, 1);
    holder.disconnect();
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// `GET /health` of a proxy once it answers at all.
fn poll_until_health(addr: std::net::SocketAddr) -> Response {
    strata_e2e::poll_for(DEADLINE, "the extra proxy to answer /health", || {
        http::try_request(addr, "GET", "/health", &[], b"").ok()
    })
}
