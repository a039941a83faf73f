//! From a routed request to one the backend is answering.
//!
//! The request's ticket is enqueued in the supervisor's one queue, whose
//! first answer numbers it. The supervisor's engine decides who goes next;
//! this side only waits for its word (admitted, load progress, granted or
//! failed) and then dispatches at once: there is no local queue or
//! semaphore. From the grant on, every wait also watches the lease: if it
//! is revoked or the supervisor link is lost meanwhile, the request ends
//! with that outcome and nothing is sent. Right before connecting, the
//! lease's backend instance must still be the serving one (the address is
//! the same for every model).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Response;
use hyper::header::HeaderValue;
use strata_protocol::wire::{Grant, LeaseFailure};

use crate::app::App;
use crate::link::{LeaseEnd, Mismatch, TicketEvent, TicketEvents};
use crate::observe::{BodyKind, ModelGate};
use crate::upstream::{self, UpstreamBody};

use super::error::ChatError;
use super::progress::WaitProgress;
use super::request::ChatRequest;
use super::trace::Trace;

/// A routed request on its way to the backend.
pub struct Job {
    pub app: Arc<App>,
    /// The request's `model`, when Strata may echo it (see [`ModelGate`]).
    pub alias: Option<String>,
    pub body: Bytes,
    pub accept: Option<HeaderValue>,
    pub events: TicketEvents,
    /// The supervisor's first answer, when it was already the grant.
    pub granted: Option<Grant>,
}

/// A request whose backend response headers have arrived. `B` is the
/// response body: the backend connection's own, or (tests of the
/// wait-first task) a synthetic one.
pub struct Dispatched<B = UpstreamBody> {
    /// Dropping it mid-body closes the backend connection: that is how a
    /// generation is cancelled.
    pub response: Response<B>,
    pub events: TicketEvents,
    /// Checks the response's `model` against the lease before it passes.
    pub gate: ModelGate,
    pub deadline: Option<Instant>,
}

/// How long a request that arrives while a starting proxy first tries to
/// reach its supervisor waits for that try (a hello takes milliseconds; an
/// unreachable socket fails at once; this bounds a supervisor that accepts
/// and does not answer).
const FIRST_ATTEMPT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Enqueues the request's ticket for `model` and takes the supervisor's
/// first answer, which numbers the request and may already be the grant.
pub async fn enqueue(
    app: &App,
    model: &str,
    chat: &ChatRequest,
    trace: &mut Trace,
) -> Result<(TicketEvents, Option<Grant>), ChatError> {
    app.link.first_attempt(FIRST_ATTEMPT_WAIT).await;
    let view = app.link.routing_view();
    if !view.connected {
        trace.numbered(None);
        return Err(match view.mismatch {
            Some(Mismatch::Config) => ChatError::ConfigMismatch,
            Some(Mismatch::Version) => ChatError::VersionMismatch,
            None => ChatError::SupervisorUnavailable,
        });
    }
    let (ticket, mut events) = app.link.enqueue(
        model,
        chat.tier,
        trace.ticket_request(),
        chat.upstream_body.clone(),
    );
    trace.enqueued(ticket);
    match events.next_event().await {
        TicketEvent::Queued(arrival) => {
            trace.numbered(Some(arrival));
            Ok((events, None))
        }
        TicketEvent::Granted(grant) => {
            trace.numbered(Some(grant.arrival));
            Ok((events, Some(*grant)))
        }
        TicketEvent::Failed { arrival, failure } => {
            trace.numbered(Some(arrival));
            Err(failed(trace, failure))
        }
        TicketEvent::LinkLost => {
            trace.numbered(None);
            Err(ChatError::SupervisorLost)
        }
        // Not a first answer; the supervisor never sends these first.
        TicketEvent::Admitted | TicketEvent::Progress(..) | TicketEvent::Revoked(_) => {
            trace.numbered(None);
            Err(ChatError::SupervisorUnavailable)
        }
    }
}

/// Runs `work` unless the granted lease ends first.
async fn while_leased<T>(
    events: &mut TicketEvents,
    work: impl Future<Output = T>,
) -> Result<T, ChatError> {
    tokio::select! {
        output = work => Ok(output),
        end = events.ended() => Err(ChatError::from(end)),
    }
}

