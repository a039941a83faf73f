//! `GET /metrics` against live traffic: the loaded model, in-flight and
//! queued counts (by tier), the body limit, the last streamed request's
//! TTFT and decode rate, and the same figures in Prometheus text.

use serde_json::{Value, json};
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{A3B, ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";
const B: &str = "a3b-b";

fn config(tag: &str) -> strata_e2e::TestConfig {
    ConfigBuilder::new(tag)
        .model(
            ModelSpec::new(A)
                .fake("token_delay_ms", 150)
                .fake("tokens", 6),
        )
        .model(ModelSpec::new(B).family(A3B))
        .wait_when_busy(true)
        .set("max_request_body_bytes", 123_456)
        .build()
}

fn tiers(metrics: &Value) -> Value {
    metrics["queue_depth_by_tier"].clone()
}

#[test]
fn metrics_follow_a_stream_and_a_queued_priority_request() {
    let stack = Stack::start(config("metrics"));
    let idle = stack.metrics();
    assert_eq!(idle["in_flight"], 0, "{idle}");
    assert_eq!(idle["queue_depth"], 0, "{idle}");
    assert_eq!(
        tiers(&idle),
        json!({"priority": 0, "default": 0, "flex": 0}),
        "{idle}"
    );
    assert_eq!(idle["max_request_body_bytes"], 123_456);
    assert_eq!(idle["supervisor_connected"], true);
    assert_eq!(idle["routing"], true);
    assert!(idle["loaded_model"].is_null(), "{idle}");
    assert!(idle["last_stream_ttft_ms"].is_null(), "{idle}");
    assert!(
        idle["last_stream_decode_tokens_per_second"].is_null(),
        "{idle}"
    );

    // A slow stream on A holds its lease: one request in flight.
    let mut stream_a = stack.open_chat(&chat_body(A, true));
    poll_until(DEADLINE, "A in flight and loaded", || {
        let m = stack.metrics();
        m["in_flight"] == 1 && m["loaded_model"] == A
    });

    // A priority request for B must wait for A's lease: queued, by tier.
    let mut body_b = chat_body(B, true);
    body_b["service_tier"] = json!("priority");
    // Written raw: a held wait-first stream gets its headers only with its first data.
    let conn_b = http::send_chat(stack.addr(), &body_b);
    poll_until(DEADLINE, "B queued as priority", || {
        let m = stack.metrics();
        m["queue_depth"] == 1 && tiers(&m)["priority"] == 1 && tiers(&m)["default"] == 0
    });

    let frames_a = stream_a.remaining_frames(DEADLINE);
    assert!(frames_a.iter().any(|f| f.is_done()), "A completed");
    let mut stream_b = conn_b.into_stream(DEADLINE);
    let frames_b = stream_b.remaining_frames(DEADLINE);
    assert!(frames_b.iter().any(|f| f.is_done()), "B completed");
    poll_until(DEADLINE, "nothing in flight or queued", || {
        let m = stack.metrics();
        m["in_flight"] == 0 && m["queue_depth"] == 0 && m["loaded_model"] == B
    });

    // The last streamed request was B (five tokens without a delay), and
    // A before it had six tokens 150 ms apart; the figures are B's.
    let done = stack.metrics();
    let ttft = done["last_stream_ttft_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("ttft after a stream: {done}"));
    assert!(ttft > 0, "B waited for A and a load: {done}");
    assert!(
        done["last_stream_decode_tokens_per_second"].is_number()
            || done["last_stream_decode_tokens_per_second"].is_null(),
        "{done}"
    );
    stack.stop();
}

#[test]
fn a_paced_stream_reports_its_decode_rate() {
    let stack = Stack::start(config("decode"));
    let mut stream = stack.open_chat(&chat_body(A, true));
    let frames = stream.remaining_frames(DEADLINE);
    assert!(frames.iter().any(|f| f.is_done()));
    poll_until(DEADLINE, "last stream figures", || {
        stack.metrics()["last_stream_ttft_ms"].is_u64()
    });
    let metrics = stack.metrics();
    // Six tokens 150 ms apart: five intervals over about 750 ms, so about
    // 6.7 tokens per second; allow for a slow machine on either side.
    let rate = metrics["last_stream_decode_tokens_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("decode rate: {metrics}"));
    assert!((2.0..=20.0).contains(&rate), "rate {rate}: {metrics}");
    stack.stop();
}

#[test]
fn prometheus_text_has_the_same_figures() {
    let stack = Stack::start(config("prom"));
    for (path, headers) in [
        ("/metrics?format=prometheus", vec![]),
        ("/metrics", vec![("Accept", "text/plain")]),
    ] {
        let response = http::request(stack.addr(), "GET", path, &headers, b"");
        response.expect_status(200);
        let content_type = response.header("content-type").unwrap_or_default();
        assert!(content_type.starts_with("text/plain"), "{content_type}");
        let text = response.text();
        for line in [
            "strata_router_in_flight 0",
            "strata_router_queue_depth 0",
            "strata_router_max_request_body_bytes 123456",
            "strata_router_queue_depth_by_tier{tier=\"priority\"} 0",
            "strata_router_queue_depth_by_tier{tier=\"flex\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
    stack.stop();
}
