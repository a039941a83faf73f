//! From a queued ticket to a request the backend is answering.
//!
//! The supervisor's engine decides who goes next; this side only waits for
//! its word (admitted, load progress, granted or failed) and then
//! dispatches at once: there is no local queue or semaphore. From the grant
//! on, every wait also watches the lease: if it is revoked or the
//! supervisor link is lost meanwhile, the request ends with that outcome and
//! nothing is sent. Right before connecting, the lease's backend instance
//! must still be the serving one (the address is the same for every model).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::HeaderValue;
use strata_protocol::wire::{Grant, LeaseFailure, RevokeReason};

use crate::app::App;
use crate::errors::ApiError;
use crate::link::{LeaseEnd, TicketEvent, TicketEvents};
use crate::observe::ModelGate;

use super::respond::body_kind;
use super::upstream::{self, Upstream};
use super::{Failure, Phase, Reason, Trace, forward};

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

/// A request whose backend response headers have arrived.
pub struct Dispatched {
    pub upstream: Upstream,
    pub events: TicketEvents,
    /// Checks the response's `model` against the lease before it passes.
    pub gate: ModelGate,
    pub deadline: Option<Instant>,
}

/// What a ticket that ended without a lease means for the client.
pub fn lease_failure(failure: LeaseFailure) -> Failure {
    let unavailable = |code, message: &str, reason| {
        Failure::new(
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                code,
                message,
            ),
            reason,
        )
    };
    match failure {
        LeaseFailure::RoutingOff => unavailable(
            "routing_off",
            "routing is turned off on this router",
            Reason::RoutingOff,
        ),
        LeaseFailure::UnknownModel => Failure::new(
            ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                "the requested model does not exist or is not enabled",
            ),
            Reason::InvalidRequest,
        ),
        LeaseFailure::NotPrepared { status } => {
            let message = format!(
                "the model is not prepared to run on this machine ({})",
                status.as_str()
            );
            unavailable("model_not_prepared", &message, Reason::ModelNotPrepared)
        }
        LeaseFailure::LoadFailed { message, .. } => {
            let message = format!("the model failed to load: {message}");
            unavailable("model_load_error", &message, Reason::ModelLoadError)
        }
        LeaseFailure::Cooldown {
            message,
            remaining_ms,
        } => {
            let text = format!(
                "a recent model load failed ({message}); retry in {}s",
                remaining_ms.div_ceil(1000)
            );
            let mut failure = unavailable("model_load_error", &text, Reason::ModelLoadError);
            failure.error.retry_after = Some(remaining_ms.div_ceil(1000).max(1));
            failure
        }
        LeaseFailure::QueueFull => Failure::new(
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "server_error",
                "queue_full",
                "too many pending requests (max_pending)",
            ),
            Reason::QueueFull,
        ),
        LeaseFailure::QueueTimeout => Failure::new(
            ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                "queue_timeout",
                "the request waited longer than queue_ms for its model",
            ),
            Reason::QueueTimeout,
        ),
        LeaseFailure::ShuttingDown => unavailable(
            "shutting_down",
            "the router is shutting down",
            Reason::Shutdown,
        ),
    }
}

/// The outcome of a request whose lease ended before its response began.
pub fn lease_end_failure(end: LeaseEnd) -> Failure {
    let reason = match end {
        LeaseEnd::Revoked(RevokeReason::RoutingOff) => Reason::RoutingOff,
        LeaseEnd::Revoked(RevokeReason::Shutdown) => Reason::Shutdown,
        LeaseEnd::LinkLost => Reason::UpstreamError,
    };
    Failure::new(forward::lease_end_error(end), reason)
}

/// Runs `work` unless the granted lease ends first.
async fn while_leased<T>(
    events: &mut TicketEvents,
    work: impl Future<Output = T>,
) -> Result<T, Failure> {
    tokio::select! {
        output = work => Ok(output),
        end = events.ended() => Err(lease_end_failure(end)),
    }
}

impl Job {
    /// Waits for the grant, then sends the request; returns once the
    /// backend's response headers are in.
    pub async fn admit_and_send(mut self, trace: &mut Trace) -> Result<Dispatched, Failure> {
        let grant = match self.granted.take() {
            Some(grant) => grant,
            None => wait_for_grant(&mut self.events, trace).await?,
        };
        granted(trace, &grant);
        let config = &self.app.config;
        let deadline = config
            .response_timeout()
            .map(|limit| Instant::now() + limit);
        self.events.check().map_err(lease_end_failure)?;
        if !self.app.link.serves(&grant.instance) {
            tracing::warn!("the leased backend is no longer the serving one; request not sent");
            return Err(Failure::new(
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_error",
                    "the backend this request was routed to is gone",
                ),
                Reason::UpstreamError,
            ));
        }
        let send = upstream::send(grant.backend, self.body, self.accept);
        let send = async {
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), send).await.ok(),
                None => Some(send.await),
            }
        };
        let Some(sent) = while_leased(&mut self.events, send).await? else {
            return Err(Failure::new(
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "server_error",
                    "timeout",
                    "the backend did not answer within response_ms",
                ),
                Reason::Timeout,
            ));
        };
        let upstream = sent.map_err(|err| {
            tracing::warn!(error = %err, "backend request failed");
            Failure::new(
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "server_error",
                    "upstream_error",
                    "the backend could not be reached",
                ),
                Reason::UpstreamError,
            )
        })?;
        trace.upstream_headers_at = Some(Instant::now());
        trace.upstream_status = Some(upstream.response.status().as_u16());
        trace.phase = Phase::Generating;
        // Legacy mode: the engine lock passes on with the headers.
        if !config.scheduling.wait_when_busy
            && let Some(ticket) = &trace.ticket
        {
            ticket.headers_received();
        }
        let kind = body_kind(upstream.response.headers());
        let gate = ModelGate::new(kind, &grant.upstream_model, self.alias.as_deref());
        Ok(Dispatched {
            upstream,
            events: self.events,
            gate,
            deadline,
        })
    }
}

/// Records what the grant says about admission and the load.
fn granted(trace: &mut Trace, grant: &Grant) {
    trace.admitted();
    trace.granted = true;
    trace.model_switch = grant.model_switch;
    trace.model_load_ms = grant.load_ms;
}

/// Waits on a queued ticket until it is granted or fails. Legacy
/// `queue_ms` is the supervisor's to enforce (it fails the ticket).
async fn wait_for_grant(events: &mut TicketEvents, trace: &mut Trace) -> Result<Grant, Failure> {
    loop {
        match events.next_event().await {
            TicketEvent::Queued(_) => {}
            TicketEvent::Admitted | TicketEvent::Progress(_) => trace.admitted(),
            TicketEvent::Granted(grant) => return Ok(grant),
            TicketEvent::Failed { failure, .. } => return Err(failed(trace, failure)),
            TicketEvent::Revoked(reason) => {
                return Err(lease_end_failure(LeaseEnd::Revoked(reason)));
            }
            TicketEvent::LinkLost => return Err(lease_end_failure(LeaseEnd::LinkLost)),
        }
    }
}

/// A ticket that failed; a failed load still reports its figures.
pub fn failed(trace: &mut Trace, failure: LeaseFailure) -> Failure {
    if let LeaseFailure::LoadFailed {
        model_switch,
        load_ms,
        ..
    } = &failure
    {
        trace.model_switch = *model_switch;
        trace.model_load_ms = *load_ms;
    }
    lease_failure(failure)
}
