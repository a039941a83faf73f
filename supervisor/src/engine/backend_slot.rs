//! The one backend slot: the verified backend (when one runs and no op owns
//! it), the load or stop that runs instead, and what the engine remembers of
//! earlier starts (the selected and last loaded model, verified models,
//! per-model start cooldowns and their causes).
//!
//! The slot is state, not I/O: starting an op hands back the
//! [`OpRequest`] the engine gives its runner, and an op's outcome comes
//! back through [`BackendSlot::finished`], which says what it means.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use strata_scheduler::LoadTimes;

use strata_protocol::config::{Config, ReadinessChoice, Registry};
use strata_protocol::wire::{BackendInstance, LeaseFailure, LoadPhase};
use strata_scheduler::BackendView;
use tokio::sync::watch;
use tokio::time::Instant;

use super::backend_ops::{OpOutcome, OpProgress, OpRequest, ProbeTarget, ProgressEvent};
use crate::backend::{
    Backend, ExitInfo, LaunchSpec, Readiness, StartError, StartProgress, StopReport,
};

/// The load phases an op's progress `event` tells the tickets admitted to
/// it. Once spawned, the backend is loading and readiness polling begins, so
/// `WaitingForReadiness` follows `Starting` at once (not when the ready
/// file shows up, which is the end of that wait).
fn load_phases(event: &ProgressEvent) -> &'static [LoadPhase] {
    match event {
        ProgressEvent::StoppingOld { .. } => &[LoadPhase::StoppingOldBackend],
        ProgressEvent::Start(StartProgress::Spawned { .. }) => {
            &[LoadPhase::Starting, LoadPhase::WaitingForReadiness]
        }
        ProgressEvent::Start(StartProgress::ReadyFileSeen | StartProgress::Listening) => {
            &[LoadPhase::CheckingHealth]
        }
        ProgressEvent::Start(StartProgress::HealthCheckPassed) => &[LoadPhase::Verified],
        ProgressEvent::OldStopped { .. } | ProgressEvent::Start(_) => &[],
    }
}

/// The cause a cooldown shows when its start error is not known.
const GENERIC_START_FAILURE: &str = "a recent backend start failed";

/// Why a running load was asked to stop early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Operator `off` (or legacy routing off); admitted requests were failed.
    RoutingOff,
    /// The `on` client that started the load went away; admitted requests
    /// go back to waiting.
    ControlClientGone,
    Shutdown,
    /// Every ticket of the load has gone while another model waits.
    Abandoned,
}

impl CancelReason {
    /// The reason as the log names it.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::RoutingOff => "routing_off",
            CancelReason::ControlClientGone => "control_client_gone",
            CancelReason::Shutdown => "shutdown",
            CancelReason::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Idle,
    Off,
    Shutdown,
    /// The child died on its own; its group is being cleaned up. The model
    /// stays selected, so reloading it is not a switch.
    ChildDied,
    /// The probes found it unresponsive and the action is `restart`; the
    /// model stays selected, as after a death.
    Unresponsive,
}

impl StopReason {
    /// The reason as the log names it.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Idle => "idle",
            StopReason::Off => "off",
            StopReason::Shutdown => "shutdown",
            StopReason::ChildDied => "child_died",
            StopReason::Unresponsive => "unresponsive",
        }
    }
}

#[derive(Debug)]
enum RunningOp {
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
        /// Raised by a forced shutdown: the group is killed without waiting out
        /// `shutdown_ms`.
        hurry: watch::Sender<bool>,
    },
}

/// How long a model cools down after failed starts: `cooldown_ms` after
/// the first, twice as long after each further one in a row, at most
/// `cooldown_max_ms` (equal by default: the spec's fixed cooldown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    pub base: Duration,
    pub max: Duration,
}

impl Cooldown {
    pub fn from_config(config: &Config) -> Cooldown {
        Cooldown {
            base: Duration::from_millis(config.timers.cooldown_ms),
            max: Duration::from_millis(config.timers.cooldown_max_ms),
        }
    }

    /// The cooldown after `failures` failed starts in a row (1 for the
    /// first).
    pub fn after_failures(self, failures: u32) -> Duration {
        // 2^40 times any base is past every allowed maximum (a day).
        let doublings = failures.saturating_sub(1).min(40);
        let grown = self.base.as_millis().saturating_mul(1u128 << doublings);
        let capped = grown.min(self.max.as_millis()).max(self.base.as_millis());
        Duration::from_millis(capped as u64)
    }
}

