//! What one JSON payload means for accounting: an SSE `data:` payload (a
//! chat-completion chunk, an error object) or a whole non-stream body.
//!
//! This is the schema, written in `reduce.rs`'s machinery: the payload is
//! walked once by serde_json with visitors that keep only a handful of
//! numbers and flags. Unknown keys are skipped by serde_json's `IgnoredAny`
//! path, which neither builds values nor unescapes strings, so a content
//! delta's text is only looked at to tell whether it is empty. Every visitor
//! accepts every JSON type: a field of an unexpected type reads as "not
//! reported" instead of failing the whole frame, so a backend quirk in one
//! field cannot erase the usage next to it. The only error [`parse`]
//! returns is "this is not JSON".

use serde::de::{Deserializer, MapAccess, SeqAccess};
use strata_protocol::record::FinishReason;

use super::reduce::{Count, Fields, NonEmpty, NonNull, Number, Obj, Reduce, Reducer, fields, read};
use super::summary::{Timings, Usage};

/// The accounting facts in one payload.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Frame {
    /// Some `choices[].delta` carried generated output: non-empty `content`,
    /// `reasoning_content` or `reasoning`, or any `tool_calls` entry.
    pub generated: bool,
    /// `choices[0].finish_reason` (the non-stream rule).
    pub first_finish: Option<FinishReason>,
    /// The last non-null `choices[].finish_reason` (the stream rule).
    pub last_finish: Option<FinishReason>,
    pub usage: Usage,
    pub timings: Timings,
    /// The payload is an error object in one of the shapes CLIProxyAPI
    /// treats as a failed response: a non-null `error` or `response.error`,
    /// a `type` of `error`/`response.error`/`response.failed`, or top-level
    /// `code` and `message`.
    pub error: bool,
}

/// Reads one JSON text. Valid JSON that is not an object (or has none of the
/// interesting keys) yields an empty [`Frame`].
pub(super) fn parse(payload: &[u8]) -> Result<Frame, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(payload);
    let top = de.deserialize_any(Reducer::<Obj<Top>>::new())?;
    de.end()?;
    Ok(top.0.map(Top::into_frame).unwrap_or_default())
}

// ---- Leaf values of this schema ----------------------------------------

/// A `finish_reason` string; `null` and non-strings are "none".
#[derive(Default)]
struct Finish(Option<FinishReason>);

impl Reduce<'_> for Finish {
    fn str(v: &str) -> Self {
        Self(Some(FinishReason::from_wire(v)))
    }
}

/// A top-level `type` naming an error event.
#[derive(Default)]
struct ErrorType(bool);

impl Reduce<'_> for ErrorType {
    fn str(v: &str) -> Self {
        Self(is_error_event(v.as_bytes()))
    }
}

/// The event (or `type`) names CLIProxyAPI treats as a failed stream.
pub(super) fn is_error_event(name: &[u8]) -> bool {
    matches!(name, b"error" | b"response.error" | b"response.failed")
}

// ---- Choices -------------------------------------------------------------

/// What `choices` adds up to, folded element by element without a Vec.
#[derive(Default)]
struct Choices {
    generated: bool,
    first_finish: Option<FinishReason>,
    last_finish: Option<FinishReason>,
}

impl<'de> Reduce<'de> for Choices {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut out = Self::default();
        let mut first = true;
        while let Some(Obj(choice)) = seq.next_element_seed(Reducer::<Obj<Choice>>::new())? {
            let choice = choice.unwrap_or_default();
            out.generated |= choice.delta.0.is_some_and(|d| d.generated);
            if first {
                out.first_finish = choice.finish.0;
                first = false;
            }
            if choice.finish.0.is_some() {
                out.last_finish = choice.finish.0;
            }
        }
        Ok(out)
    }
}

#[derive(Default)]
struct Choice {
    delta: Obj<Delta>,
    finish: Finish,
}

fields!(Choice, ChoiceKey {
    "delta" => delta,
    "finish_reason" => finish,
});

/// A `delta`; only whether it generated anything survives.
#[derive(Default)]
struct Delta {
    generated: bool,
}

impl<'de> Fields<'de> for Delta {
    // Every key that matters means the same thing: output if non-empty.
    type Key = ();
    fn key(name: &str) -> Option<()> {
        matches!(
            name,
            "content" | "reasoning_content" | "reasoning" | "tool_calls"
        )
        .then_some(())
    }
    fn value<A: MapAccess<'de>>(&mut self, _: (), map: &mut A) -> Result<(), A::Error> {
        let NonEmpty(non_empty) = read(map)?;
        self.generated |= non_empty;
        Ok(())
    }
}

