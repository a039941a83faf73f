//! The operator control socket of the real `strata-supervisor`: `on` progress and model
//! resolution, legacy bare commands, concurrent operations, clients that hang up, and
//! malformed requests.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::{
    ConfigBuilder, DEADLINE, FLASH, ModelSpec, OpReply, Supervisor, child_pid, on_line,
    parse_status, poll_for, poll_until, procs,
};
use strata_protocol::control::STATUS_FIELDS;

const A: &str = "flash-a";
const B: &str = "flash-b";

/// `on` streams its phases in order, then exactly one `done` with the status fields; the
/// client half-closing its side after the request is not a hang-up. A second `on` answers
/// "on: already on" at once.
#[test]
fn on_reports_each_phase_then_one_done() {
    let config = ConfigBuilder::new("onprogress")
        .model(ModelSpec::new(A).load_ms(2_800))
        .startup_ms(10_000)
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();

    let reply = control.on(Some(A));
    reply.assert_ok();
    let pid = log.starts()[0].pid;
    let messages = reply.messages();
    let phases = reply.phases();
    let waits = messages
        .iter()
        .filter(|message| message.starts_with("still waiting for readiness"))
        .count();
    assert!(waits >= 1, "a 2.8 s load reports waiting: {reply:#?}");
    let mut expected_messages = vec![
        "routing enabled".to_owned(),
        format!("starting backend for model {A}"),
        format!("backend pid {pid} started, waiting for readiness (loading model {A})"),
    ];
    let mut expected_phases = vec!["routing", "starting", "waiting_for_readiness"];
    for n in 1..=waits {
        expected_messages.push(format!(
            "still waiting for readiness ({}s of 10s allowed)",
            2 * n
        ));
        expected_phases.push("waiting_for_readiness");
    }
    expected_messages.push("backend reported ready, running health check".into());
    expected_messages.push("health check passed, model identity verified".into());
    expected_phases.extend(["health_check", "verified"]);
    assert_eq!(messages, expected_messages, "{reply:#?}");
    assert_eq!(phases, expected_phases);
    let mut last = 0;
    for event in &reply.progress {
        assert_eq!(event.op, "on");
        assert!(
            event.elapsed_ms >= last,
            "elapsed_ms goes backwards: {reply:#?}"
        );
        last = event.elapsed_ms;
    }
    assert_eq!(
        reply.message(),
        format!("on: model {A} loaded and healthy, routing enabled")
    );
    // The raw JSON: every status key, null ones too.
    let done = reply.lines.last().expect("a done line");
    for key in STATUS_FIELDS {
        assert!(done.get(key).is_some(), "done without {key}: {done}");
    }
    let status = reply.status();
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(status.child_pid, Some(pid));
    assert!(status.routing);
    assert!(!status.busy);
    assert_eq!(status.daemon_pid, supervisor.pid());

    for model in [None, Some(A)] {
        let asked = Instant::now();
        let again = control.on(model);
        again.assert_ok();
        assert_eq!(again.message(), "on: already on");
        assert!(again.progress.is_empty(), "{again:#?}");
        assert!(asked.elapsed() < Duration::from_secs(2));
        assert_eq!(again.status().loaded.as_deref(), Some(A));
    }
    assert_eq!(log.starts().len(), 1);
    supervisor.stop();
}

