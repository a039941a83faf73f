//! The serving backend watched end to end
//! (docs/operating.md#wedged-backends-probes-unresponsive-and-a-truthful-health): with the fake's
//! `health_override_file` the serving backend stops answering `/health`, or answers as
//! another model, and the state shows in `strata-ctl status`, the router's `/health` (503
//! with the cause; `/health/live` stays 200), `/v1/models`, `strata-ctl top` and the
//! Prometheus gauge, with the age of the last good probe; a good probe clears it. With
//! `"report"` nothing is stopped; with `"restart"` the lease on the wedged backend fails with
//! `upstream_error` (its record kept), the backend is stopped and the next request loads it
//! again. Probes create no records.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::accounting::{assert_fields, chat_request, record_count, wait_record};
use strata_e2e::binaries::binary;
use strata_e2e::control::child_pid;
use strata_e2e::http::Frame;
use strata_e2e::stack::Stack;
use strata_e2e::{
    ConfigBuilder, DEADLINE, ModelSpec, TempDir, concrete_model, poll_for, poll_until,
};
use strata_protocol::api::Health;
use strata_protocol::wire::BackendState;

const A: &str = "flash-a";
const PROBE_MS: u64 = 500;
const MISSES: u64 = 3;

/// The stack, the override file the fake reads at each `/health`, and its directory.
fn stack(tag: &str, action: &str) -> (Stack, PathBuf, TempDir) {
    let dir = TempDir::new(tag);
    let override_file = dir.join("health");
    let config = ConfigBuilder::new(tag)
        .model(ModelSpec::new(A).fake("health_override_file", json!(override_file)))
        .wait_when_busy(true)
        .set("backend_probe_ms", PROBE_MS)
        .set("backend_probe_misses", MISSES)
        .set("backend_unresponsive_action", action)
        .set("response_ms", 0)
        .build();
    (Stack::start(config), override_file, dir)
}

fn set_health(file: &Path, behaviour: Option<&str>) {
    match behaviour {
        Some(text) => std::fs::write(file, text).unwrap(),
        None => {
            let _ = std::fs::remove_file(file);
        }
    }
}

fn health(stack: &Stack) -> (u16, Health) {
    let response = stack.get("/health");
    (response.status, response.document())
}

fn prometheus_value(stack: &Stack, series: &str) -> Option<f64> {
    let response = stack.get("/metrics?format=prometheus");
    String::from_utf8_lossy(&response.body)
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok())?
        })
}