/// What a finished op means for the engine.
#[derive(Debug)]
pub enum Finished {
    /// Load `seq` is verified and serves now.
    Verified {
        seq: u64,
        model: String,
        pid: u32,
        switch: bool,
        load_ms: u64,
    },
    /// Load `seq` was cancelled (or stopped by a cancel); nothing serves.
    Cancelled {
        seq: u64,
        model: String,
        /// Why it was asked to stop (`None`: it stopped on its own with
        /// `Cancelled`).
        reason: Option<CancelReason>,
    },
    /// Load `seq` failed; its model cools down for `cooldown_ms`, and the
    /// tickets admitted to it fail with `failure`.
    Failed {
        seq: u64,
        model: String,
        message: String,
        cooldown_ms: u64,
        failure: LeaseFailure,
    },
    Stopped {
        pid: u32,
        reason: StopReason,
        report: StopReport,
    },
    /// A report of an op that is not the running one.
    Stale,
}

impl Finished {
    /// Says the outcome in the log.
    pub fn log(&self) {
        match self {
            Finished::Verified {
                model,
                pid,
                load_ms,
                ..
            } => tracing::info!(model, pid, load_ms, "backend verified"),
            Finished::Cancelled { model, reason, .. } => {
                tracing::info!(
                    model,
                    reason = reason.map(CancelReason::as_str),
                    "load cancelled"
                );
            }
            Finished::Failed {
                model,
                message,
                cooldown_ms,
                ..
            } => tracing::warn!(model, error = %message, cooldown_ms, "backend start failed"),
            Finished::Stopped {
                pid,
                reason,
                report,
            } => tracing::info!(
                pid,
                reason = reason.as_str(),
                exit = report.exit.as_ref().map(tracing::field::display),
                forced_kill = report.forced_kill,
                elapsed_ms = report.elapsed.as_millis() as u64,
                group_gone = report.group_gone,
                "backend stopped"
            ),
            Finished::Stale => {}
        }
    }

    /// A load's model and the outcome `/metrics` counts it under.
    pub fn load_outcome(&self) -> Option<(&str, &'static str)> {
        match self {
            Finished::Verified { model, .. } => Some((model, "verified")),
            Finished::Cancelled {
                model,
                reason: Some(CancelReason::Abandoned),
                ..
            } => Some((model, "abandoned")),
            Finished::Cancelled { model, .. } => Some((model, "cancelled")),
            Finished::Failed { model, .. } => Some((model, "failed")),
            Finished::Stopped { .. } | Finished::Stale => None,
        }
    }
}

/// Progress of the running load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadProgress {
    pub seq: u64,
    pub model: String,
    pub elapsed_ms: u64,
    /// What the tickets admitted to the load are told, in order.
    pub phases: &'static [LoadPhase],
    /// How long the model's loads usually take; `None` before its first.
    pub typical_load_ms: Option<u64>,
}

#[derive(Debug, Default)]
pub struct BackendSlot {
    /// The verified backend, when one is running and no op owns it.
    backend: Option<Backend>,
    /// When it was verified.
    ready_since: Option<Instant>,
    /// Verified starts so far; the serving backend's [`BackendInstance`]
    /// epoch.
    epoch: u64,
    /// The model the backend runs or last ran. Kept when the child dies
    /// (a same-ID reload is not a switch), cleared by an unload.
    selected: Option<String>,
    last_loaded: Option<String>,
    verified: BTreeSet<String>,
    last_startup_error: Option<String>,
    /// Per model: no launch before this (its last start failed). One
    /// broken build does not keep the others from loading.
    cooldowns: BTreeMap<String, Instant>,
    /// Per model: the generic cause of its last failed start, until it
    /// starts.
    start_errors: BTreeMap<String, String>,
    /// Per model: failed starts in a row (since its last verified start or
    /// an operator's `on` of it), which lengthen its cooldown.
    failure_streaks: BTreeMap<String, u32>,
    /// Per model: how long its verified loads took.
    load_times: LoadTimes,
    op: Option<RunningOp>,
    op_seq: u64,
    /// The readiness mode the last start used and why.
    readiness: Option<ReadinessChoice>,
}

