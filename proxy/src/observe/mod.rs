//! Accounting by observation: what a forwarded response body says about the
//! request, learned from the bytes on their way to the client.
//!
//! The proxy never collects a response; it hands every chunk it forwards to
//! a [`ResponseObserver`] and asks for the [`Observed`] facts at EOF or
//! cancellation. The observer is pure (no I/O, no clock: the caller passes
//! the instant each chunk was forwarded), never changes or delays the bytes,
//! and keeps at most [`MAX_INSPECT_BYTES`] of one SSE line or one JSON body.
//!
//! - `sse.rs`: line splitting and SSE syntax for `text/event-stream`.
//! - `frame.rs`: what one JSON payload means (delta, usage, timings, error),
//!   written in `reduce.rs`, which reduces any JSON value without building
//!   it.
//! - `json_body.rs`: the non-stream `application/json` body.
//! - `summary.rs`: [`Observed`] with its [`Usage`] and [`Timings`], and
//!   the merge rules.
//! - `model_gate.rs`: [`ModelGate`], which holds a response's first frame
//!   back until its `model` is known to be the leased one.
//!
//! # What counts as an in-band error
//!
//! The shapes CLIProxyAPI fails a 2xx stream for, so that a record does not
//! call a response successful that its clients saw fail:
//! - an `event:` of `error`, `response.error` or `response.failed` (even
//!   with no data after it);
//! - a payload with a non-null `error` or `response.error`, a `type` naming
//!   one of those events, or top-level `code` and `message` (this covers
//!   Strata's mid-stream `data: {"error":...}` before `data: [DONE]`);
//! - a `data:` payload that is not JSON (including a line cut short at EOF),
//!   or a bare `{...}` line without `data:`.
//!
//! For a non-stream body: the same payload shapes, or a non-empty body that
//! is not JSON. An oversized line or body is *not* an error: it is unread,
//! which [`Observed::accounting_unavailable`] reports instead.

mod frame;
mod json_body;
mod model_gate;
mod reduce;
mod sse;
mod summary;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Instant;

use hyper::header::{CONTENT_TYPE, HeaderMap};

pub use model_gate::{ModelGate, ModelMismatch};
pub use strata_protocol::record::FinishReason;
pub use summary::{Observed, Timings, Usage};

/// The most the observer keeps of one SSE line or one non-stream JSON body:
/// 256 KiB, counting a line's bytes before its `\n` (a CRLF line's `\r`
/// included). Anything longer is forwarded untouched but not interpreted.
pub const MAX_INSPECT_BYTES: usize = 256 * 1024;

/// How to read a response body, chosen from the upstream `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`.
    Sse,
    /// `application/json`.
    Json,
    /// Anything else: only bytes are counted.
    Other,
}

impl BodyKind {
    /// The kind a response's `Content-Type` names (case-insensitive, any
    /// parameters after the media type ignored); none at all is `Other`.
    pub fn from_headers(headers: &HeaderMap) -> BodyKind {
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            BodyKind::Sse
        } else if content_type.starts_with("application/json") {
            BodyKind::Json
        } else {
            BodyKind::Other
        }
    }
}

/// Watches one response body as it is forwarded.
pub struct ResponseObserver {
    response_bytes: u64,
    body: Body,
}

enum Body {
    // Boxed: the SSE state carries a whole `Observed`, and the enum should
    // stay small for the JSON and plain cases.
    Sse(Box<sse::SseObserver>),
    Json(json_body::JsonBody),
    Other,
}

impl ResponseObserver {
    pub fn new(kind: BodyKind) -> Self {
        let body = match kind {
            BodyKind::Sse => Body::Sse(Box::default()),
            BodyKind::Json => Body::Json(json_body::JsonBody::default()),
            BodyKind::Other => Body::Other,
        };
        Self {
            response_bytes: 0,
            body,
        }
    }

    /// Called for every chunk forwarded to the client, in order, with the
    /// instant it was forwarded.
    pub fn observe(&mut self, chunk: &[u8], now: Instant) {
        self.response_bytes += chunk.len() as u64;
        match &mut self.body {
            Body::Sse(sse) => sse.observe(chunk, now),
            Body::Json(json) => json.observe(chunk),
            Body::Other => {}
        }
    }

    /// An SSE body that has not sent `data: [DONE]` yet. At the backend's
    /// EOF this means the stream was cut off: Strata ends every complete
    /// stream, failed ones included, with `[DONE]`.
    pub fn sse_unfinished(&self) -> bool {
        matches!(&self.body, Body::Sse(sse) if !sse.saw_done())
    }

    /// Bytes the observer holds of the body (an unfinished SSE line, or the
    /// JSON body so far).
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        match &self.body {
            Body::Sse(sse) => sse.buffered(),
            Body::Json(json) => json.buffered(),
            Body::Other => 0,
        }
    }

    /// Called once at EOF (or cancellation): reads a final unterminated
    /// SSE line or the JSON body and returns what was learned. (A second
    /// call would find the JSON body already consumed.)
    pub fn finish(&mut self) -> Observed {
        let mut out = match &mut self.body {
            Body::Sse(sse) => sse.finish(),
            Body::Json(json) => json.finish(),
            Body::Other => Observed::default(),
        };
        out.response_bytes = self.response_bytes;
        out
    }
}

impl fmt::Debug for ResponseObserver {
    // Hand-written so a buffered body never ends up in a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.body {
            Body::Sse(_) => BodyKind::Sse,
            Body::Json(_) => BodyKind::Json,
            Body::Other => BodyKind::Other,
        };
        f.debug_struct("ResponseObserver")
            .field("kind", &kind)
            .field("response_bytes", &self.response_bytes)
            .finish_non_exhaustive()
    }
}
