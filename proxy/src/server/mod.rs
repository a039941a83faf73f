//! `run`: the accept loop, routing, and draining on shutdown.
//!
//! A failed accept (out of descriptors, mostly) delays the next one as
//! `accept` decides, without holding up the other branches of the loop.
//!
//! Shutdown: the first signal closes the listener (new connections wait in
//! the socket unit's backlog for the next proxy), tells the supervisor this
//! proxy is draining, and lets every accepted request finish, bounded by
//! `drain_ms` when it is positive. A second signal, or the deadline, ends
//! what is left.
//!
//! Beside the loop: `listener` takes the listening socket before the
//! runtime exists, `accept` decides the backoff after a failed accept, and
//! `memory` hands free heap memory back after a burst of connections.

mod accept;
pub mod listener;
mod trim;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use strata_protocol::config::Config;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::app::App;
use crate::chat;
use crate::endpoints::{health, metrics, models, records};
use crate::link::SupervisorLink;
use crate::reply::{EndpointError, json_response};
use crate::response_body::ProxyBody;

use accept::{AcceptBackoff, Report};
use trim::ConnectionGauge;

/// A client that opens a connection and sends no complete header within
/// this long is dropped.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a starting proxy waits for its first try to reach the
/// supervisor before it tells systemd it is ready anyway (it serves from the
/// start either way).
const STARTUP_LINK_WAIT: Duration = Duration::from_secs(10);

/// How long an exiting proxy waits to hand its last records over.
const RECORD_FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Why the proxy stopped with an error.
#[derive(Debug)]
pub enum RunError {
    Listener(std::io::Error),
    /// The supervisor refused this proxy (different build or config).
    Refused(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Listener(err) => write!(f, "cannot use the listener: {err}"),
            RunError::Refused(reason) => write!(f, "the supervisor refused this proxy: {reason}"),
        }
    }
}

impl std::error::Error for RunError {}

async fn route(
    app: Arc<App>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let method = request.method().clone();
    let response = match request.uri().path() {
        "/v1/chat/completions" => {
            if method == Method::POST {
                chat::handle(app, request).await
            } else {
                EndpointError::MethodNotAllowed.into_response()
            }
        }
        "/v1/models" if method == Method::GET => {
            json_response(StatusCode::OK, &models::listing(&app))
        }
        "/health" if method == Method::GET => health::health(&app),
        "/health/live" if method == Method::GET => health::live(),
        "/metrics" if method == Method::GET => metrics::metrics(&app, &request).await,
        "/requests" if method == Method::GET => records::records(&app, request.uri().query()).await,
        "/v1/models" | "/health" | "/health/live" | "/metrics" | "/requests" => {
            EndpointError::MethodNotAllowed.into_response()
        }
        _ => EndpointError::NotFound.into_response(),
    };
    Ok(response)
}

/// Accepts the next connection, not before `retry_at`.
async fn accept_after(
    listener: &TcpListener,
    retry_at: Option<Instant>,
) -> std::io::Result<(TcpStream, SocketAddr)> {
    if let Some(at) = retry_at {
        tokio::time::sleep_until(at).await;
    }
    listener.accept().await
}

