//! Router-made HTTP errors in the OpenAI shape.
//!
//! Every error the proxy itself produces is `{"error":{"message","type",
//! "code"}}`, rendered here by [`ErrorReply`] and nowhere else. The errors
//! are typed per layer: the chat path's are `chat::error::ChatError`, the
//! other endpoints' are [`EndpointError`]; each variant names its reply.
//!
//! A reply's message is a `&'static str` chosen by its variant: it never
//! carries data (request content, model names from the request, another
//! process's error text, numbers), so nothing a client sent or a backend
//! said can be reflected through it. Detail for operators goes to the log
//! where the failure is found. The one exception is a failed model start:
//! its body also carries the supervisor's generic cause and the cooldown
//! left, in fields of their own ([`StartFailure`]).

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde::Serialize;
use strata_protocol::api::{ErrorBody, ErrorDetail};

use crate::response_body::ProxyBody;

/// The header openai-python and openai-node read before their own retry
/// rules (`true`/`false`).
const X_SHOULD_RETRY: &str = "x-should-retry";

/// What a client sees of a router-made error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorReply {
    pub status: StatusCode,
    /// The OpenAI error `type`.
    pub kind: &'static str,
    pub code: &'static str,
    pub message: &'static str,
    /// Seconds for `Retry-After`, when waiting helps.
    pub retry_after: Option<u64>,
    /// `x-should-retry`, when the router knows better than the client's
    /// own rules whether a retry can succeed.
    pub should_retry: Option<bool>,
}

/// The text of one of the API's documents. They hold only strings, numbers,
/// booleans and string-keyed objects, which always serialize.
fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("an API document serializes")
}

/// Why a model's start failed, for the body of its `model_load_error`: the
/// generic cause the supervisor made (bounded, no request or backend text)
/// and what is left of that model's start cooldown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    pub last_error: String,
    pub cooldown_remaining_ms: u64,
}

impl ErrorReply {
    fn document(&self, status: Option<u16>, start: Option<&StartFailure>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.into(),
                kind: self.kind.into(),
                code: self.code.into(),
                status,
                last_error: start.map(|start| start.last_error.clone()),
                cooldown_remaining_ms: start.map(|start| start.cooldown_remaining_ms),
            },
        }
    }

    /// The JSON document's text; a failed start's adds its cause.
    pub fn body_with(&self, start: Option<&StartFailure>) -> String {
        to_json(&self.document(None, start))
    }

    /// The in-band form used after SSE headers went out: one `event: error`
    /// frame whose JSON also carries the HTTP status it stands for.
    pub fn sse_frame(&self) -> Bytes {
        let value = to_json(&self.document(Some(self.status.as_u16()), None));
        Bytes::from(format!("event: error\ndata: {value}\n\n"))
    }

    /// The JSON response, with `Retry-After` when there is one.
    pub fn into_response(self) -> hyper::Response<ProxyBody> {
        self.into_response_with(None)
    }

    /// [`ErrorReply::into_response`], with a failed start's cause in the body.
    pub fn into_response_with(self, start: Option<&StartFailure>) -> hyper::Response<ProxyBody> {
        let mut response = hyper::Response::new(ProxyBody::full(self.body_with(start)));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(retry) = self.should_retry {
            response.headers_mut().insert(
                X_SHOULD_RETRY,
                HeaderValue::from_static(if retry { "true" } else { "false" }),
            );
        }
        response
    }
}

/// The failures of the endpoints other than chat completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointError {
    /// No such path.
    NotFound,
    /// A known path with a method it does not serve.
    MethodNotAllowed,
    /// `/requests?after=` is not a non-negative integer.
    BadCursor,
    /// `/requests?limit=` is not a non-negative integer.
    BadLimit,
    /// `/requests` while the supervisor, which holds the records, is not
    /// reachable.
    RecordsUnavailable,
}

impl EndpointError {
    pub fn reply(self) -> ErrorReply {
        let (status, kind, code, message) = match self {
            EndpointError::NotFound => (
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "not_found",
                "unknown endpoint; this router serves /v1/models, /v1/chat/completions, /health, /metrics and /requests",
            ),
            EndpointError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
                "method not allowed for this endpoint",
            ),
            EndpointError::BadCursor => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_query",
                "after must be a non-negative integer",
            ),
            EndpointError::BadLimit => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_query",
                "limit must be a non-negative integer",
            ),
            EndpointError::RecordsUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "supervisor_unavailable",
                "the records live in the supervisor, which is not reachable; try again shortly",
            ),
        };
        ErrorReply {
            status,
            kind,
            code,
            message,
            retry_after: None,
            should_retry: None,
        }
    }

    pub fn into_response(self) -> hyper::Response<ProxyBody> {
        self.reply().into_response()
    }
}

/// A plain JSON response (for `/v1/models`, `/health`, `/metrics`).
pub fn json_response(status: StatusCode, value: &impl Serialize) -> hyper::Response<ProxyBody> {
    json_text_response(status, to_json(value))
}

/// A JSON response whose text is already written (a `/requests` page).
pub fn json_text_response(status: StatusCode, text: String) -> hyper::Response<ProxyBody> {
    let mut response = hyper::Response::new(ProxyBody::full(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_errors_keep_their_statuses_and_codes() {
        for (error, status, code) in [
            (EndpointError::NotFound, 404, "not_found"),
            (EndpointError::MethodNotAllowed, 405, "method_not_allowed"),
            (EndpointError::BadCursor, 400, "invalid_query"),
            (EndpointError::BadLimit, 400, "invalid_query"),
            (
                EndpointError::RecordsUnavailable,
                503,
                "supervisor_unavailable",
            ),
        ] {
            let reply = error.reply();
            assert_eq!((reply.status.as_u16(), reply.code), (status, code));
            assert!(!reply.message.is_empty() && reply.retry_after.is_none());
            let response = error.into_response();
            assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
            assert!(response.headers().get(RETRY_AFTER).is_none());
        }
    }
}