/// `on` loads MODEL (concrete or alias) if given, else the loaded model, else the last loaded,
/// else the first enabled; a model that is not installed fails without touching routing or
/// the loaded model.
#[test]
fn on_resolves_the_model_to_load() {
    let config = ConfigBuilder::new("onresolve")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .model(ModelSpec::new("flash-u").not_installed())
        .enabled_models(&[B, A, "flash-u"])
        .alias(FLASH, &[B, A])
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();
    let started = || -> Vec<String> {
        log.starts()
            .into_iter()
            .map(|start| start.model_name)
            .collect()
    };

    // Nothing loaded, nothing loaded before: the first enabled model (not the first by ID).
    let reply = control.on(None);
    reply.assert_ok();
    assert_eq!(reply.status().loaded.as_deref(), Some(B));
    assert_eq!(started(), ["up-flash-b"]);
    let pid_b = child_pid(&reply.status());

    // A concrete ID: a switch, stopping the old backend first.
    let reply = control.on(Some(A));
    reply.assert_ok();
    assert_eq!(reply.status().loaded.as_deref(), Some(A));
    let messages = reply.messages();
    let position = |text: &str| {
        messages
            .iter()
            .position(|message| *message == text)
            .unwrap_or_else(|| panic!("no progress {text:?}: {reply:#?}"))
    };
    let unloading = position(&format!("unloading model {B}"));
    let stopping = position(&format!("stopping backend pid {pid_b}"));
    let stopped = position(&format!("backend pid {pid_b} exited, memory released"));
    let starting = position(&format!("starting backend for model {A}"));
    assert!(unloading < stopping && stopping < stopped && stopped < starting);
    // The log says why the switch happened; the first load was no switch.
    let stderr = supervisor.stderr();
    assert!(
        stderr.contains(&format!(
            "loading model model=\"{A}\" from=\"{B}\" reason=\"operator\""
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("loading model model=\"{B}\"\n"))
            || stderr.contains(&format!("loading model model=\"{B}\"\r")),
        "{stderr}"
    );
    assert!(!procs::is_alive(pid_b));

    // No model given: the loaded one (already on); the alias prefers the loaded model too.
    for model in [None, Some("qwen3.8-flash-next")] {
        let reply = control.on(model);
        reply.assert_ok();
        assert_eq!(reply.message(), "on: already on", "{model:?}");
        assert_eq!(reply.status().loaded.as_deref(), Some(A));
    }
    assert_eq!(started(), ["up-flash-b", "up-flash-a"]);

    // Nothing loaded: the last loaded model.
    control.off(false).assert_ok();
    let reply = control.on(None);
    reply.assert_ok();
    assert_eq!(reply.status().loaded.as_deref(), Some(A));

    // An alias with nothing loaded: its preferred (first) model.
    control.off(false).assert_ok();
    let reply = control.on(Some("qwen3.8-flash-next"));
    reply.assert_ok();
    assert_eq!(reply.status().loaded.as_deref(), Some(B));
    assert_eq!(
        started(),
        ["up-flash-b", "up-flash-a", "up-flash-a", "up-flash-b"]
    );
    let pid = child_pid(&reply.status());

    // Not installed: fails, routing back to what it was, the loaded model untouched.
    for routing in [false, true] {
        let word = if routing { "on" } else { "off" };
        assert_eq!(control.request(word), vec![json!({ "routing": routing })]);
        let reply = control.on(Some("flash-u"));
        reply.assert_failed();
        assert_eq!(
            reply.message(),
            "on: model flash-u is not prepared (not_installed)"
        );
        assert_eq!(reply.status().routing, routing);
        let status = control.status();
        assert_eq!(status.routing, routing);
        assert_eq!(status.loaded.as_deref(), Some(B));
        assert_eq!(child_pid(&status), pid);
    }
    let reply = control.on(Some("no-such-model"));
    reply.assert_failed();
    assert_eq!(reply.message(), "on: unknown or disabled model");
    assert_eq!(started().len(), 4, "failed ons launch nothing");
    supervisor.stop();
}

/// Bare `on` and `off` answer exactly `{"routing":...}` and never load or unload; bare
/// `status` is one JSON line with the documented keys.
#[test]
fn legacy_bare_commands_only_flip_routing() {
    let config = ConfigBuilder::new("legacy")
        .model(ModelSpec::new(A))
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();

    // Nothing loaded: bare `on` does not load.
    assert_eq!(control.request("on"), vec![json!({"routing": true})]);
    let status = control.status();
    assert!(!status.busy);
    assert_eq!(status.loaded, None);
    assert!(log.events().is_empty(), "{}", log.dump());

    control.on(Some(A)).assert_ok();
    let pid = log.starts()[0].pid;
    let events_before = log.events().len();

    // Loaded: bare `off` does not unload, bare `on` does not reload.
    assert_eq!(control.request("off"), vec![json!({"routing": false})]);
    let status = control.status();
    assert!(!status.routing);
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(child_pid(&status), pid);
    assert_eq!(control.request("on"), vec![json!({"routing": true})]);
    assert!(procs::is_alive(pid));
    assert_eq!(log.events().len(), events_before, "{}", log.dump());

    // The raw JSON: every status key, null ones too.
    let line = control.status_json();
    for key in STATUS_FIELDS {
        assert!(line.get(key).is_some(), "status without {key}: {line}");
    }
    let status = parse_status(&line);
    assert_eq!(status.daemon_pid, supervisor.pid());
    assert!(!status.busy);
    assert_eq!(status.child_pid, Some(pid));
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(status.last_startup_error, None);
    assert!(status.routing);
    assert!(!status.draining);
    assert_eq!(status.proxies, 0);
    // The JSON spelling answers the same document.
    let lines = control.request(r#"{"cmd":"status"}"#);
    assert_eq!(lines.len(), 1);
    // (The age of the last good probe grows between the two.)
    let mut again = parse_status(&lines[0]);
    assert!(again.last_good_probe_age_ms.is_some(), "{again:?}");
    again.last_good_probe_age_ms = status.last_good_probe_age_ms;
    assert_eq!(again, status);
    supervisor.stop();
}

/// Two `on` operations sent at once both complete, one after the other; `status` answers at
/// once during a slow load.
#[test]
fn concurrent_on_operations_run_one_after_the_other() {
    let config = ConfigBuilder::new("concurrent")
        .model(ModelSpec::new(A).load_ms(1_200))
        .model(ModelSpec::new(B).load_ms(1_200))
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let barrier = Arc::new(Barrier::new(3));
    let threads: Vec<_> = [A, B]
        .into_iter()
        .map(|model| {
            let control = supervisor.control();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                (model, control.on(Some(model)))
            })
        })
        .collect();
    barrier.wait();

    // During the first load, `status` answers at once and says busy.
    poll_until(DEADLINE, "a backend start", || !log.starts().is_empty());
    let asked = Instant::now();
    let status = supervisor.status();
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "status took {:?} during a load",
        asked.elapsed()
    );
    assert!(status.busy, "{status:?}");
    assert_eq!(status.operation.as_deref(), Some("on"));

    let replies: Vec<(&str, OpReply)> = threads
        .into_iter()
        .map(|thread| thread.join().expect("control thread"))
        .collect();
    for (model, reply) in &replies {
        reply.assert_ok();
        assert_eq!(reply.status().loaded.as_deref(), Some(*model));
    }
    let starts = log.starts();
    assert_eq!(starts.len(), 2, "{}", log.dump());
    let first = if starts[0].model_name == "up-flash-a" {
        A
    } else {
        B
    };
    let second = if first == A { B } else { A };
    let reply_of = |model: &str| &replies.iter().find(|(m, _)| *m == model).expect("reply").1;
    // When the first finished, nothing else was running...
    let first_done = reply_of(first).status();
    assert!(!first_done.busy, "{first_done:?}");
    assert_eq!(first_done.loading, None);
    assert_eq!(first_done.child_pid, Some(starts[0].pid));
    // ...and the second found the first loaded and replaced it.
    let second_reply = reply_of(second);
    assert!(
        second_reply
            .messages()
            .contains(&format!("unloading model {first}").as_str()),
        "{second_reply:#?}"
    );
    let ready_first = log.index_of(starts[0].pid, "ready").expect("first ready");
    let exit_first = log.index_of(starts[0].pid, "exit").expect("first exit");
    assert!(
        ready_first < exit_first && exit_first < starts[1].index,
        "{}",
        log.dump()
    );
    assert_eq!(supervisor.status().loaded.as_deref(), Some(second));
    supervisor.stop();
}