/// READY=1 for systemd, once: the first try to reach the supervisor is over.
fn notify_ready(unreachable: bool) {
    if unreachable {
        tracing::warn!("the supervisor is not reachable yet; serving anyway");
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
}

/// Sleeps until `at`; never returns for `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One line about accept failures; `failures` counts those since the previous line. A line
/// that counts failures is a warning.
fn log_accept_report(report: Report, last_error: Option<&std::io::Error>) {
    let error = last_error.map(tracing::field::display);
    match report {
        Report::Failing { failures } => {
            tracing::warn!(error, failures, "accept failed; backing off");
        }
        Report::Recovered { failures: 0 } => {
            tracing::info!(failures = 0, "accepting connections again");
        }
        Report::Recovered { failures } => {
            tracing::warn!(failures, "accepting connections again");
        }
    }
}

/// Serves HTTP on `listener` until `signals` counts a shutdown signal and
/// the drain has finished. The listener may be blocking or not (a plain
/// `bind` gives a blocking one); `run` makes it non-blocking.
pub async fn run(
    config: Arc<Config>,
    listener: std::net::TcpListener,
    mut signals: watch::Receiver<u32>,
) -> Result<(), RunError> {
    listener.set_nonblocking(true).map_err(RunError::Listener)?;
    let listener = TcpListener::from_std(listener).map_err(RunError::Listener)?;
    let link = SupervisorLink::spawn(config.supervisor_socket.clone(), config.fingerprint());
    let app = App::new(config.clone(), link.clone());
    let mut link_state = link.watch();
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    // Serve at once, whatever the supervisor does: /health/live, /health (503 naming the
    // cause) and chat answers (503 with a request ID and a record) from the moment the
    // proxy listens. A chat request that arrives while this proxy says its first hello waits
    // for that (bounded; see `chat::admit`), so the backlog an upgrade leaves is routed, not
    // refused. systemd hears READY=1 once that first try is over (or after
    // STARTUP_LINK_WAIT), as before.
    tracing::info!(listen = %config.listen, "proxy serving");
    let mut ready_sent = false;
    let ready_deadline = tokio::time::sleep(STARTUP_LINK_WAIT);
    tokio::pin!(ready_deadline);

    // After a failed accept the accept branch waits until the backoff allows the next try,
    // inside its own future, so the signal and link branches are served meanwhile.
    let mut backoff = AcceptBackoff::default();
    let mut last_accept_error = None;
    let connections = Arc::new(ConnectionGauge::default());
    let trimmer = tokio::spawn(trim::trim_after_bursts(connections.clone()));
    loop {
        tokio::select! {
            accepted = accept_after(&listener, backoff.retry_at()) => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        if let Some(report) = backoff.succeeded() {
                            log_accept_report(report, last_accept_error.as_ref());
                        }
                        stream
                    }
                    Err(err) => {
                        let report = backoff.failed(Instant::now());
                        let err = last_accept_error.insert(err);
                        if let Some(report) = report {
                            log_accept_report(report, Some(err));
                        }
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let connection = http.serve_connection(
                    TokioIo::new(stream),
                    service_fn(move |request| route(app.clone(), request)),
                );
                let connection = graceful.watch(connection);
                let open = connections.opened();
                tokio::spawn(async move {
                    let _open = open;
                    if let Err(err) = connection.await {
                        tracing::debug!(error = %err, "client connection ended with an error");
                    }
                });
            }
            () = sleep_until_some(backoff.report_at()) => {
                let report = backoff.report(Instant::now());
                log_accept_report(report, last_accept_error.as_ref());
            }
            changed = signals.changed() => {
                if changed.is_err() || *signals.borrow() > 0 {
                    break;
                }
            }
            changed = link_state.changed() => {
                if changed.is_err() {
                    continue;
                }
                let (refused, attempted, unreachable) = {
                    let state = link_state.borrow();
                    (
                        state.refused.clone(),
                        state.first_attempt_done,
                        !state.connected && state.mismatch.is_none(),
                    )
                };
                if let Some(reason) = refused {
                    return Err(RunError::Refused(reason));
                }
                if attempted && !ready_sent {
                    ready_sent = true;
                    notify_ready(unreachable);
                }
            }
            () = &mut ready_deadline, if !ready_sent => {
                ready_sent = true;
                notify_ready(true);
            }
        }
    }

    drop(listener);
    trimmer.abort();
    tracing::info!("draining: no new connections, finishing accepted requests");
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    link.set_draining(true);
    // Every connection, then every forwarding task and body drain: the
    // tasks finish the traces (records and tickets) of requests whose
    // client already went away.
    let tasks = app.tasks.clone();
    let drain = async move {
        graceful.shutdown().await;
        tasks.idle().await;
    };
    let deadline = config.drain_timeout();
    let forced = async {
        loop {
            if signals.changed().await.is_err() || *signals.borrow() >= 2 {
                return "a second signal";
            }
        }
    };
    let expired = async {
        match deadline {
            Some(deadline) => {
                tokio::time::sleep(deadline).await;
                "the drain deadline (drain_ms)"
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = drain => tracing::info!("drained"),
        why = forced => tracing::warn!(running = app.tasks.running(), "{why}: abandoning remaining requests"),
        why = expired => tracing::warn!(running = app.tasks.running(), "{why}: abandoning remaining requests"),
    }
    // The last requests' records are still on their way to the supervisor,
    // which keeps them for the next proxy.
    if !link.flush(RECORD_FLUSH_LIMIT).await {
        tracing::warn!(
            records = link.state().unsent_records,
            "could not hand every accounting record to the supervisor before exiting; they are lost"
        );
    }
    Ok(())
}