impl BackendSlot {
    /// The readiness mode the last start used and why; `None` before the
    /// first start.
    pub fn readiness(&self) -> Option<ReadinessChoice> {
        self.readiness
    }

    /// A start chose its readiness mode; true if that is news.
    pub fn readiness_chosen(&mut self, choice: ReadinessChoice) -> bool {
        let changed = self.readiness != Some(choice);
        self.readiness = Some(choice);
        changed
    }

    // ---- what runs --------------------------------------------------------

    /// How long `model`'s loads usually take; `None` before its first.
    pub fn typical_load_ms(&self, model: &str) -> Option<u64> {
        self.load_times.typical_ms(model)
    }

    /// Every learned model's typical load time (the scheduler's view).
    pub fn typical_loads(&self) -> &std::collections::BTreeMap<String, Duration> {
        self.load_times.typical()
    }

    /// The model a verified backend serves (no op runs then: an op owns the
    /// backend it works on).
    pub fn serving_model(&self) -> Option<&str> {
        self.backend.as_ref().and(self.selected.as_deref())
    }

    /// The serving backend's address and instance.
    pub fn serving(&self) -> Option<(SocketAddr, BackendInstance)> {
        let backend = self.backend.as_ref()?;
        Some((backend.addr(), self.instance_of(backend)))
    }

    pub fn serving_instance(&self) -> Option<BackendInstance> {
        self.serving().map(|(_, instance)| instance)
    }

    fn instance_of(&self, backend: &Backend) -> BackendInstance {
        BackendInstance {
            epoch: self.epoch,
            pid: backend.pid(),
        }
    }

