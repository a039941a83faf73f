//! The spec's `tests/systemd_restart.py`, in Rust: the units in `contrib/` under a real (private)
//! systemd, with the fake backend. Root only; `strata_e2e::systemd` describes how systemd is
//! booted without touching the machine's /tmp, cgroups or services.
//!
//! Each test boots its own systemd (about a second) with test copies of the three units
//! (unique names, the built binaries, this test's config; every other directive as in
//! `contrib/`) and ends with check 5: `systemctl stop` of the three units leaves no process.
//!
//! 1. Socket activation: the proxy service starts with the first connection, and (strictly)
//!    that connection's request is served.
//! 2. `systemctl restart` of the proxy under a steady stream of requests: what was accepted is
//!    drained, the backend stays, the socket stays; and (strictly) no request fails at all.
//! 3. SIGKILL of the proxy: the request in flight fails cleanly, no lease leaks; and the
//!    connections waiting in the backlog are served by the restarted proxy.
//! 4. SIGKILL of the supervisor: its backend dies, systemd restarts it, the proxy reconnects.
//! 5. `systemctl stop` leaves no process (every test).
//! 6. A proxy that keeps failing (exits 1 at start, or SIGKILLed each time it runs) makes
//!    systemd give up, and the socket unit fails with it and stops listening.
//! 7. A config change converges whichever unit is restarted first (and with both at once).
//! 8. Under journald, each log line's level is its journal priority (warning 4, info 6: a
//!    failed load and the SIGHUP notice are warnings), and SIGHUP stops neither daemon.
//!
//! Plus `systemd-analyze verify` of the contrib units and checks of the harness itself (not
//! root-only), and a stack whose binaries and fake Strata are under `/tmp` (the harness's
//! binds make them visible to the units wherever the checkout is; `strata_e2e::systemd`).
//!
//! Where these tests cannot boot systemd (not root, no `unshare`/`nsenter`, no systemd, no
//! cgroup2, the Nix sandbox, a Python under `/tmp`) they pass as skipped, and one line says why
//! (once per run of this file, shown by a plain `cargo test`); where they can, a failed boot
//! fails.
//!
//! The strict checks (the activating request, the backlog of a restart and of a SIGKILL are
//! all served) hold because a new proxy reaches its supervisor before it accepts
//! (`proxy::server::STARTUP_LINK_WAIT`); with the old order they failed about half the runs.
//!
//! A test binary of its own, not a module of `e2e/`: its tests take turns at one private
//! systemd at a time (`strata_e2e::systemd`'s lock serialises them within one binary), and
//! the strict checks want the two cores for that systemd, not for other tests' daemons.

use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::http::{self, Response};
use strata_e2e::systemd::{self, ALIAS, MODEL, SdStack};
use strata_e2e::{DEADLINE, TempDir, binary, poll_for, poll_until};
use strata_protocol::api::{Health, LinkStatus};
use strata_protocol::control::Status;

/// Whether the systemd tests cannot run here. If they cannot, says why in one line, once per
/// run of this file, past the test harness's capture (so a plain `cargo test` shows it).
fn skip() -> bool {
    static SAID: Once = Once::new();
    match systemd::unavailable() {
        Some(reason) => {
            SAID.call_once(|| {
                let _ = writeln!(
                    std::io::stderr(),
                    "systemd_restart: the private-systemd tests are skipped: {reason}"
                );
            });
            eprintln!("skipped: {reason}");
            true
        }
        None => false,
    }
}

/// A chat body for `model` with the fake's per-request keys `fake`.
fn body(model: &str, stream: bool, fake: Value) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        "fake": fake,
    })
}

/// `Ok` for a complete, successful chat response for [`MODEL`]: status 200, the concrete model
/// header, and a whole body (a `chat.completion` with content, or SSE ending with a final frame
/// and `[DONE]`).
fn check_chat(response: &Response, stream: bool) -> Result<(), String> {
    if response.status != 200 {
        return Err(format!(
            "status {}: {}",
            response.status,
            String::from_utf8_lossy(&response.body)
        ));
    }
    if response.header("x-strata-concrete-model") != Some(MODEL) {
        return Err(format!(
            "x-strata-concrete-model {:?}",
            response.header("x-strata-concrete-model")
        ));
    }
    if stream {
        let frames = response.frames();
        let done = frames.last().is_some_and(|frame| frame.is_done());
        let finished = frames.iter().any(|frame| {
            frame.is_data()
                && serde_json::from_str::<Value>(&frame.data_text())
                    .is_ok_and(|json| json["choices"][0]["finish_reason"] == "stop")
        });
        if !done || !finished {
            return Err(format!("incomplete stream: {} frames", frames.len()));
        }
    } else {
        let json: Value = serde_json::from_slice(&response.body)
            .map_err(|err| format!("body is not JSON: {err}"))?;
        let content = json["choices"][0]["message"]["content"].as_str();
        if content.is_none_or(|text| text.is_empty())
            || json["choices"][0]["finish_reason"] != "stop"
        {
            return Err(format!("incomplete completion: {json}"));
        }
    }
    Ok(())
}

