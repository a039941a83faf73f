//! The operator's rules, one table or scenario each: what `on` and `off` do
//! for every state of the engine they can meet.

use std::time::Duration;

use strata_protocol::config::Config;
use tokio::time::Instant;

use super::*;

/// `a` and `b` are prepared (family alias prefers `b`), `c` is not installed.
fn config() -> Config {
    let prepared = |id: &str| {
        serde_json::json!({
            "family": "qwen3.8-flash-next", "quantization": "q4", "upstream_model": id,
            "installed": true, "compatible": true, "profile": format!("/profiles/{id}.json"),
        })
    };
    let text = serde_json::json!({
        "python": "/usr/bin/python3",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/strata-router/control.sock",
        "models": {
            "a": prepared("a"),
            "b": prepared("b"),
            "c": {"family": "qwen3.8-flash-next", "quantization": "q4", "upstream_model": "c"},
        },
        "aliases": {"qwen3.8-flash-next": {"allowed_models": ["b", "a"]}},
    })
    .to_string();
    Config::from_json_str(&text).expect("a valid config")
}

const IDLE: Facts<'static> = Facts {
    routing: true,
    shutting_down: false,
    serving: None,
    selected: None,
    last_loaded: None,
    leased: &[],
    op_running: false,
    control_load: false,
};

fn serving(model: &'static str) -> Facts<'static> {
    Facts {
        serving: Some((model, 42)),
        selected: Some(model),
        last_loaded: Some(model),
        ..IDLE
    }
}

fn done(actions: &[OperatorAction]) -> Option<(bool, &str)> {
    match actions.last() {
        Some(OperatorAction::Done { ok, message, .. }) => Some((*ok, message.as_str())),
        _ => None,
    }
}

fn without_progress(actions: &[OperatorAction]) -> Vec<OperatorAction> {
    actions
        .iter()
        .filter(|action| !matches!(action, OperatorAction::Progress { .. }))
        .cloned()
        .collect()
}

fn phases(actions: &[OperatorAction]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|action| match action {
            OperatorAction::Progress { phase, .. } => Some(*phase),
            _ => None,
        })
        .collect()
}

fn fresh() -> Operator {
    Operator::new(Duration::from_secs(120))
}

#[test]
fn on_is_refused_or_answered_at_once_where_nothing_waits() {
    let config = config();
    let now = Instant::now();
    let draining = Facts {
        shutting_down: true,
        ..IDLE
    };
    let routing_off_serving_a = Facts {
        routing: false,
        ..serving("a")
    };
    // (facts, requested, answer)
    let cases: [(Facts, Option<&str>, (bool, &str)); 7] = [
        (
            draining,
            Some("a"),
            (false, "on: the daemon is shutting down"),
        ),
        (IDLE, Some("nope"), (false, "on: unknown or disabled model")),
        (
            IDLE,
            Some("c"),
            (false, "on: model c is not prepared (not_installed)"),
        ),
        (serving("a"), Some("a"), (true, "on: already on")),
        // The alias prefers a loaded allowed model.
        (
            serving("a"),
            Some("qwen3.8-flash-next"),
            (true, "on: already on"),
        ),
        // A bare on keeps the serving model.
        (serving("b"), None, (true, "on: already on")),
        (
            routing_off_serving_a,
            None,
            (true, "on: model a loaded and healthy, routing enabled"),
        ),
    ];
    for (facts, requested, expected) in cases {
        let mut operator = fresh();
        let actions = operator.begin_on(1, requested, &facts, &config.registry, now);
        assert_eq!(done(&actions), Some(expected), "{requested:?} {facts:?}");
        assert!(!operator.is_running());
    }
    // Another operation runs: the new one is refused, the old one stays.
    let mut operator = fresh();
    operator.begin_off(1, false, &IDLE, now);
    let actions = operator.begin_on(2, Some("a"), &IDLE, &config.registry, now);
    assert_eq!(
        done(&actions),
        Some((false, "on: another operation is running"))
    );
    assert!(matches!(actions[0], OperatorAction::Done { op: 2, .. }));
    assert_eq!(operator.name(), Some("off"));
}

