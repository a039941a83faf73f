//! Shaping a chat response: a router-made error ([`reject`]), the
//! backend's own status and headers passed through
//! ([`respond_passthrough`]), or the router's own SSE head for a wait-first
//! stream ([`sse_head`]; `wait_first` decides when it goes out). Every
//! response carries the `x-strata-*` headers it has earned so far.

use hyper::Response;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;

use crate::app::App;
use crate::observe::{BodyKind, ResponseObserver};
use crate::response_body::ProxyBody;

use super::admit::Dispatched;
use super::error::ChatError;
use super::forward::{self, AfterHeaders, BackendBody, ForwardEnd, Watch};
use super::trace::Trace;

const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-strata-request-id");
const CONCRETE_MODEL_HEADER: HeaderName = HeaderName::from_static("x-strata-concrete-model");
const SERVICE_TIER_HEADER: HeaderName = HeaderName::from_static("x-strata-service-tier");

/// The `x-strata-*` headers of one response.
#[derive(Clone, Default)]
pub struct StrataHeaders {
    pub request_id: String,
    pub concrete_model: Option<String>,
    pub tier: Option<ServiceTier>,
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
pub fn reject(mut trace: Trace, headers: &StrataHeaders, error: ChatError) -> Response<ProxyBody> {
    // A client that went away mid-upload reads no answer (it is sent for
    // form's sake), so its record keeps status null.
    // A failed or cooling start says why (the supervisor's generic cause).
    let start = trace.start_failure.take().filter(|_| {
        matches!(
            error,
            ChatError::LoadFailed { .. } | ChatError::Cooldown { .. }
        )
    });
    if error != ChatError::BodyAbandoned {
        trace.status = Some(error.status().as_u16());
        trace.router_body_bytes = error.reply().body_with(start.as_ref()).len() as u64;
    }
    let mut response = error.reply().into_response_with(start.as_ref());
    headers.apply(response.headers_mut());
    trace.finish(error.reason());
    response
}

/// Headers copied from the backend's response; the rest (its
/// `Connection: close` in particular) describe its own connection.
const PASSTHROUGH_HEADERS: [&str; 4] = [
    "content-type",
    "content-length",
    "cache-control",
    "x-accel-buffering",
];

/// Passes the backend's status and headers through and streams its body.
pub fn respond_passthrough<B: BackendBody>(
    app: &App,
    mut dispatched: Dispatched<B>,
    mut trace: Trace,
    headers: StrataHeaders,
) -> Response<ProxyBody> {
    let upstream_headers = dispatched.response.headers();
    let kind = BodyKind::from_headers(upstream_headers);
    let (tx, body) = ProxyBody::channel();
    let mut response = Response::new(body);
    *response.status_mut() = dispatched.response.status();
    for name in PASSTHROUGH_HEADERS {
        if let Some(value) = upstream_headers.get(name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    headers.apply(response.headers_mut());
    trace.status = Some(response.status().as_u16());
    app.tasks.spawn(async move {
        let mut observer = ResponseObserver::new(kind);
        let end = forward::forward(
            dispatched.response.body_mut(),
            &tx,
            &mut observer,
            &mut dispatched.gate,
            AfterHeaders::TransportError,
            Watch {
                lease: &mut dispatched.events,
                deadline: dispatched.deadline,
                keepalive: false,
                first_keepalive: None,
            },
        )
        .await;
        trace.observed = Some(observer.finish());
        let upstream_ok = trace
            .upstream_status
            .is_some_and(|status| (200..300).contains(&status));
        trace.finish(end_reason(end, upstream_ok));
        // Finishing the trace sent the record and ended the lease in one
        // message; the backend connection closes now.
        drop(dispatched);
    });
    response
}

/// The record's reason for a forwarded body that ended with `end`.
pub fn end_reason(end: ForwardEnd, upstream_ok: bool) -> Reason {
    match end {
        ForwardEnd::Completed if upstream_ok => Reason::Completed,
        // The backend's own error response, passed through whole.
        ForwardEnd::Completed => Reason::UpstreamError,
        ForwardEnd::ClientGone => Reason::ClientDisconnect,
        ForwardEnd::ClientStalled => Reason::Timeout,
        ForwardEnd::Failed(error) => error.reason(),
    }
}

/// The `200` and SSE headers of a wait-first stream around `body`.
pub fn sse_head(body: ProxyBody, headers: &StrataHeaders) -> Response<ProxyBody> {
    let mut response = Response::new(body);
    let response_headers = response.headers_mut();
    response_headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.apply(response_headers);
    response
}
