//! The engine's state and its single-threaded event loop.
//!
//! Scheduling rules (wait-first, applied to every lease request):
//! - requests for the loaded, healthy model are granted at once, unless a
//!   request of a strictly higher service tier waits for another model;
//! - a request for another model waits until every lease (of every proxy)
//!   has ended, then, unless the current model is still inside its
//!   `model_grace_ms` quiet period (priority skips it), the earliest waiting
//!   request of the highest tier picks the next model, and every waiting
//!   request for that model not held back by a higher tier joins the load;
//! - a load that fails fails the requests admitted to it and starts the
//!   cooldown, during which any request needing a launch fails at once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_protocol::config::{Config, ModelStatus};
use strata_protocol::wire::{
    BackendInstance, LeaseFailure, LeaseGrant, LeaseId, LeasePhase, ModelStatusEntry, RevokeReason,
    RouterState, ServiceTier, SupervisorMessage,
};
use tokio::sync::{mpsc, watch};

use super::control_ops::ControlOp;
use super::ops::{self, OpOutcome, OpProgress, ProgressEvent};
use super::{Command, ConnId, StatusSnapshot};
use crate::backend::{Backend, LaunchSpec, StartError, StartProgress};

/// How often the engine checks idle unload, grace expiry, child death and
/// drain deadlines.
const TICK: Duration = Duration::from_millis(50);

pub(super) type LeaseKey = (ConnId, LeaseId);

pub(super) struct Conn {
    pub(super) pid: u32,
    pub(super) events: mpsc::UnboundedSender<SupervisorMessage>,
    pub(super) draining: bool,
}

/// One granted lease.
pub(super) struct Held {
    pub(super) model: String,
    /// `LeaseRevoked` was sent; the lease lasts until the proxy releases it.
    pub(super) revoked: bool,
}

pub(super) struct Waiter {
    pub(super) key: LeaseKey,
    pub(super) model: String,
    pub(super) tier: ServiceTier,
    /// Supervisor-wide arrival order of lease requests.
    pub(super) arrival: u64,
    pub(super) received: Instant,
    /// The load this request was admitted to, if any.
    pub(super) admitted_to: Option<u64>,
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
    /// After this, active leases are revoked. None: wait for them.
    pub(super) deadline: Option<Instant>,
}

pub struct Engine {
    pub(super) config: Arc<Config>,
    pub(super) instance_id: String,
    pub(super) daemon_pid: u32,
    /// The engine's own command channel, handed to op tasks.
    pub(super) tx: mpsc::UnboundedSender<Command>,
    pub(super) routing: bool,
    pub(super) shutdown: Option<ShutdownState>,
    pub(super) finished: bool,
    /// The verified backend, when one is running and no op owns it.
    pub(super) backend: Option<Backend>,
    /// Verified starts so far; the serving backend's [`BackendInstance`]
    /// epoch.
    pub(super) backend_epoch: u64,
    /// The model the backend runs or last ran. Kept when the child dies
    /// (a same-ID reload is not a switch), cleared by an unload.
    pub(super) selected: Option<String>,
    pub(super) last_loaded: Option<String>,
    pub(super) verified: BTreeSet<String>,
    pub(super) last_startup_error: Option<String>,
    pub(super) cooldown_until: Option<Instant>,
    pub(super) conns: HashMap<ConnId, Conn>,
    /// Granted leases. A lease ends only when its proxy releases it or its
    /// connection closes (a revoked one too), so the backend it names stays
    /// untouched while it exists.
    pub(super) active: HashMap<LeaseKey, Held>,
    /// Lease requests not yet granted, in arrival order.
    pub(super) waiting: Vec<Waiter>,
    pub(super) next_arrival: u64,
    pub(super) op: Option<RunningOp>,
    pub(super) op_seq: u64,
    pub(super) control: Option<ControlOp>,
    /// When the last lease ended (or a load or `on` finished): the start of
    /// the idle and grace clocks.
    pub(super) quiet_since: Instant,
}

