//! What one JSON payload means for accounting: an SSE `data:` payload (a
//! chat-completion chunk, an error object) or a whole non-stream body.
//!
//! The payload is walked once by serde_json with hand-written visitors that
//! keep only a handful of numbers and flags. Unknown keys are skipped by
//! serde_json's `IgnoredAny` path, which neither builds values nor unescapes
//! strings, so a content delta's text is only looked at to tell whether it is
//! empty. Every visitor accepts every JSON type: a field of an unexpected
//! type reads as "not reported" instead of failing the whole frame, so a
//! backend quirk in one field cannot erase the usage next to it. The only
//! error [`parse`] returns is "this is not JSON".

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use strata_protocol::record::FinishReason;

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
    let top = de.deserialize_any(Reducer::<Obj<Top>>(PhantomData))?;
    de.end()?;
    Ok(top.0.map(Top::into_frame).unwrap_or_default())
}

// ---- The reduction machinery -------------------------------------------

/// How one JSON value of any type reduces to `Self`. Every method defaults
/// to "nothing useful here", and containers are drained without building
/// anything, so an implementation only states the cases it cares about.
trait Reduce<'de>: Default {
    fn u64(_: u64) -> Self {
        Self::default()
    }
    fn i64(_: i64) -> Self {
        Self::default()
    }
    fn f64(_: f64) -> Self {
        Self::default()
    }
    fn str(_: &str) -> Self {
        Self::default()
    }
    fn bool(_: bool) -> Self {
        Self::default()
    }
    fn null() -> Self {
        Self::default()
    }
    /// An array or object, after it has been skipped.
    fn container(_non_empty: bool) -> Self {
        Self::default()
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let non_empty = seq.next_element::<IgnoredAny>()?.is_some();
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::container(non_empty))
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let non_empty = map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some();
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::container(non_empty))
    }
}

/// The one visitor (and seed) behind every [`Reduce`] type. It always goes
/// through `deserialize_any`, so the JSON decides which method runs.
struct Reducer<T>(PhantomData<T>);

impl<T> Reducer<T> {
    fn new() -> Self {
        Self(PhantomData)
    }
}

impl<'de, T: Reduce<'de>> DeserializeSeed<'de> for Reducer<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Reduce<'de>> Visitor<'de> for Reducer<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Ok(T::bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Ok(T::i64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::u64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Ok(T::f64(v))
    }
    // serde's default `visit_borrowed_str` forwards here, so both the
    // zero-copy and the unescaped-into-scratch cases arrive as `&str`.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
}

/// A JSON object with a few known keys.
trait Fields<'de>: Default {
    type Key: Copy;
    /// Which known key `name` is; `None` skips the value unread.
    fn key(name: &str) -> Option<Self::Key>;
    /// Reads the value of a known key (a repeated key: the last one wins).
    fn value<A: MapAccess<'de>>(&mut self, key: Self::Key, map: &mut A) -> Result<(), A::Error>;
}

/// `Some` when the value was an object; any other JSON type is `None`.
struct Obj<T>(Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Fields<'de>> Reduce<'de> for Obj<T> {
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut fields = T::default();
        while let Some(key) = map.next_key_seed(KeySeed::<T>(PhantomData))? {
            match key {
                Some(key) => fields.value(key, &mut map)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Self(Some(fields)))
    }
}

/// Reads an object key straight into `T::Key` without allocating.
struct KeySeed<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> DeserializeSeed<'de> for KeySeed<T> {
    type Value = Option<T::Key>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, T: Fields<'de>> Visitor<'de> for KeySeed<T> {
    type Value = Option<T::Key>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(T::key(v))
    }
}

fn read<'de, T: Reduce<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    map.next_value_seed(Reducer::<T>::new())
}

// ---- Leaf values --------------------------------------------------------

/// A token count: a non-negative integer, or a float with a zero fraction
/// (some engines serialise counts through a float); anything else is
/// "not reported" rather than a rounded guess.
#[derive(Default)]
struct Count(Option<u64>);