    /// What the scheduler sees.
    pub fn view(&self) -> BackendView<'_> {
        match (&self.op, self.serving_model()) {
            (
                Some(RunningOp::Load {
                    model,
                    cancelled: None,
                    ..
                }),
                _,
            ) => BackendView::Loading { model },
            (Some(_), _) => BackendView::Busy,
            (None, Some(model)) => BackendView::Serving { model },
            (None, None) => BackendView::Empty,
        }
    }

    /// The model a running load starts, cancelled or not.
    pub fn loading_model(&self) -> Option<&str> {
        match &self.op {
            Some(RunningOp::Load { model, .. }) => Some(model),
            _ => None,
        }
    }

    /// The running load, if one runs.
    pub fn loading_seq(&self) -> Option<u64> {
        match &self.op {
            Some(RunningOp::Load { seq, .. }) => Some(*seq),
            _ => None,
        }
    }

    pub fn op_running(&self) -> bool {
        self.op.is_some()
    }

    /// The running op as the status document names it.
    pub fn op_name(&self) -> Option<&'static str> {
        match &self.op {
            Some(RunningOp::Load { .. }) => Some("load"),
            Some(RunningOp::Stop { .. }) => Some("unload"),
            None => None,
        }
    }

    /// A load runs that a control `on` started.
    pub fn control_load_running(&self) -> bool {
        matches!(
            self.op,
            Some(RunningOp::Load {
                started_by_control: true,
                ..
            })
        )
    }

    /// The loading child's pid once spawned, else the serving backend's.
    pub fn child_pid(&self) -> Option<u32> {
        match &self.op {
            Some(RunningOp::Load { pid, .. }) => *pid,
            _ => self.backend.as_ref().map(Backend::pid),
        }
    }

    pub fn backend_pid(&self) -> Option<u32> {
        self.backend.as_ref().map(Backend::pid)
    }

    /// The model the backend runs or last ran (kept over a child's death).
    pub fn selected(&self) -> Option<&str> {
        self.selected.as_deref()
    }

    /// When the serving backend was verified.
    pub fn ready_since(&self) -> Option<Instant> {
        self.ready_since.filter(|_| self.backend.is_some())
    }

    pub fn last_loaded(&self) -> Option<&str> {
        self.last_loaded.as_deref()
    }

    pub fn is_verified(&self, model: &str) -> bool {
        self.verified.contains(model)
    }

    pub fn last_startup_error(&self) -> Option<&str> {
        self.last_startup_error.as_deref()
    }

    pub fn start_error(&self, model: &str) -> Option<&str> {
        self.start_errors.get(model).map(String::as_str)
    }

    // ---- cooldowns --------------------------------------------------------

    pub fn cooldowns(&self) -> &BTreeMap<String, Instant> {
        &self.cooldowns
    }

    /// What is left of `model`'s start cooldown, if one runs.
    pub fn cooldown_remaining(&self, model: &str, now: Instant) -> Option<Duration> {
        let until = self.cooldowns.get(model)?;
        until
            .checked_duration_since(now)
            .filter(|left| !left.is_zero())
    }

    /// The longest running cooldown of any model.
    pub fn longest_cooldown(&self, now: Instant) -> Option<Duration> {
        self.cooldowns
            .keys()
            .filter_map(|model| self.cooldown_remaining(model, now))
            .max()
    }

    /// The failure of a ticket that needs a launch of cooling `model`.
    pub fn cooldown_failure(&self, model: &str, now: Instant) -> LeaseFailure {
        LeaseFailure::Cooldown {
            message: self
                .start_error(model)
                .unwrap_or(GENERIC_START_FAILURE)
                .to_owned(),
            remaining_ms: self
                .cooldown_remaining(model, now)
                .map_or(0, |left| left.as_millis() as u64),
            typical_load_ms: self.typical_load_ms(model),
        }
    }

    // ---- ops --------------------------------------------------------------

    /// Starts loading `spec`'s model, stopping the current backend first.
    pub fn start_load(
        &mut self,
        spec: LaunchSpec,
        started_by_control: bool,
        now: Instant,
    ) -> OpRequest {
        self.op_seq += 1;
        let (cancel, cancel_rx) = watch::channel(false);
        let model = spec.model_id.clone();
        // An operator's `on` starts the model's streak afresh.
        if started_by_control {
            self.failure_streaks.remove(&model);
        }
        self.op = Some(RunningOp::Load {
            seq: self.op_seq,
            switch: self.selected.as_deref() != Some(model.as_str()),
            model,
            cancel,
            cancelled: None,
            started_by_control,
            pid: None,
            started: now,
        });
        OpRequest::Load {
            op_seq: self.op_seq,
            old: self.backend.take(),
            spec: Box::new(spec),
            cancel: cancel_rx,
        }
    }

    /// Stops the verified backend, if one runs: the way Strata expects
    /// (SIGTERM to the server, `shutdown_ms`, SIGKILL), or, with `kill_now`
    /// (a forced shutdown), by killing its group at once.
    pub fn start_stop(&mut self, reason: StopReason, kill_now: bool) -> Option<OpRequest> {
        let backend = self.backend.take()?;
        self.op_seq += 1;
        let (hurry, hurry_rx) = watch::channel(kill_now);
        self.op = Some(RunningOp::Stop {
            seq: self.op_seq,
            reason,
            hurry,
        });
        Some(OpRequest::Stop {
            op_seq: self.op_seq,
            backend,
            hurry: hurry_rx,
        })
    }

    /// A forced shutdown: a stop in progress kills the group now instead of
    /// waiting out `shutdown_ms`.
    pub fn hurry_stop(&mut self) {
        if let Some(RunningOp::Stop { hurry, .. }) = &self.op {
            let _ = hurry.send(true);
        }
    }

    /// Asks the running load to stop at its next readiness poll.
    pub fn cancel_load(&mut self, reason: CancelReason) {
        if let Some(RunningOp::Load {
            cancel, cancelled, ..
        }) = &mut self.op
            && cancelled.is_none()
        {
            *cancelled = Some(reason);
            let _ = cancel.send(true);
        }
    }

    /// The verified backend's process died on its own (it is reaped).
    pub fn child_died(&mut self) -> Option<(u32, ExitInfo)> {
        if self.op.is_some() {
            return None;
        }
        let backend = self.backend.as_mut()?;
        let exit = backend.try_exited()?;
        Some((backend.pid(), exit))
    }

    /// Progress of the running load (stale reports are `None`).
    pub fn progress(&mut self, progress: &OpProgress, now: Instant) -> Option<LoadProgress> {
        let Some(RunningOp::Load {
            seq,
            model,
            pid,
            started,
            ..
        }) = &mut self.op
        else {
            return None;
        };
        if *seq != progress.op_seq {
            return None;
        }
        if let ProgressEvent::Start(StartProgress::Spawned { pid: child }) = &progress.event {
            *pid = Some(*child);
        }
        Some(LoadProgress {
            seq: *seq,
            typical_load_ms: self.load_times.typical_ms(model),
            model: model.clone(),
            elapsed_ms: now.saturating_duration_since(*started).as_millis() as u64,
            phases: load_phases(&progress.event),
        })
    }

    /// The serving model's profile `conversation_cache_min_tokens`: inputs
    /// below it do not qualify for cache order, whatever a lookup reply's
    /// own `min_tokens` says (the spec's threshold is the profile's; the
    /// reply's counts only for a profile without one).
    pub fn cache_threshold(&self, registry: &Registry) -> Option<u64> {
        let entry = registry.model(self.serving_model()?)?;
        entry.profile_info.as_ref()?.conversation_cache_min_tokens
    }

    /// How long the running load has run, once its backend is spawned
    /// (waiting for readiness): what a ticket that joins it late is told.
    pub fn spawned_load_elapsed(&self, now: Instant) -> Option<u64> {
        match &self.op {
            Some(RunningOp::Load {
                pid: Some(_),
                started,
                ..
            }) => Some(now.saturating_duration_since(*started).as_millis() as u64),
            _ => None,
        }
    }

    /// Takes the outcome of the running op; a failed start cools its model
    /// down from `now` for as long as `cooldown` says after its failures in
    /// a row.
    pub fn finished(&mut self, outcome: OpOutcome, now: Instant, cooldown: Cooldown) -> Finished {
        let running_seq = match &self.op {
            Some(RunningOp::Load { seq, .. } | RunningOp::Stop { seq, .. }) => *seq,
            None => return Finished::Stale,
        };
        match outcome {
            OpOutcome::Loaded {
                op_seq,
                result,
                load_ms,
            } if op_seq == running_seq => {
                let Some(RunningOp::Load {
                    seq,
                    model,
                    switch,
                    cancelled,
                    ..
                }) = self.op.take()
                else {
                    unreachable!("a load's outcome matched a stop")
                };
                match result {
                    Ok(backend) => {
                        self.ready_since = Some(now);
                        self.serve(seq, model, switch, backend, load_ms)
                    }
                    Err(err) => {
                        self.selected = None;
                        if matches!(err, StartError::Cancelled) || cancelled.is_some() {
                            return Finished::Cancelled {
                                seq,
                                model,
                                reason: cancelled,
                            };
                        }
                        let message = err.to_string();
                        self.last_startup_error = Some(message.clone());
                        self.start_errors.insert(model.clone(), message.clone());
                        let streak = self.failure_streaks.entry(model.clone()).or_default();
                        *streak = streak.saturating_add(1);
                        let cooldown = cooldown.after_failures(*streak);
                        self.cooldowns.insert(model.clone(), now + cooldown);
                        let cooldown_ms = cooldown.as_millis() as u64;
                        let failure = LeaseFailure::LoadFailed {
                            message: message.clone(),
                            model_switch: switch,
                            load_ms: Some(load_ms),
                            cooldown_ms,
                            typical_load_ms: self.load_times.typical_ms(&model),
                        };
                        Finished::Failed {
                            seq,
                            model,
                            message,
                            cooldown_ms,
                            failure,
                        }
                    }
                }
            }
            OpOutcome::Stopped {
                op_seq,
                pid,
                report,
            } if op_seq == running_seq => {
                let Some(RunningOp::Stop { reason, .. }) = self.op.take() else {
                    unreachable!("a stop's outcome matched a load")
                };
                if !matches!(reason, StopReason::ChildDied | StopReason::Unresponsive) {
                    self.selected = None;
                }
                Finished::Stopped {
                    pid,
                    reason,
                    report,
                }
            }
            _ => Finished::Stale,
        }
    }

    /// Load `seq` verified `backend`: it serves now.
    fn serve(
        &mut self,
        seq: u64,
        model: String,
        switch: bool,
        backend: Backend,
        load_ms: u64,
    ) -> Finished {
        let pid = backend.pid();
        self.epoch += 1;
        self.backend = Some(backend);
        self.selected = Some(model.clone());
        self.last_loaded = Some(model.clone());
        self.verified.insert(model.clone());
        self.cooldowns.remove(&model);
        self.start_errors.remove(&model);
        self.failure_streaks.remove(&model);
        self.load_times.learn(&model, load_ms);
        Finished::Verified {
            seq,
            model,
            pid,
            switch,
            load_ms,
        }
    }
}

