//! Request limits and router-made errors of the real `strata-proxy`: 413 for bodies over
//! `max_request_body_bytes` (declared and chunked), 400 for malformed requests, 404 for
//! unknown or disabled models, 404/405 for other paths and methods, all in the OpenAI error
//! shape, never echoing request content; and the `x-strata-*` headers on every chat response,
//! errors included.

use std::collections::HashSet;

use serde_json::json;
use strata_e2e::http::{self, CHAT_PATH, Conn, Response, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, model_ids};
use strata_protocol::api::ErrorDetail;
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const B: &str = "flash-b";
const C: &str = "flash-c";
const LIMIT: usize = 1024;
/// A string no error body may contain: it is only ever in request content.
const CANARY: &str = "CANARY-7f3a9c-do-not-echo";

/// Checks the OpenAI error shape (the router's error document, read exactly: `error` and
/// nothing else, with its message, type and code), the code, and that nothing of the request
/// is echoed.
fn assert_error(response: &Response, status: u16, code: &str) -> ErrorDetail {
    assert_eq!(response.status, status, "{response}");
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{response}"
    );
    let error = response.error();
    assert_eq!(error.code, code, "{response}");
    assert!(
        !response.text().contains(CANARY) && !response.text().contains("zzz-"),
        "an error body echoes request content: {response}"
    );
    error
}

fn post(stack: &Stack, body: &[u8]) -> Response {
    http::request(
        stack.addr(),
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        body,
    )
}

/// A chat body of exactly `size` bytes (padded with a `pad` member).
fn body_of_size(size: usize) -> Vec<u8> {
    let mut body = chat_body(A, false);
    body["pad"] = json!("");
    let base = body.to_string().len();
    assert!(base <= size);
    body["pad"] = json!(
        CANARY
            .repeat(size)
            .chars()
            .take(size - base)
            .collect::<String>()
    );
    let text = body.to_string().into_bytes();
    assert_eq!(text.len(), size);
    text
}

fn limits_config(tag: &str) -> strata_e2e::TestConfig {
    ConfigBuilder::new(tag)
        .model(ModelSpec::new(A))
        .set("max_request_body_bytes", LIMIT as u64)
        .build()
}

