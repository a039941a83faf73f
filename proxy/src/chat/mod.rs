//! `POST /v1/chat/completions`: from request to forwarded response.
//!
//! The path, in order: start the trace (arrival), ask the supervisor for an
//! arrival number while the body is read under the size limit, parse just
//! the routing fields, resolve the model, apply admission limits, lease the
//! model from the supervisor, send the request to the leased backend and
//! forward its body. Every exit finishes the trace exactly once.
//!
//! Streaming requests in wait-first mode get `200` and SSE headers right
//! away, comments while they wait, and any later failure as one
//! `event: error` frame. Other requests keep the backend's status and
//! headers.

mod forward;
mod request;
mod trace;
mod upstream;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
};
use hyper::{Request, Response, StatusCode};
use strata_protocol::config::Resolution;
use strata_protocol::ids;
use strata_protocol::wire::{LeaseFailure, LeaseGrant, LeasePhase, RevokeReason, ServiceTier};
use tokio::sync::OwnedSemaphorePermit;

use crate::app::{App, CountGuard};
use crate::body::{BodySender, ProxyBody};
use crate::errors::ApiError;
use crate::link::{Lease, LeaseEnd, LeaseEvent};
use crate::observe::{BodyKind, ModelGate, ResponseObserver};

use forward::{AfterHeaders, ForwardEnd, KEEPALIVE_COMMENT, KEEPALIVE_INTERVAL, Watch};
pub use trace::{Phase, Reason, Trace};
use upstream::Upstream;

pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-strata-request-id");
pub const CONCRETE_MODEL_HEADER: HeaderName = HeaderName::from_static("x-strata-concrete-model");
pub const SERVICE_TIER_HEADER: HeaderName = HeaderName::from_static("x-strata-service-tier");

/// How long a request waits for the supervisor to number it before the
/// proxy numbers it locally.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(2);

/// How much of an oversized body is read and discarded after the 413, so
/// the client gets the answer instead of a connection reset.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
const DRAIN_LIMIT_TIME: Duration = Duration::from_secs(10);

/// How much of a backend error body is read to describe it in an
/// `event: error` frame.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

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

