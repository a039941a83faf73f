//! `stream_idle_ms` as a body of its own: [`IdleTimeout`] wraps the backend's
//! response body and fails it once the backend has sent nothing for the
//! limit, so the forwarding loop sees the silence as one more body error
//! instead of keeping a timer, a branch and a per-chunk clock read for it.
//!
//! The clock runs only while the body is being read and has nothing: it is
//! started by a poll that finds the inner body pending and stopped by every
//! frame (data of any kind, the backend's own comments included). A reader
//! that stops reading for its own reasons (the client has not taken the last
//! chunk) says so with [`IdleTimeout::restart`], since that wait is not the
//! backend's silence. What the reader sends on its own (the router's
//! keepalives) never touches this body, so it does not count either.
//!
//! Written here rather than taken from a crate: tower-http's and
//! linkerd2-proxy's body timeouts have the same shape but neither can be told
//! that the reader paused (a paused reader would time out at once on its next
//! read), tower-http's error is boxed, and both bring a dependency for about
//! forty lines.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant as TokioInstant, Sleep};

/// Why an [`IdleTimeout`] body failed.
#[derive(Debug)]
pub enum IdleError<E> {
    /// The backend sent nothing for this long while it was read.
    Silent(Duration),
    /// The inner body failed.
    Body(E),
}

impl<E: fmt::Display> fmt::Display for IdleError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleError::Silent(limit) => write!(f, "no byte for {} ms", limit.as_millis()),
            IdleError::Body(error) => error.fmt(f),
        }
    }
}

/// A body that fails with [`IdleError::Silent`] once its inner body has
/// been polled without yielding anything for `limit` (see the module doc).
/// Without a limit it only passes the inner body through.
pub struct IdleTimeout<B> {
    inner: B,
    limit: Option<Duration>,
    /// Allocated at the first wait and re-armed after that, not per chunk.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The clock is running: `sleep` is set for the current silence.
    armed: bool,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, limit: Option<Duration>) -> IdleTimeout<B> {
        IdleTimeout {
            inner,
            limit,
            sleep: None,
            armed: false,
        }
    }

    /// The reader stopped reading for a while on its own account: the
    /// silence so far is forgotten, and the clock starts again with the next
    /// poll that finds the body quiet.
    pub fn restart(&mut self) {
        self.armed = false;
    }
}

