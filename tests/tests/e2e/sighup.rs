//! SIGHUP through the real binaries: neither daemon stops or changes anything (a stream in
//! flight completes, new requests are served, the PIDs stay), and each logs once that the
//! configuration is read only at start and a restart applies changes.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";

/// The line each daemon logs per SIGHUP (os/src/daemon_main.rs).
const NOTICE: &str = "SIGHUP ignored: the configuration is read only at start";

#[test]
fn sighup_keeps_both_daemons_serving_and_says_a_restart_applies_changes() {
    let mut stack = Stack::start(
        ConfigBuilder::new("sighup")
            .model(ModelSpec::new(A))
            .build(),
    );
    stack.warm(A);
    let supervisor = stack.supervisor_pid();
    let proxy = stack.proxy_pid();

    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 40, "token_delay_ms": 50});
    let mut stream = stack.open_chat(&body);
    stream.frames_until(DEADLINE, "a first frame", http::Frame::is_data);

    for pid in [supervisor, proxy] {
        kill(Pid::from_raw(pid as i32), Signal::SIGHUP).expect("send SIGHUP");
    }
    poll_until(DEADLINE, "the supervisor's SIGHUP notice", || {
        stack.supervisor_stderr().contains(NOTICE)
    });
    poll_until(DEADLINE, "the proxy's SIGHUP notice", || {
        stack.proxy().stderr().contains(NOTICE)
    });

    let rest = stream.remaining_frames(DEADLINE);
    assert!(
        rest.last().is_some_and(http::Frame::is_done),
        "the stream in flight completes: {rest:#?}"
    );
    stack.chat(&chat_body(A, false)).expect_status(200);
    assert_eq!(stack.supervisor_pid(), supervisor);
    assert_eq!(stack.proxy_pid(), proxy);
    assert!(
        stack.proxy().is_running(),
        "{}",
        stack.proxy().stderr_report()
    );
    assert!(
        stack.supervisor().daemon().is_running(),
        "{}",
        stack.supervisor().daemon().stderr_report()
    );
    assert_eq!(stack.supervisor_stderr().matches(NOTICE).count(), 1);
    assert_eq!(stack.proxy().stderr().matches(NOTICE).count(), 1);
}
