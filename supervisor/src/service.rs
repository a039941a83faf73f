//! `run`: the whole supervisor, drivable by tests.
//!
//! Order matters: both sockets are checked and bound before anything else
//! happens, so a second supervisor fails fast without disturbing the first,
//! and `READY=1` is sent only once proxies and operators can connect.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use strata_protocol::config::Config;
use strata_protocol::ids;
use tokio::sync::{oneshot, watch};

use crate::accounting::Accounting;
use crate::accounting::SHUTDOWN_GRACE;
use crate::counters::Counters;
use crate::engine::{self, Command};
use crate::link::{self, LinkShared};
use crate::sockets::{self, SocketError};

/// Why the supervisor stopped with an error.
#[derive(Debug)]
pub enum RunError {
    /// A socket could not be set up.
    Socket(SocketError),
    /// The engine task ended on its own (a bug): the supervisor exits
    /// rather than stay half alive, accepting proxies it cannot serve.
    EngineFailed(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Socket(err) => err.fmt(f),
            RunError::EngineFailed(why) => write!(f, "the engine task failed: {why}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<SocketError> for RunError {
    fn from(err: SocketError) -> Self {
        RunError::Socket(err)
    }
}

/// Runs the supervisor until `signals` has counted one shutdown signal and
/// the shutdown has completed; a second signal interrupts active leases.
pub async fn run(config: Arc<Config>, signals: watch::Receiver<u32>) -> Result<(), RunError> {
    run_with(config, signals, |_| {}).await
}

/// [`run`], handing the engine to `started` once everything is up (tests
/// drive the engine through it).
async fn run_with(
    config: Arc<Config>,
    mut signals: watch::Receiver<u32>,
    started: impl FnOnce(&engine::EngineHandle),
) -> Result<(), RunError> {
    let control_listener = sockets::bind_private(&config.control_socket)?;
    let link_listener = match sockets::bind_private(&config.supervisor_socket) {
        Ok(listener) => listener,
        Err(err) => {
            sockets::remove_socket(&config.control_socket);
            return Err(err.into());
        }
    };
    let started_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default();
    let instance_id = ids::instance_id(std::process::id(), started_ms);
    let log = &config.request_log;
    let accounting = Accounting::new(
        log.capacity,
        log.path
            .clone()
            .map(|path| (path, log.max_bytes, log.rotate_files)),
    );
    let counters = Arc::new(Counters::default());
    let shared = Arc::new(LinkShared {
        fingerprint: config.fingerprint(),
        proxy_frame_limit: config.proxy_frame_limit(),
        instance_id: instance_id.clone(),
        counters: counters.clone(),
        accounting,
        orphans: Default::default(),
        stats: Default::default(),
        refusals: std::sync::Mutex::new(strata_os::WarnLimit::new(
            crate::link::REFUSALS_REPORTED_EVERY,
        )),
    });
    let (engine, mut engine_task) = engine::spawn(config.clone(), instance_id.clone(), counters);
    let control_task = tokio::spawn(crate::control::serve(control_listener, engine.clone()));
    let link_task = tokio::spawn(link::serve(link_listener, engine.clone(), shared.clone()));
    tracing::info!(
        instance_id,
        control_socket = %config.control_socket.display(),
        supervisor_socket = %config.supervisor_socket.display(),
        "supervisor ready"
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    started(&engine);

    let failed = |why: String| {
        tracing::error!(why, "the engine task failed; exiting");
        sockets::remove_socket(&config.control_socket);
        sockets::remove_socket(&config.supervisor_socket);
        RunError::EngineFailed(why)
    };
    while *signals.borrow_and_update() == 0 {
        tokio::select! {
            changed = signals.changed() => if changed.is_err() { break },
            ended = &mut engine_task => {
                control_task.abort();
                link_task.abort();
                let why = match ended {
                    Err(err) if err.is_panic() => "it panicked".to_owned(),
                    Err(err) => err.to_string(),
                    Ok(()) => "it stopped before shutdown".to_owned(),
                };
                return Err(failed(why));
            }
        }
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    tracing::info!("shutdown requested");
    let (done_tx, mut done_rx) = oneshot::channel();
    engine.send(Command::Shutdown { done: done_tx });
    // No new proxies during the drain; connected ones keep their links
    // (each has its own task), and the control socket keeps answering.
    link_task.abort();
    loop {
        tokio::select! {
            _ = &mut done_rx => break,
            ended = &mut engine_task => {
                if let Err(err) = ended {
                    control_task.abort();
                    link_task.abort();
                    return Err(failed(err.to_string()));
                }
                break;
            }
            changed = signals.changed() => {
                if changed.is_err() || *signals.borrow() >= 2 {
                    tracing::warn!("second shutdown signal: interrupting active work");
                    engine.send(Command::ForceShutdown);
                }
                if changed.is_err() {
                    let _ = (&mut done_rx).await;
                    break;
                }
            }
        }
    }
    if !engine_task.is_finished() {
        let _ = (&mut engine_task).await;
    }
    control_task.abort();
    link_task.abort();
    // Records of requests that finished during the drain are in the queue:
    // give the writer its grace to put them on disk. Substitutes still
    // waiting for a proxy that has died meanwhile go with them.
    shared.write_orphans_of_gone_proxies();
    shared.accounting.shutdown(SHUTDOWN_GRACE);
    sockets::remove_socket(&config.control_socket);
    sockets::remove_socket(&config.supervisor_socket);
    tracing::info!("supervisor stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use strata_test_support::TempDir;

    use super::*;

    fn config(dir: &std::path::Path) -> Arc<Config> {
        Arc::new(strata_protocol::config::testing::one_model_config(
            &dir.join("control.sock"),
        ))
    }

    /// The supervisor's `run`, in-process: an engine task that fails ends it with an error
    /// (and its sockets removed), instead of leaving a supervisor that accepts proxies it can
    /// no longer serve.
    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_engine_task_ends_the_supervisor_with_an_error() {
        // A private directory for the sockets, removed at the end.
        let dir = TempDir::new("sup-run");
        let config = config(dir.path());
        let (_signals_tx, signals) = watch::channel(0u32);
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            run_with(config.clone(), signals, |engine| {
                engine.send(Command::Panic);
            }),
        )
        .await
        .expect("run returned");
        assert!(
            matches!(outcome, Err(RunError::EngineFailed(_))),
            "{outcome:?}"
        );
        assert!(!config.control_socket.exists());
        assert!(!config.supervisor_socket.exists());
    }

    /// And the clean path: one signal, a clean stop.
    #[tokio::test(flavor = "current_thread")]
    async fn a_signal_stops_the_supervisor_cleanly() {
        // A private directory for the sockets, removed at the end.
        let dir = TempDir::new("sup-run2");
        let config = config(dir.path());
        let (signals_tx, signals) = watch::channel(0u32);
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            run_with(config.clone(), signals, move |_| {
                signals_tx.send_modify(|count| *count += 1);
            }),
        )
        .await
        .expect("run returned");
        assert!(outcome.is_ok(), "{outcome:?}");
        assert!(!config.control_socket.exists());
    }
}