fn cancelled_on(tag: &str, half_close: bool) {
    let config = ConfigBuilder::new(tag)
        .model(ModelSpec::new(A).load_ms(5_000))
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();
    let routing_before = !half_close;
    if !routing_before {
        assert_eq!(control.request("off"), vec![json!({"routing": false})]);
    }

    let mut session = control.open(&on_line(Some(A)));
    if half_close {
        session.half_close();
    }
    session.wait_progress(DEADLINE, "started, waiting for readiness");
    let pid = poll_for(DEADLINE, "the backend's start event", || {
        log.starts().first().map(|start| start.pid)
    });
    assert!(control.status().routing, "on enables routing");
    drop(session);

    poll_until(DEADLINE, "the cancelled backend to exit", || {
        !procs::is_alive(pid)
    });
    let status = poll_for(DEADLINE, "the cancelled on to settle", || {
        let status = control.status();
        (!status.busy).then_some(status)
    });
    assert_eq!(status.routing, routing_before, "routing restored");
    assert_eq!(status.loaded, None);
    assert_eq!(status.child_pid, None);
    assert!(!procs::group_alive(pid));
    assert!(log.events_named("ready").is_empty(), "{}", log.dump());
    assert_eq!(log.starts().len(), 1);
    supervisor.stop();
}

/// A control client that hangs up during `on` cancels the load: the child is killed and
/// routing returns to its previous state (off here).
#[test]
fn a_control_client_hanging_up_cancels_its_load() {
    cancelled_on("oncancel", false);
}

/// The same after the client first half-closed its side (it is gone only once it closes).
#[test]
fn a_half_closed_control_client_hanging_up_cancels_its_load() {
    cancelled_on("oncancelhc", true);
}

