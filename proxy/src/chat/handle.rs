//! The chat request's orchestrator: [`handle`] runs the steps in order
//! (the module doc of `chat` lists them) and [`route`] resolves the model.
//! Every exit finishes the trace exactly once, which also ends the ticket.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_LENGTH};
use hyper::{Request, Response};
use strata_protocol::config::Resolution;

use crate::app::App;
use crate::response_body::ProxyBody;

use super::error::ChatError;
use super::read::{self, BodyError};
use super::request::{self, ChatRequest};
use super::respond::{self, StrataHeaders};
use super::trace::Trace;
use super::{admit, wait_first};

/// How long a request rejected before it has a ticket waits for the
/// supervisor to number it before the proxy numbers it locally.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Handles one chat completion request.
pub async fn handle(app: Arc<App>, request: Request<Incoming>) -> Response<ProxyBody> {
    let mut trace = Trace::start(&app);
    let mut headers = StrataHeaders::default();
    let accept = request.headers().get(ACCEPT).cloned();
    let routed = match route(&app, request, &mut trace).await {
        Ok(routed) => routed,
        Err(error) => {
            number_without_ticket(&app, &mut trace).await;
            headers.request_id = trace.request_id().to_owned();
            return respond::reject(trace, &headers, error);
        }
    };
    headers.concrete_model = Some(routed.model.clone());

    let queued = admit::enqueue(&app, &routed.model, &routed.chat, &mut trace).await;
    headers.request_id = trace.request_id().to_owned();
    let (events, granted) = match queued {
        Ok(queued) => queued,
        Err(error) => return respond::reject(trace, &headers, error),
    };

    let Routed { chat, alias, .. } = routed;
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
        return wait_first::respond_wait_first(job, trace, headers).await;
    }
    match job.admit_and_send(&mut trace, None).await {
        Err(error) => respond::reject(trace, &headers, error),
        Ok(dispatched) => {
            headers.tier = Some(chat.tier);
            let response = respond::respond_passthrough(&app, dispatched, trace, headers);
            // Let the forwarding task just spawned hand over what the backend
            // already sent (usually the whole JSON body arrives with its
            // head), so hyper writes the response head and the first chunk
            // in one write: one TCP segment and one client wakeup, not two.
            tokio::task::yield_now().await;
            response
        }
    }
}

/// A request whose model is resolved, before it has a ticket.
struct Routed {
    chat: ChatRequest,
    /// The concrete model ID.
    model: String,
    /// The request's `model`, when Strata may echo it (see
    /// [`crate::observe::ModelGate`]).
    alias: Option<String>,
}

/// Reads the body under the limit, parses the routing fields and resolves
/// the model, recording what it learns in the trace.
async fn route(
    app: &App,
    request: Request<Incoming>,
    trace: &mut Trace,
) -> Result<Routed, ChatError> {
    let declared_length = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let limit = app.config.max_request_body_bytes;
    let body = read::read_body(request.into_body(), declared_length, limit)
        .await
        .map_err(|err| match err {
            BodyError::TooLarge(rest) => {
                if let Some(rest) = rest {
                    app.tasks.spawn(read::drain(rest));
                }
                ChatError::BodyTooLarge
            }
            BodyError::Malformed => ChatError::BodyUnreadable,
            BodyError::Client => ChatError::BodyUnreadable,
        })?;

    let chat = request::parse(body)?;
    let registry = &app.config.registry;
    trace.requested(&chat, registry.is_known_name(&chat.model));
    let view = app.link.routing_view();
    let entry = match registry.resolve(&chat.model, view.loaded.as_deref()) {
        Resolution::Concrete(entry) | Resolution::Alias { model: entry, .. } => entry,
        Resolution::NotFound => return Err(ChatError::ModelNotFound),
    };
    trace.routed(entry);
    // Strata answers with the requested name instead of its model_name when
    // that name is one of the profile's aliases.
    let alias = entry
        .profile_info
        .as_ref()
        .filter(|info| info.aliases.contains(&chat.model))
        .map(|_| chat.model.clone());
    Ok(Routed {
        model: entry.id.clone(),
        alias,
        chat,
    })
}

/// Numbers a request that ends before it has a ticket (one round trip).
async fn number_without_ticket(app: &App, trace: &mut Trace) {
    let arrival = tokio::time::timeout(ARRIVAL_TIMEOUT, app.link.arrival())
        .await
        .ok()
        .flatten();
    trace.numbered(arrival);
}
