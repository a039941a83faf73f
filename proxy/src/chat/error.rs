//! Every way a chat request fails, and what its client is told.
//!
//! A failure is one [`ChatError`] variant, built where it is found. The
//! variant alone decides the answer: the HTTP status, the OpenAI `type` and
//! `code`, the message, `Retry-After`, and the accounting [`Reason`] of the
//! request's record. It reaches the client in one of three forms, depending
//! on how far the response got: a JSON error response before any response
//! headers ([`ChatError::into_response`]), one in-band `event: error` frame
//! after the router's SSE headers went out ([`ChatError::sse_frame`]), or the
//! transport error that ends a passed-through response (its message).
//!
//! Two kinds of message, kept apart (dropshot's external and internal
//! messages): the **client message** (`error.message`) is a fixed
//! `&'static str` per variant and never carries data: no request content,
//! no text from the supervisor or the backend, no numbers. The **log
//! message** is written with `tracing` at the failure site and may carry
//! bounded, generic detail, such as the supervisor's start error or the
//! model's status. A backend's own error text goes to neither: it may quote
//! the prompt.
//!
//! Data reaches a client in fixed places only: a cooldown's remaining
//! seconds in `Retry-After`, a backend's status in an `event: error`
//! frame's `error.status`, and two fields of the JSON body of a
//! `LoadFailed` or `Cooldown` refusal (`503 model_load_error`, sent before
//! any response header) beside the fixed message: `last_error`, the
//! supervisor's cause of the failed start as it sent it, and
//! `cooldown_remaining_ms`, what is left of that model's start cooldown.
//! The cause is the only supervisor text a client sees, and it is generic
//! by design (`supervisor/src/backend/error.rs`: short and bounded, with
//! numbers such as an exit code or a timeout, never profile contents or
//! the child's output). An `event: error` frame carries neither field. The
//! tests in `chat/respond.rs` render these refusals through the real path,
//! from the supervisor's answer to the reply.

use bytes::Bytes;
use hyper::StatusCode;
use strata_protocol::record::Reason;
use strata_protocol::wire::{LeaseFailure, RevokeReason};

use crate::link::LeaseEnd;
use crate::reply::ErrorReply;
use crate::response_body::ProxyBody;

/// A failed chat request: one variant per distinct client-visible failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatError {
    // The request itself (`invalid_request`).
    /// The body is over `max_request_body_bytes`.
    BodyTooLarge,
    /// The body's framing is invalid (a bad chunk size line, say), or it
    /// ended before its length: a client that half-closed mid-upload reads
    /// this 400, and one that left entirely cannot be told from it (the
    /// answer is written either way, and the record says what was answered).
    BodyUnreadable,
    InvalidJson,
    NotAnObject,
    ModelMissing,
    ModelNotAString,
    StreamNotABool,
    BadServiceTier,
    BadSpeed,
    /// Unknown or disabled model, here or on the supervisor's side.
    ModelNotFound,

    // The supervisor and its engine.
    /// The supervisor is not connected, or broke the ticket protocol.
    SupervisorUnavailable,
    /// The supervisor link was lost while the request waited or held a
    /// lease that had not been used yet.
    SupervisorLost,
    /// The supervisor that answers runs other settings (a config change
    /// half applied): this proxy waits for one with the same.
    ConfigMismatch,
    /// The supervisor that answers is another build (an upgrade half done).
    VersionMismatch,
    /// Routing is off (operator `off`).
    RoutingOff,
    /// Operator `off --now` revoked the request's lease.
    RevokedRoutingOff,
    /// The model is not installed, compatible or prepared.
    NotPrepared,
    /// The model's start failed; a cooldown of `retry_after_s` (at least
    /// one) started with it.
    LoadFailed {
        retry_after_s: u64,
    },
    /// A recent start failed; no new one before the cooldown ends.
    Cooldown {
        retry_after_s: u64,
    },
    /// Legacy mode: `max_pending` requests already active or waiting.
    QueueFull,
    /// Legacy mode: longer than `queue_ms` without a lease.
    QueueTimeout,
    /// The supervisor is shutting down.
    ShuttingDown,
    /// A forced shutdown revoked the request's lease.
    RevokedShutdown,

    // The backend.
    /// `response_ms` passed before the response headers.
    Timeout,
    /// `response_ms` passed during the response body.
    StreamTimeout,
    /// `stream_idle_ms` passed without a byte from the backend (before or
    /// during a streaming response's body).
    StreamIdle,
    /// The backend could not be connected to, or failed before headers.
    BackendUnreachable,
    /// The lease's backend instance is no longer the serving one.
    BackendGone,
    /// The response named another model than the leased one.
    WrongModel,
    /// The backend stopped answering its probes and is being restarted
    /// (`backend_unresponsive_action: "restart"`).
    BackendUnresponsive,
    /// The backend's body failed or ended early.
    BackendCutOff,
    /// The backend reported a failure in band (its own `data: {"error":...}`
    /// frame) inside a stream whose headers the router sent.
    BackendErrorFrame,
    /// The backend answered with an error status after the router's
    /// SSE headers; `kind` is one of the known types ([`known_kind`]).
    UpstreamStatus {
        status: StatusCode,
        kind: &'static str,
    },
}

