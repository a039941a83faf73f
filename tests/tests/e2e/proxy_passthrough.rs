//! Passthrough through the real `strata-proxy`: the client gets exactly the bytes the backend
//! sent (JSON and SSE), as they are produced, and a large stream to a slow reader does not grow
//! the proxy's memory.
//!
//! Byte-exact comparisons use the fake's `fixed_ids` request key: the same request sent to the
//! backend directly (its `backend_port`) then answers with the same bytes, so the proxied body
//! can be compared with the backend's own answer byte for byte.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_e2e::http::{self, CHAT_PATH, Conn, Response, chat_body};
use strata_e2e::stack::{Stack, vm_rss_kib};
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, TestConfig, poll_until};

const A: &str = "flash-a";

fn config(tag: &str, wait_first: bool) -> TestConfig {
    ConfigBuilder::new(tag)
        .model(ModelSpec::new(A))
        .wait_when_busy(wait_first)
        .build()
}

fn post_raw_json(addr: std::net::SocketAddr, body: &str) -> Response {
    http::request(
        addr,
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
}

fn assert_same_bytes(what: &str, proxied: &[u8], direct: &[u8]) {
    if proxied != direct {
        let at = proxied
            .iter()
            .zip(direct)
            .position(|(a, b)| a != b)
            .unwrap_or(proxied.len().min(direct.len()));
        let window = |bytes: &[u8]| {
            String::from_utf8_lossy(&bytes[at.saturating_sub(80)..(at + 80).min(bytes.len())])
                .into_owned()
        };
        panic!(
            "{what}: proxied body ({} bytes) differs from the backend's ({} bytes) at byte {at}\nproxied: {:?}\nbackend: {:?}",
            proxied.len(),
            direct.len(),
            window(proxied),
            window(direct)
        );
    }
}

/// The `request` events the fake logged, in order.
fn backend_requests(stack: &Stack) -> Vec<Value> {
    stack.fake_log().events_named("request")
}

/// Sends `client_body` through the proxy and `upstream_body` (what the proxy must forward)
/// straight to the backend; both answers must be byte-identical, and the backend must have
/// received `upstream_body`'s length both times.
fn compare(stack: &Stack, what: &str, client_body: &str, upstream_body: &str) -> Response {
    let proxied = post_raw_json(stack.addr(), client_body);
    assert_eq!(proxied.status, 200, "{what}: {proxied}");
    let before = backend_requests(stack).len();
    let direct = post_raw_json(stack.backend_addr(), upstream_body);
    assert_eq!(direct.status, 200, "{what} (direct): {direct}");
    assert_same_bytes(what, &proxied.body, &direct.body);
    let requests = backend_requests(stack);
    assert_eq!(requests.len(), before + 1, "{what}: {requests:#?}");
    let [.., via_proxy, direct_request] = requests.as_slice() else {
        panic!("{what}: two backend requests expected: {requests:#?}");
    };
    for event in [via_proxy, direct_request] {
        assert_eq!(
            event["body_bytes"],
            json!(upstream_body.len()),
            "{what}: the backend must receive the client's exact body: {event}"
        );
    }
    proxied
}

/// The members of a chat request with unusual but valid JSON values: escapes, non-ASCII text,
/// inner whitespace and numbers whose spelling a re-serializer would change.
fn odd_members(stream: bool) -> Vec<(&'static str, String)> {
    vec![
        ("model", format!("\"{A}\"")),
        (
            "messages",
            "[ {\"role\":\"user\", \"content\":\"Gr\\u00fc\u{df}e \u{2713} \\\"q\\\"\"} ]"
                .to_owned(),
        ),
        ("temperature", "0.70".to_owned()),
        ("top_p", "1e0".to_owned()),
        (
            "fake",
            "{\"fixed_ids\": true, \"reasoning_tokens\": 2, \"tool_call\": true, \"tokens\": 3}"
                .to_owned(),
        ),
        ("stream", stream.to_string()),
    ]
}

/// The members as a client might write them: spaces around colons, newlines between members.
fn spaced(members: &[(&str, String)]) -> String {
    let inner: Vec<String> = members
        .iter()
        .map(|(key, raw)| format!("\"{key}\" : {raw}"))
        .collect();
    format!("{{ {} }}", inner.join(",\n  "))
}

/// The members as the proxy rebuilds an object after removing tier fields: `"name":raw`,
/// comma-separated, each value's text untouched.
fn compact(members: &[(&str, String)]) -> String {
    let inner: Vec<String> = members
        .iter()
        .map(|(key, raw)| format!("\"{key}\":{raw}"))
        .collect();
    format!("{{{}}}", inner.join(","))
}

#[test]
fn json_and_sse_bodies_are_byte_identical_to_the_backends_answer() {
    for wait_first in [false, true] {
        let stack = Stack::start(config("bytes", wait_first));
        let mode = if wait_first { "wait-first" } else { "legacy" };

        // JSON: the body, Content-Type and Content-Length are the backend's.
        let body = spaced(&odd_members(false));
        let response = compare(&stack, &format!("{mode} JSON"), &body, &body);
        assert_eq!(response.header("content-type"), Some("application/json"));
        assert_eq!(
            response.header("content-length"),
            Some(response.body.len().to_string().as_str()),
            "{response}"
        );
        assert_eq!(response.json()["id"], "chatcmpl-000000000000000000000000");

        // SSE.
        let body = spaced(&odd_members(true));
        let response = compare(&stack, &format!("{mode} SSE"), &body, &body);
        assert_eq!(
            response.header("content-type"),
            Some("text/event-stream"),
            "{response}"
        );
        assert_eq!(response.header("cache-control"), Some("no-cache"));
        assert_eq!(response.header("x-accel-buffering"), Some("no"));
        let frames = response.frames();
        assert!(frames.last().is_some_and(http::Frame::is_done));
        assert!(
            frames.iter().all(|frame| !frame.is_comment()),
            "no comments in a fast stream: {frames:#?}"
        );

        // service_tier and speed are removed, and only they: the rest keeps its bytes and
        // order.
        for stream in [false, true] {
            let members = odd_members(stream);
            let mut with_tier = members.clone();
            with_tier.insert(0, ("service_tier", "\"flex\"".to_owned()));
            with_tier.push(("speed", "\"standard\"".to_owned()));
            let client = spaced(&with_tier);
            let upstream = compact(&members);
            let response = compare(
                &stack,
                &format!("{mode} tier fields removed (stream {stream})"),
                &client,
                &upstream,
            );
            assert_eq!(response.header("x-strata-service-tier"), Some("flex"));
        }
        stack.stop();
    }
}

/// A delta with generated text (not the role frame's empty content).
fn is_content_delta(frame: &http::Frame) -> bool {
    frame.is_data()
        && frame.json()["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
}

#[test]
fn sse_frames_reach_the_client_while_the_backend_is_still_generating() {
    for wait_first in [false, true] {
        let stack = Stack::start(config("incr", wait_first));
        let log = stack.fake_log();
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 8, "token_delay_ms": 250});
        let started = Instant::now();
        let mut stream = stack.open_chat(&body);
        assert_eq!(stream.status, 200);
        let first_content =
            stream.frames_until(DEADLINE, "the first content delta", is_content_delta);
        let first_at = started.elapsed();
        assert!(
            log.events_named("response_done").is_empty(),
            "the first delta must arrive before the backend has finished\n{}",
            log.dump()
        );
        assert!(
            log.events_named("request").len() == 1,
            "the backend is generating this request: {}",
            log.dump()
        );
        let mut arrivals = vec![first_at];
        let mut rest = Vec::new();
        while let Some(frame) = stream.next_frame(DEADLINE) {
            if is_content_delta(&frame) {
                arrivals.push(started.elapsed());
            }
            rest.push(frame);
        }
        assert!(rest.last().is_some_and(http::Frame::is_done), "{rest:#?}");
        assert_eq!(arrivals.len(), 8, "{first_content:#?}\n{rest:#?}");
        // Eight deltas 250 ms apart (1.75 s): forwarded one by one, not collected. Arrival is
        // measured when this client reads, so allow for a descheduled reader.
        let spread = arrivals[7] - arrivals[0];
        assert!(
            spread >= Duration::from_millis(700),
            "deltas arrived within {spread:?}: {arrivals:?}"
        );
        poll_until(DEADLINE, "the backend's response_done", || {
            log.events_named("response_done").len() == 1
        });
        stack.stop();
    }
}