/// One chat request, checked with [`check_chat`].
fn chat_ok(addr: SocketAddr, model: &str, stream: bool, fake: Value) -> Result<(), String> {
    let body = body(model, stream, fake);
    let response = http::try_request(
        addr,
        "POST",
        http::CHAT_PATH,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
    .map_err(|err| format!("transport error: {err}"))?;
    check_chat(&response, stream)
}

/// Waits until the proxy says it is linked to the supervisor (`GET /health`).
fn wait_linked(stack: &SdStack) {
    poll_until(DEADLINE, "GET /health: 200, supervisor connected", || {
        http::try_request(stack.addr(), "GET", "/health", &[], b"").is_ok_and(|response| {
            response.status == 200
                && response.document::<Health>().supervisor == LinkStatus::Connected
        })
    });
}

/// Activates the proxy, waits until it is linked, serves one request (loading the backend) and
/// returns the backend's namespace PID.
fn warm_up(stack: &SdStack) -> u32 {
    wait_linked(stack);
    chat_ok(stack.addr(), MODEL, false, json!({}))
        .unwrap_or_else(|err| panic!("warm-up request: {err}"));
    let status = stack.status();
    status
        .child_pid
        .unwrap_or_else(|| panic!("no backend after a served request: {status:?}"))
}

/// Waits until the supervisor reports no lease and no waiting request, with one proxy.
fn wait_settled(stack: &SdStack) -> Status {
    poll_for(
        DEADLINE,
        "active_leases 0, waiting_requests 0, 1 proxy",
        || {
            let status = stack.status();
            (status.active_leases == 0 && status.waiting_requests == 0 && status.proxies == 1)
                .then_some(status)
        },
    )
}

/// Check 1: with the layout of docs/deployment-systemd.md (supervisor and socket started, the
/// proxy service only
/// triggered by the socket) the proxy is not running until a connection arrives; that
/// connection starts it and gets an HTTP answer; once linked, requests by alias and by
/// concrete name get 200 and `x-strata-concrete-model`. The loaded test units carry the
/// contrib directives, and `strata-ctl status` works through `nsenter`.
#[test]
fn socket_activation_starts_the_proxy_on_the_first_connection() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let (supervisor, socket, proxy) = (
        stack.names.supervisor(),
        stack.names.socket(),
        stack.names.proxy(),
    );
    for (unit, property, expected) in [
        (&socket, "Accept", "no"),
        (&socket, "FlushPending", "no"),
        (&proxy, "Type", "notify"),
        (&proxy, "NotifyAccess", "main"),
        (&proxy, "KillMode", "mixed"),
        (&proxy, "TimeoutStopUSec", "infinity"),
        (&proxy, "SendSIGKILL", "yes"),
        (&proxy, "Restart", "on-failure"),
        (&proxy, "RestartPreventExitStatus", "78"),
        (&proxy, "ProtectSystem", "strict"),
        (&proxy, "PrivateTmp", "yes"),
        (&proxy, "UMask", "0077"),
        (&supervisor, "Type", "notify"),
        (&supervisor, "KillMode", "mixed"),
        (&supervisor, "TimeoutStopUSec", "infinity"),
        (&supervisor, "Restart", "on-failure"),
        (&supervisor, "RestartPreventExitStatus", "78"),
        (&supervisor, "RuntimeDirectoryMode", "0700"),
        (&supervisor, "StateDirectoryMode", "0700"),
        (&supervisor, "UMask", "0077"),
        (&supervisor, "ProtectSystem", "strict"),
    ] {
        assert_eq!(stack.show(unit, property), expected, "{unit} {property}");
    }
    assert_eq!(stack.active_state(&supervisor), "active");
    assert_eq!(stack.show(&socket, "SubState"), "listening");
    assert_eq!(
        stack.active_state(&proxy),
        "inactive",
        "the proxy runs before any connection"
    );
    assert!(stack.sd().unit_procs(&proxy).is_empty());
    assert_eq!(stack.status().proxies, 0);

    let first = http::try_request(stack.addr(), "GET", "/health", &[], b"")
        .unwrap_or_else(|err| panic!("the first connection: {err}"));
    assert!(
        first.status == 200 || first.status == 503,
        "GET /health: {first}"
    );
    let (proxy_ns, _) = stack.wait_main(&proxy);
    assert_eq!(stack.show(&socket, "SubState"), "running");
    eprintln!(
        "check 1: the first connection started proxy pid {proxy_ns} and got GET /health {}",
        first.status
    );
    wait_linked(&stack);
    for (model, stream) in [(ALIAS, false), (MODEL, true)] {
        chat_ok(stack.addr(), model, stream, json!({}))
            .unwrap_or_else(|err| panic!("{model} stream={stream}: {err}"));
    }
    let status = stack.ctl_status();
    assert_eq!(status.proxies, 1, "{status:?}");
    assert_eq!(status.loaded.as_deref(), Some(MODEL), "{status:?}");
    assert_private_state(&stack);
    stack.stop_all_and_check();
}

/// What `StateDirectoryMode=0700` and `UMask=0077` promise, on disk and in the processes: the
/// state directory is the owner's alone, the records file in it is readable by no one else,
/// and the supervisor runs with umask 0077, which its backend inherits (the router's own
/// files get explicit modes; what Strata writes, its caches and logs, has only the umask).
fn assert_private_state(stack: &SdStack) {
    use std::os::unix::fs::PermissionsExt;
    let records = &stack.request_log;
    poll_until(DEADLINE, "the records file written", || {
        std::fs::metadata(records).is_ok_and(|meta| meta.len() > 0)
    });
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
            .permissions()
            .mode()
            & 0o7777
    };
    let state_dir = records.parent().expect("the records file's directory");
    assert_eq!(mode(state_dir), 0o700, "{}", state_dir.display());
    assert_eq!(mode(records) & 0o077, 0, "{}", records.display());

    let umask = |what: &str, pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|err| panic!("/proc/{pid}/status of the {what}: {err}"));
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .map(|value| value.trim().to_owned())
            .unwrap_or_else(|| panic!("no Umask line for the {what}:\n{status}"))
    };
    let (_, supervisor) = stack.wait_main(&stack.names.supervisor());
    let backend = stack
        .status()
        .child_pid
        .and_then(|ns| stack.host_pid(ns))
        .expect("the backend's host PID");
    assert_eq!(umask("supervisor", supervisor), "0077");
    assert_eq!(umask("backend", backend), "0077");
}

/// Check 1, strictly: the very request whose connection activates the proxy is served (200,
/// the right model), not turned away because the new proxy has not reached the supervisor.
#[test]
fn the_request_that_activates_the_proxy_is_served() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    assert_eq!(stack.active_state(&stack.names.proxy()), "inactive");
    let result = chat_ok(stack.addr(), ALIAS, false, json!({}));
    assert!(result.is_ok(), "the activating request failed: {result:?}");
    stack.stop_all_and_check();
}

/// What one client request of the load saw.
struct Outcome {
    started: Instant,
    ended: Instant,
    stream: bool,
    result: Result<(), String>,
}

impl Outcome {
    fn describe(&self, since: Instant) -> String {
        format!(
            "{} request started {:?} after the restart began: {}",
            if self.stream { "stream" } else { "non-stream" },
            self.started.saturating_duration_since(since),
            self.result.as_ref().err().map_or("ok", String::as_str)
        )
    }
}

/// Client threads looping over short non-stream and stream requests (alias and concrete
/// names) until told to stop.
struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<Vec<Outcome>>>,
}

impl Load {
    fn start(addr: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let threads = (0..clients)
            .map(|client| {
                let (stop, done) = (stop.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut outcomes = Vec::new();
                    let mut n = client;
                    while !stop.load(Ordering::Relaxed) {
                        let stream = n % 2 == 0;
                        let model = if n % 3 == 0 { ALIAS } else { MODEL };
                        let started = Instant::now();
                        let fake = json!({"tokens": 4, "token_delay_ms": 25});
                        let result = chat_ok(addr, model, stream, fake);
                        outcomes.push(Outcome {
                            started,
                            ended: Instant::now(),
                            stream,
                            result,
                        });
                        done.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                    outcomes
                })
            })
            .collect();
        Load {
            stop,
            done,
            threads,
        }
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::Relaxed)
    }

    fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|thread| thread.join().expect("a client thread panicked"))
            .collect()
    }
}

