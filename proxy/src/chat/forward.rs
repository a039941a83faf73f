//! Forwarding a backend response body to the client as it arrives.
//!
//! Each upstream chunk is observed (for accounting) and handed to the
//! client body through the two-chunk channel; the next chunk is read only
//! once the channel has room, so a slow client slows the backend down
//! instead of growing a buffer. The loop also watches the client (a closed
//! channel means it went away), the lease (operator `off --now` revokes
//! it), the response deadline, and, for waiting SSE clients, the keepalive
//! clock.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use crate::body::StreamItem;
use crate::errors::ApiError;
use crate::link::{Lease, LeaseEvent};
use crate::observe::ResponseObserver;

use super::upstream::Upstream;

/// The SSE comment sent to waiting clients.
pub const KEEPALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// How often waiting streaming clients get a comment.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// How failures after the response headers reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterHeaders {
    /// The router sent its own SSE headers early: a failure becomes one
    /// `event: error` frame, and the stream ends without `[DONE]`.
    InBandError,
    /// The backend's own headers were passed through: a failure ends the
    /// transfer with a transport error.
    TransportError,
}

/// How a forwarded body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardEnd {
    /// The backend's body ended cleanly.
    Completed,
    /// The client went away.
    ClientGone,
    /// The backend's body failed part-way.
    UpstreamFailed,
    /// `response_ms` expired.
    Timeout,
    /// The supervisor revoked the lease (operator `off --now`).
    Revoked,
}

/// Sends one item, or reports that the client is gone.
pub async fn send(tx: &mpsc::Sender<StreamItem>, item: StreamItem) -> bool {
    tx.send(item).await.is_ok()
}

/// Ends a stream after its headers with `error`, in the agreed form.
pub async fn fail_after_headers(
    tx: &mpsc::Sender<StreamItem>,
    mode: AfterHeaders,
    error: &ApiError,
    observer: &mut ResponseObserver,
) {
    match mode {
        AfterHeaders::InBandError => {
            let frame = error.sse_frame();
            observer.observe(&frame, Instant::now());
            let _ = send(tx, Ok(frame)).await;
        }
        AfterHeaders::TransportError => {
            let _ = send(tx, Err(std::io::Error::other(error.message.clone()))).await;
        }
    }
}

/// Ends a response whose backend body broke off part-way.
async fn backend_cut_off(
    tx: &mpsc::Sender<StreamItem>,
    mode: AfterHeaders,
    at_frame_boundary: bool,
    observer: &mut ResponseObserver,
) {
    let error = ApiError::new(
        hyper::StatusCode::BAD_GATEWAY,
        "server_error",
        "upstream_error",
        "the backend connection failed during the response",
    );
    if mode == AfterHeaders::InBandError && !at_frame_boundary {
        // Close the half-sent frame so the error frame parses.
        let _ = send(tx, Ok(Bytes::from_static(b"\n\n"))).await;
    }
    fail_after_headers(tx, mode, &error, observer).await;
}

/// Copies `upstream`'s body to `tx` until one side ends.
pub async fn forward(
    upstream: &mut Upstream,
    tx: &mpsc::Sender<StreamItem>,
    observer: &mut ResponseObserver,
    lease: &mut Lease,
    mode: AfterHeaders,
    deadline: Option<Instant>,
    keepalive: bool,
) -> ForwardEnd {
    let body = upstream.response.body_mut();
    // Comments may only go between SSE frames, never inside one.
    let mut at_frame_boundary = true;
    let mut lease_open = true;
    // One timer, pushed back whenever bytes go out, rather than a new one
    // per chunk.
    let keepalive_sleep = tokio::time::sleep(KEEPALIVE_INTERVAL);
    tokio::pin!(keepalive_sleep);
    let deadline_sleep = tokio::time::sleep_until(
        deadline
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365))
            .into(),
    );
    tokio::pin!(deadline_sleep);
    loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else { continue };
                    if data.is_empty() {
                        continue;
                    }
                    observer.observe(&data, Instant::now());
                    at_frame_boundary = data.ends_with(b"\n\n");
                    if keepalive {
                        keepalive_sleep
                            .as_mut()
                            .reset((Instant::now() + KEEPALIVE_INTERVAL).into());
                    }
                    if !send(tx, Ok(data)).await {
                        return ForwardEnd::ClientGone;
                    }
                }
                                Some(Err(err)) => {
                    tracing::debug!(error = %err, "backend body failed");
                    backend_cut_off(tx, mode, at_frame_boundary, observer).await;
                    return ForwardEnd::UpstreamFailed;
                }
                // Strata's bodies end at EOF; an event stream that ends
                // before `[DONE]` was cut off (the backend died).
                None if observer.sse_unfinished() => {
                    tracing::debug!("backend stream ended before [DONE]");
                    backend_cut_off(tx, mode, at_frame_boundary, observer).await;
                    return ForwardEnd::UpstreamFailed;
                }
                None => return ForwardEnd::Completed,
            },
            _ = tx.closed() => return ForwardEnd::ClientGone,
            event = lease.next_event(), if lease_open => match event {
                LeaseEvent::Revoked => {
                    let error = ApiError::new(
                        hyper::StatusCode::SERVICE_UNAVAILABLE,
                        "server_error",
                        "routing_off",
                        "the operator turned routing off and interrupted this response",
                    );
                    if mode == AfterHeaders::InBandError && !at_frame_boundary {
                        let _ = send(tx, Ok(Bytes::from_static(b"\n\n"))).await;
                    }
                    fail_after_headers(tx, mode, &error, observer).await;
                    return ForwardEnd::Revoked;
                }
                // Losing the supervisor link ends the lease on its side but
                // not this response: the backend decides how it ends.
                _ => lease_open = false,
            },
            _ = &mut deadline_sleep, if deadline.is_some() => {
                let error = ApiError::new(
                    hyper::StatusCode::GATEWAY_TIMEOUT,
                    "server_error",
                    "timeout",
                    "the response exceeded response_ms",
                );
                if mode == AfterHeaders::InBandError && !at_frame_boundary {
                    let _ = send(tx, Ok(Bytes::from_static(b"\n\n"))).await;
                }
                fail_after_headers(tx, mode, &error, observer).await;
                return ForwardEnd::Timeout;
            }
            _ = &mut keepalive_sleep, if keepalive && at_frame_boundary => {
                let comment = Bytes::from_static(KEEPALIVE_COMMENT);
                observer.observe(&comment, Instant::now());
                keepalive_sleep
                    .as_mut()
                    .reset((Instant::now() + KEEPALIVE_INTERVAL).into());
                if !send(tx, Ok(comment)).await {
                    return ForwardEnd::ClientGone;
                }
            }
        }
    }
}
