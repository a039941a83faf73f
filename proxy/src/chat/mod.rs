//! `POST /v1/chat/completions`: from request to forwarded response.
//!
//! The path, in order: start the trace (arrival), read the body under the
//! size limit (`read`), parse just the routing fields (`request`), resolve
//! the model, enqueue a ticket in the supervisor's one queue, whose first
//! answer numbers the request, then wait for the grant and send the request
//! to the leased backend (`admit`), and forward its body (`respond`,
//! `forward`). A request rejected before it has a ticket is numbered with
//! one `Arrive` round trip. Every exit finishes the trace exactly once,
//! which also ends the ticket.
//!
//! Streaming requests in wait-first mode get `200` and SSE headers as soon
//! as they are numbered, comments while they wait, and any later failure as
//! one `event: error` frame. Other requests keep the backend's status and
//! headers.

mod admit;
mod forward;
mod read;
mod request;
mod respond;
mod trace;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use strata_protocol::config::Resolution;
use strata_protocol::wire::ServiceTier;

use crate::app::App;
use crate::body::ProxyBody;
use crate::errors::ApiError;
use crate::link::{LeaseEnd, TicketEvent};

use read::BodyError;
pub use trace::{Phase, Reason, Trace};

pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-strata-request-id");
pub const CONCRETE_MODEL_HEADER: HeaderName = HeaderName::from_static("x-strata-concrete-model");
pub const SERVICE_TIER_HEADER: HeaderName = HeaderName::from_static("x-strata-service-tier");

/// How long a request rejected before it has a ticket waits for the
/// supervisor to number it before the proxy numbers it locally.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(2);

/// A failure before the response body: what the client sees and why.
struct Failure {
    error: ApiError,
    reason: Reason,
}

impl Failure {
    fn new(error: ApiError, reason: Reason) -> Self {
        Failure { error, reason }
    }
}

/// The `x-strata-*` headers of one response.
#[derive(Clone, Default)]
struct StrataHeaders {
    request_id: String,
    concrete_model: Option<String>,
    tier: Option<ServiceTier>,
}

impl StrataHeaders {
    fn apply(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.request_id) {
            headers.insert(REQUEST_ID_HEADER, value);
        }
        if let Some(model) = &self.concrete_model
            && let Ok(value) = HeaderValue::from_str(model)
        {
            headers.insert(CONCRETE_MODEL_HEADER, value);
        }
        if let Some(tier) = self.tier {
            headers.insert(SERVICE_TIER_HEADER, HeaderValue::from_static(tier.as_str()));
        }
    }
}

/// Answers with a router-made error and finishes the trace.
fn reject(mut trace: Trace, headers: &StrataHeaders, failure: Failure) -> Response<ProxyBody> {
    trace.status = Some(failure.error.status.as_u16());
    trace.router_body_bytes = failure.error.body_json().to_string().len() as u64;
    let mut response = failure.error.into_response();
    headers.apply(response.headers_mut());
    trace.finish(failure.reason);
    response
}

/// Numbers a request that ends before it has a ticket (one round trip).
async fn number_without_ticket(app: &App, trace: &mut Trace) {
    let arrival = tokio::time::timeout(ARRIVAL_TIMEOUT, app.link.arrival())
        .await
        .ok()
        .flatten();
    trace.numbered(arrival);
}