/// What [`restart_under_load`] saw.
struct RestartRun {
    stack: SdStack,
    outcomes: Vec<Outcome>,
    restart_began: Instant,
    /// When the test first saw the new proxy linked to the supervisor after the restart.
    relinked: Instant,
}

/// Check 2's scenario: 4 clients loop over short requests for about 5 s; after 12 requests,
/// `systemctl restart` of the proxy service. Checks what does not depend on the requests that
/// arrive during the handoff: the proxy's main PID changed (the old one is gone), the socket
/// unit was not restarted (same `InvocationID`), the backend kept its PID (one start in the
/// fake log), requests were in flight when the restart began, nothing is left waiting, and the
/// accounting file in the `StateDirectory` has a record per request.
fn restart_under_load() -> RestartRun {
    let stack = SdStack::builder().boot();
    let (socket, proxy) = (stack.names.socket(), stack.names.proxy());
    let backend = warm_up(&stack);
    let (old_ns, old_host) = stack.wait_main(&proxy);
    let socket_invocation = stack.show(&socket, "InvocationID");

    let began = Instant::now();
    let load = Load::start(stack.addr(), 4);
    poll_until(DEADLINE, "12 requests before the restart", || {
        load.done() >= 12
    });
    let restart_began = Instant::now();
    stack.systemctl(&["restart", &proxy]);
    let restart_took = restart_began.elapsed();
    let (new_ns, new_host) = stack.wait_new_main(&proxy, old_ns);
    wait_linked(&stack);
    let relinked = Instant::now();
    let before = load.done();
    poll_until(DEADLINE, "12 more requests and 5 s of load", || {
        load.done() >= before + 12 && began.elapsed() >= Duration::from_secs(5)
    });
    let outcomes = load.finish();

    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    let in_flight = outcomes
        .iter()
        .filter(|o| o.started < restart_began && o.ended > restart_began)
        .count();
    let handoff = outcomes
        .iter()
        .filter(|o| o.started >= restart_began && o.started < relinked)
        .count();
    eprintln!(
        "check 2: {} requests ({} streams) in {:?}, {failed} failed; `systemctl restart` took \
         {restart_took:?}, relinked after {:?}; {in_flight} in flight when it began, {handoff} \
         started during the handoff; proxy pid {old_ns} -> {new_ns}",
        outcomes.len(),
        outcomes.iter().filter(|o| o.stream).count(),
        began.elapsed(),
        relinked - restart_began,
    );
    assert!(
        in_flight > 0,
        "no request was in flight when the restart began: the load did not overlap it"
    );
    assert!(
        !stack.alive(old_host),
        "the old proxy {old_host} still runs"
    );
    assert!(stack.alive(new_host));
    assert_eq!(
        stack.show(&socket, "InvocationID"),
        socket_invocation,
        "the socket unit was restarted with the proxy"
    );
    assert_eq!(
        stack.status().child_pid,
        Some(backend),
        "the backend changed"
    );
    let starts = stack.fake_log().starts();
    assert_eq!(starts.len(), 1, "backend starts: {starts:?}");
    assert_eq!(starts[0].pid, backend);
    wait_settled(&stack);
    let expected = outcomes.len() + 1; // and the warm-up
    let lines = poll_for(DEADLINE, "a JSONL record per request", || {
        let text = std::fs::read_to_string(&stack.request_log).unwrap_or_default();
        let lines = text.lines().count();
        (lines >= expected).then_some(lines)
    });
    eprintln!(
        "check 2: {lines} records in {} for {expected} requests",
        stack.request_log.display()
    );
    RestartRun {
        stack,
        outcomes,
        restart_began,
        relinked,
    }
}

/// Check 2: `systemctl restart` of the proxy under load (see [`restart_under_load`]). Every
/// request that was in flight when the restart began is drained by the old proxy (200 and
/// complete), and every request after the new proxy is linked succeeds. (Requests that arrive
/// during the handoff: the next test.)
#[test]
fn restart_of_the_proxy_under_load_drains_and_keeps_the_backend() {
    if skip() {
        return;
    }
    let run = restart_under_load();
    let failed: Vec<String> = run
        .outcomes
        .iter()
        .filter(|o| {
            o.result.is_err() && (o.started < run.restart_began || o.started > run.relinked)
        })
        .map(|o| o.describe(run.restart_began))
        .collect();
    assert!(
        failed.is_empty(),
        "requests outside the handoff failed:\n{}",
        failed.join("\n")
    );
    run.stack.stop_all_and_check();
}

/// Check 2, strictly: not one request of the load fails, including those that arrive while
/// the old proxy drains and the new one starts (they wait in the socket's backlog).
#[test]
fn restart_of_the_proxy_under_load_fails_no_request() {
    if skip() {
        return;
    }
    let run = restart_under_load();
    let failed: Vec<String> = run
        .outcomes
        .iter()
        .filter(|o| o.result.is_err())
        .map(|o| o.describe(run.restart_began))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed around the restart:\n{}",
        failed.len(),
        run.outcomes.len(),
        failed.join("\n")
    );
    run.stack.stop_all_and_check();
}