/// Handles one chat completion request.
pub async fn handle(app: Arc<App>, request: Request<Incoming>) -> Response<ProxyBody> {
    let mut trace = Trace::start(&app);
    let arrival = {
        let link = app.link.clone();
        tokio::spawn(async move {
            tokio::time::timeout(ARRIVAL_TIMEOUT, link.arrival())
                .await
                .ok()
                .flatten()
        })
    };
    let accept = request.headers().get(ACCEPT).cloned();
    let declared_length = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let limit = app.config.max_request_body_bytes;
    let body = read_body(request.into_body(), declared_length, limit).await;

    trace.arrival_seq = arrival.await.ok().flatten();
    let view = app.link.routing_view();
    trace.request_id = match (trace.arrival_seq, view.instance_id) {
        (Some(seq), Some(instance)) => ids::request_id(&instance, seq),
        // The supervisor is unreachable: still a unique, recognisable ID.
        _ => {
            let n = app
                .counters
                .unlinked_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            format!("unlinked-{}-{n}", std::process::id())
        }
    };
    let mut headers = StrataHeaders {
        request_id: trace.request_id.clone(),
        ..StrataHeaders::default()
    };

    let body = match body {
        Ok(body) => body,
        Err(BodyError::TooLarge(rest)) => {
            if let Some(rest) = rest {
                tokio::spawn(drain(rest));
            }
            let error = ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                "request body exceeds max_request_body_bytes",
            );
            return reject(trace, &headers, Failure::new(error, Reason::InvalidRequest));
        }
        Err(BodyError::Malformed) => {
            let error = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "incomplete_body",
                "the request body could not be read",
            );
            return reject(trace, &headers, Failure::new(error, Reason::InvalidRequest));
        }
        Err(BodyError::Client) => {
            // The client went away mid-upload: the answer is for form's
            // sake (nobody reads it), so the record keeps status null.
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
            let error = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                err.code(),
                err.message(),
            );
            return reject(trace, &headers, Failure::new(error, Reason::InvalidRequest));
        }
    };
    trace.stream = chat.stream;
    trace.tier = chat.tier;
    let registry = &app.config.registry;
    if registry.is_known_name(&chat.model) {
        trace.model_requested = Some(chat.model.clone());
    }
    // Fresh: the loaded model may have changed while the body was read.
    let view = app.link.routing_view();
    let entry = match registry.resolve(&chat.model, view.loaded.as_deref()) {
        Resolution::Concrete(entry) | Resolution::Alias { model: entry, .. } => entry,
        Resolution::NotFound => {
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

    if !view.connected {
        let error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "supervisor_unavailable",
            "the router's supervisor is not reachable; try again shortly",
        );
        return reject(trace, &headers, Failure::new(error, Reason::UpstreamError));
    }
    let pending_permit = match &app.pending {
        Some(pending) => match pending.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                let error = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "server_error",
                    "queue_full",
                    "too many pending requests (max_pending)",
                );
                return reject(trace, &headers, Failure::new(error, Reason::QueueFull));
            }
        },
        None => None,
    };

    // Strata answers with the requested name instead of its model_name when
    // that name is one of the profile's aliases.
    let alias = entry
        .profile_info
        .as_ref()
        .filter(|info| info.aliases.contains(&chat.model))
        .map(|_| chat.model.clone());
    let job = Job {
        app: app.clone(),
        model: entry.id.clone(),
        alias,
        tier: chat.tier,
        body: chat.upstream_body,
        accept,
        _pending: pending_permit,
    };
    if chat.stream && app.config.scheduling.wait_when_busy {
        headers.tier = Some(chat.tier);
        return respond_early(job, trace, headers);
    }
    match job.admit_and_send(&mut trace).await {
        Err(failure) => reject(trace, &headers, failure),
        Ok(dispatched) => {
            headers.tier = Some(chat.tier);
            respond_passthrough(dispatched, trace, headers)
        }
    }
}

/// Why a request body could not be used.
enum BodyError {
    /// Over the limit; the rest of the body, if any is left to discard.
    TooLarge(Option<Incoming>),
    /// The client's body ended early (it went away mid-upload).
    Client,
    /// The client's body framing is invalid (a bad chunk size line, say).
    Malformed,
}

/// Tells a malformed body from one the client abandoned: hyper reports bad
/// framing as an `InvalidInput`/`InvalidData` I/O error and an early end as
/// `UnexpectedEof` (or a connection error).
fn body_error(err: &hyper::Error) -> BodyError {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                    BodyError::Malformed
                }
                _ => BodyError::Client,
            };
        }
        source = cause.source();
    }
    BodyError::Client
}

/// Reads the whole body, refusing a declared length over `limit` before
/// reading anything and stopping a chunked body as soon as it passes it.
async fn read_body(
    mut body: Incoming,
    declared_length: Option<u64>,
    limit: u64,
) -> Result<Bytes, BodyError> {
    if declared_length.is_some_and(|length| length > limit) {
        return Err(BodyError::TooLarge(Some(body)));
    }
    let mut buffer = BytesMut::with_capacity(declared_length.unwrap_or(0).min(limit) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| body_error(&err))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() as u64 + data.len() as u64 > limit {
                return Err(BodyError::TooLarge(Some(body)));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// Discards what is left of a rejected body, bounded in bytes and time, so
/// the connection closes cleanly after the error response.
async fn drain(mut body: Incoming) {
    let mut seen = 0u64;
    let _ = tokio::time::timeout(DRAIN_LIMIT_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len() as u64;
                if seen > DRAIN_LIMIT_BYTES {
                    break;
                }
            }
        }
    })
    .await;
}

