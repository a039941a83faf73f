//! What observing a stream costs the forwarding path.
//!
//! Builds a ~10 MB Strata-like SSE body in memory, cuts it into 16 KiB
//! chunks (a typical socket read), and times a bare forwarding loop against
//! the same loop that also feeds [`ResponseObserver`]. Prints the median of
//! several runs; no assertions, since timing depends on the machine.
//!
//! Run with `cargo bench -p strata-proxy --bench observer`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use strata_proxy::observe::{BodyKind, ResponseObserver};

const TARGET_BYTES: usize = 10 * 1024 * 1024;
const CHUNK: usize = 16 * 1024;
const RUNS: usize = 15;

fn main() {
    let body = strata_like_stream();
    let chunks: Vec<&[u8]> = body.chunks(CHUNK).collect();
    let frames = body.windows(6).filter(|w| w == b"data: ").count();
    println!(
        "observer bench: {:.1} MB, {} chunks of {} KiB, {} data frames, median of {RUNS} runs",
        body.len() as f64 / 1e6,
        chunks.len(),
        CHUNK / 1024,
        frames,
    );

    // The observer must see the fixture as intended, or the numbers lie.
    let mut check = ResponseObserver::new(BodyKind::Sse);
    for c in &chunks {
        check.observe(c, Instant::now());
    }
    let seen = check.finish();
    assert!(
        seen.saw_done && seen.usage.completion_tokens.is_some() && seen.first_token_at.is_some()
    );
    assert!(!seen.inband_error && !seen.accounting_unavailable);

    let mut sink = Vec::with_capacity(CHUNK);
    let forward = median(|| {
        let mut total = 0u64;
        for c in &chunks {
            // Stand-in for handing the chunk to hyper.
            sink.clear();
            sink.extend_from_slice(black_box(c));
            total += sink.len() as u64;
        }
        black_box(total);
    });
    let observed = median(|| {
        let mut total = 0u64;
        let mut obs = ResponseObserver::new(BodyKind::Sse);
        for c in &chunks {
            sink.clear();
            sink.extend_from_slice(black_box(c));
            total += sink.len() as u64;
            obs.observe(c, Instant::now());
        }
        black_box(obs.finish());
        black_box(total);
    });

    let report = |name: &str, d: Duration| {
        let secs = d.as_secs_f64();
        println!(
            "{name:>22}: {:>9.1} MB/s  {:>9.0} ns/chunk  {:>7.1} ns/frame",
            body.len() as f64 / 1e6 / secs,
            secs * 1e9 / chunks.len() as f64,
            secs * 1e9 / frames as f64,
        );
    };
    report("forward only", forward);
    report("forward + observe", observed);
    let overhead = (observed.as_secs_f64() / forward.as_secs_f64() - 1.0) * 100.0;
    println!(
        "{:>22}: {overhead:.0}% ({:.2} ms per 10 MB stream)",
        "observer overhead",
        (observed - forward.min(observed)).as_secs_f64() * 1e3 * TARGET_BYTES as f64
            / body.len() as f64,
    );
}

fn median(mut run: impl FnMut()) -> Duration {
    run(); // warm caches and the allocator
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

/// A long Strata answer: role frame, reasoning, content with escapes and
/// multi-byte text, a streamed tool call, keep-alives, the final usage +
/// timings frame and `[DONE]`.
fn strata_like_stream() -> Vec<u8> {
    const HEAD: &str = r#""id":"chatcmpl-0123456789abcdef01234567","object":"chat.completion.chunk","created":1767225600,"model":"qwen3.8-flash-next-gsq-rco-iq3_xxs""#;
    let frame = |delta: &str, finish: &str, extra: &str| {
        format!(
            "data: {{{HEAD},\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]{extra}}}\n\n"
        )
    };
    // Token-sized pieces, some with JSON escapes and multi-byte text.
    let pieces: Vec<&str> = concat!(
        " the| weather| in| Zürich| is| mild|,\\n| about| 12| °C| —| \\\"partly|",
        " cloudy\\\"| 気温| and| wind|.|\\n\\n| Let| me| check| the| forecast| API| first"
    )
    .split('|')
    .collect();
    let mut out = frame(r#"{"role":"assistant","content":""}"#, "null", "");
    let mut n = 0usize;
    while out.len() < TARGET_BYTES {
        let piece = pieces[n % pieces.len()];
        let delta = match n % 7 {
            // Reasoning first, then content; a tool call's argument stream
            // now and then.
            0 | 1 if n < TARGET_BYTES / 1000 => format!(r#"{{"reasoning_content":"{piece}"}}"#),
            5 if n.is_multiple_of(3) => {
                format!(
                    r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":"{{\"q\": \"{piece}\"}}"}}}}]}}"#
                )
            }
            _ => format!(r#"{{"content":"{piece}"}}"#),
        };
        out += &frame(&delta, "null", "");
        if n % 500 == 499 {
            out += ": keep-alive\n\n";
        }
        n += 1;
    }
    out += &frame(
        "{}",
        r#""stop""#,
        &format!(
            r#","usage":{{"prompt_tokens":4096,"completion_tokens":{n},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":4000}}}},"timings":{{"cache_n":4000,"prompt_n":96,"prompt_ms":80.5,"prompt_per_token_ms":0.84,"prompt_per_second":1192.5,"predicted_n":{n},"predicted_ms":{}.5,"predicted_per_token_ms":20.0,"predicted_per_second":49.9}}"#,
            n + 4096,
            n * 20,
        ),
    );
    out += "data: [DONE]\n\n";
    out.into_bytes()
}