/// `Retry-After` of a legacy `429 queue_full`: the queue is bounded by
/// `max_pending` active or waiting requests, which usually turn over within
/// a second; the SDKs back off further on their own.
pub const QUEUE_FULL_RETRY_AFTER_S: u64 = 1;

/// One row of [`ChatError::spec`]: what the client sees of a failure and
/// the reason its record gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub reply: ErrorReply,
    pub reason: Reason,
}

/// A row without `Retry-After` or `x-should-retry`.
fn row(
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    reason: Reason,
    message: &'static str,
) -> Spec {
    Spec {
        reply: ErrorReply {
            status,
            kind,
            code,
            message,
            retry_after: None,
            should_retry: None,
        },
        reason,
    }
}

impl Spec {
    /// Waiting helps: `Retry-After` in seconds (the rest of a model's
    /// start cooldown, a new launch is refused until then; or a second for
    /// a full legacy queue).
    fn retry_after(mut self, seconds: u64) -> Spec {
        self.reply.retry_after = Some(seconds);
        self
    }

    /// `x-should-retry: false`, which openai-python and openai-node obey
    /// over their own status rules: for a failed start and its cooldown,
    /// so an SDK's automatic retries do not relaunch (or wait out the
    /// cooldown to relaunch) a build that does not start; the user sees the
    /// error at once.
    fn not_by_sdks(mut self) -> Spec {
        self.reply.should_retry = Some(false);
        self
    }
}

impl ChatError {
    /// A backend's error status, with its error `type` if it sent one.
    pub fn upstream_status(status: StatusCode, backend_type: Option<&str>) -> ChatError {
        ChatError::UpstreamStatus {
            status,
            kind: known_kind(backend_type),
        }
    }