/// A ~10 MB stream read slowly by a client with a small, fixed receive buffer: the proxy's
/// resident memory stays near its baseline (backpressure, not an output-sized buffer), and every
/// byte arrives intact.
#[test]
fn ten_megabyte_stream_to_a_slow_reader_keeps_proxy_memory_flat() {
    const TOKENS: u64 = 10_000;
    const CONTENT_BYTES: u64 = 1_000;
    // Far below the stream's size: buffering it would show.
    const GROWTH_LIMIT_KIB: u64 = 6 * 1024;

    let stack = Stack::start(config("bigsse", true));
    let pid = stack.proxy_pid();
    let big = {
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": TOKENS, "content_bytes": CONTENT_BYTES, "fixed_ids": true});
        body.to_string()
    };
    // Warm up: load the model and run one smaller stream through the same code paths.
    {
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 200, "content_bytes": 1000});
        let response = stack.chat(&body);
        assert!(response.frames().last().is_some_and(http::Frame::is_done));
    }
    let baseline = vm_rss_kib(pid).expect("proxy RSS");

    let mut conn = Conn::connect_with_recv_buffer(stack.addr(), 32 * 1024).expect("connect");
    conn.write(&http::request_bytes(
        stack.addr(),
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        big.as_bytes(),
    ))
    .expect("send");
    let mut stream = conn.into_stream(DEADLINE);
    assert_eq!(stream.status, 200);
    stream.set_read_size(16 * 1024);
    let mut peak = baseline;
    let mut reads = 0u64;
    let mut stalled = false;
    let started = Instant::now();
    while let Some(chunk) = stream
        .read_some(16 * 1024, DEADLINE)
        .unwrap_or_else(|err| panic!("after {} bytes: {err}", stream.received_len()))
    {
        assert!(!chunk.is_empty());
        reads += 1;
        if reads.is_multiple_of(16)
            && let Some(rss) = vm_rss_kib(pid)
        {
            peak = peak.max(rss);
        }
        // The client's pacing: a full stop early on (a buffering proxy would take in the whole
        // answer meanwhile), then small reads with pauses.
        if !stalled && stream.received_len() > 256 * 1024 {
            stalled = true;
            std::thread::sleep(Duration::from_millis(1500));
            peak = peak.max(vm_rss_kib(pid).unwrap_or(0));
        } else if reads.is_multiple_of(4) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let elapsed = started.elapsed();
    let received = stream.received().to_vec();
    assert!(
        received.len() as u64 > TOKENS * CONTENT_BYTES,
        "only {} bytes arrived",
        received.len()
    );
    let growth = peak.saturating_sub(baseline);
    eprintln!(
        "10 MB stream: {} bytes in {elapsed:?}, {reads} reads; proxy RSS baseline {baseline} KiB, peak {peak} KiB (+{growth} KiB)",
        received.len()
    );
    assert!(
        growth < GROWTH_LIMIT_KIB,
        "proxy RSS grew by {growth} KiB (baseline {baseline} KiB, peak {peak} KiB) while streaming {} bytes to a slow reader",
        received.len()
    );

    // Intact: byte-identical to the backend's own answer to the same request.
    let direct = post_raw_json(stack.backend_addr(), &big);
    assert_same_bytes("10 MB SSE", &received, &direct.body);
    let frames = http::sse_frames(&received);
    assert!(frames.last().is_some_and(http::Frame::is_done));
    let content: usize = frames
        .iter()
        .filter(|frame| frame.is_data())
        .filter_map(|frame| {
            frame.json()["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::len)
        })
        .sum();
    assert_eq!(content as u64, TOKENS * CONTENT_BYTES);
    stack.stop();
}
