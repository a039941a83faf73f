//! The engine loop, driven by hand: an [`Engine`] fed [`Command`]s at
//! instants the test chooses, with fake proxy connections (channels the test
//! reads) and ops the test answers itself (a stand-in backend process for a
//! verified load). No sockets, no Strata, no sleeps.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use strata_protocol::config::Config;
use strata_protocol::control::ControlEvent;
use strata_protocol::wire::{
    BackendInstance, BackendState, CacheScores, Grant, LeaseFailure, RevokeReason, ServiceTier,
    SupervisorMessage, TicketRequest, TicketScore,
};
use strata_test_support::config::{ConfigBuilder, ModelSpec, TestConfig};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::backend_ops::{OpOutcome, OpRequest, OpRunner};
use super::drain::RECORDS_GRACE;
use super::now::Now;
use super::state::Engine;
use super::{Command, ConnId};
use crate::backend::{Backend, ProbeOutcome, StartError, StopReport};
use crate::counters::Counters;
use crate::prefetch::Prefetch;

const INSTANCE: &str = "42-1";

pub(super) struct Harness {
    pub(super) engine: Engine,
    now: Now,
    ops: mpsc::UnboundedReceiver<OpRequest>,
    conns: HashMap<ConnId, mpsc::UnboundedReceiver<SupervisorMessage>>,
    config: TestConfig,
}

impl Harness {
    /// Models `a` and `b` (and whatever `edit` adds), wait-first unless
    /// `edit` says otherwise.
    pub(super) fn new(edit: impl FnOnce(ConfigBuilder) -> ConfigBuilder) -> Harness {
        let builder = ConfigBuilder::new("engine")
            .model(ModelSpec::new("a"))
            .model(ModelSpec::new("b"))
            .wait_when_busy(true);
        let config: TestConfig = edit(builder).build();
        let loaded = Arc::new(Config::load(&config.path).expect("a valid config"));
        let (tx, ops) = mpsc::unbounded_channel();
        let now = Now {
            at: Instant::now(),
            unix_ms: 1_764_474_000_000,
        };
        let engine = Engine::new(
            loaded,
            INSTANCE.into(),
            Arc::new(Counters::default()),
            OpRunner::Manual(tx),
            Prefetch::inert(),
            now.at,
        );
        Harness {
            engine,
            now,
            ops,
            conns: HashMap::new(),
            config,
        }
    }

    fn send(&mut self, command: Command) {
        self.engine.handle(command, self.now);
    }

    /// Time passes; the engine sees its tick (and any wake-up now due).
    pub(super) fn advance(&mut self, by: Duration) {
        self.now.at += by;
        self.now.unix_ms += by.as_millis() as u64;
        self.engine.tick(self.now);
    }

    pub(super) fn connect(&mut self, conn: ConnId) {
        let (events, rx) = mpsc::unbounded_channel();
        self.conns.insert(conn, rx);
        self.send(Command::Connect {
            conn,
            pid: 1000 + conn as u32,
            events,
        });
        self.messages(conn);
    }

    pub(super) fn enqueue(&mut self, conn: ConnId, ticket: u64, model: &str) {
        self.send(Command::Enqueue {
            conn,
            ticket,
            model: model.into(),
            tier: ServiceTier::Default,
            request: TicketRequest {
                model_requested: model.into(),
                stream: true,
                arrived_unix_ms: self.now.unix_ms,
            },
        });
    }

    pub(super) fn finish(&mut self, conn: ConnId, ticket: u64) {
        self.send(Command::Finish { conn, ticket });
    }

