//! The response body type: either a whole buffer or a bounded channel.
//!
//! Streaming responses are fed through a channel of two chunks, so a slow
//! client makes the forwarding task wait (backpressure reaches the
//! backend's socket) instead of the proxy buffering the answer. An `Err`
//! item aborts the response: hyper then closes the connection without a
//! clean end, which is how a transfer is failed after its headers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// Chunks in flight between the forwarding task and the client.
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
    /// The last frame handed to hyper was data.
    after_data: bool,
    /// An error held back for one poll (see `poll_frame`).
    held_error: Option<std::io::Error>,
}

impl ProxyBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        ProxyBody::Full(Some(bytes.into()))
    }

    /// A streaming body and the sender that feeds it.
    pub fn channel() -> (mpsc::Sender<StreamItem>, Self) {
        let (tx, rx) = mpsc::channel(STREAM_CHANNEL_CHUNKS);
        let body = ChannelBody {
            rx,
            after_data: false,
            held_error: None,
        };
        (tx, ProxyBody::Channel(body))
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
                match body.rx.poll_recv(cx) {
                    Poll::Ready(Some(Ok(bytes))) => {
                        body.after_data = true;
                        Poll::Ready(Some(Ok(Frame::data(bytes))))
                    }
                    // hyper drops the connection as soon as a body fails,
                    // possibly with the data just before still unflushed in
                    // its buffer. Yielding once (and waking at once) lets it
                    // flush that data first; the error comes on the next poll.
                    Poll::Ready(Some(Err(err))) if body.after_data => {
                        body.after_data = false;
                        body.held_error = Some(err);
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                    Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(err))),
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