// ---- usage / timings / errors -------------------------------------------

#[derive(Default)]
struct UsageFields {
    prompt_tokens: Count,
    completion_tokens: Count,
    reasoning_tokens: Count,
    completion_details: Obj<Details>,
    prompt_details: Obj<Details>,
}

fields!(UsageFields, UsageKey {
    "prompt_tokens" => prompt_tokens,
    "completion_tokens" => completion_tokens,
    "reasoning_tokens" => reasoning_tokens,
    "completion_tokens_details" => completion_details,
    "prompt_tokens_details" => prompt_details,
});

impl UsageFields {
    fn into_usage(self) -> Usage {
        let details = |d: Obj<Details>| d.0.unwrap_or_default();
        Usage {
            prompt_tokens: self.prompt_tokens.0,
            completion_tokens: self.completion_tokens.0,
            // The OpenAI place first; some backends flatten it into usage.
            reasoning_tokens: details(self.completion_details)
                .reasoning_tokens
                .0
                .or(self.reasoning_tokens.0),
            cached_tokens: details(self.prompt_details).cached_tokens.0,
        }
    }
}

/// `completion_tokens_details` and `prompt_tokens_details` share one shape
/// here; each is only asked for its own field.
#[derive(Default)]
struct Details {
    reasoning_tokens: Count,
    cached_tokens: Count,
}

fields!(Details, DetailsKey {
    "reasoning_tokens" => reasoning_tokens,
    "cached_tokens" => cached_tokens,
});

// `Timings` is a result type (`summary.rs`): plain `Option`s, read through
// the leaf reducers.
fields!(Timings, TimingsKey {
    "prompt_n" => prompt_n as Count,
    "cache_n" => cache_n as Count,
    "predicted_n" => predicted_n as Count,
    "prompt_ms" => prompt_ms as Number,
    "predicted_ms" => predicted_ms as Number,
    "prompt_per_second" => prompt_per_second as Number,
    "predicted_per_second" => predicted_per_second as Number,
});

/// The Responses-API wrapper `{"response":{"error":...}}`.
#[derive(Default)]
struct ResponseObj {
    error: NonNull,
}

fields!(ResponseObj, ResponseKey { "error" => error });

/// The top-level object.
#[derive(Default)]
struct Top {
    choices: Choices,
    usage: Obj<UsageFields>,
    timings: Obj<Timings>,
    error: NonNull,
    response: Obj<ResponseObj>,
    kind: ErrorType,
    code: NonNull,
    message: NonNull,
}

fields!(Top, TopKey {
    "choices" => choices,
    "usage" => usage,
    "timings" => timings,
    "error" => error,
    "response" => response,
    "type" => kind,
    "code" => code,
    "message" => message,
});