    /// Everything the engine sent to `conn` since the last call.
    fn messages(&mut self, conn: ConnId) -> Vec<SupervisorMessage> {
        let rx = self.conns.get_mut(&conn).expect("a connected proxy");
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    /// The op the engine asked for since the last call (exactly one).
    pub(super) fn op(&mut self) -> OpRequest {
        let op = self.ops.try_recv().expect("the engine asked for an op");
        assert!(self.ops.try_recv().is_err(), "one op at a time");
        op
    }

    fn no_op(&mut self) {
        if let Ok(op) = self.ops.try_recv() {
            panic!("no op expected, got {op:?}");
        }
    }

    fn backend_addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.config.backend_port).into()
    }

    /// Answers load `op` as verified; returns its stand-in's pid.
    pub(super) fn verify(&mut self, op: OpRequest) -> u32 {
        let OpRequest::Load { op_seq, spec, .. } = op else {
            panic!("expected a load, got {op:?}");
        };
        let backend = Backend::stand_in(&spec.model_id, &spec.upstream_model, self.backend_addr());
        let pid = backend.pid();
        self.send(Command::OpFinished(OpOutcome::Loaded {
            op_seq,
            result: Ok(backend),
            load_ms: 700,
        }));
        pid
    }

    /// Answers load `op` with `error`.
    fn fail_load(&mut self, op: OpRequest, error: StartError) {
        let OpRequest::Load { op_seq, .. } = op else {
            panic!("expected a load, got {op:?}");
        };
        self.send(Command::OpFinished(OpOutcome::Loaded {
            op_seq,
            result: Err(error),
            load_ms: 300,
        }));
    }

    /// Answers stop `op` (its stand-in is killed by the drop).
    fn stopped(&mut self, op: OpRequest) {
        let OpRequest::Stop {
            op_seq, backend, ..
        } = op
        else {
            panic!("expected a stop, got {op:?}");
        };
        let pid = backend.pid();
        drop(backend);
        self.send(Command::OpFinished(OpOutcome::Stopped {
            op_seq,
            pid,
            report: StopReport {
                pid,
                exit: None,
                forced_kill: false,
                elapsed: Duration::ZERO,
                group_gone: true,
            },
        }));
    }

    fn status(&mut self) -> super::Status {
        let (reply, mut rx) = oneshot::channel();
        self.send(Command::Status { reply });
        rx.try_recv().expect("status answers at once")
    }
}

fn is_grant(message: &SupervisorMessage, ticket: u64) -> Option<&Grant> {
    match message {
        SupervisorMessage::Granted(grant) if grant.ticket == ticket => Some(grant),
        _ => None,
    }
}

fn state_backend(message: &SupervisorMessage) -> Option<Option<BackendInstance>> {
    match message {
        SupervisorMessage::State(state) => Some(state.backend),
        _ => None,
    }
}

/// A proxy checks each grant's instance against the last state it got, so
/// the state that names a new backend must come first: after a load and
/// after a switch, on every connection.
#[test]
fn the_state_naming_a_new_instance_precedes_the_grants_that_use_it() {
    let mut h = Harness::new(|b| b);
    h.connect(1);
    h.connect(2);
    h.enqueue(1, 1, "a");
    h.enqueue(2, 1, "a");
    let load = h.op();
    h.messages(1);
    h.messages(2);
    let pid = h.verify(load);
    for conn in [1, 2] {
        let messages = h.messages(conn);
        let grant_at = messages
            .iter()
            .position(|m| is_grant(m, 1).is_some())
            .expect("granted");
        let instance = is_grant(&messages[grant_at], 1).unwrap().instance;
        assert_eq!(instance.pid, pid);
        let named_at = messages
            .iter()
            .position(|m| state_backend(m) == Some(Some(instance)))
            .expect("a state names the new instance");
        assert!(named_at < grant_at, "conn {conn}: {messages:?}");
    }

    // A switch to b: a's leases end, b's load stops a and verifies b.
    h.enqueue(1, 2, "b");
    h.finish(1, 1);
    h.finish(2, 1);
    let switch = h.op();
    let OpRequest::Load { old: Some(old), .. } = &switch else {
        panic!("the switch stops the old backend: {switch:?}");
    };
    assert_eq!(old.pid(), pid);
    h.messages(1);
    h.verify(switch);
    let messages = h.messages(1);
    let grant_at = messages
        .iter()
        .position(|m| is_grant(m, 2).is_some())
        .expect("b granted");
    let grant = is_grant(&messages[grant_at], 2).unwrap();
    assert!(grant.model_switch);
    assert_eq!(grant.instance.epoch, 2);
    let named_at = messages
        .iter()
        .position(|m| state_backend(m) == Some(Some(grant.instance)))
        .expect("a state names b's instance");
    assert!(named_at < grant_at, "{messages:?}");
}

