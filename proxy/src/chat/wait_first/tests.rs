//! The wait-first task with a scripted admission, a synthetic backend and a
//! synthetic client, under tokio's paused clock.
//!
//! The admission is a [`Scripted`] stand-in that resolves when the test
//! hands it a [`Dispatched`] around a
//! [`FakeBody`](crate::chat::fake_backend::FakeBody) (or a failure), as the
//! real one resolves at the grant and the backend's response head. The
//! client is the other end of the task's answer: the test takes the head
//! from it and reads the body (or leaves). The record goes to a detached
//! supervisor, which the test reads. Time is paused, so the hold (4 s) and
//! the keepalives (every 5 s) can be asserted to the millisecond; `sleep`
//! only moves that clock to the moment a test acts. Every wait is bounded
//! (a paused-clock timeout), so a task that hangs fails instead of blocking.

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::ServiceTier;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::chat::fake_backend::{FakeBackend, FakeBody, fake_backend};
use crate::chat::forward::KEEPALIVE_COMMENT;
use crate::link::{DetachedSupervisor, SupervisorLink, TicketEvent, TicketEvents};
use crate::observe::ModelGate;

use super::*;

/// Bound on every wait (paused clock: it costs nothing, and it is far past
/// every limit the task has).
const BOUND: Duration = Duration::from_secs(3600);

const FIRST: &str = "data: {\"model\":\"m\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
const DONE: &str = "data: [DONE]\n\n";

/// What the admission comes to, sent by the test.
type Admitted = Result<Dispatched<FakeBody>, ChatError>;

/// The admission the test scripts: it resolves with what the test sends,
/// and records the backend's status as the real one does.
struct Scripted(oneshot::Receiver<Admitted>);

impl Admission for Scripted {
    type Body = FakeBody;

    async fn admit(self, trace: &mut Trace, _progress: &WaitProgress) -> Admitted {
        let admitted = self.0.await.expect("the test scripts the admission");
        if let Ok(dispatched) = &admitted {
            trace.upstream_headers(dispatched.response.status().as_u16());
        }
        admitted
    }
}

/// One wait-first task under test, and the test's ends of it.
struct Run {
    admission: Option<oneshot::Sender<Admitted>>,
    answered: Option<oneshot::Receiver<Response<ProxyBody>>>,
    /// The client's body, once the head arrived.
    body: Option<ProxyBody>,
    supervisor: DetachedSupervisor,
    /// The lease of the dispatched response (kept open).
    _lease: Option<mpsc::UnboundedSender<TicketEvent>>,
    task: Option<JoinHandle<()>>,
    started: TokioInstant,
}

/// Starts the task for a request that arrives now.
fn start() -> Run {
    let (link, supervisor) = SupervisorLink::detached();
    let app = App::for_tests(link);
    let started = TokioInstant::now();
    let trace = Trace::stream_for_tests(&app, "r-1", "m");
    let headers = StrataHeaders {
        request_id: String::from("r-1"),
        concrete_model: Some(String::from("m")),
        tier: Some(ServiceTier::Default),
    };
    let (admission, scripted) = oneshot::channel();
    let (answer, answered) = oneshot::channel();
    let task = tokio::spawn(wait_first(
        app.clone(),
        Scripted(scripted),
        trace,
        headers,
        answer,
    ));
    Run {
        admission: Some(admission),
        answered: Some(answered),
        body: None,
        supervisor,
        _lease: None,
        task: Some(task),
        started,
    }
}

impl Run {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The backend answers with `status` and `content_type`; the test
    /// feeds the body through the returned end.
    fn admit(&mut self, status: u16, content_type: &'static str) -> FakeBackend {
        let (backend, body) = fake_backend();
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        let (lease, events) = TicketEvents::detached();
        self._lease = Some(lease);
        let dispatched = Dispatched {
            response,
            events,
            gate: ModelGate::open(),
            deadline: None,
        };
        self.script(Ok(dispatched));
        backend
    }

    /// The admission fails with `error`.
    fn refuse(&mut self, error: ChatError) {
        self.script(Err(error));
    }

    fn script(&mut self, admitted: Admitted) {
        let admission = self.admission.take().expect("admitted once");
        assert!(admission.send(admitted).is_ok(), "the task still waits");
    }

    /// The head has not been answered yet.
    fn no_head_yet(&mut self) {
        let answered = self.answered.as_mut().expect("no head taken yet");
        assert!(
            matches!(
                answered.try_recv(),
                Err(oneshot::error::TryRecvError::Empty)
            ),
            "the head went out at {:?}",
            self.elapsed()
        );
    }

    /// Waits for the task's answer; keeps its body for [`Run::read`].
    async fn head(&mut self) -> Response<()> {
        let answered = self.answered.take().expect("one head");
        let response = tokio::time::timeout(BOUND, answered)
            .await
            .expect("the head within the bound")
            .expect("the task answered");
        let (parts, body) = response.into_parts();
        self.body = Some(body);
        Response::from_parts(parts, ())
    }