/// Handles one chat completion request.
pub async fn handle(app: Arc<App>, request: Request<Incoming>) -> Response<ProxyBody> {
    let mut trace = Trace::start(&app);
    let accept = request.headers().get(ACCEPT).cloned();
    let declared_length = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let limit = app.config.max_request_body_bytes;
    let body = read::read_body(request.into_body(), declared_length, limit).await;
    let mut headers = StrataHeaders::default();

    let invalid = |code, message: &str| {
        Failure::new(
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                code,
                message,
            ),
            Reason::InvalidRequest,
        )
    };
    let body = match body {
        Ok(body) => body,
        Err(BodyError::TooLarge(rest)) => {
            if let Some(rest) = rest {
                app.tasks.spawn(read::drain(rest));
            }
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id.clone();
            let error = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                "request body exceeds max_request_body_bytes",
            );
            return reject(trace, &headers, Failure::new(error, Reason::InvalidRequest));
        }
        Err(BodyError::Malformed) => {
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id.clone();
            let failure = invalid("incomplete_body", "the request body could not be read");
            return reject(trace, &headers, failure);
        }
        Err(BodyError::Client) => {
            // The client went away mid-upload: the answer is for form's
            // sake (nobody reads it), so the record keeps status null.
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id.clone();
            trace.finish(Reason::ClientDisconnect);
            let mut response = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "incomplete_body",
                "the request body could not be read",
            )
            .into_response();
            headers.apply(response.headers_mut());
            return response;
        }
    };

    let chat = match request::parse(body) {
        Ok(chat) => chat,
        Err(err) => {
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id.clone();
            return reject(trace, &headers, invalid(err.code(), err.message()));
        }
    };
    trace.stream = chat.stream;
    trace.tier = chat.tier;
    let registry = &app.config.registry;
    if registry.is_known_name(&chat.model) {
        trace.model_requested = Some(chat.model.clone());
    }
    let view = app.link.routing_view();
    let entry = match registry.resolve(&chat.model, view.loaded.as_deref()) {
        Resolution::Concrete(entry) | Resolution::Alias { model: entry, .. } => entry,
        Resolution::NotFound => {
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id.clone();
            let error = ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                "the requested model does not exist or is not enabled",
            );
            return reject(trace, &headers, Failure::new(error, Reason::InvalidRequest));
        }
    };
    trace.model_resolved = Some(entry.id.clone());
    trace.upstream_model = Some(entry.upstream_model.clone());
    headers.concrete_model = Some(entry.id.clone());

    let unreachable = || {
        Failure::new(
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "supervisor_unavailable",
                "the router's supervisor is not reachable; try again shortly",
            ),
            Reason::UpstreamError,
        )
    };
    if !view.connected {
        trace.numbered(None);
        headers.request_id = trace.request_id.clone();
        return reject(trace, &headers, unreachable());
    }
    // Strata answers with the requested name instead of its model_name when
    // that name is one of the profile's aliases.
    let alias = entry
        .profile_info
        .as_ref()
        .filter(|info| info.aliases.contains(&chat.model))
        .map(|_| chat.model.clone());
    let (ticket, mut events) = app
        .link
        .enqueue(&entry.id, chat.tier, chat.upstream_body.clone());
    trace.ticket = Some(ticket);

    // The first answer numbers the request (and may already be the grant).
    let mut granted = None;
    match events.next_event().await {
        TicketEvent::Queued(arrival) => trace.numbered(Some(arrival)),
        TicketEvent::Granted(grant) => {
            trace.numbered(Some(grant.arrival));
            granted = Some(grant);
        }
        TicketEvent::Failed { arrival, failure } => {
            trace.numbered(Some(arrival));
            headers.request_id = trace.request_id.clone();
            let failure = admit::failed(&mut trace, failure);
            return reject(trace, &headers, failure);
        }
        TicketEvent::LinkLost => {
            trace.numbered(None);
            headers.request_id = trace.request_id.clone();
            return reject(
                trace,
                &headers,
                admit::lease_end_failure(LeaseEnd::LinkLost),
            );
        }
        // Not a first answer; the supervisor never sends these first.
        TicketEvent::Admitted | TicketEvent::Progress(_) | TicketEvent::Revoked(_) => {
            trace.numbered(None);
            headers.request_id = trace.request_id.clone();
            return reject(trace, &headers, unreachable());
        }
    }
    headers.request_id = trace.request_id.clone();

    let job = admit::Job {
        app: app.clone(),
        alias,
        body: chat.upstream_body,
        accept,
        events,
        granted,
    };
    if chat.stream && app.config.scheduling.wait_when_busy {
        headers.tier = Some(chat.tier);
        return respond::respond_early(job, trace, headers);
    }
    match job.admit_and_send(&mut trace).await {
        Err(failure) => reject(trace, &headers, failure),
        Ok(dispatched) => {
            headers.tier = Some(chat.tier);
            respond::respond_passthrough(&app, dispatched, trace, headers)
        }
    }
}