/// An `on` whose client goes away cancels the load it started; requests
/// that joined that load wait again (they are not failed) and get the next
/// load, and the one after it verifies and grants them.
#[test]
fn a_cancelled_load_returns_its_admitted_tickets_to_waiting() {
    let mut h = Harness::new(|b| b);
    h.connect(1);
    let (events, mut control) = mpsc::unbounded_channel();
    h.send(Command::On {
        id: 7,
        model: Some("a".into()),
        events,
    });
    let load = h.op();
    let OpRequest::Load { cancel, .. } = &load else {
        panic!("expected a load");
    };
    let cancel = cancel.clone();
    h.enqueue(1, 1, "a");
    assert!(
        h.messages(1)
            .iter()
            .any(|m| matches!(m, SupervisorMessage::Admitted { ticket: 1 })),
        "the ticket joins the operator's load"
    );
    h.send(Command::CancelControl { id: 7 });
    assert!(*cancel.borrow(), "the load is asked to stop");
    h.fail_load(load, StartError::Cancelled);

    let messages = h.messages(1);
    assert!(
        !messages
            .iter()
            .any(|m| matches!(m, SupervisorMessage::Failed { .. })),
        "{messages:?}"
    );
    // It waits again, so a new load starts for it, and is granted when
    // that load verifies.
    let reload = h.op();
    h.verify(reload);
    assert!(h.messages(1).iter().any(|m| is_grant(m, 1).is_some()));
    let done = std::iter::from_fn(|| control.try_recv().ok()).last();
    match done {
        Some(ControlEvent::Done(done)) => assert!(!done.ok, "{done:?}"),
        other => panic!("the cancelled on ends with Done, got {other:?}"),
    }
}

/// The drain ends only when every ticket's record has arrived, or after
/// `RECORDS_GRACE` without it.
#[test]
fn the_drain_waits_for_open_ledger_entries() {
    for record_arrives in [true, false] {
        let mut h = Harness::new(|b| b);
        h.connect(1);
        h.enqueue(1, 1, "a");
        let load = h.op();
        h.verify(load);
        let (done, mut drained) = oneshot::channel();
        h.send(Command::Shutdown { done });
        // Refused during the drain: its proxy's Finish, with the record,
        // is still to come.
        h.enqueue(1, 2, "a");
        assert!(h.messages(1).iter().any(|m| matches!(
            m,
            SupervisorMessage::Failed {
                ticket: 2,
                failure: LeaseFailure::ShuttingDown,
                ..
            }
        )));
        // The lease ends: the backend stops, then the record is waited for.
        h.finish(1, 1);
        let stop = h.op();
        h.stopped(stop);
        h.advance(RECORDS_GRACE - Duration::from_millis(1));
        assert!(
            drained.try_recv().is_err(),
            "the drain waits for the record"
        );
        assert!(!h.engine.is_finished());
        assert_eq!(
            h.engine.wake_at(),
            Some(h.now.at + Duration::from_millis(1))
        );
        if record_arrives {
            h.finish(1, 2);
        } else {
            h.advance(Duration::from_millis(1));
        }
        assert!(
            drained.try_recv().is_ok(),
            "record arrives: {record_arrives}"
        );
        assert!(h.engine.is_finished());
        h.no_op();
    }
}

/// The drain's stop lets Strata stop its engine (no hurry); a second signal
/// while it runs hurries it; a stop started after the drain was forced kills
/// at once.
#[test]
fn a_forced_shutdown_kills_the_backend_instead_of_waiting_for_it() {
    let hurried = |op: &OpRequest| match op {
        OpRequest::Stop { hurry, .. } => *hurry.borrow(),
        other => panic!("expected a stop, got {other:?}"),
    };
    // Graceful drain, then a second signal while the stop runs.
    let mut h = Harness::new(|b| b);
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    h.verify(load);
    h.finish(1, 1);
    let (done, _drained) = oneshot::channel();
    h.send(Command::Shutdown { done });
    let stop = h.op();
    assert!(!hurried(&stop), "an ordinary drain stops gracefully");
    h.send(Command::ForceShutdown);
    assert!(hurried(&stop), "the second signal hurries the running stop");
    h.stopped(stop);

    // Forced while a lease still runs: the stop that follows kills at once.
    let mut h = Harness::new(|b| b);
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    h.verify(load);
    let (done, _drained) = oneshot::channel();
    h.send(Command::Shutdown { done });
    h.no_op();
    h.send(Command::ForceShutdown);
    let stop = h.op();
    assert!(hurried(&stop), "a stop after a forced drain kills at once");
    h.stopped(stop);
}