fn top_once(target: &str) -> String {
    let output = Command::new(binary("strata-ctl"))
        .args(["top", target, "--once"])
        .output()
        .expect("run strata-ctl top");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn wait_backend_state(stack: &Stack, state: BackendState) -> Health {
    poll_for(DEADLINE, format!("/health backend_state {state:?}"), || {
        let (_, health) = health(stack);
        (health.backend_state == Some(state)).then_some(health)
    })
}

#[test]
fn an_unresponsive_backend_is_reported_everywhere_and_report_stops_nothing() {
    let (stack, file, _dir) = stack("probe-report", "report");
    assert_eq!(
        stack
            .chat(&chat_request(A, false, "one", Value::Null))
            .status,
        200
    );
    let records = record_count(stack.addr());
    let pid = child_pid(&stack.control().status());
    let serving = wait_backend_state(&stack, BackendState::Serving);
    assert!(serving.last_good_probe_age_ms.is_some(), "{serving:?}");
    assert_eq!(health(&stack).0, 200);

    // The HTTP side wedges: after MISSES unanswered probes the backend is unresponsive.
    let wedged_at = Instant::now();
    set_health(&file, Some("hang"));
    let wedged = wait_backend_state(&stack, BackendState::Unresponsive);
    let detected = wedged_at.elapsed();
    assert!(
        detected >= Duration::from_millis(PROBE_MS * MISSES) - Duration::from_millis(PROBE_MS),
        "detected after {detected:?}"
    );
    let (code, _) = health(&stack);
    assert_eq!(code, 503);
    assert_eq!(
        wedged.cause.as_deref(),
        Some("no answer to GET /health for 3 probes in a row")
    );
    assert!(
        wedged
            .last_good_probe_age_ms
            .is_some_and(|age| age >= PROBE_MS)
    );
    assert_eq!(stack.get("/health/live").status, 200);
    let status = stack.control().status();
    assert_eq!(status.backend_state, BackendState::Unresponsive);
    assert!(status.last_good_probe_age_ms.is_some());
    assert_eq!(
        concrete_model(&stack.models(), A).backend_state,
        Some(BackendState::Unresponsive)
    );
    assert_eq!(
        prometheus_value(&stack, "strata_router_backend_unresponsive"),
        Some(1.0)
    );
    for target in [
        format!("http://{}", stack.addr()),
        stack.config().control_socket.to_string_lossy().into_owned(),
    ] {
        let view = top_once(&target);
        assert!(
            view.lines()
                .any(|line| line.starts_with("backend: unresponsive")),
            "top {target}:\n{view}"
        );
    }
    // "report" stops nothing.
    assert_eq!(child_pid(&stack.control().status()), pid);

    // A good probe clears it.
    set_health(&file, None);
    wait_backend_state(&stack, BackendState::Serving);
    assert_eq!(health(&stack).0, 200);
    assert_eq!(
        prometheus_value(&stack, "strata_router_backend_unresponsive"),
        Some(0.0)
    );

    // An answer as another model is an identity change: unresponsive at once.
    set_health(&file, Some("wrong_model"));
    let changed = wait_backend_state(&stack, BackendState::Unresponsive);
    assert_eq!(
        changed.cause.as_deref(),
        Some(format!("/health names model up-{A}-wrong").as_str()),
        "{changed:?}"
    );
    set_health(&file, None);
    wait_backend_state(&stack, BackendState::Serving);
    assert_eq!(child_pid(&stack.control().status()), pid);
    // Dozens of probes ran: none is a request or a record.
    assert_eq!(record_count(stack.addr()), records);
    stack.stop();
}

#[test]
fn restart_fails_the_lease_on_the_wedged_backend_and_loads_it_again() {
    let (stack, file, _dir) = stack("probe-restart", "restart");
    assert_eq!(
        stack
            .chat(&chat_request(A, false, "one", Value::Null))
            .status,
        200
    );
    let pid = child_pid(&stack.control().status());
    wait_backend_state(&stack, BackendState::Serving);
    // A stream that stays open (its next token is 60 s away) holds a lease on the backend.
    let mut stream = stack.open_chat(&chat_request(
        A,
        true,
        "held",
        json!({"tokens": 2, "token_delay_ms": 60_000}),
    ));
    let id = stream.header("x-strata-request-id").unwrap().to_owned();
    stream.frames_until(DEADLINE, "the first data frame", Frame::is_data);
    let wedged_at = Instant::now();
    set_health(&file, Some("hang"));
    let rest = stream.remaining_frames(DEADLINE);
    let failed_after = wedged_at.elapsed();
    let last = rest.last().unwrap_or_else(|| panic!("no end frame"));
    assert_eq!(last.event.as_deref(), Some("error"), "{rest:#?}");
    assert_eq!(last.error().code, "upstream_error", "{rest:#?}");
    assert_eq!(last.error().status, Some(502), "{rest:#?}");
    // Detection takes MISSES probes, each up to PROBE_MS plus its PROBE_MS bound.
    let bound = Duration::from_millis(MISSES * 2 * PROBE_MS) + Duration::from_secs(5);
    assert!(failed_after < bound, "failed after {failed_after:?}");
    let record = wait_record(stack.addr(), &id);
    assert_fields(&record, json!({"reason": "upstream_error", "stream": true}));
    // The wedged backend is stopped.
    poll_until(DEADLINE, "the wedged backend stopped", || {
        stack.control().status().child_pid != Some(pid)
    });
    poll_until(DEADLINE, "the wedged backend's exit logged", || {
        stack.fake_log().index_of(pid, "exit").is_some()
    });
    // The next request loads A again (the backend answers /health once more).
    set_health(&file, None);
    let again = stack.chat(&chat_request(A, false, "again", Value::Null));
    assert_eq!(again.status, 200, "{again}");
    let new_pid = child_pid(&stack.control().status());
    assert_ne!(new_pid, pid);
    wait_backend_state(&stack, BackendState::Serving);
    stack.stop();
}

/// The other states, in `/health` (always 200: the router can still serve): `idle` before
/// any load, `loading` during one, `serving` after it, and `cooling` once a failed start
/// left no backend and its cooldown runs.
#[test]
fn health_names_every_backend_state_and_stays_200_through_loads_and_cooldowns() {
    let config = ConfigBuilder::new("probe-states")
        .model(ModelSpec::new(A).load_ms(1500))
        .model(ModelSpec::new("flash-b").start_failure("exit"))
        .wait_when_busy(true)
        .cooldown_ms(30_000)
        .set("backend_probe_ms", PROBE_MS)
        .build();
    let stack = Stack::start(config);
    let (code, idle) = health(&stack);
    assert_eq!((code, idle.backend_state), (200, Some(BackendState::Idle)));
    assert_eq!(idle.last_good_probe_age_ms, None);
    let addr = stack.addr();
    let load = std::thread::spawn(move || {
        strata_e2e::http::chat(addr, &chat_request(A, false, "load", Value::Null))
    });
    let loading = wait_backend_state(&stack, BackendState::Loading);
    assert_eq!(loading.last_good_probe_age_ms, None);
    assert_eq!(health(&stack).0, 200);
    assert_eq!(load.join().unwrap().status, 200);
    let serving = wait_backend_state(&stack, BackendState::Serving);
    assert!(serving.last_good_probe_age_ms.is_some(), "{serving:?}");
    assert_eq!(
        concrete_model(&stack.models(), A).backend_state,
        Some(BackendState::Serving)
    );
    assert_eq!(
        concrete_model(&stack.models(), "flash-b").backend_state,
        None
    );
    // The switch to B stops A, and B's start fails: nothing serves while B cools down.
    let failed = stack.chat(&chat_request("flash-b", false, "fail", Value::Null));
    assert_eq!(failed.status, 503, "{failed}");
    let cooling = wait_backend_state(&stack, BackendState::Cooling);
    assert_eq!(cooling.last_good_probe_age_ms, None);
    assert_eq!(health(&stack).0, 200);
    assert_eq!(
        stack.control().status().backend_state,
        BackendState::Cooling
    );
    stack.stop();
}

/// The age of the last good probe agrees everywhere while probes succeed (issue 28): the
/// proxy's `/health`, `top` over HTTP and the Prometheus gauge read it from a time the state
/// carries, not as the age when the state was sent plus the time since (states are sent on
/// changes, not per probe: that age only grew).
#[test]
fn the_probe_age_agrees_everywhere_while_probes_succeed() {
    let (stack, _file, _dir) = stack("probe-age", "report");
    assert_eq!(
        stack
            .chat(&chat_request(A, false, "one", Value::Null))
            .status,
        200
    );
    let pid = child_pid(&stack.control().status());
    wait_backend_state(&stack, BackendState::Serving);
    // Let at least eight probes pass (the fake logs each GET /health), so an age counted
    // from the verification's state would be several intervals old.
    let probes = |stack: &Stack| {
        stack
            .fake_log()
            .events_of(pid)
            .iter()
            .filter(|(_, event)| event["event"] == "get" && event["path"] == "/health")
            .count()
    };
    let first = probes(&stack);
    poll_until(DEADLINE, "eight more probes", || {
        probes(&stack) >= first + 8
    });
    // One probe interval plus its bound (a probe may be under way) plus scheduling slack.
    let bound = 2 * PROBE_MS + 500;
    let status_age = stack
        .control()
        .status()
        .last_good_probe_age_ms
        .expect("status has an age");
    let (_, health) = health(&stack);
    let health_age = health.last_good_probe_age_ms.expect("/health has an age");
    let gauge_ms = prometheus_value(&stack, "strata_router_backend_last_good_probe_age_seconds")
        .expect("the gauge")
        * 1000.0;
    for (what, age) in [
        ("status", status_age as f64),
        ("/health", health_age as f64),
        ("prometheus", gauge_ms),
    ] {
        assert!(age <= bound as f64, "{what}: {age} ms > {bound} ms");
    }
    assert!(
        health_age.abs_diff(status_age) <= bound,
        "/health {health_age} vs status {status_age}"
    );
    let view = top_once(&format!("http://{}", stack.addr()));
    assert!(
        view.lines().any(|line| {
            line == "backend: serving (last good probe 0s ago)"
                || line == "backend: serving (last good probe 1s ago)"
        }),
        "{view}"
    );
    stack.stop();
}
