//! Forwarding a backend response body to the client as it arrives.
//!
//! Each upstream chunk passes the [`Pipeline`] (the [`ModelGate`], then in a
//! router-committed stream the backend's own error frame is cut), is
//! observed (for accounting) and handed to the client body's one-chunk
//! channel ([`Outbox`]). When the channel is full the task keeps that one
//! chunk in hand and stops reading the backend, so a slow client slows the
//! backend down instead of growing a buffer (at most two chunks wait between
//! them). Waiting for the client is one branch of the loop, never an await
//! inside another branch: while a client does not read, the loop still
//! watches the lease (operator `off --now` revokes it) and its [`Clocks`]:
//! the response deadline, how long the client has taken nothing (see
//! [`CLIENT_STALL_LIMIT`]) and, for waiting SSE clients, the keepalive
//! clock. How long the backend has sent nothing (`stream_idle_ms`, streams
//! only) is the body's own concern: [`IdleTimeout`] wraps it, and the
//! silence reaches the loop as one more body error.
//!
//! Each part is its own file with its own tests: `pipeline.rs` (pure),
//! `clocks.rs`, `idle.rs`, `outbox.rs`, `inband.rs`; this file only
//! selects. The loop reads tokio's [`TokioInstant`] once per event, which
//! is the std clock in a running proxy and the paused clock in tests; the
//! response deadline arrives as a std `Instant` from the caller. The loop is
//! generic over the backend body ([`BackendBody`]) only so tests can feed it
//! a synthetic one (`tests.rs`); the proxy passes its
//! [`UpstreamBody`](crate::upstream::UpstreamBody).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::time::Instant as TokioInstant;

use crate::link::{LeaseEnd, TicketEvents};
use crate::observe::{ModelGate, ResponseObserver};
use crate::response_body::BodySender;

use super::error::ChatError;
use clocks::{Clocks, Due};
use idle::{IdleError, IdleTimeout};
use outbox::Outbox;
use pipeline::{Pipeline, Released, Stop};

/// The SSE comment sent to waiting clients.
pub const KEEPALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// How often waiting streaming clients get a comment. The spec's "every
/// five seconds" is read as a ceiling for the client's sake: a comment
/// every 5.0 s arrived 5.002 s apart at a client under load, past httpx's
/// default 5.0 s read timeout, so they go out every 4 s.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(4);

/// A client that has taken none of the response for this long while some
/// of it waits for it is cut off (reason `timeout`). This is what bounds a
/// client that stopped reading when `response_ms` is 0; without it one such
/// client would hold its dispatch slot, and with `cache_max_active: 1` all
/// inference, forever. A reading client never comes near it: a normal
/// response fits in the kernel's socket buffers, so the channel only stays
/// full when megabytes went unread.
pub const CLIENT_STALL_LIMIT: Duration = Duration::from_secs(60);

/// How long the final frame of a failed response may wait for the client
/// before the response is aborted instead.
const FINAL_SEND_LIMIT: Duration = Duration::from_secs(1);

/// How failures after the response headers reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterHeaders {
    /// The router sent its own SSE headers: a failure becomes one
    /// `event: error` frame, and the stream ends without `[DONE]`.
    InBandError,
    /// The backend's own headers were passed through: a failure ends the
    /// transfer with a transport error.
    TransportError,
    /// Wait-first streaming whose `200` and SSE headers are still held:
    /// they go out with the first thing handed over. A failure before that
    /// writes nothing and is returned, so the caller answers with a real
    /// HTTP status; after it, as [`AfterHeaders::InBandError`].
    Held,
}

/// How a forwarded body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardEnd {
    /// The backend's body ended cleanly.
    Completed,
    /// The client went away.
    ClientGone,
    /// The client took nothing for [`CLIENT_STALL_LIMIT`]; the response was
    /// aborted.
    ClientStalled,
    /// The response was ended with this error: the backend's body failed
    /// part-way or named another model, `response_ms` expired, or the lease
    /// ended under it (operator `off --now`, forced shutdown).
    Failed(ChatError),
}