/// A failed start fails the tickets admitted to it and cools its model down:
/// a new ticket for it is refused at once with the cause, while the other
/// model still loads.
#[test]
fn a_failed_load_cools_only_its_model_down() {
    let mut h = Harness::new(|b| b.cooldown_ms(5_000));
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    h.fail_load(load, StartError::TimedOut { after_ms: 10_000 });
    let failed = h.messages(1).into_iter().find_map(|m| match m {
        SupervisorMessage::Failed {
            ticket: 1, failure, ..
        } => Some(failure),
        _ => None,
    });
    assert!(
        matches!(
            failed,
            Some(LeaseFailure::LoadFailed {
                cooldown_ms: 5_000,
                ..
            })
        ),
        "{failed:?}"
    );
    h.advance(Duration::from_secs(1));
    h.enqueue(1, 2, "a");
    let refused = h.messages(1).into_iter().find_map(|m| match m {
        SupervisorMessage::Failed {
            ticket: 2, failure, ..
        } => Some(failure),
        _ => None,
    });
    match refused {
        Some(LeaseFailure::Cooldown {
            message,
            remaining_ms,
            ..
        }) => {
            assert_eq!(remaining_ms, 4_000);
            assert_eq!(
                message,
                StartError::TimedOut { after_ms: 10_000 }.to_string()
            );
        }
        other => panic!("expected a cooldown refusal, got {other:?}"),
    }
    assert_eq!(h.status().cooldown_remaining_ms, Some(4_000));
    h.enqueue(1, 3, "b");
    let load = h.op();
    h.verify(load);
    assert!(h.messages(1).iter().any(|m| is_grant(m, 3).is_some()));
    // Once the cooldown is over, a loads again.
    h.finish(1, 3);
    h.advance(Duration::from_secs(4));
    h.enqueue(1, 4, "a");
    assert!(matches!(h.op(), OpRequest::Load { .. }));
}

/// `off` waits for the active lease, then unloads and answers; the idle
/// backend is gone from the status.
#[test]
fn off_waits_for_the_lease_then_unloads() {
    let mut h = Harness::new(|b| b);
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    h.verify(load);
    let (events, mut control) = mpsc::unbounded_channel();
    h.send(Command::Off {
        id: 3,
        now: false,
        events,
    });
    h.no_op();
    assert_eq!(h.status().operation.as_deref(), Some("off"));
    h.finish(1, 1);
    let stop = h.op();
    h.stopped(stop);
    let events: Vec<ControlEvent> = std::iter::from_fn(|| control.try_recv().ok()).collect();
    let Some(ControlEvent::Done(done)) = events.last() else {
        panic!("off answers: {events:?}");
    };
    assert!(done.ok, "{done:?}");
    assert_eq!(done.status.loaded, None);
    assert!(!done.status.routing);
    // Routing off: a new ticket is refused.
    h.enqueue(1, 2, "a");
    assert!(h.messages(1).iter().any(|m| matches!(
        m,
        SupervisorMessage::Failed {
            failure: LeaseFailure::RoutingOff,
            ..
        }
    )));
}