    /// The table: every variant's reply and reason, one row each. A row is
    /// status, OpenAI `type`, `code`, record reason, then the fixed client
    /// message; `Retry-After` and `x-should-retry` where they apply.
    #[rustfmt::skip]
    pub fn spec(&self) -> Spec {
        use ChatError::*;
        use Reason as R;
        use StatusCode as S;
        let (invalid, server) = ("invalid_request_error", "server_error");
        match *self {
            // The request itself.
            BodyTooLarge => row(
                S::PAYLOAD_TOO_LARGE, invalid, "request_too_large", R::InvalidRequest,
                "request body exceeds max_request_body_bytes"),
            BodyUnreadable => row(
                S::BAD_REQUEST, invalid, "incomplete_body", R::InvalidRequest,
                "the request body could not be read"),
            InvalidJson => row(
                S::BAD_REQUEST, invalid, "invalid_json", R::InvalidRequest,
                "request body is not valid JSON"),
            NotAnObject => row(
                S::BAD_REQUEST, invalid, "invalid_json", R::InvalidRequest,
                "request body must be a JSON object"),
            ModelMissing => row(
                S::BAD_REQUEST, invalid, "invalid_request", R::InvalidRequest,
                "model is required"),
            ModelNotAString => row(
                S::BAD_REQUEST, invalid, "invalid_request", R::InvalidRequest,
                "model must be a string"),
            StreamNotABool => row(
                S::BAD_REQUEST, invalid, "invalid_request", R::InvalidRequest,
                "stream must be a boolean"),
            BadServiceTier => row(
                S::BAD_REQUEST, invalid, "invalid_service_tier", R::InvalidRequest,
                "service_tier must be one of priority, fast, default, auto or flex"),
            BadSpeed => row(
                S::BAD_REQUEST, invalid, "invalid_speed", R::InvalidRequest,
                "speed must be fast or standard"),
            ModelNotFound => row(
                S::NOT_FOUND, invalid, "model_not_found", R::InvalidRequest,
                "the requested model does not exist or is not enabled"),

            // The supervisor and its engine.
            SupervisorUnavailable => row(
                S::SERVICE_UNAVAILABLE, server, "supervisor_unavailable", R::UpstreamError,
                "the router's supervisor is not reachable; try again shortly"),
            SupervisorLost => row(
                S::SERVICE_UNAVAILABLE, server, "supervisor_unavailable", R::UpstreamError,
                "the router's supervisor went away; try again shortly"),
            ConfigMismatch => row(
                S::SERVICE_UNAVAILABLE, server, "config_mismatch", R::UpstreamError,
                "this proxy and the router's supervisor run different configurations; restart the one with the old config"),
            VersionMismatch => row(
                S::SERVICE_UNAVAILABLE, server, "version_mismatch", R::UpstreamError,
                "this proxy and the router's supervisor are different builds; restart the one that is not upgraded"),
            RoutingOff => row(
                S::SERVICE_UNAVAILABLE, server, "routing_off", R::RoutingOff,
                "routing is turned off on this router"),
            RevokedRoutingOff => row(
                S::SERVICE_UNAVAILABLE, server, "routing_off", R::RoutingOff,
                "the operator turned routing off and interrupted this request"),
            NotPrepared => row(
                S::SERVICE_UNAVAILABLE, server, "model_not_prepared", R::ModelNotPrepared,
                "the model is not prepared to run on this machine"),
            LoadFailed { retry_after_s } => row(
                S::SERVICE_UNAVAILABLE, server, "model_load_error", R::ModelLoadError,
                "the model failed to load").retry_after(retry_after_s).not_by_sdks(),
            Cooldown { retry_after_s } => row(
                S::SERVICE_UNAVAILABLE, server, "model_load_error", R::ModelLoadError,
                "a recent model load failed; retry later").retry_after(retry_after_s).not_by_sdks(),
            // OpenAI's convention for a 429, which the SDKs map to their
            // RateLimitError.
            QueueFull => row(
                S::TOO_MANY_REQUESTS, "rate_limit_error", "queue_full", R::QueueFull,
                "too many pending requests (max_pending)").retry_after(QUEUE_FULL_RETRY_AFTER_S),
            QueueTimeout => row(
                S::GATEWAY_TIMEOUT, server, "queue_timeout", R::QueueTimeout,
                "the request waited longer than queue_ms for its model"),
            ShuttingDown => row(
                S::SERVICE_UNAVAILABLE, server, "shutting_down", R::Shutdown,
                "the router is shutting down"),
            RevokedShutdown => row(
                S::SERVICE_UNAVAILABLE, server, "shutting_down", R::Shutdown,
                "the router is shutting down and interrupted this request"),

            // The backend.
            Timeout => row(
                S::GATEWAY_TIMEOUT, server, "timeout", R::Timeout,
                "the backend did not answer within response_ms"),
            StreamTimeout => row(
                S::GATEWAY_TIMEOUT, server, "timeout", R::Timeout,
                "the response exceeded response_ms"),
            StreamIdle => row(
                S::GATEWAY_TIMEOUT, server, "timeout", R::Timeout,
                "the backend sent nothing for stream_idle_ms"),
            BackendUnreachable => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                "the backend could not be reached"),
            BackendGone => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                "the backend this request was routed to is gone"),
            WrongModel => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                concat!("the backend answered as a different model than the one this ",
                    "request was routed to")),
            BackendUnresponsive => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                "the backend stopped answering and is being restarted"),
            BackendCutOff => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                "the backend connection failed during the response"),
            BackendErrorFrame => row(
                S::BAD_GATEWAY, server, "upstream_error", R::UpstreamError,
                "the backend reported an error during the response"),
            UpstreamStatus { status, kind } => row(
                status, kind, "upstream_error", R::UpstreamError,
                "the backend answered with an error"),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.spec().reply.status
    }

    /// The fixed text the client reads.
    pub fn client_message(&self) -> &'static str {
        self.spec().reply.message
    }

    /// The accounting `reason` of the request's record.
    pub fn reason(&self) -> Reason {
        self.spec().reason
    }

    /// Everything the client sees.
    pub fn reply(&self) -> ErrorReply {
        self.spec().reply
    }

    /// The JSON error response (with `Retry-After` when there is one).
    pub fn into_response(self) -> hyper::Response<ProxyBody> {
        self.reply().into_response()
    }

    /// The in-band `event: error` frame; its JSON has `error.status`.
    pub fn sse_frame(&self) -> Bytes {
        self.reply().sse_frame()
    }
}

