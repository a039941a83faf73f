//! Exactly one accounting record per `POST /v1/chat/completions`, whatever its outcome, and
//! none for anything else: discovery, health, metrics, `/requests` (good and bad queries),
//! unknown paths (404) and wrong methods (405), including on the chat path itself.

use serde_json::{Value, json};
use strata_e2e::accounting::{
    all_records, assert_all_schema, chat_request, page, record_count, wait_records,
};
use strata_e2e::http::{self, CHAT_PATH};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, ModelSpec};

const A: &str = "flash-a";

/// Every request that must not make a record, with the status it gets.
fn non_inference(addr: std::net::SocketAddr) {
    let json_headers = [("content-type", "application/json")];
    let body = chat_request(A, false, "x", Value::Null).to_string();
    let cases: &[(&str, &str, &[u8], u16)] = &[
        ("GET", "/v1/models", b"", 200),
        ("GET", "/health", b"", 200),
        ("GET", "/metrics", b"", 200),
        ("GET", "/metrics?format=prometheus", b"", 200),
        ("GET", "/requests", b"", 200),
        ("GET", "/requests?after=0&limit=5", b"", 200),
        ("GET", "/requests?after=x", b"", 400),
        ("GET", "/nope", b"", 404),
        ("POST", "/v1/completions", body.as_bytes(), 404),
        ("POST", "/v1/chat/completions/", body.as_bytes(), 404),
        ("POST", "/chat/completions", body.as_bytes(), 404),
        ("POST", "/v1/chat/completions/extra", body.as_bytes(), 404),
        ("GET", CHAT_PATH, b"", 405),
        ("PUT", CHAT_PATH, body.as_bytes(), 405),
        ("DELETE", CHAT_PATH, b"", 405),
        ("OPTIONS", CHAT_PATH, b"", 405),
        ("POST", "/health", b"", 405),
        ("POST", "/metrics", b"", 405),
        ("POST", "/requests", b"", 405),
        ("DELETE", "/requests", b"", 405),
        ("POST", "/v1/models", body.as_bytes(), 405),
    ];
    for (method, path, body, status) in cases {
        let response = http::request(addr, method, path, &json_headers, body);
        assert_eq!(response.status, *status, "{method} {path}: {response}");
        if *status >= 400 {
            // The router's own error document (read exactly).
            let error = response.error();
            assert!(!error.message.is_empty(), "{method} {path}: {response}");
        }
    }
}

#[test]
fn one_record_per_chat_post_and_none_for_anything_else() {
    let config = ConfigBuilder::new("acct-endpoints")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();

    non_inference(addr);
    let empty = page(addr, "");
    assert_eq!(
        (empty.next_seq(), empty.dropped(), empty.oldest_seq()),
        (0, 0, None),
        "{}",
        empty.raw
    );
    assert!(empty.records.is_empty());

    // Chat POSTs with different outcomes; one has a query string (never recorded).
    let mut ids = Vec::new();
    let json_headers = [("content-type", "application/json")];
    let body = chat_request(A, false, "x", Value::Null).to_string();
    for (path, body, status) in [
        (CHAT_PATH.to_owned(), body.clone(), 200),
        (format!("{CHAT_PATH}?debug=1&key=zebra"), body.clone(), 200),
        (CHAT_PATH.to_owned(), "{".to_owned(), 400),
        (
            CHAT_PATH.to_owned(),
            chat_request("unknown", false, "x", Value::Null).to_string(),
            404,
        ),
    ] {
        let response = http::request(addr, "POST", &path, &json_headers, body.as_bytes());
        assert_eq!(response.status, status, "{path}: {response}");
        ids.push(
            response
                .header("x-strata-request-id")
                .expect("every chat response has a request id")
                .to_owned(),
        );
    }
    let mut stream = stack.open_chat(&chat_request(A, true, "x", json!({"tokens": 2})));
    stream.remaining_frames(strata_e2e::DEADLINE);
    ids.push(stream.header("x-strata-request-id").unwrap().to_owned());

    let records = wait_records(addr, ids.len() as u64);
    // More non-inference traffic afterwards adds nothing.
    non_inference(addr);
    assert_eq!(record_count(addr), ids.len() as u64);
    let again = all_records(addr);
    assert_eq!(again, records, "reads never change the ring");

    let mut recorded: Vec<&str> = records.iter().map(|r| r.request_id.as_str()).collect();
    recorded.sort();
    ids.sort();
    assert_eq!(recorded, ids);
    for rec in &records {
        assert_eq!(rec.endpoint, "/v1/chat/completions", "{rec}");
        assert!(
            !rec.raw.contains("debug") && !rec.raw.contains('?'),
            "{rec}"
        );
    }
    let instance = page(addr, "").instance_id().to_owned();
    assert_all_schema(&records, &instance);
    assert_eq!(
        stack.metrics().request_log.next_seq,
        Some(ids.len() as u64 + 1)
    );
    stack.stop();
}