/// `backend_unresponsive_action: "restart"`: the probe misses that make
/// the backend unresponsive revoke its lease; nothing is granted, loaded or
/// stopped while the revoked lease lasts (a new ticket waits); once it ends
/// the backend is stopped, and the waiting ticket loads it again and is
/// granted on the new instance. The operator's `off` path, without routing
/// turned off.
#[test]
fn an_unresponsive_backend_is_restarted_after_its_revoked_leases_end() {
    let mut h = Harness::new(|b| {
        b.set("backend_unresponsive_action", "restart")
            .set("backend_probe_misses", 2)
    });
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    let pid = h.verify(load);
    let messages = h.messages(1);
    let instance = messages
        .iter()
        .find_map(|m| is_grant(m, 1))
        .expect("granted")
        .instance;
    let miss = || Command::ProbeResult {
        instance,
        outcome: ProbeOutcome::Miss,
    };
    h.send(miss());
    assert!(h.messages(1).is_empty(), "one miss changes nothing");
    h.send(miss());
    let messages = h.messages(1);
    assert!(
        messages.iter().any(|m| matches!(
            m,
            SupervisorMessage::Revoked {
                ticket: 1,
                reason: RevokeReason::BackendUnresponsive
            }
        )),
        "{messages:?}"
    );
    assert_eq!(h.status().backend_state, BackendState::Unresponsive);
    h.no_op();

    // Revoked, the lease lasts until its request ends: the backend is not
    // stopped meanwhile, and a new ticket waits without a grant.
    h.enqueue(1, 2, "a");
    h.send(miss());
    h.advance(Duration::from_secs(5));
    let messages = h.messages(1);
    assert!(
        messages
            .iter()
            .any(|m| matches!(m, SupervisorMessage::Queued { ticket: 2, .. })),
        "{messages:?}"
    );
    assert!(!messages.iter().any(|m| is_grant(m, 2).is_some()));
    h.no_op();

    h.finish(1, 1);
    let stop = h.op();
    let OpRequest::Stop { backend, .. } = &stop else {
        panic!("expected the stop, got {stop:?}");
    };
    assert_eq!(backend.pid(), pid);
    h.stopped(stop);
    let reload = h.op();
    let new_pid = h.verify(reload);
    let messages = h.messages(1);
    let grant = messages
        .iter()
        .find_map(|m| is_grant(m, 2))
        .expect("the waiting ticket is granted on the new backend");
    assert_eq!(grant.instance.pid, new_pid);
    assert_eq!(grant.instance.epoch, instance.epoch + 1);
    // Stopped once: the new instance is watched afresh.
    assert_eq!(h.status().backend_state, BackendState::Serving);
    h.no_op();
}

