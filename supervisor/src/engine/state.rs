//! The engine's state and its single-threaded event loop.
//!
//! The loop takes one [`Command`] at a time, updates the state it owns (the
//! queue of tickets from every proxy, the leases, the backend, the clocks,
//! the cache scores), then asks [`scheduler::decide`] what is due and
//! applies the plan: grants, admissions to a load, loads, failures, idle
//! unloads, cache lookups. Timers are the plan's `wake_at` plus a 50 ms
//! maintenance tick (child death, drain deadline, lookup budgets).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use strata_protocol::config::{Config, ModelStatus};
use strata_protocol::record::unix_ms;
use strata_protocol::wire::{
    ArrivalInfo, BackendInstance, CacheScores, Grant, LeaseFailure, LoadPhase, LookupFailure,
    ModelStatusEntry, RevokeReason, RouterState, ServiceTier, SupervisorMessage, TicketId,
    TicketRequest,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::control_ops::ControlOp;
use super::ledger::Ledger;
use super::ops::{self, OpOutcome, OpProgress, ProgressEvent};
use super::scheduler::{
    self, CacheState, Decision, Failure, Hold, Mode, Rules, TicketKey, Waiting,
};
use super::{Command, ConnId, Counters, Status};
use crate::backend::{Backend, LaunchSpec, StartError, StartProgress};

/// How often the engine checks child death, drain deadlines and lookup
/// budgets (and re-decides).
const TICK: Duration = Duration::from_millis(50);

/// How long a stopping supervisor waits for the records of tickets that
/// ended without a lease during its drain.
const RECORDS_GRACE: Duration = Duration::from_secs(2);

/// The most tickets one cache lookup scores.
const MAX_LOOKUP_TICKETS: usize = 256;

pub(super) struct Conn {
    pub(super) pid: u32,
    pub(super) events: mpsc::UnboundedSender<SupervisorMessage>,
    pub(super) draining: bool,
}

/// What the engine keeps of a ticket besides its [`Waiting`] entry.
struct TicketInfo {
    arrival: ArrivalInfo,
    /// `Queued` (or another first answer) was sent.
    announced: bool,
    /// The load it was admitted to.
    load: Option<u64>,
}

/// One granted lease.
pub(super) struct Held {
    pub(super) model: String,
    pub(super) tier: ServiceTier,
    /// Legacy: the response headers have not arrived yet (the lease holds
    /// the engine lock).
    pub(super) header_wait: bool,
    /// `Revoked` was sent; the lease lasts until the proxy finishes it.
    pub(super) revoked: bool,
}

/// Why a running load was asked to stop early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CancelReason {
    /// Operator `off` (or legacy routing off); admitted requests were failed.
    RoutingOff,
    /// The `on` client that started the load went away; admitted requests
    /// go back to waiting.
    ControlClientGone,
    Shutdown,
}