impl<B: Body + Unpin> Body for IdleTimeout<B> {
    type Data = B::Data;
    type Error = IdleError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        // The backend first: a frame that is there wins over a timer that
        // came due at the same time.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.armed = false;
            return Poll::Ready(frame.map(|frame| frame.map_err(IdleError::Body)));
        }
        let Some(limit) = this.limit else {
            return Poll::Pending;
        };
        if !this.armed {
            let due = TokioInstant::now() + limit;
            match &mut this.sleep {
                Some(sleep) => sleep.as_mut().reset(due),
                None => this.sleep = Some(Box::pin(tokio::time::sleep_until(due))),
            }
            this.armed = true;
        }
        let sleep = this.sleep.as_mut().expect("armed above");
        ready!(sleep.as_mut().poll(cx));
        this.armed = false;
        Poll::Ready(Some(Err(IdleError::Silent(limit))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::BodyExt;

    use crate::chat::fake_backend::{FakeBody, fake_backend};

    use super::*;

    const LIMIT: Duration = Duration::from_secs(8);

    /// What the next read of `body` gives, and when (from `start`).
    async fn next(
        body: &mut IdleTimeout<FakeBody>,
        start: TokioInstant,
    ) -> (Option<Result<Bytes, String>>, Duration) {
        let frame = tokio::time::timeout(Duration::from_secs(3600), body.frame())
            .await
            .expect("an answer within the bound");
        let frame = frame.map(|frame| match frame {
            Ok(frame) => Ok(frame.into_data().expect("data")),
            Err(error) => Err(error.to_string()),
        });
        (frame, start.elapsed())
    }

    fn silent() -> Option<Result<Bytes, String>> {
        Some(Err(String::from("no byte for 8000 ms")))
    }

    /// A body that sends nothing fails at the limit, counted from the first
    /// read.
    #[tokio::test(start_paused = true)]
    async fn a_silent_body_fails_at_the_limit() {
        let (_backend, body) = fake_backend();
        let mut body = IdleTimeout::new(body, Some(LIMIT));
        let start = TokioInstant::now();
        assert_eq!(next(&mut body, start).await, (silent(), LIMIT));
    }

    /// Every frame restarts the count: frames at 5 s and 10 s, the failure
    /// at 18 s.
    #[tokio::test(start_paused = true)]
    async fn every_frame_restarts_the_clock() {
        let (backend, body) = fake_backend();
        let mut body = IdleTimeout::new(body, Some(LIMIT));
        let start = TokioInstant::now();
        let reads = async {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(next(&mut body, start).await);
            }
            got
        };
        let writes = async {
            for (at, chunk) in [(5, ": comment\n\n"), (10, "data: x\n\n")] {
                tokio::time::sleep_until(start + Duration::from_secs(at)).await;
                backend.send(chunk);
            }
        };
        let (got, ()) = tokio::join!(reads, writes);
        let secs = Duration::from_secs;
        assert_eq!(
            got,
            [
                (Some(Ok(Bytes::from(": comment\n\n"))), secs(5)),
                (Some(Ok(Bytes::from("data: x\n\n"))), secs(10)),
                (silent(), secs(18)),
            ]
        );
    }

    /// Time in which nobody reads the body is not the backend's silence:
    /// after a frame the clock starts with the next read.
    #[tokio::test(start_paused = true)]
    async fn the_clock_runs_only_while_the_body_is_read() {
        let (backend, body) = fake_backend();
        let mut body = IdleTimeout::new(body, Some(LIMIT));
        let start = TokioInstant::now();
        backend.send("data: x\n\n");
        assert_eq!(
            next(&mut body, start).await,
            (Some(Ok(Bytes::from("data: x\n\n"))), Duration::ZERO)
        );
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(
            next(&mut body, start).await,
            (silent(), Duration::from_secs(28))
        );
    }

    /// A reader that paused says so, and the silence so far is forgotten:
    /// without `restart` the read after a 6 s pause fails 2 s later, with
    /// it 8 s later.
    #[tokio::test(start_paused = true)]
    async fn restart_forgets_the_silence_so_far() {
        for (restart, fails_at) in [(false, 8), (true, 14)] {
            let (_backend, body) = fake_backend();
            let mut body = IdleTimeout::new(body, Some(LIMIT));
            let start = TokioInstant::now();
            // One read finds the body quiet and starts the clock.
            let first = tokio::time::timeout(Duration::from_secs(6), body.frame()).await;
            assert!(first.is_err(), "nothing yet");
            if restart {
                body.restart();
            }
            assert_eq!(
                next(&mut body, start).await,
                (silent(), Duration::from_secs(fails_at)),
                "restart: {restart}"
            );
        }
    }

    /// Without a limit the body only passes the inner one through: its
    /// frames, its failure, and no timer however long it is quiet.
    #[tokio::test(start_paused = true)]
    async fn without_a_limit_it_only_passes_through() {
        let (mut backend, body) = fake_backend();
        let mut body = IdleTimeout::new(body, None);
        let start = TokioInstant::now();
        let quiet = tokio::time::timeout(Duration::from_secs(3000), body.frame()).await;
        assert!(quiet.is_err(), "no timeout without a limit");
        backend.send("a");
        backend.fail();
        let secs = Duration::from_secs(3000);
        assert_eq!(
            next(&mut body, start).await,
            (Some(Ok(Bytes::from("a"))), secs)
        );
        assert_eq!(
            next(&mut body, start).await,
            (Some(Err(String::from("connection reset"))), secs)
        );
    }
}
