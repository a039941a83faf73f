//! How the supervisor stops a backend, read from the fake's event log: on a swap, an idle
//! unload and a drain, the Strata server gets SIGTERM alone, so it tells its engine `QUIT`
//! (the engine logs `engine_exit` with `how: "quit"`), exits 0 by itself, and nothing of its
//! process group is left. A server that ignores SIGTERM never tells its engine anything: the
//! group is SIGKILLed after `shutdown_ms` and the stop still completes with the group gone.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use strata_e2e::accounting::chat_request;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, FakeLog, ModelSpec, child_pid, poll_until, procs};

const A: &str = "flash-a";
const B: &str = "flash-b";

fn serve(stack: &Stack, model: &str) {
    stack
        .chat(&chat_request(model, false, "hello", Value::Null))
        .expect_status(200);
}

/// The serving backend's pid and its engine's.
fn backend_and_engine(stack: &Stack) -> (u32, u32) {
    let pid = child_pid(&stack.status());
    let engines = stack.fake_log().engines_of(pid);
    assert_eq!(engines.len(), 1, "{}", stack.fake_log().dump());
    (pid, engines[0])
}

/// Waits until backend `pid`'s engine has logged its end and nothing of the group is alive;
/// then the engine must have ended on `QUIT` and the server must have exited 0 on its own
/// after its SIGTERM.
fn assert_quit_and_gone(log: &FakeLog, pid: u32, engine: u32) {
    poll_until(DEADLINE, "the old engine's end and its group's", || {
        log.engine_exit(engine).is_some() && !procs::group_alive(pid)
    });
    assert_eq!(
        log.engine_exit(engine).as_deref(),
        Some("quit"),
        "{}",
        log.dump()
    );
    assert!(!procs::is_alive(pid) && !procs::is_alive(engine));
    let stop = log
        .index_of(pid, "stop")
        .expect("the server got a stop signal");
    assert_eq!(log.events()[stop]["signal"], "SIGTERM");
    let exit = log
        .index_of(pid, "exit")
        .expect("the server exited by itself");
    assert_eq!(log.events()[exit]["code"], 0, "{}", log.dump());
    assert!(
        log.events_named("engine_died").is_empty(),
        "an engine ended without QUIT: {}",
        log.dump()
    );
}

#[test]
fn a_swap_quits_the_old_engine_and_leaves_nothing_of_its_group() {
    let stack = Stack::start(
        ConfigBuilder::new("stop-swap")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B))
            .build(),
    );
    serve(&stack, A);
    let (old, engine) = backend_and_engine(&stack);
    serve(&stack, B);
    let (new, _) = backend_and_engine(&stack);
    assert_ne!(new, old);
    assert_quit_and_gone(&stack.fake_log(), old, engine);
    stack.stop();
}

#[test]
fn an_idle_unload_quits_the_engine_and_leaves_nothing_of_its_group() {
    let stack = Stack::start(
        ConfigBuilder::new("stop-idle")
            .model(ModelSpec::new(A))
            .idle_ms(300)
            .build(),
    );
    serve(&stack, A);
    let (pid, engine) = backend_and_engine(&stack);
    poll_until(DEADLINE, "the idle unload", || {
        stack.status().child_pid.is_none()
    });
    assert_quit_and_gone(&stack.fake_log(), pid, engine);
    stack.stop();
}

#[test]
fn a_drain_quits_the_engine_and_leaves_nothing_of_its_group() {
    let mut stack = Stack::start(
        ConfigBuilder::new("stop-drain")
            .model(ModelSpec::new(A))
            .build(),
    );
    serve(&stack, A);
    let (pid, engine) = backend_and_engine(&stack);
    let log = stack.fake_log();
    stack.supervisor().terminate();
    let status = stack.supervisor().daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    assert_quit_and_gone(&log, pid, engine);
    log.assert_no_backends_left();
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

/// A server that ignores SIGTERM never tells its engine `QUIT`: after `shutdown_ms` the whole
/// group is SIGKILLed (neither the server nor the engine logs an end), and `off` answers once
/// it is gone.
#[test]
fn a_server_that_ignores_sigterm_is_killed_with_its_engine_after_shutdown_ms() {
    let shutdown = Duration::from_millis(800);
    let stack = Stack::start(
        ConfigBuilder::new("stop-stubborn")
            .model(ModelSpec::new(A).fake("ignore_sigterm", true))
            .shutdown_ms(shutdown.as_millis() as u64)
            .build(),
    );
    serve(&stack, A);
    let (pid, engine) = backend_and_engine(&stack);
    let log = stack.fake_log();
    let asked = Instant::now();
    stack.control().off(false).assert_ok();
    let took = asked.elapsed();
    assert!(
        took >= shutdown - Duration::from_millis(50),
        "SIGKILL before shutdown_ms: {took:?}"
    );
    assert!(
        took < shutdown + Duration::from_secs(5),
        "the stop took {took:?}"
    );
    poll_until(DEADLINE, "the group gone", || !procs::group_alive(pid));
    assert!(!procs::is_alive(pid) && !procs::is_alive(engine));
    assert!(
        !log.events_named("signal_ignored").is_empty(),
        "the server saw SIGTERM: {}",
        log.dump()
    );
    assert_eq!(log.engine_exit(engine), None, "{}", log.dump());
    assert_eq!(log.index_of(pid, "exit"), None, "{}", log.dump());
    stack.stop();
}