pub(super) enum RunningOp {
    Load {
        seq: u64,
        model: String,
        /// Admission found a different model, or none, selected.
        switch: bool,
        cancel: watch::Sender<bool>,
        cancelled: Option<CancelReason>,
        /// Started by (not merely joined by) a control `on`.
        started_by_control: bool,
        pid: Option<u32>,
        started: Instant,
    },
    Stop {
        seq: u64,
        reason: StopReason,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Idle,
    Off,
    Shutdown,
    /// The child died on its own; its group is being cleaned up. The model
    /// stays selected, so reloading it is not a switch.
    ChildDied,
}

pub(super) struct ShutdownState {
    pub(super) done: Option<tokio::sync::oneshot::Sender<()>>,
    /// After this, accepted work is interrupted. None: wait for all of it.
    pub(super) deadline: Option<Instant>,
    /// The drain ran out or a second signal came: leases were revoked,
    /// waiting tickets failed and a load cancelled.
    pub(super) forced: bool,
    /// Set once nothing runs but some tickets' records have not arrived
    /// (tickets refused or failed during the drain): wait for them until
    /// then.
    pub(super) records_until: Option<Instant>,
}

pub struct Engine {
    pub(super) config: Arc<Config>,
    pub(super) instance_id: String,
    pub(super) daemon_pid: u32,
    /// The engine's own command channel, handed to op tasks.
    pub(super) tx: mpsc::UnboundedSender<Command>,
    rules: Rules,
    counters: Arc<Counters>,
    pub(super) routing: bool,
    pub(super) shutdown: Option<ShutdownState>,
    pub(super) finished: bool,
    /// The verified backend, when one is running and no op owns it.
    pub(super) backend: Option<Backend>,
    /// Verified starts so far; the serving backend's [`BackendInstance`]
    /// epoch.
    backend_epoch: u64,
    /// The model the backend runs or last ran. Kept when the child dies
    /// (a same-ID reload is not a switch), cleared by an unload.
    pub(super) selected: Option<String>,
    pub(super) last_loaded: Option<String>,
    pub(super) verified: BTreeSet<String>,
    pub(super) last_startup_error: Option<String>,
    /// Per model: no launch before this (its last start failed). One
    /// broken build does not keep the others from loading.
    pub(super) cooldowns: BTreeMap<String, Instant>,
    /// Per model: the generic cause of its last failed start, until it
    /// starts.
    pub(super) start_errors: BTreeMap<String, String>,
    pub(super) conns: HashMap<ConnId, Conn>,
    /// Every ticket not yet granted, in arrival order: waiting, or admitted
    /// to the running load.
    queue: Vec<Waiting>,
    tickets: HashMap<TicketKey, TicketInfo>,
    /// Every ticket from `Enqueue` to `Finish`, granted and failed ones
    /// too: what a substitute record needs if its proxy disappears.
    ledger: Ledger,
    /// Granted leases. A lease ends only when its proxy finishes it or its
    /// connection closes (a revoked one too), so the backend it names stays
    /// untouched while it exists.
    pub(super) leases: HashMap<TicketKey, Held>,
    pub(super) op: Option<RunningOp>,
    pub(super) op_seq: u64,
    pub(super) control: Option<ControlOp>,
    /// When the last lease ended (or a load or `on` finished): the start of
    /// the idle and grace clocks.
    pub(super) quiet_since: Instant,
    cache: CacheState,
    lookup_seq: u64,
    /// The serving backend answered a lookup with 404 (no extension).
    lookup_unsupported: Option<BackendInstance>,
    /// When the last plan wants to look again.
    wake_at: Option<Instant>,
}

impl Engine {
    pub fn new(
        config: Arc<Config>,
        instance_id: String,
        counters: Arc<Counters>,
        tx: mpsc::UnboundedSender<Command>,
    ) -> Engine {
        let rules = Rules {
            mode: if config.scheduling.wait_when_busy {
                Mode::WaitFirst
            } else {
                Mode::Legacy
            },
            max_pending: config.scheduling.max_pending,
            cache_max_active: config.cache_active_limit(),
            grace: Duration::from_millis(config.timers.model_grace_ms),
            idle: Duration::from_millis(config.timers.idle_ms),
            cache_lookup: config.cache_lookup_timeout().is_some(),
        };
        Engine {
            config,
            instance_id,
            daemon_pid: std::process::id(),
            tx,
            rules,
            counters,
            routing: true,
            shutdown: None,
            finished: false,
            backend: None,
            backend_epoch: 0,
            selected: None,
            last_loaded: None,
            verified: BTreeSet::new(),
            last_startup_error: None,
            cooldowns: BTreeMap::new(),
            start_errors: BTreeMap::new(),
            conns: HashMap::new(),
            queue: Vec::new(),
            tickets: HashMap::new(),
            ledger: Ledger::default(),
            leases: HashMap::new(),
            op: None,
            op_seq: 0,
            control: None,
            quiet_since: Instant::now(),
            cache: CacheState::default(),
            lookup_seq: 0,
            lookup_unsupported: None,
            wake_at: None,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !self.finished {
            let wake = self.wake_at;
            tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                _ = tick.tick() => self.on_tick(),
                _ = sleep_until(wake), if wake.is_some() => self.schedule(),
            }
        }
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Connect { conn, pid, events } => {
                let state = self.router_state();
                let _ = events.send(SupervisorMessage::State(state));
                self.conns.insert(
                    conn,
                    Conn {
                        pid,
                        events,
                        draining: false,
                    },
                );
                tracing::info!(conn, pid, "proxy connected");
            }
            Command::Disconnect { conn, orphans } => {
                self.disconnect(conn);
                let _ = orphans.send(self.ledger.take_conn(conn));
            }
            Command::Enqueue {
                conn,
                ticket,
                model,
                tier,
                request,
            } => self.enqueue(conn, ticket, model, tier, request),
            Command::HeadersReceived { conn, ticket } => {
                if let Some(held) = self.leases.get_mut(&(conn, ticket)) {
                    held.header_wait = false;
                }
            }
            Command::Finish { conn, ticket } => {
                self.ledger.close((conn, ticket));
                self.finish((conn, ticket));
            }
            Command::Scores {
                conn,
                lookup,
                scores,
            } => self.scores(conn, lookup, scores),
            Command::SetDraining { conn, draining } => {
                if let Some(entry) = self.conns.get_mut(&conn) {
                    entry.draining = draining;
                }
                self.broadcast_state();
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
            }
            Command::InFlight { limit, reply } => {
                let _ = reply.send(self.in_flight_requests(limit));
            }
            Command::SetRouting { routing, reply } => {
                self.set_routing(routing);
                let _ = reply.send(self.routing);
            }
            Command::On { id, model, events } => self.start_on(id, model, events),
            Command::Off { id, now, events } => self.start_off(id, now, events),
            Command::CancelControl { id } => self.cancel_control(id),
            Command::Shutdown { done } => self.begin_shutdown(done),
            Command::ForceShutdown => {
                if let Some(shutdown) = &mut self.shutdown {
                    shutdown.deadline = Some(Instant::now());
                }
            }
            Command::OpProgress(progress) => self.op_progress(progress),
            Command::OpFinished(outcome) => self.op_finished(outcome),
            #[cfg(test)]
            Command::Panic => panic!("the engine failed (test)"),
        }
        self.schedule();
    }

    fn on_tick(&mut self) {
        if self.op.is_none()
            && let Some(backend) = &mut self.backend
            && let Some(exit) = backend.try_exited()
        {
            tracing::warn!(pid = backend.pid(), ?exit, "backend exited unexpectedly");
            // Members of its group may outlive it; the stop path confirms
            // the whole group is gone before anything else can start.
            self.start_stop(StopReason::ChildDied);
        }
        self.schedule();
    }

