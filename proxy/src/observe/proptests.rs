//! Property tests of the response observer (issue 15, item 4): for arbitrary
//! bytes and for generated valid SSE streams and JSON bodies, split at
//! arbitrary points, the observer never panics, reaches the same summary
//! however the body was split, and never holds more than
//! [`MAX_INSPECT_BYTES`] of it.
//!
//! The case count is proptest's (256 by default; `PROPTEST_CASES=N` for a
//! long run, see docs/testing.md#property-tests).

use std::time::Instant;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// Feeds `body` to a new observer in pieces cut at `cuts` (positions taken
/// modulo the length), checking the memory bound after every piece.
fn observe_split(kind: BodyKind, body: &[u8], cuts: &[usize], now: Instant) -> Observed {
    let mut positions: Vec<usize> = cuts
        .iter()
        .map(|cut| if body.is_empty() { 0 } else { cut % body.len() })
        .collect();
    positions.sort_unstable();
    positions.dedup();
    let mut observer = ResponseObserver::new(kind);
    let mut start = 0;
    for end in positions.into_iter().chain([body.len()]) {
        observer.observe(&body[start..end], now);
        assert!(
            observer.buffered() <= MAX_INSPECT_BYTES,
            "{} bytes held",
            observer.buffered()
        );
        start = end;
    }
    observer.finish()
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 .,!?]{0,40}",
        any::<String>(),
        Just("\n\r\n data: [DONE]\n\n".to_owned()),
        Just("Zürich — 気温 🌦️".to_owned()),
    ]
}

/// One SSE event of the kinds Strata and compatible backends send.
fn event() -> impl Strategy<Value = String> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    prop_oneof![
        text().prop_map(move |t| chunk(json!({ "content": t }), Value::Null).to_string()),
        text().prop_map(move |t| chunk(json!({ "reasoning_content": t }), Value::Null).to_string()),
        text().prop_map(move |t| chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": t}}]}),
            Value::Null
        )
        .to_string()),
        Just(chunk(json!({"role": "assistant", "content": ""}), Value::Null).to_string()),
        prop_oneof![
            Just("stop"),
            Just("length"),
            Just("tool_calls"),
            Just("something-new")
        ]
        .prop_map(move |reason| chunk(json!({}), json!(reason)).to_string()),
        (0u64..100_000, 0u64..100_000, 0.0f64..10_000.0).prop_map(|(p, c, ms)| json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": [],
            "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
            "timings": {"prompt_n": p, "predicted_n": c, "predicted_ms": ms,
                        "predicted_per_second": 12.5},
        })
        .to_string()),
        Just(json!({"error": {"message": "boom", "code": 500}}).to_string()),
    ]
}

/// A valid stream: events as `data:` lines (LF or CRLF), with keepalive
/// comments and blank lines between, ending in `[DONE]` or not.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec((event(), any::<bool>(), any::<bool>()), 0..24),
        any::<bool>(),
    )
        .prop_map(|(events, done)| {
            let mut out = String::new();
            for (payload, crlf, keepalive) in events {
                let end = if crlf { "\r\n" } else { "\n" };
                if keepalive {
                    out.push_str(": keep-alive");
                    out.push_str(end);
                    out.push_str(end);
                }
                out.push_str("data: ");
                out.push_str(&payload);
                out.push_str(end);
                out.push_str(end);
            }
            if done {
                out.push_str("data: [DONE]\n\n");
            }
            out.into_bytes()
        })
}

/// A non-stream chat completion, or another JSON document.
fn json_document() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (text(), 0u64..100_000, 0u64..100_000).prop_map(|(t, p, c)| json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": t},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": p, "completion_tokens": c},
            "timings": {"prompt_n": p, "predicted_n": c},
        })
        .to_string()
        .into_bytes()),
        Just(br#"{"error":{"message":"bad","type":"invalid_request_error"}}"#.to_vec()),
        any::<String>().prop_map(|s| json!({ "anything": s }).to_string().into_bytes()),
    ]
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(any::<usize>(), 0..16)
}

proptest! {
    /// Any bytes at all, as SSE: no panic, and the same summary for every split.
    #[test]
    fn sse_arbitrary_bytes_any_split(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in cuts(),
    ) {
        let now = Instant::now();
        let whole = observe_split(BodyKind::Sse, &body, &[], now);
        let split = observe_split(BodyKind::Sse, &body, &cuts, now);
        prop_assert_eq!(whole, split);
    }

    /// Valid streams: the same summary for every split, and it counts every byte.
    #[test]
    fn sse_valid_streams_any_split(body in stream(), cuts in cuts()) {
        let now = Instant::now();
        let whole = observe_split(BodyKind::Sse, &body, &[], now);
        let split = observe_split(BodyKind::Sse, &body, &cuts, now);
        prop_assert_eq!(whole.response_bytes, body.len() as u64);
        prop_assert_eq!(whole, split);
    }

    /// A line near or past the limit, split anywhere: the observer never holds more
    /// than the limit, and agrees with itself.
    #[test]
    fn sse_long_lines_stay_bounded(
        extra in 0usize..4096,
        under in any::<bool>(),
        fill in any::<u8>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let len = if under { MAX_INSPECT_BYTES - extra } else { MAX_INSPECT_BYTES + extra };
        let fill = if fill == b'\n' { b'x' } else { fill };
        let mut body = b"data: ".to_vec();
        body.resize(len, fill);
        body.extend_from_slice(b"\n\ndata: [DONE]\n\n");
        let now = Instant::now();
        let whole = observe_split(BodyKind::Sse, &body, &[], now);
        let split = observe_split(BodyKind::Sse, &body, &cuts, now);
        prop_assert_eq!(whole, split);
    }

    /// Any bytes as a JSON body: no panic, the same summary for every split.
    #[test]
    fn json_arbitrary_bytes_any_split(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in cuts(),
    ) {
        let now = Instant::now();
        let whole = observe_split(BodyKind::Json, &body, &[], now);
        let split = observe_split(BodyKind::Json, &body, &cuts, now);
        prop_assert_eq!(whole, split);
    }

    /// Generated JSON documents: the same summary for every split; a completion's usage
    /// is read.
    #[test]
    fn json_documents_any_split(body in json_document(), cuts in cuts()) {
        let now = Instant::now();
        let whole = observe_split(BodyKind::Json, &body, &[], now);
        let split = observe_split(BodyKind::Json, &body, &cuts, now);
        let doc: Value = serde_json::from_slice(&body).unwrap();
        if let Some(prompt) = doc["usage"]["prompt_tokens"].as_u64() {
            prop_assert_eq!(whole.usage.prompt_tokens, Some(prompt));
        }
        prop_assert_eq!(whole.inband_error, !doc["error"].is_null());
        prop_assert_eq!(whole, split);
    }
}