/// Check 3 (in flight, leases): `systemctl kill --signal=SIGKILL` of the proxy service. A
/// streaming request in flight at the kill ends with a transport error or EOF within 10 s and
/// without `[DONE]`; systemd restarts the proxy (`Restart=on-failure`, `NRestarts` 1); the
/// backend keeps its PID and logs the cancellation; once settled the supervisor has no lease
/// and no waiting request left, and the new proxy serves.
#[test]
fn sigkill_of_the_proxy_fails_the_request_in_flight_cleanly_and_leaks_no_lease() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let proxy = stack.names.proxy();
    let backend = warm_up(&stack);
    let (old_ns, old_host) = stack.wait_main(&proxy);

    let mut in_flight = http::open_chat(
        stack.addr(),
        &body(MODEL, true, json!({"tokens": 200, "token_delay_ms": 50})),
    );
    assert_eq!(in_flight.status, 200);
    poll_until(DEADLINE, "a content frame of the stream in flight", || {
        in_flight
            .next_frame(DEADLINE)
            .is_some_and(|frame| frame.is_data() && frame.data_text().contains("tok"))
    });
    assert_eq!(stack.status().active_leases, 1);

    let killed_at = Instant::now();
    stack.systemctl(&["kill", "--signal=SIGKILL", &proxy]);
    let ended = in_flight.try_read_to_end(Duration::from_secs(10));
    let took = killed_at.elapsed();
    let how = match &ended {
        Ok(rest) => format!("EOF after {} more bytes", rest.len()),
        Err(err) => format!("a transport error ({:?}: {err})", err.kind()),
    };
    eprintln!("check 3: the stream in flight ended with {how}, {took:?} after the kill");
    assert!(
        !matches!(&ended, Err(err) if err.kind() == ErrorKind::TimedOut),
        "the stream in flight hung after the proxy was killed"
    );
    assert!(
        !http::sse_frames(in_flight.received())
            .iter()
            .any(|frame| frame.is_done()),
        "the stream in flight completed although its proxy was killed"
    );
    poll_until(DEADLINE, "the killed proxy to be gone", || {
        !stack.alive(old_host)
    });

    let (new_ns, _) = stack.wait_new_main(&proxy, old_ns);
    assert_eq!(stack.show(&proxy, "NRestarts"), "1");
    poll_until(DEADLINE, "the backend to log the cancelled request", || {
        !stack.fake_log().events_named("cancel").is_empty()
    });
    let status = wait_settled(&stack);
    let cancel = &stack.fake_log().events_named("cancel")[0];
    eprintln!(
        "check 3: proxy pid {old_ns} -> {new_ns}; backend cancel reason {}; settled: \
         active_leases {} waiting_requests {} proxies {}",
        cancel["reason"], status.active_leases, status.waiting_requests, status.proxies
    );
    assert_eq!(status.child_pid, Some(backend), "the backend changed");
    wait_linked(&stack);
    chat_ok(stack.addr(), MODEL, true, json!({}))
        .unwrap_or_else(|err| panic!("a request after the restart: {err}"));
    assert_eq!(stack.fake_log().starts().len(), 1);
    wait_settled(&stack);
    stack.stop_all_and_check();
}

/// Check 3 (backlog): four requests sent right after the SIGKILL of the proxy, while no proxy
/// runs, wait in the socket's backlog and are all served by the proxy systemd restarts.
#[test]
fn sigkill_of_the_proxy_serves_the_backlog_with_the_restarted_proxy() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let proxy = stack.names.proxy();
    warm_up(&stack);
    let (old_ns, old_host) = stack.wait_main(&proxy);
    stack.systemctl(&["kill", "--signal=SIGKILL", &proxy]);
    poll_until(DEADLINE, "the killed proxy to be gone", || {
        !stack.alive(old_host)
    });
    let queued: Vec<(bool, http::Conn)> = (0..4)
        .map(|n| {
            let stream = n % 2 == 1;
            let mut conn = http::Conn::connect(stack.addr()).expect("connect to the socket");
            conn.write(&http::request_bytes(
                stack.addr(),
                "POST",
                http::CHAT_PATH,
                &[("content-type", "application/json")],
                body(MODEL, stream, json!({})).to_string().as_bytes(),
            ))
            .expect("send a request into the backlog");
            (stream, conn)
        })
        .collect();
    let state = stack.active_state(&proxy);
    let results: Vec<Result<(), String>> = queued
        .into_iter()
        .map(|(stream, conn)| match conn.try_response(DEADLINE) {
            Ok(response) => check_chat(&response, stream),
            Err(err) => Err(format!("transport error: {err}")),
        })
        .collect();
    let (new_ns, _) = stack.wait_new_main(&proxy, old_ns);
    eprintln!(
        "check 3: 4 requests queued while the proxy was {state}: {results:?}; proxy pid \
         {old_ns} -> {new_ns}"
    );
    assert!(
        results.iter().all(Result::is_ok),
        "requests queued in the backlog failed: {results:?}"
    );
    wait_settled(&stack);
    stack.stop_all_and_check();
}

/// Check 4: SIGKILL of the supervisor's main process (`--kill-whom=main`, so that the backend
/// is left to its parent-death signal rather than killed by systemd with the rest of the
/// cgroup): the backend and its grandchild die, systemd restarts the supervisor (new main PID,
/// `NRestarts` 1, new instance), the runtime directory's sockets are new ones, and the proxy
/// (not restarted) reconnects and serves again with a new backend.
#[test]
fn sigkill_of_the_supervisor_kills_the_backend_and_the_proxy_reconnects() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let (supervisor, proxy) = (stack.names.supervisor(), stack.names.proxy());
    let backend = warm_up(&stack);
    let backend_host = stack.host_pid(backend).expect("the backend's host PID");
    stack.learn("backend", backend_host);
    let grandchild = stack
        .fake_log()
        .events_named("grandchild")
        .first()
        .and_then(|event| event["child_pid"].as_u64())
        .expect("the fake's grandchild") as u32;
    let grandchild_host = stack
        .host_pid(grandchild)
        .expect("the grandchild's host PID");
    stack.learn("grandchild", grandchild_host);
    let (old_ns, old_host) = stack.wait_main(&supervisor);
    let (proxy_ns, proxy_host) = stack.wait_main(&proxy);
    let old_status = stack.status();
    let socket_inode = |name: &str| {
        use std::os::unix::fs::MetadataExt;
        let path = stack
            .sd()
            .ns_path(format!("/run/{}/{name}", stack.names.prefix));
        std::fs::metadata(path).ok().map(|meta| meta.ino())
    };
    let old_sockets = (
        socket_inode("control.sock"),
        socket_inode("supervisor.sock"),
    );
    assert!(old_sockets.0.is_some() && old_sockets.1.is_some());

    stack.systemctl(&["kill", "--kill-whom=main", "--signal=SIGKILL", &supervisor]);
    poll_until(DEADLINE, "the killed supervisor to be gone", || {
        !stack.alive(old_host)
    });
    poll_until(DEADLINE, "the backend and its grandchild to die", || {
        !stack.alive(backend_host) && !stack.alive(grandchild_host)
    });
    let (new_ns, _) = stack.wait_new_main(&supervisor, old_ns);
    assert_eq!(stack.show(&supervisor, "NRestarts"), "1");
    let new_sockets = (
        socket_inode("control.sock"),
        socket_inode("supervisor.sock"),
    );
    let new_status = stack.status();
    eprintln!(
        "check 4: supervisor pid {old_ns} -> {new_ns}; backend {backend} and grandchild \
         {grandchild} gone; socket inodes {old_sockets:?} -> {new_sockets:?}; instance {} -> {}",
        old_status.instance_id, new_status.instance_id
    );
    assert!(new_sockets.0.is_some() && new_sockets.1.is_some());
    assert_ne!(
        new_sockets.0, old_sockets.0,
        "the stale control socket was kept"
    );
    assert_ne!(
        new_sockets.1, old_sockets.1,
        "the stale supervisor socket was kept"
    );
    assert_ne!(new_status.instance_id, old_status.instance_id);
    assert_eq!(new_status.child_pid, None, "{new_status:?}");

    // The proxy was not restarted; it reconnects by itself.
    assert_eq!(stack.main_pid(&proxy), Some(proxy_ns));
    assert!(stack.alive(proxy_host));
    assert_eq!(stack.show(&proxy, "NRestarts"), "0");
    wait_linked(&stack);
    chat_ok(stack.addr(), ALIAS, true, json!({}))
        .unwrap_or_else(|err| panic!("a request after the reconnect: {err}"));
    let starts = stack.fake_log().starts();
    assert_eq!(starts.len(), 2, "backend starts: {starts:?}");
    assert_ne!(starts[1].pid, backend);
    assert_eq!(stack.status().child_pid, Some(starts[1].pid));
    wait_settled(&stack);
    stack.stop_all_and_check();
}

