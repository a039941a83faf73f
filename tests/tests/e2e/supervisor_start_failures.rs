//! Start failures of the real `strata-supervisor` against the fake backend: every failure
//! mode, through the control socket and through a proxy lease; the start cooldown; identity
//! mismatches never routing.

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::{ConfigBuilder, ModelSpec, Supervisor, procs};
use strata_protocol::wire::{LeaseFailure, SupervisorMessage};

const MODEL: &str = "flash-m";

/// What a failure case needs to know to predict its message.
struct Started {
    /// PID of the backend this attempt spawned (None when nothing was spawned).
    pid: Option<u32>,
    backend_port: u16,
}

/// Runs one failure mode twice, first through `{"cmd":"on"}` (with routing off before, so
/// "routing returns to its previous state" is visible), then through a proxy lease, and checks
/// the exact message, `last_startup_error`, the routing flag and that no backend is left.
async fn failure_case(
    tag: &str,
    model: ModelSpec,
    startup_ms: u64,
    spawns: bool,
    expected: impl Fn(&Started) -> String,
) {
    let config = ConfigBuilder::new(tag)
        .model(model)
        .startup_ms(startup_ms)
        .cooldown_ms(0)
        .build();
    // The busy-port case needs the port held for the whole test.
    let _holder = (!spawns).then(|| {
        TcpListener::bind((Ipv4Addr::LOCALHOST, config.backend_port))
            .expect("hold the backend port")
    });
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();
    let upstream = supervisor.config.upstream(MODEL);
    let backend_port = supervisor.config.backend_port;

    // 1. Through the control socket, with routing off before.
    assert_eq!(control.request("off"), vec![json!({"routing": false})]);
    let reply = control.on(Some(MODEL));
    reply.assert_failed();
    let first = Started {
        pid: spawns.then(|| {
            let starts = log.starts_for(&upstream);
            assert_eq!(starts.len(), 1, "one start expected\n{}", log.dump());
            starts[0].pid
        }),
        backend_port,
    };
    let message = expected(&first);
    assert_eq!(reply.message(), format!("on: {message}"), "{reply:#?}");
    assert_eq!(
        reply.status().last_startup_error.as_deref(),
        Some(message.as_str())
    );
    assert!(!reply.status().routing, "routing back to off");
    assert_eq!(reply.status().loaded, None);
    assert_eq!(reply.status().child_pid, None);
    if let Some(pid) = first.pid {
        assert!(!procs::is_alive(pid), "failed backend {pid} still running");
        assert!(
            !procs::group_alive(pid),
            "failed backend group {pid} still running"
        );
    } else {
        assert!(
            log.starts().is_empty(),
            "nothing may be spawned\n{}",
            log.dump()
        );
    }
    let status = control.status();
    assert_eq!(status.last_startup_error.as_deref(), Some(message.as_str()));
    assert!(!status.routing);
    assert_eq!(status.loaded, None);
    assert!(!status.busy);

    // 2. Through a proxy lease, with routing on.
    assert_eq!(control.request("on"), vec![json!({"routing": true})]);
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, MODEL).await;
    let failure = proxy.wait_failed(1).await;
    let second = Started {
        pid: spawns.then(|| {
            let starts = log.starts_for(&upstream);
            assert_eq!(starts.len(), 2, "a second start expected\n{}", log.dump());
            starts[1].pid
        }),
        backend_port,
    };
    let message = expected(&second);
    // A failed start is still a load the request was admitted to: it
    // reports whether it was a switch and how long it took.
    let LeaseFailure::LoadFailed {
        message: got,
        model_switch,
        load_ms,
        cooldown_ms,
        typical_load_ms,
    } = &failure
    else {
        panic!("expected LoadFailed, got {failure:?}");
    };
    assert_eq!(got, &message);
    assert_eq!(*typical_load_ms, None, "no load of it was verified");
    // The cooldown this failure started (none here), for the client's Retry-After.
    assert_eq!(*cooldown_ms, 0);
    assert!(model_switch, "a cold start is a switch");
    assert!(load_ms.is_some(), "a failed load has a duration");
    if let Some(pid) = second.pid {
        assert!(!procs::is_alive(pid), "failed backend {pid} still running");
    }
    let status = control.status();
    assert_eq!(status.last_startup_error.as_deref(), Some(message.as_str()));
    assert!(status.routing);
    assert_eq!(status.loaded, None);
    assert!(
        proxy.states().iter().all(|state| state.loaded.is_none()),
        "a failed model must never be reported loaded: {:?}",
        proxy.states()
    );
    drop(proxy);
    supervisor.stop();
}

#[tokio::test]
async fn start_failure_exit() {
    failure_case(
        "fail-exit",
        ModelSpec::new(MODEL)
            .start_failure("exit")
            .fake("exit_code", 7),
        10_000,
        true,
        |_| "backend exited during startup (exit code 7)".into(),
    )
    .await;
}