impl Reduce<'_> for Count {
    fn u64(v: u64) -> Self {
        Self(Some(v))
    }
    fn f64(v: f64) -> Self {
        // 2^64 as f64; `as` would saturate above it.
        const LIMIT: f64 = 18_446_744_073_709_551_616.0;
        let whole = v.fract() == 0.0 && (0.0..LIMIT).contains(&v);
        Self(whole.then_some(v as u64))
    }
}

/// An engine duration or rate, copied as sent.
#[derive(Default)]
struct Number(Option<f64>);

impl Reduce<'_> for Number {
    fn u64(v: u64) -> Self {
        Self(Some(v as f64))
    }
    fn i64(v: i64) -> Self {
        Self(Some(v as f64))
    }
    fn f64(v: f64) -> Self {
        Self(Some(v))
    }
}

/// Whether a delta field carries output: a non-empty string, array or
/// object (content-part arrays and tool-call lists included).
#[derive(Default)]
struct NonEmpty(bool);

impl Reduce<'_> for NonEmpty {
    fn str(v: &str) -> Self {
        Self(!v.is_empty())
    }
    fn container(non_empty: bool) -> Self {
        Self(non_empty)
    }
}

/// Present and not `null`.
#[derive(Default)]
struct NonNull(bool);

impl Reduce<'_> for NonNull {
    fn u64(_: u64) -> Self {
        Self(true)
    }
    fn i64(_: i64) -> Self {
        Self(true)
    }
    fn f64(_: f64) -> Self {
        Self(true)
    }
    fn str(_: &str) -> Self {
        Self(true)
    }
    fn bool(_: bool) -> Self {
        Self(true)
    }
    fn container(_: bool) -> Self {
        Self(true)
    }
}

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

#[derive(Clone, Copy)]
enum ChoiceKey {
    Delta,
    FinishReason,
}

impl<'de> Fields<'de> for Choice {
    type Key = ChoiceKey;
    fn key(name: &str) -> Option<ChoiceKey> {
        match name {
            "delta" => Some(ChoiceKey::Delta),
            "finish_reason" => Some(ChoiceKey::FinishReason),
            _ => None,
        }
    }
    fn value<A: MapAccess<'de>>(&mut self, key: ChoiceKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            ChoiceKey::Delta => self.delta = read(map)?,
            ChoiceKey::FinishReason => self.finish = read(map)?,
        }
        Ok(())
    }
}

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

#[derive(Clone, Copy)]
enum UsageKey {
    PromptTokens,
    CompletionTokens,
    ReasoningTokens,
    CompletionDetails,
    PromptDetails,
}

impl<'de> Fields<'de> for UsageFields {
    type Key = UsageKey;
    fn key(name: &str) -> Option<UsageKey> {
        Some(match name {
            "prompt_tokens" => UsageKey::PromptTokens,
            "completion_tokens" => UsageKey::CompletionTokens,
            "reasoning_tokens" => UsageKey::ReasoningTokens,
            "completion_tokens_details" => UsageKey::CompletionDetails,
            "prompt_tokens_details" => UsageKey::PromptDetails,
            _ => return None,
        })
    }
    fn value<A: MapAccess<'de>>(&mut self, key: UsageKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            UsageKey::PromptTokens => self.prompt_tokens = read(map)?,
            UsageKey::CompletionTokens => self.completion_tokens = read(map)?,
            UsageKey::ReasoningTokens => self.reasoning_tokens = read(map)?,
            UsageKey::CompletionDetails => self.completion_details = read(map)?,
            UsageKey::PromptDetails => self.prompt_details = read(map)?,
        }
        Ok(())
    }
}

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

#[derive(Clone, Copy)]
enum DetailsKey {
    Reasoning,
    Cached,
}

