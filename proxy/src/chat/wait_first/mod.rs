//! Wait-first streaming: the task that holds a stream's `200` and SSE head
//! until the first byte is ready for the client or the first keepalive is
//! due ([`HEADER_HOLD`] after arrival), whichever comes first, sends
//! keepalives while the request waits for its lease, and forwards the body.
//!
//! A failure before the head goes out is a real HTTP status, exactly like a
//! non-streaming request's (a router-made error from [`reject`], or the
//! backend's own error response passed through); after it, a failure is one
//! `event: error` frame and the stream ends without `data: [DONE]`. One task
//! does all of it and alone decides when the head goes out; the handler only
//! waits for its answer.
//!
//! The task reads tokio's clock (the std clock in a running proxy, the
//! paused one in tests), and it gets its backend response through an
//! [`Admission`]: the request's [`Job`] in the proxy, a scripted stand-in
//! in `tests.rs`, which drives the task under a paused clock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::{Response, StatusCode};
use strata_protocol::record::Reason;
use tokio::sync::oneshot;
use tokio::time::Instant as TokioInstant;

use crate::app::App;
use crate::observe::{BodyKind, ResponseObserver};
use crate::response_body::{BodySender, ProxyBody};
use crate::upstream::UpstreamBody;

use super::admit::{Dispatched, Job};
use super::error::ChatError;
use super::forward::{self, AfterHeaders, BackendBody, Bounds, ForwardEnd, KEEPALIVE_INTERVAL};
use super::progress::WaitProgress;
use super::respond::{StrataHeaders, end_reason, reject, respond_passthrough, sse_head};
use super::trace::Trace;

/// How long a wait-first stream's head is held at most: its first
/// keepalive is due then. A second inside httpx's default five-second read
/// timeout, which a client counts from sending the request; the comments
/// after it come every [`KEEPALIVE_INTERVAL`].
pub const HEADER_HOLD: Duration = Duration::from_secs(4);

/// How much of a backend error body is read to find its error `type` for
/// an `event: error` frame.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How the task gets its backend response: [`Job::admit_and_send`] in the
/// proxy. The seam exists so tests can script the admission and feed a
/// synthetic backend body.
pub trait Admission: Send + 'static {
    type Body: BackendBody;

    /// Waits for the grant and sends the request; resolves once the
    /// backend's response head is in. `progress` learns where the request
    /// is, for the keepalives.
    fn admit(
        self,
        trace: &mut Trace,
        progress: &WaitProgress,
    ) -> impl Future<Output = Result<Dispatched<Self::Body>, ChatError>> + Send;
}

impl Admission for Job {
    type Body = UpstreamBody;

    fn admit(
        self,
        trace: &mut Trace,
        progress: &WaitProgress,
    ) -> impl Future<Output = Result<Dispatched<UpstreamBody>, ChatError>> + Send {
        self.admit_and_send(trace, Some(progress))
    }
}

/// Runs `work` while sending SSE comments to a waiting client. Returns
/// `None` if the client went away first (dropping `work`; the trace's
/// finish then withdraws the ticket or ends its lease).
async fn with_keepalive<T>(
    tx: &BodySender,
    observer: &mut ResponseObserver,
    progress: &WaitProgress,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    let mut tick =
        tokio::time::interval_at(TokioInstant::now() + KEEPALIVE_INTERVAL, KEEPALIVE_INTERVAL);
    loop {
        tokio::select! {
            output = &mut work => return Some(output),
            _ = tick.tick() => {
                // A client that has not taken the last comment yet does not
                // need another one; nothing here may wait for the client.
                match tx.try_reserve() {
                    Ok(permit) => {
                        let now = TokioInstant::now().into_std();
                        let comment = progress.comment(now);
                        observer.observe(&comment, now);
                        permit.send(Ok(comment));
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Full(())) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(())) => return None,
                }
            }
            _ = tx.closed() => return None,
        }
    }
}

/// Answers a wait-first streaming request: spawns its task (see the module
/// doc) and waits for the head the task decides on. hyper drops this
/// handler if the client leaves, which the task notices.
pub async fn respond_wait_first(
    job: Job,
    trace: Trace,
    headers: StrataHeaders,
) -> Response<ProxyBody> {
    let (answer, answered) = oneshot::channel();
    let app = job.app.clone();
    app.tasks
        .spawn(wait_first(app.clone(), job, trace, headers, answer));
    // The task answers on every path on which the client is still there.
    answered
        .await
        .unwrap_or_else(|_| ChatError::BackendCutOff.into_response())
}