/// The journal entry of `unit` whose message contains `text`, if there is one yet.
fn journal_entry(stack: &SdStack, unit: &str, text: &str) -> Option<Value> {
    stack
        .journal_entries(unit)
        .into_iter()
        .find(|entry| entry["MESSAGE"].as_str().is_some_and(|m| m.contains(text)))
}

/// Check 8: with the units' output going to journald (systemd's default, where the other
/// checks write files), each line reaches the journal at its level's priority: the SIGHUP
/// notice of both daemons (a warning) at 4, so `journalctl -p warning` lists it, and the
/// supervisor's "backend verified" (info) at 6, with no `<N>` left in a message. And SIGHUP
/// stops neither daemon: the same main PIDs serve, systemd restarted nothing.
#[test]
fn the_journal_gets_each_lines_priority_and_sighup_stops_neither_daemon() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().journal().boot();
    let (supervisor, proxy) = (stack.names.supervisor(), stack.names.proxy());
    warm_up(&stack);
    let (supervisor_pid, _) = stack.wait_main(&supervisor);
    let (proxy_pid, _) = stack.wait_main(&proxy);

    for unit in [&supervisor, &proxy] {
        stack.systemctl(&["kill", "--kill-whom=main", "--signal=SIGHUP", unit]);
    }
    for unit in [&supervisor, &proxy] {
        let notice = poll_for(DEADLINE, "the SIGHUP notice in the journal", || {
            journal_entry(
                &stack,
                unit,
                "SIGHUP ignored: the configuration is read only at start",
            )
        });
        assert_eq!(notice["PRIORITY"], "4", "{unit}: {notice}");
        let mut command = stack.sd().nsenter("journalctl");
        command.args(["--no-pager", "-o", "cat", "-p", "warning", "-u", unit]);
        let warnings = strata_e2e::systemd::output_within(command, DEADLINE).expect("journalctl");
        assert!(
            String::from_utf8_lossy(&warnings.stdout).contains("SIGHUP ignored"),
            "{unit}: journalctl -p warning does not list the notice"
        );
    }
    let verified = journal_entry(&stack, &supervisor, "backend verified")
        .unwrap_or_else(|| panic!("no 'backend verified' in the journal\n{}", stack.report()));
    assert_eq!(verified["PRIORITY"], "6", "{verified}");
    for unit in [&supervisor, &proxy] {
        for entry in stack.journal_entries(unit) {
            let message = entry["MESSAGE"].as_str().unwrap_or_default();
            assert!(
                !message.starts_with('<'),
                "{unit}: a prefix left in {entry}"
            );
        }
    }

    chat_ok(stack.addr(), MODEL, true, json!({}))
        .unwrap_or_else(|err| panic!("after SIGHUP: {err}"));
    assert_eq!(stack.main_pid(&supervisor), Some(supervisor_pid));
    assert_eq!(stack.main_pid(&proxy), Some(proxy_pid));
    assert_eq!(stack.show(&supervisor, "NRestarts"), "0");
    assert_eq!(stack.show(&proxy, "NRestarts"), "0");
    wait_settled(&stack);
    stack.stop_all_and_check();
}

/// Check 8, the case: a failed load is a warning in the journal (priority 4), so
/// `journalctl -p warning -u strata-supervisor` is no longer empty after one.
#[test]
fn a_failed_load_reaches_the_journal_as_a_warning() {
    if skip() {
        return;
    }
    let stack = SdStack::builder()
        .journal()
        .fake("start_failure", "exit")
        .boot();
    let supervisor = stack.names.supervisor();
    wait_linked(&stack);
    let response = http::chat(stack.addr(), &body(MODEL, false, json!({})));
    assert_ne!(
        response.status, 200,
        "a start set to fail served: {response}"
    );
    let failed = poll_for(DEADLINE, "the failed start in the journal", || {
        // The warning (engine/backend_slot.rs), not the info line about the stopped group.
        journal_entry(&stack, &supervisor, "backend start failed model=")
    });
    assert_eq!(failed["PRIORITY"], "4", "{failed}");
    stack.stop_all_and_check();
}

/// Rewrites the config both units read, as an operator edits it.
fn edit_config(stack: &SdStack, key: &str, value: Value) {
    let path = stack.root().join("config.json");
    let text = std::fs::read_to_string(&path).expect("the config");
    let mut config: Value = serde_json::from_str(&text).expect("config json");
    config[key] = value;
    std::fs::write(&path, config.to_string()).expect("the config written");
}

/// While the two units run different settings: `/health` 503 naming the mismatch, a chat 503
/// `config_mismatch`.
fn assert_mismatch(stack: &SdStack) -> Vec<String> {
    poll_until(DEADLINE, "GET /health: 503, config_mismatch", || {
        http::try_request(stack.addr(), "GET", "/health", &[], b"").is_ok_and(|response| {
            response.status == 503
                && response.document::<Health>().supervisor == LinkStatus::ConfigMismatch
        })
    });
    (0..3)
        .map(|_| {
            let response = http::try_request(
                stack.addr(),
                "POST",
                http::CHAT_PATH,
                &[("content-type", "application/json")],
                body(ALIAS, false, json!({})).to_string().as_bytes(),
            )
            .unwrap_or_else(|err| panic!("a chat during the change: {err}"));
            assert_eq!(response.status, 503, "{response}");
            assert_eq!(response.error().code, "config_mismatch", "{response}");
            response.request_id().to_owned()
        })
        .collect()
}

