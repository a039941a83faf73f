//! Tests: a synthetic backend response body, for the unit tests of the
//! forwarding loop (`forward/tests.rs`) and the wait-first task
//! (`wait_first/tests.rs`).
//!
//! The body yields what the test sends, in order: a chunk, or an error that
//! fails the body; dropping the sender ends it cleanly. It counts the chunks
//! taken from it, so backpressure is visible.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

/// The body the code under test reads.
pub struct FakeBody {
    rx: mpsc::UnboundedReceiver<Result<Bytes, String>>,
    taken: Arc<AtomicUsize>,
}

/// The test's end of a [`FakeBody`].
pub struct FakeBackend {
    tx: Option<mpsc::UnboundedSender<Result<Bytes, String>>>,
    taken: Arc<AtomicUsize>,
}

/// A body and the test's end of it.
pub fn fake_backend() -> (FakeBackend, FakeBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    let taken = Arc::new(AtomicUsize::new(0));
    let backend = FakeBackend {
        tx: Some(tx),
        taken: taken.clone(),
    };
    (backend, FakeBody { rx, taken })
}

impl FakeBackend {
    /// The next chunk of the body.
    pub fn send(&self, chunk: &'static str) {
        self.tx
            .as_ref()
            .expect("the backend is open")
            .send(Ok(Bytes::from_static(chunk.as_bytes())))
            .unwrap();
    }

    /// Fails the body after what was sent (the connection was reset).
    pub fn fail(&mut self) {
        let tx = self.tx.take().expect("the backend is open");
        tx.send(Err("connection reset".into())).unwrap();
    }

    /// Ends the body cleanly after what was sent.
    pub fn end(&mut self) {
        self.tx = None;
    }

    /// Chunks the code under test has taken from the body so far.
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::SeqCst)
    }
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = String;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, String>>> {
        self.rx.poll_recv(cx).map(|item| {
            item.map(|item| {
                self.taken.fetch_add(1, Ordering::SeqCst);
                item.map(Frame::data)
            })
        })
    }
}
