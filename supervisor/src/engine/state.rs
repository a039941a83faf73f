//! The engine's event loop: it owns the engine's parts and applies what
//! their pure steps decide.
//!
//! The loop takes one [`Command`] at a time with the clock read once for
//! it ([`Now`]), updates the part the command is about (the [`Queue`], the
//! [`Leases`], the [`BackendSlot`], the [`Operator`], the [`Drain`], the
//! ledger), then asks [`scheduler::decide`] what is due and applies the
//! plan: grants, admissions to a load, loads, failures, idle unloads, cache
//! lookups. Timers are the plan's `wake_at` plus a 50 ms maintenance tick
//! (child death, drain deadline, lookup budgets). Everything that crosses
//! to another task (messages to proxies and control clients, ops) goes out
//! from here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use strata_protocol::config::{Config, Registry, UnresponsiveAction};
use strata_protocol::control::ControlEvent;
use strata_protocol::record::unix_ms;
use strata_protocol::wire::{
    BackendInstance, CacheScores, Grant, LeaseFailure, LoadPhase, LookupFailure, RevokeReason,
    ServiceTier, SupervisorMessage, TicketId, TicketRequest,
};
use strata_scheduler::{
    self as scheduler, ConnId, Decision, Hold, Mode, Refusal, Rules, TicketKey, Waiting,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::backend_ops::{OpOutcome, OpProgress, OpRunner, ProgressEvent};
use super::backend_slot::{self, BackendSlot, CancelReason, Finished, StopReason};
use super::command::{Command, ControlOpId};
use super::counters::Counters;
use super::drain::{self, Drain, DrainAction};
use super::leases::{Lease, Leases};
use super::ledger::Ledger;
use super::operator::{self, Operator, OperatorAction};
use super::probe::{BackendWatch, ProbeOutcome, Verdict};
use super::queue::{Queue, TicketInfo};
use super::report::Parts;
use crate::backend::StartProgress;
use crate::prefetch::Prefetch;
use book::EngineBook;

mod book;

/// How often the engine checks child death, drain deadlines and lookup
/// budgets (and re-decides).
const TICK: Duration = Duration::from_millis(50);

/// The clock, read once per event: the monotonic instant every timer uses
/// and the wall clock of records and ages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub at: Instant,
    pub unix_ms: u64,
}

impl Now {
    pub fn read() -> Now {
        Now {
            at: Instant::now(),
            unix_ms: unix_ms(SystemTime::now()),
        }
    }
}

struct Conn {
    pid: u32,
    events: mpsc::UnboundedSender<SupervisorMessage>,
    draining: bool,
}

pub struct Engine {
    config: Arc<Config>,
    instance_id: String,
    daemon_pid: u32,
    rules: Rules,
    counters: Arc<Counters>,
    ops: OpRunner,
    routing: bool,
    conns: HashMap<ConnId, Conn>,
    queue: Queue,
    leases: Leases,
    slot: BackendSlot,
    /// Every ticket from `Enqueue` to `Finish`, granted and failed ones
    /// too: what a substitute record needs if its proxy disappears.
    ledger: Ledger,
    operator: Operator,
    /// The control clients of operations that have not had their `Done`.
    control_clients: HashMap<ControlOpId, mpsc::UnboundedSender<ControlEvent>>,
    drain: Option<Drain>,
    /// Answered when the drain is over.
    drain_done: Option<oneshot::Sender<()>>,
    finished: bool,
    /// When the last plan wants to look again.
    wake_at: Option<Instant>,
    /// Reads the next model's weights while it waits.
    prefetch: Prefetch,
    /// The probes of the serving backend.
    watch: BackendWatch,
    /// An unresponsive backend is to be restarted once its revoked leases
    /// have ended; meanwhile nothing is granted.
    restart_pending: bool,
}