impl<'de> Fields<'de> for Details {
    type Key = DetailsKey;
    fn key(name: &str) -> Option<DetailsKey> {
        match name {
            "reasoning_tokens" => Some(DetailsKey::Reasoning),
            "cached_tokens" => Some(DetailsKey::Cached),
            _ => None,
        }
    }
    fn value<A: MapAccess<'de>>(&mut self, key: DetailsKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            DetailsKey::Reasoning => self.reasoning_tokens = read(map)?,
            DetailsKey::Cached => self.cached_tokens = read(map)?,
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum TimingsKey {
    PromptN,
    CacheN,
    PredictedN,
    PromptMs,
    PredictedMs,
    PromptPerSecond,
    PredictedPerSecond,
}

impl<'de> Fields<'de> for Timings {
    type Key = TimingsKey;
    fn key(name: &str) -> Option<TimingsKey> {
        Some(match name {
            "prompt_n" => TimingsKey::PromptN,
            "cache_n" => TimingsKey::CacheN,
            "predicted_n" => TimingsKey::PredictedN,
            "prompt_ms" => TimingsKey::PromptMs,
            "predicted_ms" => TimingsKey::PredictedMs,
            "prompt_per_second" => TimingsKey::PromptPerSecond,
            "predicted_per_second" => TimingsKey::PredictedPerSecond,
            _ => return None,
        })
    }
    fn value<A: MapAccess<'de>>(&mut self, key: TimingsKey, map: &mut A) -> Result<(), A::Error> {
        let count = |map: &mut A| read(map).map(|Count(n)| n);
        let number = |map: &mut A| read(map).map(|Number(x)| x);
        match key {
            TimingsKey::PromptN => self.prompt_n = count(map)?,
            TimingsKey::CacheN => self.cache_n = count(map)?,
            TimingsKey::PredictedN => self.predicted_n = count(map)?,
            TimingsKey::PromptMs => self.prompt_ms = number(map)?,
            TimingsKey::PredictedMs => self.predicted_ms = number(map)?,
            TimingsKey::PromptPerSecond => self.prompt_per_second = number(map)?,
            TimingsKey::PredictedPerSecond => self.predicted_per_second = number(map)?,
        }
        Ok(())
    }
}

/// The Responses-API wrapper `{"response":{"error":...}}`.
#[derive(Default)]
struct ResponseObj {
    error: NonNull,
}

impl<'de> Fields<'de> for ResponseObj {
    type Key = ();
    fn key(name: &str) -> Option<()> {
        (name == "error").then_some(())
    }
    fn value<A: MapAccess<'de>>(&mut self, _: (), map: &mut A) -> Result<(), A::Error> {
        self.error = read(map)?;
        Ok(())
    }
}

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

#[derive(Clone, Copy)]
enum TopKey {
    Choices,
    Usage,
    Timings,
    Error,
    Response,
    Type,
    Code,
    Message,
}

impl<'de> Fields<'de> for Top {
    type Key = TopKey;
    fn key(name: &str) -> Option<TopKey> {
        Some(match name {
            "choices" => TopKey::Choices,
            "usage" => TopKey::Usage,
            "timings" => TopKey::Timings,
            "error" => TopKey::Error,
            "response" => TopKey::Response,
            "type" => TopKey::Type,
            "code" => TopKey::Code,
            "message" => TopKey::Message,
            _ => return None,
        })
    }
    fn value<A: MapAccess<'de>>(&mut self, key: TopKey, map: &mut A) -> Result<(), A::Error> {
        match key {
            TopKey::Choices => self.choices = read(map)?,
            TopKey::Usage => self.usage = read(map)?,
            TopKey::Timings => self.timings = read(map)?,
            TopKey::Error => self.error = read(map)?,
            TopKey::Response => self.response = read(map)?,
            TopKey::Type => self.kind = read(map)?,
            TopKey::Code => self.code = read(map)?,
            TopKey::Message => self.message = read(map)?,
        }
        Ok(())
    }
}

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
