//! The result of observing one response body, and how frames fold into it.
//!
//! [`Observed`] carries only the numeric and boolean facts the record schema
//! allows; no text from the response ever lands here. The merge rules live
//! next to the struct so the SSE and non-stream paths cannot drift apart.

use std::time::Instant;

use strata_protocol::record::FinishReason;

/// Everything the observer learned from one response body.
///
/// Each `Option` is `None` when the backend did not report the value (or
/// reported it in a form that is not a valid value of that field); the record
/// turns that into JSON null, never into an invented zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Every body byte observed, SSE comments and in-band errors included.
    pub response_bytes: u64,
    /// When the first generated SSE delta (content, reasoning or tool call)
    /// finished arriving. Always `None` for non-stream bodies.
    pub first_token_at: Option<Instant>,
    /// When the last generated SSE delta finished arriving.
    pub last_token_at: Option<Instant>,
    /// The last reported `usage` counts; `reasoning_tokens` is
    /// `usage.completion_tokens_details.reasoning_tokens`, else
    /// `usage.reasoning_tokens`.
    pub usage: Usage,
    /// The last reported `timings`, copied as sent; `cache_n` falls back to
    /// `usage.prompt_tokens_details.cached_tokens` from the same frame.
    pub timings: Timings,
    /// The last non-null `choices[].finish_reason` of a stream, or
    /// `choices[0].finish_reason` of a non-stream body.
    pub finish_reason: Option<FinishReason>,
    /// The upstream reported a failure inside a 2xx body. See
    /// `observe/mod.rs` for the exact shapes.
    pub inband_error: bool,
    /// A `data: [DONE]` line was seen.
    pub saw_done: bool,
    /// Some line or the JSON body exceeded the inspection limit, so whatever
    /// it carried is missing from the fields above.
    pub accounting_unavailable: bool,
}

/// The counts in `usage`.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
}

/// The llama.cpp-style `timings` object.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Timings {
    pub prompt_n: Option<u64>,
    pub cache_n: Option<u64>,
    pub predicted_n: Option<u64>,
    pub prompt_ms: Option<f64>,
    pub predicted_ms: Option<f64>,
    pub prompt_per_second: Option<f64>,
    pub predicted_per_second: Option<f64>,
}

impl Observed {
    /// Folds one frame's usage and timings in.
    ///
    /// Each field takes the value from the last frame that reported it, so a
    /// backend that sends usage and timings in separate frames, or repeats
    /// cumulative usage on every chunk, still ends with its final numbers;
    /// a frame that omits a field does not erase an earlier report.
    pub(super) fn absorb_accounting(&mut self, u: &Usage, t: &Timings) {
        fn take<T: Copy>(slot: &mut Option<T>, reported: Option<T>) {
            if reported.is_some() {
                *slot = reported;
            }
        }
        let usage = &mut self.usage;
        take(&mut usage.prompt_tokens, u.prompt_tokens);
        take(&mut usage.completion_tokens, u.completion_tokens);
        take(&mut usage.reasoning_tokens, u.reasoning_tokens);
        take(&mut usage.cached_tokens, u.cached_tokens);
        let timings = &mut self.timings;
        // The engine's own count wins over the OpenAI-style field only
        // within one frame; across frames the later report wins as usual.
        take(&mut timings.cache_n, t.cache_n.or(u.cached_tokens));
        take(&mut timings.prompt_n, t.prompt_n);
        take(&mut timings.predicted_n, t.predicted_n);
        take(&mut timings.prompt_ms, t.prompt_ms);
        take(&mut timings.predicted_ms, t.predicted_ms);
        take(&mut timings.prompt_per_second, t.prompt_per_second);
        take(&mut timings.predicted_per_second, t.predicted_per_second);
    }

    /// The decode rate /metrics shows for a streamed request, in tokens/s:
    /// the `completion_tokens - 1` tokens that followed the first generated
    /// delta, over the time from the first to the last generated delta.
    ///
    /// `None` when the upstream omitted completion usage (the rate would be
    /// a guess), when fewer than two tokens were generated, or when no time
    /// passed between the first and last delta.
    pub fn decode_rate(&self) -> Option<f64> {
        let tokens = self
            .usage
            .completion_tokens?
            .checked_sub(1)
            .filter(|&n| n > 0)?;
        let (first, last) = (self.first_token_at?, self.last_token_at?);
        let secs = last.checked_duration_since(first)?.as_secs_f64();
        (secs > 0.0).then(|| tokens as f64 / secs)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn finish_reason_round_trips_and_unknown_is_other() {
        for s in [
            "stop",
            "length",
            "tool_calls",
            "function_call",
            "content_filter",
        ] {
            assert_eq!(FinishReason::from_wire(s).as_str(), s);
        }
        for s in ["cancel", "eos", "", "STOP", "other"] {
            assert_eq!(FinishReason::from_wire(s), FinishReason::Other);
        }
        assert_eq!(FinishReason::Other.as_str(), "other");
    }

    #[test]
    fn decode_rate_needs_completion_usage_and_a_time_span() {
        let t0 = Instant::now();
        let streamed = Observed {
            usage: Usage {
                completion_tokens: Some(11),
                ..Usage::default()
            },
            first_token_at: Some(t0),
            last_token_at: Some(t0 + Duration::from_millis(500)),
            ..Observed::default()
        };
        assert_eq!(streamed.decode_rate(), Some(20.0));
        // The stream omitted usage: no rate, however many deltas arrived.
        let no_usage = Observed {
            usage: Usage::default(),
            ..streamed.clone()
        };
        assert_eq!(no_usage.decode_rate(), None);
        let one_token = Observed {
            usage: Usage {
                completion_tokens: Some(1),
                ..Usage::default()
            },
            ..streamed.clone()
        };
        assert_eq!(one_token.decode_rate(), None);
        let no_span = Observed {
            last_token_at: Some(t0),
            ..streamed
        };
        assert_eq!(no_span.decode_rate(), None);
    }
}