/// Ends a wait-first stream with `error` (before any upstream byte).
pub async fn fail_after_headers(
    tx: &BodySender,
    mode: AfterHeaders,
    error: ChatError,
    observer: &mut ResponseObserver,
) {
    Outbox::new(tx, true).fail(mode, error, observer).await;
}

/// What bounds the loop besides the two bodies: the lease, the clocks and
/// the backend's silence.
pub struct Bounds<'a> {
    pub lease: &'a mut TicketEvents,
    pub deadline: Option<Instant>,
    /// Send keepalive comments while the backend is quiet (wait-first SSE).
    pub keepalive: bool,
    /// When the first keepalive is due, if not [`KEEPALIVE_INTERVAL`] after
    /// the loop starts: a held stream counts from the request's arrival.
    pub first_keepalive: Option<Instant>,
    /// `stream_idle_ms`: the response ends (`timeout`) once the backend has
    /// sent no byte for this long, counted from the loop's start (the
    /// headers just arrived) and then from each chunk, its own keep-alive
    /// comments included. A client that does not read pauses the backend
    /// body, so the clock only runs while the loop is reading it (see
    /// [`IdleTimeout`]).
    pub idle: Option<Duration>,
}

/// A backend response body as the loop reads it: the proxy's
/// [`UpstreamBody`](crate::upstream::UpstreamBody), or a test's synthetic
/// one. `Send + 'static` so a forwarding task can own it.
pub trait BackendBody:
    hyper::body::Body<Data = Bytes, Error: std::fmt::Display + Send> + Unpin + Send + 'static
{
}

impl<B> BackendBody for B where
    B: hyper::body::Body<Data = Bytes, Error: std::fmt::Display + Send> + Unpin + Send + 'static
{
}

/// Copies the backend's `body` to `tx` until one side ends. Each event is
/// read from the clock once; the select only says what happened, and the
/// handling runs after its futures (which borrow the outbox) are gone.
pub async fn forward<B: BackendBody>(
    body: &mut B,
    tx: &BodySender,
    observer: &mut ResponseObserver,
    gate: &mut ModelGate,
    mode: AfterHeaders,
    bounds: Bounds<'_>,
) -> ForwardEnd {
    let mut body = IdleTimeout::new(body, bounds.idle);
    let mut pipeline = Pipeline::new(gate, mode != AfterHeaders::TransportError);
    let mut out = Outbox::new(tx, false);
    let mut clocks = Clocks::new(TokioInstant::now(), &bounds, &out);
    let lease = bounds.lease;
    let mut lease_watched = true;
    // How the backend's body ended; the loop ends once what is in hand has
    // been handed over.
    let mut ended: Option<Ended> = None;
    loop {
        if !out.in_hand()
            && let Some(ended) = ended
        {
            let lease = lease_watched.then_some(&mut *lease);
            return end(&mut out, ended, mode, observer, lease).await;
        }
        let step = tokio::select! {
            frame = body.frame(), if !out.in_hand() && ended.is_none() => Step::Frame(frame),
            room = out.tx.reserve(), if out.in_hand() => Step::Room(room.is_ok()),
            _ = out.tx.closed() => Step::ClientGone,
            end = lease.ended(), if lease_watched => Step::LeaseEnded(end),
            () = clocks.expired() => Step::Clock,
        };
        let now = TokioInstant::now();
        let data = match step {
            Step::Frame(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if !data.is_empty() => release(pipeline.push(data), &mut ended),
                _ => None,
            },
            Step::Frame(Some(Err(error))) => {
                ended = Some(Ended::Failed(body_failed(error)));
                None
            }
            Step::Frame(None) => {
                ended = Some(Ended::Clean);
                release(pipeline.finish(), &mut ended)
            }
            Step::Room(false) | Step::ClientGone => return ForwardEnd::ClientGone,
            // A client that does not read pauses the backend body: that
            // wait is not the backend's silence.
            Step::Room(true) => {
                body.restart();
                out.pending.take()
            }
            // The connection to this backend is already open, so a lost
            // supervisor link cannot misroute it: the backend decides how
            // the response ends (a supervisor crash takes it down anyway).
            Step::LeaseEnded(LeaseEnd::LinkLost) => {
                lease_watched = false;
                None
            }
            Step::LeaseEnded(end) => return out.fail(mode, ChatError::from(end), observer).await,
            Step::Clock => match clocks.due(now, &out) {
                Some(Due::Deadline) => {
                    return out.fail(mode, ChatError::StreamTimeout, observer).await;
                }
                Some(Due::Stall) => return out.stalled(),
                Some(Due::Keepalive) => Some(Bytes::from_static(KEEPALIVE_COMMENT)),
                None => None,
            },
        };
        if let Some(data) = data
            && !out.offer(data, observer, now)
        {
            return ForwardEnd::ClientGone;
        }
        clocks.rearm(now, &out);
    }
}