#[test]
fn bodies_over_the_limit_get_413_declared_or_chunked() {
    let stack = Stack::start(limits_config("limit"));
    let mut ids = HashSet::new();

    // Exactly the limit is fine; one byte more is not.
    let ok = post(&stack, &body_of_size(LIMIT));
    assert_eq!(ok.status, 200, "{ok}");
    ids.insert(ok.request_id().to_owned());
    let over = post(&stack, &body_of_size(LIMIT + 1));
    assert_error(&over, 413, "request_too_large");
    ids.insert(over.request_id().to_owned());

    // A declared length over the limit is refused before any body byte is sent.
    let mut conn = Conn::connect(stack.addr()).unwrap();
    conn.write(
        format!(
            "POST {CHAT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            50 * 1024 * 1024
        )
        .as_bytes(),
    )
    .unwrap();
    let early = conn.response(DEADLINE);
    assert_error(&early, 413, "request_too_large");
    ids.insert(early.request_id().to_owned());

    // Chunked: under the limit in several chunks is accepted ...
    let body = body_of_size(LIMIT);
    let mut conn = Conn::connect(stack.addr()).unwrap();
    conn.write(
        format!("POST {CHAT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    for piece in body.chunks(100) {
        conn.write_chunk(piece).unwrap();
    }
    conn.write_chunk(b"").unwrap();
    let chunked_ok = conn.response(DEADLINE);
    assert_eq!(chunked_ok.status, 200, "{chunked_ok}");
    ids.insert(chunked_ok.request_id().to_owned());

    // ... over it is a 413, whether or not the client keeps sending.
    let body = body_of_size(4 * LIMIT);
    let mut conn = Conn::connect(stack.addr()).unwrap();
    conn.write(
        format!("POST {CHAT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    for piece in body.chunks(512) {
        // The proxy may answer and stop reading before the last chunk; that is fine.
        if conn.write_chunk(piece).is_err() {
            break;
        }
    }
    let _ = conn.write_chunk(b"");
    let chunked_over = conn.response(DEADLINE);
    assert_error(&chunked_over, 413, "request_too_large");
    ids.insert(chunked_over.request_id().to_owned());
    assert_eq!(ids.len(), 5, "request ids are unique: {ids:?}");

    // Only the two accepted requests reached the backend.
    let requests = stack.fake_log().events_named("request");
    assert_eq!(requests.len(), 2, "{}", stack.fake_log().dump());
    assert!(requests.iter().all(|r| r["body_bytes"] == json!(LIMIT)));
    assert_eq!(stack.metrics().max_request_body_bytes, LIMIT as u64);
    stack.stop();
}

#[test]
fn malformed_requests_get_400_with_the_openai_shape_and_no_echo() {
    let stack = Stack::start(limits_config("bad"));
    let messages = json!([{"role": "user", "content": CANARY}]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "invalid JSON",
            format!("{{\"model\": \"{A}\", \"messages\": [\"{CANARY}\"").into_bytes(),
            "invalid_json",
        ),
        (
            "trailing garbage",
            format!("{{\"model\": \"{A}\"}} {CANARY}").into_bytes(),
            "invalid_json",
        ),
        (
            "not UTF-8",
            b"{\"model\": \"\xff\xfe\"}".to_vec(),
            "invalid_json",
        ),
        ("empty body", Vec::new(), "invalid_json"),
        (
            "an array",
            json!([CANARY, {"model": A}]).to_string().into_bytes(),
            "invalid_json",
        ),
        (
            "a string",
            json!(CANARY).to_string().into_bytes(),
            "invalid_json",
        ),
        (
            "missing model",
            json!({"messages": messages}).to_string().into_bytes(),
            "invalid_request",
        ),
        (
            "model not a string",
            json!({"model": [CANARY], "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_request",
        ),
        (
            "stream not a boolean",
            json!({"model": A, "stream": CANARY, "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_request",
        ),
        (
            "stream a number",
            json!({"model": A, "stream": 1, "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_request",
        ),
        (
            "bad service_tier",
            json!({"model": A, "service_tier": CANARY, "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_service_tier",
        ),
        (
            "service_tier not a string",
            json!({"model": A, "service_tier": 3, "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_service_tier",
        ),
        (
            "bad speed",
            json!({"model": A, "speed": CANARY, "messages": messages})
                .to_string()
                .into_bytes(),
            "invalid_speed",
        ),
        (
            "bad speed with a good tier",
            json!({"model": A, "speed": "slow", "service_tier": "priority", "stream": true})
                .to_string()
                .into_bytes(),
            "invalid_speed",
        ),
    ];
    let mut ids = HashSet::new();
    for (what, body, code) in cases {
        let response = post(&stack, &body);
        assert_eq!(response.status, 400, "{what}: {response}");
        assert_error(&response, 400, code);
        assert!(
            ids.insert(response.request_id().to_owned()),
            "{what}: duplicate request id"
        );
        assert_eq!(
            response.header("x-strata-concrete-model"),
            None,
            "{what}: no model was resolved: {response}"
        );
    }
    assert!(
        stack.fake_log().starts().is_empty(),
        "a rejected request must not start a backend\n{}",
        stack.fake_log().dump()
    );
    stack.stop();
}

#[test]
fn unknown_and_disabled_models_and_dead_aliases_get_404() {
    let config = ConfigBuilder::new("notfound")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .model(ModelSpec::new(C).family(strata_e2e::A3B))
        .alias(strata_e2e::FLASH, &[A, B])
        .alias(strata_e2e::A3B, &[C])
        .enabled_models(&[A])
        .build();
    let stack = Stack::start(config);
    let cases = [
        ("unknown model", format!("zzz-{CANARY}")),
        ("disabled model", B.to_owned()),
        (
            "alias with every entry disabled",
            "qwen3.6-35b-a3b".to_owned(),
        ),
        ("case matters", A.to_uppercase()),
    ];
    for stream in [false, true] {
        for (what, model) in &cases {
            let response = stack.chat(&chat_body(model, stream));
            assert_error(&response, 404, "model_not_found");
            response.request_id();
            assert_eq!(
                response.header("x-strata-concrete-model"),
                None,
                "{what}: {response}"
            );
        }
    }
    // The dead alias and the disabled models are not listed either.
    let listing = stack.models();
    assert_eq!(
        model_ids(&listing),
        [A, "qwen3.8-flash-next"],
        "{listing:#?}"
    );
    assert!(stack.fake_log().starts().is_empty());
    stack.stop();
}

#[test]
fn other_paths_get_404_and_wrong_methods_405_in_the_openai_shape() {
    let stack = Stack::start(limits_config("paths"));
    let canary_path = format!("/zzz-{CANARY}");
    let not_found = [
        ("GET", "/"),
        ("GET", "/v1/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models/flash-a"),
        ("POST", "/v1/chat/completions/extra"),
        ("GET", "/v1/chat"),
        ("GET", "/healthz"),
        ("POST", canary_path.as_str()),
        ("GET", "/v1/models?zzz=1"),
    ];
    for (method, path) in not_found {
        if path.contains('?') {
            // A query string does not change the route.
            let response = http::request(stack.addr(), method, path, &[], b"");
            assert_eq!(response.status, 200, "{method} {path}: {response}");
            continue;
        }
        let response = http::request(stack.addr(), method, path, &[], CANARY.as_bytes());
        assert_error(&response, 404, "not_found");
    }
    let wrong_method = [
        ("GET", "/v1/chat/completions"),
        ("PUT", "/v1/chat/completions"),
        ("DELETE", "/v1/chat/completions"),
        ("POST", "/v1/models"),
        ("DELETE", "/health"),
        ("POST", "/metrics"),
        ("PUT", "/requests"),
    ];
    for (method, path) in wrong_method {
        let response = http::request(stack.addr(), method, path, &[], CANARY.as_bytes());
        assert_error(&response, 405, "method_not_allowed");
    }
    assert!(
        stack.fake_log().events().is_empty(),
        "nothing reached a backend"
    );
    stack.stop();
}

/// `x-strata-request-id` on every chat response, errors included, each one different;
/// `x-strata-concrete-model` once the model is resolved; `x-strata-service-tier` on upstream
/// responses (legacy) and on early streaming responses (wait-first).
#[test]
fn strata_headers_on_success_and_on_every_error() {
    for wait_first in [false, true] {
        let config = ConfigBuilder::new("headers")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B).not_installed())
            .model(ModelSpec::new(C).start_failure("exit"))
            .set("max_request_body_bytes", LIMIT as u64)
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let mut ids = HashSet::new();
        let mut check = |what: &str, response: &Response| {
            let id = response.request_id().to_owned();
            assert!(
                id.contains('-') && !id.starts_with("proxy-"),
                "{what}: {id}"
            );
            assert!(ids.insert(id), "{what}: request id repeated");
        };

        // Successes: the concrete model and the tier.
        for (tier_fields, tier) in [
            (json!({}), "default"),
            (json!({"service_tier": "priority"}), "priority"),
            (json!({"speed": "fast"}), "priority"),
            (json!({"service_tier": "flex", "speed": "standard"}), "flex"),
            (json!({"service_tier": "auto"}), "default"),
        ] {
            for stream in [false, true] {
                let mut body = chat_body(A, stream);
                for (key, value) in tier_fields.as_object().unwrap() {
                    body[key] = value.clone();
                }
                let response = stack.chat(&body);
                assert_eq!(response.status, 200, "{response}");
                check("success", &response);
                assert_eq!(response.header("x-strata-concrete-model"), Some(A));
                assert_eq!(
                    response.header("x-strata-service-tier"),
                    Some(tier),
                    "{body}: {response}"
                );
            }
        }

        // Upstream errors keep the headers (wait-first streams turn them into event: error).
        let mut body = chat_body(A, false);
        body["fake"] = json!({"error_status": 409});
        let response = stack.chat(&body);
        assert_eq!(response.status, 409, "{response}");
        check("upstream 409", &response);
        assert_eq!(response.header("x-strata-concrete-model"), Some(A));
        assert_eq!(response.header("x-strata-service-tier"), Some("default"));

        // Router errors before resolution: the request id only.
        for (what, body) in [
            ("invalid JSON", b"{".to_vec()),
            ("too large", body_of_size(LIMIT + 1)),
            (
                "unknown model",
                chat_body("zzz-unknown", false).to_string().into_bytes(),
            ),
        ] {
            let response = post(&stack, &body);
            assert!(response.status >= 400, "{what}: {response}");
            check(what, &response);
        }

        // Router errors after resolution: the concrete model too.
        for stream in [false, true] {
            let response = stack.chat(&chat_body(B, stream));
            check("not prepared", &response);
            assert_eq!(
                response.header("x-strata-concrete-model"),
                Some(B),
                "{response}"
            );
            // Refused before it is queued: a real status, a wait-first stream too.
            assert_error(&response, 503, "model_not_prepared");
        }
        for stream in [false, true] {
            let response = stack.chat(&chat_body(C, stream));
            check("load error", &response);
            assert_eq!(response.header("x-strata-concrete-model"), Some(C));
            if !(stream && wait_first) {
                assert_error(&response, 503, "model_load_error");
                // The failed start began a cooldown: say when, and that a retry now is futile.
                assert!(response.header("retry-after").is_some(), "{response}");
                assert_eq!(
                    response.header("x-should-retry"),
                    Some("false"),
                    "{response}"
                );
            }
        }
        // Routing off.
        stack.control().off(false).assert_ok();
        let response = stack.chat(&chat_body(A, false));
        assert_error(&response, 503, "routing_off");
        check("routing off", &response);
        assert_eq!(response.header("x-strata-concrete-model"), Some(A));
        stack.stop();
    }
}

/// A body shorter than its `Content-Length`, after which the client half-closes: the proxy
/// answers 400 (it cannot parse what never came) with the request id, like every chat error,
/// and the record matches that answer (it said `client_disconnect` with status null before).
#[test]
fn a_truncated_body_gets_an_error_with_a_request_id() {
    let stack = Stack::start(limits_config("short"));
    let mut conn = Conn::connect(stack.addr()).unwrap();
    conn.write(
        format!(
            "POST {CHAT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{{\"model\": \"{A}\""
        )
        .as_bytes(),
    )
    .unwrap();
    conn.shutdown_write();
    // A client that half-closed still reads: it gets the 400, and the record says so.
    let response = conn.response(DEADLINE);
    assert_error(&response, 400, "incomplete_body");
    let id = response.request_id().to_owned();
    let record = strata_e2e::accounting::wait_record(stack.addr(), &id);
    assert_eq!(record.reason, Reason::InvalidRequest, "{}", record.raw);
    assert_eq!(record.status, Some(400), "{}", record.raw);
    assert_eq!(
        record.response_bytes,
        response.body.len() as u64,
        "{}",
        record.raw
    );
    assert_eq!(record.disconnect_phase, None);
    // Nothing was sent upstream, and the proxy still serves.
    assert!(stack.fake_log().events_named("request").is_empty());
    assert_eq!(stack.chat(&chat_body(A, false)).status, 200);
    stack.stop();
}

/// A chunked body whose framing is invalid (a chunk-size line that is not hex) is the client's
/// error, not a disconnect: 400 `incomplete_body`, and one record with `invalid_request` and
/// status 400.
#[test]
fn a_malformed_chunked_body_is_an_invalid_request() {
    let stack = Stack::start(limits_config("badchunk"));
    let mut conn = Conn::connect(stack.addr()).unwrap();
    conn.write(
        format!(
            "POST {CHAT_PATH} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{{\"mo\r\nzz\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let response = conn.response(DEADLINE);
    assert_error(&response, 400, "incomplete_body");
    let id = response.request_id().to_owned();
    let record = strata_e2e::accounting::wait_record(stack.addr(), &id);
    assert_eq!(record.reason, Reason::InvalidRequest, "{}", record.raw);
    assert_eq!(record.status, Some(400), "{}", record.raw);
    assert_eq!(record.disconnect_phase, None);
    assert!(stack.fake_log().events_named("request").is_empty());
    stack.stop();
}

/// Legacy bounded scheduling: over `max_pending` gets 429 `queue_full`, and a request that
/// waits longer than `queue_ms` for its model gets 504 `queue_timeout` without a switch; both
/// carry the request id and the concrete model.
#[test]
fn legacy_queue_full_and_queue_timeout() {
    let config = ConfigBuilder::new("legacy-q")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(false)
        .set("max_pending", 2)
        .set("queue_ms", 500)
        .build();
    let stack = Stack::start(config);
    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 30, "token_delay_ms": 100});
    let mut holder = stack.open_chat(&body);
    holder.frames_until(DEADLINE, "A's first data frame", http::Frame::is_data);

    // B waits for A's lease and gives up after queue_ms.
    let timed_out = stack.chat(&chat_body(B, false));
    assert_error(&timed_out, 504, "queue_timeout");
    timed_out.request_id();
    assert_eq!(timed_out.header("x-strata-concrete-model"), Some(B));

    // A second active request fills max_pending (2); a third is refused at once.
    let mut second = stack.open_chat(&body);
    second.frames_until(DEADLINE, "the second stream's data", http::Frame::is_data);
    let full = stack.chat(&chat_body(A, false));
    let error = assert_error(&full, 429, "queue_full");
    // OpenAI's type for a 429 (the SDKs raise RateLimitError) and a hint when to come back.
    assert_eq!(error.kind, "rate_limit_error", "{full}");
    assert_eq!(full.header("retry-after"), Some("1"), "{full}");
    full.request_id();
    assert_eq!(full.header("x-strata-concrete-model"), Some(A));

    for stream in [&mut holder, &mut second] {
        let rest = stream.remaining_frames(DEADLINE);
        assert!(rest.last().is_some_and(http::Frame::is_done));
    }
    assert_eq!(
        stack.fake_log().start_count(&stack.config().upstream(B)),
        0,
        "a queue timeout never switches"
    );
    assert_eq!(stack.chat(&chat_body(A, false)).status, 200);
    stack.stop();
}
