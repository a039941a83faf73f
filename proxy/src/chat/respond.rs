//! Shaping a chat response: a router-made error ([`reject`]), the
//! backend's own status and headers passed through
//! ([`respond_passthrough`]), or the router's own SSE head for a wait-first
//! stream ([`sse_head`]; `wait_first` decides when it goes out). Every
//! response carries the `x-strata-*` headers it has earned so far.

use hyper::Response;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;

use crate::app::App;
use crate::observe::{BodyKind, ResponseObserver};
use crate::response_body::ProxyBody;

use super::admit::Dispatched;
use super::error::ChatError;
use super::forward::{self, AfterHeaders, BackendBody, Bounds, ForwardEnd};
use super::trace::Trace;

const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-strata-request-id");
const CONCRETE_MODEL_HEADER: HeaderName = HeaderName::from_static("x-strata-concrete-model");
const SERVICE_TIER_HEADER: HeaderName = HeaderName::from_static("x-strata-service-tier");

/// The `x-strata-*` headers of one response.
#[derive(Clone, Default)]
pub struct StrataHeaders {
    pub request_id: String,
    pub concrete_model: Option<String>,
    pub tier: Option<ServiceTier>,
}

impl StrataHeaders {
    fn apply(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.request_id) {
            headers.insert(REQUEST_ID_HEADER, value);
        }
        if let Some(model) = &self.concrete_model
            && let Ok(value) = HeaderValue::from_str(model)
        {
            headers.insert(CONCRETE_MODEL_HEADER, value);
        }
        if let Some(tier) = self.tier {
            headers.insert(SERVICE_TIER_HEADER, HeaderValue::from_static(tier.as_str()));
        }
    }
}

/// Answers with a router-made error and finishes the trace.
pub fn reject(mut trace: Trace, headers: &StrataHeaders, error: ChatError) -> Response<ProxyBody> {
    // A failed or cooling start says why (the supervisor's generic cause).
    let start = trace.rejected(&error);
    let mut response = error.reply().into_response_with(start.as_ref());
    headers.apply(response.headers_mut());
    trace.finish(error.reason());
    response
}

/// Headers copied from the backend's response; the rest (its
/// `Connection: close` in particular) describe its own connection.
const PASSTHROUGH_HEADERS: [&str; 4] = [
    "content-type",
    "content-length",
    "cache-control",
    "x-accel-buffering",
];

/// Passes the backend's status and headers through and streams its body.
pub fn respond_passthrough<B: BackendBody>(
    app: &App,
    mut dispatched: Dispatched<B>,
    mut trace: Trace,
    headers: StrataHeaders,
) -> Response<ProxyBody> {
    let upstream_headers = dispatched.response.headers();
    let kind = BodyKind::from_headers(upstream_headers);
    let (tx, body) = ProxyBody::channel();
    let mut response = Response::new(body);
    *response.status_mut() = dispatched.response.status();
    for name in PASSTHROUGH_HEADERS {
        if let Some(value) = upstream_headers.get(name) {
            response.headers_mut().insert(name, value.clone());
        }
    }
    headers.apply(response.headers_mut());
    trace.passed_through(response.status().as_u16());
    // A non-streaming answer is silent until it is whole: `stream_idle_ms`
    // bounds streams only.
    let idle = if trace.stream() {
        app.config.stream_idle_timeout()
    } else {
        None
    };
    app.tasks.spawn(async move {
        let mut observer = ResponseObserver::new(kind);
        let end = forward::forward(
            dispatched.response.body_mut(),
            &tx,
            &mut observer,
            &mut dispatched.gate,
            AfterHeaders::TransportError,
            Bounds {
                lease: &mut dispatched.events,
                deadline: dispatched.deadline,
                keepalive: false,
                first_keepalive: None,
                idle,
            },
        )
        .await;
        trace.forwarded(observer.finish());
        let upstream_ok = trace
            .upstream_status()
            .is_some_and(|status| (200..300).contains(&status));
        trace.finish(end_reason(end, upstream_ok));
        // Finishing the trace sent the record and ended the lease in one
        // message; the backend connection closes now.
        drop(dispatched);
    });
    response
}

/// The record's reason for a forwarded body that ended with `end`.
pub fn end_reason(end: ForwardEnd, upstream_ok: bool) -> Reason {
    match end {
        ForwardEnd::Completed if upstream_ok => Reason::Completed,
        // The backend's own error response, passed through whole.
        ForwardEnd::Completed => Reason::UpstreamError,
        ForwardEnd::ClientGone => Reason::ClientDisconnect,
        ForwardEnd::ClientStalled => Reason::Timeout,
        ForwardEnd::Failed(error) => error.reason(),
    }
}