#[tokio::test]
async fn start_failure_hang_times_out() {
    failure_case(
        "fail-hang",
        ModelSpec::new(MODEL).start_failure("hang"),
        1_000,
        true,
        |_| "backend did not become ready within 1000 ms".into(),
    )
    .await;
}

#[tokio::test]
async fn start_failure_wrong_model_name() {
    failure_case(
        "fail-wname",
        ModelSpec::new(MODEL).start_failure("wrong_model_name"),
        10_000,
        true,
        |_| "backend identity mismatch: ready file names a different model".into(),
    )
    .await;
}

#[tokio::test]
async fn start_failure_wrong_pid() {
    failure_case(
        "fail-wpid",
        ModelSpec::new(MODEL).start_failure("wrong_pid"),
        10_000,
        true,
        |started| {
            let pid = started.pid.expect("spawned");
            format!(
                "backend ready file names pid {}, expected {pid}",
                pid + 1_000_000
            )
        },
    )
    .await;
}

#[tokio::test]
async fn start_failure_wrong_port() {
    failure_case(
        "fail-wport",
        ModelSpec::new(MODEL).start_failure("wrong_port"),
        10_000,
        true,
        |started| {
            format!(
                "backend ready file names port {}, expected {}",
                started.backend_port + 1,
                started.backend_port
            )
        },
    )
    .await;
}

#[tokio::test]
async fn start_failure_health_wrong_model() {
    failure_case(
        "fail-hmodel",
        ModelSpec::new(MODEL).start_failure("health_wrong_model"),
        10_000,
        true,
        |_| "backend /health reports a different model".into(),
    )
    .await;
}

#[tokio::test]
async fn start_failure_health_not_loaded() {
    failure_case(
        "fail-hnload",
        ModelSpec::new(MODEL).start_failure("health_not_loaded"),
        10_000,
        true,
        |_| "backend /health reports the model is not loaded".into(),
    )
    .await;
}

#[tokio::test]
async fn start_failure_busy_backend_port_spawns_nothing() {
    failure_case(
        "fail-busy",
        ModelSpec::new(MODEL),
        10_000,
        false,
        |started| format!("backend port {} is already in use", started.backend_port),
    )
    .await;
}

/// After a failed start, lease requests that need a launch of that model fail at once with
/// `Cooldown` without launching; the cooldown is per model, so a healthy model still loads
/// meanwhile; an explicit `on` ignores the cooldown.
#[tokio::test]
async fn cooldown_fails_leases_without_relaunch_but_on_ignores_it() {
    let config = ConfigBuilder::new("cooldown")
        .model(ModelSpec::new(MODEL).start_failure("exit"))
        .model(ModelSpec::new("flash-ok"))
        .cooldown_ms(60_000)
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let log = supervisor.fake_log();
    let upstream = supervisor.config.upstream(MODEL);
    let mut proxy = supervisor.proxy().await;

    proxy.acquire(1, MODEL).await;
    let LeaseFailure::LoadFailed {
        message,
        cooldown_ms,
        ..
    } = proxy.wait_failed(1).await
    else {
        panic!(
            "the first failure is a load failure: {:#?}",
            proxy.history()
        );
    };
    assert_eq!(message, "backend exited during startup (exit code 3)");
    assert_eq!(cooldown_ms, 60_000, "the cooldown it started");
    assert_eq!(log.start_count(&upstream), 1);

    // Within its cooldown: immediate Cooldown, no queueing, no launch.
    let asked = Instant::now();
    proxy.acquire(2, MODEL).await;
    let failure = proxy
        .wait_outcome_within(2, Duration::from_secs(5))
        .await
        .expect_err("no grant during the cooldown");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "Cooldown must be immediate, took {:?}",
        asked.elapsed()
    );
    match failure {
        LeaseFailure::Cooldown {
            message: cooldown_message,
            remaining_ms,
            ..
        } => {
            assert_eq!(cooldown_message, message);
            assert!(remaining_ms > 0 && remaining_ms <= 60_000, "{remaining_ms}");
        }
        other => panic!("expected Cooldown, got {other:?}"),
    }
    assert!(
        proxy.phases(2).is_empty(),
        "a cooldown failure is not queued first: {:?}",
        proxy.phases(2)
    );
    // The cooldown is the broken model's own: a healthy one loads and serves meanwhile.
    proxy.acquire(3, "flash-ok").await;
    let grant = proxy.wait_granted(3).await;
    assert_eq!(grant.upstream_model, "up-flash-ok");
    assert!(grant.load_ms.is_some(), "it was launched: {grant:?}");
    proxy.release(3).await;
    assert_eq!(
        log.start_count(&upstream),
        1,
        "no relaunch of the broken model\n{}",
        log.dump()
    );
    let status = control.status();
    assert!(
        status.cooldown_remaining_ms.is_some_and(|ms| ms > 0),
        "{status:?}"
    );

    // An explicit `on` ignores the cooldown: a second start of the failing model...
    let reply = control.on(Some(MODEL));
    reply.assert_failed();
    assert_eq!(
        log.start_count(&upstream),
        2,
        "on must launch\n{}",
        log.dump()
    );
    // ...and of a healthy one, which then serves leases again. The broken model's cooldown
    // (restarted by its failed `on`) still runs.
    control.on(Some("flash-ok")).assert_ok();
    assert!(
        control
            .status()
            .cooldown_remaining_ms
            .is_some_and(|ms| ms > 0)
    );
    proxy.acquire(4, "flash-ok").await;
    let grant = proxy.wait_granted(4).await;
    assert_eq!(grant.upstream_model, "up-flash-ok");
    assert_eq!(grant.load_ms, None, "already loaded by on");
    proxy.release(4).await;
    drop(proxy);
    supervisor.stop();
}

