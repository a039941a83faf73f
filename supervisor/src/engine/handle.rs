//! The engine's handle and its start.

use std::sync::Arc;
use std::time::Duration;

use strata_protocol::config::Config;
use strata_protocol::control::{ModelsAnswer, Status};
use tokio::sync::{mpsc, oneshot};

use super::backend_ops::{OpReport, OpRunner};
use super::command::Command;
use super::state::Engine;
use crate::counters::Counters;
use crate::prefetch::Prefetch;

/// A cheap, cloneable handle to the engine task.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl EngineHandle {
    /// Sends a command; returns false once the engine has stopped.
    pub fn send(&self, command: Command) -> bool {
        self.tx.send(command).is_ok()
    }

    /// Current status, without waiting for any operation.
    pub async fn status(&self) -> Option<Status> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Status { reply }) {
            return None;
        }
        rx.await.ok()
    }

    /// Every model's status and learned load time.
    pub async fn models(&self) -> Option<ModelsAnswer> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Models { reply }) {
            return None;
        }
        rx.await.ok()
    }

    /// Tests: a handle with no engine task behind it; its commands arrive
    /// on the receiver, so a test can play the engine and see exactly what
    /// was asked of it.
    #[cfg(test)]
    pub(crate) fn detached() -> (EngineHandle, mpsc::UnboundedReceiver<Command>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EngineHandle { tx }, rx)
    }
}

/// Starts the engine task on the current runtime. The task ends after a
/// [`Command::Shutdown`] has completed.
pub fn spawn(
    config: Arc<Config>,
    instance_id: String,
    counters: Arc<Counters>,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = EngineHandle { tx: tx.clone() };
    // The ops report into the engine's own channel.
    let ops = OpRunner::Tasks {
        report: Arc::new(move |report| {
            let _ = tx.send(match report {
                OpReport::Progress(progress) => Command::OpProgress(progress),
                OpReport::Finished(outcome) => Command::OpFinished(outcome),
                OpReport::Probe { instance, outcome } => Command::ProbeResult { instance, outcome },
            });
        }),
        shutdown: Duration::from_millis(config.timers.shutdown_ms),
        probe: None,
    };
    // The prefetch thread starts with the engine task, not in the engine:
    // the hand-driven engine of the tests starts no thread.
    let prefetch = Prefetch::start(&config, counters.clone());
    let now = tokio::time::Instant::now();
    let engine = Engine::new(config, instance_id, counters, ops, prefetch, now);
    let task = tokio::spawn(engine.run(rx));
    (handle, task)
}