/// Every request ID told during a mismatch has exactly one line in the records file.
fn assert_recorded_once(stack: &SdStack, told: &[String]) {
    let count = |id: &str| {
        std::fs::read_to_string(&stack.request_log)
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                serde_json::from_str::<Value>(line)
                    .is_ok_and(|record| record["request_id"] == json!(id))
            })
            .count()
    };
    poll_until(DEADLINE, "the mismatch's records in the file", || {
        told.iter().all(|id| count(id) >= 1)
    });
    for id in told {
        assert_eq!(count(id), 1, "{id}: one line");
    }
}

/// Linked and serving again.
fn assert_serving(stack: &SdStack) {
    wait_linked(stack);
    chat_ok(stack.addr(), ALIAS, false, json!({}))
        .unwrap_or_else(|err| panic!("a chat after the change: {err}"));
}

/// Check 7 (docs/deployment-systemd.md#changing-the-config): a config change converges
/// whichever unit is
/// restarted first. The proxy restarted first meets the old supervisor, and the old proxy
/// meets a restarted supervisor; either way the proxy answers 503 `config_mismatch` and keeps
/// running (same main PID, `NRestarts` 0, the socket unit not failed) until the other unit is
/// restarted too; and the documented one command, both units at once, serves at once. The
/// requests answered 503 during each mismatch have one line each in the records file.
#[test]
fn a_config_change_converges_in_either_restart_order() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let (supervisor, socket, proxy) = (
        stack.names.supervisor(),
        stack.names.socket(),
        stack.names.proxy(),
    );
    warm_up(&stack);
    let (first_proxy, _) = stack.wait_main(&proxy);
    let proxy_kept = |pid: u32, when: &str| {
        assert_eq!(
            stack.main_pid(&proxy),
            Some(pid),
            "{when}: the proxy was replaced"
        );
        assert_eq!(stack.show(&proxy, "NRestarts"), "0", "{when}");
        assert_eq!(stack.active_state(&socket), "active", "{when}");
    };

    // Proxy first: the new proxy has the new settings, the supervisor the old ones.
    edit_config(&stack, "model_grace_ms", json!(200));
    stack.systemctl(&["restart", &proxy]);
    let (second_proxy, _) = stack.wait_new_main(&proxy, first_proxy);
    let told = assert_mismatch(&stack);
    proxy_kept(second_proxy, "proxy first, before the supervisor's restart");
    stack.systemctl(&["restart", &supervisor]);
    assert_serving(&stack);
    proxy_kept(second_proxy, "proxy first, after the supervisor's restart");
    assert_recorded_once(&stack, &told);
    eprintln!("check 7: proxy first converged (proxy pid {first_proxy} -> {second_proxy})");

    // Supervisor first: the running proxy meets a supervisor with the new settings.
    edit_config(&stack, "model_grace_ms", json!(300));
    stack.systemctl(&["restart", &supervisor]);
    let told = assert_mismatch(&stack);
    proxy_kept(second_proxy, "supervisor first, before the proxy's restart");
    stack.systemctl(&["restart", &proxy]);
    let (third_proxy, _) = stack.wait_new_main(&proxy, second_proxy);
    assert_serving(&stack);
    assert_recorded_once(&stack, &told);
    eprintln!("check 7: supervisor first converged (proxy pid {second_proxy} -> {third_proxy})");

    // The documented one command (docs/deployment-systemd.md#changing-the-config).
    edit_config(&stack, "model_grace_ms", json!(400));
    stack.systemctl(&["restart", &supervisor, &proxy]);
    stack.wait_new_main(&proxy, third_proxy);
    assert_serving(&stack);
    proxy_kept(
        stack.main_pid(&proxy).expect("the proxy's main PID"),
        "both at once",
    );
    stack.stop_all_and_check();
}

/// Waits until the socket unit is `failed` (what systemd does to a socket whose service hit
/// its start limit).
fn wait_socket_failed(stack: &SdStack) {
    let socket = stack.names.socket();
    poll_until(
        Duration::from_secs(30),
        format_args!("{socket} to fail"),
        || stack.active_state(&socket) == "failed",
    );
}

/// Check 6's outcome: the proxy service is `failed` after `NRestarts` restarts, the socket
/// unit `failed` with `service-start-limit-hit`, and the listener closed. Then the manual
/// recovery (`reset-failed`, start the socket) and the stop check.
fn assert_socket_failed(stack: SdStack, how: &str) {
    let proxy = stack.names.proxy();
    let socket = stack.names.socket();
    let refused = matches!(
        http::try_request(stack.addr(), "GET", "/health", &[], b""),
        Err(err) if err.kind() == ErrorKind::ConnectionRefused
    );
    let (proxy_state, proxy_result, restarts) = (
        stack.active_state(&proxy),
        stack.show(&proxy, "Result"),
        stack.show(&proxy, "NRestarts"),
    );
    let (socket_state, socket_result) =
        (stack.active_state(&socket), stack.show(&socket, "Result"));
    eprintln!(
        "check 6 ({how}): proxy {proxy_state} (Result {proxy_result}, NRestarts {restarts}); \
         socket {socket_state} (Result {socket_result}); new connections {}",
        if refused { "refused" } else { "accepted" },
    );
    assert_eq!(proxy_state, "failed");
    assert_eq!(socket_state, "failed");
    assert_eq!(socket_result, "service-start-limit-hit");
    assert!(refused, "the failed socket unit still accepts connections");
    stack.systemctl(&["reset-failed", &proxy, &socket]);
    stack.systemctl(&["start", &socket]);
    assert_eq!(stack.show(&socket, "SubState"), "listening");
    stack.stop_all_and_check();
}

/// Check 6 (exits at start): a proxy whose config does not match its socket (another `listen`)
/// exits 1 at every start; `Restart=on-failure` restarts it until the start limit
/// (systemd's defaults: 5 starts in 10 s) stops it; the socket unit fails with it
/// (`service-start-limit-hit`) and closes its listener; the connection that triggered the
/// first start is dropped.
#[test]
fn a_proxy_failing_at_start_trips_the_start_limit_and_fails_the_socket() {
    if skip() {
        return;
    }
    let other = format!("127.0.0.1:{}", strata_e2e::free_port());
    let stack = SdStack::builder()
        .proxy_config(move |config| config["listen"] = json!(other))
        .boot();
    let proxy = stack.names.proxy();
    let trigger = http::try_request(stack.addr(), "GET", "/health", &[], b"");
    wait_socket_failed(&stack);
    let output = stack.service_log(&proxy);
    eprintln!(
        "check 6 (exit 1 at start): the triggering request got {:?}; {} proxy starts, each \
         exiting {} with: {}",
        trigger.as_ref().map(|response| response.status),
        output.lines().count(),
        stack.show(&proxy, "ExecMainStatus"),
        output.lines().next().unwrap_or_default()
    );
    assert!(
        trigger.is_err(),
        "the triggering connection was served: {trigger:?}"
    );
    assert_eq!(stack.show(&proxy, "ExecMainStatus"), "1");
    assert_socket_failed(stack, "exit 1 at start");
}

