//! Operator `on` and `off` as a small state machine of pure steps.
//!
//! An operation streams progress lines to its control client and ends with
//! exactly one `Done`, also when it is refused at once or its client goes
//! away. [`Operator`] holds the one operation that runs (the control layer
//! lets only one run; this checks again, so a bug there cannot interleave
//! two). Each method takes the facts of the engine it needs and `now`, and
//! returns the [`OperatorAction`]s the engine carries out, in order; none of
//! them does anything itself, so every rule here has a table test.
//!
//! - `on [MODEL]` turns routing on, then (if MODEL is not the one serving)
//!   waits until no lease on another model is left and loads MODEL itself,
//!   holding every other admission, load and unload meanwhile. A bare `on`
//!   picks the serving, the last loaded or the first enabled model. Its
//!   client leaving cancels the load it started and restores routing.
//! - `off [--now]` turns routing off (queued requests fail, a load is
//!   cancelled), revokes active leases with `--now`, waits for them to end
//!   and unloads the backend.

use std::time::Duration;

use strata_protocol::config::{Registry, Resolution};
use strata_protocol::wire::typical_load_seconds;
use tokio::time::Instant;

use super::backend_ops::ProgressEvent;
use super::backend_slot::{CancelReason, StopReason};
use super::command::ControlOpId;
use crate::backend::StartProgress;

/// What the engine does for the operator, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorAction {
    /// A progress line for operation `op`'s client.
    Progress {
        op: ControlOpId,
        name: &'static str,
        phase: &'static str,
        message: String,
        elapsed_ms: u64,
    },
    /// Operation `op` is over (its client also gets the status document).
    Done {
        op: ControlOpId,
        name: &'static str,
        ok: bool,
        message: String,
    },
    /// Set the routing flag (off fails every waiting ticket).
    SetRouting(bool),
    CancelLoad(CancelReason),
    /// `off --now`: ask every proxy to end its active leases.
    RevokeAll,
    /// Load this model (a launch the cooldown does not refuse).
    StartLoad {
        model: String,
    },
    /// Unload the serving backend (`off`).
    StartStop,
    /// A load or `on` finished: the grace and idle clocks start again.
    RestartQuietClock,
}

/// What the operator needs to know of the engine.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub routing: bool,
    pub shutting_down: bool,
    /// The model and pid of the verified backend, when one serves.
    pub serving: Option<(&'a str, u32)>,
    /// The model the backend runs or last ran (during a switch: the old one).
    pub selected: Option<&'a str>,
    /// The model a bare `on` picks when nothing serves.
    pub last_loaded: Option<&'a str>,
    /// The model of each lease.
    pub leased: &'a [&'a str],
    /// A load or stop runs.
    pub op_running: bool,
    /// The running load was started by the operator's `on`.
    pub control_load: bool,
}

impl Facts<'_> {
    fn serving_model(&self) -> Option<&str> {
        self.serving.map(|(model, _)| model)
    }
}

/// The result of one [`Operator::step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub actions: Vec<OperatorAction>,
    /// The operation waits and holds every other admission, load and
    /// unload.
    pub hold: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    On {
        model: String,
        previous_routing: bool,
        /// Set once its own load has started.
        loading: bool,
    },
    Off {
        /// Set once the unload (if any) has started.
        unloading: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Operation {
    id: ControlOpId,
    kind: Kind,
    started: Instant,
}

impl Operation {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::On { .. } => "on",
            Kind::Off { .. } => "off",
        }
    }

    fn progress(&self, phase: &'static str, message: String, now: Instant) -> OperatorAction {
        OperatorAction::Progress {
            op: self.id,
            name: self.name(),
            phase,
            message,
            elapsed_ms: elapsed_ms(self.started, now),
        }
    }

    fn done(&self, ok: bool, message: String) -> OperatorAction {
        OperatorAction::Done {
            op: self.id,
            name: self.name(),
            ok,
            message,
        }
    }
}

fn elapsed_ms(since: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(since).as_millis() as u64
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn them(n: usize) -> &'static str {
    if n == 1 { "it" } else { "them" }
}

/// What an unload that waits for the leases to end does next: the second
/// half of `off` (after its optional revoke), and of the watchdog's restart
/// of an unresponsive backend, which takes the same path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unload<T> {
    /// Leases (revoked ones too, until they end) still exist: hold.
    Wait,
    /// No lease is left: stop this backend.
    Stop(T),
    /// No lease is left and nothing serves.
    NothingToStop,
}

/// The unload's next step with `leases` left and `serving` the backend that
/// serves, if one does.
pub fn unload_when_quiet<T>(leases: usize, serving: Option<T>) -> Unload<T> {
    match serving {
        _ if leases > 0 => Unload::Wait,
        Some(backend) => Unload::Stop(backend),
        None => Unload::NothingToStop,
    }
}

