//! Router-made HTTP errors in the OpenAI shape.
//!
//! Every error the proxy itself produces is `{"error":{"message","type",
//! "code"}}`. Messages are fixed strings chosen here: they never echo
//! request content (model names from the request included), so nothing a
//! client sent can be reflected or logged through them.

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde_json::json;

use crate::body::ProxyBody;

/// A router-made error: what the client sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub code: &'static str,
    pub message: String,
    /// Seconds for `Retry-After`, when waiting helps.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, code: &'static str, message: &str) -> Self {
        ApiError {
            status,
            kind,
            code,
            message: message.to_owned(),
            retry_after: None,
        }
    }

    pub fn not_found() -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            "unknown endpoint; this router serves /v1/models, /v1/chat/completions, /health, /metrics and /requests",
        )
    }

    pub fn method_not_allowed() -> Self {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            "method not allowed for this endpoint",
        )
    }

    /// The JSON document.
    pub fn body_json(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.code,
            }
        })
    }

    /// The in-band form used after SSE headers went out: one `event: error`
    /// frame whose JSON also carries the HTTP status it stands for.
    pub fn sse_frame(&self) -> Bytes {
        let value = json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "code": self.code,
                "status": self.status.as_u16(),
            }
        });
        Bytes::from(format!("event: error\ndata: {value}\n\n"))
    }

    pub fn into_response(self) -> hyper::Response<ProxyBody> {
        let mut response = hyper::Response::new(ProxyBody::full(self.body_json().to_string()));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
        response
    }
}

/// A plain JSON response (for `/v1/models`, `/health`, `/metrics`).
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> hyper::Response<ProxyBody> {
    let mut response = hyper::Response::new(ProxyBody::full(value.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
