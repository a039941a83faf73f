//! Forwarding a backend response body to the client as it arrives.
//!
//! Each upstream chunk passes the [`ModelGate`], is observed (for
//! accounting) and handed to the client body's one-chunk channel. When the
//! channel is full the task keeps that one chunk in hand and stops reading
//! the backend, so a slow client slows the backend down instead of growing a
//! buffer (at most two chunks wait between them). Waiting for the client is
//! one branch of the loop, never an await inside another branch: while a
//! client does not read, the loop still watches the lease (operator
//! `off --now` revokes it), the response deadline, how long the backend has
//! sent nothing (`stream_idle_ms`, streams only), how long the client has
//! taken nothing (see [`CLIENT_STALL_LIMIT`]) and, for waiting SSE clients,
//! the keepalive clock.
//!
//! The loop's own clocks (the stall limit, keepalives) read tokio's
//! [`TokioInstant`], which is the std clock in a running proxy and the
//! paused clock in tests; the response deadline arrives as a std `Instant`
//! from the caller. The loop is generic over the backend body
//! ([`BackendBody`]) only so tests can feed it a synthetic one (`tests.rs`);
//! the proxy passes its [`UpstreamBody`](crate::upstream::UpstreamBody).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::time::Instant as TokioInstant;

use crate::link::{LeaseEnd, TicketEvents};
use crate::observe::{ModelGate, ResponseObserver};
use crate::response_body::BodySender;

use super::error::ChatError;
use inband::{Cut, ErrorFrameCut};

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

/// One response's way to the client: the chunk in hand while the channel
/// is full, and what has been handed over.
struct Outbox<'a> {
    tx: &'a BodySender,
    pending: Option<Bytes>,
    /// Everything handed over so far ends at an SSE frame boundary, so a
    /// comment or an error frame may follow.
    at_frame_boundary: bool,
    /// When the client last took a chunk (or the loop started).
    last_progress: TokioInstant,
    /// Something has been handed over (the held headers are committed).
    sent: bool,
}

impl Outbox<'_> {
    /// Hands `data` over now if the channel has room, else keeps it. False
    /// once the client is gone.
    fn offer(&mut self, data: Bytes, observer: &mut ResponseObserver) -> bool {
        debug_assert!(self.pending.is_none());
        match self.tx.try_reserve() {
            Ok(permit) => {
                self.sent = true;
                hand_over(
                    permit,
                    data,
                    observer,
                    &mut self.at_frame_boundary,
                    &mut self.last_progress,
                );
                true
            }
            Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {
                self.pending = Some(data);
                true
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => false,
        }
    }

    /// Ends the response with `error` in the agreed form. Whatever is in
    /// hand is dropped unforwarded; the final frame waits for the client at
    /// most [`FINAL_SEND_LIMIT`], then the response is aborted.
    async fn fail(
        &mut self,
        mode: AfterHeaders,
        error: ChatError,
        observer: &mut ResponseObserver,
    ) -> ForwardEnd {
        self.pending = None;
        let mode = match mode {
            AfterHeaders::Held if !self.sent => return ForwardEnd::Failed(error),
            AfterHeaders::Held => AfterHeaders::InBandError,
            other => other,
        };
        match mode {
            AfterHeaders::InBandError | AfterHeaders::Held => {
                let frame = if self.at_frame_boundary {
                    error.sse_frame()
                } else {
                    // Close the half-sent frame so the error frame parses.
                    let mut bytes = b"\n\n".to_vec();
                    bytes.extend_from_slice(&error.sse_frame());
                    Bytes::from(bytes)
                };
                let room = tokio::time::timeout(FINAL_SEND_LIMIT, self.tx.reserve()).await;
                let waited_out = room.is_err();
                if let Ok(Ok(permit)) = room {
                    hand_over(
                        permit,
                        frame,
                        observer,
                        &mut self.at_frame_boundary,
                        &mut self.last_progress,
                    );
                } else if waited_out {
                    self.tx.abort();
                }
            }
            AfterHeaders::TransportError => {
                let room = tokio::time::timeout(FINAL_SEND_LIMIT, self.tx.reserve()).await;
                let waited_out = room.is_err();
                if let Ok(Ok(permit)) = room {
                    permit.send(Err(std::io::Error::other(error.client_message())));
                } else if waited_out {
                    self.tx.abort();
                }
            }
        }
        ForwardEnd::Failed(error)
    }
}