#[test]
fn a_bare_on_picks_the_serving_then_the_last_loaded_then_the_first_enabled_model() {
    let config = config();
    let now = Instant::now();
    let after_unload = Facts {
        last_loaded: Some("b"),
        ..IDLE
    };
    for (facts, expected) in [(IDLE, "a"), (after_unload, "b")] {
        let mut operator = fresh();
        operator.begin_on(1, None, &facts, &config.registry, now);
        let step = operator.step(&facts, now);
        assert_eq!(
            step.actions,
            [OperatorAction::StartLoad {
                model: expected.into()
            }]
        );
        assert!(step.hold);
    }
}

#[test]
fn on_waits_for_leases_on_another_model_then_loads_its_own() {
    let config = config();
    let now = Instant::now();
    let mut operator = fresh();
    let leased_a = Facts {
        leased: &["a", "a"],
        ..serving("a")
    };
    let actions = operator.begin_on(1, Some("b"), &leased_a, &config.registry, now);
    assert_eq!(phases(&actions), ["routing", "waiting"]);
    assert_eq!(
        without_progress(&actions),
        [OperatorAction::SetRouting(true)]
    );
    // (facts, actions without progress, hold)
    let step = operator.step(&leased_a, now);
    assert_eq!((step.actions, step.hold), (vec![], true));
    // A running op is decided around: no hold.
    let loading = Facts {
        op_running: true,
        ..leased_a
    };
    assert!(!operator.step(&loading, now).hold);
    let step = operator.step(&serving("a"), now);
    assert_eq!(
        step.actions,
        [OperatorAction::StartLoad { model: "b".into() }]
    );
    // Its own load's progress is reported; another model's is not.
    let loading_b = Facts {
        op_running: true,
        control_load: true,
        ..serving("a")
    };
    let event = ProgressEvent::StoppingOld { pid: 42 };
    let lines = operator.load_progress("b", &event, None, &loading_b, now);
    assert_eq!(phases(&lines), ["unloading", "stopping"]);
    assert!(matches!(
        &lines[0],
        OperatorAction::Progress { message, .. } if message == "unloading model a"
    ));
    assert!(
        operator
            .load_progress("a", &event, None, &loading_b, now)
            .is_empty()
    );
    let still = ProgressEvent::Start(StartProgress::StillWaiting {
        elapsed: Duration::from_secs(2),
    });
    assert!(matches!(
        &operator.load_progress("b", &still, None, &loading_b, now)[0],
        OperatorAction::Progress { message, .. }
            if message == "still waiting for readiness (2s of 120s allowed)"
    ));
    // Once b's loads were learned, the usual time is said as well.
    assert!(matches!(
        &operator.load_progress("b", &still, Some(19_600), &loading_b, now)[0],
        OperatorAction::Progress { message, .. }
            if message == "still waiting for readiness (2s, usually 20s; 120s allowed)"
    ));
    let actions = operator.load_finished("b", Ok(()), &serving("b"));
    assert_eq!(
        without_progress(&actions),
        [
            OperatorAction::RestartQuietClock,
            OperatorAction::Done {
                op: 1,
                name: "on",
                ok: true,
                message: "on: model b loaded and healthy, routing enabled".into()
            }
        ]
    );
    assert!(!operator.is_running());
}