impl Job {
    /// Waits for the grant, then sends the request; returns once the
    /// backend's response headers are in.
    /// `progress`, for a waiting stream, learns where the request is.
    pub async fn admit_and_send(
        mut self,
        trace: &mut Trace,
        progress: Option<&WaitProgress>,
    ) -> Result<Dispatched, ChatError> {
        let grant = match self.granted.take() {
            Some(grant) => grant,
            None => wait_for_grant(&mut self.events, trace, progress).await?,
        };
        trace.granted(&grant);
        if let Some(progress) = progress {
            progress.sent(Instant::now());
        }
        let config = &self.app.config;
        let deadline = config
            .response_timeout()
            .map(|limit| Instant::now() + limit);
        self.events.check().map_err(ChatError::from)?;
        if !self.app.link.serves(&grant.instance) {
            tracing::warn!("the leased backend is no longer the serving one; request not sent");
            return Err(ChatError::BackendGone);
        }
        // Boxed: a waiting request's task would otherwise reserve room for
        // the whole send (connect, write, head parse) while it only waits.
        let send = Box::pin(upstream::send(
            &self.app.upstream_pool,
            grant.backend,
            grant.instance,
            self.body,
            self.accept,
        ));
        // A stream's headers are its first bytes: `stream_idle_ms` bounds
        // their wait too, whichever limit comes first naming the error.
        let silent_until = if trace.stream() {
            config
                .stream_idle_timeout()
                .map(|limit| Instant::now() + limit)
        } else {
            None
        };
        let head_limit = match (deadline, silent_until) {
            (Some(deadline), Some(silent)) if silent < deadline => {
                Some((silent, ChatError::StreamIdle))
            }
            (Some(deadline), _) => Some((deadline, ChatError::Timeout)),
            (None, Some(silent)) => Some((silent, ChatError::StreamIdle)),
            (None, None) => None,
        };
        let send = async {
            match &head_limit {
                Some((at, _)) => tokio::time::timeout_at((*at).into(), send).await.ok(),
                None => Some(send.await),
            }
        };
        let Some(sent) = while_leased(&mut self.events, send).await? else {
            return Err(head_limit.map_or(ChatError::Timeout, |(_, error)| error));
        };
        let upstream = sent.map_err(|err| {
            tracing::warn!(error = %err, "backend request failed");
            ChatError::BackendUnreachable
        })?;
        trace.upstream_headers(upstream.response.status().as_u16());
        // Legacy mode: the engine lock passes on with the headers.
        if !config.scheduling.wait_when_busy
            && let Some(ticket) = trace.ticket()
        {
            ticket.headers_received();
        }
        let kind = BodyKind::from_headers(upstream.response.headers());
        let gate = ModelGate::new(kind, &grant.upstream_model, self.alias.as_deref());
        Ok(Dispatched {
            response: upstream.response,
            events: self.events,
            gate,
            deadline,
        })
    }
}

/// Waits on a queued ticket until it is granted or fails. Legacy
/// `queue_ms` is the supervisor's to enforce (it fails the ticket).
async fn wait_for_grant(
    events: &mut TicketEvents,
    trace: &mut Trace,
    progress: Option<&WaitProgress>,
) -> Result<Grant, ChatError> {
    loop {
        match events.next_event().await {
            TicketEvent::Queued(_) => {}
            TicketEvent::Admitted => {
                trace.admitted();
                if let Some(progress) = progress {
                    progress.admitted(Instant::now());
                }
            }
            TicketEvent::Progress(phase, elapsed_ms, typical_load_ms) => {
                trace.admitted();
                if let Some(progress) = progress {
                    progress.load_progress(phase, elapsed_ms, typical_load_ms, Instant::now());
                }
            }
            TicketEvent::Granted(grant) => return Ok(*grant),
            TicketEvent::Failed { failure, .. } => return Err(failed(trace, failure)),
            TicketEvent::Revoked(reason) => {
                return Err(ChatError::from(LeaseEnd::Revoked(reason)));
            }
            TicketEvent::LinkLost => return Err(ChatError::from(LeaseEnd::LinkLost)),
        }
    }
}

/// A ticket that failed; a failed load still reports its figures. A failed
/// or cooling start keeps the supervisor's generic cause for the error body
/// (`last_error`; see `error.rs`); the rest of what the supervisor says (a
/// model's status) goes to the log only.
fn failed(trace: &mut Trace, failure: LeaseFailure) -> ChatError {
    trace.refused(&failure);
    match &failure {
        LeaseFailure::LoadFailed { message, .. } => {
            tracing::debug!(
                request_id = %trace.request_id(),
                error = %message,
                "the model failed to load; request refused"
            );
        }
        LeaseFailure::Cooldown {
            message,
            remaining_ms,
            ..
        } => {
            tracing::debug!(
                request_id = %trace.request_id(),
                error = %message,
                remaining_ms,
                "a recent model load failed; request refused"
            );
        }
        LeaseFailure::NotPrepared { status } => {
            tracing::debug!(
                request_id = %trace.request_id(),
                status = status.as_str(),
                "the model is not prepared; request refused"
            );
        }
        _ => {}
    }
    ChatError::from(&failure)
}
