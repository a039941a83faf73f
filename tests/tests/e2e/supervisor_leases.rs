//! Leases through the private supervisor socket, against the real `strata-supervisor` and the
//! fake backend: idle unload, `off` waiting for (or interrupting) leases, model switches
//! waiting for every lease, shared leases, and proxies that disconnect mid-load.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::json;
use strata_e2e::{
    A3B, ConfigBuilder, DEADLINE, FakeProxy, LeaseId, ModelSpec, Supervisor, TicketPhase,
    child_pid, off_line, poll_for, poll_until, procs,
};
use strata_protocol::wire::{LeaseFailure, LoadPhase};

const A: &str = "flash-a";
const B: &str = "a3b-b";

/// A supervisor serving A alone, and one proxy holding lease `lease` on A: granted, so A is
/// loaded. Returns the backend's PID too.
async fn a_leased(tag: &str, lease: LeaseId) -> (Supervisor, FakeProxy, u32) {
    let config = ConfigBuilder::new(tag).model(ModelSpec::new(A)).build();
    let supervisor = Supervisor::start(config);
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(lease, A).await;
    proxy.wait_granted(lease).await;
    let pid = child_pid(&supervisor.status());
    (supervisor, proxy, pid)
}

/// The config of the scenarios with a model switch: A, and B of another family.
fn a_and_b(tag: &str) -> ConfigBuilder {
    ConfigBuilder::new(tag)
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B).family(A3B))
}

/// After the last lease ends, `idle_ms` later the backend is stopped and reaped; the model
/// stays loaded as long as a lease is held; the next lease reloads it.
#[tokio::test]
async fn idle_unload_leaves_no_process_and_the_next_lease_reloads() {
    let config = ConfigBuilder::new("idle")
        .model(ModelSpec::new(A))
        .idle_ms(300)
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let upstream = supervisor.config.upstream(A);
    let mut proxy = supervisor.proxy().await;

    proxy.acquire(1, A).await;
    let grant = proxy.wait_granted(1).await;
    assert!(grant.model_switch, "a cold start is a switch");
    assert!(grant.load_ms.is_some());
    assert_eq!(
        grant.backend,
        SocketAddr::from((Ipv4Addr::LOCALHOST, supervisor.config.backend_port))
    );
    assert_eq!(grant.upstream_model, upstream);
    let status = supervisor.status();
    let pid = child_pid(&status);
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(status.active_leases, 1);
    assert_eq!(log.starts_for(&upstream)[0].pid, pid);

    // Held for longer than idle_ms: no unload while a lease is active.
    proxy.drain(Duration::from_millis(700)).await;
    let status = supervisor.status();
    assert_eq!(
        status.loaded.as_deref(),
        Some(A),
        "unloaded under an active lease"
    );
    assert_eq!(child_pid(&status), pid);

    proxy.release(1).await;
    let status = poll_for(DEADLINE, "idle unload", || {
        let status = supervisor.status();
        (status.loaded.is_none() && status.child_pid.is_none() && !status.busy).then_some(status)
    });
    assert!(status.routing, "idle unload keeps routing on");
    assert!(
        !procs::is_alive(pid),
        "backend {pid} survived the idle unload"
    );
    assert!(!procs::group_alive(pid));
    assert!(
        log.index_of(pid, "stop").is_some(),
        "the backend is stopped with SIGTERM first\n{}",
        log.dump()
    );
    proxy
        .wait_state("unloaded", |state| state.loaded.is_none())
        .await;

    proxy.acquire(2, A).await;
    let grant = proxy.wait_granted(2).await;
    assert!(grant.model_switch, "nothing was loaded");
    assert!(grant.load_ms.is_some(), "the model was reloaded");
    assert_eq!(log.start_count(&upstream), 2, "{}", log.dump());
    proxy.release(2).await;
    drop(proxy);
    supervisor.stop();
}

