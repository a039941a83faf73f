//! Loads and stops of the backend, run as tasks the engine starts and waits
//! for.
//!
//! A running op owns the `Backend` value it works on, so nothing else can
//! signal that process meanwhile. Each op reports progress and its outcome
//! ([`OpReport`]) to whoever runs it (the engine's own command channel),
//! tagged with the op's sequence number so a stale report is recognisable. The engine hands
//! each op to an [`OpRunner`] as an [`OpRequest`]; in unit tests the runner
//! passes the requests to the test instead, which answers them itself.
//!
//! The runner also owns the probe task of the serving backend
//! ([`OpRunner::probe`]), which reports each probe's outcome the same way;
//! in unit tests the test reports probe outcomes itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_protocol::wire::BackendInstance;

#[cfg(test)]
use tokio::sync::mpsc;
use tokio::sync::watch;

use crate::backend::{
    self, Backend, LaunchSpec, ProbeOutcome, StartError, StartProgress, StopReport,
};

/// Progress of the running op.
#[derive(Debug)]
pub struct OpProgress {
    pub op_seq: u64,
    pub event: ProgressEvent,
}

#[derive(Debug)]
pub enum ProgressEvent {
    /// The previously loaded backend is being stopped to make room.
    StoppingOld {
        pid: u32,
    },
    OldStopped {
        pid: u32,
    },
    Start(StartProgress),
}

/// How an op ended.
#[derive(Debug)]
pub enum OpOutcome {
    Loaded {
        op_seq: u64,
        result: Result<Backend, StartError>,
        /// Stop of the old backend plus start and readiness of the new one,
        /// including cleanup after a failed start.
        load_ms: u64,
    },
    Stopped {
        op_seq: u64,
        pid: u32,
        report: StopReport,
    },
}

/// What a running op tells the engine.
#[derive(Debug)]
pub enum OpReport {
    Progress(OpProgress),
    Finished(OpOutcome),
    /// A probe of the serving backend (`backend_probe_ms`).
    Probe {
        instance: BackendInstance,
        outcome: ProbeOutcome,
    },
}

/// Where an op's reports go.
pub type Reporter = Arc<dyn Fn(OpReport) + Send + Sync>;

/// One op the engine wants run.
#[derive(Debug)]
pub enum OpRequest {
    /// Stop `old` (if any), then start the backend `spec` describes; stop
    /// early once `cancel` turns true.
    Load {
        op_seq: u64,
        old: Option<Backend>,
        spec: Box<LaunchSpec>,
        cancel: watch::Receiver<bool>,
    },
    /// Stop `backend` and report when its process group is gone; `hurry`
    /// true (at once or later) kills the group without waiting out
    /// `shutdown_ms`.
    Stop {
        op_seq: u64,
        backend: Backend,
        hurry: watch::Receiver<bool>,
    },
}

/// Where the engine's ops run.
pub enum OpRunner {
    /// As tasks on the current runtime, reporting to `report`; `shutdown`
    /// is the SIGTERM-to-SIGKILL grace of a stop.
    Tasks {
        report: Reporter,
        shutdown: Duration,
        /// The probes of the serving backend, while it is probed.
        probe: Option<ProbeTask>,
    },
    /// Tests: each request goes to the test, which answers it with
    /// `OpProgress` and `OpFinished` commands of its own.
    #[cfg(test)]
    Manual(mpsc::UnboundedSender<OpRequest>),
}

/// Where a probe task asks, and what it expects.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    pub instance: BackendInstance,
    pub addr: SocketAddr,
    /// The model the backend was verified as.
    pub expected_model: String,
    /// `backend_probe_ms`.
    pub interval: Duration,
    /// The bound of one probe.
    pub timeout: Duration,
}

/// The running probe task; dropping it ends the task.
#[derive(Debug)]
pub struct ProbeTask(tokio::task::JoinHandle<()>);

impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl OpRunner {
    /// Probes `target` every interval from now on, reporting each outcome,
    /// instead of whatever was probed before; `None` ends the probes. Tests
    /// run no probe task: they report probe outcomes themselves.
    pub fn probe(&mut self, target: Option<ProbeTarget>) {
        match self {
            OpRunner::Tasks { report, probe, .. } => {
                *probe = target.map(|target| {
                    let report = report.clone();
                    ProbeTask(tokio::spawn(async move {
                        let ProbeTarget {
                            instance,
                            addr,
                            expected_model,
                            interval,
                            timeout,
                        } = target;
                        loop {
                            tokio::time::sleep(interval).await;
                            let outcome = backend::probe_once(addr, &expected_model, timeout).await;
                            report(OpReport::Probe { instance, outcome });
                        }
                    }))
                });
            }
            #[cfg(test)]
            OpRunner::Manual(_) => {}
        }
    }

    pub fn run(&self, request: OpRequest) {
        match self {
            OpRunner::Tasks {
                report, shutdown, ..
            } => match request {
                OpRequest::Load {
                    op_seq,
                    old,
                    spec,
                    cancel,
                } => spawn_load(op_seq, old, spec, *shutdown, cancel, report.clone()),
                OpRequest::Stop {
                    op_seq,
                    backend,
                    hurry,
                } => spawn_stop(op_seq, backend, *shutdown, hurry, report.clone()),
            },
            #[cfg(test)]
            OpRunner::Manual(tests) => {
                let _ = tests.send(request);
            }
        }
    }
}

fn spawn_load(
    op_seq: u64,
    old: Option<Backend>,
    spec: Box<LaunchSpec>,
    shutdown: Duration,
    cancel: watch::Receiver<bool>,
    reporter: Reporter,
) {
    tokio::spawn(async move {
        let started = Instant::now();
        let report = |event| reporter(OpReport::Progress(OpProgress { op_seq, event }));
        if let Some(old) = old {
            let pid = old.pid();
            report(ProgressEvent::StoppingOld { pid });
            old.stop(shutdown, None).await;
            report(ProgressEvent::OldStopped { pid });
        }
        let mut on_progress = |progress: StartProgress| report(ProgressEvent::Start(progress));
        let result = backend::start(&spec, &mut on_progress, &cancel).await;
        let load_ms = started.elapsed().as_millis() as u64;
        reporter(OpReport::Finished(OpOutcome::Loaded {
            op_seq,
            result,
            load_ms,
        }));
    });
}

fn spawn_stop(
    op_seq: u64,
    backend: Backend,
    shutdown: Duration,
    hurry: watch::Receiver<bool>,
    reporter: Reporter,
) {
    tokio::spawn(async move {
        let pid = backend.pid();
        let report = if *hurry.borrow() {
            backend.kill().await
        } else {
            backend.stop(shutdown, Some(&hurry)).await
        };
        reporter(OpReport::Finished(OpOutcome::Stopped {
            op_seq,
            pid,
            report,
        }));
    });
}