/// The backend's error `type` when it is one of the known ones, else
/// `server_error`.
pub fn known_kind(backend_type: Option<&str>) -> &'static str {
    match backend_type {
        Some("invalid_request_error") => "invalid_request_error",
        Some("authentication_error") => "authentication_error",
        Some("model_busy") => "model_busy",
        _ => "server_error",
    }
}

/// A ticket that ended without a lease. The variant keeps no text: a failed
/// start's cause travels beside it (the trace's `start_failure`, set by
/// `admit`), and a model's status goes to the log only.
impl From<&LeaseFailure> for ChatError {
    fn from(failure: &LeaseFailure) -> Self {
        match failure {
            LeaseFailure::RoutingOff => ChatError::RoutingOff,
            LeaseFailure::UnknownModel => ChatError::ModelNotFound,
            LeaseFailure::NotPrepared { .. } => ChatError::NotPrepared,
            LeaseFailure::LoadFailed {
                cooldown_ms,
                typical_load_ms,
                ..
            } => ChatError::LoadFailed {
                retry_after_s: retry_after_s(*cooldown_ms, *typical_load_ms),
            },
            LeaseFailure::Cooldown {
                remaining_ms,
                typical_load_ms,
                ..
            } => ChatError::Cooldown {
                retry_after_s: retry_after_s(*remaining_ms, *typical_load_ms),
            },
            LeaseFailure::QueueFull => ChatError::QueueFull,
            LeaseFailure::QueueTimeout => ChatError::QueueTimeout,
            LeaseFailure::ShuttingDown => ChatError::ShuttingDown,
        }
    }
}

/// `Retry-After` of a failed start or its cooldown, in whole seconds (at
/// least 1): the rest of the cooldown, before which a retry is refused, plus
/// the model's usual load time once one was learned, since a retry after the
/// cooldown waits for a load of about that length before it is answered.
fn retry_after_s(cooldown_left_ms: u64, typical_load_ms: Option<u64>) -> u64 {
    (cooldown_left_ms + typical_load_ms.unwrap_or(0))
        .div_ceil(1000)
        .max(1)
}