/// `off` disables routing at once, then waits for the active lease before unloading; `done`
/// comes only after the release, once the process group is gone.
#[tokio::test]
async fn off_waits_for_the_active_lease() {
    let (supervisor, mut proxy, pid) = a_leased("offwait", 1).await;

    let mut off = supervisor.control().open(&off_line(false));
    off.wait_progress(
        DEADLINE,
        "routing disabled: new and queued requests get 503",
    );
    off.wait_progress(
        DEADLINE,
        "1 active request, waiting for it to finish (use --now to interrupt)",
    );
    off.expect_silence(Duration::from_millis(600), "off waits for the lease");
    // Routing is already off: a new lease fails, the held one is untouched.
    proxy.acquire(2, A).await;
    assert_eq!(proxy.wait_failed(2).await, LeaseFailure::RoutingOff);
    assert!(!proxy.was_revoked(1));
    assert!(procs::is_alive(pid), "unloaded before the lease ended");
    let status = supervisor.status();
    assert!(status.busy);
    assert!(!status.routing);

    proxy.release(1).await;
    let reply = off.wait_done(DEADLINE);
    reply.assert_ok();
    assert_eq!(reply.message(), "off: model unloaded, routing disabled");
    let messages = reply.messages();
    let tail = &messages[messages.len() - 3..];
    assert_eq!(
        tail,
        [
            format!("unloading model {A}"),
            format!("stopping backend pid {pid}"),
            format!("backend pid {pid} exited, memory released"),
        ],
        "{reply:#?}"
    );
    assert!(!reply.status().routing);
    assert_eq!(reply.status().loaded, None);
    assert_eq!(reply.status().child_pid, None);
    assert!(
        !procs::group_alive(pid),
        "done before the process group was gone"
    );
    proxy
        .wait_state("routing off, unloaded", |state| {
            !state.routing && state.loaded.is_none()
        })
        .await;
    drop(proxy);
    supervisor.stop();
}

/// `off --now` does not wait: the lease is revoked, `done` arrives while the proxy still
/// holds it, and the process group is gone.
#[tokio::test]
async fn off_now_revokes_the_lease_and_unloads_once_it_is_released() {
    let (supervisor, mut proxy, pid) = a_leased("offnow", 7).await;

    let mut off = supervisor.control().open(&off_line(true));
    off.wait_progress(DEADLINE, "interrupting 1 active request");
    proxy.wait_revoked(7).await;
    // Revoked, not ended: until the proxy has dropped its stream and released the lease, the
    // backend it names stays up (nothing may replace it under a request still using it).
    off.expect_silence(Duration::from_millis(300), "off waits for the release");
    assert_eq!(supervisor.status().active_leases, 1);
    assert!(
        procs::is_alive(pid),
        "unloaded before the revoked lease was released"
    );
    proxy.release(7).await;
    let reply = off.wait_done(DEADLINE);
    reply.assert_ok();
    assert_eq!(reply.message(), "off: model unloaded, routing disabled");
    assert_eq!(
        reply.messages(),
        [
            "routing disabled: new and queued requests get 503".to_owned(),
            "interrupting 1 active request".to_owned(),
            format!("unloading model {A}"),
            format!("stopping backend pid {pid}"),
            format!("backend pid {pid} exited, memory released"),
        ]
    );
    assert!(!procs::group_alive(pid));
    assert_eq!(supervisor.status().active_leases, 0);
    drop(proxy);
    supervisor.stop();
}

/// A proxy that goes away instead of releasing its revoked lease ends it too (the connection
/// closing releases all of a proxy's leases), so `off --now` completes.
#[tokio::test]
async fn off_now_completes_when_the_revoked_proxy_disconnects() {
    let (supervisor, mut proxy, pid) = a_leased("offnow-gone", 1).await;
    let mut off = supervisor.control().open(&off_line(true));
    proxy.wait_revoked(1).await;
    drop(proxy);
    off.wait_done(DEADLINE).assert_ok();
    assert!(!procs::group_alive(pid));
    supervisor.stop();
}