    /// The client's next item: `Some(bytes)`, `None` at the clean end.
    async fn read(&mut self) -> Option<Bytes> {
        let body = self.body.as_mut().expect("the head arrived");
        let frame = tokio::time::timeout(BOUND, body.frame())
            .await
            .expect("the client got something within the bound");
        frame.map(|frame| {
            frame
                .expect("no transport error")
                .into_data()
                .expect("only data frames")
        })
    }

    /// The client's next chunk, as text.
    async fn read_text(&mut self) -> String {
        let bytes = self.read().await.expect("a chunk, not the end");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    /// Everything the client gets until the body ends.
    async fn read_to_end(&mut self) -> String {
        let mut text = Vec::new();
        while let Some(bytes) = self.read().await {
            text.extend_from_slice(&bytes);
        }
        String::from_utf8(text).expect("UTF-8")
    }

    /// The request's record, once the task (and any forwarding task it
    /// started) has finished the trace.
    async fn record(&mut self) -> RequestRecord {
        if let Some(task) = self.task.take() {
            tokio::time::timeout(BOUND, task)
                .await
                .expect("the task ended within the bound")
                .expect("the task did not panic");
        }
        tokio::time::timeout(BOUND, self.supervisor.next_record())
            .await
            .expect("the record within the bound")
            .expect("one record")
    }
}

/// The comment a request that waits in the queue gets `secs` after
/// arrival (nothing was ahead of it).
fn queued(secs: u64) -> String {
    format!(": queued for m (default), {secs}s\n\n")
}

/// Asserts `head` is the wait-first stream's `200` and SSE head.
fn assert_sse_head(head: &Response<()>) {
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()[CONTENT_TYPE], "text/event-stream");
    assert_eq!(head.headers()["cache-control"], "no-cache");
    assert_eq!(head.headers()["x-strata-request-id"], "r-1");
    assert_eq!(head.headers()["x-strata-concrete-model"], "m");
}

/// Asserts `head` and `body` are the JSON error response a non-streaming
/// request gets for `error`.
fn assert_error_response(head: &Response<()>, body: &str, error: ChatError) {
    let expected = error.into_response();
    assert_eq!(head.status(), expected.status());
    for (name, value) in expected.headers() {
        assert_eq!(head.headers().get(name), Some(value), "{name}");
    }
    assert_eq!(head.headers()["x-strata-request-id"], "r-1");
    assert_eq!(body, error.reply().body_with(None));
}

// ---- the head is held until the first byte or the first keepalive -------

/// The admission and the backend's head are in at 1 s, but the client's
/// head waits for the first byte (2 s), which comes with it.
#[tokio::test(start_paused = true)]
async fn the_head_waits_for_the_first_byte() {
    let mut run = start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut backend = run.admit(200, "text/event-stream");
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.no_head_yet();
    backend.send(FIRST);
    let head = run.head().await;
    assert_eq!(run.elapsed(), Duration::from_secs(2));
    assert_sse_head(&head);
    assert_eq!(run.read_text().await, FIRST);
    backend.send(DONE);
    backend.end();
    assert_eq!(run.read_to_end().await, DONE);
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(200), Reason::Completed)
    );
}

/// Without a byte, the head goes out with the first keepalive, 4 s after
/// arrival (a second before raw httpx's 5 s read timeout); the comments
/// after it come every 4 s and say where the request is. The stream then
/// carries the backend's body once it is admitted.
#[tokio::test(start_paused = true)]
async fn without_a_byte_the_head_goes_out_with_the_first_keepalive() {
    let mut run = start();
    tokio::time::sleep(Duration::from_millis(3999)).await;
    run.no_head_yet();
    let head = run.head().await;
    assert_eq!(run.elapsed(), HEADER_HOLD);
    assert_sse_head(&head);
    assert_eq!(run.read_text().await, queued(4));
    assert_eq!(run.read_text().await, queued(8));
    assert_eq!(run.elapsed(), HEADER_HOLD + KEEPALIVE_INTERVAL);
    let mut backend = run.admit(200, "text/event-stream");
    backend.send(FIRST);
    assert_eq!(run.read_text().await, FIRST);
    // The backend is quiet: the forwarding loop's keepalives take over.
    assert_eq!(run.read().await.as_deref(), Some(KEEPALIVE_COMMENT));
    assert_eq!(run.elapsed(), HEADER_HOLD + 2 * KEEPALIVE_INTERVAL);
    backend.send(DONE);
    backend.end();
    assert_eq!(run.read_to_end().await, DONE);
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(200), Reason::Completed)
    );
}

// ---- a failure before the commit is a real HTTP status -------------------