/// A lease (or a waiting ticket) that ended before its response did.
impl From<LeaseEnd> for ChatError {
    fn from(end: LeaseEnd) -> Self {
        match end {
            LeaseEnd::Revoked(RevokeReason::RoutingOff) => ChatError::RevokedRoutingOff,
            LeaseEnd::Revoked(RevokeReason::Shutdown) => ChatError::RevokedShutdown,
            LeaseEnd::Revoked(RevokeReason::BackendUnresponsive) => ChatError::BackendUnresponsive,
            LeaseEnd::LinkLost => ChatError::SupervisorLost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant once, a data-carrying one with sample data. The match
    /// fails to compile when a variant is added, so it is listed here too.
    fn every_variant() -> Vec<ChatError> {
        use ChatError::*;
        let all = vec![
            BodyTooLarge,
            BodyUnreadable,
            InvalidJson,
            NotAnObject,
            ModelMissing,
            ModelNotAString,
            StreamNotABool,
            BadServiceTier,
            BadSpeed,
            ModelNotFound,
            SupervisorUnavailable,
            SupervisorLost,
            ConfigMismatch,
            VersionMismatch,
            RoutingOff,
            RevokedRoutingOff,
            NotPrepared,
            LoadFailed { retry_after_s: 30 },
            Cooldown { retry_after_s: 37 },
            QueueFull,
            QueueTimeout,
            ShuttingDown,
            RevokedShutdown,
            Timeout,
            StreamTimeout,
            StreamIdle,
            BackendUnreachable,
            BackendGone,
            WrongModel,
            BackendUnresponsive,
            BackendCutOff,
            BackendErrorFrame,
            ChatError::upstream_status(StatusCode::CONFLICT, Some("model_busy")),
        ];
        for error in &all {
            match error {
                BodyTooLarge
                | BodyUnreadable
                | InvalidJson
                | NotAnObject
                | ModelMissing
                | ModelNotAString
                | StreamNotABool
                | BadServiceTier
                | BadSpeed
                | ModelNotFound
                | SupervisorUnavailable
                | SupervisorLost
                | ConfigMismatch
                | VersionMismatch
                | RoutingOff
                | RevokedRoutingOff
                | NotPrepared
                | LoadFailed { .. }
                | Cooldown { .. }
                | QueueFull
                | QueueTimeout
                | ShuttingDown
                | RevokedShutdown
                | Timeout
                | StreamTimeout
                | StreamIdle
                | BackendUnreachable
                | BackendGone
                | WrongModel
                | BackendUnresponsive
                | BackendCutOff
                | BackendErrorFrame
                | UpstreamStatus { .. } => {}
            }
        }
        all
    }

    /// What holds for every row of the table.
    #[test]
    fn every_variant_has_a_fixed_message_and_consistent_facts() {
        let all = every_variant();
        let mut names: Vec<String> = all
            .iter()
            .map(|error| {
                format!("{error:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "each variant once");
        for error in all {
            let Spec { reply, reason } = error.spec();
            let message = reply.message;
            // Fixed text: no numbers (a cooldown's seconds, a status), and
            // the style of the codebase's messages.
            assert!(!message.is_empty(), "{error:?}");
            assert!(
                !message.chars().any(|c| c.is_ascii_digit()),
                "{error:?}: {message}"
            );
            assert!(
                message.starts_with(|c: char| c.is_lowercase()) && !message.ends_with('.'),
                "{error:?}: {message}"
            );
            assert!(
                reply
                    .code
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{error:?}"
            );
            // Waiting helps only for a failed start, its cooldown and a
            // full legacy queue; SDKs are told not to retry only the first
            // two.
            let cooling = matches!(
                error,
                ChatError::LoadFailed { .. } | ChatError::Cooldown { .. }
            );
            assert_eq!(
                reply.retry_after.is_some(),
                cooling || error == ChatError::QueueFull,
                "{error:?}"
            );
            assert_eq!(reply.should_retry, cooling.then_some(false), "{error:?}");
            // The request's own faults are the client's, in status and type,
            // and its record's reason.
            let client_fault = reply.kind == "invalid_request_error";
            assert_eq!(
                client_fault,
                matches!(reply.status.as_u16(), 400 | 404 | 413),
                "{error:?}"
            );
            assert_eq!(client_fault, reason == Reason::InvalidRequest, "{error:?}");
            if let ChatError::UpstreamStatus { status, kind } = error {
                assert_eq!((reply.status, reply.kind), (status, kind));
            } else {
                assert!(
                    ["invalid_request_error", "server_error", "rate_limit_error"]
                        .contains(&reply.kind),
                    "{error:?}"
                );
            }
            assert_eq!(
                (error.status(), error.client_message(), error.reason()),
                (reply.status, message, reason)
            );
        }
    }

    /// A few rows, whole.
    #[test]
    fn some_rows_pinned() {
        let row = |error: ChatError| {
            let Spec { reply, reason } = error.spec();
            (
                reply.status.as_u16(),
                reply.kind,
                reply.code,
                reason,
                reply.retry_after,
                reply.should_retry,
            )
        };
        let invalid = "invalid_request_error";
        assert_eq!(
            row(ChatError::BodyTooLarge),
            (
                413,
                invalid,
                "request_too_large",
                Reason::InvalidRequest,
                None,
                None
            )
        );
        assert_eq!(
            row(ChatError::BodyUnreadable),
            (
                400,
                invalid,
                "incomplete_body",
                Reason::InvalidRequest,
                None,
                None
            )
        );
        assert_eq!(
            row(ChatError::LoadFailed { retry_after_s: 30 }),
            (
                503,
                "server_error",
                "model_load_error",
                Reason::ModelLoadError,
                Some(30),
                Some(false)
            )
        );
        assert_eq!(
            row(ChatError::QueueFull),
            (
                429,
                "rate_limit_error",
                "queue_full",
                Reason::QueueFull,
                Some(QUEUE_FULL_RETRY_AFTER_S),
                None
            )
        );
        assert_eq!(
            row(ChatError::upstream_status(
                StatusCode::CONFLICT,
                Some("model_busy")
            )),
            (
                409,
                "model_busy",
                "upstream_error",
                Reason::UpstreamError,
                None,
                None
            )
        );
        assert_eq!(
            ChatError::BackendCutOff.client_message(),
            "the backend connection failed during the response"
        );
    }

    #[test]
    fn the_sse_frame_carries_the_status_and_the_fixed_message() {
        let error = ChatError::upstream_status(StatusCode::INTERNAL_SERVER_ERROR, None);
        let frame = error.sse_frame();
        let text = std::str::from_utf8(&frame).unwrap();
        let data = text
            .strip_prefix("event: error\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("one error frame: {text:?}"));
        let value: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"error": {
                "message": "the backend answered with an error",
                "type": "server_error",
                "code": "upstream_error",
                "status": 500,
            }})
        );
    }

    #[test]
    fn a_cooldown_says_when_to_retry_only_in_retry_after() {
        let failure = LeaseFailure::Cooldown {
            message: String::from("backend exited during startup (exit code 3)"),
            remaining_ms: 4001,
            typical_load_ms: None,
        };
        let error = ChatError::from(&failure);
        assert_eq!(error, ChatError::Cooldown { retry_after_s: 5 });
        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "5");
        assert_eq!(response.headers()["content-type"], "application/json");
        // Under a second left still says one.
        let soon = LeaseFailure::Cooldown {
            message: String::new(),
            remaining_ms: 0,
            typical_load_ms: None,
        };
        assert_eq!(ChatError::from(&soon).reply().retry_after, Some(1));
    }

    /// Once the model's usual load time is known, a retry hint counts it
    /// too: the cooldown, then a load of about that length.
    #[test]
    fn retry_after_adds_the_learned_load_time_to_the_cooldown() {
        let failed = LeaseFailure::LoadFailed {
            message: String::new(),
            model_switch: true,
            load_ms: Some(21_000),
            cooldown_ms: 30_000,
            typical_load_ms: Some(19_400),
        };
        assert_eq!(
            ChatError::from(&failed),
            ChatError::LoadFailed { retry_after_s: 50 }
        );
        let cooling = LeaseFailure::Cooldown {
            message: String::new(),
            remaining_ms: 0,
            typical_load_ms: Some(2_100),
        };
        let response = ChatError::from(&cooling).into_response();
        assert_eq!(response.headers()["retry-after"], "3");
    }

    #[test]
    fn a_failed_load_and_a_cooldown_tell_sdks_not_to_retry() {
        let failed = LeaseFailure::LoadFailed {
            message: String::from("backend exited during startup (exit code 3)"),
            model_switch: false,
            load_ms: Some(1600),
            cooldown_ms: 30_000,
            typical_load_ms: None,
        };
        let cooldown = LeaseFailure::Cooldown {
            message: String::new(),
            remaining_ms: 12_500,
            typical_load_ms: None,
        };
        for (failure, seconds) in [(failed, "30"), (cooldown, "13")] {
            let response = ChatError::from(&failure).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()["retry-after"], seconds, "{failure:?}");
            assert_eq!(response.headers()["x-should-retry"], "false", "{failure:?}");
        }
        // cooldown_ms: 0 still says a second, never `Retry-After: 0`.
        let no_cooldown = LeaseFailure::LoadFailed {
            message: String::new(),
            model_switch: false,
            load_ms: None,
            cooldown_ms: 0,
            typical_load_ms: None,
        };
        assert_eq!(ChatError::from(&no_cooldown).reply().retry_after, Some(1));
        // Other errors leave the SDK's own retry rules alone.
        let other = ChatError::QueueTimeout.into_response();
        assert!(other.headers().get("x-should-retry").is_none());
        assert!(other.headers().get("retry-after").is_none());
    }

    #[test]
    fn a_full_queue_is_a_rate_limit_with_retry_after() {
        let response = ChatError::QueueFull.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "1");
        assert!(response.headers().get("x-should-retry").is_none());
    }

    #[test]
    fn only_known_backend_types_pass() {
        for (sent, kind) in [
            (Some("invalid_request_error"), "invalid_request_error"),
            (Some("authentication_error"), "authentication_error"),
            (Some("model_busy"), "model_busy"),
            (Some("structured_output_failed"), "server_error"),
            (Some("<script>"), "server_error"),
            (None, "server_error"),
        ] {
            assert_eq!(known_kind(sent), kind, "{sent:?}");
        }
    }

    #[test]
    fn request_and_lease_outcomes_map_to_their_variants() {
        assert_eq!(
            ChatError::from(LeaseEnd::Revoked(RevokeReason::RoutingOff)),
            ChatError::RevokedRoutingOff
        );
        assert_eq!(
            ChatError::from(LeaseEnd::Revoked(RevokeReason::Shutdown)),
            ChatError::RevokedShutdown
        );
        assert_eq!(
            ChatError::from(LeaseEnd::LinkLost),
            ChatError::SupervisorLost
        );
        assert_eq!(
            ChatError::from(&LeaseFailure::UnknownModel),
            ChatError::ModelNotFound
        );
    }
}