/// The `200` and SSE headers of a wait-first stream around `body`.
pub fn sse_head(body: ProxyBody, headers: &StrataHeaders) -> Response<ProxyBody> {
    let mut response = Response::new(body);
    let response_headers = response.headers_mut();
    response_headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response_headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response_headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.apply(response_headers);
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use serde_json::json;
    use strata_protocol::config::ModelStatus;
    use strata_protocol::record::RequestRecord;
    use strata_protocol::wire::{ArrivalInfo, LeaseFailure};

    use crate::link::{SupervisorLink, TicketEvent};

    use super::super::{admit, request};
    use super::*;

    /// Bound on every wait (nothing here waits on a timer).
    const BOUND: Duration = Duration::from_secs(10);

    /// The supervisor's cause of a failed start, as it makes them.
    const CAUSE: &str = "backend exited during startup (exit code 3)";

    /// A ticket refused with `failure`, through the proxy's real path: the
    /// supervisor's first answer taken by `admit::enqueue`, then [`reject`].
    /// The response's head and JSON body, and the request's record.
    async fn refused(failure: LeaseFailure) -> (Response<()>, serde_json::Value, RequestRecord) {
        let (link, mut supervisor) = SupervisorLink::detached();
        supervisor.connect("i-1");
        let app = App::for_tests(link);
        let mut trace = Trace::start(&app);
        let chat = request::parse(Bytes::from_static(br#"{"model":"m"}"#)).unwrap();
        let answer = async {
            let events = supervisor.next_enqueued().await.expect("one ticket");
            let arrival = ArrivalInfo {
                arrival_seq: 1,
                queue_depth: 0,
                in_flight: 0,
            };
            events
                .send(TicketEvent::Failed { arrival, failure })
                .unwrap();
        };
        let enqueue = admit::enqueue(&app, "m", &chat, &mut trace);
        let (queued, ()) = tokio::time::timeout(BOUND, async { tokio::join!(enqueue, answer) })
            .await
            .expect("answered within the bound");
        let error = queued.err().expect("refused");
        let headers = StrataHeaders {
            request_id: trace.request_id().to_owned(),
            concrete_model: Some(String::from("m")),
            tier: None,
        };
        let (head, body) = reject(trace, &headers, error).into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let record = tokio::time::timeout(BOUND, supervisor.next_record())
            .await
            .expect("the record within the bound")
            .expect("one record");
        let body = serde_json::from_slice(&body).expect("a JSON body");
        (Response::from_parts(head, ()), body, record)
    }

    /// A failed start's 503 says why with the supervisor's generic cause
    /// and the cooldown left, in fields of their own: the message stays the
    /// fixed one, and nothing else the supervisor said is in the reply.
    #[tokio::test]
    async fn a_failed_start_carries_only_the_generic_cause_and_the_cooldown() {
        let (head, body, record) = refused(LeaseFailure::LoadFailed {
            message: String::from(CAUSE),
            model_switch: true,
            load_ms: Some(1600),
            cooldown_ms: 30_000,
            typical_load_ms: None,
        })
        .await;
        assert_eq!(head.status(), 503);
        assert_eq!(head.headers()["retry-after"], "30");
        assert_eq!(head.headers()["x-should-retry"], "false");
        assert_eq!(head.headers()["x-strata-request-id"], record.request_id);
        assert_eq!(
            body,
            json!({"error": {
                "message": "the model failed to load",
                "type": "server_error",
                "code": "model_load_error",
                "last_error": CAUSE,
                "cooldown_remaining_ms": 30_000,
            }})
        );
        assert_eq!(
            (record.status, record.reason, record.model_load_ms),
            (Some(503), Reason::ModelLoadError, Some(1600))
        );
    }

    /// A refusal during the cooldown says the same cause and what is left.
    #[tokio::test]
    async fn a_cooldown_carries_only_the_generic_cause_and_what_is_left() {
        let (head, body, record) = refused(LeaseFailure::Cooldown {
            message: String::from(CAUSE),
            remaining_ms: 9000,
            typical_load_ms: None,
        })
        .await;
        assert_eq!(head.status(), 503);
        assert_eq!(head.headers()["retry-after"], "9");
        assert_eq!(
            body,
            json!({"error": {
                "message": "a recent model load failed; retry later",
                "type": "server_error",
                "code": "model_load_error",
                "last_error": CAUSE,
                "cooldown_remaining_ms": 9000,
            }})
        );
        assert_eq!(
            (record.status, record.reason),
            (Some(503), Reason::ModelLoadError)
        );
    }

    /// Other refusals carry no supervisor text at all: a model's status
    /// goes to the log only.
    #[tokio::test]
    async fn other_refusals_carry_nothing_from_the_supervisor() {
        let (head, body, _) = refused(LeaseFailure::NotPrepared {
            status: ModelStatus::NotInstalled,
        })
        .await;
        assert_eq!(head.status(), 503);
        assert!(head.headers().get("retry-after").is_none());
        assert_eq!(
            body,
            json!({"error": {
                "message": "the model is not prepared to run on this machine",
                "type": "server_error",
                "code": "model_not_prepared",
            }})
        );
        let (head, body, _) = refused(LeaseFailure::QueueFull).await;
        assert_eq!(head.status(), 429);
        assert_eq!(
            body,
            json!({"error": {
                "message": "too many pending requests (max_pending)",
                "type": "rate_limit_error",
                "code": "queue_full",
            }})
        );
    }
}
