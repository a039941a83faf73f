//! `run`: the whole supervisor, drivable by tests.
//!
//! Order matters: both sockets are checked and bound before anything else
//! happens, so a second supervisor fails fast without disturbing the first,
//! and `READY=1` is sent only once proxies and operators can connect.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{SystemTime, UNIX_EPOCH};

use strata_protocol::config::Config;
use strata_protocol::ids;
use tokio::sync::{oneshot, watch};

use crate::accounting::Accounting;
use crate::accounting::SHUTDOWN_GRACE;
use crate::engine::{self, Command};
use crate::link::{self, LinkShared};
use crate::sockets::{self, SocketError};

/// Runs the supervisor until `signals` has counted one shutdown signal and
/// the shutdown has completed; a second signal interrupts active leases.
pub async fn run(
    config: Arc<Config>,
    mut signals: watch::Receiver<u32>,
) -> Result<(), SocketError> {
    let control_listener = sockets::bind_private(&config.control_socket)?;
    let link_listener = match sockets::bind_private(&config.supervisor_socket) {
        Ok(listener) => listener,
        Err(err) => {
            sockets::remove_socket(&config.control_socket);
            return Err(err);
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
    let shared = Arc::new(LinkShared {
        fingerprint: config.fingerprint(),
        instance_id: instance_id.clone(),
        arrivals: AtomicU64::new(0),
        accounting,
    });
    let (engine, engine_task) = engine::spawn(config.clone(), instance_id.clone());
    let control_task = tokio::spawn(crate::control::serve(control_listener, engine.clone()));
    let link_task = tokio::spawn(link::serve(link_listener, engine.clone(), shared.clone()));
    tracing::info!(
        instance_id,
        control_socket = %config.control_socket.display(),
        supervisor_socket = %config.supervisor_socket.display(),
        "supervisor ready"
    );
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);

    while *signals.borrow_and_update() == 0 {
        if signals.changed().await.is_err() {
            break;
        }
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    tracing::info!("shutdown requested");
    let (done_tx, mut done_rx) = oneshot::channel();
    engine.send(Command::Shutdown { done: done_tx });
    loop {
        tokio::select! {
            _ = &mut done_rx => break,
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
    let _ = engine_task.await;
    control_task.abort();
    link_task.abort();
    // Records of requests that finished during the drain are in the queue:
    // give the writer its grace to put them on disk.
    shared.accounting.shutdown(SHUTDOWN_GRACE);
    sockets::remove_socket(&config.control_socket);
    sockets::remove_socket(&config.supervisor_socket);
    tracing::info!("supervisor stopped");
    Ok(())
}