/// A lease on another model waits behind every lease on the loaded one (of another proxy),
/// then gets a switch: the old backend is gone before the new one starts.
#[tokio::test]
async fn a_switch_waits_for_the_other_models_leases() {
    let config = a_and_b("switch").build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut first = supervisor.proxy().await;
    let mut second = supervisor.proxy().await;

    first.acquire(1, A).await;
    first.wait_granted(1).await;
    let pid_a = child_pid(&supervisor.status());

    // Lease IDs are per connection: the second proxy may reuse 1.
    second.acquire(1, B).await;
    second.wait_phase(1, TicketPhase::Queued).await;
    second
        .expect_no_outcome(1, Duration::from_millis(700))
        .await;
    assert_eq!(log.start_count("up-a3b-b"), 0, "{}", log.dump());
    assert_eq!(supervisor.status().waiting_requests, 1);

    first.release(1).await;
    let grant = second.wait_granted(1).await;
    assert!(grant.model_switch);
    assert!(grant.load_ms.is_some());
    assert_eq!(grant.upstream_model, "up-a3b-b");
    assert_eq!(
        second.phases(1),
        [
            TicketPhase::Queued,
            TicketPhase::Admitted,
            TicketPhase::Load(LoadPhase::StoppingOldBackend),
            TicketPhase::Load(LoadPhase::Starting),
            TicketPhase::Load(LoadPhase::WaitingForReadiness),
            TicketPhase::Load(LoadPhase::CheckingHealth),
            TicketPhase::Load(LoadPhase::Verified),
        ]
    );
    let start_b = log.starts_for("up-a3b-b").remove(0);
    let exit_a = log
        .index_of(pid_a, "exit")
        .unwrap_or_else(|| panic!("backend of {A} never exited\n{}", log.dump()));
    assert!(
        exit_a < start_b.index,
        "{B} started before {A}'s backend exited\n{}",
        log.dump()
    );
    assert!(!procs::is_alive(pid_a));
    let status = supervisor.status();
    assert_eq!(status.loaded.as_deref(), Some(B));
    assert_eq!(child_pid(&status), start_b.pid);
    second.release(1).await;
    drop((first, second));
    supervisor.stop();
}

/// Wait-first: two proxies leasing the same model are granted together from one load, and a
/// third lease while both are held is granted at once without a load.
#[tokio::test]
async fn leases_on_the_same_model_share_one_load() {
    let config = ConfigBuilder::new("shared")
        .model(ModelSpec::new(A).load_ms(800))
        .wait_when_busy(true)
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut first = supervisor.proxy().await;
    let mut second = supervisor.proxy().await;

    first.acquire(1, A).await;
    second.acquire(1, A).await;
    let one = first.wait_granted(1).await;
    let two = second.wait_granted(1).await;
    for grant in [&one, &two] {
        assert!(grant.model_switch);
        assert!(grant.load_ms.is_some());
    }
    for proxy in [&first, &second] {
        assert_eq!(
            proxy.phases(1)[..2],
            [TicketPhase::Queued, TicketPhase::Admitted],
            "both joined the one load"
        );
    }

    first.acquire(2, A).await;
    let three = first.wait_granted(2).await;
    assert!(!three.model_switch);
    assert_eq!(three.load_ms, None);
    assert_eq!(supervisor.status().active_leases, 3);
    assert_eq!(log.starts().len(), 1, "{}", log.dump());
    drop((first, second));
    poll_until(DEADLINE, "leases of closed connections to end", || {
        supervisor.status().active_leases == 0
    });
    supervisor.stop();
}

/// A proxy that disconnects while its lease is loading does not cancel the load: the model
/// ends up loaded with no lease, and the next proxy gets it without a second start. A proxy
/// that disconnects while holding a lease releases it without unloading.
#[tokio::test]
async fn a_proxy_disconnecting_mid_load_leaves_the_model_loaded() {
    let config = ConfigBuilder::new("droplink")
        .model(ModelSpec::new(A).load_ms(1_500))
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let upstream = supervisor.config.upstream(A);

    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy
        .wait_phase(1, TicketPhase::Load(LoadPhase::Starting))
        .await;
    assert!(supervisor.status().busy);
    drop(proxy);

    let status = poll_for(DEADLINE, "the load to finish without its proxy", || {
        let status = supervisor.status();
        (status.loaded.as_deref() == Some(A) && !status.busy && status.proxies == 0)
            .then_some(status)
    });
    assert_eq!(status.active_leases, 0);
    assert_eq!(status.waiting_requests, 0);
    assert_eq!(log.start_count(&upstream), 1);

    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    let grant = proxy.wait_granted(1).await;
    assert!(!grant.model_switch);
    assert_eq!(grant.load_ms, None, "no second load");
    assert_eq!(log.start_count(&upstream), 1, "{}", log.dump());
    let pid = child_pid(&supervisor.status());

    // Disconnecting with a granted lease releases it; the model stays.
    drop(proxy);
    poll_until(DEADLINE, "the dropped proxy's lease to end", || {
        let status = supervisor.status();
        status.active_leases == 0 && status.proxies == 0
    });
    let status = supervisor.status();
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_eq!(child_pid(&status), pid);
    assert!(procs::is_alive(pid));
    supervisor.stop();
}