/// The one operator operation, if one runs.
#[derive(Debug)]
pub struct Operator {
    current: Option<Operation>,
    /// `startup_ms` in whole seconds, for the readiness progress line.
    startup_s: u64,
}

impl Operator {
    pub fn new(startup: Duration) -> Operator {
        Operator {
            current: None,
            startup_s: startup.as_secs(),
        }
    }

    pub fn is_running(&self) -> bool {
        self.current.is_some()
    }

    /// The model an `on` waits to load (its leases have not ended, its
    /// own load has not started), if one does.
    pub fn waits_to_load(&self) -> Option<&str> {
        match &self.current.as_ref()?.kind {
            Kind::On {
                model,
                loading: false,
                ..
            } => Some(model),
            _ => None,
        }
    }

    /// `on` or `off`, while one runs.
    pub fn name(&self) -> Option<&'static str> {
        self.current.as_ref().map(Operation::name)
    }

    fn refused(id: ControlOpId, name: &'static str, message: String) -> Vec<OperatorAction> {
        vec![OperatorAction::Done {
            op: id,
            name,
            ok: false,
            message,
        }]
    }

    /// `on [requested]` arrives.
    pub fn begin_on(
        &mut self,
        id: ControlOpId,
        requested: Option<&str>,
        facts: &Facts,
        registry: &Registry,
        now: Instant,
    ) -> Vec<OperatorAction> {
        let refuse = |message: &str| Self::refused(id, "on", format!("on: {message}"));
        if facts.shutting_down {
            return refuse("the daemon is shutting down");
        }
        if self.current.is_some() {
            return refuse("another operation is running");
        }
        let serving = facts.serving_model();
        let model = match requested {
            Some(name) => match registry.resolve(name, serving) {
                Resolution::Concrete(entry) | Resolution::Alias { model: entry, .. } => {
                    entry.id.clone()
                }
                Resolution::NotFound => return refuse("unknown or disabled model"),
            },
            None => match serving
                .or(facts.last_loaded)
                .or_else(|| registry.default_on_model())
            {
                Some(model) => model.to_owned(),
                None => return refuse("no model is enabled"),
            },
        };
        match registry.model(&model).map(|entry| entry.prepared) {
            Some(status) if status.is_prepared() => {}
            Some(status) => {
                let reason = format!("model {model} is not prepared ({})", status.as_str());
                return refuse(&reason);
            }
            None => return refuse("unknown model"),
        }
        let op = Operation {
            id,
            kind: Kind::On {
                model: model.clone(),
                previous_routing: facts.routing,
                loading: false,
            },
            started: now,
        };
        if facts.routing && serving == Some(model.as_str()) {
            return vec![op.done(true, "on: already on".into())];
        }
        let mut actions = vec![
            OperatorAction::SetRouting(true),
            op.progress("routing", "routing enabled".into(), now),
        ];
        if serving == Some(model.as_str()) {
            actions.push(OperatorAction::RestartQuietClock);
            actions.push(op.done(true, loaded_message(&model)));
            return actions;
        }
        let leases = facts.leased.len();
        if leases > 0 {
            let message = format!(
                "{} on another model, waiting for {} to finish",
                plural(leases, "active request"),
                them(leases)
            );
            actions.push(op.progress("waiting", message, now));
        }
        self.current = Some(op);
        actions
    }

    /// `off [--now]` arrives.
    pub fn begin_off(
        &mut self,
        id: ControlOpId,
        interrupt: bool,
        facts: &Facts,
        now: Instant,
    ) -> Vec<OperatorAction> {
        if self.current.is_some() {
            return Self::refused(id, "off", "off: another operation is running".into());
        }
        let op = Operation {
            id,
            kind: Kind::Off { unloading: false },
            started: now,
        };
        let mut actions = vec![
            OperatorAction::SetRouting(false),
            OperatorAction::CancelLoad(CancelReason::RoutingOff),
            op.progress(
                "routing",
                "routing disabled: new and queued requests get 503".into(),
                now,
            ),
        ];
        let active = facts.leased.len();
        if active > 0 && interrupt {
            let message = format!("interrupting {}", plural(active, "active request"));
            actions.push(op.progress("interrupting", message, now));
            actions.push(OperatorAction::RevokeAll);
        } else if active > 0 {
            let message = format!(
                "{}, waiting for {} to finish (use --now to interrupt)",
                plural(active, "active request"),
                them(active)
            );
            actions.push(op.progress("waiting", message, now));
        }
        self.current = Some(op);
        actions
    }

    /// The client of operation `id` disconnected: cancel its wait or load.
    pub fn cancel(&mut self, id: ControlOpId, facts: &Facts) -> Vec<OperatorAction> {
        let Some(op) = self.current.take_if(|op| op.id == id) else {
            return Vec::new();
        };
        match op.kind {
            Kind::On {
                previous_routing,
                loading,
                ..
            } => {
                let mut actions = Vec::new();
                if loading && facts.control_load {
                    actions.push(OperatorAction::CancelLoad(CancelReason::ControlClientGone));
                }
                actions.push(OperatorAction::SetRouting(previous_routing));
                // Nobody reads it; it tells the control layer the slot is
                // free (its client is gone).
                actions.push(op.done(false, "on: cancelled by the client".into()));
                actions
            }
            // A stop already under way finishes (and answers then);
            // routing stays off either way.
            Kind::Off { unloading: true } => {
                self.current = Some(op);
                Vec::new()
            }
            Kind::Off { unloading: false } => {
                vec![op.done(false, "off: cancelled by the client".into())]
            }
        }
    }

    /// Advances the operation when no load or stop runs.
    pub fn step(&mut self, facts: &Facts, now: Instant) -> Step {
        /// What the running operation does next.
        enum Next {
            Wait,
            Unload { model: String, pid: u32 },
            NothingToUnload,
            AlreadyLoaded { model: String },
            Load { model: String },
        }
        let Some(op) = self.current.as_ref().filter(|_| !facts.op_running) else {
            return Step {
                actions: Vec::new(),
                hold: false,
            };
        };
        let next = match &op.kind {
            Kind::Off { .. } => match unload_when_quiet(facts.leased.len(), facts.serving) {
                Unload::Wait => Next::Wait,
                Unload::NothingToStop => Next::NothingToUnload,
                Unload::Stop((model, pid)) => Next::Unload {
                    model: model.to_owned(),
                    pid,
                },
            },
            // Requests on another model keep their lease until they end.
            Kind::On { model, .. } if facts.leased.iter().any(|m| m != model) => Next::Wait,
            // Another load got there first (a request for the same model):
            // nothing left to do.
            Kind::On { model, .. } if facts.serving_model() == Some(model.as_str()) => {
                Next::AlreadyLoaded {
                    model: model.clone(),
                }
            }
            // An explicit on ignores the failure cooldown.
            Kind::On { model, .. } => Next::Load {
                model: model.clone(),
            },
        };
        let (actions, hold) = match next {
            Next::Wait => (Vec::new(), true),
            Next::NothingToUnload => {
                let op = self.current.take().expect("matched above");
                let done = finish_off(&op, facts, "off: no model loaded, routing disabled");
                (vec![done], true)
            }
            Next::Unload { model, pid } => {
                let actions = vec![
                    op.progress("unloading", format!("unloading model {model}"), now),
                    op.progress("stopping", format!("stopping backend pid {pid}"), now),
                    OperatorAction::StartStop,
                ];
                self.set_started();
                (actions, true)
            }
            Next::AlreadyLoaded { model } => {
                let op = self.current.take().expect("matched above");
                let done = if facts.routing {
                    op.done(true, loaded_message(&model))
                } else {
                    op.done(
                        false,
                        format!(
                            "on: model {model} is loaded, but routing was turned off meanwhile and stays off"
                        ),
                    )
                };
                (vec![OperatorAction::RestartQuietClock, done], false)
            }
            Next::Load { model } => {
                self.set_started();
                (vec![OperatorAction::StartLoad { model }], true)
            }
        };
        Step { actions, hold }
    }

    /// The operation's own load or unload has started.
    fn set_started(&mut self) {
        match self.current.as_mut().map(|op| &mut op.kind) {
            Some(Kind::On { loading, .. }) => *loading = true,
            Some(Kind::Off { unloading }) => *unloading = true,
            None => {}
        }
    }

    /// The running load of `model` made progress; `on` reports it.
    pub fn load_progress(
        &self,
        model: &str,
        event: &ProgressEvent,
        typical_load_ms: Option<u64>,
        facts: &Facts,
        now: Instant,
    ) -> Vec<OperatorAction> {
        let Some(op) = self.waiting_for_load_of(model) else {
            return Vec::new();
        };
        let line = |phase, message: String| op.progress(phase, message, now);
        match event {
            ProgressEvent::StoppingOld { pid } => {
                let old = facts.selected.unwrap_or_default();
                vec![
                    line("unloading", format!("unloading model {old}")),
                    line("stopping", format!("stopping backend pid {pid}")),
                ]
            }
            ProgressEvent::OldStopped { pid } => vec![line(
                "stopped",
                format!("backend pid {pid} exited, memory released"),
            )],
            // Said in the log, `status` and `/v1/models`; the spec's `on` lines stay as they are.
            ProgressEvent::Start(StartProgress::ReadinessChosen(_)) => Vec::new(),
            ProgressEvent::Start(StartProgress::Starting) => vec![line(
                "starting",
                format!("starting backend for model {model}"),
            )],
            ProgressEvent::Start(StartProgress::Spawned { pid }) => vec![line(
                "waiting_for_readiness",
                match typical_load_ms {
                    Some(typical) => format!(
                        "backend pid {pid} started, waiting for readiness (loading model {model}, usually {}s)",
                        typical_load_seconds(typical)
                    ),
                    None => format!(
                        "backend pid {pid} started, waiting for readiness (loading model {model})"
                    ),
                },
            )],
            ProgressEvent::Start(StartProgress::StillWaiting { elapsed }) => vec![line(
                "waiting_for_readiness",
                match typical_load_ms {
                    // The first load of a model shows the limit, as before.
                    None => format!(
                        "still waiting for readiness ({}s of {}s allowed)",
                        elapsed.as_secs(),
                        self.startup_s
                    ),
                    Some(typical) => format!(
                        "still waiting for readiness ({}s, usually {}s; {}s allowed)",
                        elapsed.as_secs(),
                        typical_load_seconds(typical),
                        self.startup_s
                    ),
                },
            )],
            ProgressEvent::Start(StartProgress::ReadyFileSeen) => vec![line(
                "health_check",
                "backend reported ready, running health check".into(),
            )],
            ProgressEvent::Start(StartProgress::Listening) => vec![line(
                "health_check",
                "backend listens on its port, running health check".into(),
            )],
            ProgressEvent::Start(StartProgress::HealthCheckPassed) => vec![line(
                "verified",
                "health check passed, model identity verified".into(),
            )],
        }
    }

    /// A load of `model` ended (`Err`: the cause); `on` answers if it waited
    /// for it.
    pub fn load_finished(
        &mut self,
        model: &str,
        result: Result<(), String>,
        facts: &Facts,
    ) -> Vec<OperatorAction> {
        if self.waiting_for_load_of(model).is_none() {
            return Vec::new();
        }
        let op = self.current.take().expect("checked above");
        let Kind::On {
            previous_routing, ..
        } = op.kind
        else {
            unreachable!("only `on` waits for a load")
        };
        match result {
            // A legacy bare `off` arrived during the load: the operator's
            // later word stands, and `on` did not achieve what it promises
            // (a router that accepts requests).
            Ok(()) if !facts.routing => vec![
                OperatorAction::RestartQuietClock,
                op.done(
                    false,
                    format!(
                        "on: model {model} loaded, but routing was turned off during the load and stays off"
                    ),
                ),
            ],
            Ok(()) => vec![
                OperatorAction::RestartQuietClock,
                op.done(true, loaded_message(model)),
            ],
            Err(message) => vec![
                OperatorAction::SetRouting(previous_routing),
                op.done(false, format!("on: {message}")),
            ],
        }
    }

    /// A stop of backend `pid` finished; `off` answers if it started it.
    pub fn stop_finished(
        &mut self,
        reason: StopReason,
        pid: u32,
        facts: &Facts,
        now: Instant,
    ) -> Vec<OperatorAction> {
        if reason != StopReason::Off {
            return Vec::new();
        }
        let Some(op) = self
            .current
            .take_if(|op| matches!(op.kind, Kind::Off { .. }))
        else {
            return Vec::new();
        };
        vec![
            op.progress(
                "stopped",
                format!("backend pid {pid} exited, memory released"),
                now,
            ),
            finish_off(&op, facts, "off: model unloaded, routing disabled"),
        ]
    }

    /// Ends the running operation with a failure (a forced shutdown).
    pub fn abort(&mut self, message: &str) -> Vec<OperatorAction> {
        match self.current.take() {
            Some(op) => vec![op.done(false, format!("{}: {message}", op.name()))],
            None => Vec::new(),
        }
    }

    /// The `on` whose own load of `model` runs.
    fn waiting_for_load_of(&self, model: &str) -> Option<&Operation> {
        self.current
            .as_ref()
            .filter(|op| matches!(&op.kind, Kind::On { model: m, loading: true, .. } if m == model))
    }
}

fn loaded_message(model: &str) -> String {
    format!("on: model {model} loaded and healthy, routing enabled")
}

/// Answers `off`. A legacy bare `on` that arrived meanwhile stands (the
/// operator's later word), but then `off` did not leave routing disabled as
/// it promises, so it reports failure.
fn finish_off(op: &Operation, facts: &Facts, message: &str) -> OperatorAction {
    if facts.routing {
        op.done(
            false,
            format!("{message}, but routing was turned back on meanwhile"),
        )
    } else {
        op.done(true, message.to_owned())
    }
}

#[cfg(test)]
mod tests;