/// The profile's `conversation_cache_min_tokens` is the threshold for cache
/// order: an input below it does not qualify whatever the lookup reply's
/// `min_tokens` says; without it in the profile, the reply's counts.
#[test]
fn the_profiles_cache_threshold_decides_who_qualifies() {
    for (profile_threshold, expected) in [(Some(1000), [2, 3, 4]), (None, [4, 3, 2])] {
        let mut h = Harness::new(|_| {
            let mut a = ModelSpec::new("a");
            if let Some(threshold) = profile_threshold {
                a = a.profile_key("conversation_cache_min_tokens", threshold);
            }
            ConfigBuilder::new("engine-cache")
                .model(a)
                .wait_when_busy(true)
                .set("max_pending", 1)
                .set("cache_lookup_ms", 1000)
                .set("cache_max_active", 1)
        });
        h.connect(1);
        h.enqueue(1, 1, "a");
        let load = h.op();
        h.verify(load);
        // Three compete for the one slot the first request holds.
        for ticket in 2..=4 {
            h.enqueue(1, ticket, "a");
        }
        h.messages(1);
        h.finish(1, 1);
        // Every admission round with competitors asks for scores: 500-token
        // inputs, more cached the later they came, and a reply that says
        // anything qualifies.
        let cached = |ticket: u64| [(2, 100), (3, 300), (4, 500)][ticket as usize - 2].1;
        let mut order = Vec::new();
        while order.len() < 3 {
            for message in h.messages(1) {
                match message {
                    SupervisorMessage::ScoreTickets {
                        lookup, tickets, ..
                    } => {
                        let results = tickets
                            .iter()
                            .map(|&ticket| TicketScore {
                                ticket,
                                input_tokens: 500,
                                cached_tokens: cached(ticket),
                            })
                            .collect();
                        h.send(Command::Scores {
                            conn: 1,
                            lookup,
                            scores: Ok(CacheScores {
                                min_tokens: 0,
                                results,
                            }),
                        });
                    }
                    SupervisorMessage::Granted(grant) => {
                        order.push(grant.ticket);
                        h.finish(1, grant.ticket);
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(order, expected, "profile threshold {profile_threshold:?}");
    }
}

/// What the engine wants prefetched: b while its ticket waits behind a's
/// lease (and the grace after it), nothing once b's ticket has left,
/// nothing while b's own load runs, and b again while an operator `on b`
/// waits for a's lease.
#[test]
fn the_engine_wants_the_next_model_prefetched_while_it_waits() {
    let mut h = Harness::new(|b| b.model_grace_ms(5_000));
    h.connect(1);
    h.enqueue(1, 1, "a");
    let load = h.op();
    assert_eq!(h.engine.prefetching(), None, "a loads at once");
    h.verify(load);
    h.enqueue(1, 2, "b");
    assert_eq!(h.engine.prefetching(), Some("b"), "b waits for a's lease");
    // b's client leaves.
    h.finish(1, 2);
    assert_eq!(h.engine.prefetching(), None, "b's ticket left");
    h.enqueue(1, 3, "b");
    assert_eq!(h.engine.prefetching(), Some("b"));
    h.finish(1, 1);
    assert_eq!(
        h.engine.prefetching(),
        Some("b"),
        "a's grace holds the switch"
    );
    h.no_op();
    h.advance(Duration::from_millis(5_000));
    let switch = h.op();
    assert_eq!(h.engine.prefetching(), None, "b's own load runs");
    h.verify(switch);
    assert!(h.messages(1).iter().any(|m| is_grant(m, 3).is_some()));

    // An operator `on a` waits for b's lease: a is next.
    let (events, _control) = mpsc::unbounded_channel();
    h.send(Command::On {
        id: 9,
        model: Some("a".into()),
        events,
    });
    h.no_op();
    assert_eq!(
        h.engine.prefetching(),
        Some("a"),
        "on a waits for b's lease"
    );
    h.finish(1, 3);
    let load = h.op();
    assert_eq!(h.engine.prefetching(), None, "on's own load runs");
    h.verify(load);
}

/// A ticket that joins a load already waiting for readiness is told where
/// that load stands (its elapsed time and the model's learned load time),
/// as the tickets there from the start were, instead of starting its own
/// count from zero with no expectation.
#[test]
fn a_ticket_joining_a_spawned_load_is_told_its_progress() {
    use super::backend_ops::{OpProgress, ProgressEvent};
    use crate::backend::StartProgress;
    use strata_protocol::wire::LoadPhase;

    let mut h = Harness::new(|b| b);
    h.connect(1);
    h.connect(2);
    // a loads once (700 ms learned), then b, then a again.
    h.enqueue(1, 1, "a");
    let first = h.op();
    h.verify(first);
    h.finish(1, 1);
    h.enqueue(1, 2, "b");
    let to_b = h.op();
    h.verify(to_b);
    h.finish(1, 2);
    h.enqueue(1, 3, "a");
    let OpRequest::Load { op_seq, .. } = h.op() else {
        panic!("a loads again");
    };
    h.send(Command::OpProgress(OpProgress {
        op_seq,
        event: ProgressEvent::Start(StartProgress::Spawned { pid: 4242 }),
    }));
    let early = h.messages(1);
    assert!(
        early.iter().any(|m| matches!(
            m,
            SupervisorMessage::Progress {
                ticket: 3,
                phase: LoadPhase::WaitingForReadiness,
                typical_load_ms: Some(700),
                ..
            }
        )),
        "{early:?}"
    );
    h.advance(Duration::from_secs(3));
    h.enqueue(2, 4, "a");
    let late = h.messages(2);
    let admitted = late
        .iter()
        .position(|m| matches!(m, SupervisorMessage::Admitted { ticket: 4 }))
        .unwrap_or_else(|| panic!("the late ticket joins the load: {late:?}"));
    let progress = late
        .iter()
        .position(|m| {
            matches!(
                m,
                SupervisorMessage::Progress {
                    ticket: 4,
                    phase: LoadPhase::WaitingForReadiness,
                    elapsed_ms: 3_000..,
                    typical_load_ms: Some(700),
                }
            )
        })
        .unwrap_or_else(|| panic!("the late ticket is told the load's progress: {late:?}"));
    assert!(admitted < progress, "{late:?}");
}