impl Top {
    fn into_frame(self) -> Frame {
        Frame {
            generated: self.choices.generated,
            first_finish: self.choices.first_finish,
            last_finish: self.choices.last_finish,
            usage: self
                .usage
                .0
                .map(UsageFields::into_usage)
                .unwrap_or_default(),
            timings: self.timings.0.unwrap_or_default(),
            error: self.error.0
                || self.response.0.is_some_and(|r| r.error.0)
                || self.kind.0
                || (self.code.0 && self.message.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(json: &str) -> Frame {
        parse(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn generated_deltas() {
        let chunk = |delta: &str| {
            frame(&format!(
                r#"{{"id":"c","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#
            ))
        };
        for delta in [
            r#"{"content":"Hi"}"#,
            r#"{"content":"\n"}"#,
            r#"{"reasoning_content":"hm"}"#,
            r#"{"reasoning":"hm"}"#,
            r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}"#,
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}"#,
            r#"{"content":[{"type":"text","text":"parts"}]}"#,
        ] {
            assert!(chunk(delta).generated, "{delta}");
        }
        for delta in [
            r#"{"role":"assistant","content":""}"#,
            r#"{}"#,
            r#"{"content":null}"#,
            r#"{"content":"","reasoning_content":null,"tool_calls":[]}"#,
            r#"null"#,
            r#""text""#,
        ] {
            assert!(!chunk(delta).generated, "{delta}");
        }
        // Usage-only frame with no choices at all.
        let usage_only =
            frame(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#);
        assert!(!usage_only.generated);
        assert_eq!(usage_only.usage.completion_tokens, Some(4));
    }

    #[test]
    fn finish_reasons_first_and_last_non_null() {
        let f = frame(
            r#"{"choices":[{"finish_reason":"length"},{"finish_reason":null},{"finish_reason":"stop"},{"finish_reason":null}]}"#,
        );
        assert_eq!(f.first_finish, Some(FinishReason::Length));
        assert_eq!(f.last_finish, Some(FinishReason::Stop));
        let f = frame(r#"{"choices":[{"finish_reason":"eos_token"}]}"#);
        assert_eq!(f.last_finish, Some(FinishReason::Other));
        let f = frame(r#"{"choices":[{"finish_reason":7}]}"#);
        assert_eq!(f.last_finish, None);
    }

    #[test]
    fn counts_accept_whole_floats_only() {
        let f = frame(
            r#"{"timings":{"prompt_n":12.0,"cache_n":1.5,"predicted_n":-3,"prompt_ms":-0.5,"predicted_ms":7,"prompt_per_second":null,"predicted_per_second":"fast"}}"#,
        );
        assert_eq!(f.timings.prompt_n, Some(12));
        assert_eq!(f.timings.cache_n, None);
        assert_eq!(f.timings.predicted_n, None);
        assert_eq!(f.timings.prompt_ms, Some(-0.5));
        assert_eq!(f.timings.predicted_ms, Some(7.0));
        assert_eq!(f.timings.prompt_per_second, None);
        assert_eq!(f.timings.predicted_per_second, None);
        let f =
            frame(r#"{"usage":{"prompt_tokens":1e30,"completion_tokens":18446744073709551615}}"#);
        assert_eq!(f.usage.prompt_tokens, None);
        assert_eq!(f.usage.completion_tokens, Some(u64::MAX));
    }

    #[test]
    fn reasoning_tokens_prefer_details() {
        let f = frame(
            r#"{"usage":{"reasoning_tokens":5,"completion_tokens_details":{"reasoning_tokens":9}}}"#,
        );
        assert_eq!(f.usage.reasoning_tokens, Some(9));
        let f = frame(r#"{"usage":{"reasoning_tokens":5,"completion_tokens_details":null}}"#);
        assert_eq!(f.usage.reasoning_tokens, Some(5));
    }

    #[test]
    fn error_shapes() {
        for json in [
            r#"{"error":{"type":"server_error","message":"boom"}}"#,
            r#"{"error":"boom"}"#,
            r#"{"response":{"id":"r","error":{"code":"x"}}}"#,
            r#"{"type":"error","code":"x","message":"y","sequence_number":3}"#,
            r#"{"type":"response.failed"}"#,
            r#"{"type":"response.error"}"#,
            r#"{"code":500,"message":"boom"}"#,
        ] {
            assert!(frame(json).error, "{json}");
        }
        for json in [
            r#"{"error":null}"#,
            r#"{"response":{"error":null}}"#,
            r#"{"response":"error"}"#,
            r#"{"type":"response.completed"}"#,
            r#"{"code":"x"}"#,
            r#"{"message":"y","code":null}"#,
            r#"{"choices":[{"delta":{"content":"error"}}]}"#,
        ] {
            assert!(!frame(json).error, "{json}");
        }
    }

    #[test]
    fn unexpected_types_do_not_hide_other_fields() {
        let f = frame(
            r#"{"choices":"nope","usage":{"prompt_tokens":"3","completion_tokens":4,"prompt_tokens_details":[1]},"timings":[],"error":null}"#,
        );
        assert_eq!(f.usage.prompt_tokens, None);
        assert_eq!(f.usage.completion_tokens, Some(4));
        assert_eq!(f.usage.cached_tokens, None);
        assert_eq!(f.timings, Timings::default());
        // Repeated keys: the last one wins instead of failing the frame.
        let f = frame(r#"{"usage":{"completion_tokens":1},"usage":{"completion_tokens":2}}"#);
        assert_eq!(f.usage.completion_tokens, Some(2));
        // Valid JSON that is not an object is simply empty.
        for json in ["[1,2]", "42", "\"x\"", "null", " {} "] {
            assert_eq!(frame(json), Frame::default(), "{json}");
        }
    }

    #[test]
    fn not_json_is_an_error() {
        for bad in [
            "",
            "{",
            "{\"a\":1} x",
            "{\"choices\":[{\"delta\":{\"content\":\"\\q\"}}]}",
            "[DONE]",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
        // Invalid UTF-8 inside a string that is read.
        assert!(parse(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}").is_err());
    }
}