/// `on` for another model waits for the active leases on the loaded one; requests for the
/// loaded model that arrive meanwhile wait too, and are served by the new model's turn order.
#[tokio::test]
async fn on_another_model_waits_for_active_leases() {
    let config = a_and_b("onwaits").build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy.wait_granted(1).await;
    let pid_a = child_pid(&supervisor.status());

    let mut on = supervisor.control().open(&strata_e2e::on_line(Some(B)));
    on.wait_progress(
        DEADLINE,
        "1 active request on another model, waiting for it to finish",
    );
    on.expect_silence(Duration::from_millis(500), "on waits for the lease");
    assert_eq!(log.start_count("up-a3b-b"), 0);
    assert!(procs::is_alive(pid_a));

    proxy.release(1).await;
    let reply = on.wait_done(DEADLINE);
    reply.assert_ok();
    assert_eq!(reply.status().loaded.as_deref(), Some(B));
    assert!(!procs::is_alive(pid_a));
    drop(proxy);
    supervisor.stop();
}

/// A backend that dies on its own is noticed and reaped (no zombie), the model is no longer
/// reported loaded, and the next lease reloads it (a same-ID reload: no model switch).
#[tokio::test]
async fn a_backend_that_dies_is_reaped_and_reloaded() {
    let config = ConfigBuilder::new("crash").model(ModelSpec::new(A)).build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    let first = proxy.wait_granted(1).await;
    proxy.release(1).await;
    let pid = child_pid(&supervisor.status());
    // The grant names the verified backend process, and the state that preceded it agrees.
    assert_eq!(first.instance.pid, pid);
    assert_eq!(proxy.state().and_then(|s| s.backend), Some(first.instance));

    // The test kills its own test backend by PID, as a crash would.
    procs::signal(pid, nix::sys::signal::Signal::SIGKILL);
    let status = poll_for(DEADLINE, "the dead backend to be noticed", || {
        let status = supervisor.status();
        status.child_pid.is_none().then_some(status)
    });
    assert_eq!(status.loaded, None);
    proxy
        .wait_state("not loaded", |state| {
            state.loaded.is_none() && state.backend.is_none()
        })
        .await;
    poll_until(DEADLINE, "the dead backend to be reaped", || {
        !procs::is_zombie(pid)
    });

    proxy.acquire(2, A).await;
    let grant = proxy.wait_granted(2).await;
    assert!(!grant.model_switch, "a same-ID reload is not a switch");
    assert!(grant.load_ms.is_some());
    // Same model, same address, another process: the instance tells them apart.
    assert_eq!(grant.backend, first.backend);
    assert_eq!(grant.instance.epoch, first.instance.epoch + 1);
    assert_ne!(grant.instance.pid, first.instance.pid);
    assert_eq!(log.starts().len(), 2);
    proxy.release(2).await;
    drop(proxy);
    supervisor.stop();
}

