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
use std::time::Duration;

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

/// What the held admission came to.
enum HeadHeld<B> {
    Admitted(Result<Dispatched<B>, ChatError>),
    /// The first keepalive came due first: the head went out with it.
    Committed(Option<Result<Dispatched<B>, ChatError>>),
    ClientGone,
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
    let first_keepalive = trace.arrived + HEADER_HOLD;
    let (tx, body) = ProxyBody::channel();
    let mut observer = ResponseObserver::new(BodyKind::Sse);
    let mut answer = Some(answer);
    let mut body = Some(body);
    let progress = WaitProgress::new(
        trace.model_resolved.as_deref().unwrap_or_default(),
        trace.tier,
        trace.queue_depth_at_arrival as u64,
        trace.arrived,
        app.config.timers.startup_ms,
    );

    // Admission, with the head held. Boxed: the waiting task does not
    // carry the send's state (see `admit_and_send`).
    let held = {
        let mut admit = Box::pin(admission.admit(&mut trace, &progress));
        let first = {
            let client_gone = closed(&mut answer);
            tokio::pin!(client_gone);
            tokio::select! {
                admitted = &mut admit => Some(HeadHeld::Admitted(admitted)),
                () = &mut client_gone => Some(HeadHeld::ClientGone),
                () = tokio::time::sleep_until(first_keepalive.into()) => None,
            }
        };
        match first {
            Some(held) => held,
            // The first keepalive is due: the head goes out with it.
            None => {
                let now = TokioInstant::now().into_std();
                let comment = progress.comment(now);
                observer.observe(&comment, now);
                let _ = tx.try_reserve().map(|permit| permit.send(Ok(comment)));
                if commit(&mut answer, &mut body, &headers) {
                    HeadHeld::Committed(with_keepalive(&tx, &mut observer, &progress, admit).await)
                } else {
                    HeadHeld::ClientGone
                }
            }
        }
    };
    let (admitted, committed) = match held {
        HeadHeld::ClientGone => {
            trace.observed = Some(observer.finish());
            trace.finish(Reason::ClientDisconnect);
            return;
        }
        HeadHeld::Committed(None) => {
            trace.status = Some(StatusCode::OK.as_u16());
            trace.observed = Some(observer.finish());
            trace.finish(Reason::ClientDisconnect);
            return;
        }
        HeadHeld::Committed(Some(admitted)) => (admitted, true),
        HeadHeld::Admitted(admitted) => (admitted, false),
    };
    if committed {
        trace.status = Some(StatusCode::OK.as_u16());
    }
    let mut dispatched = match admitted {
        Err(error) if !committed => {
            send(&mut answer, reject(trace, &headers, error));
            return;
        }
        Err(error) => return fail_committed(&tx, observer, trace, error).await,
        Ok(dispatched) => dispatched,
    };
    let status = dispatched.response.status();
    if !status.is_success() {
        if !committed {
            // Exactly what a non-streaming request gets.
            let response = respond_passthrough(&app, dispatched, trace, headers);
            send(&mut answer, response);
            return;
        }
        let error = Box::pin(upstream_status(status, dispatched.response.body_mut())).await;
        // Held until the record is submitted, like the passthrough path.
        let _dispatched = dispatched;
        return fail_committed(&tx, observer, trace, error).await;
    }

    // Forwarding; a held head goes out with the first chunk (or comment).
    let end = {
        let mut forwarding = Box::pin(forward::forward(
            dispatched.response.body_mut(),
            &tx,
            &mut observer,
            &mut dispatched.gate,
            if committed {
                AfterHeaders::InBandError
            } else {
                AfterHeaders::Held
            },
            Bounds {
                lease: &mut dispatched.events,
                deadline: dispatched.deadline,
                keepalive: true,
                first_keepalive: (!committed).then_some(first_keepalive),
                idle: app.config.stream_idle_timeout(),
            },
        ));
        match body.as_mut() {
            None => Some(forwarding.await),
            Some(held_body) => {
                let first = {
                    let client_gone = closed(&mut answer);
                    tokio::pin!(client_gone);
                    tokio::select! {
                        end = &mut forwarding => First::Ended(end),
                        () = held_body.first_ready() => First::Ready,
                        () = &mut client_gone => First::ClientGone,
                    }
                };
                match first {
                    First::ClientGone => None,
                    // Ended with nothing handed over: a failure is still a
                    // real status; a clean end is an empty stream.
                    First::Ended(ForwardEnd::Failed(error)) => {
                        drop(forwarding);
                        drop(dispatched);
                        send(&mut answer, reject(trace, &headers, error));
                        return;
                    }
                    First::Ended(end) => {
                        commit(&mut answer, &mut body, &headers);
                        trace.status = Some(StatusCode::OK.as_u16());
                        Some(end)
                    }
                    First::Ready => {
                        if commit(&mut answer, &mut body, &headers) {
                            trace.status = Some(StatusCode::OK.as_u16());
                            Some(forwarding.await)
                        } else {
                            None
                        }
                    }
                }
            }
        }
    };
    trace.observed = Some(observer.finish());
    match end {
        Some(end) => trace.finish(end_reason(end, true)),
        None => trace.finish(Reason::ClientDisconnect),
    }
    drop(dispatched);
}

/// Ends a stream whose head went out with one `event: error` frame, and
/// finishes its trace.
async fn fail_committed(
    tx: &BodySender,
    mut observer: ResponseObserver,
    mut trace: Trace,
    error: ChatError,
) {
    Box::pin(forward::fail_after_headers(
        tx,
        AfterHeaders::InBandError,
        error,
        &mut observer,
    ))
    .await;
    trace.observed = Some(observer.finish());
    trace.finish(error.reason());
}

/// Sends the held `200` and SSE head with the body. False if the client
/// is already gone.
fn commit(
    answer: &mut Option<oneshot::Sender<Response<ProxyBody>>>,
    body: &mut Option<ProxyBody>,
    headers: &StrataHeaders,
) -> bool {
    let Some(body) = body.take() else {
        return true;
    };
    send(answer, sse_head(body, headers))
}

/// What came first while a held stream's forwarding started.
enum First {
    Ended(ForwardEnd),
    Ready,
    ClientGone,
}

/// Hands the handler its response; false if the client left meanwhile.
fn send(
    answer: &mut Option<oneshot::Sender<Response<ProxyBody>>>,
    response: Response<ProxyBody>,
) -> bool {
    answer
        .take()
        .is_some_and(|answer| answer.send(response).is_ok())
}

/// Resolves when the handler (and so the client) is gone; never once the
/// answer was sent.
async fn closed(answer: &mut Option<oneshot::Sender<Response<ProxyBody>>>) {
    match answer {
        Some(answer) => answer.closed().await,
        None => std::future::pending().await,
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