#[test]
fn on_ends_with_the_outcome_of_its_load() {
    let config = config();
    let now = Instant::now();
    let routing_off = Facts {
        routing: false,
        ..serving("a")
    };
    type Case<'a> = (bool, Result<(), String>, Facts<'a>, Vec<OperatorAction>);
    // (routing before, result, facts at the end, actions)
    let cases: [Case; 3] = [
        (
            false,
            Err("backend exited with exit code 2".into()),
            IDLE,
            vec![
                OperatorAction::SetRouting(false),
                OperatorAction::Done {
                    op: 1,
                    name: "on",
                    ok: false,
                    message: "on: backend exited with exit code 2".into(),
                },
            ],
        ),
        (
            true,
            Err("load cancelled".into()),
            IDLE,
            vec![
                OperatorAction::SetRouting(true),
                OperatorAction::Done {
                    op: 1,
                    name: "on",
                    ok: false,
                    message: "on: load cancelled".into(),
                },
            ],
        ),
        // A legacy bare off during the load: the later word stands.
        (
            false,
            Ok(()),
            routing_off,
            vec![
                OperatorAction::RestartQuietClock,
                OperatorAction::Done {
                    op: 1,
                    name: "on",
                    ok: false,
                    message: "on: model a loaded, but routing was turned off during the load and stays off".into(),
                },
            ],
        ),
    ];
    for (routing, result, end, expected) in cases {
        let mut operator = fresh();
        let before = Facts { routing, ..IDLE };
        operator.begin_on(1, Some("a"), &before, &config.registry, now);
        operator.step(&before, now);
        let actions = operator.load_finished("a", result.clone(), &end);
        assert_eq!(actions, expected, "{result:?}");
    }
}

#[test]
fn another_loads_success_answers_a_waiting_on() {
    let config = config();
    let now = Instant::now();
    for (routing, ok) in [(true, true), (false, false)] {
        let mut operator = fresh();
        let leased = Facts {
            leased: &["b"],
            ..serving("b")
        };
        operator.begin_on(1, Some("a"), &leased, &config.registry, now);
        // A request's load of `a` got there first.
        let facts = Facts {
            routing,
            ..serving("a")
        };
        let step = operator.step(&facts, now);
        assert!(!step.hold);
        assert_eq!(step.actions[0], OperatorAction::RestartQuietClock);
        assert_eq!(done(&step.actions).map(|(ok, _)| ok), Some(ok));
    }
}

#[test]
fn off_stops_routing_waits_for_leases_then_unloads() {
    let now = Instant::now();
    // (interrupt, leases, phases, revokes)
    let cases: [(bool, &'static [&'static str], &[&str], bool); 3] = [
        (false, &[], &["routing"], false),
        (false, &["a"], &["routing", "waiting"], false),
        (true, &["a", "a"], &["routing", "interrupting"], true),
    ];
    for (interrupt, leased, expected_phases, revokes) in cases {
        let mut operator = fresh();
        let facts = Facts {
            leased,
            ..serving("a")
        };
        let actions = operator.begin_off(1, interrupt, &facts, now);
        assert_eq!(phases(&actions), expected_phases);
        let mut expected = vec![
            OperatorAction::SetRouting(false),
            OperatorAction::CancelLoad(CancelReason::RoutingOff),
        ];
        if revokes {
            expected.push(OperatorAction::RevokeAll);
        }
        assert_eq!(without_progress(&actions), expected);
        let step = operator.step(&facts, now);
        assert!(step.hold);
        assert_eq!(
            step.actions.is_empty(),
            !leased.is_empty(),
            "waits while leases exist"
        );
    }
    // Once the leases are gone: unload, then the answer when the stop ends.
    let mut operator = fresh();
    let off = Facts {
        routing: false,
        ..serving("a")
    };
    operator.begin_off(1, false, &off, now);
    let step = operator.step(&off, now);
    assert_eq!(phases(&step.actions), ["unloading", "stopping"]);
    assert_eq!(without_progress(&step.actions), [OperatorAction::StartStop]);
    // Its client leaving now changes nothing: the stop finishes and answers.
    assert!(operator.cancel(1, &off).is_empty());
    assert!(
        operator
            .stop_finished(StopReason::Idle, 42, &IDLE, now)
            .is_empty()
    );
    let routing_off = Facts {
        routing: false,
        ..IDLE
    };
    let actions = operator.stop_finished(StopReason::Off, 42, &routing_off, now);
    assert_eq!(phases(&actions), ["stopped"]);
    assert_eq!(
        done(&actions),
        Some((true, "off: model unloaded, routing disabled"))
    );
}

