//! The forwarding loop with a synthetic backend body and a synthetic
//! client, under tokio's paused clock.
//!
//! The backend is a [`FakeBody`](crate::chat::fake_backend::FakeBody) fed
//! by the test (a chunk, an error, or the end) that counts the chunks the
//! loop has taken, so backpressure is visible. The client is the receiving
//! end of the proxy's own [`ProxyBody::channel`], read (or not) by the
//! test; the lease is a detached [`TicketEvents`]. Time is paused, so the
//! stall limit (60 s), keepalives (5 s) and the final-frame limit (1 s)
//! pass at once and can be asserted to the millisecond; `sleep` is only
//! used to move that clock to the moment a test acts. Every wait on the loop is bounded
//! (a paused-clock timeout), so a loop that hangs fails instead of blocking.

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use strata_protocol::wire::RevokeReason;

use crate::chat::fake_backend::{FakeBackend, fake_backend};
use crate::link::TicketEvent;
use crate::observe::{BodyKind, Observed};
use crate::response_body::ProxyBody;

use super::*;

/// Bound on every wait (paused clock: it costs nothing, and it is far past
/// every limit the loop has).
const BOUND: Duration = Duration::from_secs(3600);

/// How one run is set up.
struct Setup {
    mode: AfterHeaders,
    kind: BodyKind,
    gate: ModelGate,
    deadline: Option<Duration>,
    keepalive: bool,
    idle: Option<Duration>,
}

impl Setup {
    /// An event stream with the router's own headers (wait-first): failures
    /// in band, keepalives on, the model gate open.
    fn sse() -> Setup {
        Setup {
            mode: AfterHeaders::InBandError,
            kind: BodyKind::Sse,
            gate: ModelGate::open(),
            deadline: None,
            keepalive: true,
            idle: None,
        }
    }

    /// A passed-through body of no particular type: failures end the
    /// transfer, no keepalives.
    fn passthrough() -> Setup {
        Setup {
            mode: AfterHeaders::TransportError,
            kind: BodyKind::Other,
            gate: ModelGate::open(),
            deadline: None,
            keepalive: false,
            idle: None,
        }
    }
}

/// One forwarding loop under test, and the test's ends of it.
struct Run {
    backend: FakeBackend,
    client: Option<ProxyBody>,
    lease: mpsc::UnboundedSender<TicketEvent>,
    task: Option<JoinHandle<(ForwardEnd, Observed)>>,
    started: TokioInstant,
}

fn start(setup: Setup) -> Run {
    let (backend, mut body) = fake_backend();
    let (tx, client) = ProxyBody::channel();
    let (lease_tx, mut lease) = TicketEvents::detached();
    let started = TokioInstant::now();
    let deadline = setup.deadline.map(|after| (started + after).into_std());
    let task = tokio::spawn(async move {
        let mut observer = ResponseObserver::new(setup.kind);
        let mut gate = setup.gate;
        let end = forward(
            &mut body,
            &tx,
            &mut observer,
            &mut gate,
            setup.mode,
            Bounds {
                lease: &mut lease,
                deadline,
                keepalive: setup.keepalive,
                first_keepalive: None,
                idle: setup.idle,
            },
        )
        .await;
        (end, observer.finish())
    });
    Run {
        backend,
        client: Some(client),
        lease: lease_tx,
        task: Some(task),
        started,
    }
}

impl Run {
    fn send(&self, chunk: &'static str) {
        self.backend.send(chunk);
    }

    fn fail_backend(&mut self) {
        self.backend.fail();
    }

    fn end_backend(&mut self) {
        self.backend.end();
    }

    /// The client's next item: `Some(Ok(bytes))`, `Some(Err(_))` for an
    /// aborted transfer, `None` at the clean end.
    async fn read(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        let client = self.client.as_mut().expect("the client is here");
        let frame = tokio::time::timeout(BOUND, client.frame())
            .await
            .expect("the client got something within the bound");
        frame.map(|frame| frame.map(|frame| frame.into_data().expect("only data frames")))
    }