/// A backend that reports another model is never granted, never reported loaded, and
/// stopped.
#[tokio::test]
async fn identity_mismatch_never_routes() {
    let config = ConfigBuilder::new("mismatch")
        .model(ModelSpec::new(MODEL).start_failure("wrong_model_name"))
        .cooldown_ms(0)
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut proxy = supervisor.proxy().await;
    for lease in 1..=2 {
        proxy.acquire(lease, MODEL).await;
        let failure = proxy.wait_failed(lease).await;
        let LeaseFailure::LoadFailed { message, .. } = &failure else {
            panic!("expected LoadFailed, got {failure:?}");
        };
        assert_eq!(
            message,
            "backend identity mismatch: ready file names a different model"
        );
    }
    // The mismatching backend did get ready (so the check, not a crash, rejected it).
    assert_eq!(log.events_named("ready").len(), 2, "{}", log.dump());
    assert!(
        !proxy
            .history()
            .iter()
            .any(|message| matches!(message, SupervisorMessage::Granted(_))),
        "no grant may ever be sent: {:#?}",
        proxy.history()
    );
    assert!(proxy.states().iter().all(|state| state.loaded.is_none()));
    assert_eq!(supervisor.status().loaded, None);
    log.assert_no_backends_left();
    drop(proxy);
    supervisor.stop();
}

/// Models that are not installed, not compatible, or whose profile is missing or breaks a
/// rule (lazy loading, an API key, another model name) are refused by lease and by `on`, and
/// never launched.
#[tokio::test]
async fn unprepared_models_are_never_launched() {
    use strata_protocol::config::ModelStatus;
    let cases = [
        ("flash-u", ModelStatus::NotInstalled),
        ("flash-i", ModelStatus::Incompatible),
        ("flash-m", ModelStatus::MissingProfile),
        ("flash-l", ModelStatus::InvalidProfile),
        ("flash-k", ModelStatus::InvalidProfile),
        ("flash-n", ModelStatus::InvalidProfile),
    ];
    let config = ConfigBuilder::new("unprepared")
        .model(ModelSpec::new("flash-u").not_installed())
        .model(ModelSpec::new("flash-i").incompatible())
        .model(ModelSpec::new("flash-m").without_profile())
        .model(ModelSpec::new("flash-l").profile_key("lazy_load", true))
        .model(ModelSpec::new("flash-k").profile_key("api_key", "secret"))
        .model(ModelSpec::new("flash-n").profile_key("model_name", "something-else"))
        .build();
    let supervisor = Supervisor::start(config);
    let control = supervisor.control();
    let mut proxy = supervisor.proxy().await;
    for (lease, (id, status)) in (1..).zip(cases) {
        proxy.acquire(lease, id).await;
        assert_eq!(
            proxy.wait_failed(lease).await,
            LeaseFailure::NotPrepared { status },
            "{id}"
        );
        let reply = control.on(Some(id));
        reply.assert_failed();
        assert_eq!(
            reply.message(),
            format!("on: model {id} is not prepared ({})", status.as_str())
        );
    }
    let state = proxy.state().expect("a state").clone();
    for (id, status) in cases {
        let entry = state
            .statuses
            .iter()
            .find(|entry| entry.id == id)
            .unwrap_or_else(|| panic!("{id} missing from {state:?}"));
        assert_eq!(entry.status, status, "{id}");
    }
    assert!(supervisor.fake_log().events().is_empty());
    let status = control.status();
    assert_eq!(status.last_startup_error, None, "nothing was started");
    assert!(status.routing);
    drop(proxy);
    supervisor.stop();
}