/// Where a wait-first stream's head is.
enum Head {
    /// Held: the handler waits on `answer`, and `body` goes out with the
    /// head.
    Held {
        answer: oneshot::Sender<Response<ProxyBody>>,
        body: ProxyBody,
    },
    /// The `200` and SSE head went out: failures are in band from now on.
    Committed,
    /// No head of ours went out: the client left, or it got another answer.
    Closed,
}

/// What came first while a held stream's forwarding started.
enum First {
    Ended(ForwardEnd),
    Ready,
    ClientGone,
}

impl Head {
    fn is_held(&self) -> bool {
        matches!(self, Head::Held { .. })
    }

    /// Sends the held `200` and SSE head with the body. False if the client
    /// is already gone.
    fn commit(&mut self, headers: &StrataHeaders) -> bool {
        match std::mem::replace(self, Head::Closed) {
            Head::Held { answer, body } => {
                let sent = answer.send(sse_head(body, headers)).is_ok();
                if sent {
                    *self = Head::Committed;
                }
                sent
            }
            Head::Committed => {
                *self = Head::Committed;
                true
            }
            Head::Closed => false,
        }
    }

    /// Answers a held head with `response` instead (a real status).
    fn answer(&mut self, response: Response<ProxyBody>) {
        if let Head::Held { answer, .. } = std::mem::replace(self, Head::Closed) {
            let _ = answer.send(response);
        }
    }

    /// Resolves when the client is gone while the head is held; never
    /// after.
    async fn client_gone(&mut self) {
        match self {
            Head::Held { answer, .. } => answer.closed().await,
            _ => std::future::pending().await,
        }
    }

    /// While the head is held: the body's first chunk is ready, or the
    /// client is gone. Never after.
    async fn first(&mut self) -> First {
        match self {
            Head::Held { answer, body } => tokio::select! {
                () = body.first_ready() => First::Ready,
                () = answer.closed() => First::ClientGone,
            },
            _ => std::future::pending().await,
        }
    }
}

/// The task: answers the handler through `answer` (the head, or a real
/// error status) and finishes the trace.
async fn wait_first<A: Admission>(
    app: Arc<App>,
    admission: A,
    mut trace: Trace,
    headers: StrataHeaders,
    answer: oneshot::Sender<Response<ProxyBody>>,
) {
    let first_keepalive = trace.arrived() + HEADER_HOLD;
    let (tx, body) = ProxyBody::channel();
    let mut stream = Stream {
        head: Head::Held { answer, body },
        tx,
        observer: ResponseObserver::new(BodyKind::Sse),
        headers,
    };
    let progress = WaitProgress::new(
        trace.model_resolved().unwrap_or_default(),
        trace.tier(),
        trace.queue_depth_at_arrival() as u64,
        trace.arrived(),
        app.config.timers.startup_ms,
    );
    // Boxed: the waiting task does not carry the send's state (see
    // `admit_and_send`).
    let admit = Box::pin(admission.admit(&mut trace, &progress));
    let Some(admitted) = stream.admit(admit, &progress, first_keepalive).await else {
        return stream.finish(trace, Reason::ClientDisconnect);
    };
    let mut dispatched = match admitted {
        Ok(dispatched) => dispatched,
        Err(error) if stream.head.is_held() => return stream.reject(trace, error),
        Err(error) => return stream.fail(trace, error).await,
    };
    let status = dispatched.response.status();
    if !status.is_success() {
        if stream.head.is_held() {
            // Exactly what a non-streaming request gets.
            let headers = std::mem::take(&mut stream.headers);
            return stream
                .head
                .answer(respond_passthrough(&app, dispatched, trace, headers));
        }
        let error = Box::pin(upstream_status(status, dispatched.response.body_mut())).await;
        // Held until the record is submitted, like the passthrough path.
        let _dispatched = dispatched;
        return stream.fail(trace, error).await;
    }
    let idle = app.config.stream_idle_timeout();
    match stream.forward(&mut dispatched, first_keepalive, idle).await {
        Err(error) => {
            drop(dispatched);
            stream.reject(trace, error);
        }
        Ok(end) => {
            let reason = end.map_or(Reason::ClientDisconnect, |end| end_reason(end, true));
            stream.finish(trace, reason);
            // Finishing the trace ended the lease; the backend connection
            // closes now.
            drop(dispatched);
        }
    }
}