/// Check 6 (crashes): the proxy SIGKILLed each time it is up; after a few kills in a second
/// systemd gives up, with the same outcome for the socket unit.
#[test]
fn a_proxy_killed_repeatedly_trips_the_start_limit_and_fails_the_socket() {
    if skip() {
        return;
    }
    let stack = SdStack::builder().boot();
    let (proxy, socket) = (stack.names.proxy(), stack.names.socket());
    wait_linked(&stack);
    let started = Instant::now();
    let mut kills = 0;
    loop {
        let main = poll_for(DEADLINE, "the proxy up again, or the socket failed", || {
            if stack.active_state(&socket) == "failed" {
                return Some(None);
            }
            let ns = stack
                .main_pid(&proxy)
                .filter(|_| stack.active_state(&proxy) == "active")?;
            Some(Some(stack.host_pid(ns)?))
        });
        let Some(host) = main else { break };
        assert!(
            kills < 10,
            "systemd still restarts the proxy after {kills} kills"
        );
        stack.systemctl(&["kill", "--signal=SIGKILL", &proxy]);
        kills += 1;
        poll_until(DEADLINE, "the killed proxy to be gone", || {
            !stack.alive(host)
        });
    }
    eprintln!(
        "check 6 (SIGKILL): the socket failed after {kills} kills in {:?}",
        started.elapsed()
    );
    assert_socket_failed(stack, "SIGKILL");
}

/// `systemd-analyze verify` of copies of the three contrib units whose `ExecStart` names the
/// built binaries (everything else as shipped, `User=strata-router` included: systemd 252's
/// verify does not look the account up). Fails on any message about the units; a deliberately
/// misspelt copy is checked first, so the check is known to see warnings.
#[test]
fn contrib_units_pass_systemd_analyze_verify() {
    if strata_e2e::in_nix_sandbox() {
        eprintln!("skipped: STRATA_TEST_IN_NIX_SANDBOX is set");
        return;
    }
    let Some(analyze) = systemd::find_tool("systemd-analyze") else {
        eprintln!("skipped: systemd-analyze not found");
        return;
    };
    let names = [
        "strata-supervisor.service",
        "strata-proxy.socket",
        "strata-proxy.service",
    ];
    let verify = |tag: &str, edit: &dyn Fn(&str, String) -> String| {
        let dir = TempDir::new(tag);
        let mut paths = Vec::new();
        for name in names {
            let text: String = systemd::contrib_unit(name)
                .lines()
                .map(
                    |line| match line.strip_prefix("ExecStart=/usr/local/bin/") {
                        Some(rest) => {
                            let (program, args) = rest.split_once(' ').unwrap_or((rest, ""));
                            format!("ExecStart={} {args}\n", binary(program).display())
                        }
                        None => format!("{line}\n"),
                    },
                )
                .collect();
            assert!(
                !text.contains("/usr/local/bin/"),
                "{name}: an ExecStart was not rewritten"
            );
            let path = dir.join(name);
            std::fs::write(&path, edit(name, text)).expect("write a unit copy");
            paths.push(path);
        }
        let mut command = std::process::Command::new(&analyze);
        command
            .args(["verify", "--man=no", "--recursive-errors=no"])
            .args(&paths)
            .env("SYSTEMD_LOG_COLOR", "0");
        let output = systemd::output_within(command, DEADLINE).expect("systemd-analyze verify");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let dir_text = dir.path().to_string_lossy().into_owned();
        let about_units: Vec<String> = text
            .lines()
            .filter(|line| line.contains(&dir_text) || names.iter().any(|name| line.contains(name)))
            .map(str::to_owned)
            .collect();
        (output.status, about_units, text)
    };

    let (_, broken, text) = verify("sd-verify-bad", &|name, text| {
        if name == "strata-proxy.socket" {
            text.replace("FlushPending=no", "FlushPending=no\nFlushPendng=no")
        } else {
            text
        }
    });
    assert!(
        broken.iter().any(|line| line.contains("FlushPendng")),
        "systemd-analyze verify did not report a misspelt directive:\n{text}"
    );

    let (status, about_units, text) = verify("sd-verify", &|_, text| text);
    assert!(
        about_units.is_empty() && status.success(),
        "systemd-analyze verify ({status}) reports on the contrib units:\n{text}"
    );
}

/// The directives of a unit file: (section, key, value), comments and blank lines left out.
fn directives(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
        } else if let Some((key, value)) = line.split_once('=').filter(|_| !line.starts_with('#')) {
            out.push((
                section.clone(),
                key.trim().to_owned(),
                value.trim().to_owned(),
            ));
        }
    }
    out
}