/// Ends the response once the backend's body `ended` and nothing is in
/// hand. `lease`: the lease, while it is still watched.
async fn end(
    out: &mut Outbox<'_>,
    ended: Ended,
    mode: AfterHeaders,
    observer: &mut ResponseObserver,
    lease: Option<&mut TicketEvents>,
) -> ForwardEnd {
    let error = match ended {
        // Strata's bodies end at EOF; an event stream that ends before
        // `[DONE]` was cut off (the backend died).
        Ended::Clean if !observer.sse_unfinished() => return ForwardEnd::Completed,
        Ended::Clean => ChatError::BackendCutOff,
        Ended::Failed(error) => error,
    };
    let error = match lease {
        Some(lease) if error == ChatError::BackendCutOff => {
            explain_cut_off(lease).await.unwrap_or(error)
        }
        _ => error,
    };
    out.fail(mode, error, observer).await
}

/// How long a backend that cut a response off is given for its lease's
/// revocation to arrive. A forced shutdown (and `off --now` past its wait)
/// revokes the leases and kills the backend at once; the revocation comes
/// over the supervisor link and the cut over the backend's socket, in
/// either order, and the client should be told the shutdown rather than a
/// backend failure. Only a cut-off response waits, at most this long.
pub(crate) const CUT_OFF_EXPLANATION_WAIT: Duration = Duration::from_millis(250);

/// The revocation that explains a cut-off, if it arrives in time.
async fn explain_cut_off(lease: &mut TicketEvents) -> Option<ChatError> {
    match tokio::time::timeout(CUT_OFF_EXPLANATION_WAIT, lease.ended()).await {
        Ok(end @ LeaseEnd::Revoked(_)) => Some(ChatError::from(end)),
        Ok(LeaseEnd::LinkLost) | Err(_) => None,
    }
}

/// How the backend's body ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// At its end: complete, unless an event stream lacks its `[DONE]`.
    Clean,
    /// The response ends with this error.
    Failed(ChatError),
}

/// Notes what the pipeline says about the end; returns its bytes.
fn release(released: Released, ended: &mut Option<Ended>) -> Option<Bytes> {
    if let Some(stop) = released.stop {
        if stop == Stop::WrongModel {
            tracing::warn!(
                "the backend answered as a different model than the leased one; response stopped"
            );
        }
        *ended = Some(Ended::Failed(stop.error()));
    }
    released.data
}

/// The error a failed backend body ends the response with.
fn body_failed<E: std::fmt::Display>(error: IdleError<E>) -> ChatError {
    match error {
        IdleError::Silent(limit) => {
            tracing::info!(
                "the backend sent nothing for stream_idle_ms ({} ms); ending the response",
                limit.as_millis()
            );
            ChatError::StreamIdle
        }
        IdleError::Body(error) => {
            tracing::debug!(%error, "backend body failed");
            ChatError::BackendCutOff
        }
    }
}

/// What woke the forwarding loop (`E`: the backend body's error).
enum Step<E> {
    Frame(Option<Result<hyper::body::Frame<Bytes>, IdleError<E>>>),
    /// The channel has room again (false: the client is gone).
    Room(bool),
    ClientGone,
    LeaseEnded(LeaseEnd),
    /// The shared sleep of [`Clocks`] fired.
    Clock,
}

mod clocks;
mod idle;
mod inband;
mod outbox;
mod pipeline;

#[cfg(test)]
mod tests;