/// One wait-first stream: its head, the client body's sender and what the
/// client was sent.
struct Stream {
    head: Head,
    tx: BodySender,
    observer: ResponseObserver,
    headers: StrataHeaders,
}

impl Stream {
    /// Waits for the admission with the head held until `first_keepalive`;
    /// the head then goes out with that first comment, and the wait goes on
    /// with keepalives. `None`: the client went away first.
    async fn admit<T>(
        &mut self,
        admit: impl Future<Output = T>,
        progress: &WaitProgress,
        first_keepalive: Instant,
    ) -> Option<T> {
        tokio::pin!(admit);
        tokio::select! {
            admitted = &mut admit => return Some(admitted),
            () = self.head.client_gone() => return None,
            () = tokio::time::sleep_until(first_keepalive.into()) => {}
        }
        let now = TokioInstant::now().into_std();
        let comment = progress.comment(now);
        self.observer.observe(&comment, now);
        let _ = self.tx.try_reserve().map(|permit| permit.send(Ok(comment)));
        if !self.head.commit(&self.headers) {
            return None;
        }
        with_keepalive(&self.tx, &mut self.observer, progress, admit).await
    }

    /// Forwards the backend's body; a held head goes out with the first
    /// thing handed over. `Err`: the body failed while the head was still
    /// held, which is still a real status. `Ok(None)`: the client went away
    /// first.
    async fn forward<B: BackendBody>(
        &mut self,
        dispatched: &mut Dispatched<B>,
        first_keepalive: Instant,
        idle: Option<Duration>,
    ) -> Result<Option<ForwardEnd>, ChatError> {
        let held = self.head.is_held();
        let bounds = Bounds {
            lease: &mut dispatched.events,
            deadline: dispatched.deadline,
            keepalive: true,
            first_keepalive: held.then_some(first_keepalive),
            idle,
        };
        let mode = match held {
            true => AfterHeaders::Held,
            false => AfterHeaders::InBandError,
        };
        let mut forwarding = Box::pin(forward::forward(
            dispatched.response.body_mut(),
            &self.tx,
            &mut self.observer,
            &mut dispatched.gate,
            mode,
            bounds,
        ));
        let first = match held {
            true => tokio::select! {
                end = &mut forwarding => First::Ended(end),
                first = self.head.first() => first,
            },
            false => First::Ready,
        };
        match first {
            First::ClientGone => Ok(None),
            First::Ended(ForwardEnd::Failed(error)) => Err(error),
            // Ended with nothing handed over: an empty stream, counted as
            // the `200` it was even if the client left at this very moment.
            First::Ended(end) => {
                self.head.commit(&self.headers);
                self.head = Head::Committed;
                Ok(Some(end))
            }
            First::Ready if self.head.commit(&self.headers) => Ok(Some(forwarding.await)),
            First::Ready => Ok(None),
        }
    }

    /// Answers the held head with a router-made `error` (a real status).
    fn reject(mut self, trace: Trace, error: ChatError) {
        let response = reject(trace, &self.headers, error);
        self.head.answer(response);
    }

    /// Ends a stream whose head went out with one `event: error` frame, and
    /// finishes its trace.
    async fn fail(mut self, trace: Trace, error: ChatError) {
        Box::pin(forward::fail_after_headers(
            &self.tx,
            AfterHeaders::InBandError,
            error,
            &mut self.observer,
        ))
        .await;
        self.finish(trace, error.reason());
    }

    /// Finishes the trace of a stream that ended `reason`: its status is
    /// the `200` if its head went out.
    fn finish(mut self, mut trace: Trace, reason: Reason) {
        if matches!(self.head, Head::Committed) {
            trace.committed();
        }
        trace.forwarded(self.observer.finish());
        trace.finish(reason);
    }
}

/// A backend error response as an `event: error` frame's error: the
/// backend's status, and its error `type` when it sent the usual
/// `{"error":{...}}` document and the type is a known one. Its message is
/// not passed on (it may quote the request); the frame's is fixed.
async fn upstream_status<B: BackendBody>(status: StatusCode, response_body: &mut B) -> ChatError {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response_body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    body.extend_from_slice(&data);
                }
            }
            _ => break,
        }
    }
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let backend_type = parsed
        .as_ref()
        .and_then(|value| value.get("error"))
        .and_then(|error| error.get("type"))
        .and_then(|kind| kind.as_str());
    ChatError::upstream_status(status, backend_type)
}

#[cfg(test)]
mod tests;