    async fn read_bytes(&mut self) -> Bytes {
        match self.read().await {
            Some(Ok(bytes)) => bytes,
            other => panic!("expected data, got {other:?}"),
        }
    }

    /// Nothing reaches the client for `quiet` (the loop may still be busy).
    async fn nothing_for(&mut self, quiet: Duration) {
        let client = self.client.as_mut().expect("the client is here");
        let got = tokio::time::timeout(quiet, client.frame()).await;
        assert!(got.is_err(), "the client got {got:?}");
    }

    fn client_gone(&mut self) {
        self.client = None;
    }

    async fn end(&mut self) -> (ForwardEnd, Observed) {
        let task = self.task.take().expect("not ended yet");
        tokio::time::timeout(BOUND, task)
            .await
            .expect("the loop ended within the bound")
            .expect("the loop did not panic")
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn taken(&self) -> usize {
        self.backend.taken()
    }
}

const FIRST: &str = "data: {\"model\":\"up-m\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
const DONE: &str = "data: [DONE]\n\n";

// ---- clean ends ------------------------------------------------------------

/// A stream that ends after `[DONE]` is forwarded chunk by chunk, unchanged
/// and in order, then ends cleanly; the observer saw every byte.
#[tokio::test(start_paused = true)]
async fn a_complete_stream_is_forwarded_unchanged_and_completes() {
    let mut run = start(Setup {
        gate: ModelGate::new(BodyKind::Sse, "up-m", None),
        ..Setup::sse()
    });
    run.send(FIRST);
    run.send(DONE);
    run.end_backend();
    assert_eq!(run.read_bytes().await, FIRST);
    assert_eq!(run.read_bytes().await, DONE);
    assert!(run.read().await.is_none(), "a clean end");
    let (end, observed) = run.end().await;
    assert_eq!(end, ForwardEnd::Completed);
    assert_eq!(observed.response_bytes, (FIRST.len() + DONE.len()) as u64);
}

/// An event stream whose body ends before `[DONE]` was cut off (the
/// backend died): with the router's own headers the client gets an
/// `event: error` frame after what was forwarded.
#[tokio::test(start_paused = true)]
async fn an_event_stream_that_ends_before_done_was_cut_off() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    run.end_backend();
    assert_eq!(run.read_bytes().await, FIRST);
    assert_eq!(run.read_bytes().await, ChatError::BackendCutOff.sse_frame());
    assert!(run.read().await.is_none());
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::BackendCutOff)
    );
}

// ---- the client -----------------------------------------------------------------

/// A client that goes away ends the loop at once, while the backend is
/// quiet and while a chunk waits for the client alike; nothing more is read
/// from the backend.
#[tokio::test(start_paused = true)]
async fn a_client_that_goes_away_ends_the_loop_at_once() {
    for chunks in [0, 3] {
        let mut run = start(Setup::passthrough());
        for _ in 0..chunks {
            run.send("chunk");
        }
        // Let the loop take what it can before the client leaves.
        tokio::task::yield_now().await;
        let taken = run.taken();
        run.client_gone();
        assert_eq!(run.end().await.0, ForwardEnd::ClientGone, "{chunks} chunks");
        assert_eq!(run.elapsed(), Duration::ZERO);
        assert_eq!(run.taken(), taken, "read on after the client left");
    }
}

/// A client that stops reading holds at most two chunks (one in the
/// channel, one in the loop's hand); the backend is not read further. After
/// `CLIENT_STALL_LIMIT` without progress the response is aborted: the
/// client's next read is the transport error, ahead of the chunk still
/// queued.
#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_is_cut_off_at_the_stall_limit() {
    let mut run = start(Setup::passthrough());
    for _ in 0..5 {
        run.send("chunk");
    }
    let (end, _) = run.end().await;
    assert_eq!(end, ForwardEnd::ClientStalled);
    assert_eq!(run.elapsed(), CLIENT_STALL_LIMIT);
    assert_eq!(run.taken(), crate::response_body::STREAM_CHANNEL_CHUNKS);
    assert!(matches!(run.read().await, Some(Err(_))), "aborted");
}

