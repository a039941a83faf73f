//! The response body type: either a whole buffer or a bounded channel.
//!
//! Streaming responses are fed through a one-chunk channel; the forwarding
//! task holds at most one more chunk while the channel is full, so at most
//! [`STREAM_CHANNEL_CHUNKS`] chunks wait between the backend and the client
//! and a slow client makes the forwarding task wait (backpressure reaches
//! the backend's socket) instead of the proxy buffering the answer. An `Err`
//! item aborts the response after the data queued before it: hyper then
//! closes the connection without a clean end, which is how a transfer is
//! failed after its headers. [`BodySender::abort`] does the same at once,
//! past anything still queued, for a client that is not reading.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::sync::Mutex;

use tokio::sync::mpsc::error::{SendError, TrySendError};
use tokio::sync::{mpsc, oneshot};

/// Chunks in flight between the backend and the client: one in the channel,
/// one in the forwarding task's hand while the channel is full.
pub const STREAM_CHANNEL_CHUNKS: usize = 2;

/// An item of a streaming body.
pub type StreamItem = Result<Bytes, std::io::Error>;

pub enum ProxyBody {
    Full(Option<Bytes>),
    Channel(ChannelBody),
}

/// The receiving end of a streaming body.
pub struct ChannelBody {
    rx: mpsc::Receiver<StreamItem>,
    /// Fires when the sender aborts the response; `None` once the sender is
    /// gone without aborting.
    abort: Option<oneshot::Receiver<()>>,
    /// An error held back for one poll (see `poll_frame`).
    held_error: Option<std::io::Error>,
    /// The first item, taken early by [`ProxyBody::first_ready`].
    first: Option<StreamItem>,
}

impl ProxyBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        ProxyBody::Full(Some(bytes.into()))
    }

    /// A streaming body and the sender that feeds it.
    pub fn channel() -> (BodySender, Self) {
        let (tx, rx) = mpsc::channel(STREAM_CHANNEL_CHUNKS - 1);
        let (abort_tx, abort_rx) = oneshot::channel();
        let body = ChannelBody {
            rx,
            abort: Some(abort_rx),
            held_error: None,
            first: None,
        };
        let sender = BodySender {
            tx,
            abort: Mutex::new(Some(abort_tx)),
        };
        (sender, ProxyBody::Channel(body))
    }

    /// Resolves once the channel holds its first item (or its sender is
    /// gone), keeping the item for hyper. Wait-first streaming commits its
    /// response head at that moment. Cancel-safe.
    pub async fn first_ready(&mut self) {
        if let ProxyBody::Channel(body) = self
            && body.first.is_none()
            && let Some(item) = body.rx.recv().await
        {
            body.first = Some(item);
        }
    }
}

/// The feeding end of a streaming body.
#[derive(Debug)]
pub struct BodySender {
    tx: mpsc::Sender<StreamItem>,
    /// Taken by the first abort. A lock only so `abort` can take `&self`
    /// while a reservation borrows the sender; never contended.
    abort: Mutex<Option<oneshot::Sender<()>>>,
}

impl BodySender {
    /// Room for one item right now, if the channel has it.
    pub fn try_reserve(&self) -> Result<mpsc::Permit<'_, StreamItem>, TrySendError<()>> {
        self.tx.try_reserve()
    }

    /// Waits for room for one item (cancel-safe); `Err` once the client is
    /// gone.
    pub async fn reserve(&self) -> Result<mpsc::Permit<'_, StreamItem>, SendError<()>> {
        self.tx.reserve().await
    }

    /// Resolves once the client side is gone (hyper dropped the body).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Ends the response with a transport error now, dropping whatever is
    /// still queued (the client was not taking it).
    pub fn abort(&self) {
        let abort = self
            .abort
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(abort) = abort {
            let _ = abort.send(());
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            ProxyBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Channel(body) => {
                if let Some(err) = body.held_error.take() {
                    return Poll::Ready(Some(Err(err)));
                }
                match body.first.take() {
                    Some(Ok(bytes)) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    // As below: let hyper flush the head first.
                    Some(Err(err)) => {
                        body.held_error = Some(err);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    None => {}
                }
                if let Some(abort) = &mut body.abort {
                    match Pin::new(abort).poll(cx) {
                        Poll::Ready(Ok(())) => {
                            body.abort = None;
                            body.rx.close();
                            return Poll::Ready(Some(Err(std::io::Error::other(
                                "response aborted",
                            ))));
                        }
                        Poll::Ready(Err(_)) => body.abort = None,
                        Poll::Pending => {}
                    }
                }
                match body.rx.poll_recv(cx) {
                    Poll::Ready(Some(Ok(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    // hyper drops the connection as soon as a body fails,
                    // possibly with the response head or the data just
                    // before still unflushed in its buffer (the head is
                    // only written once the body has been polled, so an
                    // error that is already waiting would cost the client
                    // even the status line). Yielding once (and waking at
                    // once) lets it flush them first; the error comes on
                    // the next poll.
                    Poll::Ready(Some(Err(err))) => {
                        body.held_error = Some(err);
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ProxyBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Channel(_) => SizeHint::default(),
        }
    }
}