    // ---- tickets ----------------------------------------------------------

    fn enqueue(
        &mut self,
        conn: ConnId,
        ticket: TicketId,
        model: String,
        tier: ServiceTier,
        request: TicketRequest,
    ) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        let arrival = self.counters.arrive();
        let key = (conn, ticket);
        self.ledger.open(key, &model, tier, request, arrival);
        if let Some(failure) = self.refusal(&model) {
            self.send(
                conn,
                SupervisorMessage::Failed {
                    ticket,
                    arrival,
                    failure,
                },
            );
            return;
        }
        let deadline = self
            .config
            .queue_timeout()
            .map(|limit| Instant::now() + limit);
        self.queue.push(Waiting {
            key,
            model,
            tier,
            arrival: arrival.arrival_seq,
            deadline,
            admitted: false,
        });
        self.tickets.insert(
            key,
            TicketInfo {
                arrival,
                announced: false,
                load: None,
            },
        );
        self.cache.invalidate();
        self.schedule();
        self.announce(key);
    }

    /// Why a new ticket for `model` is refused at once, if it is.
    fn refusal(&self, model: &str) -> Option<LeaseFailure> {
        if self.shutdown.is_some() {
            return Some(LeaseFailure::ShuttingDown);
        }
        if !self.routing {
            return Some(LeaseFailure::RoutingOff);
        }
        // Models outside enabled_models reject direct requests; the proxy
        // already filters them, this keeps that true for any client of the
        // socket.
        let entry = self
            .config
            .registry
            .model(model)
            .filter(|_| self.config.registry.is_enabled(model));
        let Some(entry) = entry else {
            return Some(LeaseFailure::UnknownModel);
        };
        if !entry.prepared.is_prepared() {
            return Some(LeaseFailure::NotPrepared {
                status: entry.prepared,
            });
        }
        let needs_launch = !self.is_serving(model) && !self.is_loading(model);
        if needs_launch && let Some(failure) = self.cooldown_failure(model) {
            return Some(failure);
        }
        if scheduler::queue_is_full(&self.rules, self.queue.len(), self.leases.len()) {
            return Some(LeaseFailure::QueueFull);
        }
        None
    }

    /// Sends `Queued` for a ticket still in the queue that has had no
    /// answer yet.
    fn announce(&mut self, key: TicketKey) {
        let Some(info) = self.tickets.get_mut(&key) else {
            return;
        };
        if info.announced {
            return;
        }
        info.announced = true;
        let arrival = info.arrival;
        self.send(
            key.0,
            SupervisorMessage::Queued {
                ticket: key.1,
                arrival,
            },
        );
    }

    /// The request of `key` is over: it leaves the queue, or its lease ends.
    fn finish(&mut self, key: TicketKey) {
        if self.leases.remove(&key).is_some() {
            if self.leases.is_empty() {
                self.quiet_since = Instant::now();
            }
            // A generation ended: its scores are stale.
            self.cache.invalidate();
        } else if self.take_ticket(key).is_some() {
            // Withdrawn while waiting. A load it was admitted to goes on:
            // other requests may wait for it, and a finished load stays.
            self.cache.invalidate();
        }
    }

    fn take_ticket(&mut self, key: TicketKey) -> Option<(Waiting, TicketInfo)> {
        let index = self.queue.iter().position(|ticket| ticket.key == key)?;
        let ticket = self.queue.remove(index);
        let info = self.tickets.remove(&key)?;
        Some((ticket, info))
    }

    fn disconnect(&mut self, conn: ConnId) {
        if let Some(entry) = self.conns.remove(&conn) {
            tracing::info!(conn, pid = entry.pid, "proxy disconnected");
        }
        let before = self.leases.len();
        self.leases.retain(|(owner, _), _| *owner != conn);
        if before > 0 && self.leases.is_empty() {
            self.quiet_since = Instant::now();
        }
        self.queue.retain(|ticket| ticket.key.0 != conn);
        self.tickets.retain(|(owner, _), _| *owner != conn);
        self.cache.invalidate();
        // A lookup waiting for this proxy fails.
        if let Some(lookup) = &self.cache.lookup {
            let id = lookup.id;
            self.cache.answer(id, conn, None);
        }
        self.broadcast_state();
    }

    /// Asks every proxy to end its active leases now (each drops its
    /// stream and finishes). The leases last until finished, so an unload
    /// or switch still waits for them; only a forced shutdown, after which
    /// this supervisor starts no backend again, forgets them at once
    /// (`forget`).
    pub(super) fn revoke_all_leases(&mut self, reason: RevokeReason, forget: bool) -> usize {
        let mut revoked = Vec::new();
        for (key, held) in &mut self.leases {
            if !held.revoked {
                held.revoked = true;
                revoked.push(*key);
            }
        }
        for (conn, ticket) in revoked {
            self.send(conn, SupervisorMessage::Revoked { ticket, reason });
        }
        let count = self.leases.len();
        if forget && count > 0 {
            self.leases.clear();
            self.quiet_since = Instant::now();
        }
        count
    }

    /// Fails the queued tickets that match `which`.
    fn fail_tickets(&mut self, which: impl Fn(&Waiting) -> bool, failure: LeaseFailure) {
        let keys: Vec<TicketKey> = self
            .queue
            .iter()
            .filter(|ticket| which(ticket))
            .map(|ticket| ticket.key)
            .collect();
        for key in keys {
            self.fail(key, failure.clone());
        }
    }

    fn fail(&mut self, key: TicketKey, failure: LeaseFailure) {
        let Some((_, info)) = self.take_ticket(key) else {
            return;
        };
        self.cache.invalidate();
        if let LeaseFailure::LoadFailed {
            model_switch,
            load_ms,
            ..
        } = &failure
        {
            self.ledger.load_failed(key, *model_switch, *load_ms);
        }
        self.send(
            key.0,
            SupervisorMessage::Failed {
                ticket: key.1,
                arrival: info.arrival,
                failure,
            },
        );
    }

    /// Fails every queued ticket, including those admitted to a load.
    pub(super) fn fail_all_waiting(&mut self, failure: LeaseFailure) {
        self.fail_tickets(|_| true, failure);
    }

    pub(super) fn set_routing(&mut self, routing: bool) {
        self.routing = routing;
        if !routing {
            self.fail_all_waiting(LeaseFailure::RoutingOff);
        }
        self.broadcast_state();
    }

    /// What is left of `model`'s start cooldown, if one runs.
    fn cooldown_remaining(&self, model: &str) -> Option<Duration> {
        let until = self.cooldowns.get(model)?;
        until
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    fn cooldown_failure(&self, model: &str) -> Option<LeaseFailure> {
        let remaining = self.cooldown_remaining(model)?;
        Some(LeaseFailure::Cooldown {
            message: self
                .start_errors
                .get(model)
                .cloned()
                .unwrap_or_else(|| "a recent backend start failed".into()),
            remaining_ms: remaining.as_millis() as u64,
        })
    }

    fn is_serving(&self, model: &str) -> bool {
        self.backend.is_some() && self.op.is_none() && self.selected.as_deref() == Some(model)
    }

    fn is_loading(&self, model: &str) -> bool {
        matches!(&self.op, Some(RunningOp::Load { model: m, cancelled: None, .. }) if m == model)
    }

    // ---- cache lookups ----------------------------------------------------

    fn scores(&mut self, conn: ConnId, lookup: u64, scores: Result<CacheScores, LookupFailure>) {
        let ranks = match scores {
            Ok(scores) => Some(
                scores
                    .results
                    .iter()
                    .map(|score| {
                        let rank = scheduler::rank(
                            score.input_tokens,
                            score.cached_tokens,
                            scores.min_tokens,
                        );
                        ((conn, score.ticket), rank)
                    })
                    .collect(),
            ),
            Err(failure) => {
                tracing::debug!(?failure, "cache lookup failed; arrival order");
                if failure == LookupFailure::Unsupported {
                    self.lookup_unsupported = self.serving_instance();
                }
                None
            }
        };
        self.cache.answer(lookup, conn, ranks);
    }

    fn start_lookup(&mut self, keys: Vec<TicketKey>) {
        let Some(backend) = self.backend.as_ref() else {
            return;
        };
        let addr = backend.addr();
        let mut by_conn: HashMap<ConnId, Vec<TicketId>> = HashMap::new();
        for (conn, ticket) in keys.into_iter().take(MAX_LOOKUP_TICKETS) {
            by_conn.entry(conn).or_default().push(ticket);
        }
        self.lookup_seq += 1;
        let budget = self.config.cache_lookup_timeout().unwrap_or(Duration::ZERO);
        let until = Instant::now() + budget;
        self.cache.start(
            self.lookup_seq,
            until,
            by_conn.keys().copied().collect::<HashSet<_>>(),
        );
        for (conn, tickets) in by_conn {
            self.send(
                conn,
                SupervisorMessage::ScoreTickets {
                    lookup: self.lookup_seq,
                    backend: addr,
                    tickets,
                    budget_ms: budget.as_millis() as u64,
                },
            );
        }
    }

    fn serving_instance(&self) -> Option<BackendInstance> {
        self.backend
            .as_ref()
            .filter(|_| self.op.is_none())
            .map(|backend| self.backend_instance(backend))
    }

    // ---- scheduling -------------------------------------------------------

    /// Makes every decision that is due. Called after each command, tick
    /// and wake-up.
    pub(super) fn schedule(&mut self) {
        if self.finished {
            return;
        }
        self.cache.expire(Instant::now());
        if self.schedule_shutdown() {
            self.publish_counts();
            return;
        }
        // A few rounds at most: applying a plan can make another decision
        // due (a queue timeout frees the head in legacy mode).
        for _ in 0..4 {
            // A running op (a control `on`'s own load included) is decided
            // around; only a control operation that waits holds the rest.
            let hold = if self.op.is_none() && self.schedule_control() {
                Hold::Everything
            } else {
                Hold::None
            };
            let plan = {
                let backend = self.scheduler_backend();
                let usable = self.rules.cache_lookup
                    && self.serving_instance().is_some()
                    && self.serving_instance() != self.lookup_unsupported;
                let view = scheduler::View {
                    now: Instant::now(),
                    rules: &self.rules,
                    backend,
                    queue: &self.queue,
                    leases: self.leases.len(),
                    header_waits: self.leases.values().filter(|held| held.header_wait).count(),
                    quiet_since: self.quiet_since,
                    cooldowns: &self.cooldowns,
                    hold,
                    cache: self.cache.view(usable),
                };
                scheduler::decide(&view)
            };
            self.wake_at = plan.wake_at;
            if plan.decisions.is_empty() {
                break;
            }
            for decision in plan.decisions {
                self.apply(decision);
            }
        }
        self.publish_counts();
    }

    fn scheduler_backend(&self) -> scheduler::Backend<'_> {
        match (&self.op, &self.backend, &self.selected) {
            (
                Some(RunningOp::Load {
                    model,
                    cancelled: None,
                    ..
                }),
                _,
                _,
            ) => scheduler::Backend::Loading { model },
            (Some(_), _, _) => scheduler::Backend::Busy,
            (None, Some(_), Some(model)) => scheduler::Backend::Serving { model },
            (None, _, _) => scheduler::Backend::Empty,
        }
    }

    fn apply(&mut self, decision: Decision) {
        match decision {
            Decision::Grant(key) => {
                if let Some((ticket, info)) = self.take_ticket(key) {
                    self.cache.invalidate();
                    self.grant(ticket, info, false, None);
                }
            }
            Decision::Admit(key) => {
                let Some(RunningOp::Load { seq, .. }) = &self.op else {
                    return;
                };
                let seq = *seq;
                if let Some(ticket) = self.queue.iter_mut().find(|ticket| ticket.key == key) {
                    ticket.admitted = true;
                }
                self.announce(key);
                if let Some(info) = self.tickets.get_mut(&key) {
                    info.load = Some(seq);
                }
                self.cache.invalidate();
                self.ledger.admitted(key, unix_ms(SystemTime::now()));
                self.send(key.0, SupervisorMessage::Admitted { ticket: key.1 });
            }
            Decision::StartLoad { model } => {
                self.start_load(&model, false);
            }
            Decision::Fail(key, Failure::QueueTimeout) => {
                self.fail(key, LeaseFailure::QueueTimeout)
            }
            Decision::Fail(key, Failure::Cooldown) => {
                let model = self
                    .queue
                    .iter()
                    .find(|ticket| ticket.key == key)
                    .map(|ticket| ticket.model.clone())
                    .unwrap_or_default();
                let failure = self
                    .cooldown_failure(&model)
                    .unwrap_or(LeaseFailure::Cooldown {
                        message: "a recent backend start failed".into(),
                        remaining_ms: 0,
                    });
                self.fail(key, failure);
            }
            Decision::Unload => {
                tracing::info!(model = ?self.selected, "idle: unloading");
                self.start_stop(StopReason::Idle);
            }
            Decision::StartLookup(keys) => self.start_lookup(keys),
        }
    }

    /// Publishes the router-wide counts (see [`Counters`]). In wait-first
    /// mode a ticket admitted to a load is in flight, not queued; in legacy
    /// mode queue depth is pending minus admitted leases, so it also counts
    /// the ticket holding the engine lock through its load and header wait.
    /// In flight counts admitted tickets and leases in both.
    fn publish_counts(&self) {
        let legacy = self.rules.mode == Mode::Legacy;
        let mut by_tier = [0u64; 3];
        for ticket in &self.queue {
            if !ticket.admitted || legacy {
                by_tier[ticket.tier.index()] += 1;
            }
        }
        if legacy {
            for held in self.leases.values().filter(|held| held.header_wait) {
                by_tier[held.tier.index()] += 1;
            }
        }
        let admitted = self.queue.iter().filter(|ticket| ticket.admitted).count();
        // Counted in place: this runs after every command, so no allocation
        // once every model has its entry.
        let count_by_model = |by_model: &mut BTreeMap<String, u64>| {
            if by_model.is_empty() {
                for entry in self.config.registry.models() {
                    by_model.insert(entry.id.clone(), 0);
                }
            }
            by_model.values_mut().for_each(|count| *count = 0);
            for ticket in self
                .queue
                .iter()
                .filter(|ticket| !ticket.admitted || legacy)
            {
                if let Some(count) = by_model.get_mut(&ticket.model) {
                    *count += 1;
                }
            }
        };
        self.counters.publish(
            by_tier,
            (self.leases.len() + admitted) as u64,
            count_by_model,
            self.conns.len() as u64,
        );
    }

    // ---- ops --------------------------------------------------------------

    /// Starts loading `model`, stopping the current backend first.
    pub(super) fn start_load(&mut self, model: &str, started_by_control: bool) -> u64 {
        self.op_seq += 1;
        let seq = self.op_seq;
        let (cancel, cancel_rx) = watch::channel(false);
        let switch = self.selected.as_deref() != Some(model);
        let old = self.backend.take();
        let spec = self.launch_spec(model);
        ops::spawn_load(
            seq,
            old,
            spec,
            self.shutdown_grace(),
            cancel_rx,
            self.tx.clone(),
        );
        self.op = Some(RunningOp::Load {
            seq,
            model: model.to_owned(),
            switch,
            cancel,
            cancelled: None,
            started_by_control,
            pid: None,
            started: Instant::now(),
        });
        tracing::info!(model, "loading model");
        self.broadcast_state();
        seq
    }

    pub(super) fn start_stop(&mut self, reason: StopReason) {
        let Some(backend) = self.backend.take() else {
            return;
        };
        self.op_seq += 1;
        let seq = self.op_seq;
        ops::spawn_stop(seq, backend, self.shutdown_grace(), self.tx.clone());
        self.op = Some(RunningOp::Stop { seq, reason });
        self.broadcast_state();
    }

    /// Asks the running load to stop at its next readiness poll.
    pub(super) fn cancel_load(&mut self, reason: CancelReason) {
        if let Some(RunningOp::Load {
            cancel, cancelled, ..
        }) = &mut self.op
            && cancelled.is_none()
        {
            *cancelled = Some(reason);
            let _ = cancel.send(true);
        }
    }

    fn launch_spec(&self, model: &str) -> LaunchSpec {
        let entry = self
            .config
            .registry
            .model(model)
            .expect("only configured, prepared models are loaded");
        LaunchSpec {
            model_id: entry.id.clone(),
            python: self.config.python.clone(),
            strata_dir: self.config.strata_dir.clone(),
            profile: entry
                .profile
                .clone()
                .expect("a prepared model has a profile"),
            upstream_model: entry.upstream_model.clone(),
            backend_port: self.config.backend_port,
            ready_dir_parent: self.runtime_dir(),
            startup: Duration::from_millis(self.config.timers.startup_ms),
            shutdown: self.shutdown_grace(),
        }
    }

    /// The private directory holding the sockets; ready files go there too.
    fn runtime_dir(&self) -> std::path::PathBuf {
        self.config
            .control_socket
            .parent()
            .map(|dir| dir.to_path_buf())
            .unwrap_or_else(|| "/".into())
    }

    fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.config.timers.shutdown_ms)
    }

    fn op_progress(&mut self, progress: OpProgress) {
        let Some(RunningOp::Load {
            seq,
            model,
            pid,
            started,
            ..
        }) = &mut self.op
        else {
            return;
        };
        if *seq != progress.op_seq {
            return;
        }
        let (seq, started) = (*seq, *started);
        let model = model.clone();
        if let ProgressEvent::Start(StartProgress::Spawned { pid: child }) = &progress.event {
            *pid = Some(*child);
        }
        // Once spawned, the backend is loading and readiness polling begins, so
        // `WaitingForReadiness` follows `Starting` at once (not when the ready
        // file shows up, which is the end of that wait).
        let phases: &[LoadPhase] = match &progress.event {
            ProgressEvent::StoppingOld { .. } => &[LoadPhase::StoppingOldBackend],
            ProgressEvent::Start(StartProgress::Spawned { .. }) => {
                &[LoadPhase::Starting, LoadPhase::WaitingForReadiness]
            }
            ProgressEvent::Start(StartProgress::HealthCheckPassed) => &[LoadPhase::Verified],
            ProgressEvent::OldStopped { .. } | ProgressEvent::Start(_) => &[],
        };
        if !phases.is_empty() {
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let targets: Vec<TicketKey> = self
                .tickets
                .iter()
                .filter(|(_, info)| info.load == Some(seq))
                .map(|(key, _)| *key)
                .collect();
            for (conn, ticket) in targets {
                for phase in phases {
                    self.send(
                        conn,
                        SupervisorMessage::Progress {
                            ticket,
                            phase: *phase,
                            elapsed_ms,
                        },
                    );
                }
            }
        }
        self.control_load_progress(&model, &progress.event);
    }

    fn op_finished(&mut self, outcome: OpOutcome) {
        match outcome {
            OpOutcome::Loaded {
                op_seq,
                result,
                load_ms,
            } => {
                let Some(RunningOp::Load {
                    seq,
                    model,
                    switch,
                    cancelled,
                    ..
                }) = self.op.take()
                else {
                    return;
                };
                debug_assert_eq!(seq, op_seq);
                self.load_finished(seq, model, switch, cancelled, result, load_ms);
            }
            OpOutcome::Stopped {
                op_seq,
                pid,
                report,
            } => {
                let Some(RunningOp::Stop { seq, reason }) = self.op.take() else {
                    return;
                };
                debug_assert_eq!(seq, op_seq);
                tracing::info!(pid, ?reason, ?report, "backend stopped");
                if reason != StopReason::ChildDied {
                    self.selected = None;
                }
                self.broadcast_state();
                self.stop_finished(reason, pid);
            }
        }
    }

    /// The tickets admitted to load `seq`, in arrival order.
    fn admitted_to(&self, seq: u64) -> Vec<TicketKey> {
        self.queue
            .iter()
            .filter(|ticket| {
                ticket.admitted
                    && self
                        .tickets
                        .get(&ticket.key)
                        .is_some_and(|info| info.load == Some(seq))
            })
            .map(|ticket| ticket.key)
            .collect()
    }

    fn load_finished(
        &mut self,
        seq: u64,
        model: String,
        switch: bool,
        cancelled: Option<CancelReason>,
        result: Result<Backend, StartError>,
        load_ms: u64,
    ) {
        let admitted = self.admitted_to(seq);
        match result {
            Ok(backend) => {
                tracing::info!(model, pid = backend.pid(), load_ms, "backend verified");
                self.counters.count_load(&model, "verified");
                self.backend_epoch += 1;
                self.backend = Some(backend);
                self.selected = Some(model.clone());
                self.last_loaded = Some(model.clone());
                self.verified.insert(model.clone());
                self.cooldowns.remove(&model);
                self.start_errors.remove(&model);
                self.quiet_since = Instant::now();
                // The new backend goes out before the grants that name it:
                // a proxy checks a grant's instance against the last state.
                self.broadcast_state();
                for key in admitted {
                    if let Some((ticket, info)) = self.take_ticket(key) {
                        self.grant(ticket, info, switch, Some(load_ms));
                    }
                }
                self.cache.invalidate();
                self.control_load_finished(&model, Ok(()));
            }
            Err(err) => {
                self.selected = None;
                if matches!(err, StartError::Cancelled) || cancelled.is_some() {
                    tracing::info!(model, "load cancelled");
                    self.counters.count_load(&model, "cancelled");
                    // Requests admitted to a load that its `on` client
                    // abandoned go back to waiting; a new load follows.
                    for ticket in &mut self.queue {
                        if admitted.contains(&ticket.key) {
                            ticket.admitted = false;
                        }
                    }
                    for key in &admitted {
                        if let Some(info) = self.tickets.get_mut(key) {
                            info.load = None;
                        }
                    }
                    self.broadcast_state();
                    self.control_load_finished(&model, Err("load cancelled".into()));
                    return;
                }
                let message = err.to_string();
                tracing::warn!(model, error = %message, "backend start failed");
                self.counters.count_load(&model, "failed");
                self.last_startup_error = Some(message.clone());
                self.start_errors.insert(model.clone(), message.clone());
                self.cooldowns.insert(
                    model.clone(),
                    Instant::now() + Duration::from_millis(self.config.timers.cooldown_ms),
                );
                for key in admitted {
                    self.fail(
                        key,
                        LeaseFailure::LoadFailed {
                            message: message.clone(),
                            model_switch: switch,
                            load_ms: Some(load_ms),
                            cooldown_ms: self.config.timers.cooldown_ms,
                        },
                    );
                }
                self.broadcast_state();
                self.control_load_finished(&model, Err(message));
            }
        }
    }

    fn grant(&mut self, ticket: Waiting, info: TicketInfo, switch: bool, load_ms: Option<u64>) {
        let Some(backend) = &self.backend else {
            return;
        };
        let addr = backend.addr();
        let instance = self.backend_instance(backend);
        let upstream_model = self
            .config
            .registry
            .model(&ticket.model)
            .map(|entry| entry.upstream_model.clone())
            .unwrap_or_default();
        let (conn, id) = ticket.key;
        self.leases.insert(
            ticket.key,
            Held {
                model: ticket.model,
                tier: ticket.tier,
                header_wait: self.rules.mode == Mode::Legacy,
                revoked: false,
            },
        );
        let grant = Grant {
            ticket: id,
            arrival: info.arrival,
            backend: addr,
            instance,
            upstream_model,
            model_switch: switch,
            load_ms,
        };
        self.ledger
            .granted((conn, id), &grant, unix_ms(SystemTime::now()));
        self.send(conn, SupervisorMessage::Granted(grant));
    }

    fn backend_instance(&self, backend: &Backend) -> BackendInstance {
        BackendInstance {
            epoch: self.backend_epoch,
            pid: backend.pid(),
        }
    }

    // ---- shutdown ---------------------------------------------------------

    /// SIGTERM: drain like the spec's daemon. New proxies (the link stops
    /// accepting) and new tickets are refused, and so is a control
    /// operation that would load; accepted work keeps its routing: queued
    /// tickets are still admitted and served, a load in progress finishes.
    /// Once nothing is queued, leased or running, the backend stops.
    fn begin_shutdown(&mut self, done: tokio::sync::oneshot::Sender<()>) {
        if self.shutdown.is_some() {
            return;
        }
        tracing::info!("draining: no new proxies or requests; accepted work finishes");
        let drain_ms = self.config.timers.drain_ms;
        self.shutdown = Some(ShutdownState {
            done: Some(done),
            deadline: (drain_ms > 0).then(|| Instant::now() + Duration::from_millis(drain_ms)),
            forced: false,
            records_until: None,
        });
        self.broadcast_state();
    }

    /// `drain_ms` ran out or a second signal came: interrupt accepted work.
    /// A load observes the cancellation on its next readiness poll.
    fn force_shutdown(&mut self) {
        if let Some(shutdown) = &mut self.shutdown {
            shutdown.forced = true;
        }
        let revoked = self.revoke_all_leases(RevokeReason::Shutdown, true);
        tracing::warn!(
            revoked,
            queued = self.queue.len(),
            "drain ended: interrupting accepted work"
        );
        self.fail_all_waiting(LeaseFailure::ShuttingDown);
        self.abort_control("the daemon is shutting down");
        self.cancel_load(CancelReason::Shutdown);
    }

    /// The drain's end game; true when normal scheduling must not run.
    fn schedule_shutdown(&mut self) -> bool {
        let Some(shutdown) = &self.shutdown else {
            return false;
        };
        let due = shutdown
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline);
        if due && !shutdown.forced {
            self.force_shutdown();
        }
        let busy = !self.queue.is_empty() || !self.leases.is_empty() || self.control.is_some();
        if busy {
            // Accepted work still runs: schedule it as usual.
            return false;
        }
        if self.op.is_some() {
            return true;
        }
        if self.backend.is_some() {
            self.start_stop(StopReason::Shutdown);
            return true;
        }
        // A ticket failed or refused during the drain ends with its proxy's
        // `Finish`, which carries its record: stopping before it arrives
        // would lose the record. A proxy sends it within milliseconds, so
        // the wait is bounded.
        if self.ledger.len() > 0 {
            let until = *self
                .shutdown
                .as_mut()
                .map(|s| {
                    s.records_until
                        .get_or_insert(Instant::now() + RECORDS_GRACE)
                })
                .expect("shutting down");
            if Instant::now() < until {
                return true;
            }
            tracing::warn!(
                open = self.ledger.len(),
                "stopping without the records of some requests"
            );
        }
        self.finished = true;
        if let Some(done) = self.shutdown.as_mut().and_then(|s| s.done.take()) {
            let _ = done.send(());
        }
        true
    }

    // ---- state reports ----------------------------------------------------

    /// The oldest open tickets that still wait or hold a lease (failed ones
    /// whose `Finish` is on its way are not held any more), oldest first.
    fn in_flight_requests(&self, limit: usize) -> Vec<super::InFlightRequest> {
        let now = unix_ms(SystemTime::now());
        let queued: HashMap<TicketKey, bool> = self
            .queue
            .iter()
            .map(|ticket| (ticket.key, ticket.admitted))
            .collect();
        let mut held: Vec<super::InFlightRequest> = self
            .ledger
            .iter()
            .filter_map(|(key, open)| {
                let stage = if self.leases.contains_key(key) {
                    "leased"
                } else {
                    match queued.get(key) {
                        Some(true) => "loading",
                        Some(false) => "waiting",
                        None => return None,
                    }
                };
                Some(super::InFlightRequest {
                    request_id: strata_protocol::ids::request_id(
                        &self.instance_id,
                        open.arrival.arrival_seq,
                    ),
                    model: open.model.clone(),
                    tier: open.tier.as_str().to_owned(),
                    stage: stage.to_owned(),
                    age_ms: now.saturating_sub(open.request.arrived_unix_ms),
                })
            })
            .collect();
        // The oldest `limit` first, without sorting thousands of waiting ones.
        if held.len() > limit && limit > 0 {
            held.select_nth_unstable_by(limit - 1, |a, b| b.age_ms.cmp(&a.age_ms));
        }
        held.truncate(limit);
        held.sort_by_key(|held| std::cmp::Reverse(held.age_ms));
        held
    }

    pub(super) fn send(&self, conn: ConnId, message: SupervisorMessage) {
        if let Some(entry) = self.conns.get(&conn) {
            let _ = entry.events.send(message);
        }
    }

    pub(super) fn router_state(&self) -> RouterState {
        let loaded = self
            .backend
            .as_ref()
            .and(self.selected.clone())
            .filter(|_| self.op.is_none());
        let loading = self.loading_model();
        let statuses = self
            .config
            .registry
            .models()
            .iter()
            .map(|entry| {
                let status = if loaded.as_deref() == Some(entry.id.as_str()) {
                    ModelStatus::Loaded
                } else if entry.prepared.is_prepared() && self.verified.contains(&entry.id) {
                    ModelStatus::Verified
                } else {
                    entry.prepared
                };
                ModelStatusEntry {
                    id: entry.id.clone(),
                    status,
                    last_error: self.start_errors.get(&entry.id).cloned(),
                    cooldown_remaining_ms: self
                        .cooldown_remaining(&entry.id)
                        .map(|left| left.as_millis() as u64),
                }
            })
            .collect();
        RouterState {
            routing: self.routing,
            draining: self.is_draining(),
            loaded,
            loading,
            backend: self.serving_instance(),
            last_startup_error: self.last_startup_error.clone(),
            statuses,
        }
    }

    fn loading_model(&self) -> Option<String> {
        match &self.op {
            Some(RunningOp::Load { model, .. }) => Some(model.clone()),
            _ => None,
        }
    }

    fn is_draining(&self) -> bool {
        self.shutdown.is_some() || self.conns.values().any(|conn| conn.draining)
    }

    pub(super) fn broadcast_state(&self) {
        let state = self.router_state();
        for conn in self.conns.values() {
            let _ = conn.events.send(SupervisorMessage::State(state.clone()));
        }
    }

    pub(super) fn status(&self) -> Status {
        let operation = match (&self.control, &self.op) {
            (Some(control), _) => Some(control.name()),
            (None, Some(RunningOp::Load { .. })) => Some("load"),
            (None, Some(RunningOp::Stop { .. })) => Some("unload"),
            (None, None) if self.shutdown.is_some() => Some("shutdown"),
            (None, None) => None,
        };
        let child_pid = match &self.op {
            Some(RunningOp::Load { pid, .. }) => *pid,
            _ => self.backend.as_ref().map(|backend| backend.pid()),
        };
        Status {
            daemon_pid: self.daemon_pid,
            instance_id: self.instance_id.clone(),
            busy: operation.is_some(),
            operation: operation.map(str::to_owned),
            routing: self.routing,
            draining: self.is_draining(),
            child_pid,
            loaded: self.router_state().loaded,
            loading: self.loading_model(),
            last_startup_error: self.last_startup_error.clone(),
            proxies: self.conns.len(),
            active_leases: self.leases.len(),
            waiting_requests: self.queue.len(),
            // The longest of the models' cooldowns (each model has its own).
            cooldown_remaining_ms: self
                .cooldowns
                .keys()
                .filter_map(|model| self.cooldown_remaining(model))
                .max()
                .map(|left| left.as_millis() as u64),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