impl Engine {
    pub fn new(
        config: Arc<Config>,
        instance_id: String,
        tx: mpsc::UnboundedSender<Command>,
    ) -> Engine {
        Engine {
            config,
            instance_id,
            daemon_pid: std::process::id(),
            tx,
            routing: true,
            shutdown: None,
            finished: false,
            backend: None,
            backend_epoch: 0,
            selected: None,
            last_loaded: None,
            verified: BTreeSet::new(),
            last_startup_error: None,
            cooldown_until: None,
            conns: HashMap::new(),
            active: HashMap::new(),
            waiting: Vec::new(),
            next_arrival: 0,
            op: None,
            op_seq: 0,
            control: None,
            quiet_since: Instant::now(),
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !self.finished {
            tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => self.handle(command),
                    None => break,
                },
                _ = tick.tick() => self.on_tick(),
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
            Command::Disconnect { conn } => self.disconnect(conn),
            Command::Acquire {
                conn,
                lease,
                model,
                tier,
            } => self.acquire(conn, lease, model, tier),
            Command::Release { conn, lease } => self.release((conn, lease)),
            Command::SetDraining { conn, draining } => {
                if let Some(entry) = self.conns.get_mut(&conn) {
                    entry.draining = draining;
                }
                self.broadcast_state();
            }
            Command::Status { reply } => {
                let _ = reply.send(self.status());
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

    // ---- leases -----------------------------------------------------------

    fn acquire(&mut self, conn: ConnId, lease: LeaseId, model: String, tier: ServiceTier) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        let failure = if self.shutdown.is_some() {
            Some(LeaseFailure::ShuttingDown)
        } else if !self.routing {
            Some(LeaseFailure::RoutingOff)
        } else {
            match self.config.registry.model(&model) {
                // Models outside enabled_models reject direct requests; the
                // proxy already filters them, this keeps that true for any
                // client of the socket.
                _ if !self.config.registry.is_enabled(&model) => Some(LeaseFailure::UnknownModel),
                None => Some(LeaseFailure::UnknownModel),
                Some(entry) if !entry.prepared.is_prepared() => Some(LeaseFailure::NotPrepared {
                    status: entry.prepared,
                }),
                Some(_) => None,
            }
        };
        if let Some(failure) = failure {
            self.send(conn, SupervisorMessage::LeaseFailed { lease, failure });
            return;
        }
        let needs_launch = !self.is_serving(&model) && !self.is_loading(&model);
        if needs_launch && let Some(failure) = self.cooldown_failure() {
            self.send(conn, SupervisorMessage::LeaseFailed { lease, failure });
            return;
        }
        self.next_arrival += 1;
        self.waiting.push(Waiter {
            key: (conn, lease),
            model,
            tier,
            arrival: self.next_arrival,
            received: Instant::now(),
            admitted_to: None,
        });
        self.schedule();
        if let Some(waiter) = self.waiting.iter().find(|w| w.key == (conn, lease))
            && waiter.admitted_to.is_none()
        {
            self.send(
                conn,
                SupervisorMessage::LeaseProgress {
                    lease,
                    phase: LeasePhase::QueuedBehindOtherModel,
                    elapsed_ms: 0,
                },
            );
        }
    }

    fn release(&mut self, key: LeaseKey) {
        if self.active.remove(&key).is_some() {
            if self.active.is_empty() {
                self.quiet_since = Instant::now();
            }
        } else {
            // Withdrawn while waiting. A load it was admitted to goes on:
            // other requests may wait for it, and a finished load stays.
            self.waiting.retain(|w| w.key != key);
        }
    }

    fn disconnect(&mut self, conn: ConnId) {
        if let Some(entry) = self.conns.remove(&conn) {
            tracing::info!(conn, pid = entry.pid, "proxy disconnected");
        }
        let before = self.active.len();
        self.active.retain(|(owner, _), _| *owner != conn);
        if before > 0 && self.active.is_empty() {
            self.quiet_since = Instant::now();
        }
        self.waiting.retain(|w| w.key.0 != conn);
        self.broadcast_state();
    }

    /// Asks every proxy to end its active leases now (each drops its
    /// stream and releases). The leases last until released, so an unload or
    /// switch still waits for them; only a forced shutdown, after which this
    /// supervisor starts no backend again, forgets them at once (`forget`).
    pub(super) fn revoke_all_leases(&mut self, reason: RevokeReason, forget: bool) -> usize {
        let mut revoked = Vec::new();
        for (key, held) in &mut self.active {
            if !held.revoked {
                held.revoked = true;
                revoked.push(*key);
            }
        }
        for (conn, lease) in &revoked {
            self.send(
                *conn,
                SupervisorMessage::LeaseRevoked {
                    lease: *lease,
                    reason,
                },
            );
        }
        let count = self.active.len();
        if forget && count > 0 {
            self.active.clear();
            self.quiet_since = Instant::now();
        }
        count
    }

    /// Removes and returns the waiting requests that match `which`.
    fn take_waiting(&mut self, which: impl Fn(&Waiter) -> bool) -> Vec<Waiter> {
        let (taken, kept) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|waiter| which(waiter));
        self.waiting = kept;
        taken
    }

    /// Fails the waiting requests that match `which`.
    fn fail_waiting(&mut self, which: impl Fn(&Waiter) -> bool, failure: LeaseFailure) {
        for waiter in self.take_waiting(which) {
            let (conn, lease) = waiter.key;
            self.send(
                conn,
                SupervisorMessage::LeaseFailed {
                    lease,
                    failure: failure.clone(),
                },
            );
        }
    }

    /// Fails every waiting request, including those admitted to a load.
    pub(super) fn fail_all_waiting(&mut self, failure: LeaseFailure) {
        self.fail_waiting(|_| true, failure);
    }

    pub(super) fn set_routing(&mut self, routing: bool) {
        self.routing = routing;
        if !routing {
            self.fail_all_waiting(LeaseFailure::RoutingOff);
        }
        self.broadcast_state();
    }

    fn cooldown_failure(&self) -> Option<LeaseFailure> {
        let until = self.cooldown_until?;
        let remaining = until.checked_duration_since(Instant::now())?;
        Some(LeaseFailure::Cooldown {
            message: self
                .last_startup_error
                .clone()
                .unwrap_or_else(|| "a recent backend start failed".into()),
            remaining_ms: remaining.as_millis() as u64,
        })
    }

    fn is_serving(&self, model: &str) -> bool {
        self.backend.is_some() && self.selected.as_deref() == Some(model)
    }

    fn is_loading(&self, model: &str) -> bool {
        matches!(&self.op, Some(RunningOp::Load { model: m, cancelled: None, .. }) if m == model)
    }

    // ---- scheduling -------------------------------------------------------

    /// Makes every decision that is due. Called after each command and tick.
    pub(super) fn schedule(&mut self) {
        if self.finished {
            return;
        }
        // Joining a running load needs no decision beyond the tier rule.
        if let Some(RunningOp::Load {
            seq,
            model,
            cancelled: None,
            ..
        }) = &self.op
        {
            let (seq, model) = (*seq, model.clone());
            self.admit_group(&model, seq);
        }
        if self.op.is_some() {
            return;
        }
        if self.shutdown.is_some() {
            self.schedule_shutdown();
            return;
        }
        if self.schedule_control() {
            return;
        }
        self.grant_to_loaded_model();
        if self.schedule_switch() {
            return;
        }
        self.schedule_idle_unload();
    }

    /// The best tier among waiting requests for models other than `model`.
    fn best_other_tier(&self, model: &str) -> Option<ServiceTier> {
        self.waiting
            .iter()
            .filter(|w| w.model != model && w.admitted_to.is_none())
            .map(|w| w.tier)
            .min()
    }

    /// Grants waiting requests for the serving model, except those held
    /// back by a strictly higher tier waiting for another model.
    fn grant_to_loaded_model(&mut self) {
        let Some(model) = self.selected.clone() else {
            return;
        };
        if self.backend.is_none() {
            return;
        }
        let limit = self.best_other_tier(&model);
        let grant =
            self.take_waiting(|w| w.model == model && limit.is_none_or(|best| w.tier <= best));
        for waiter in grant {
            self.grant(waiter, false, None);
        }
    }

    /// Starts a load for the next model group when the engine is free.
    fn schedule_switch(&mut self) -> bool {
        let Some(best) = self
            .waiting
            .iter()
            .filter(|w| w.admitted_to.is_none())
            .min_by_key(|w| (w.tier, w.arrival))
        else {
            return false;
        };
        let (model, tier) = (best.model.clone(), best.tier);
        if !self.active.is_empty() {
            return true;
        }
        let grace = Duration::from_millis(self.config.timers.model_grace_ms);
        if self.backend.is_some()
            && tier != ServiceTier::Priority
            && self.quiet_since.elapsed() < grace
        {
            return true;
        }
        if let Some(failure) = self.cooldown_failure() {
            // Nothing may launch now; everyone who needs a launch fails.
            let serving = self.backend.as_ref().and(self.selected.clone());
            self.fail_waiting(|w| Some(&w.model) != serving.as_ref(), failure);
            return true;
        }
        let seq = self.start_load(&model, false);
        self.admit_group(&model, seq);
        true
    }

    /// Admits waiting requests for `model` to load `seq`, except those held
    /// back by a higher tier waiting for another model.
    fn admit_group(&mut self, model: &str, seq: u64) {
        let limit = self.best_other_tier(model);
        let mut admitted = Vec::new();
        for waiter in &mut self.waiting {
            if waiter.model == model
                && waiter.admitted_to.is_none()
                && limit.is_none_or(|best| waiter.tier <= best)
            {
                waiter.admitted_to = Some(seq);
                admitted.push((waiter.key, waiter.received));
            }
        }
        for ((conn, lease), received) in admitted {
            self.send(
                conn,
                SupervisorMessage::LeaseProgress {
                    lease,
                    phase: LeasePhase::Admitted,
                    elapsed_ms: received.elapsed().as_millis() as u64,
                },
            );
        }
    }

    fn schedule_idle_unload(&mut self) {
        if self.backend.is_none()
            || !self.active.is_empty()
            || !self.waiting.is_empty()
            || self.control.is_some()
        {
            return;
        }
        let grace = self.config.timers.model_grace_ms;
        let idle = Duration::from_millis(self.config.timers.idle_ms.max(grace));
        if self.quiet_since.elapsed() >= idle {
            tracing::info!(model = ?self.selected, "idle: unloading");
            self.start_stop(StopReason::Idle);
        }
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
            seq, model, pid, ..
        }) = &mut self.op
        else {
            return;
        };
        if *seq != progress.op_seq {
            return;
        }
        let seq = *seq;
        let model = model.clone();
        if let ProgressEvent::Start(StartProgress::Spawned { pid: child }) = &progress.event {
            *pid = Some(*child);
        }
        // Once spawned, the backend is loading and readiness polling begins, so
        // `WaitingForReadiness` follows `Starting` at once (not when the ready
        // file shows up, which is the end of that wait).
        let phases: &[LeasePhase] = match &progress.event {
            ProgressEvent::StoppingOld { .. } => &[LeasePhase::StoppingOldBackend],
            ProgressEvent::Start(StartProgress::Spawned { .. }) => {
                &[LeasePhase::Starting, LeasePhase::WaitingForReadiness]
            }
            ProgressEvent::Start(StartProgress::HealthCheckPassed) => &[LeasePhase::Verified],
            ProgressEvent::OldStopped { .. } | ProgressEvent::Start(_) => &[],
        };
        if !phases.is_empty() {
            let targets: Vec<(LeaseKey, Instant)> = self
                .waiting
                .iter()
                .filter(|w| w.admitted_to == Some(seq))
                .map(|w| (w.key, w.received))
                .collect();
            for ((conn, lease), received) in targets {
                for phase in phases {
                    self.send(
                        conn,
                        SupervisorMessage::LeaseProgress {
                            lease,
                            phase: *phase,
                            elapsed_ms: received.elapsed().as_millis() as u64,
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

    fn load_finished(
        &mut self,
        seq: u64,
        model: String,
        switch: bool,
        cancelled: Option<CancelReason>,
        result: Result<Backend, StartError>,
        load_ms: u64,
    ) {
        match result {
            Ok(backend) => {
                tracing::info!(model, pid = backend.pid(), load_ms, "backend verified");
                let addr = backend.addr();
                self.backend_epoch += 1;
                let instance = BackendInstance {
                    epoch: self.backend_epoch,
                    pid: backend.pid(),
                };
                self.backend = Some(backend);
                self.selected = Some(model.clone());
                self.last_loaded = Some(model.clone());
                self.verified.insert(model.clone());
                self.cooldown_until = None;
                self.quiet_since = Instant::now();
                let upstream_model = self
                    .config
                    .registry
                    .model(&model)
                    .map(|entry| entry.upstream_model.clone())
                    .unwrap_or_default();
                // The new backend goes out before the grants that name it:
                // a proxy checks a grant's instance against the last state.
                self.broadcast_state();
                for waiter in self.take_waiting(|w| w.admitted_to == Some(seq)) {
                    self.grant_with(
                        waiter,
                        addr,
                        instance,
                        &upstream_model,
                        switch,
                        Some(load_ms),
                    );
                }
                self.control_load_finished(&model, Ok(()));
            }
            Err(err) => {
                self.selected = None;
                if matches!(err, StartError::Cancelled) || cancelled.is_some() {
                    tracing::info!(model, "load cancelled");
                    // Requests admitted to a load that its `on` client
                    // abandoned go back to waiting; a new load follows.
                    for waiter in &mut self.waiting {
                        if waiter.admitted_to == Some(seq) {
                            waiter.admitted_to = None;
                        }
                    }
                    self.broadcast_state();
                    self.control_load_finished(&model, Err("load cancelled".into()));
                    return;
                }
                let message = err.to_string();
                tracing::warn!(model, error = %message, "backend start failed");
                self.last_startup_error = Some(message.clone());
                self.cooldown_until =
                    Some(Instant::now() + Duration::from_millis(self.config.timers.cooldown_ms));
                self.fail_waiting(
                    |w| w.admitted_to == Some(seq),
                    LeaseFailure::LoadFailed {
                        message: message.clone(),
                        model_switch: switch,
                        load_ms: Some(load_ms),
                    },
                );
                self.broadcast_state();
                self.control_load_finished(&model, Err(message));
            }
        }
    }

    fn grant(&mut self, waiter: Waiter, switch: bool, load_ms: Option<u64>) {
        let Some(backend) = &self.backend else {
            return;
        };
        let addr = backend.addr();
        let instance = self.backend_instance(backend);
        let upstream_model = self
            .config
            .registry
            .model(&waiter.model)
            .map(|entry| entry.upstream_model.clone())
            .unwrap_or_default();
        self.grant_with(waiter, addr, instance, &upstream_model, switch, load_ms);
    }

    fn backend_instance(&self, backend: &Backend) -> BackendInstance {
        BackendInstance {
            epoch: self.backend_epoch,
            pid: backend.pid(),
        }
    }

    fn grant_with(
        &mut self,
        waiter: Waiter,
        backend: std::net::SocketAddr,
        instance: BackendInstance,
        upstream_model: &str,
        model_switch: bool,
        load_ms: Option<u64>,
    ) {
        let (conn, lease) = waiter.key;
        self.active.insert(
            waiter.key,
            Held {
                model: waiter.model,
                revoked: false,
            },
        );
        self.send(
            conn,
            SupervisorMessage::LeaseGranted(LeaseGrant {
                lease,
                backend,
                instance,
                upstream_model: upstream_model.to_owned(),
                model_switch,
                load_ms,
            }),
        );
    }

    // ---- shutdown ---------------------------------------------------------

    fn begin_shutdown(&mut self, done: tokio::sync::oneshot::Sender<()>) {
        if self.shutdown.is_some() {
            return;
        }
        tracing::info!("shutting down: no new leases");
        let drain_ms = self.config.timers.drain_ms;
        self.shutdown = Some(ShutdownState {
            done: Some(done),
            deadline: (drain_ms > 0).then(|| Instant::now() + Duration::from_millis(drain_ms)),
        });
        self.fail_all_waiting(LeaseFailure::ShuttingDown);
        self.abort_control("the daemon is shutting down");
        self.cancel_load(CancelReason::Shutdown);
        self.broadcast_state();
    }

    fn schedule_shutdown(&mut self) {
        let deadline_passed = self
            .shutdown
            .as_ref()
            .and_then(|s| s.deadline)
            .is_some_and(|deadline| Instant::now() >= deadline);
        if !self.active.is_empty() {
            if !deadline_passed {
                return;
            }
            let revoked = self.revoke_all_leases(RevokeReason::Shutdown, true);
            tracing::warn!(revoked, "drain deadline passed: interrupting active leases");
        }
        if self.backend.is_some() {
            self.start_stop(StopReason::Shutdown);
            return;
        }
        self.finished = true;
        if let Some(done) = self.shutdown.as_mut().and_then(|s| s.done.take()) {
            let _ = done.send(());
        }
    }

    // ---- state reports ----------------------------------------------------

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
        let backend = self
            .backend
            .as_ref()
            .filter(|_| self.op.is_none())
            .map(|backend| self.backend_instance(backend));
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
                }
            })
            .collect();
        RouterState {
            routing: self.routing,
            draining: self.is_draining(),
            loaded,
            loading,
            backend,
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

    pub(super) fn status(&self) -> StatusSnapshot {
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
        StatusSnapshot {
            daemon_pid: self.daemon_pid,
            instance_id: self.instance_id.clone(),
            busy: operation.is_some(),
            operation,
            routing: self.routing,
            draining: self.is_draining(),
            child_pid,
            loaded: self.router_state().loaded,
            loading: self.loading_model(),
            last_startup_error: self.last_startup_error.clone(),
            proxies: self.conns.len(),
            active_leases: self.active.len(),
            waiting_requests: self.waiting.len(),
            cooldown_remaining_ms: self
                .cooldown_until
                .and_then(|until| until.checked_duration_since(Instant::now()))
                .map(|left| left.as_millis() as u64),
        }
    }
}
