//! End-to-end tests of `strata_supervisor::backend` against the fake Strata server in
//! `tests/fake_strata` (run as `python3 -m serve.server ...` with cwd = that directory).
//!
//! Every test uses a private 0700 temporary directory, loopback ports found by binding port 0,
//! bounded polling instead of fixed sleeps, and stops every process it starts. They run on
//! current-thread tokio runtimes: `PR_SET_PDEATHSIG` fires when the forking *thread* exits, and
//! each test's thread outlives its backend.
//!
//! "Dead" below means gone or a zombie: the leader must be reaped by us (so `kill(pid, 0)` is
//! ESRCH), but an orphaned grandchild becomes a zombie of PID 1, which some container inits never
//! reap; a zombie holds no memory.
//!
//! Python: `strata_test_support::python` (`STRATA_TEST_PYTHON`, else `python3` from `PATH`,
//! resolved to the real interpreter so a pyenv shim does not sit between the supervisor and the
//! server).

use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use strata_protocol::config::{ReadinessBasis, ReadinessChoice, ReadinessMode};
use strata_supervisor::backend::{
    self, Backend, ExitInfo, LaunchSpec, Readiness, SCRUBBED_ENV, StartError, StartProgress,
};
use strata_test_support::{
    TempDir, fake_profile, fake_strata_dir, free_port, poll_until_async, procs, python,
};
use tokio::sync::watch;

const UPSTREAM: &str = "fake-upstream-model";
const MODEL_ID: &str = "router-model-id";

// ---- helpers ------------------------------------------------------------------------------

/// One backend's files: the profile, the fake's event log and the ready-dir parent.
struct Fixture {
    _dir: TempDir,
    log: PathBuf,
    ready_parent: PathBuf,
    spec: LaunchSpec,
}

impl Fixture {
    /// A profile for `UPSTREAM` with the fake's scripting keys `fake` (an object; plus `log`).
    fn new(tag: &str, fake: Value) -> Self {
        let dir = TempDir::new(tag);
        let log = dir.join("events.jsonl");
        let ready_parent = dir.subdir("run", 0o700);
        let Value::Object(fake) = fake else {
            panic!("the fake's keys are an object");
        };
        let profile = dir.write(
            "profile.json",
            &fake_profile(UPSTREAM, fake, &log).to_string(),
        );
        let spec = LaunchSpec {
            model_id: MODEL_ID.into(),
            python: python().to_path_buf(),
            strata_dir: fake_strata_dir(),
            profile,
            upstream_model: UPSTREAM.into(),
            backend_port: free_port(),
            ready_dir_parent: ready_parent.clone(),
            startup: Duration::from_secs(15),
            shutdown: Duration::from_secs(3),
            readiness: Readiness::ReadyFile,
            engine_log: None,
        };
        Self {
            _dir: dir,
            log,
            ready_parent,
            spec,
        }
    }