/// The stall limit counts from the client's last progress, not from the
/// start: a client that took a chunk at 30 s is cut off at 90 s.
#[tokio::test(start_paused = true)]
async fn the_stall_limit_counts_from_the_last_chunk_the_client_took() {
    let mut run = start(Setup::passthrough());
    for _ in 0..5 {
        run.send("chunk");
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(run.read_bytes().await, "chunk");
    let (end, _) = run.end().await;
    assert_eq!(end, ForwardEnd::ClientStalled);
    assert_eq!(run.elapsed(), Duration::from_secs(30) + CLIENT_STALL_LIMIT);
}

// ---- keepalives --------------------------------------------------------------------

/// While the backend is quiet, a waiting SSE client gets a comment every
/// `KEEPALIVE_INTERVAL` (4 s) counted from the last thing it was sent: at
/// 4 s and 8 s, then (after a chunk at 10 s) at 14 s.
#[tokio::test(start_paused = true)]
async fn keepalives_fill_the_backends_silences() {
    assert_eq!(KEEPALIVE_INTERVAL, Duration::from_secs(4));
    let mut run = start(Setup::sse());
    for at in [4, 8] {
        assert_eq!(run.read_bytes().await, KEEPALIVE_COMMENT);
        assert_eq!(run.elapsed(), Duration::from_secs(at));
    }
    tokio::time::sleep_until(run.started + Duration::from_secs(10)).await;
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    assert_eq!(run.read_bytes().await, KEEPALIVE_COMMENT);
    assert_eq!(run.elapsed(), Duration::from_secs(14));
    run.send(DONE);
    run.end_backend();
    assert_eq!(run.read_bytes().await, DONE);
    assert!(run.read().await.is_none());
    let (end, observed) = run.end().await;
    assert_eq!(end, ForwardEnd::Completed);
    // Comments are part of what the client got.
    assert_eq!(
        observed.response_bytes,
        (3 * KEEPALIVE_COMMENT.len() + FIRST.len() + DONE.len()) as u64
    );
}

/// No comment goes into the middle of a frame: after half a frame the
/// client hears nothing until the backend finishes it.
#[tokio::test(start_paused = true)]
async fn no_keepalive_inside_a_frame() {
    let mut run = start(Setup::sse());
    run.send("data: {\"choices\":");
    assert_eq!(run.read_bytes().await, "data: {\"choices\":");
    run.nothing_for(KEEPALIVE_INTERVAL * 4).await;
    run.send("[]}\n\n");
    assert_eq!(run.read_bytes().await, "[]}\n\n");
    assert_eq!(run.read_bytes().await, KEEPALIVE_COMMENT);
}

/// Without keepalives (a passed-through body), a quiet backend means a
/// quiet client.
#[tokio::test(start_paused = true)]
async fn no_keepalives_when_they_are_off() {
    let mut run = start(Setup {
        keepalive: false,
        ..Setup::sse()
    });
    run.nothing_for(KEEPALIVE_INTERVAL * 10).await;
    run.send(DONE);
    run.end_backend();
    assert_eq!(run.read_bytes().await, DONE);
    assert_eq!(run.end().await.0, ForwardEnd::Completed);
}

// ---- failures ---------------------------------------------------------------------

/// A backend body that fails part-way, with the backend's own headers
/// passed through: what came before is forwarded, then the transfer fails
/// with the fixed client message.
#[tokio::test(start_paused = true)]
async fn a_backend_error_mid_body_fails_the_transfer() {
    let mut run = start(Setup::passthrough());
    run.send("partial");
    run.fail_backend();
    assert_eq!(run.read_bytes().await, "partial");
    match run.read().await {
        Some(Err(err)) => assert_eq!(err.to_string(), ChatError::BackendCutOff.client_message()),
        other => panic!("expected the transport error, got {other:?}"),
    }
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::BackendCutOff)
    );
}

