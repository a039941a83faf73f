//! The engine's event loop: it owns the engine's parts and applies what
//! their pure steps decide.
//!
//! The loop takes one [`Command`] at a time with the clock read once for
//! it ([`Now`]), updates the part the command is about (the [`Queue`], the
//! [`Leases`], the [`BackendSlot`], the [`Operator`], the [`Drain`], the
//! [`Watchdog`], the ledger), then asks the holds (the drain, the
//! watchdog's restart) and, unless one holds, [`scheduler::decide`] what
//! is due, and applies the plan: grants, admissions to a load, loads,
//! failures, idle unloads, cache lookups. Timers are the plan's `wake_at` plus a 50 ms maintenance tick
//! (child death, drain deadline, lookup budgets). Everything that crosses
//! to another task (messages to proxies and control clients, ops) goes out
//! from here.

use std::sync::Arc;
use std::time::Duration;

use strata_protocol::config::{Config, Registry};
use strata_protocol::wire::{
    Grant, LeaseFailure, RevokeReason, ServiceTier, SupervisorMessage, TicketId, TicketRequest,
};
use strata_scheduler::prediction::{Facts, Prediction};
use strata_scheduler::{
    self as scheduler, ConnId, Decision, Hold, Mode, Refusal, Rules, SwitchReason, TicketKey,
    Waiting,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::backend_ops::{OpOutcome, OpProgress, OpRunner, ProgressEvent};
use super::backend_slot::{self, BackendSlot, CancelReason, Finished, StopReason};
use super::clients::{ControlClients, Proxies};
use super::command::Command;
use super::drain::{self, Drain, DrainAction};
use super::leases::{Lease, Leases};
use super::ledger::Ledger;
use super::now::{Now, sleep_until};
use super::operator::{self, Operator, OperatorAction};
use super::prediction;
use super::queue::{Queue, TicketInfo};
use super::report::ReportView;
use super::watchdog::{self, Watchdog, WatchdogAction};
use crate::backend::StartProgress;
use crate::counters::Counters;
use crate::prefetch::Prefetch;
use book::EngineBook;

mod book;

/// How often the engine checks child death, drain deadlines and lookup
/// budgets (and re-decides).
const TICK: Duration = Duration::from_millis(50);

pub struct Engine {
    config: Arc<Config>,
    instance_id: String,
    daemon_pid: u32,
    rules: Rules,
    counters: Arc<Counters>,
    ops: OpRunner,
    routing: bool,
    proxies: Proxies,
    queue: Queue,
    leases: Leases,
    slot: BackendSlot,
    /// Every ticket from `Enqueue` to `Finish`, granted and failed ones
    /// too: what a substitute record needs if its proxy disappears.
    ledger: Ledger,
    operator: Operator,
    control_clients: ControlClients,
    drain: Option<Drain>,
    finished: bool,
    /// When the last plan wants to look again.
    wake_at: Option<Instant>,
    /// Reads the next model's weights while it waits.
    prefetch: Prefetch,
    /// `prefetch_predict`: the model to read ahead while nothing is next.
    prediction: Option<Prediction>,
    /// The probes of the serving backend and the restart they may ask for.
    watchdog: Watchdog,
}

impl Engine {
    pub fn new(
        config: Arc<Config>,
        instance_id: String,
        counters: Arc<Counters>,
        ops: OpRunner,
        prefetch: Prefetch,
        now: Instant,
    ) -> Engine {
        let rules = Rules::from_config(&config);
        let prediction = prediction::from_config(&config);
        Engine {
            operator: Operator::new(Duration::from_millis(config.timers.startup_ms)),
            watchdog: Watchdog::new(config.probe.misses, config.probe.action),
            config,
            instance_id,
            daemon_pid: std::process::id(),
            rules,
            counters,
            ops,
            routing: true,
            proxies: Proxies::default(),
            queue: Queue::default(),
            leases: Leases::new(now),
            slot: BackendSlot::default(),
            ledger: Ledger::default(),
            control_clients: ControlClients::default(),
            drain: None,
            finished: false,
            wake_at: None,
            prefetch,
            prediction,
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

    /// The model the engine wants prefetched on `prefetch_predict`'s
    /// forecast alone.
    #[cfg(test)]
    pub fn prefetching_predicted(&self) -> Option<&str> {
        self.prefetch.predicted()
    }

    pub fn handle(&mut self, command: Command, now: Now) {
        match command {
            Command::Connect { conn, pid, events } => {
                let state = SupervisorMessage::State(self.report().router_state(now));
                self.proxies.connect(conn, pid, events, state);
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
            } => {
                let min_tokens = self.slot.cache_threshold(&self.config.registry);
                let serving = self.slot.serving_instance();
                self.queue
                    .answer_scores(lookup, conn, scores, min_tokens, serving);
            }
            Command::SetDraining { conn, draining } => {
                self.proxies.set_draining(conn, draining);
                self.broadcast_state(now);
            }
            Command::ProbeResult { instance, outcome } => {
                let facts = self.watchdog_facts();
                let actions = self.watchdog.observe(instance, outcome, &facts, now.at);
                self.apply_watchdog(actions, now);
            }
            Command::Status { reply } => {
                let _ = reply.send(self.report().status(now));
            }
            Command::Models { reply } => {
                let _ = reply.send(self.report().models(now));
            }
            Command::InFlight { limit, reply } => {
                let _ = reply.send(self.report().in_flight_requests(limit, now.unix_ms));
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
            tracing::warn!(pid, exit = %exit, "backend exited unexpectedly");
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
        if !self.proxies.is_connected(conn) {
            return;
        }
        let arrival = self.counters.arrive();
        if let Some(prediction) = &mut self.prediction {
            // Refused ones too: they are demand for their model all the same.
            prediction.arrive(&model, now.at);
        }
        let key = (conn, ticket);
        let upstream = backend_slot::upstream_model(&self.config.registry, &model);
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
        if let Some(failure) = backend_slot::unlaunchable(&self.config.registry, model) {
            return Some(failure);
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
            self.proxies
                .send(key.0, SupervisorMessage::Queued { ticket, arrival });
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
        self.proxies.disconnect(conn);
        self.leases.drop_conn(conn, now.at);
        self.queue.drop_conn(conn);
        self.broadcast_state(now);
    }

    /// Asks every proxy to end its active leases now (each drops its
    /// stream and finishes). The leases last until finished, so an unload
    /// or switch still waits for them. Returns how many leases exist.
    fn revoke_all_leases(&mut self, reason: RevokeReason) -> usize {
        for (conn, ticket) in self.leases.revoke_all() {
            self.proxies
                .send(conn, SupervisorMessage::Revoked { ticket, reason });
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
        self.ledger.failed(key, &failure);
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
        let upstream_model =
            backend_slot::upstream_model(&self.config.registry, &ticket.model).unwrap_or_default();
        let (conn, id) = ticket.key;
        let legacy = self.rules.mode == Mode::Legacy;
        let lease = Lease::new(ticket.model, ticket.tier, legacy);
        self.leases.grant(ticket.key, lease);
        let grant = Grant {
            ticket: id,
            arrival: info.arrival,
            backend,
            instance,
            upstream_model: upstream_model.to_owned(),
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

    fn start_lookup(&mut self, keys: Vec<TicketKey>, now: Now) {
        let Some((backend, _)) = self.slot.serving() else {
            return;
        };
        let budget = self.config.cache_lookup_timeout().unwrap_or(Duration::ZERO);
        let lookup = self.queue.start_lookup(keys, now.at + budget);
        for (conn, message) in lookup.messages(backend, budget.as_millis() as u64) {
            self.send(conn, message);
        }
    }

    // ---- scheduling -------------------------------------------------------

    /// Makes every decision that is due. Called after each command, tick
    /// and wake-up: asks the holds (the drain, the watchdog's restart), then
    /// decides unless one holds the round, then says what goes next (or,
    /// under `prefetch_predict`, what is likely requested next).
    pub fn schedule(&mut self, now: Now) {
        let held = self.holds(now);
        let next = if held {
            None
        } else {
            self.decide_and_apply(now)
        };
        let facts = || Facts {
            serving: self.slot.serving_model(),
            queue: self.queue.tickets(),
            op_running: self.slot.op_running(),
            operator_running: self.operator.is_running(),
            routing: self.routing,
            held: held || self.drain.is_some(),
            cooldowns: self.slot.cooldowns(),
        };
        let wish = prediction::wish(next.as_deref(), self.prediction.as_mut(), facts, now.at);
        self.prefetch.want(wish);
        self.report().publish_counts(&self.counters);
    }

    /// True when nothing is to be decided this round: the engine finished,
    /// the drain's end game runs, or a restart waits for its leases.
    fn holds(&mut self, now: Now) -> bool {
        if self.finished {
            return true;
        }
        self.queue.expire_lookup(now.at);
        if self.drain_holds(now) {
            return true;
        }
        let facts = self.watchdog_facts();
        let actions = self.watchdog.step(&facts);
        self.apply_watchdog(actions, now)
    }

    /// Decides and applies the plans; returns the model that goes next
    /// without starting yet (for the prefetch).
    fn decide_and_apply(&mut self, now: Now) -> Option<String> {
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
        next.filter(|_| !self.slot.op_running())
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
            load_times: self.slot.typical_loads(),
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
        let leased = self.leases.models();
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
                } => self
                    .control_clients
                    .progress(op, name, phase, message, elapsed_ms),
                OperatorAction::Done {
                    op,
                    name,
                    ok,
                    message,
                } => {
                    tracing::info!(op = name, ok, "control operation finished");
                    let status = self.report().status(now);
                    self.control_clients.done(op, ok, message, status);
                }
                OperatorAction::SetRouting(routing) => self.set_routing(routing, now),
                OperatorAction::CancelLoad(reason) => {
                    self.count_switch(SwitchReason::Operator);
                    self.slot.cancel_load(reason);
                }
                OperatorAction::RevokeAll => {
                    self.revoke_all_leases(RevokeReason::RoutingOff);
                }
                OperatorAction::StartLoad { model } => {
                    // A switch when another model serves or loads; else a load.
                    let reason = (self.slot.serving_model().is_some()
                        || self.slot.loading_model().is_some())
                    .then_some(SwitchReason::Operator);
                    self.start_load(&model, true, reason, now);
                }
                OperatorAction::StartStop => {
                    if self.slot.serving_model().is_some() {
                        self.count_switch(SwitchReason::Operator);
                    }
                    self.start_stop(StopReason::Off, now);
                }
                OperatorAction::RestartQuietClock => self.leases.restart_quiet_clock(now.at),
            }
        }
    }

    // ---- ops --------------------------------------------------------------

    /// Starts loading `model`, stopping the current backend first;
    /// `reason` says why the model that ran gives way (`None`: nothing
    /// ran).
    fn start_load(
        &mut self,
        model: &str,
        started_by_control: bool,
        reason: Option<SwitchReason>,
        now: Now,
    ) {
        // A switch stops the serving backend: its probes end here.
        self.stop_probes();
        let from = self
            .slot
            .serving_model()
            .or(self.slot.loading_model())
            .map(str::to_owned);
        if let Some(reason) = reason {
            self.count_switch(reason);
        }
        let spec = backend_slot::launch_spec(&self.config, model);
        self.prefetch.load_starting(model);
        let request = self.slot.start_load(spec, started_by_control, now.at);
        self.ops.run(request);
        tracing::info!(
            model,
            from,
            reason = reason.map(SwitchReason::as_str),
            "loading model"
        );
        self.broadcast_state(now);
    }

    /// Counts one switch or unload for `/metrics`.
    fn count_switch(&self, reason: SwitchReason) {
        self.counters.count_switch(reason.as_str());
    }

    fn start_stop(&mut self, reason: StopReason, now: Now) {
        self.stop_probes();
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
        let Some(serving) = self.slot.serving() else {
            return;
        };
        let target = backend_slot::probe_target(&self.config, model, serving);
        self.watchdog.verified(serving.1, target.is_some(), now.at);
        self.ops.probe(target);
    }

    fn stop_probes(&mut self) {
        self.watchdog.backend_gone();
        self.ops.probe(None);
    }

    fn watchdog_facts(&self) -> watchdog::Facts {
        watchdog::Facts {
            serving: self.slot.serving_instance(),
            leases: self.leases.len(),
        }
    }

    /// Carries out the watchdog's actions; true when they hold the round.
    fn apply_watchdog(&mut self, actions: Vec<WatchdogAction>, now: Now) -> bool {
        let mut hold = false;
        for action in actions {
            match action {
                WatchdogAction::BroadcastState => self.broadcast_state(now),
                WatchdogAction::Recovered { pid } => {
                    tracing::info!(pid, "the backend answers its health probes again");
                }
                WatchdogAction::Unresponsive { pid, cause } => {
                    let action = self.config.probe.action.as_str();
                    tracing::warn!(pid, cause, action, "backend unresponsive");
                }
                WatchdogAction::RevokeAll => {
                    let leases = self.revoke_all_leases(RevokeReason::BackendUnresponsive);
                    tracing::info!(
                        leases,
                        "restarting the unresponsive backend once its leases end"
                    );
                }
                WatchdogAction::Hold => hold = true,
                WatchdogAction::StopBackend => self.start_stop(StopReason::Unresponsive, now),
            }
        }
        hold
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
        let typical_load_ms = load.typical_load_ms;
        for (conn, ticket) in self.queue.admitted_to(load.seq) {
            for phase in load.phases {
                let elapsed_ms = load.elapsed_ms;
                let message = SupervisorMessage::Progress {
                    ticket,
                    phase: *phase,
                    elapsed_ms,
                    typical_load_ms,
                };
                self.send(conn, message);
            }
        }
        let actions = self.operate(|operator, facts, _| {
            operator.load_progress(&load.model, &progress.event, typical_load_ms, facts, now.at)
        });
        self.apply_operator(actions, now);
    }

    fn op_finished(&mut self, outcome: OpOutcome, now: Now) {
        let cooldown = backend_slot::Cooldown::from_config(&self.config);
        let finished = self.slot.finished(outcome, now.at, cooldown);
        finished.log();
        if let Some((model, outcome)) = finished.load_outcome() {
            self.counters.count_load(model, outcome);
        }
        let (model, result) = match finished {
            Finished::Verified {
                seq,
                model,
                switch,
                load_ms,
                ..
            } => {
                self.start_probes(&model, now);
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
            Finished::Cancelled { seq, model, .. } => {
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
                failure,
                ..
            } => {
                for key in self.queue.admitted_to(seq) {
                    self.fail(key, failure.clone());
                }
                self.broadcast_state(now);
                (model, Err(message))
            }
            Finished::Stopped { pid, reason, .. } => {
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
        self.drain = Some(Drain::new(drain_ms, now.at, Some(done)));
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
                    drain.answer();
                    return true;
                }
            }
        }
    }

    // ---- reports ----------------------------------------------------------

    fn report(&self) -> ReportView<'_> {
        ReportView {
            config: &self.config,
            instance_id: &self.instance_id,
            daemon_pid: self.daemon_pid,
            mode: self.rules.mode,
            routing: self.routing,
            draining: self.drain.is_some() || self.proxies.any_draining(),
            shutting_down: self.drain.is_some(),
            proxies: self.proxies.len(),
            operator: self.operator.name(),
            queue: &self.queue,
            leases: &self.leases,
            slot: &self.slot,
            ledger: &self.ledger,
            watch: self.watchdog.watch(),
        }
    }

    fn send(&self, conn: ConnId, message: SupervisorMessage) {
        self.proxies.send(conn, message);
    }

    fn broadcast_state(&self, now: Now) {
        let state = SupervisorMessage::State(self.report().router_state(now));
        self.proxies.broadcast(&state);
    }
}