    /// The fake's events so far.
    fn events(&self) -> Vec<Value> {
        match fs::read_to_string(&self.log) {
            Ok(text) => text
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    fn event(&self, name: &str) -> Option<Value> {
        self.events().into_iter().find(|e| e["event"] == name)
    }

    /// The per-start ready directories must all be gone (a verified start removes its own
    /// on a blocking-pool thread, so within a bounded deadline).
    fn assert_ready_dirs_removed(&self) {
        let left = || -> Vec<_> {
            fs::read_dir(&self.ready_parent)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect()
        };
        strata_test_support::poll_until(
            Duration::from_secs(10),
            "the ready directories removed",
            || left().is_empty(),
        );
    }
}

/// Start with the process's environment, collecting progress events.
async fn start(spec: &LaunchSpec) -> (Result<Backend, StartError>, Vec<StartProgress>) {
    let (_tx, rx) = watch::channel(false);
    start_cancellable(spec, &rx).await
}

async fn start_cancellable(
    spec: &LaunchSpec,
    cancel: &watch::Receiver<bool>,
) -> (Result<Backend, StartError>, Vec<StartProgress>) {
    let mut seen = Vec::new();
    let mut progress = |p: StartProgress| seen.push(p);
    let result = backend::start(spec, &mut progress, cancel).await;
    (result, seen)
}

/// The `Spawned` pid from a progress list.
fn spawned_pid(progress: &[StartProgress]) -> u32 {
    progress
        .iter()
        .find_map(|p| match p {
            StartProgress::Spawned { pid } => Some(*pid),
            _ => None,
        })
        .expect("a Spawned event")
}

fn nix_pid(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap())
}

/// The leader was reaped (no zombie) and nothing of its group lives. The fake's engine child
/// (like Strata's native engine) is re-parented to PID 1 when the group is killed, and a
/// container's PID 1 may leave it a zombie for a while: zombies hold nothing and count as gone.
fn assert_group_gone_and_reaped(pid: u32) {
    assert_eq!(
        kill(nix_pid(pid), None),
        Err(Errno::ESRCH),
        "backend pid {pid} still exists (running or an unreaped zombie)"
    );
    assert!(
        !procs::group_alive(pid),
        "process group {pid} still has live members"
    );
}

/// Expect the start to fail; check the error, then that nothing is left.
async fn expect_failure(fixture: &Fixture, check: impl Fn(&StartError) -> bool, message: &str) {
    let (result, progress) = start(&fixture.spec).await;
    let err = result.expect_err("start must fail");
    assert!(check(&err), "unexpected error variant: {err:?}");
    assert_eq!(err.to_string(), message);
    assert!(
        !progress.contains(&StartProgress::HealthCheckPassed),
        "a failed start must not report success"
    );
    assert_group_gone_and_reaped(spawned_pid(&progress));
    fixture.assert_ready_dirs_removed();
}

// ---- successful start and stop ------------------------------------------------------------

#[tokio::test(flavor = "current_thread")]
async fn start_verifies_identity_and_stop_leaves_nothing() {
    // Long enough a load to see one "still waiting" line.
    let fixture = Fixture::new("ok", json!({"load_ms": 2300}));
    let (result, progress) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();

    // Progress in the spec's order.
    assert_eq!(progress[0], StartProgress::Starting);
    assert_eq!(progress[1], StartProgress::Spawned { pid });
    let waiting = &progress[2..progress.len() - 2];
    assert!(
        !waiting.is_empty()
            && waiting
                .iter()
                .all(|p| matches!(p, StartProgress::StillWaiting { .. })),
        "{progress:?}"
    );
    assert_eq!(
        progress[progress.len() - 2..],
        [
            StartProgress::ReadyFileSeen,
            StartProgress::HealthCheckPassed
        ]
    );
    assert!(backend.load_duration() >= Duration::from_millis(2300));

    // Identity: the pid the fake logged is ours, and it serves the expected model.
    assert_eq!(backend.pgid(), pid);
    assert_eq!(backend.model_id(), MODEL_ID);
    assert_eq!(backend.upstream_model(), UPSTREAM);
    assert_eq!(backend.addr().port(), fixture.spec.backend_port);
    let start_event = fixture.event("start").expect("start event");
    assert_eq!(start_event["pid"], json!(pid));
    assert_eq!(start_event["model_name"], json!(UPSTREAM));
    let health = backend::check_health(backend.addr(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(health.model, UPSTREAM);
    assert!(health.loaded);
    assert_eq!(procs::stat(pid).map(|(_, pgrp)| pgrp), Some(pid as i32));

    // The exact invocation: `-m serve.server` makes argv[0] the module's file.
    let argv: Vec<String> = serde_json::from_value(start_event["argv"].clone()).unwrap();
    assert!(argv[0].ends_with("serve/server.py"), "{argv:?}");
    let ready_file = start_event["ready_file"].as_str().unwrap().to_owned();
    let port = fixture.spec.backend_port.to_string();
    let profile = fixture.spec.profile.to_str().unwrap();
    assert_eq!(
        argv[1..],
        [
            "--engine",
            "strata",
            "--config",
            profile,
            "--host",
            "127.0.0.1",
            "--port",
            port.as_str(),
            "--idle-unload",
            "0",
            "--ready-file",
            ready_file.as_str(),
        ]
    );
    assert_eq!(
        start_event["cwd"].as_str().map(PathBuf::from),
        Some(fixture.spec.strata_dir.clone())
    );
    // READY_PATH was DIR/ready.json in a fresh directory under the parent, since removed.
    let ready_file = PathBuf::from(ready_file);
    assert_eq!(ready_file.file_name().unwrap(), "ready.json");
    assert_eq!(
        ready_file.parent().unwrap().parent().unwrap(),
        fixture.ready_parent
    );
    fixture.assert_ready_dirs_removed();

    let report = backend.stop(Duration::from_secs(3), None).await;
    assert_eq!(report.pid, pid);
    assert_eq!(report.exit, Some(ExitInfo::Code(0)));
    assert!(!report.forced_kill);
    assert!(report.group_gone);
    assert_eq!(
        report.to_string(),
        format!("backend pid {pid} exited, memory released")
    );
    assert_group_gone_and_reaped(pid);
    assert_eq!(
        fixture.event("stop").expect("stop event")["signal"],
        "SIGTERM"
    );
}

// ---- start failures: each has its own error and leaves nothing ------------------------------

#[tokio::test(flavor = "current_thread")]
async fn early_exit_reports_the_exit_code() {
    let fixture = Fixture::new("exit", json!({"start_failure": "exit"}));
    expect_failure(
        &fixture,
        |e| {
            matches!(
                e,
                StartError::Exited {
                    exit: ExitInfo::Code(3)
                }
            )
        },
        "backend exited during startup (exit code 3)",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn ready_file_with_wrong_model_is_rejected() {
    let fixture = Fixture::new("wrongmodel", json!({"start_failure": "wrong_model_name"}));
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::WrongModel),
        "backend identity mismatch: ready file names a different model",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn ready_file_with_wrong_pid_is_rejected() {
    let fixture = Fixture::new("wrongpid", json!({"start_failure": "wrong_pid"}));
    let (result, progress) = start(&fixture.spec).await;
    let pid = spawned_pid(&progress);
    let err = result.expect_err("start must fail");
    let reported = i64::from(pid) + 1_000_000;
    assert!(
        matches!(err, StartError::WrongPid { reported: r, expected } if r == reported && expected == pid),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("backend ready file names pid {reported}, expected {pid}")
    );
    assert_group_gone_and_reaped(pid);
    fixture.assert_ready_dirs_removed();
}

#[tokio::test(flavor = "current_thread")]
async fn ready_file_with_wrong_port_is_rejected() {
    let fixture = Fixture::new("wrongport", json!({"start_failure": "wrong_port"}));
    let port = fixture.spec.backend_port;
    let message = format!(
        "backend ready file names port {}, expected {port}",
        u32::from(port) + 1
    );
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::WrongPort { expected, .. } if *expected == port),
        &message,
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn health_with_wrong_model_is_rejected() {
    let fixture = Fixture::new(
        "healthmodel",
        json!({"start_failure": "health_wrong_model"}),
    );
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::HealthWrongModel),
        "backend /health reports a different model",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn health_not_loaded_is_rejected() {
    let fixture = Fixture::new("notloaded", json!({"start_failure": "health_not_loaded"}));
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::HealthNotLoaded),
        "backend /health reports the model is not loaded",
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn hanging_backend_times_out() {
    let mut fixture = Fixture::new("hang", json!({"start_failure": "hang"}));
    fixture.spec.startup = Duration::from_millis(700);
    let started = Instant::now();
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::TimedOut { after_ms: 700 }),
        "backend did not become ready within 700 ms",
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(700));
    // A failed start is killed at once: the fake never saw a SIGTERM it could act on.
    assert!(
        fixture.event("stop").is_none(),
        "a failed start must be SIGKILLed, not asked to stop"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_start_that_ignores_sigterm_is_killed_without_the_shutdown_grace() {
    let mut fixture = Fixture::new(
        "hangkill",
        json!({"start_failure": "hang", "ignore_sigterm": true}),
    );
    fixture.spec.startup = Duration::from_millis(500);
    fixture.spec.shutdown = Duration::from_secs(30);
    let started = Instant::now();
    expect_failure(
        &fixture,
        |e| matches!(e, StartError::TimedOut { after_ms: 500 }),
        "backend did not become ready within 500 ms",
    )
    .await;
    // With the old group SIGTERM and grace this took startup + 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the failed start waited out shutdown_ms: {:?}",
        started.elapsed()
    );
    assert!(fixture.event("signal_ignored").is_none());
}

#[tokio::test(flavor = "current_thread")]
async fn busy_port_spawns_nothing() {
    let fixture = Fixture::new("busy", json!({}));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut spec = fixture.spec.clone();
    spec.backend_port = listener.local_addr().unwrap().port();
    let (result, progress) = start(&spec).await;
    let err = result.expect_err("port is busy");
    assert!(matches!(err, StartError::PortInUse { port } if port == spec.backend_port));
    assert_eq!(
        err.to_string(),
        format!("backend port {} is already in use", spec.backend_port)
    );
    assert_eq!(progress, [StartProgress::Starting]);
    assert!(fixture.events().is_empty(), "nothing may be spawned");
    fixture.assert_ready_dirs_removed();
}

#[tokio::test(flavor = "current_thread")]
async fn cancel_during_load_stops_the_backend() {
    let fixture = Fixture::new("cancel", json!({"load_ms": 30000}));
    let (tx, rx) = watch::channel(false);
    let log = fixture.log.clone();
    // Cancel once the fake is up and loading.
    tokio::spawn(async move {
        poll_until_async(Duration::from_secs(10), "fake start event", || log.exists()).await;
        tx.send(true).unwrap();
        // Keep the sender alive until the start has seen it.
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let started = Instant::now();
    let (result, progress) = start_cancellable(&fixture.spec, &rx).await;
    let err = result.expect_err("cancelled");
    assert!(matches!(err, StartError::Cancelled), "{err:?}");
    assert_eq!(err.to_string(), "backend start cancelled");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_group_gone_and_reaped(spawned_pid(&progress));
    fixture.assert_ready_dirs_removed();
}

#[tokio::test(flavor = "current_thread")]
async fn cancel_before_spawn_spawns_nothing() {
    let fixture = Fixture::new("precancel", json!({}));
    let (tx, rx) = watch::channel(false);
    tx.send(true).unwrap();
    let (result, progress) = start_cancellable(&fixture.spec, &rx).await;
    assert!(matches!(result, Err(StartError::Cancelled)));
    assert_eq!(progress, [StartProgress::Starting]);
    assert!(fixture.events().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn failed_start_kills_grandchildren_too() {
    let fixture = Fixture::new(
        "failgc",
        json!({"start_failure": "wrong_pid", "spawn_grandchild": true}),
    );
    let (result, progress) = start(&fixture.spec).await;
    assert!(matches!(result, Err(StartError::WrongPid { .. })));
    let grandchild = fixture.event("grandchild").expect("grandchild event")["child_pid"]
        .as_u64()
        .unwrap() as u32;
    let pid = spawned_pid(&progress);
    assert!(
        !procs::is_alive(grandchild),
        "grandchild {grandchild} survived"
    );
    assert!(!procs::group_alive(pid));
    assert_eq!(kill(nix_pid(pid), None), Err(Errno::ESRCH), "leader reaped");
}

#[tokio::test(flavor = "current_thread")]
async fn missing_interpreter_is_a_spawn_error() {
    let fixture = Fixture::new("nopython", json!({}));
    let mut spec = fixture.spec.clone();
    spec.python = fixture.ready_parent.join("no-such-python");
    let (result, progress) = start(&spec).await;
    let err = result.expect_err("nothing to run");
    assert!(matches!(err, StartError::Spawn(_)), "{err:?}");
    assert!(err.to_string().starts_with("could not start the backend: "));
    assert_eq!(progress, [StartProgress::Starting]);
    fixture.assert_ready_dirs_removed();
}

// ---- stopping -----------------------------------------------------------------------------

#[tokio::test(flavor = "current_thread")]
async fn sigterm_ignored_needs_sigkill_and_group_is_confirmed_gone() {
    let fixture = Fixture::new("ignoreterm", json!({"ignore_sigterm": true}));
    let (result, _) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();
    let grace = Duration::from_millis(600);
    let report = backend.stop(grace, None).await;
    assert!(report.forced_kill);
    assert_eq!(report.exit, Some(ExitInfo::Signal(9)));
    assert!(report.elapsed >= grace);
    assert!(report.group_gone);
    assert_group_gone_and_reaped(pid);
    assert!(
        fixture.event("signal_ignored").is_some(),
        "the fake saw and ignored SIGTERM"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_stop_signals_the_server_alone_and_kills_the_rest_after_the_grace() {
    // The grandchild (a `sleep` in the group) dies on SIGTERM but the fake never stops it: if
    // SIGTERM went to the whole group it would be gone at once and no SIGKILL would be needed.
    let fixture = Fixture::new("leaderonly", json!({"spawn_grandchild": true}));
    let (result, _) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();
    let grandchild = fixture.event("grandchild").expect("grandchild event")["child_pid"]
        .as_u64()
        .unwrap() as u32;
    let grace = Duration::from_millis(500);
    let report = backend.stop(grace, None).await;
    assert_eq!(
        fixture.event("stop").expect("the server got SIGTERM")["signal"],
        "SIGTERM"
    );
    assert_eq!(
        report.exit,
        Some(ExitInfo::Code(0)),
        "the server exited on its own"
    );
    assert!(report.forced_kill, "the grandchild outlived the grace");
    assert!(report.elapsed >= grace);
    assert!(report.group_gone);
    assert!(!procs::is_alive(grandchild));
    // The killed grandchild is PID 1's to reap: only the group's liveness is checked.
    assert!(!procs::group_alive(pid));
    assert_eq!(kill(nix_pid(pid), None), Err(Errno::ESRCH), "leader reaped");
}

#[tokio::test(flavor = "current_thread")]
async fn a_hurried_stop_kills_the_group_without_waiting_out_the_grace() {
    let fixture = Fixture::new("hurry", json!({"ignore_sigterm": true}));
    let (result, _) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();
    let (hurry, hurry_rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let stop = backend.stop(Duration::from_secs(60), Some(&hurry_rx));
    let raise = async {
        poll_until_async(Duration::from_secs(10), "SIGTERM seen by the fake", || {
            fixture.event("signal_ignored").is_some()
        })
        .await;
        hurry.send(true).unwrap();
    };
    let (report, ()) = tokio::join!(stop, raise);
    assert!(report.forced_kill);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(report.group_gone);
    assert_group_gone_and_reaped(pid);
}

#[tokio::test(flavor = "current_thread")]
async fn grandchild_dies_with_the_group_on_stop() {
    let fixture = Fixture::new("grandchild", json!({"spawn_grandchild": true}));
    let (result, _) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();
    let grandchild = fixture.event("grandchild").expect("grandchild event")["child_pid"]
        .as_u64()
        .unwrap() as u32;
    assert_eq!(
        procs::stat(grandchild).map(|(_, pgrp)| pgrp),
        Some(pid as i32),
        "grandchild runs in the backend's group"
    );
    assert!(procs::is_alive(grandchild));
    let report = backend.stop(Duration::from_secs(3), None).await;
    assert!(report.group_gone);
    assert!(
        !procs::is_alive(grandchild),
        "grandchild {grandchild} survived stop"
    );
    assert!(!procs::group_alive(pid));
    assert_eq!(kill(nix_pid(pid), None), Err(Errno::ESRCH), "leader reaped");
}

#[tokio::test(flavor = "current_thread")]
async fn later_death_is_detected_and_reaped() {
    // The fake passes every check, then exits with code 4 about 200 ms after writing its ready
    // file; the start itself succeeds well within that.
    let fixture = Fixture::new("exitafter", json!({"start_failure": "exit_after_ready"}));
    let (result, _) = start(&fixture.spec).await;
    let mut backend = result.expect("start succeeds before the scripted exit");
    let pid = backend.pid();
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = backend.try_exited() {
            break exit;
        }
        assert!(Instant::now() < deadline, "death not detected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exit, ExitInfo::Code(4));
    assert_eq!(
        backend.try_exited(),
        Some(ExitInfo::Code(4)),
        "stable answer"
    );
    // Reaped: not even a zombie is left.
    assert_group_gone_and_reaped(pid);
    let report = backend.stop(Duration::from_secs(1), None).await;
    assert_eq!(report.exit, Some(ExitInfo::Code(4)));
    assert!(report.group_gone);
    assert!(!report.forced_kill);
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_a_backend_kills_its_group() {
    let fixture = Fixture::new("drop", json!({}));
    let (result, _) = start(&fixture.spec).await;
    let backend = result.expect("start succeeds");
    let pid = backend.pid();
    drop(backend);
    // Killed, then reaped by the background reaper: the pid disappears entirely.
    poll_until_async(Duration::from_secs(10), "dropped backend reaped", || {
        kill(nix_pid(pid), None) == Err(Errno::ESRCH)
    })
    .await;
    assert_group_gone_and_reaped(pid);
}

// ---- environment --------------------------------------------------------------------------

#[tokio::test(flavor = "current_thread")]
async fn environment_is_inherited_minus_the_scrubbed_variables() {
    let fixture = Fixture::new("env", json!({}));
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != "KEEP_ME" && !SCRUBBED_ENV.iter().any(|s| k == s))
        .collect();
    for key in SCRUBBED_ENV {
        env.push((key.into(), "must-not-leak".into()));
    }
    env.push(("KEEP_ME".into(), "1".into()));
    let mut progress = |_: StartProgress| {};
    let (_tx, rx) = watch::channel(false);
    let backend = backend::start_with_env(&fixture.spec, env, &mut progress, &rx)
        .await
        .expect("start succeeds");
    let keys: Vec<String> =
        serde_json::from_value(fixture.event("start").unwrap()["env_keys"].clone()).unwrap();
    for key in SCRUBBED_ENV {
        assert!(!keys.iter().any(|k| k == key), "{key} leaked: {keys:?}");
    }
    assert!(keys.iter().any(|k| k == "KEEP_ME"), "KEEP_ME dropped");
    assert!(keys.iter().any(|k| k == "PATH"), "PATH dropped");
    assert!(backend.stop(Duration::from_secs(3), None).await.group_gone);
}

// ---- parent death -------------------------------------------------------------------------

/// Set in the re-executed test binary: the directory with `spec.json`; the helper writes
/// `backend.pid` there.
const HELPER_ENV: &str = "STRATA_BACKEND_TEST_PARENT_DEATH_DIR";
const HELPER_TEST: &str = "parent_death_helper";

/// Not a test on its own: does nothing unless re-executed by `backend_dies_with_its_parent`.
/// Then it starts a backend, records its pid and waits to be SIGKILLed.
#[tokio::test(flavor = "current_thread")]
async fn parent_death_helper() {
    let Some(dir) = std::env::var_os(HELPER_ENV).map(PathBuf::from) else {
        return;
    };
    let params: Value = serde_json::from_slice(&fs::read(dir.join("spec.json")).unwrap()).unwrap();
    let spec = LaunchSpec {
        model_id: MODEL_ID.into(),
        python: params["python"].as_str().unwrap().into(),
        strata_dir: params["strata_dir"].as_str().unwrap().into(),
        profile: params["profile"].as_str().unwrap().into(),
        upstream_model: UPSTREAM.into(),
        backend_port: params["port"].as_u64().unwrap() as u16,
        ready_dir_parent: params["ready_parent"].as_str().unwrap().into(),
        startup: Duration::from_secs(15),
        shutdown: Duration::from_secs(3),
        readiness: Readiness::ReadyFile,
        engine_log: None,
    };
    let (result, _) = start(&spec).await;
    let backend = result.expect("helper start succeeds");
    let tmp = dir.join("backend.pid.tmp");
    fs::write(&tmp, backend.pid().to_string()).unwrap();
    fs::rename(&tmp, dir.join("backend.pid")).unwrap();
    // Bounded: if the parent test never kills us, clean up and leave.
    tokio::time::sleep(Duration::from_secs(60)).await;
    backend.stop(Duration::from_secs(3), None).await;
}

#[tokio::test(flavor = "current_thread")]
async fn backend_dies_with_its_parent() {
    let fixture = Fixture::new("pdeath", json!({}));
    let dir = TempDir::new("pdeath-helper");
    let params = json!({
        "python": fixture.spec.python,
        "strata_dir": fixture.spec.strata_dir,
        "profile": fixture.spec.profile,
        "port": fixture.spec.backend_port,
        "ready_parent": fixture.spec.ready_dir_parent,
    });
    fs::write(dir.path().join("spec.json"), params.to_string()).unwrap();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args([HELPER_TEST, "--exact", "--test-threads", "1", "--nocapture"])
        .env(HELPER_ENV, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let pid_file = dir.path().join("backend.pid");
    poll_until_async(Duration::from_secs(20), "helper started a backend", || {
        pid_file.exists()
    })
    .await;
    let pid: u32 = fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    assert!(procs::is_alive(pid));

    kill(nix_pid(helper.id()), Signal::SIGKILL).unwrap();
    helper.wait().unwrap();

    // The parent-death signal is SIGKILL and needs no cooperation from the backend. It is now
    // an orphan, so it may linger as a zombie of PID 1.
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs::is_alive(pid) {
        if Instant::now() >= deadline {
            procs::signal_group(pid, Signal::SIGKILL);
            panic!("backend {pid} outlived its parent");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        fixture.event("stop").is_none(),
        "killed by the kernel, not stopped gracefully"
    );
}

// ---- readiness modes ------------------------------------------------------------------------

/// An interpreter that runs the fake as the public `serve/server.py` would be: without
/// `--ready-file` (a wrapper around the real Python that sets the fake's switch for it).
fn upstream_cli_python(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("python-upstream-cli");
    let script = format!(
        "#!/bin/sh\nFAKE_STRATA_UPSTREAM_CLI=1 exec {} \"$@\"\n",
        python().display()
    );
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `health` readiness: no `--ready-file` on the command line; the start is accepted once the
/// child's group listens on the port and `/health` names the model, loaded; also with a Strata
/// that does not know the flag at all.
#[tokio::test(flavor = "current_thread")]
async fn the_health_mode_needs_no_ready_file() {
    for upstream_cli in [false, true] {
        let mut fixture = Fixture::new("health-mode", json!({"load_ms": 300}));
        fixture.spec.readiness = Readiness::Health;
        if upstream_cli {
            fixture.spec.python = upstream_cli_python(fixture.ready_parent.parent().unwrap());
        }
        let (result, progress) = start(&fixture.spec).await;
        let backend = result.unwrap_or_else(|err| panic!("upstream {upstream_cli}: {err}"));
        assert_eq!(
            progress[progress.len() - 2..],
            [StartProgress::Listening, StartProgress::HealthCheckPassed]
        );
        let start_event = fixture.event("start").expect("start event");
        let argv: Vec<String> = serde_json::from_value(start_event["argv"].clone()).unwrap();
        assert!(!argv.iter().any(|a| a == "--ready-file"), "{argv:?}");
        assert_eq!(start_event["ready_file"], Value::Null);
        assert!(backend.load_duration() >= Duration::from_millis(300));
        backend.stop(Duration::from_secs(3), None).await;
        fixture.assert_ready_dirs_removed();
    }
}

/// `auto` readiness asks the Strata's `--help` before the start: a stock Strata (no
/// `--ready-file`) is started in the `health` mode, one with the extension with a ready file;
/// the choice and its reason are reported before the spawn.
#[tokio::test(flavor = "current_thread")]
async fn auto_readiness_asks_the_strata_which_contract_it_speaks() {
    for stock in [true, false] {
        let mut fixture = Fixture::new("auto", json!({}));
        fixture.spec.readiness = Readiness::Auto;
        if stock {
            fixture.spec.python = upstream_cli_python(fixture.ready_parent.parent().unwrap());
        }
        let (result, progress) = start(&fixture.spec).await;
        let backend = result.unwrap_or_else(|err| panic!("stock {stock}: {err}"));
        let expected = if stock {
            ReadinessChoice {
                mode: ReadinessMode::Health,
                basis: ReadinessBasis::HelpLacksReadyFile,
            }
        } else {
            ReadinessChoice {
                mode: ReadinessMode::ReadyFile,
                basis: ReadinessBasis::HelpListsReadyFile,
            }
        };
        assert_eq!(
            progress[..2],
            [
                StartProgress::Starting,
                StartProgress::ReadinessChosen(expected)
            ]
        );
        let seen = if stock {
            StartProgress::Listening
        } else {
            StartProgress::ReadyFileSeen
        };
        assert!(progress.contains(&seen), "stock {stock}: {progress:?}");
        let start_event = fixture.event("start").expect("start event");
        let argv: Vec<String> = serde_json::from_value(start_event["argv"].clone()).unwrap();
        assert_eq!(argv.iter().any(|a| a == "--ready-file"), !stock, "{argv:?}");
        backend.stop(Duration::from_secs(3), None).await;
        fixture.assert_ready_dirs_removed();
    }
}

/// A failed start of a profile that names a `log` points there (Strata writes its engine's
/// stderr to it); the router does not read it.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_start_names_the_profiles_log() {
    let mut fixture = Fixture::new("enginelog", json!({"start_failure": "exit"}));
    let log = fixture.ready_parent.parent().unwrap().join("engine.log");
    fixture.spec.engine_log = Some(log.clone());
    let message = format!(
        "backend exited during startup (exit code 3); Strata writes the engine's messages to {} (the profile's log)",
        log.display()
    );
    expect_failure(
        &fixture,
        |err| {
            matches!(
                err.cause(),
                StartError::Exited {
                    exit: ExitInfo::Code(3)
                }
            )
        },
        &message,
    )
    .await;
}

/// `health` readiness never takes a stray server on the port for the model: a listener that
/// is not the child's group is never connected to, even one that would answer like the model,
/// and the start fails naming it.
#[tokio::test(flavor = "current_thread")]
async fn a_stray_listener_on_the_port_is_never_taken_for_the_model() {
    let mut fixture = Fixture::new("stray", json!({"start_failure": "hang"}));
    fixture.spec.readiness = Readiness::Health;
    fixture.spec.startup = Duration::from_secs(2);
    let port = fixture.spec.backend_port;
    let (cancel_tx, cancel) = watch::channel(false);
    let start = start_cancellable(&fixture.spec, &cancel);
    // The stray appears after the fake's own port check (it logs `engine_start` after it),
    // while the child "loads" (never binding); keyed on `start` the stray could win the
    // race with that check and the fake would exit 2 on a taken port.
    let stray = async {
        poll_until_async(Duration::from_secs(10), "the fake's engine start", || {
            fixture.event("engine_start").is_some()
        })
        .await;
        tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("bind the stray listener")
    };
    let ((result, progress), listener) = tokio::join!(start, stray);
    drop(cancel_tx);
    let err = result.expect_err("a stray is not the backend");
    assert!(
        matches!(err, StartError::PortHeldByOther { port: p } if p == port),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("another process, not the backend, listens on backend port {port}")
    );
    assert!(!progress.contains(&StartProgress::Listening));
    // Nobody knocked: no connection is waiting on the stray.
    let waiting = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
    assert!(waiting.is_err(), "the stray was connected to");
    assert_group_gone_and_reaped(spawned_pid(&progress));
}

/// `ready_file` readiness with a Strata that lacks the flag: argparse's exit 2 is told apart
/// from a taken port by the Strata's own `--help`, and the cause says what to do.
#[tokio::test(flavor = "current_thread")]
async fn a_strata_without_the_ready_file_flag_is_named_as_such() {
    let mut fixture = Fixture::new("no-ready-file", json!({}));
    let python = upstream_cli_python(fixture.ready_parent.parent().unwrap());
    fixture.spec.python = python.clone();
    let message = format!(
        "the Strata at {} does not accept --ready-file: set readiness to auto or health, or upgrade Strata",
        python.display()
    );
    expect_failure(
        &fixture,
        |err| matches!(err, StartError::ReadyFileUnsupported { .. }),
        &message,
    )
    .await;
    // A plain exit 2 of a Strata that has the flag stays what it is.
    let failing = Fixture::new("exit-2", json!({"start_failure": "exit", "exit_code": 2}));
    expect_failure(
        &failing,
        |err| {
            matches!(
                err,
                StartError::Exited {
                    exit: ExitInfo::Code(2)
                }
            )
        },
        "backend exited during startup (exit code 2)",
    )
    .await;
}