/// A refused admission before the hold ends is the same JSON error a
/// non-streaming request gets, with its status and headers.
#[tokio::test(start_paused = true)]
async fn a_refusal_before_the_head_is_the_error_status() {
    let mut run = start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let error = ChatError::LoadFailed { retry_after_s: 30 };
    run.refuse(error);
    let head = run.head().await;
    assert_eq!(run.elapsed(), Duration::from_secs(1));
    let body = run.read_to_end().await;
    assert_error_response(&head, &body, error);
    assert_eq!(head.headers()["retry-after"], "30");
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(503), Reason::ModelLoadError)
    );
}

/// The backend's own error status before the hold ends is passed through
/// whole, status, type and body, as for a non-streaming request.
#[tokio::test(start_paused = true)]
async fn a_backend_error_before_the_head_is_passed_through() {
    let mut run = start();
    let mut backend = run.admit(500, "application/json");
    let text = r#"{"error":{"message":"boom","type":"server_error"}}"#;
    backend.send(text);
    backend.end();
    let head = run.head().await;
    assert_eq!(head.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(head.headers()[CONTENT_TYPE], "application/json");
    assert_eq!(head.headers()["x-strata-request-id"], "r-1");
    assert_eq!(run.read_to_end().await, text);
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(500), Reason::UpstreamError)
    );
}

/// A backend body that fails before its first byte, while the head is
/// still held, is still a real status: 502.
#[tokio::test(start_paused = true)]
async fn a_backend_cut_off_before_its_first_byte_is_a_bad_gateway() {
    let mut run = start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut backend = run.admit(200, "text/event-stream");
    backend.fail();
    let head = run.head().await;
    // A cut-off waits briefly for a revocation that would explain it.
    assert_eq!(
        run.elapsed(),
        Duration::from_secs(1) + crate::chat::forward::CUT_OFF_EXPLANATION_WAIT
    );
    let body = run.read_to_end().await;
    assert_error_response(&head, &body, ChatError::BackendCutOff);
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(502), Reason::UpstreamError)
    );
}

// ---- a failure after the commit is one `event: error` and no `[DONE]` ----

/// A refusal after the head went out ends the stream with one error frame
/// (its status inside), after the comments, and no `[DONE]`.
#[tokio::test(start_paused = true)]
async fn a_refusal_after_the_head_is_one_error_frame() {
    let mut run = start();
    let head = run.head().await;
    assert_sse_head(&head);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let error = ChatError::LoadFailed { retry_after_s: 30 };
    run.refuse(error);
    let body = run.read_to_end().await;
    let frame = String::from_utf8(error.sse_frame().to_vec()).unwrap();
    assert_eq!(body, format!("{}{frame}", queued(4)));
    assert!(frame.contains("\"status\":503"), "{frame}");
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(200), Reason::ModelLoadError)
    );
}

/// A backend that fails mid-stream, after its first byte went out with the
/// head, ends as one error frame and no `[DONE]`.
#[tokio::test(start_paused = true)]
async fn a_backend_cut_off_after_the_head_is_one_error_frame() {
    let mut run = start();
    let mut backend = run.admit(200, "text/event-stream");
    backend.send(FIRST);
    assert_sse_head(&run.head().await);
    backend.fail();
    let body = run.read_to_end().await;
    let frame = String::from_utf8(ChatError::BackendCutOff.sse_frame().to_vec()).unwrap();
    assert_eq!(body, format!("{FIRST}{frame}"));
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(200), Reason::UpstreamError)
    );
}

/// The backend's error status after the head went out becomes one error
/// frame with that status and its known error type; its message is not
/// passed on.
#[tokio::test(start_paused = true)]
async fn a_backend_error_after_the_head_is_one_error_frame() {
    let mut run = start();
    assert_sse_head(&run.head().await);
    let mut backend = run.admit(409, "application/json");
    backend.send(r#"{"error":{"message":"the prompt says boom","type":"model_busy"}}"#);
    backend.end();
    let body = run.read_to_end().await;
    let error = ChatError::upstream_status(StatusCode::CONFLICT, Some("model_busy"));
    let frame = String::from_utf8(error.sse_frame().to_vec()).unwrap();
    assert_eq!(body, format!("{}{frame}", queued(4)));
    assert!(
        frame.contains("\"status\":409") && frame.contains("\"type\":\"model_busy\""),
        "{frame}"
    );
    assert!(!body.contains("boom"), "{body}");
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (Some(200), Reason::UpstreamError)
    );
}

// ---- the client goes away --------------------------------------------------

/// A client that leaves while the head is held is a client disconnect with
/// no status, and its admission is dropped (which withdraws the ticket).
#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_before_the_head_is_a_disconnect() {
    let mut run = start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.answered = None;
    let record = run.record().await;
    assert_eq!(
        (record.status, record.reason),
        (None, Reason::ClientDisconnect)
    );
    assert!(
        run.admission
            .as_ref()
            .is_some_and(|admission| admission.is_closed()),
        "the admission was dropped"
    );
    assert_eq!(run.elapsed(), Duration::from_secs(1));
}