/// Passes one chunk to the client body, observing it as it goes.
fn hand_over(
    permit: tokio::sync::mpsc::Permit<'_, crate::response_body::StreamItem>,
    data: Bytes,
    observer: &mut ResponseObserver,
    at_frame_boundary: &mut bool,
    last_progress: &mut TokioInstant,
) {
    let now = TokioInstant::now();
    observer.observe(&data, now.into_std());
    *at_frame_boundary = data.ends_with(b"\n\n");
    *last_progress = now;
    permit.send(Ok(data));
}

/// Ends a wait-first stream with `error` (before any upstream byte).
pub async fn fail_after_headers(
    tx: &BodySender,
    mode: AfterHeaders,
    error: ChatError,
    observer: &mut ResponseObserver,
) {
    let mut outbox = Outbox {
        tx,
        pending: None,
        at_frame_boundary: true,
        last_progress: TokioInstant::now(),
        sent: true,
    };
    outbox.fail(mode, error, observer).await;
}

/// What else the loop watches besides the two bodies.
pub struct Watch<'a> {
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
    /// body, so the clock only runs while the loop is reading it.
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

/// Copies the backend's `body` to `tx` until one side ends.
pub async fn forward<B: BackendBody>(
    body: &mut B,
    tx: &BodySender,
    observer: &mut ResponseObserver,
    gate: &mut ModelGate,
    mode: AfterHeaders,
    watch: Watch<'_>,
) -> ForwardEnd {
    let Watch {
        lease,
        deadline,
        keepalive,
        first_keepalive,
        idle,
    } = watch;
    let first_keepalive = first_keepalive
        .map(TokioInstant::from_std)
        .unwrap_or_else(|| TokioInstant::now() + KEEPALIVE_INTERVAL);
    let mut out = Outbox {
        tx,
        pending: None,
        at_frame_boundary: true,
        // The keepalive clock compares with this.
        last_progress: first_keepalive
            .checked_sub(KEEPALIVE_INTERVAL)
            .unwrap_or_else(TokioInstant::now),
        sent: false,
    };
    // The backend's body has ended: `Some(true)` cleanly, `Some(false)` cut
    // off. The loop ends once what is in hand has been handed over.
    let mut upstream_ended: Option<bool> = None;
    let mut lease_watched = true;
    // In a stream the router committed, the backend's own error frame ends
    // it as the router's `event: error` (see `inband`).
    let mut cut =
        matches!(mode, AfterHeaders::InBandError | AfterHeaders::Held).then(ErrorFrameCut::default);
    let mut backend_error_frame = false;
    // Timers are re-armed only when they fire (they compare with
    // `last_progress`), never per chunk.
    let keepalive_sleep = tokio::time::sleep_until(first_keepalive);
    tokio::pin!(keepalive_sleep);
    let stall_sleep = tokio::time::sleep(CLIENT_STALL_LIMIT);
    tokio::pin!(stall_sleep);
    let deadline_sleep = tokio::time::sleep_until(
        deadline
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86400 * 365))
            .into(),
    );
    tokio::pin!(deadline_sleep);
    // When a byte last came from the backend (or the loop started, or the
    // client last made room: a full channel stops the reading, not the
    // backend's silence).
    let mut backend_active = TokioInstant::now();
    let far = Duration::from_secs(86400 * 365);
    let idle_sleep = tokio::time::sleep(idle.unwrap_or(far));
    tokio::pin!(idle_sleep);
    loop {
        if out.pending.is_none() && backend_error_frame {
            return out.fail(mode, ChatError::BackendErrorFrame, observer).await;
        }
        if out.pending.is_none()
            && let Some(clean) = upstream_ended
        {
            // Strata's bodies end at EOF; an event stream that ends before
            // `[DONE]` was cut off (the backend died).
            if clean && !observer.sse_unfinished() {
                return ForwardEnd::Completed;
            }
            return out.fail(mode, ChatError::BackendCutOff, observer).await;
        }
        // The select only says what happened; the handling below runs after
        // its futures (which borrow the outbox) are gone.
        let step = tokio::select! {
            frame = body.frame(), if out.pending.is_none() && upstream_ended.is_none() && !backend_error_frame => {
                Step::Frame(frame)
            }
            room = out.tx.reserve(), if out.pending.is_some() => Step::Room(room.is_ok()),
            _ = out.tx.closed() => Step::ClientGone,
            end = lease.ended(), if lease_watched => Step::LeaseEnded(end),
            _ = &mut deadline_sleep, if deadline.is_some() => Step::Deadline,
            _ = &mut stall_sleep, if out.pending.is_some() => Step::StallCheck,
            _ = &mut idle_sleep, if idle.is_some() && out.pending.is_none() && upstream_ended.is_none() => {
                Step::IdleCheck
            }
            _ = &mut keepalive_sleep, if keepalive && out.pending.is_none() && out.at_frame_boundary => {
                Step::KeepaliveCheck
            }
        };
        match step {
            Step::Frame(frame) => {
                // A clock read per chunk only when something reads it.
                if idle.is_some() {
                    backend_active = TokioInstant::now();
                }
                let released = match frame {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) if !data.is_empty() => gate.push(data),
                        _ => continue,
                    },
                    Some(Err(err)) => {
                        tracing::debug!(error = %err, "backend body failed");
                        upstream_ended = Some(false);
                        continue;
                    }
                    None => {
                        upstream_ended = Some(true);
                        gate.finish()
                    }
                };
                let released = released.map(|data| match cut.as_mut() {
                    None => data,
                    Some(cut) => {
                        let data = match cut.push(data.unwrap_or_default()) {
                            Cut::Pass(data) => data,
                            Cut::ErrorFrame { before } => {
                                backend_error_frame = true;
                                before
                            }
                        };
                        let data = if upstream_ended.is_some() && !backend_error_frame {
                            let held = cut.finish();
                            if held.is_empty() {
                                data
                            } else {
                                [data, held].concat().into()
                            }
                        } else {
                            data
                        };
                        (!data.is_empty()).then_some(data)
                    }
                });
                match released {
                    Ok(Some(data)) => {
                        if !out.offer(data, observer) {
                            return ForwardEnd::ClientGone;
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        tracing::warn!(
                            "the backend answered as a different model than the leased one; response stopped"
                        );
                        return out.fail(mode, ChatError::WrongModel, observer).await;
                    }
                }
            }
            Step::Room(false) | Step::ClientGone => return ForwardEnd::ClientGone,
            Step::Room(true) => {
                if idle.is_some() {
                    backend_active = TokioInstant::now();
                }
                let data = out.pending.take().expect("checked by the branch condition");
                if !out.offer(data, observer) {
                    return ForwardEnd::ClientGone;
                }
            }
            // The connection to this backend is already open, so a lost
            // supervisor link cannot misroute it: the backend decides how
            // the response ends (a supervisor crash takes it down anyway).
            Step::LeaseEnded(LeaseEnd::LinkLost) => lease_watched = false,
            Step::LeaseEnded(end) => {
                return out.fail(mode, ChatError::from(end), observer).await;
            }
            Step::Deadline => {
                return out.fail(mode, ChatError::StreamTimeout, observer).await;
            }
            Step::IdleCheck => {
                let limit = idle.expect("checked by the branch condition");
                let due = backend_active + limit;
                if TokioInstant::now() >= due {
                    tracing::info!(
                        "the backend sent nothing for stream_idle_ms ({} ms); ending the response",
                        limit.as_millis()
                    );
                    return out.fail(mode, ChatError::StreamIdle, observer).await;
                }
                idle_sleep.as_mut().reset(due);
            }
            Step::StallCheck => {
                let due = out.last_progress + CLIENT_STALL_LIMIT;
                if TokioInstant::now() >= due {
                    tracing::info!(
                        "the client took nothing for {CLIENT_STALL_LIMIT:?}; cutting the response off"
                    );
                    out.tx.abort();
                    return ForwardEnd::ClientStalled;
                }
                stall_sleep.as_mut().reset(due);
            }
            Step::KeepaliveCheck => {
                let due = out.last_progress + KEEPALIVE_INTERVAL;
                if TokioInstant::now() >= due {
                    if !out.offer(Bytes::from_static(KEEPALIVE_COMMENT), observer) {
                        return ForwardEnd::ClientGone;
                    }
                    keepalive_sleep
                        .as_mut()
                        .reset(TokioInstant::now() + KEEPALIVE_INTERVAL);
                } else {
                    keepalive_sleep.as_mut().reset(due);
                }
            }
        }
    }
}

/// What woke the forwarding loop (`E`: the backend body's error).
enum Step<E> {
    Frame(Option<Result<hyper::body::Frame<Bytes>, E>>),
    /// The channel has room again (false: the client is gone).
    Room(bool),
    ClientGone,
    LeaseEnded(LeaseEnd),
    Deadline,
    IdleCheck,
    StallCheck,
    KeepaliveCheck,
}

mod inband;

#[cfg(test)]
mod tests;