/// The same under the router's SSE headers: an `event: error` frame, and
/// since the backend stopped inside a frame, a blank line first so the
/// error frame parses on its own.
#[tokio::test(start_paused = true)]
async fn a_backend_error_inside_a_frame_closes_it_before_the_error_frame() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    run.send("data: {\"cho");
    run.fail_backend();
    assert_eq!(run.read_bytes().await, FIRST);
    assert_eq!(run.read_bytes().await, "data: {\"cho");
    let mut expected = b"\n\n".to_vec();
    expected.extend_from_slice(&ChatError::BackendCutOff.sse_frame());
    assert_eq!(run.read_bytes().await, expected);
    assert!(run.read().await.is_none());
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::BackendCutOff)
    );
}

/// A response whose first frame names another model than the leased one is
/// stopped before any of it reaches the client.
#[tokio::test(start_paused = true)]
async fn an_answer_from_another_model_is_stopped_before_any_byte() {
    let mut run = start(Setup {
        gate: ModelGate::new(BodyKind::Sse, "up-m", None),
        ..Setup::sse()
    });
    run.send("data: {\"model\":\"other\",\"choices\":[]}\n\n");
    assert_eq!(run.read_bytes().await, ChatError::WrongModel.sse_frame());
    assert!(run.read().await.is_none());
    assert_eq!(run.end().await.0, ForwardEnd::Failed(ChatError::WrongModel));
}

/// `response_ms` bounds the whole response, even one that keeps streaming.
#[tokio::test(start_paused = true)]
async fn the_response_deadline_ends_the_stream() {
    let mut run = start(Setup {
        deadline: Some(Duration::from_secs(30)),
        keepalive: false,
        ..Setup::sse()
    });
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    assert_eq!(run.read_bytes().await, ChatError::StreamTimeout.sse_frame());
    assert_eq!(run.elapsed(), Duration::from_secs(30));
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::StreamTimeout)
    );
}

/// `stream_idle_ms`: a backend that sends nothing for that long ends the
/// stream with the timeout frame; every backend byte (its own comments too)
/// restarts the count, the router's keepalives do not.
#[tokio::test(start_paused = true)]
async fn the_backend_s_silence_ends_the_stream_at_stream_idle_ms() {
    // 13 s, so that no router keepalive (every 4 s of quiet) is due at the
    // same instant as the timeout: the loop's order between two timers due
    // together is not fixed.
    let mut run = start(Setup {
        idle: Some(Duration::from_secs(13)),
        ..Setup::sse()
    });
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    // The router's own keepalives (at 4 s, and every 4 s after the
    // backend's comment) do not count as the backend's bytes.
    assert_eq!(run.read_bytes().await, KEEPALIVE_COMMENT);
    tokio::time::sleep(Duration::from_secs(3)).await;
    run.send(": strata keep-alive\n\n");
    assert_eq!(run.read_bytes().await, ": strata keep-alive\n\n");
    assert_eq!(run.elapsed(), Duration::from_secs(7));
    for at in [11, 15, 19] {
        assert_eq!(run.read_bytes().await, KEEPALIVE_COMMENT);
        assert_eq!(run.elapsed(), Duration::from_secs(at));
    }
    assert_eq!(run.read_bytes().await, ChatError::StreamIdle.sse_frame());
    assert_eq!(run.elapsed(), Duration::from_secs(20));
    assert!(run.read().await.is_none());
    assert_eq!(run.end().await.0, ForwardEnd::Failed(ChatError::StreamIdle));
}

/// Before anything went out on a held stream, the silence is a real status:
/// nothing is written and the error is returned to be answered with 504.
#[tokio::test(start_paused = true)]
async fn a_silent_backend_before_the_first_byte_is_a_real_504() {
    let mut run = start(Setup {
        mode: AfterHeaders::Held,
        keepalive: false,
        idle: Some(Duration::from_secs(10)),
        ..Setup::sse()
    });
    assert_eq!(run.end().await.0, ForwardEnd::Failed(ChatError::StreamIdle));
    assert_eq!(run.elapsed(), Duration::from_secs(10));
    assert_eq!(
        ChatError::StreamIdle.status(),
        hyper::StatusCode::GATEWAY_TIMEOUT
    );
}

