//! What the bench upstream and the bench driver agree on: the per-request [`Shape`] of a
//! response, the chat request body, and the exact response bytes (so the driver can check every
//! response it measures by its length, and the first ones byte for byte).
//!
//! The frames look like Strata's: single-line `data: {json}` SSE frames whose first one names
//! the `model` (the router's model gate reads it), a final frame with `finish_reason`, `usage`
//! and `timings`, then `data: [DONE]`. A JSON answer is one `chat.completion` object.

use serde::{Deserialize, Serialize};

/// The chat completions path.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// The last SSE frame of every stream.
pub const SSE_DONE: &[u8] = b"data: [DONE]\n\n";

/// Prompt tokens reported in `usage` (a constant: the bench upstream has no tokenizer).
const PROMPT_TOKENS: u64 = 8;

/// The shape of one response: `chunks` content deltas of `bytes` ASCII bytes each, and for a
/// stream a pause of `pace_ms` before every delta but the first. A JSON answer carries the same
/// content (`chunks * bytes` bytes) in one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Shape {
    pub chunks: u32,
    pub bytes: u32,
    pub pace_ms: u64,
}

impl Default for Shape {
    fn default() -> Shape {
        Shape {
            chunks: 16,
            bytes: 8,
            pace_ms: 0,
        }
    }
}

impl Shape {
    /// A shape without pacing.
    pub const fn new(chunks: u32, bytes: u32) -> Shape {
        Shape {
            chunks,
            bytes,
            pace_ms: 0,
        }
    }

    /// The same shape with `pace_ms` between deltas.
    pub const fn paced(self, pace_ms: u64) -> Shape {
        Shape { pace_ms, ..self }
    }

    /// SSE frames in a stream of this shape: the deltas, the final frame and `[DONE]`.
    pub fn sse_events(&self) -> u64 {
        u64::from(self.chunks) + 2
    }

    /// Total body bytes of a stream of this shape answered as `model`.
    pub fn sse_len(&self, model: &str) -> u64 {
        u64::from(self.chunks) * sse_chunk(model, self.bytes as usize).len() as u64
            + sse_final(model, self.chunks).len() as u64
            + SSE_DONE.len() as u64
    }

    /// Body bytes of a JSON answer of this shape as `model`.
    pub fn json_len(&self, model: &str) -> u64 {
        json_response(model, self).len() as u64
    }
}

/// A chat body's `bench` object: any field set overrides the profile's default [`Shape`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShapeOverride {
    pub chunks: Option<u32>,
    pub bytes: Option<u32>,
    pub pace_ms: Option<u64>,
}

impl ShapeOverride {
    /// `base` with this override's fields applied.
    pub fn apply(&self, base: Shape) -> Shape {
        Shape {
            chunks: self.chunks.unwrap_or(base.chunks),
            bytes: self.bytes.unwrap_or(base.bytes),
            pace_ms: self.pace_ms.unwrap_or(base.pace_ms),
        }
    }
}

/// The routing fields of a chat body the upstream reads (everything else is ignored).
#[derive(Debug, Default, Deserialize)]
pub struct ChatBody {
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub bench: ShapeOverride,
}

/// A chat request body for `model` (a router model ID; the upstream ignores it) asking for
/// `shape`.
pub fn chat_request(model: &str, stream: bool, shape: Shape) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "Say hello."}],
        "bench": shape,
    }))
    .expect("a chat body serializes")
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

fn usage(completion: u64) -> String {
    format!(
        r#""usage":{{"prompt_tokens":{PROMPT_TOKENS},"completion_tokens":{completion},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":0}}}}"#,
        PROMPT_TOKENS + completion
    )
}

/// One content delta frame of `content` bytes.
pub fn sse_chunk(model: &str, content: usize) -> Vec<u8> {
    format!(
        r#"data: {{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":{},"choices":[{{"index":0,"delta":{{"content":"{}"}},"finish_reason":null}}]}}"#,
        quoted(model),
        "x".repeat(content)
    )
    .into_bytes()
    .into_iter()
    .chain(*b"\n\n")
    .collect()
}

/// The final frame after `chunks` deltas: `finish_reason`, `usage` and `timings`.
pub fn sse_final(model: &str, chunks: u32) -> Vec<u8> {
    let n = u64::from(chunks);
    format!(
        r#"data: {{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":{},"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop"}}],{},"timings":{{"cache_n":0,"prompt_n":{PROMPT_TOKENS},"prompt_ms":1.0,"predicted_n":{n},"predicted_ms":1.0}}}}"#,
        quoted(model),
        usage(n)
    )
    .into_bytes()
    .into_iter()
    .chain(*b"\n\n")
    .collect()
}

/// The whole non-stream answer.
pub fn json_response(model: &str, shape: &Shape) -> Vec<u8> {
    let content = shape.chunks as usize * shape.bytes as usize;
    format!(
        r#"{{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":{},"choices":[{{"index":0,"message":{{"role":"assistant","content":"{}"}},"finish_reason":"stop"}}],{}}}"#,
        quoted(model),
        "x".repeat(content),
        usage(u64::from(shape.chunks))
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_json_lines_naming_the_model() {
        let chunk = sse_chunk("up-m", 4);
        let text = std::str::from_utf8(&chunk).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(text.strip_prefix("data: ").unwrap().trim_end()).unwrap();
        assert_eq!(json["model"], "up-m");
        assert_eq!(json["choices"][0]["delta"]["content"], "xxxx");
        let last = sse_final("up-m", 3);
        let json: serde_json::Value = serde_json::from_slice(&last[6..last.len() - 2]).unwrap();
        assert_eq!(json["usage"]["completion_tokens"], 3);
        let body: serde_json::Value =
            serde_json::from_slice(&json_response("up-m", &Shape::new(2, 3))).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "xxxxxx");
    }

    #[test]
    fn a_request_round_trips_its_shape() {
        let shape = Shape::new(5, 7).paced(3);
        let body: ChatBody = serde_json::from_slice(&chat_request("m", true, shape)).unwrap();
        assert!(body.stream);
        assert_eq!(body.bench.apply(Shape::default()), shape);
        let partial: ShapeOverride = serde_json::from_str(r#"{"chunks":2}"#).unwrap();
        assert_eq!(partial.apply(Shape::new(9, 9)), Shape::new(2, 9));
    }
}
