//! End-to-end tests of [`ResponseObserver`] on whole bodies: Strata's real
//! frame sequence under every kind of chunking, compatible-backend fixtures,
//! errors, limits and the non-stream path.

use std::time::{Duration, Instant};

use super::*;

const ID: &str = r#""id":"chatcmpl-0123456789abcdef01234567","object":"chat.completion.chunk","created":1767225600,"model":"qwen3.8-flash""#;

/// One Strata chunk frame with the given delta and finish reason.
fn chunk(delta: &str, finish: &str, extra: &str) -> String {
    format!(
        "data: {{{ID},\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]{extra}}}\n\n"
    )
}

/// Strata's stream for a reasoning + content + tool-call answer, in the
/// order and spelling of `openai_chunks`, with the generated frames marked.
fn strata_frames() -> Vec<(String, bool)> {
    let usage = r#","usage":{"prompt_tokens":1200,"completion_tokens":57,"total_tokens":1257,"prompt_tokens_details":{"cached_tokens":1024}},"timings":{"cache_n":1024,"prompt_n":176,"prompt_ms":123.456,"prompt_per_token_ms":0.7014,"prompt_per_second":1425.61,"predicted_n":57,"predicted_ms":1140.5,"predicted_per_token_ms":20.0088,"predicted_per_second":49.978}"#;
    vec![
        (
            chunk(r#"{"role":"assistant","content":""}"#, "null", ""),
            false,
        ),
        (": keep-alive\n\n".into(), false),
        (
            chunk(r#"{"reasoning_content":"The user wants"}"#, "null", ""),
            true,
        ),
        (
            chunk(
                r#"{"reasoning_content":" the weather in Zürich — 気温."}"#,
                "null",
                "",
            ),
            true,
        ),
        (": keep-alive\n\n".into(), false),
        (chunk(r#"{"content":"Let me check.\n"}"#, "null", ""), true),
        (chunk(r#"{"content":"🌦️"}"#, "null", ""), true),
        (
            chunk(
                r#"{"tool_calls":[{"index":0,"id":"call_0123456789abcdef","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
                "null",
                "",
            ),
            true,
        ),
        (": keep-alive\n\n".into(), false),
        (
            chunk(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\": "}}]}"#,
                "null",
                "",
            ),
            true,
        ),
        (
            chunk(
                r#"{"tool_calls":[{"index":0,"function":{"arguments":"\"Zürich\"}"}}]}"#,
                "null",
                "",
            ),
            true,
        ),
        (chunk("{}", r#""tool_calls""#, usage), false),
        ("data: [DONE]\n\n".into(), false),
    ]
}

struct Fixture {
    body: Vec<u8>,
    /// Offsets of the `\n` ending the first and the last generated line.
    first_nl: usize,
    last_nl: usize,
}

fn strata_fixture() -> Fixture {
    let mut body = Vec::new();
    let (mut first_nl, mut last_nl) = (None, 0);
    for (frame, generated) in strata_frames() {
        if generated {
            // The data line's own `\n`, before the blank line's.
            let nl = body.len() + frame.find('\n').unwrap();
            first_nl.get_or_insert(nl);
            last_nl = nl;
        }
        body.extend_from_slice(frame.as_bytes());
    }
    Fixture {
        body,
        first_nl: first_nl.unwrap(),
        last_nl,
    }
}

/// Feeds `body` cut at `cuts` (increasing offsets); chunk `k` is forwarded
/// at `t0 + k ms`. Returns what was observed and the instant of the chunk
/// that contains each byte offset.
fn run(
    kind: BodyKind,
    body: &[u8],
    cuts: &[usize],
    t0: Instant,
) -> (Observed, impl Fn(usize) -> Instant) {
    let mut obs = ResponseObserver::new(kind);
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(body.len());
    for (k, w) in bounds.windows(2).enumerate() {
        obs.observe(&body[w[0]..w[1]], t0 + Duration::from_millis(k as u64));
    }
    let at = move |offset: usize| {
        let k = bounds
            .windows(2)
            .position(|w| w[0] <= offset && offset < w[1])
            .unwrap();
        t0 + Duration::from_millis(k as u64)
    };
    (obs.finish(), at)
}

fn whole(kind: BodyKind, body: &[u8]) -> Observed {
    run(kind, body, &[], Instant::now()).0
}

/// What the Strata fixture must yield, given when its first and last
/// generated lines arrived.
fn strata_expected(f: &Fixture, first: Instant, last: Instant) -> Observed {
    Observed {
        response_bytes: f.body.len() as u64,
        first_token_at: Some(first),
        last_token_at: Some(last),
        usage: Usage {
            prompt_tokens: Some(1200),
            completion_tokens: Some(57),
            reasoning_tokens: None,
            cached_tokens: Some(1024),
        },
        timings: Timings {
            prompt_n: Some(176),
            cache_n: Some(1024),
            predicted_n: Some(57),
            prompt_ms: Some(123.456),
            predicted_ms: Some(1140.5),
            prompt_per_second: Some(1425.61),
            predicted_per_second: Some(49.978),
        },
        finish_reason: Some(FinishReason::ToolCalls),
        inband_error: false,
        saw_done: true,
        accounting_unavailable: false,
    }
}

/// Checks one chunking of the Strata fixture, token instants included.
fn check_strata(f: &Fixture, cuts: &[usize]) {
    let t0 = Instant::now();
    let (got, at) = run(BodyKind::Sse, &f.body, cuts, t0);
    let want = strata_expected(f, at(f.first_nl), at(f.last_nl));
    assert_eq!(got, want, "cuts {cuts:?}");
}

#[test]
fn strata_stream_whole() {
    let f = strata_fixture();
    check_strata(&f, &[]);
    // Sanity: the fixture really has multi-byte characters to split.
    assert!(f.body.len() > std::str::from_utf8(&f.body).unwrap().chars().count());
}

#[test]
fn strata_stream_one_byte_per_chunk() {
    let f = strata_fixture();
    let cuts: Vec<usize> = (1..f.body.len()).collect();
    check_strata(&f, &cuts);
}

#[test]
fn strata_stream_every_two_way_split() {
    let f = strata_fixture();
    for cut in 1..f.body.len() {
        check_strata(&f, &[cut]);
    }
}

#[test]
fn strata_stream_random_chunkings() {
    let f = strata_fixture();
    // xorshift64*, fixed seed: reproducible without a rand crate.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    for round in 0..500u32 {
        // Mostly small chunks, sometimes large ones, like a real socket.
        let max = if round.is_multiple_of(5) { 512 } else { 48 };
        let mut cuts = Vec::new();
        let mut at = 0;
        loop {
            at += 1 + (next() % max) as usize;
            if at >= f.body.len() {
                break;
            }
            cuts.push(at);
        }
        check_strata(&f, &cuts);
    }
}

#[test]
fn token_instants_follow_line_completion() {
    // The first generated line completes in the second chunk, though it
    // started in the first; the usage frame after it does not move the
    // last instant.
    let content = chunk(r#"{"content":"Hi"}"#, "null", "");
    let body = format!(
        "{}{content}{}",
        chunk(r#"{"role":"assistant"}"#, "null", ""),
        chunk("{}", r#""stop""#, "")
    );
    let split = body.find("Hi").unwrap();
    let t0 = Instant::now();
    let (got, _) = run(BodyKind::Sse, body.as_bytes(), &[split], t0);
    assert_eq!(got.first_token_at, Some(t0 + Duration::from_millis(1)));
    assert_eq!(got.last_token_at, got.first_token_at);
    assert_eq!(got.finish_reason, Some(FinishReason::Stop));
}

#[test]
fn heartbeats_role_and_usage_only_frames_are_not_tokens() {
    let body = [
        ": keep-alive\n\n".to_string(),
        chunk(r#"{"role":"assistant","content":""}"#, "null", ""),
        chunk("{}", "null", r#","prompt_progress":{"total":10,"cache":0,"processed":5,"time_ms":3}"#),
        format!("data: {{{ID},\"choices\":[],\"usage\":{{\"prompt_tokens\":3,\"completion_tokens\":0}}}}\n\n"),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert_eq!(got.first_token_at, None);
    assert_eq!(got.last_token_at, None);
    assert_eq!(got.usage.completion_tokens, Some(0));
    assert!(got.saw_done && !got.inband_error);
}

fn final_frame(usage_and_timings: &str) -> Observed {
    let body = chunk("{}", r#""stop""#, usage_and_timings);
    whole(BodyKind::Sse, body.as_bytes())
}

#[test]
fn cache_n_precedence() {
    let both = final_frame(
        r#","usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":4}},"timings":{"cache_n":6}"#,
    );
    assert_eq!(both.timings.cache_n, Some(6));
    let cached_only =
        final_frame(r#","usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}"#);
    assert_eq!(cached_only.timings.cache_n, Some(4));
    let timings_only = final_frame(r#","timings":{"cache_n":6,"prompt_n":4}"#);
    assert_eq!(timings_only.timings.cache_n, Some(6));
    let neither = final_frame(r#","usage":{"prompt_tokens":10},"timings":{"prompt_n":10}"#);
    assert_eq!(neither.timings.cache_n, None);
    // Across frames the later report wins; a frame without one keeps it.
    let body = [
        chunk("{}", "null", r#","timings":{"cache_n":6}"#),
        chunk(
            "{}",
            "null",
            r#","usage":{"prompt_tokens_details":{"cached_tokens":4}}"#,
        ),
        chunk("{}", r#""stop""#, r#","usage":{"prompt_tokens":10}"#),
    ]
    .concat();
    assert_eq!(
        whole(BodyKind::Sse, body.as_bytes()).timings.cache_n,
        Some(4)
    );
}

#[test]
fn reasoning_tokens_from_a_compatible_backend() {
    // vLLM/OpenAI style: reasoning streamed as `reasoning`, usage in a
    // trailing choices-less frame (stream_options.include_usage).
    let body = [
        chunk(r#"{"role":"assistant","content":null}"#, "null", ""),
        chunk(r#"{"reasoning":"Thinking"}"#, "null", ""),
        chunk(r#"{"content":"42"}"#, "null", ""),
        chunk("{}", r#""stop""#, ""),
        format!(
            "data: {{{ID},\"choices\":[],\"usage\":{{\"prompt_tokens\":20,\"completion_tokens\":35,\"total_tokens\":55,\"completion_tokens_details\":{{\"reasoning_tokens\":30}},\"prompt_tokens_details\":null}}}}\n\n"
        ),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert_eq!(got.usage.reasoning_tokens, Some(30));
    assert_eq!(
        (got.usage.prompt_tokens, got.usage.completion_tokens),
        (Some(20), Some(35))
    );
    assert_eq!(got.timings.cache_n, None);
    assert_eq!(got.timings.prompt_n, None);
    assert!(got.first_token_at.is_some());
    // A backend that flattens it into usage.
    let flat = final_frame(r#","usage":{"completion_tokens":9,"reasoning_tokens":7}"#);
    assert_eq!(flat.usage.reasoning_tokens, Some(7));
    // Strata itself sends none: null, not zero.
    assert_eq!(
        whole(BodyKind::Sse, &strata_fixture().body)
            .usage
            .reasoning_tokens,
        None
    );
}

#[test]
fn inband_error_event_with_data() {
    let body = "event: error\ndata: {\"error\":{\"type\":\"server_error\",\"message\":\"engine died\",\"status\":503}}\n\n";
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert!(got.inband_error);
    assert!(!got.saw_done);
    // An error event needs no data, and `event:` without a space counts.
    assert!(whole(BodyKind::Sse, b"event:error\n\ndata: [DONE]\n\n").inband_error);
    assert!(whole(BodyKind::Sse, b"event: response.failed\n\n").inband_error);
}

#[test]
fn error_event_data_is_not_a_chunk_and_the_event_ends_with_the_frame() {
    let error_frame = format!(
        "event: error\n{}",
        chunk(
            r#"{"content":"x"}"#,
            r#""stop""#,
            r#","usage":{"completion_tokens":1}"#
        )
    );
    let got = whole(BodyKind::Sse, error_frame.as_bytes());
    assert!(got.inband_error);
    assert_eq!(
        (
            got.first_token_at,
            got.finish_reason,
            got.usage.completion_tokens
        ),
        (None, None, None)
    );
    // After the blank line, data is a plain chunk again.
    let body = format!(
        "event: ping\ndata: {{}}\n\n{}",
        chunk(r#"{"content":"x"}"#, "null", "")
    );
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert!(got.first_token_at.is_some() && !got.inband_error);
}

#[test]
fn inband_error_data_only() {
    let body = [
        chunk(r#"{"content":"partial"}"#, "null", ""),
        "data: {\"error\":{\"message\":\"upstream failed\",\"type\":\"server_error\",\"code\":\"internal\"}}\n\n".into(),
    ]
    .concat();
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert!(got.inband_error);
    assert!(got.first_token_at.is_some());
    assert!(!got.saw_done);
}

#[test]
fn strata_mid_stream_error_then_done() {
    let body = [
        chunk(r#"{"role":"assistant","content":""}"#, "null", ""),
        chunk(r#"{"content":"Hel"}"#, "null", ""),
        "data: {\"error\":{\"type\":\"server_error\",\"message\":\"the engine died; the next request restarts it\"}}\n\n".into(),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let got = whole(BodyKind::Sse, body.as_bytes());
    assert!(got.inband_error && got.saw_done);
    // No usage frame follows an error, so no decode rate either.
    assert_eq!(got.usage.completion_tokens, None);
    assert_eq!(got.decode_rate(), None);
    assert_eq!(got.finish_reason, None);
}

#[test]
fn other_cliproxyapi_failures() {
    for body in [
        // Not JSON after `data:`.
        &b"data: {\"choices\":[\n\n"[..],
        b"data: oops\n\n",
        // A bare JSON line without `data:`.
        b"{\"error\":{\"message\":\"x\"}}\n",
        // A final line cut short at EOF.
        b"data: {\"choices\":[{\"delta\":{\"content\":\"x",
        // Responses-API shaped errors.
        b"data: {\"type\":\"error\",\"code\":\"x\",\"message\":\"y\",\"sequence_number\":1}\n\n",
        b"data: {\"response\":{\"error\":{\"code\":\"x\"}}}\n\n",
    ] {
        let got = whole(BodyKind::Sse, body);
        assert!(got.inband_error, "{}", String::from_utf8_lossy(body));
    }
    // `error: null` and an empty data field are fine.
    let body = [
        chunk(r#"{"content":"x"}"#, "null", r#","error":null"#),
        "data:\n\ndata: \n\n".into(),
    ]
    .concat();
    assert!(!whole(BodyKind::Sse, body.as_bytes()).inband_error);
}

#[test]
fn missing_usage_leaves_counts_and_decode_rate_null() {
    let body = [
        chunk(r#"{"content":"a"}"#, "null", ""),
        chunk(r#"{"content":"b"}"#, "null", ""),
        chunk("{}", r#""stop""#, ""),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let (got, _) = run(
        BodyKind::Sse,
        body.as_bytes(),
        &[body.find("\"b\"").unwrap()],
        Instant::now(),
    );
    assert_ne!(got.first_token_at, got.last_token_at);
    assert_eq!(
        (got.usage.prompt_tokens, got.usage.completion_tokens),
        (None, None)
    );
    assert_eq!(got.decode_rate(), None);
    assert_eq!(got.timings.predicted_per_second, None);
}

#[test]
fn finish_reason_mapping() {
    for (wire, want) in [
        (r#""stop""#, Some(FinishReason::Stop)),
        (r#""length""#, Some(FinishReason::Length)),
        (r#""tool_calls""#, Some(FinishReason::ToolCalls)),
        (r#""function_call""#, Some(FinishReason::FunctionCall)),
        (r#""content_filter""#, Some(FinishReason::ContentFilter)),
        (r#""cancelled_by_loop_guard""#, Some(FinishReason::Other)),
        ("null", None),
    ] {
        let got = whole(BodyKind::Sse, chunk("{}", wire, "").as_bytes());
        assert_eq!(got.finish_reason, want, "{wire}");
    }
    // The last non-null one wins across frames.
    let body = [chunk("{}", r#""length""#, ""), chunk("{}", "null", "")].concat();
    assert_eq!(
        whole(BodyKind::Sse, body.as_bytes()).finish_reason,
        Some(FinishReason::Length)
    );
}

#[test]
fn oversized_line_is_skipped_and_later_frames_still_count() {
    let huge = "x".repeat(MAX_INSPECT_BYTES + 10);
    let body = [
        chunk(r#"{"content":"a"}"#, "null", ""),
        chunk(
            &format!(r#"{{"content":"{huge}"}}"#),
            "null",
            r#","usage":{"completion_tokens":999}"#,
        ),
        chunk(r#"{"content":"b"}"#, "null", ""),
        chunk(
            "{}",
            r#""stop""#,
            r#","usage":{"prompt_tokens":5,"completion_tokens":3}"#,
        ),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let b = body.as_bytes();
    let big_start = body.find(&huge).unwrap();
    for cuts in [
        vec![],
        vec![big_start + 5],
        (1..b.len()).step_by(16 * 1024).collect::<Vec<_>>(),
    ] {
        let t0 = Instant::now();
        let (got, at) = run(BodyKind::Sse, b, &cuts, t0);
        assert!(got.accounting_unavailable);
        assert_eq!(got.response_bytes, b.len() as u64);
        assert_eq!(got.usage.completion_tokens, Some(3));
        assert_eq!(got.finish_reason, Some(FinishReason::Stop));
        assert!(got.saw_done && !got.inband_error);
        let last_nl = body.find(r#""b"}"#).unwrap()
            + body[body.find(r#""b"}"#).unwrap()..].find('\n').unwrap();
        assert_eq!(got.last_token_at, Some(at(last_nl)));
    }
}

#[test]
fn line_endings_and_field_spelling() {
    let lf = [
        ": keep-alive\n\n".to_string(),
        chunk(r#"{"content":"a"}"#, "null", ""),
        chunk(
            "{}",
            r#""length""#,
            r#","usage":{"prompt_tokens":2,"completion_tokens":1}"#,
        ),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let want = whole(BodyKind::Sse, lf.as_bytes());
    assert!(want.first_token_at.is_some());
    let crlf = lf.replace('\n', "\r\n");
    let nospace = lf.replace("data: ", "data:");
    for variant in [crlf, nospace] {
        let b = variant.as_bytes();
        let t0 = Instant::now();
        for cut in 1..b.len() {
            let (got, _) = run(BodyKind::Sse, b, &[cut], t0);
            let want = Observed {
                response_bytes: b.len() as u64,
                first_token_at: got.first_token_at,
                last_token_at: got.last_token_at,
                ..want.clone()
            };
            assert_eq!(got, want, "cut {cut} of {variant:?}");
            assert!(got.first_token_at.is_some());
        }
    }
}

#[test]
fn utf8_split_inside_a_character() {
    let body = chunk(r#"{"content":"€"}"#, "null", "");
    let b = body.as_bytes();
    let euro = body.find('€').unwrap();
    for cut in euro + 1..euro + 3 {
        assert!(!body.is_char_boundary(cut));
        let t0 = Instant::now();
        let (got, _) = run(BodyKind::Sse, b, &[cut], t0);
        assert_eq!(got.first_token_at, Some(t0 + Duration::from_millis(1)));
        assert!(!got.inband_error);
    }
}

#[test]
fn nonstream_json_with_usage_and_timings() {
    let body = r#"{"id":"chatcmpl-0123456789abcdef01234567","object":"chat.completion","created":1767225600,"model":"qwen3.8-flash","choices":[{"index":0,"message":{"role":"assistant","content":"It is 12 °C.","reasoning_content":"…"},"finish_reason":"length"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":8}},"timings":{"cache_n":64,"prompt_n":36,"prompt_ms":50.25,"prompt_per_token_ms":1.39,"prompt_per_second":716.4,"predicted_n":20,"predicted_ms":400.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}"#;
    let b = body.as_bytes();
    for cut in [0, 1, b.len() / 2, b.len() - 1] {
        let (got, _) = run(BodyKind::Json, b, &[cut], Instant::now());
        assert_eq!(
            got,
            Observed {
                response_bytes: b.len() as u64,
                usage: Usage {
                    prompt_tokens: Some(100),
                    completion_tokens: Some(20),
                    reasoning_tokens: Some(8),
                    cached_tokens: Some(64),
                },
                timings: Timings {
                    prompt_n: Some(36),
                    cache_n: Some(64),
                    predicted_n: Some(20),
                    prompt_ms: Some(50.25),
                    predicted_ms: Some(400.0),
                    prompt_per_second: Some(716.4),
                    predicted_per_second: Some(50.0),
                },
                finish_reason: Some(FinishReason::Length),
                ..Observed::default()
            }
        );
    }
}

#[test]
fn nonstream_json_with_error() {
    let got = whole(
        BodyKind::Json,
        br#"{"error":{"type":"server_error","message":"engine stuck"}}"#,
    );
    assert!(got.inband_error);
    assert_eq!(got.finish_reason, None);
    assert!(
        whole(
            BodyKind::Json,
            br#"{"id":"x","choices":[{"index":0,"finish_reason":"stop""#
        )
        .inband_error
    );
    assert!(!whole(BodyKind::Json, br#"{"error":null,"choices":[]}"#).inband_error);
    assert!(!whole(BodyKind::Json, b"").inband_error);
}

#[test]
fn oversized_json_body_counts_bytes_only() {
    let pad = "x".repeat(MAX_INSPECT_BYTES);
    let body = format!(
        r#"{{"choices":[{{"message":{{"content":"{pad}"}},"finish_reason":"stop"}}],"usage":{{"completion_tokens":5}}}}"#
    );
    let b = body.as_bytes();
    let (got, _) = run(BodyKind::Json, b, &[1000, 200_000], Instant::now());
    assert_eq!(
        got,
        Observed {
            response_bytes: b.len() as u64,
            accounting_unavailable: true,
            ..Observed::default()
        }
    );
    // Exactly at the limit is still read.
    let mut exact = r#"{"usage":{"completion_tokens":5}}"#.to_string();
    exact.extend(std::iter::repeat_n(' ', MAX_INSPECT_BYTES - exact.len()));
    let got = whole(BodyKind::Json, exact.as_bytes());
    assert_eq!(
        (got.usage.completion_tokens, got.accounting_unavailable),
        (Some(5), false)
    );
}

#[test]
fn other_bodies_only_count_bytes() {
    let body = chunk(
        r#"{"content":"a"}"#,
        r#""stop""#,
        r#","usage":{"completion_tokens":1}"#,
    );
    let (got, _) = run(BodyKind::Other, body.as_bytes(), &[3, 9], Instant::now());
    assert_eq!(
        got,
        Observed {
            response_bytes: body.len() as u64,
            ..Observed::default()
        }
    );
    assert_eq!(whole(BodyKind::Sse, b"").response_bytes, 0);
}

#[test]
fn the_body_kind_comes_from_the_content_type() {
    use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
    for (content_type, kind) in [
        (Some("text/event-stream"), BodyKind::Sse),
        (Some("Text/Event-Stream; charset=utf-8"), BodyKind::Sse),
        (Some("application/json"), BodyKind::Json),
        (Some("APPLICATION/JSON;charset=UTF-8"), BodyKind::Json),
        (Some("text/plain"), BodyKind::Other),
        (None, BodyKind::Other),
    ] {
        let mut headers = HeaderMap::new();
        if let Some(value) = content_type {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
        }
        assert_eq!(BodyKind::from_headers(&headers), kind, "{content_type:?}");
    }
}
