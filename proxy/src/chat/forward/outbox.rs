//! One response's way to the client: the client body's one-chunk channel,
//! the chunk kept in hand while it is full, and how a failed response ends
//! (an `event: error` frame, a transport error, or, for a held head, nothing
//! at all).

use bytes::Bytes;
use tokio::time::Instant as TokioInstant;

use crate::chat::error::ChatError;
use crate::observe::ResponseObserver;
use crate::response_body::{BodySender, StreamItem};

use super::{AfterHeaders, CLIENT_STALL_LIMIT, FINAL_SEND_LIMIT, ForwardEnd};

pub struct Outbox<'a> {
    pub tx: &'a BodySender,
    /// The chunk waiting for room in the channel.
    pub pending: Option<Bytes>,
    /// Everything handed over so far ends at an SSE frame boundary, so a
    /// comment or an error frame may follow.
    pub at_frame_boundary: bool,
    /// When the client last took a chunk; `None` before the first.
    pub last_progress: Option<TokioInstant>,
    /// Something has been handed over (the held headers are committed).
    sent: bool,
}

impl<'a> Outbox<'a> {
    /// `sent`: something already went out (the headers are committed).
    pub fn new(tx: &'a BodySender, sent: bool) -> Outbox<'a> {
        Outbox {
            tx,
            pending: None,
            at_frame_boundary: true,
            last_progress: None,
            sent,
        }
    }

    /// A chunk waits for the client.
    pub fn in_hand(&self) -> bool {
        self.pending.is_some()
    }

    /// Hands `data` over at `now` if the channel has room, else keeps it.
    /// False once the client is gone.
    pub fn offer(
        &mut self,
        data: Bytes,
        observer: &mut ResponseObserver,
        now: TokioInstant,
    ) -> bool {
        debug_assert!(self.pending.is_none());
        match self.tx.try_reserve() {
            Ok(permit) => {
                self.hand_over(permit, data, observer, now);
                true
            }
            Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {
                self.pending = Some(data);
                true
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => false,
        }
    }

    /// Passes one chunk to the client body, observing it as it goes.
    fn hand_over(
        &mut self,
        permit: tokio::sync::mpsc::Permit<'_, StreamItem>,
        data: Bytes,
        observer: &mut ResponseObserver,
        now: TokioInstant,
    ) {
        observer.observe(&data, now.into_std());
        self.at_frame_boundary = data.ends_with(b"\n\n");
        self.last_progress = Some(now);
        self.sent = true;
        permit.send(Ok(data));
    }

    /// The client took nothing for [`CLIENT_STALL_LIMIT`] while a chunk
    /// waited for it: the response is aborted.
    pub fn stalled(&mut self) -> ForwardEnd {
        tracing::info!(
            "the client took nothing for {CLIENT_STALL_LIMIT:?}; cutting the response off"
        );
        self.tx.abort();
        ForwardEnd::ClientStalled
    }

    /// Ends the response with `error` in the agreed form. Whatever is in
    /// hand is dropped unforwarded; the final frame waits for the client at
    /// most [`FINAL_SEND_LIMIT`], then the response is aborted.
    pub async fn fail(
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
        let room = tokio::time::timeout(FINAL_SEND_LIMIT, self.tx.reserve()).await;
        match room {
            Ok(Ok(permit)) if mode == AfterHeaders::TransportError => {
                permit.send(Err(std::io::Error::other(error.client_message())));
            }
            Ok(Ok(permit)) => {
                let frame = if self.at_frame_boundary {
                    error.sse_frame()
                } else {
                    // Close the half-sent frame so the error frame parses.
                    let mut bytes = b"\n\n".to_vec();
                    bytes.extend_from_slice(&error.sse_frame());
                    Bytes::from(bytes)
                };
                self.hand_over(permit, frame, observer, TokioInstant::now());
            }
            // The client is gone.
            Ok(Err(_)) => {}
            Err(_waited_out) => self.tx.abort(),
        }
        ForwardEnd::Failed(error)
    }
}