/// Garbage, unknown commands, JSON with extra or mistyped keys and non-UTF-8 get
/// `{"error":"unknown control command"}`; an over-long line gets its own error; nothing is
/// loaded and the daemon keeps serving.
#[test]
fn malformed_control_requests_are_refused_and_the_daemon_keeps_serving() {
    let config = ConfigBuilder::new("badctl")
        .model(ModelSpec::new(A))
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let unknown = vec![json!({"error": "unknown control command"})];
    for line in [
        "garbage",
        "ON",
        "",
        "status please",
        "[1,2]",
        "{not json",
        r#"{"cmd":"reboot"}"#,
        r#"{"cmd":"on","model":"flash-a","extra":1}"#,
        r#"{"cmd":"status","verbose":true}"#,
        r#"{"cmd":"off","now":"yes"}"#,
        r#"{"cmd":"on","model":3}"#,
        r#"{"model":"flash-a"}"#,
    ] {
        assert_eq!(control.request(line), unknown, "line {line:?}");
    }
    assert_eq!(control.request_raw(b"\xff\xfe\n"), unknown, "non-utf-8");
    let mut long = vec![b' '; 70_000];
    long.extend_from_slice(b"status\n");
    assert_eq!(
        control.request_raw(&long),
        vec![json!({"error": "request line too long"})]
    );
    let status = control.status();
    assert_eq!(status.loaded, None);
    assert!(status.routing);
    assert!(!status.busy);
    assert!(supervisor.fake_log().events().is_empty());
    control.on(Some(A)).assert_ok();
    supervisor.stop();
}

/// When the `on` client hangs up, lease requests that had joined its load are not lost: they
/// go back to waiting and get a load of their own.
#[tokio::test]
async fn leases_joined_to_a_cancelled_on_load_are_served_by_a_new_load() {
    let config = ConfigBuilder::new("onjoined")
        .model(ModelSpec::new(A).load_ms(2_000))
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut session = supervisor.control().open(&on_line(Some(A)));
    session.wait_progress(DEADLINE, "started, waiting for readiness");
    poll_until(DEADLINE, "the first backend to run", || {
        !log.starts().is_empty()
    });
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy.wait_phase(1, strata_e2e::TicketPhase::Admitted).await;
    drop(session);

    let grant = proxy.wait_granted(1).await;
    assert!(grant.load_ms.is_some());
    let starts = log.starts();
    assert_eq!(starts.len(), 2, "{}", log.dump());
    assert!(
        log.index_of(starts[0].pid, "ready").is_none(),
        "the first load was cancelled\n{}",
        log.dump()
    );
    assert!(!procs::is_alive(starts[0].pid));
    let status = supervisor.status();
    assert!(status.routing);
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(status.child_pid, Some(starts[1].pid));
    proxy.release(1).await;
    drop(proxy);
    supervisor.stop();
}

/// The idle clock restarts when `on` finishes: the model is not unloaded at once after a load
/// longer than `idle_ms`, but `idle_ms` later.
#[test]
fn idle_unload_applies_after_on_counting_from_its_end() {
    let idle = Duration::from_millis(1_500);
    let config = ConfigBuilder::new("onidle")
        .model(ModelSpec::new(A).load_ms(2_000))
        .idle_ms(idle.as_millis() as u64)
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let reply = control.on(Some(A));
    let done_at = Instant::now();
    reply.assert_ok();
    let pid = child_pid(&reply.status());
    poll_until(DEADLINE, "idle unload after on", || {
        control.status().loaded.is_none()
    });
    let unloaded_after = done_at.elapsed();
    assert!(
        unloaded_after >= idle - Duration::from_millis(200),
        "unloaded {unloaded_after:?} after on finished; idle_ms is {idle:?}"
    );
    poll_until(DEADLINE, "the idle-unloaded backend to exit", || {
        !procs::is_alive(pid)
    });
    assert!(control.status().routing);
    supervisor.stop();
}

/// A legacy bare `off` during an `on` load: the operator's later word stands, so routing
/// stays off, and `on` fails (it promises a router that accepts requests) while the model it
/// loaded stays loaded.
#[test]
fn a_legacy_off_during_on_makes_on_fail_and_routing_stays_off() {
    let config = ConfigBuilder::new("onlegacy")
        .model(ModelSpec::new(A).load_ms(1_500))
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let mut session = control.open(&on_line(Some(A)));
    session.wait_progress(DEADLINE, "started, waiting for readiness");
    assert_eq!(control.request("off"), vec![json!({"routing": false})]);
    let reply = session.wait_done(DEADLINE);
    reply.assert_failed();
    assert_eq!(
        reply.message(),
        format!("on: model {A} loaded, but routing was turned off during the load and stays off")
    );
    assert!(!reply.status().routing);
    let status = control.status();
    assert!(!status.routing);
    assert_eq!(status.loaded.as_deref(), Some(A));
    supervisor.stop();
}