/// The test copies of the units change only what the tests need (`systemd::rewrite_unit`):
/// every other directive of `contrib/` is there unchanged, in order. Not root-only.
#[test]
fn unit_copies_differ_from_contrib_only_where_the_test_needs() {
    let names = systemd::UnitNames {
        prefix: "strata-sdcopy".into(),
    };
    let rw = std::path::PathBuf::from("/var/lib/strata-sd-test-0-0/rw");
    let rewrite = systemd::Rewrite {
        names: names.clone(),
        supervisor_config: "/var/lib/strata-sd-test-0-0/config.json".into(),
        proxy_config: "/var/lib/strata-sd-test-0-0/proxy.json".into(),
        bin_dir: "/var/lib/strata-sd-test-0-0/host/bin".into(),
        listen: "127.0.0.1:4321".parse().expect("an address"),
        state_dir: "strata-sd-test-0-0/state".into(),
        rw_dir: rw.clone(),
        nofile_cap: Some(1024),
        strata_log: "info".into(),
        journal: false,
    };
    let rewritten = [
        "ExecStart",
        "RuntimeDirectory",
        "StateDirectory",
        "ListenStream",
        "LimitNOFILE",
        "Requires",
        "After",
        "Wants",
        "Also",
    ];
    let added = [
        "DefaultDependencies",
        "ReadWritePaths",
        "StandardOutput",
        "StandardError",
    ];
    for (contrib, copy_name) in [
        ("strata-supervisor.service", names.supervisor()),
        ("strata-proxy.socket", names.socket()),
        ("strata-proxy.service", names.proxy()),
    ] {
        let original = systemd::contrib_unit(contrib);
        let copy = systemd::rewrite_unit(contrib, &original, &rewrite);
        // The copy adds one `Environment=` line (STRATA_LOG); the units' own stay as they are.
        let kept = |list: Vec<(String, String, String)>, drop: &[&str]| -> Vec<_> {
            list.into_iter()
                .filter(|(_, key, _)| !drop.contains(&key.as_str()))
                .filter(|(_, key, value)| {
                    !(key == "Environment" && value.starts_with("STRATA_LOG="))
                })
                .collect()
        };
        let mut dropped: Vec<&str> = rewritten.to_vec();
        dropped.extend(["User", "Group"]);
        let mut dropped_copy = dropped.clone();
        dropped_copy.extend(added);
        assert_eq!(
            kept(directives(&copy), &dropped_copy),
            kept(directives(&original), &dropped),
            "{contrib}: the copy changes more than it should:\n{copy}"
        );
        let copy_directives = directives(&copy);
        let value = |key: &str| -> Vec<String> {
            copy_directives
                .iter()
                .filter(|(_, k, _)| k == key)
                .map(|(_, _, v)| v.clone())
                .collect()
        };
        assert!(
            value("User").is_empty() && value("Group").is_empty(),
            "{copy}"
        );
        assert_eq!(value("DefaultDependencies"), ["no"], "{copy}");
        for dependency in ["Requires", "After", "Wants"] {
            for unit in value(dependency).iter().flat_map(|v| v.split_whitespace()) {
                assert!(
                    !unit.starts_with("strata-") || unit.starts_with("strata-sdcopy-"),
                    "{contrib}: {dependency} names {unit}"
                );
            }
        }
        if contrib.ends_with(".service") {
            let exec = value("ExecStart").join(" ");
            let program = contrib.trim_end_matches(".service");
            let config = if program == "strata-proxy" {
                "proxy.json"
            } else {
                "config.json"
            };
            assert_eq!(
                exec,
                format!(
                    "/var/lib/strata-sd-test-0-0/host/bin/{program} /var/lib/strata-sd-test-0-0/{config}"
                )
            );
            assert_eq!(value("LimitNOFILE"), ["1024"], "{copy}");
            assert_eq!(value("ReadWritePaths"), [rw.display().to_string()]);
            let log = format!(
                "append:{}/{}.log",
                rw.display(),
                copy_name.trim_end_matches(".service")
            );
            assert_eq!(value("StandardOutput"), value("StandardError"));
            assert_eq!(value("StandardOutput"), [log]);
        } else {
            assert_eq!(value("ListenStream"), ["127.0.0.1:4321"]);
        }
        if contrib == "strata-supervisor.service" {
            assert_eq!(value("RuntimeDirectory"), ["strata-sdcopy"]);
            assert_eq!(value("StateDirectory"), ["strata-sd-test-0-0/state"]);
        }
        if std::env::var_os("STRATA_TEST_SHOW_UNITS").is_some() {
            eprintln!("--- {copy_name} ---\n{copy}");
        }
    }
}

/// Copies directory `from` into `to` (files and subdirectories, modes kept).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create a copy's directory");
    for entry in std::fs::read_dir(from).expect("read a directory to copy") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|err| panic!("copy {}: {err}", entry.path().display()));
        }
    }
}

/// A checkout under `/tmp`: the daemons, `strata-ctl` and the fake Strata copied into a
/// directory there, which the private systemd's tmpfs and the units' `PrivateTmp=` hide. The
/// units still run them (through the harness's read-only binds), serve a request, and
/// `strata-ctl` inside the namespace reads the status; the services' executables are the
/// bound copies. Without the binds their start fails with 203/EXEC.
#[test]
fn binaries_and_fake_strata_under_tmp_still_run() {
    if skip() {
        return;
    }
    let checkout = TempDir::new_in(std::path::Path::new("/tmp"), "sd-tmp-tree");
    let bin = checkout.subdir("bin", 0o755);
    for name in ["strata-supervisor", "strata-proxy", "strata-ctl"] {
        std::fs::copy(binary(name), bin.join(name))
            .unwrap_or_else(|err| panic!("copy {name}: {err}"));
    }
    let strata = checkout.join("fake_strata");
    copy_tree(&strata_e2e::fake_strata_dir(), &strata);
    let stack = SdStack::builder()
        .binaries_from(&bin)
        .strata_dir_from(&strata)
        .boot();
    assert_eq!(systemd::masked_by(checkout.path()), Some("/tmp"));
    chat_ok(stack.addr(), ALIAS, false, json!({}))
        .unwrap_or_else(|err| panic!("a request to the units run from /tmp: {err}"));
    for (unit, program) in [
        (stack.names.supervisor(), "strata-supervisor"),
        (stack.names.proxy(), "strata-proxy"),
    ] {
        let (_, host) = stack.wait_main(&unit);
        let exe = std::fs::read_link(format!("/proc/{host}/exe"))
            .unwrap_or_else(|err| panic!("/proc/{host}/exe of {unit}: {err}"));
        assert_eq!(exe, stack.ns_binary(program), "{unit} runs another binary");
    }
    let status = stack.ctl_status();
    assert_eq!(status.loaded.as_deref(), Some(MODEL), "{status:?}");
    stack.stop_all_and_check();
}

/// The harness's list of what the boot script hides is the boot script's own list, and a path
/// is hidden exactly when it is under one of them (whole components). Not root-only.
#[test]
fn the_masked_list_is_the_boot_scripts() {
    assert!(
        systemd::BOOT_SCRIPT.contains(&format!("for d in {}; do", systemd::MASKED.join(" "))),
        "systemd::MASKED differs from the directories BOOT_SCRIPT mounts a tmpfs over"
    );
    for (path, expected) in [
        ("/tmp", Some("/tmp")),
        ("/tmp/sr-clone/target/debug", Some("/tmp")),
        ("/var/tmp/x", Some("/var/tmp")),
        ("/run/user/0/x", Some("/run")),
        ("/tmpfoo/x", None),
        ("/var/lib/strata-sd-test-1-0", None),
        ("/root/.pyenv/versions/3.11.7/bin/python3", None),
        ("/usr/bin/python3", None),
    ] {
        assert_eq!(
            systemd::masked_by(std::path::Path::new(path)),
            expected,
            "{path}"
        );
    }
}