/// Why `model` can never be loaded, if so: it is not configured or not
/// enabled, or not prepared. Models outside `enabled_models` reject direct
/// requests; the proxy already filters them, this keeps that true for any
/// client of the socket (and [`launch_spec`]'s expectations true).
pub fn unlaunchable(registry: &Registry, model: &str) -> Option<LeaseFailure> {
    let entry = registry.model(model).filter(|_| registry.is_enabled(model));
    let Some(entry) = entry else {
        return Some(LeaseFailure::UnknownModel);
    };
    let status = entry.prepared;
    (!status.is_prepared()).then_some(LeaseFailure::NotPrepared { status })
}

/// The model name the backend loaded for `model` answers with.
pub fn upstream_model<'a>(registry: &'a Registry, model: &str) -> Option<&'a str> {
    registry
        .model(model)
        .map(|entry| entry.upstream_model.as_str())
}

/// What the probes of `instance`, verified as `model` at `addr`, ask and
/// expect, as the config describes it; `None` when `backend_probe_ms` is 0.
pub fn probe_target(
    config: &Config,
    model: &str,
    (addr, instance): (SocketAddr, BackendInstance),
) -> Option<ProbeTarget> {
    let probe = &config.probe;
    (probe.interval_ms > 0).then(|| ProbeTarget {
        instance,
        addr,
        expected_model: upstream_model(&config.registry, model)
            .unwrap_or_default()
            .to_owned(),
        interval: Duration::from_millis(probe.interval_ms),
        timeout: Duration::from_millis(probe.timeout_ms()),
    })
}