impl Engine {
    pub fn new(
        config: Arc<Config>,
        instance_id: String,
        counters: Arc<Counters>,
        ops: OpRunner,
        now: Instant,
    ) -> Engine {
        let rules = Rules::from_config(&config);
        let prefetch = Prefetch::start(&config, counters.clone());
        Engine {
            operator: Operator::new(Duration::from_millis(config.timers.startup_ms)),
            config,
            instance_id,
            daemon_pid: std::process::id(),
            rules,
            counters,
            ops,
            routing: true,
            conns: HashMap::new(),
            queue: Queue::default(),
            leases: Leases::new(now),
            slot: BackendSlot::default(),
            ledger: Ledger::default(),
            control_clients: HashMap::new(),
            drain: None,
            drain_done: None,
            finished: false,
            wake_at: None,
            prefetch,
            watch: BackendWatch::default(),
            restart_pending: false,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !self.finished {
            let wake = self.wake_at;
            tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => self.handle(command, Now::read()),
                    None => break,
                },
                _ = tick.tick() => self.tick(Now::read()),
                _ = sleep_until(wake), if wake.is_some() => self.schedule(Now::read()),
            }
        }
    }

    /// The engine has answered its drain and stopped.
    #[cfg(test)]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// When the engine wants to decide again without a command.
    #[cfg(test)]
    pub fn wake_at(&self) -> Option<Instant> {
        self.wake_at
    }

    /// The model whose weights the engine wants prefetched.
    #[cfg(test)]
    pub fn prefetching(&self) -> Option<&str> {
        self.prefetch.wanted()
    }

    pub fn handle(&mut self, command: Command, now: Now) {
        match command {
            Command::Connect { conn, pid, events } => {
                let _ = events.send(SupervisorMessage::State(self.parts().router_state(now)));
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
                self.disconnect(conn, now);
                let _ = orphans.send(self.ledger.take_conn(conn));
            }
            Command::Enqueue {
                conn,
                ticket,
                model,
                tier,
                request,
            } => self.enqueue(conn, ticket, model, tier, request, now),
            Command::HeadersReceived { conn, ticket } => {
                self.leases.headers_received((conn, ticket));
            }
            Command::Finish { conn, ticket } => {
                self.ledger.close((conn, ticket));
                self.finish((conn, ticket), now);
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
                self.broadcast_state(now);
            }
            Command::ProbeResult { instance, outcome } => {
                self.probe_result(instance, outcome, now);
            }
            Command::Status { reply } => {
                let _ = reply.send(self.parts().status(now));
            }
            Command::Models { reply } => {
                let _ = reply.send(self.parts().models(now));
            }
            Command::InFlight { limit, reply } => {
                let _ = reply.send(self.parts().in_flight_requests(limit, now.unix_ms));
            }
            Command::SetRouting { routing, reply } => {
                self.set_routing(routing, now);
                let _ = reply.send(self.routing);
            }
            Command::On { id, model, events } => {
                self.control_clients.insert(id, events);
                let actions = self.operate(|operator, facts, registry| {
                    operator.begin_on(id, model.as_deref(), facts, registry, now.at)
                });
                self.apply_operator(actions, now);
            }
            Command::Off {
                id,
                now: interrupt,
                events,
            } => {
                self.control_clients.insert(id, events);
                let actions = self
                    .operate(|operator, facts, _| operator.begin_off(id, interrupt, facts, now.at));
                self.apply_operator(actions, now);
            }
            Command::CancelControl { id } => {
                let actions = self.operate(|operator, facts, _| operator.cancel(id, facts));
                if !actions.is_empty() {
                    tracing::info!("operation cancelled by its client");
                }
                self.apply_operator(actions, now);
            }
            Command::Shutdown { done } => self.begin_drain(done, now),
            Command::ForceShutdown => {
                if let Some(drain) = &mut self.drain {
                    drain.force_now(now.at);
                }
            }
            Command::OpProgress(progress) => self.op_progress(progress, now),
            Command::OpFinished(outcome) => self.op_finished(outcome, now),
            #[cfg(test)]
            Command::Panic => panic!("the engine failed (test)"),
        }
        self.schedule(now);
    }

    /// The maintenance tick: notices a dead child, then decides.
    pub fn tick(&mut self, now: Now) {
        if let Some((pid, exit)) = self.slot.child_died() {
            tracing::warn!(pid, ?exit, "backend exited unexpectedly");
            // Members of its group may outlive it; the stop path confirms
            // the whole group is gone before anything else can start.
            self.start_stop(StopReason::ChildDied, now);
        }
        self.schedule(now);
    }

    // ---- tickets ----------------------------------------------------------

    fn enqueue(
        &mut self,
        conn: ConnId,
        ticket: TicketId,
        model: String,
        tier: ServiceTier,
        request: TicketRequest,
        now: Now,
    ) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        let arrival = self.counters.arrive();
        let key = (conn, ticket);
        let upstream = self
            .config
            .registry
            .model(&model)
            .map(|e| e.upstream_model.as_str());
        self.ledger
            .open(key, &model, upstream, tier, request, arrival);
        if let Some(failure) = self.refusal(&model, now) {
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
        let deadline = self.config.queue_timeout().map(|limit| now.at + limit);
        let waiting = Waiting {
            key,
            model,
            tier,
            arrival: arrival.arrival_seq,
            arrived_at: now.at,
            deadline,
            admitted: false,
        };
        self.queue.push(waiting, arrival);
        // Decided before the first answer: a ticket granted at once gets
        // its grant, not `Queued`.
        self.schedule(now);
        self.announce(key);
    }

    /// Why a new ticket for `model` is refused at once, if it is.
    fn refusal(&self, model: &str, now: Now) -> Option<LeaseFailure> {
        if self.drain.is_some() {
            return Some(LeaseFailure::ShuttingDown);
        }
        if !self.routing {
            return Some(LeaseFailure::RoutingOff);
        }
        // Models outside enabled_models reject direct requests; the proxy
        // already filters them, this keeps that true for any client of the
        // socket.
        let registry = &self.config.registry;
        let entry = registry.model(model).filter(|_| registry.is_enabled(model));
        let Some(entry) = entry else {
            return Some(LeaseFailure::UnknownModel);
        };
        if !entry.prepared.is_prepared() {
            return Some(LeaseFailure::NotPrepared {
                status: entry.prepared,
            });
        }
        match scheduler::refusal(&self.view(now, Hold::None), model)? {
            Refusal::Cooldown { .. } => Some(self.slot.cooldown_failure(model, now.at)),
            Refusal::QueueFull => Some(LeaseFailure::QueueFull),
        }
    }

    /// Sends `Queued` for a ticket still in the queue that has had no
    /// answer yet.
    fn announce(&mut self, key: TicketKey) {
        if let Some(arrival) = self.queue.announce(key) {
            let ticket = key.1;
            self.send(key.0, SupervisorMessage::Queued { ticket, arrival });
        }
    }

    /// The request of `key` is over: its lease ends, or it leaves the queue.
    fn finish(&mut self, key: TicketKey, now: Now) {
        if self.leases.end(key, now.at) {
            // A generation ended: its scores are stale.
            self.queue.generation_ended();
        } else {
            // Withdrawn while waiting. A load it was admitted to goes on:
            // other requests may wait for it, and a finished load stays.
            self.queue.take(key);
        }
    }

    fn disconnect(&mut self, conn: ConnId, now: Now) {
        if let Some(entry) = self.conns.remove(&conn) {
            tracing::info!(conn, pid = entry.pid, "proxy disconnected");
        }
        self.leases.drop_conn(conn, now.at);
        self.queue.drop_conn(conn);
        self.broadcast_state(now);
    }

    /// Asks every proxy to end its active leases now (each drops its
    /// stream and finishes). The leases last until finished, so an unload
    /// or switch still waits for them. Returns how many leases exist.
    fn revoke_all_leases(&mut self, reason: RevokeReason) -> usize {
        for (conn, ticket) in self.leases.revoke_all() {
            self.send(conn, SupervisorMessage::Revoked { ticket, reason });
        }
        self.leases.len()
    }

    fn fail(&mut self, key: TicketKey, failure: LeaseFailure) {
        if let Some((_, info)) = self.queue.take(key) {
            self.failed(key, info, failure);
        }
    }

    /// Tells the proxy of a ticket taken out of the queue that it failed.
    fn failed(&mut self, key: TicketKey, info: TicketInfo, failure: LeaseFailure) {
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
    fn fail_all_waiting(&mut self, failure: LeaseFailure) {
        for key in self.queue.keys_where(|_| true) {
            self.fail(key, failure.clone());
        }
    }

    fn set_routing(&mut self, routing: bool, now: Now) {
        self.routing = routing;
        if !routing {
            self.fail_all_waiting(LeaseFailure::RoutingOff);
        }
        self.broadcast_state(now);
    }

    fn grant(
        &mut self,
        ticket: Waiting,
        info: TicketInfo,
        switch: bool,
        load_ms: Option<u64>,
        now: Now,
    ) {
        let Some((backend, instance)) = self.slot.serving() else {
            return;
        };
        let upstream_model = self
            .config
            .registry
            .model(&ticket.model)
            .map(|entry| entry.upstream_model.clone())
            .unwrap_or_default();
        let (conn, id) = ticket.key;
        self.leases.grant(
            ticket.key,
            Lease {
                model: ticket.model,
                tier: ticket.tier,
                header_wait: self.rules.mode == Mode::Legacy,
                revoked: false,
            },
        );
        let grant = Grant {
            ticket: id,
            arrival: info.arrival,
            backend,
            instance,
            upstream_model,
            model_switch: switch,
            load_ms,
        };
        self.ledger.granted((conn, id), &grant, now.unix_ms);
        if switch {
            // The benchmark's switch breakdown reads these `strata::switch` lines.
            tracing::debug!(target: "strata::switch", conn, ticket = id, "switch grant sent");
        }
        self.send(conn, SupervisorMessage::Granted(grant));
    }

    // ---- cache lookups ----------------------------------------------------

    fn scores(&mut self, conn: ConnId, lookup: u64, scores: Result<CacheScores, LookupFailure>) {
        let ranks = match scores {
            Ok(scores) => {
                let min_tokens = self.cache_threshold().unwrap_or(scores.min_tokens);
                Some(
                    scores
                        .results
                        .iter()
                        .map(|score| {
                            let rank = scheduler::rank(
                                score.input_tokens,
                                score.cached_tokens,
                                min_tokens,
                            );
                            ((conn, score.ticket), rank)
                        })
                        .collect(),
                )
            }
            Err(failure) => {
                tracing::debug!(?failure, "cache lookup failed; arrival order");
                if failure == LookupFailure::Unsupported {
                    self.queue
                        .lookups_unsupported_by(self.slot.serving_instance());
                }
                None
            }
        };
        self.queue.answer_lookup(lookup, conn, ranks);
    }

    /// The serving model's profile `conversation_cache_min_tokens`: inputs
    /// below it do not qualify for cache order, whatever a lookup reply's
    /// own `min_tokens` says (the spec's threshold is the profile's; the
    /// reply's counts only for a profile without one).
    fn cache_threshold(&self) -> Option<u64> {
        let model = self.slot.serving_model()?;
        let entry = self.config.registry.model(model)?;
        entry.profile_info.as_ref()?.conversation_cache_min_tokens
    }

    fn start_lookup(&mut self, keys: Vec<TicketKey>, now: Now) {
        let Some((backend, _)) = self.slot.serving() else {
            return;
        };
        let budget = self.config.cache_lookup_timeout().unwrap_or(Duration::ZERO);
        let lookup = self.queue.start_lookup(keys, now.at + budget);
        for (conn, tickets) in lookup.by_conn {
            self.send(
                conn,
                SupervisorMessage::ScoreTickets {
                    lookup: lookup.id,
                    backend,
                    tickets,
                    budget_ms: budget.as_millis() as u64,
                },
            );
        }
    }

    // ---- scheduling -------------------------------------------------------

    /// Makes every decision that is due. Called after each command, tick
    /// and wake-up.
    pub fn schedule(&mut self, now: Now) {
        if self.finished {
            return;
        }
        self.queue.expire_lookup(now.at);
        if self.drain_holds(now) {
            self.prefetch.want(None);
            self.parts().publish_counts(&self.counters);
            return;
        }
        if self.restart_pending {
            // Nothing new goes to the unresponsive backend; once the revoked
            // leases have ended it is stopped, and the queue loads it again.
            if !self.leases.is_empty() {
                self.prefetch.want(None);
                self.parts().publish_counts(&self.counters);
                return;
            }
            self.restart_pending = false;
            if self.slot.serving_instance().is_some() {
                self.start_stop(StopReason::Unresponsive, now);
            }
        }
        let mut next = None;
        // A few rounds at most: applying a plan can make another decision
        // due (a queue timeout frees the head in legacy mode).
        for _ in 0..4 {
            // A running op (a control `on`'s own load included) is decided
            // around; only an operator operation that waits holds the rest.
            let hold = if self.operator.is_running() {
                let step = self.operate(|operator, facts, _| operator.step(facts, now.at));
                self.apply_operator(step.actions, now);
                if step.hold {
                    Hold::Everything
                } else {
                    Hold::None
                }
            } else {
                Hold::None
            };
            let view = self.view(now, hold);
            let plan = scheduler::decide(&view);
            // What goes next without starting yet: an operator `on` that
            // waits for the leases to end, else what the plan shows.
            next = self
                .operator
                .waits_to_load()
                .filter(|model| Some(*model) != self.slot.serving_model())
                .or_else(|| scheduler::next_switch(&view, &plan))
                .map(str::to_owned);
            self.wake_at = plan.wake_at;
            if plan.decisions.is_empty() {
                break;
            }
            for decision in plan.decisions {
                self.apply(decision, now);
            }
        }
        // A load started by this round stopped the prefetch already, and
        // the loading model is never `next`.
        if self.slot.op_running() {
            next = None;
        }
        self.prefetch.want(next.as_deref());
        self.parts().publish_counts(&self.counters);
    }

    fn view(&self, now: Now, hold: Hold) -> scheduler::View<'_> {
        scheduler::View {
            now: now.at,
            rules: &self.rules,
            backend: self.slot.view(),
            queue: self.queue.tickets(),
            leases: self.leases.len(),
            header_waits: self.leases.header_waits(),
            quiet_since: self.leases.quiet_since(),
            ready_since: self.slot.ready_since().unwrap_or(now.at),
            load_pinned: self.slot.control_load_running(),
            cooldowns: self.slot.cooldowns(),
            hold,
            cache: self
                .queue
                .cache_view(self.rules.cache_lookup, self.slot.serving_instance()),
        }
    }

    fn apply(&mut self, decision: Decision, now: Now) {
        scheduler::apply(&mut EngineBook { engine: self, now }, decision);
    }

    // ---- the operator -----------------------------------------------------

    /// Runs `step` on the operator with the engine's facts.
    fn operate<R>(
        &mut self,
        step: impl FnOnce(&mut Operator, &operator::Facts, &Registry) -> R,
    ) -> R {
        let leased: Vec<&str> = self
            .leases
            .iter()
            .map(|(_, lease)| lease.model.as_str())
            .collect();
        let facts = operator::Facts {
            routing: self.routing,
            shutting_down: self.drain.is_some(),
            serving: self.slot.serving_model().zip(self.slot.backend_pid()),
            selected: self.slot.selected(),
            last_loaded: self.slot.last_loaded(),
            leased: &leased,
            op_running: self.slot.op_running(),
            control_load: self.slot.control_load_running(),
        };
        step(&mut self.operator, &facts, &self.config.registry)
    }

    fn apply_operator(&mut self, actions: Vec<OperatorAction>, now: Now) {
        for action in actions {
            match action {
                OperatorAction::Progress {
                    op,
                    name,
                    phase,
                    message,
                    elapsed_ms,
                } => self.send_control(
                    op,
                    ControlEvent::Progress {
                        op: name.to_owned(),
                        phase: phase.to_owned(),
                        message,
                        elapsed_ms,
                    },
                ),
                OperatorAction::Done {
                    op,
                    name,
                    ok,
                    message,
                } => {
                    tracing::info!(op = name, ok, "control operation finished");
                    let status = self.parts().status(now);
                    let done = strata_protocol::control::Done {
                        ok,
                        message,
                        status,
                    };
                    self.send_control(op, ControlEvent::Done(done));
                    self.control_clients.remove(&op);
                }
                OperatorAction::SetRouting(routing) => self.set_routing(routing, now),
                OperatorAction::CancelLoad(reason) => self.slot.cancel_load(reason),
                OperatorAction::RevokeAll => {
                    self.revoke_all_leases(RevokeReason::RoutingOff);
                }
                OperatorAction::StartLoad { model } => self.start_load(&model, true, now),
                OperatorAction::StartStop => self.start_stop(StopReason::Off, now),
                OperatorAction::RestartQuietClock => self.leases.restart_quiet_clock(now.at),
            }
        }
    }

    fn send_control(&self, op: ControlOpId, event: ControlEvent) {
        if let Some(client) = self.control_clients.get(&op) {
            let _ = client.send(event);
        }
    }

    // ---- ops --------------------------------------------------------------

    /// Starts loading `model`, stopping the current backend first.
    fn start_load(&mut self, model: &str, started_by_control: bool, now: Now) {
        // A switch stops the serving backend: its probes end here.
        self.watch.stop();
        let spec = backend_slot::launch_spec(&self.config, model);
        self.prefetch.load_starting(model);
        let request = self.slot.start_load(spec, started_by_control, now.at);
        self.ops.run(request);
        tracing::info!(model, "loading model");
        self.broadcast_state(now);
    }

    fn start_stop(&mut self, reason: StopReason, now: Now) {
        self.watch.stop();
        // After a forced shutdown nothing waits out `shutdown_ms`.
        let kill_now = self.drain.as_ref().is_some_and(Drain::is_forced);
        if let Some(request) = self.slot.start_stop(reason, kill_now) {
            self.ops.run(request);
            self.broadcast_state(now);
        }
    }

    /// Starts probing the backend just verified (unless `backend_probe_ms`
    /// is 0).
    fn start_probes(&mut self, model: &str, now: Now) {
        let probe = &self.config.probe;
        let Some((addr, instance)) = self.slot.serving() else {
            return;
        };
        if probe.interval_ms == 0 {
            self.watch.stop();
            return;
        }
        let expected = self
            .config
            .registry
            .model(model)
            .map(|entry| entry.upstream_model.clone())
            .unwrap_or_default();
        let task = self.ops.spawn_probe(
            instance,
            addr,
            expected,
            Duration::from_millis(probe.interval_ms),
            Duration::from_millis(probe.timeout_ms()),
        );
        self.watch.start(instance, now.at, task);
    }

    fn probe_result(&mut self, instance: BackendInstance, outcome: ProbeOutcome, now: Now) {
        if self.slot.serving_instance() != Some(instance) {
            return;
        }
        let action = self.config.probe.action;
        let good = matches!(outcome, ProbeOutcome::Good);
        match self
            .watch
            .observe(instance, outcome, self.config.probe.misses, now.at)
        {
            // The proxies learn the new time of the last good probe (a state per probe
            // interval): without it their `/health` and gauge would age from the last change.
            Verdict::Nothing if good => self.broadcast_state(now),
            Verdict::Nothing => {}
            Verdict::Recovered => {
                tracing::info!(
                    pid = instance.pid,
                    "the backend answers its health probes again"
                );
                self.broadcast_state(now);
            }
            Verdict::Unresponsive(cause) => {
                tracing::warn!(
                    pid = instance.pid,
                    cause,
                    action = action.as_str(),
                    "backend unresponsive"
                );
                if action == UnresponsiveAction::Restart && !self.restart_pending {
                    self.restart_pending = true;
                    let leases = self.revoke_all_leases(RevokeReason::BackendUnresponsive);
                    tracing::info!(
                        leases,
                        "restarting the unresponsive backend once its leases end"
                    );
                }
                self.broadcast_state(now);
            }
        }
    }

    fn op_progress(&mut self, progress: OpProgress, now: Now) {
        if let ProgressEvent::Start(StartProgress::ReadinessChosen(choice)) = &progress.event
            && self.slot.readiness_chosen(*choice)
        {
            tracing::info!(
                mode = choice.mode.as_str(),
                why = choice.why(),
                "readiness mode chosen"
            );
            self.broadcast_state(now);
        }
        let Some(load) = self.slot.progress(&progress, now.at) else {
            return;
        };
        // Once spawned, the backend is loading and readiness polling begins, so
        // `WaitingForReadiness` follows `Starting` at once (not when the ready
        // file shows up, which is the end of that wait).
        let phases: &[LoadPhase] = match &progress.event {
            ProgressEvent::StoppingOld { .. } => &[LoadPhase::StoppingOldBackend],
            ProgressEvent::Start(StartProgress::Spawned { .. }) => {
                &[LoadPhase::Starting, LoadPhase::WaitingForReadiness]
            }
            ProgressEvent::Start(StartProgress::ReadyFileSeen | StartProgress::Listening) => {
                &[LoadPhase::CheckingHealth]
            }
            ProgressEvent::Start(StartProgress::HealthCheckPassed) => &[LoadPhase::Verified],
            ProgressEvent::OldStopped { .. } | ProgressEvent::Start(_) => &[],
        };
        let typical_load_ms = self.slot.typical_load_ms(&load.model);
        if !phases.is_empty() {
            for (conn, ticket) in self.queue.admitted_to(load.seq) {
                for phase in phases {
                    self.send(
                        conn,
                        SupervisorMessage::Progress {
                            ticket,
                            phase: *phase,
                            elapsed_ms: load.elapsed_ms,
                            typical_load_ms,
                        },
                    );
                }
            }
        }
        let actions = self.operate(|operator, facts, _| {
            operator.load_progress(&load.model, &progress.event, typical_load_ms, facts, now.at)
        });
        self.apply_operator(actions, now);
    }

    fn op_finished(&mut self, outcome: OpOutcome, now: Now) {
        let cooldown = backend_slot::Cooldown::from_config(&self.config);
        let (model, result) = match self.slot.finished(outcome, now.at, cooldown) {
            Finished::Verified {
                seq,
                model,
                pid,
                switch,
                load_ms,
            } => {
                tracing::info!(model, pid, load_ms, "backend verified");
                self.start_probes(&model, now);
                self.counters.count_load(&model, "verified");
                self.leases.restart_quiet_clock(now.at);
                // The new backend goes out before the grants that name it:
                // a proxy checks a grant's instance against the last state.
                self.broadcast_state(now);
                for key in self.queue.admitted_to(seq) {
                    if let Some((ticket, info)) = self.queue.take(key) {
                        self.grant(ticket, info, switch, Some(load_ms), now);
                    }
                }
                (model, Ok(()))
            }
            Finished::Cancelled { seq, model, reason } => {
                tracing::info!(model, ?reason, "load cancelled");
                let outcome = match reason {
                    Some(CancelReason::Abandoned) => "abandoned",
                    _ => "cancelled",
                };
                self.counters.count_load(&model, outcome);
                // Requests admitted to a load that its `on` client
                // abandoned go back to waiting; a new load follows.
                self.queue.return_admitted(seq);
                self.broadcast_state(now);
                (model, Err("load cancelled".to_owned()))
            }
            Finished::Failed {
                seq,
                model,
                message,
                switch,
                load_ms,
                cooldown_ms,
            } => {
                tracing::warn!(model, error = %message, cooldown_ms, "backend start failed");
                self.counters.count_load(&model, "failed");
                for key in self.queue.admitted_to(seq) {
                    let failure = LeaseFailure::LoadFailed {
                        message: message.clone(),
                        model_switch: switch,
                        load_ms: Some(load_ms),
                        cooldown_ms,
                        typical_load_ms: self.slot.typical_load_ms(&model),
                    };
                    self.fail(key, failure);
                }
                self.broadcast_state(now);
                (model, Err(message))
            }
            Finished::Stopped {
                pid,
                reason,
                report,
            } => {
                tracing::info!(pid, ?reason, ?report, "backend stopped");
                self.broadcast_state(now);
                let actions = self.operate(|operator, facts, _| {
                    operator.stop_finished(reason, pid, facts, now.at)
                });
                self.apply_operator(actions, now);
                return;
            }
            Finished::Stale => return,
        };
        let actions =
            self.operate(|operator, facts, _| operator.load_finished(&model, result, facts));
        self.apply_operator(actions, now);
    }

    // ---- the drain --------------------------------------------------------

    /// SIGTERM: drain (see [`drain`]). New proxies (the link stops
    /// accepting) and new tickets are refused, and so is an operator `on`.
    fn begin_drain(&mut self, done: oneshot::Sender<()>, now: Now) {
        if self.drain.is_some() {
            return;
        }
        tracing::info!("draining: no new proxies or requests; accepted work finishes");
        let drain_ms = self.config.timers.drain_ms;
        let limit = (drain_ms > 0).then(|| Duration::from_millis(drain_ms));
        self.drain = Some(Drain::new(limit, now.at));
        self.drain_done = Some(done);
        self.broadcast_state(now);
    }

    /// `drain_ms` ran out or a second signal came: interrupt accepted work.
    /// A load observes the cancellation on its next readiness poll. After
    /// this the supervisor starts no backend again, so leases are forgotten
    /// rather than waited for.
    fn force_drain(&mut self, now: Now) {
        let revoked = self.revoke_all_leases(RevokeReason::Shutdown);
        self.leases.forget_all(now.at);
        tracing::warn!(
            revoked,
            queued = self.queue.len(),
            "drain ended: interrupting accepted work"
        );
        self.fail_all_waiting(LeaseFailure::ShuttingDown);
        let actions = self.operator.abort("the daemon is shutting down");
        self.apply_operator(actions, now);
        self.slot.cancel_load(CancelReason::Shutdown);
        self.slot.hurry_stop();
    }

    /// The drain's end game; true when normal scheduling must not run.
    fn drain_holds(&mut self, now: Now) -> bool {
        loop {
            let facts = drain::Facts {
                busy: !self.queue.is_empty()
                    || !self.leases.is_empty()
                    || self.operator.is_running(),
                op_running: self.slot.op_running(),
                backend_running: self.slot.serving().is_some(),
                open_records: self.ledger.len(),
            };
            let Some(drain) = &mut self.drain else {
                return false;
            };
            match drain.step(&facts, now.at) {
                DrainAction::Force => self.force_drain(now),
                DrainAction::Serve => return false,
                // The tick watches the op; a plan's wake-up would only call
                // back into the held drain.
                DrainAction::Wait => {
                    self.wake_at = None;
                    return true;
                }
                DrainAction::StopBackend => {
                    self.wake_at = None;
                    self.start_stop(StopReason::Shutdown, now);
                    return true;
                }
                DrainAction::WaitRecords { until } => {
                    self.wake_at = Some(until);
                    return true;
                }
                DrainAction::Finished { missing_records } => {
                    if missing_records > 0 {
                        tracing::warn!(
                            open = missing_records,
                            "stopping without the records of some requests"
                        );
                    }
                    self.finished = true;
                    if let Some(done) = self.drain_done.take() {
                        let _ = done.send(());
                    }
                    return true;
                }
            }
        }
    }

    // ---- reports ----------------------------------------------------------

    fn parts(&self) -> Parts<'_> {
        Parts {
            config: &self.config,
            instance_id: &self.instance_id,
            daemon_pid: self.daemon_pid,
            mode: self.rules.mode,
            routing: self.routing,
            draining: self.drain.is_some() || self.conns.values().any(|conn| conn.draining),
            shutting_down: self.drain.is_some(),
            proxies: self.conns.len(),
            operator: self.operator.name(),
            queue: &self.queue,
            leases: &self.leases,
            slot: &self.slot,
            ledger: &self.ledger,
            watch: &self.watch,
        }
    }

    fn send(&self, conn: ConnId, message: SupervisorMessage) {
        if let Some(entry) = self.conns.get(&conn) {
            let _ = entry.events.send(message);
        }
    }

    fn broadcast_state(&self, now: Now) {
        let state = self.parts().router_state(now);
        for conn in self.conns.values() {
            let _ = conn.events.send(SupervisorMessage::State(state.clone()));
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