/// `model_grace_ms` keeps the loaded model selected after its last lease: a same-model lease
/// in the grace period is granted at once and restarts it, a waiting default-tier lease for
/// another model switches only once the period has passed, and a priority lease skips it.
#[tokio::test]
async fn grace_keeps_the_model_between_leases_and_priority_skips_it() {
    let grace = Duration::from_millis(2_500);
    let config = a_and_b("grace")
        .model_grace_ms(grace.as_millis() as u64)
        .wait_when_busy(true)
        .build();
    let supervisor = Supervisor::start(config);
    let mut first = supervisor.proxy().await;
    let mut second = supervisor.proxy().await;

    first.acquire(1, A).await;
    first.wait_granted(1).await;
    second.acquire(1, B).await;
    second.wait_phase(1, TicketPhase::Queued).await;
    first.release(1).await;
    // Inside the grace period a same-model lease is granted at once.
    first.acquire(2, A).await;
    let grant = first.wait_granted(2).await;
    assert_eq!(grant.load_ms, None);
    first.release(2).await;
    let released = std::time::Instant::now();
    second.wait_granted(1).await;
    let waited = released.elapsed();
    assert!(
        waited >= grace - Duration::from_millis(200),
        "switched {waited:?} after the last lease, grace is {grace:?}"
    );

    // B is loaded now; a priority lease for A does not wait for the grace period.
    second.release(1).await;
    let released = std::time::Instant::now();
    first
        .acquire_tier(3, A, strata_protocol::wire::ServiceTier::Priority)
        .await;
    first.wait_granted(3).await;
    let waited = released.elapsed();
    assert!(
        waited < grace - Duration::from_millis(500),
        "a priority switch waited {waited:?}"
    );
    first.release(3).await;
    drop((first, second));
    supervisor.stop();
}

/// `off` during a load started by a lease: routing goes off, the waiting lease fails with
/// `RoutingOff`, the load is cancelled and its process killed, and `off` reports that no model
/// is loaded.
#[tokio::test]
async fn off_during_a_lease_load_cancels_it() {
    let config = ConfigBuilder::new("offload")
        .model(ModelSpec::new(A).load_ms(5_000))
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy
        .wait_phase(1, TicketPhase::Load(LoadPhase::Starting))
        .await;
    let pid = poll_for(DEADLINE, "the backend start", || {
        log.starts().first().map(|start| start.pid)
    });

    let reply = supervisor.control().off(false);
    reply.assert_ok();
    assert_eq!(reply.message(), "off: no model loaded, routing disabled");
    assert_eq!(proxy.wait_failed(1).await, LeaseFailure::RoutingOff);
    assert!(
        !procs::is_alive(pid),
        "the cancelled load's backend survived off"
    );
    assert!(log.events_named("ready").is_empty());
    let status = supervisor.status();
    assert!(!status.routing);
    assert_eq!(status.loaded, None);
    drop(proxy);
    supervisor.stop();
}

/// `TicketPhase::Load(LoadPhase::WaitingForReadiness)` is documented as "the backend is loading; waiting for its
/// ready file", so a proxy must get it while the backend is still loading, not after.
#[tokio::test]
async fn waiting_for_readiness_arrives_while_the_backend_loads() {
    let config = ConfigBuilder::new("phasewait")
        .model(ModelSpec::new(A).load_ms(1_500))
        .build();
    let supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy
        .wait_phase(1, TicketPhase::Load(LoadPhase::WaitingForReadiness))
        .await;
    assert!(
        log.events_named("ready").is_empty(),
        "WaitingForReadiness arrived only after the backend was ready: {:?}\n{}",
        proxy.phases(1),
        log.dump()
    );
    proxy.wait_granted(1).await;
    proxy.release(1).await;
    drop(proxy);
    supervisor.stop();
}