/// A routed request on its way to the backend.
struct Job {
    app: Arc<App>,
    model: String,
    /// The request's `model`, when Strata may echo it (see [`ModelGate`]).
    alias: Option<String>,
    tier: ServiceTier,
    body: Bytes,
    accept: Option<HeaderValue>,
    /// Legacy mode's `max_pending` slot, held until the response ends.
    _pending: Option<OwnedSemaphorePermit>,
}

/// A request whose backend response headers have arrived.
struct Dispatched {
    upstream: Upstream,
    lease: Lease,
    /// Checks the response's `model` against the lease before it passes.
    gate: ModelGate,
    deadline: Option<Instant>,
    _in_flight: CountGuard,
    _permits: Vec<OwnedSemaphorePermit>,
    _pending: Option<OwnedSemaphorePermit>,
}

fn lease_failure(failure: LeaseFailure) -> Failure {
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
        LeaseFailure::ShuttingDown => unavailable(
            "shutting_down",
            "the router is shutting down",
            Reason::Shutdown,
        ),
    }
}

impl Job {
    /// Leases the model, takes the dispatch permits and sends the request;
    /// returns once the backend's response headers are in.
    ///
    /// From the grant on, every wait also watches the lease: if it is
    /// revoked or the supervisor link is lost meanwhile, the request ends
    /// with that outcome and nothing is sent. Right before connecting, the
    /// lease's backend instance must still be the serving one (the address
    /// is the same for every model).
    async fn admit_and_send(self, trace: &mut Trace) -> Result<Dispatched, Failure> {
        let config = &self.app.config;
        // Legacy queue_ms bounds the wait for admission only; a load that
        // admission starts is bounded by startup_ms in the supervisor.
        let queue_deadline = config.queue_timeout().map(|limit| Instant::now() + limit);
        let (mut lease, grant) = {
            let _queued = CountGuard::queued(&self.app, self.tier);
            let mut lease = self.app.link.acquire(&self.model, self.tier);
            let grant = wait_for_grant(&mut lease, trace, queue_deadline).await?;
            (lease, grant)
        };
        let in_flight = CountGuard::in_flight(&self.app);
        let mut permits = Vec::new();
        for semaphore in [&self.app.dispatch, &self.app.cache_active]
            .into_iter()
            .flatten()
        {
            let permit = while_leased(&mut lease, semaphore.clone().acquire_owned()).await?;
            permits.push(permit.expect("the semaphores are never closed"));
        }
        let deadline = config
            .response_timeout()
            .map(|limit| Instant::now() + limit);
        lease.check().map_err(lease_end_failure)?;
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
        let Some(sent) = while_leased(&mut lease, send).await? else {
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
        let kind = body_kind(upstream.response.headers());
        let gate = ModelGate::new(kind, &grant.upstream_model, self.alias.as_deref());
        Ok(Dispatched {
            upstream,
            lease,
            gate,
            deadline,
            _in_flight: in_flight,
            _permits: permits,
            _pending: self._pending,
        })
    }
}

/// Runs `work` unless the granted lease ends first.
async fn while_leased<T>(lease: &mut Lease, work: impl Future<Output = T>) -> Result<T, Failure> {
    tokio::select! {
        output = work => Ok(output),
        end = lease.ended() => Err(lease_end_failure(end)),
    }
}

/// The outcome of a request whose lease ended before its response began.
fn lease_end_failure(end: LeaseEnd) -> Failure {
    let reason = match end {
        LeaseEnd::Revoked(RevokeReason::RoutingOff) => Reason::RoutingOff,
        LeaseEnd::Revoked(RevokeReason::Shutdown) => Reason::Shutdown,
        LeaseEnd::LinkLost => Reason::UpstreamError,
    };
    Failure::new(forward::lease_end_error(end), reason)
}

/// Waits on a lease request until it is granted or fails.
async fn wait_for_grant(
    lease: &mut Lease,
    trace: &mut Trace,
    deadline: Option<Instant>,
) -> Result<LeaseGrant, Failure> {
    loop {
        let deadline = deadline.filter(|_| trace.lease_at.is_none());
        let event = match deadline {
            None => lease.next_event().await,
            Some(deadline) => {
                match tokio::time::timeout_at(deadline.into(), lease.next_event()).await {
                    Ok(event) => event,
                    Err(_) => {
                        return Err(Failure::new(
                            ApiError::new(
                                StatusCode::GATEWAY_TIMEOUT,
                                "server_error",
                                "queue_timeout",
                                "the request waited longer than queue_ms for its model",
                            ),
                            Reason::QueueTimeout,
                        ));
                    }
                }
            }
        };
        match event {
            LeaseEvent::Progress(LeasePhase::QueuedBehindOtherModel) => {}
            LeaseEvent::Progress(_) => trace.admitted(),
            LeaseEvent::Granted(grant) => {
                trace.admitted();
                trace.granted = true;
                trace.model_switch = grant.model_switch;
                trace.model_load_ms = grant.load_ms;
                return Ok(grant);
            }
            LeaseEvent::Failed(failure) => {
                if let LeaseFailure::LoadFailed {
                    model_switch,
                    load_ms,
                    ..
                } = &failure
                {
                    trace.model_switch = *model_switch;
                    trace.model_load_ms = *load_ms;
                }
                return Err(lease_failure(failure));
            }
            LeaseEvent::Revoked(reason) => {
                return Err(lease_end_failure(LeaseEnd::Revoked(reason)));
            }
            LeaseEvent::LinkLost => return Err(lease_end_failure(LeaseEnd::LinkLost)),
        }
    }
}

fn body_kind(headers: &HeaderMap) -> BodyKind {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("text/event-stream") {
        BodyKind::Sse
    } else if content_type.starts_with("application/json") {
        BodyKind::Json
    } else {
        BodyKind::Other
    }
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
fn respond_passthrough(
    mut dispatched: Dispatched,
    mut trace: Trace,
    headers: StrataHeaders,
) -> Response<ProxyBody> {
    let upstream_headers = dispatched.upstream.response.headers();
    let kind = body_kind(upstream_headers);
    let (tx, body) = ProxyBody::channel();
    let mut response = Response::new(body);
    *response.status_mut() = dispatched.upstream.response.status();
    for name in PASSTHROUGH_HEADERS {
        if let Some(value) = upstream_headers.get(name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    headers.apply(response.headers_mut());
    trace.status = Some(response.status().as_u16());
    tokio::spawn(async move {
        let mut observer = ResponseObserver::new(kind);
        let end = forward::forward(
            &mut dispatched.upstream,
            &tx,
            &mut observer,
            &mut dispatched.gate,
            AfterHeaders::TransportError,
            Watch {
                lease: &mut dispatched.lease,
                deadline: dispatched.deadline,
                keepalive: false,
            },
        )
        .await;
        trace.observed = Some(observer.finish());
        let upstream_ok = trace
            .upstream_status
            .is_some_and(|status| (200..300).contains(&status));
        trace.finish(end_reason(end, upstream_ok));
        // The record went to the supervisor before the lease release does,
        // so a supervisor that waits for leases has every record too.
        drop(dispatched);
    });
    response
}

fn end_reason(end: ForwardEnd, upstream_ok: bool) -> Reason {
    match end {
        ForwardEnd::Completed if upstream_ok => Reason::Completed,
        ForwardEnd::Completed | ForwardEnd::UpstreamFailed | ForwardEnd::WrongModel => {
            Reason::UpstreamError
        }
        ForwardEnd::ClientGone => Reason::ClientDisconnect,
        ForwardEnd::Timeout => Reason::Timeout,
        ForwardEnd::Revoked(end) => lease_end_failure(end).reason,
    }
}

/// Runs `work` while sending SSE comments to a waiting client. Returns
/// `None` if the client went away first (dropping `work`, which withdraws
/// its lease request or releases its lease).
async fn with_keepalive<T>(
    tx: &BodySender,
    observer: &mut ResponseObserver,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    let mut tick = tokio::time::interval_at(
        (Instant::now() + KEEPALIVE_INTERVAL).into(),
        KEEPALIVE_INTERVAL,
    );
    loop {
        tokio::select! {
            output = &mut work => return Some(output),
            _ = tick.tick() => {
                // A client that has not taken the last comment yet does not
                // need another one; nothing here may wait for the client.
                match tx.try_reserve() {
                    Ok(permit) => {
                        let comment = Bytes::from_static(KEEPALIVE_COMMENT);
                        observer.observe(&comment, Instant::now());
                        permit.send(Ok(comment));
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => return None,
                }
            }
            _ = tx.closed() => return None,
        }
    }
}

/// Wait-first streaming: `200` and SSE headers now, the rest in a task.
fn respond_early(job: Job, mut trace: Trace, headers: StrataHeaders) -> Response<ProxyBody> {
    let (tx, body) = ProxyBody::channel();
    let mut response = Response::new(body);
    let response_headers = response.headers_mut();
    response_headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.apply(response_headers);
    trace.status = Some(StatusCode::OK.as_u16());
    tokio::spawn(async move {
        let mut observer = ResponseObserver::new(BodyKind::Sse);
        let outcome = with_keepalive(&tx, &mut observer, job.admit_and_send(&mut trace)).await;
        // Held until the record is submitted, like the passthrough path.
        let mut finished = None;
        let reason = match outcome {
            None => Reason::ClientDisconnect,
            Some(Err(failure)) => {
                forward::fail_after_headers(
                    &tx,
                    AfterHeaders::InBandError,
                    &failure.error,
                    &mut observer,
                )
                .await;
                failure.reason
            }
            Some(Ok(mut dispatched)) => {
                let status = dispatched.upstream.response.status();
                if status.is_success() {
                    let end = forward::forward(
                        &mut dispatched.upstream,
                        &tx,
                        &mut observer,
                        &mut dispatched.gate,
                        AfterHeaders::InBandError,
                        Watch {
                            lease: &mut dispatched.lease,
                            deadline: dispatched.deadline,
                            keepalive: true,
                        },
                    )
                    .await;
                    finished = Some(dispatched);
                    end_reason(end, true)
                } else {
                    let error = upstream_error(status, &mut dispatched.upstream).await;
                    finished = Some(dispatched);
                    forward::fail_after_headers(
                        &tx,
                        AfterHeaders::InBandError,
                        &error,
                        &mut observer,
                    )
                    .await;
                    Reason::UpstreamError
                }
            }
        };
        trace.observed = Some(observer.finish());
        trace.finish(reason);
        drop(finished);
    });
    response
}

/// Describes a backend error response for an `event: error` frame: the
/// backend's status, and its error type and message when it sent the
/// usual `{"error":{...}}` document.
async fn upstream_error(status: StatusCode, upstream: &mut Upstream) -> ApiError {
    let mut body = Vec::new();
    let response_body = upstream.response.body_mut();
    while body.len() < ERROR_BODY_LIMIT {
        match response_body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    body.extend_from_slice(&data);
                }
            }
            _ => break,
        }
    }
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let detail = parsed.as_ref().and_then(|value| value.get("error"));
    let message = detail
        .and_then(|error| error.get("message"))
        .and_then(|message| message.as_str())
        .unwrap_or("the backend answered with an error");
    let mut error = ApiError::new(status, "server_error", "upstream_error", message);
    if let Some(kind) = detail
        .and_then(|error| error.get("type"))
        .and_then(|kind| kind.as_str())
    {
        // Only the backend's known error types are echoed as the type.
        error.kind = match kind {
            "invalid_request_error" => "invalid_request_error",
            "authentication_error" => "authentication_error",
            "model_busy" => "model_busy",
            _ => "server_error",
        };
    }
    error
}
