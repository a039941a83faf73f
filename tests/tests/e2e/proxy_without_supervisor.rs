//! A proxy that answers at once (issue 29): started before its supervisor, it serves
//! `/health/live` 200, `/health` 503 with its cause and the backend state `unknown`, and chat
//! 503 with a request ID of its own instance (`proxy-PID-STARTMS-N`) and a record, from the
//! moment it listens; SIGTERM ends it promptly; and once its supervisor is gone, `/health`
//! stops repeating the backend state the supervisor last reported.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use strata_e2e::accounting::{chat_request, wait_record};
use strata_e2e::http;
use strata_e2e::stack::{Stack, proxy_command};
use strata_e2e::{ConfigBuilder, DEADLINE, Daemon, ModelSpec, poll_for, poll_until};
use strata_protocol::api::{Health, LinkStatus};
use strata_protocol::wire::BackendState;

const A: &str = "flash-a";

/// Well under the 10 s a starting proxy used to spend waiting for its supervisor before it
/// answered anything.
const PROMPT: Duration = Duration::from_secs(4);

#[test]
fn a_proxy_without_its_supervisor_answers_at_once_and_stops_promptly() {
    let config = ConfigBuilder::new("no-supervisor")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let addr = config.listen;
    let started = Instant::now();
    let mut proxy = Daemon::spawn("proxy", proxy_command(&config), config.dir.path());
    poll_until(PROMPT, "GET /health/live answers 200", || {
        assert!(proxy.is_running(), "{}", proxy.stderr_report());
        http::try_request(addr, "GET", "/health/live", &[], b"").is_ok_and(|r| r.status == 200)
    });
    assert!(started.elapsed() < PROMPT);

    let health = http::get(addr, "/health");
    assert_eq!(health.status, 503, "{health}");
    let document: Health = health.document();
    assert_eq!(document.supervisor, LinkStatus::Disconnected);
    assert_eq!(document.backend_state, Some(BackendState::Unknown));
    assert_eq!(
        document.cause.as_deref(),
        Some("the supervisor cannot be reached")
    );

    let response = http::chat(addr, &chat_request(A, false, "x", Value::Null));
    assert_eq!(response.status, 503, "{response}");
    assert_eq!(response.error().code, "supervisor_unavailable");
    let id = response.request_id().to_owned();
    assert!(
        id.starts_with(&format!("proxy-{}-", proxy.pid())),
        "the proxy's own instance: {id}"
    );
    assert!(started.elapsed() < PROMPT, "answered within {PROMPT:?}");

    // SIGTERM is prompt (it took up to 9.5 s in the start-up window before).
    let signalled = Instant::now();
    proxy.kill(Signal::SIGTERM);
    assert!(proxy.wait_exit(DEADLINE).success());
    assert!(
        signalled.elapsed() < PROMPT,
        "stopped in {:?}",
        signalled.elapsed()
    );
    let stderr = proxy.stderr();
    assert!(
        stderr.contains("records=1"),
        "the exit names how many records it could not hand over:\n{stderr}"
    );
}

#[test]
fn the_record_of_a_request_answered_without_a_supervisor_reaches_the_next_one() {
    let mut stack = Stack::start(
        ConfigBuilder::new("supervisor-gone")
            .model(ModelSpec::new(A))
            .wait_when_busy(true)
            .build(),
    );
    stack
        .chat(&chat_request(A, false, "x", Value::Null))
        .expect_status(200);
    poll_until(DEADLINE, "/health says serving", || {
        stack.health().backend_state == Some(BackendState::Serving)
    });
    // The supervisor (and with it the backend) dies: the proxy does not repeat "serving".
    stack.supervisor().daemon().kill(Signal::SIGKILL);
    stack.supervisor().daemon().wait_exit(DEADLINE);
    let health = poll_for(DEADLINE, "/health to notice", || {
        let response = stack.get("/health");
        (response.status == 503).then(|| response.document::<Health>())
    });
    assert_eq!(
        health.backend_state,
        Some(BackendState::Unknown),
        "{health:?}"
    );
    assert_eq!(health.last_good_probe_age_ms, None);
    let response = stack.chat(&chat_request(A, false, "x", Value::Null));
    assert_eq!(response.status, 503, "{response}");
    let id = response.request_id().to_owned();
    assert!(id.starts_with("proxy-"), "{id}");
    // A new supervisor: the proxy hands the record over.
    stack.supervisor().start_again();
    poll_until(DEADLINE, "the proxy linked again", || {
        stack.get("/health").status == 200
    });
    let record = wait_record(stack.addr(), &id);
    assert_eq!(record.status, Some(503));
    stack.stop();
}