/// Interrupting `off` while it waits for a lease cancels the wait: routing stays disabled, the
/// model stays loaded (also after the lease ends), and `on` re-enables routing without a load.
#[tokio::test]
async fn a_cancelled_off_leaves_routing_disabled_and_the_model_loaded() {
    let (supervisor, mut proxy, pid) = a_leased("offcancel", 1).await;
    let log = supervisor.fake_log();

    let mut off = supervisor.control().open(&off_line(false));
    off.wait_progress(DEADLINE, "1 active request, waiting for it to finish");
    drop(off);
    let status = poll_for(DEADLINE, "the off to be cancelled", || {
        let status = supervisor.status();
        (!status.busy).then_some(status)
    });
    assert!(!status.routing);
    assert_eq!(status.loaded.as_deref(), Some(A));

    proxy.release(1).await;
    proxy.drain(Duration::from_millis(500)).await;
    let status = supervisor.status();
    assert_eq!(
        status.loaded.as_deref(),
        Some(A),
        "a cancelled off must not unload"
    );
    assert_eq!(child_pid(&status), pid);
    assert!(procs::is_alive(pid));

    let reply = supervisor.control().on(None);
    reply.assert_ok();
    assert_eq!(
        reply.message(),
        format!("on: model {A} loaded and healthy, routing enabled")
    );
    assert_eq!(reply.messages(), ["routing enabled"]);
    assert_eq!(log.starts().len(), 1);

    // With nothing loaded, off has nothing to wait for.
    let reply = supervisor.control().off(false);
    reply.assert_ok();
    let reply = supervisor.control().off(false);
    reply.assert_ok();
    assert_eq!(reply.message(), "off: no model loaded, routing disabled");
    drop(proxy);
    supervisor.stop();
}

/// A legacy bare `on` while `off` waits for a lease: the operator's later word stands
/// (routing stays on), the model is still unloaded, and `off` fails because it did not leave
/// routing disabled as it promises.
#[tokio::test]
async fn a_legacy_on_during_off_makes_off_fail_and_routing_stays_on() {
    let (supervisor, mut proxy, pid) = a_leased("offlegacy", 1).await;
    let control = supervisor.control();
    let mut off = control.open(&off_line(false));
    off.wait_progress(DEADLINE, "1 active request, waiting for it to finish");
    assert_eq!(control.request("on"), vec![json!({"routing": true})]);
    proxy.release(1).await;
    let reply = off.wait_done(DEADLINE);
    reply.assert_failed();
    assert_eq!(
        reply.message(),
        "off: model unloaded, routing disabled, but routing was turned back on meanwhile"
    );
    assert!(reply.status().routing);
    assert_eq!(reply.status().loaded, None);
    assert!(!procs::group_alive(pid));
    assert!(control.status().routing);
    drop(proxy);
    supervisor.stop();
}

/// A model outside `enabled_models` is refused like an unknown one, even by
/// a client that talks to the supervisor socket directly, and never starts.
#[tokio::test]
async fn a_model_outside_enabled_models_is_refused_and_never_started() {
    let config = a_and_b("disabled").enabled_models(&[A]).build();
    let log = config.fake_log();
    let upstream_b = config.upstream(B);
    let supervisor = Supervisor::start(config);
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, B).await;
    assert_eq!(proxy.wait_failed(1).await, LeaseFailure::UnknownModel);
    proxy.acquire(2, A).await;
    proxy.wait_granted(2).await;
    assert_eq!(log.start_count(&upstream_b), 0, "{}", log.dump());
    proxy.release(2).await;
    supervisor.stop();
}

/// Ctrl-C of `off` during its unload (the backend ignores SIGTERM, so the stop takes
/// `shutdown_ms`) does not free the operation slot early: an `on` sent right after waits for
/// the unload to finish, then loads, instead of failing with "another operation is running".
#[test]
fn an_on_after_a_cancelled_off_waits_for_its_unload() {
    let config = ConfigBuilder::new("offcancel-on")
        .model(ModelSpec::new(A).fake("ignore_sigterm", true))
        .shutdown_ms(1500)
        .build();
    let supervisor = Supervisor::start(config);
    supervisor.control().on(Some(A)).assert_ok();
    let pid = child_pid(&supervisor.status());
    let mut off = supervisor.control().open(&off_line(false));
    off.wait_progress(DEADLINE, &format!("stopping backend pid {pid}"));
    drop(off);
    let reply = supervisor.control().on(Some(A));
    reply.assert_ok();
    assert!(
        !procs::group_alive(pid),
        "the unload finished before the load"
    );
    let status = supervisor.status();
    assert_eq!(status.loaded.as_deref(), Some(A));
    assert_ne!(child_pid(&status), pid, "a new backend");
    assert!(status.routing);
    supervisor.stop();
}