/// The start of `model` as the config describes it. It lives here, not in
/// `backend/`, because the backend module deliberately knows nothing of the
/// config's types.
pub fn launch_spec(config: &Config, model: &str) -> LaunchSpec {
    let entry = config
        .registry
        .model(model)
        .expect("only configured, prepared models are loaded");
    LaunchSpec {
        model_id: entry.id.clone(),
        python: config.python.clone(),
        strata_dir: config.strata_dir.clone(),
        profile: entry
            .profile
            .clone()
            .expect("a prepared model has a profile"),
        upstream_model: entry.upstream_model.clone(),
        backend_port: config.backend_port,
        // The private directory holding the sockets; ready files go there too.
        ready_dir_parent: config
            .control_socket
            .parent()
            .map(|dir| dir.to_path_buf())
            .unwrap_or_else(|| "/".into()),
        startup: Duration::from_millis(config.timers.startup_ms),
        shutdown: Duration::from_millis(config.timers.shutdown_ms),
        readiness: match config.readiness {
            strata_protocol::config::Readiness::Auto => Readiness::Auto,
            strata_protocol::config::Readiness::ReadyFile => Readiness::ReadyFile,
            strata_protocol::config::Readiness::Health => Readiness::Health,
        },
        engine_log: entry
            .profile_info
            .as_ref()
            .and_then(|info| info.engine_log.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cooldown_doubles_per_failure_up_to_its_maximum() {
        let secs = Duration::from_secs;
        let growing = Cooldown {
            base: secs(30),
            max: secs(600),
        };
        let after: Vec<Duration> = (1..=7).map(|n| growing.after_failures(n)).collect();
        assert_eq!(
            after,
            [30, 60, 120, 240, 480, 600, 600].map(secs),
            "doubling from cooldown_ms, capped at cooldown_max_ms"
        );
        assert_eq!(growing.after_failures(u32::MAX), secs(600));
        let fixed = Cooldown {
            base: secs(30),
            max: secs(30),
        };
        assert!(
            (1..10).all(|n| fixed.after_failures(n) == secs(30)),
            "the spec's default"
        );
        let off = Cooldown {
            base: Duration::ZERO,
            max: secs(60),
        };
        assert_eq!(off.after_failures(5), Duration::ZERO);
    }
}