// ---- the lease -------------------------------------------------------------------

/// A revoked lease (operator `off --now`) aborts the response at once, with
/// the revocation's error, while the backend still has more to say.
#[tokio::test(start_paused = true)]
async fn a_revoked_lease_ends_the_response() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    run.lease
        .send(TicketEvent::Revoked(RevokeReason::RoutingOff))
        .unwrap();
    assert_eq!(
        run.read_bytes().await,
        ChatError::RevokedRoutingOff.sse_frame()
    );
    assert!(run.read().await.is_none());
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::RevokedRoutingOff)
    );
    assert_eq!(run.elapsed(), Duration::ZERO);
}

/// A forced shutdown revokes the lease and kills the backend at once; when
/// the cut reaches the loop first, the revocation that follows within the
/// wait still names the end (the client is told `shutting_down`, not a
/// backend failure).
#[tokio::test(start_paused = true)]
async fn a_cut_off_followed_by_its_revocation_is_told_as_the_revocation() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    run.end_backend();
    tokio::time::sleep(Duration::from_millis(100)).await;
    run.lease
        .send(TicketEvent::Revoked(RevokeReason::Shutdown))
        .unwrap();
    assert_eq!(
        run.read_bytes().await,
        ChatError::RevokedShutdown.sse_frame()
    );
    assert!(run.read().await.is_none());
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::RevokedShutdown)
    );
}

/// Without a revocation the cut-off is told as what it is, after the short
/// wait for one.
#[tokio::test(start_paused = true)]
async fn a_cut_off_without_a_revocation_waits_briefly_then_says_so() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    run.end_backend();
    assert_eq!(run.read_bytes().await, ChatError::BackendCutOff.sse_frame());
    assert_eq!(run.elapsed(), super::CUT_OFF_EXPLANATION_WAIT);
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::BackendCutOff)
    );
}

/// A lost supervisor link does not cut an open response: the connection to
/// the backend is already made, so the backend decides how it ends.
#[tokio::test(start_paused = true)]
async fn a_lost_link_leaves_an_open_response_alone() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    assert_eq!(run.read_bytes().await, FIRST);
    run.lease.send(TicketEvent::LinkLost).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.send(DONE);
    run.end_backend();
    assert_eq!(run.read_bytes().await, DONE);
    assert!(run.read().await.is_none());
    assert_eq!(run.end().await.0, ForwardEnd::Completed);
}

/// When the response must end with an error frame but the client is not
/// reading, the frame waits at most `FINAL_SEND_LIMIT`; then the response
/// is aborted, so a stuck client cannot hold the loop.
#[tokio::test(start_paused = true)]
async fn an_error_frame_the_client_does_not_take_aborts_the_response() {
    let mut run = start(Setup::sse());
    run.send(FIRST);
    run.send(FIRST);
    tokio::task::yield_now().await;
    run.lease
        .send(TicketEvent::Revoked(RevokeReason::Shutdown))
        .unwrap();
    assert_eq!(
        run.end().await.0,
        ForwardEnd::Failed(ChatError::RevokedShutdown)
    );
    assert_eq!(run.elapsed(), FINAL_SEND_LIMIT);
    assert!(matches!(run.read().await, Some(Err(_))), "aborted");
}

/// Before any upstream byte (the wait ended in a failure after the early
/// SSE headers): one `event: error` frame, then the end.
#[tokio::test(start_paused = true)]
async fn fail_after_headers_sends_one_error_frame() {
    let (tx, mut client) = ProxyBody::channel();
    let mut observer = ResponseObserver::new(BodyKind::Sse);
    fail_after_headers(
        &tx,
        AfterHeaders::InBandError,
        ChatError::RevokedShutdown,
        &mut observer,
    )
    .await;
    drop(tx);
    let frame = client.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(frame, ChatError::RevokedShutdown.sse_frame());
    assert!(client.frame().await.is_none());
}
