//! Operator `on` and `off`, as multi-step operations inside the engine.
//!
//! Each operation streams progress lines to its control client and ends
//! with exactly one `Done`. The control layer lets only one run at a time;
//! the engine still checks, so a bug there cannot interleave two.

use tokio::time::Instant;

use strata_protocol::config::Resolution;
use strata_protocol::control::Done;
use strata_protocol::wire::{LeaseFailure, RevokeReason};
use tokio::sync::mpsc;

use super::state::{CancelReason, Engine, RunningOp, StopReason};
use super::{ControlEvent, ControlOpId};
use crate::backend::StartProgress;
use crate::engine::ops::ProgressEvent;

pub(super) struct ControlOp {
    id: ControlOpId,
    kind: Kind,
    events: mpsc::UnboundedSender<ControlEvent>,
    started: Instant,
}

enum Kind {
    On {
        model: String,
        previous_routing: bool,
        loading: bool,
    },
    Off {
        /// Set once the unload (if any) has started.
        unloading: bool,
    },
}

impl ControlOp {
    pub(super) fn name(&self) -> &'static str {
        match self.kind {
            Kind::On { .. } => "on",
            Kind::Off { .. } => "off",
        }
    }

    fn progress(&self, phase: &'static str, message: impl Into<String>) {
        let _ = self.events.send(ControlEvent::Progress {
            op: self.name().to_owned(),
            phase: phase.to_owned(),
            message: message.into(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        });
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

impl Engine {
    fn done(&mut self, op: ControlOp, ok: bool, message: String) {
        tracing::info!(op = op.name(), ok, "control operation finished");
        let _ = op.events.send(ControlEvent::Done(Done {
            ok,
            message,
            status: self.status(),
        }));
    }

    /// Why a new operation cannot start now, if it cannot. A draining
    /// daemon refuses operations that would load (`on`); `off` may still
    /// run.
    fn refuse_operation(&self, loads: bool) -> Option<&'static str> {
        if loads && self.shutdown.is_some() {
            Some("the daemon is shutting down")
        } else if self.control.is_some() {
            Some("another operation is running")
        } else {
            None
        }
    }

    /// Ends the current control operation with a failure.
    pub(super) fn abort_control(&mut self, message: &str) {
        if let Some(op) = self.control.take() {
            let text = format!("{}: {message}", op.name());
            self.done(op, false, text);
        }
    }

    pub(super) fn start_on(
        &mut self,
        id: ControlOpId,
        requested: Option<String>,
        events: mpsc::UnboundedSender<ControlEvent>,
    ) {
        let previous_routing = self.routing;
        let mut op = ControlOp {
            id,
            kind: Kind::On {
                model: String::new(),
                previous_routing,
                loading: false,
            },
            events,
            started: Instant::now(),
        };
        if let Some(reason) = self.refuse_operation(true) {
            self.done(op, false, format!("on: {reason}"));
            return;
        }
        let serving = self.backend.as_ref().and(self.selected.clone());
        let model = match requested {
            Some(name) => match self.config.registry.resolve(&name, serving.as_deref()) {
                Resolution::Concrete(entry) | Resolution::Alias { model: entry, .. } => {
                    entry.id.clone()
                }
                Resolution::NotFound => {
                    self.done(op, false, "on: unknown or disabled model".into());
                    return;
                }
            },
            None => match serving
                .clone()
                .or_else(|| self.last_loaded.clone())
                .or_else(|| self.config.registry.default_on_model().map(str::to_owned))
            {
                Some(model) => model,
                None => {
                    self.done(op, false, "on: no model is enabled".into());
                    return;
                }
            },
        };
        let prepared = self
            .config
            .registry
            .model(&model)
            .map(|entry| entry.prepared);
        match prepared {
            Some(status) if status.is_prepared() => {}
            Some(status) => {
                self.done(
                    op,
                    false,
                    format!("on: model {model} is not prepared ({})", status.as_str()),
                );
                return;
            }
            None => {
                self.done(op, false, "on: unknown model".into());
                return;
            }
        }
        let already_on = self.routing && serving.as_deref() == Some(model.as_str());
        if already_on {
            self.done(op, true, "on: already on".into());
            return;
        }
        self.routing = true;
        op.progress("routing", "routing enabled");
        self.broadcast_state();
        if serving.as_deref() == Some(model.as_str()) {
            self.quiet_since = Instant::now();
            self.done(
                op,
                true,
                format!("on: model {model} loaded and healthy, routing enabled"),
            );
            return;
        }
        op.kind = Kind::On {
            model,
            previous_routing,
            loading: false,
        };
        let busy_elsewhere = self.leases.len();
        if busy_elsewhere > 0 {
            op.progress(
                "waiting",
                format!(
                    "{} on another model, waiting for {} to finish",
                    plural(busy_elsewhere, "active request"),
                    if busy_elsewhere == 1 { "it" } else { "them" }
                ),
            );
        }
        self.control = Some(op);
    }

    pub(super) fn start_off(
        &mut self,
        id: ControlOpId,
        now: bool,
        events: mpsc::UnboundedSender<ControlEvent>,
    ) {
        let op = ControlOp {
            id,
            kind: Kind::Off { unloading: false },
            events,
            started: Instant::now(),
        };
        if let Some(reason) = self.refuse_operation(false) {
            self.done(op, false, format!("off: {reason}"));
            return;
        }
        self.routing = false;
        self.fail_all_waiting(LeaseFailure::RoutingOff);
        self.cancel_load(CancelReason::RoutingOff);
        op.progress(
            "routing",
            "routing disabled: new and queued requests get 503",
        );
        self.broadcast_state();
        let active = self.leases.len();
        if active > 0 {
            if now {
                op.progress(
                    "interrupting",
                    format!("interrupting {}", plural(active, "active request")),
                );
                self.revoke_all_leases(RevokeReason::RoutingOff, false);
            } else {
                op.progress(
                    "waiting",
                    format!(
                        "{}, waiting for {} to finish (use --now to interrupt)",
                        plural(active, "active request"),
                        if active == 1 { "it" } else { "them" }
                    ),
                );
            }
        }
        self.control = Some(op);
    }

    /// The client of operation `id` disconnected: cancel its wait or load.
    pub(super) fn cancel_control(&mut self, id: ControlOpId) {
        let Some(op) = &self.control else {
            return;
        };
        if op.id != id {
            return;
        }
        match op.kind {
            Kind::On {
                previous_routing,
                loading,
                ..
            } => {
                let started_by_control = matches!(
                    self.op,
                    Some(RunningOp::Load {
                        started_by_control: true,
                        ..
                    })
                );
                if loading && started_by_control {
                    self.cancel_load(CancelReason::ControlClientGone);
                }
                let op = self.control.take().expect("checked above");
                self.set_routing(previous_routing);
                tracing::info!("on cancelled by its client");
                // Nobody reads it; it tells the control layer the slot is
                // free (its client is gone).
                self.done(op, false, "on: cancelled by the client".into());
            }
            Kind::Off { unloading } => {
                // A stop already under way finishes (and answers then);
                // routing stays off either way.
                if !unloading {
                    let op = self.control.take().expect("checked above");
                    tracing::info!("off cancelled by its client; routing stays disabled");
                    self.done(op, false, "off: cancelled by the client".into());
                }
            }
        }
    }

    /// Advances the control operation; true when it occupies the engine.
    pub(super) fn schedule_control(&mut self) -> bool {
        let Some(op) = &self.control else {
            return false;
        };
        match &op.kind {
            Kind::Off { .. } => {
                if !self.leases.is_empty() {
                    return true;
                }
                let Some(backend) = &self.backend else {
                    let op = self.control.take().expect("checked above");
                    self.finish_off(op, "off: no model loaded, routing disabled");
                    return true;
                };
                let pid = backend.pid();
                let model = self.selected.clone().unwrap_or_default();
                op.progress("unloading", format!("unloading model {model}"));
                op.progress("stopping", format!("stopping backend pid {pid}"));
                if let Some(ControlOp {
                    kind: Kind::Off { unloading },
                    ..
                }) = &mut self.control
                {
                    *unloading = true;
                }
                self.start_stop(StopReason::Off);
                true
            }
            Kind::On {
                model, loading: _, ..
            } => {
                let model = model.clone();
                // Requests on another model keep their lease until they end.
                if self.leases.values().any(|held| held.model != model) {
                    return true;
                }
                if self.backend.is_some() && self.selected.as_deref() == Some(&model) {
                    // Another load got there first (a request for the same
                    // model): nothing left to do.
                    let op = self.control.take().expect("checked above");
                    self.quiet_since = Instant::now();
                    let (ok, message) = if self.routing {
                        (
                            true,
                            format!("on: model {model} loaded and healthy, routing enabled"),
                        )
                    } else {
                        (
                            false,
                            format!(
                                "on: model {model} is loaded, but routing was turned off meanwhile and stays off"
                            ),
                        )
                    };
                    self.done(op, ok, message);
                    return false;
                }
                // An explicit on ignores the failure cooldown.
                self.start_load(&model, true);
                if let Some(ControlOp {
                    kind: Kind::On { loading, .. },
                    ..
                }) = &mut self.control
                {
                    *loading = true;
                }
                true
            }
        }
    }

    /// Translates load progress into the operator's progress lines.
    pub(super) fn control_load_progress(&mut self, model: &str, event: &ProgressEvent) {
        let Some(op) = &self.control else {
            return;
        };
        if !matches!(&op.kind, Kind::On { model: m, loading: true, .. } if m == model) {
            return;
        }
        let allowed_s = self.config.timers.startup_ms / 1000;
        match event {
            ProgressEvent::StoppingOld { pid } => {
                let old = self.selected.clone().unwrap_or_default();
                op.progress("unloading", format!("unloading model {old}"));
                op.progress("stopping", format!("stopping backend pid {pid}"));
            }
            ProgressEvent::OldStopped { pid } => {
                op.progress(
                    "stopped",
                    format!("backend pid {pid} exited, memory released"),
                );
            }
            ProgressEvent::Start(StartProgress::Starting) => {
                op.progress("starting", format!("starting backend for model {model}"));
            }
            ProgressEvent::Start(StartProgress::Spawned { pid }) => op.progress(
                "waiting_for_readiness",
                format!("backend pid {pid} started, waiting for readiness (loading model {model})"),
            ),
            ProgressEvent::Start(StartProgress::StillWaiting { elapsed }) => op.progress(
                "waiting_for_readiness",
                format!(
                    "still waiting for readiness ({}s of {allowed_s}s allowed)",
                    elapsed.as_secs()
                ),
            ),
            ProgressEvent::Start(StartProgress::ReadyFileSeen) => op.progress(
                "health_check",
                "backend reported ready, running health check",
            ),
            ProgressEvent::Start(StartProgress::HealthCheckPassed) => {
                op.progress("verified", "health check passed, model identity verified")
            }
        }
    }

    /// A load finished; if `on` was waiting for it, answer.
    pub(super) fn control_load_finished(&mut self, model: &str, result: Result<(), String>) {
        let Some(op) = &self.control else {
            return;
        };
        let Kind::On {
            model: wanted,
            previous_routing,
            loading,
        } = &op.kind
        else {
            return;
        };
        if !*loading || wanted != model {
            return;
        }
        let previous_routing = *previous_routing;
        let op = self.control.take().expect("checked above");
        match result {
            // A legacy bare `off` arrived during the load: the operator's
            // later word stands, and `on` did not achieve what it promises
            // (a router that accepts requests).
            Ok(()) if !self.routing => {
                self.quiet_since = Instant::now();
                self.done(
                    op,
                    false,
                    format!(
                        "on: model {model} loaded, but routing was turned off during the load and stays off"
                    ),
                );
            }
            Ok(()) => {
                self.quiet_since = Instant::now();
                self.done(
                    op,
                    true,
                    format!("on: model {model} loaded and healthy, routing enabled"),
                );
            }
            Err(message) => {
                self.set_routing(previous_routing);
                self.done(op, false, format!("on: {message}"));
            }
        }
    }

    /// A stop finished; if `off` was waiting for it, answer.
    pub(super) fn stop_finished(&mut self, reason: StopReason, pid: u32) {
        if reason != StopReason::Off {
            return;
        }
        let Some(op) = self.control.take() else {
            return;
        };
        op.progress(
            "stopped",
            format!("backend pid {pid} exited, memory released"),
        );
        self.finish_off(op, "off: model unloaded, routing disabled");
    }

    /// Answers `off`. A legacy bare `on` that arrived meanwhile stands (the
    /// operator's later word), but then `off` did not leave routing
    /// disabled as it promises, so it reports failure.
    fn finish_off(&mut self, op: ControlOp, message: &str) {
        if self.routing {
            let text = format!("{message}, but routing was turned back on meanwhile");
            self.done(op, false, text);
        } else {
            self.done(op, true, message.to_owned());
        }
    }
}