#[test]
fn off_with_nothing_loaded_or_routing_turned_back_on() {
    let now = Instant::now();
    // (routing when it ends, answer)
    let cases = [
        (false, (true, "off: no model loaded, routing disabled")),
        (
            true,
            (
                false,
                "off: no model loaded, routing disabled, but routing was turned back on meanwhile",
            ),
        ),
    ];
    for (routing, expected) in cases {
        let mut operator = fresh();
        operator.begin_off(1, false, &IDLE, now);
        let facts = Facts { routing, ..IDLE };
        let step = operator.step(&facts, now);
        assert_eq!(done(&step.actions), Some(expected));
        assert!(!operator.is_running());
    }
}

#[test]
fn a_gone_client_cancels_its_operation() {
    let config = config();
    let now = Instant::now();
    // `on` that started its own load: the load is cancelled, routing goes
    // back to what it was.
    let mut operator = fresh();
    let off = Facts {
        routing: false,
        ..IDLE
    };
    operator.begin_on(1, Some("a"), &off, &config.registry, now);
    operator.step(&off, now);
    let loading = Facts {
        op_running: true,
        control_load: true,
        ..off
    };
    assert!(operator.cancel(2, &loading).is_empty(), "another id");
    let actions = operator.cancel(1, &loading);
    assert_eq!(
        actions,
        [
            OperatorAction::CancelLoad(CancelReason::ControlClientGone),
            OperatorAction::SetRouting(false),
            OperatorAction::Done {
                op: 1,
                name: "on",
                ok: false,
                message: "on: cancelled by the client".into()
            },
        ]
    );
    // `on` still waiting for leases: nothing to cancel but itself.
    let mut operator = fresh();
    let leased = Facts {
        leased: &["b"],
        ..serving("b")
    };
    operator.begin_on(1, Some("a"), &leased, &config.registry, now);
    let actions = operator.cancel(1, &leased);
    assert_eq!(
        without_progress(&actions)[0],
        OperatorAction::SetRouting(true)
    );
    // `off` still waiting for leases.
    let mut operator = fresh();
    operator.begin_off(1, false, &leased, now);
    assert_eq!(
        done(&operator.cancel(1, &leased)),
        Some((false, "off: cancelled by the client"))
    );
    assert!(!operator.is_running());
}

#[test]
fn progress_lines_count_from_the_operations_start_and_abort_ends_it() {
    let config = config();
    let start = Instant::now();
    let mut operator = fresh();
    operator.begin_on(1, Some("a"), &IDLE, &config.registry, start);
    operator.step(&IDLE, start);
    let later = start + Duration::from_millis(1500);
    let lines = operator.load_progress(
        "a",
        &ProgressEvent::Start(StartProgress::Spawned { pid: 9 }),
        None,
        &IDLE,
        later,
    );
    assert_eq!(
        lines,
        [OperatorAction::Progress {
            op: 1,
            name: "on",
            phase: "waiting_for_readiness",
            message: "backend pid 9 started, waiting for readiness (loading model a)".into(),
            elapsed_ms: 1500,
        }]
    );
    let learned = operator.load_progress(
        "a",
        &ProgressEvent::Start(StartProgress::Spawned { pid: 9 }),
        Some(2_400),
        &IDLE,
        later,
    );
    assert!(
        matches!(&learned[0], OperatorAction::Progress { message, .. }
            if message == "backend pid 9 started, waiting for readiness (loading model a, usually 2s)"),
        "{learned:?}"
    );
    assert_eq!(
        done(&operator.abort("the daemon is shutting down")),
        Some((false, "on: the daemon is shutting down"))
    );
    assert!(operator.abort("again").is_empty());
}

/// The wait-then-stop step `off` and the watchdog's restart share.
#[test]
fn an_unload_waits_for_every_lease_then_stops_what_serves() {
    // (leases, serving, next)
    let cases = [
        (2, Some(42), Unload::Wait),
        (1, None, Unload::Wait),
        (0, Some(42), Unload::Stop(42)),
        (0, None, Unload::NothingToStop),
    ];
    for (leases, serving, expected) in cases {
        assert_eq!(
            unload_when_quiet(leases, serving),
            expected,
            "{leases} {serving:?}"
        );
    }
}
