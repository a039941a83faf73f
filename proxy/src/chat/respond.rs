//! Shaping the response: the backend's own status and headers passed
//! through, or (wait-first streaming) the router's early SSE headers with
//! keepalives while the request waits, and the body forwarded after them.

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};

use crate::app::App;
use crate::body::{BodySender, ProxyBody};
use crate::errors::ApiError;
use crate::observe::{BodyKind, ResponseObserver};

use super::admit::{self, Dispatched, Job};
use super::forward::{
    self, AfterHeaders, ForwardEnd, KEEPALIVE_COMMENT, KEEPALIVE_INTERVAL, Watch,
};
use super::upstream::Upstream;
use super::{Reason, StrataHeaders, Trace};

/// How much of a backend error body is read to describe it in an
/// `event: error` frame.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

pub fn body_kind(headers: &HeaderMap) -> BodyKind {
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
pub fn respond_passthrough(
    app: &App,
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
    app.tasks.spawn(async move {
        let mut observer = ResponseObserver::new(kind);
        let end = forward::forward(
            &mut dispatched.upstream,
            &tx,
            &mut observer,
            &mut dispatched.gate,
            AfterHeaders::TransportError,
            Watch {
                lease: &mut dispatched.events,
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
        // Finishing the trace sent the record and ended the lease in one
        // message; the backend connection closes now.
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
        ForwardEnd::Revoked(end) => admit::lease_end_failure(end).reason,
    }
}

/// Runs `work` while sending SSE comments to a waiting client. Returns
/// `None` if the client went away first (dropping `work`; the trace's
/// finish then withdraws the ticket or ends its lease).
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
pub fn respond_early(job: Job, mut trace: Trace, headers: StrataHeaders) -> Response<ProxyBody> {
    let (tx, body) = ProxyBody::channel();
    let mut response = Response::new(body);
    let response_headers = response.headers_mut();
    response_headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.apply(response_headers);
    trace.status = Some(StatusCode::OK.as_u16());
    let tasks = job.app.tasks.clone();
    tasks.spawn(async move {
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
                            lease: &mut dispatched.events,
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
