//! Property tests of the protocol crate's parsers (issue 15, item 4): the
//! config loader, the control-line parser and the supervisor frame decoder.
//!
//! The case count is proptest's (256 by default; `PROPTEST_CASES=N` for a
//! long run, see docs/testing.md#property-tests).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use strata_protocol::config::Config;
use strata_protocol::control::{ControlReply, ControlRequest, ReplyLine};
use strata_protocol::wire::{
    FrameReader, ProxyMessage, ServiceTier, SupervisorMessage, TicketRequest, WireError,
    decode_payload, encode_frame,
};
use tokio::io::{AsyncRead, ReadBuf};

// ---- the config loader ----------------------------------------------------------------

/// A valid config with two families and both aliases (as `config_rules.rs` starts from).
fn base() -> Value {
    json!({
        "python": "/opt/strata/venv/bin/python",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/strata-router/control.sock",
        "models": {
            "a-q4": {"family": "qwen3.8-flash-next", "quantization": "q4_k_m", "upstream_model": "a-q4"},
            "a-q8": {"family": "qwen3.8-flash-next", "fine_tune": "ft", "quantization": "q8_0", "upstream_model": "a-q8"},
            "b-q4": {"family": "qwen3.6-35b-a3b", "quantization": "q4_k_m", "upstream_model": "b-q4"}
        },
        "aliases": {
            "qwen3.8-flash-next": {"allowed_models": ["a-q8", "a-q4"]},
            "qwen3.6-35b-a3b": {"allowed_models": ["b-q4"]}
        },
        "enabled_models": ["a-q4", "b-q4"]
    })
}

/// Any JSON value, a few levels deep, with keys drawn partly from the config's own names so
/// that generated documents reach past the first checks.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("models".to_owned()),
        Just("aliases".to_owned()),
        Just("family".to_owned()),
        Just("allowed_models".to_owned()),
        Just("listen".to_owned()),
        Just("backend_port".to_owned()),
        Just("queue_ms".to_owned()),
        "[a-z_]{1,12}",
        any::<String>(),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<String>().prop_map(Value::String),
        Just(json!("127.0.0.1:8088")),
        Just(json!("qwen3.8-flash-next")),
        Just(json!("a-q4")),
    ];
    leaf.prop_recursive(4, 48, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One step of a path as errors write it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Parses an error path (`$`, `models["a-q4"].family`, `enabled_models[2]`, ...) into steps;
/// `None` if it is not of that form.
fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let ident = |s: &str| -> usize {
        s.bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count()
    };
    let first = ident(rest);
    if first > 0 {
        steps.push(Step::Key(rest[..first].to_owned()));
        rest = &rest[first..];
    }
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let n = ident(after);
            if n == 0 {
                return None;
            }
            steps.push(Step::Key(after[..n].to_owned()));
            rest = &after[n..];
        } else if let Some(after) = rest.strip_prefix('[') {
            if after.starts_with('"') {
                let mut stream = serde_json::Deserializer::from_str(after).into_iter::<String>();
                let key = stream.next()?.ok()?;
                let used = stream.byte_offset();
                steps.push(Step::Key(key));
                rest = after[used..].strip_prefix(']')?;
            } else {
                let n = after.bytes().take_while(u8::is_ascii_digit).count();
                steps.push(Step::Index(after[..n].parse().ok()?));
                rest = after[n..].strip_prefix(']')?;
            }
        } else {
            return None;
        }
    }
    Some(steps)
}

/// Checks that a rejection names a path into `doc`: it parses, and every step but the last
/// exists (the last may name a missing key).
fn assert_names_a_path(doc: &Value, path: &str, message: &str) -> Result<(), TestCaseError> {
    prop_assert!(!message.is_empty(), "an empty message at {path}");
    let steps = parse_path(path);
    prop_assert!(steps.is_some(), "not a path: {path:?} ({message})");
    let steps = steps.unwrap();
    let mut at = doc;
    for (n, step) in steps.iter().enumerate() {
        let next = match step {
            Step::Key(key) => at.get(key.as_str()),
            Step::Index(index) => at.get(*index),
        };
        match next {
            Some(value) => at = value,
            None => {
                prop_assert!(
                    n + 1 == steps.len(),
                    "{path:?} goes through a missing {step:?} ({message})"
                );
            }
        }
    }
    Ok(())
}

fn check_config(doc: &Value) -> Result<(), TestCaseError> {
    match Config::from_json_str(&doc.to_string()) {
        Ok(config) => {
            // A loaded config is usable by both daemons.
            let _ = config.fingerprint();
            prop_assert!(config.proxy_frame_limit() >= 64 * 1024);
        }
        Err(err) => assert_names_a_path(doc, &err.path, &err.message)?,
    }
    Ok(())
}

proptest! {
    /// Arbitrary JSON documents: the loader never panics, and every rejection names a path
    /// into the document.
    #[test]
    fn config_arbitrary_json_never_panics_and_names_a_path(doc in any_json()) {
        check_config(&doc)?;
    }

    /// A valid config with some of its values replaced by arbitrary ones, or removed: the
    /// same, much deeper into the checks.
    #[test]
    fn config_mutated_never_panics_and_names_a_path(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any_json(), any::<bool>()), 1..4),
    ) {
        let mut doc = base();
        for (which, value, remove) in edits {
            let paths = leaf_paths(&doc);
            let path = which.get(&paths).clone();
            set_at(&mut doc, &path, if remove { None } else { Some(value) });
        }
        check_config(&doc)?;
    }

    /// Arbitrary text as a config file: an error, never a panic, and it names a path.
    #[test]
    fn config_arbitrary_text_never_panics(text in any::<String>()) {
        if let Err(err) = Config::from_json_str(&text) {
            prop_assert!(!err.path.is_empty() && !err.message.is_empty());
        }
    }
}

/// Every position in `doc` (objects' keys and arrays' items, recursively).
fn leaf_paths(doc: &Value) -> Vec<Vec<Step>> {
    fn walk(value: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    here.push(Step::Key(key.clone()));
                    out.push(here.clone());
                    walk(child, here, out);
                    here.pop();
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    here.push(Step::Index(index));
                    out.push(here.clone());
                    walk(child, here, out);
                    here.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = vec![Vec::new()];
    walk(doc, &mut Vec::new(), &mut out);
    out
}

/// Replaces (or removes) the value at `path`; the empty path is the whole document.
fn set_at(doc: &mut Value, path: &[Step], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        *doc = value.unwrap_or(Value::Null);
        return;
    };
    let mut at = doc;
    for step in parents {
        at = match step {
            Step::Key(key) => &mut at[key.as_str()],
            Step::Index(index) => &mut at[*index],
        };
    }
    match (last, value) {
        (Step::Key(key), Some(value)) => at[key.as_str()] = value,
        (Step::Key(key), None) => {
            if let Some(map) = at.as_object_mut() {
                map.remove(key);
            }
        }
        (Step::Index(index), Some(value)) => at[*index] = value,
        (Step::Index(index), None) => {
            if let Some(items) = at.as_array_mut() {
                items.remove(*index);
            }
        }
    }
}

#[test]
fn the_path_parser_reads_every_form_errors_use() {
    assert_eq!(parse_path("$"), Some(vec![]));
    assert_eq!(
        parse_path(r#"models["a-q4"].family"#),
        Some(vec![
            Step::Key("models".into()),
            Step::Key("a-q4".into()),
            Step::Key("family".into())
        ])
    );
    assert_eq!(
        parse_path(r#"$["we\"ird"][3]"#),
        Some(vec![Step::Key("we\"ird".into()), Step::Index(3)])
    );
    assert_eq!(parse_path("models..x"), None);
}

// ---- the control-line parser ----------------------------------------------------------

fn control_request() -> impl Strategy<Value = ControlRequest> {
    prop_oneof![
        Just(ControlRequest::Status),
        any::<bool>().prop_map(ControlRequest::LegacyRouting),
        proptest::option::of(any::<String>()).prop_map(|model| ControlRequest::On { model }),
        any::<bool>().prop_map(|now| ControlRequest::Off { now }),
    ]
}

proptest! {
    /// Any line: the request and both reply parsers return, never panic.
    #[test]
    fn control_lines_never_panic(line in any::<String>()) {
        let _ = ControlRequest::parse(&line);
        let _ = ControlReply::parse(&line);
        let _ = ReplyLine::parse(&line);
    }

    /// Any JSON object as a line: parsed only when it is one of the request shapes.
    #[test]
    fn control_objects_parse_only_as_known_requests(doc in any_json()) {
        let line = doc.to_string();
        if let Some(request) = ControlRequest::parse(&line) {
            let cmd = doc["cmd"].as_str();
            prop_assert!(matches!(cmd, Some("status" | "on" | "off")), "{line} -> {request:?}");
        }
    }

    /// Every request survives its own line, with the whitespace a client may add.
    #[test]
    fn control_requests_round_trip(request in control_request(), pad in "[ \t]{0,3}", crlf in any::<bool>()) {
        let line = format!("{pad}{}{pad}{}", request.to_line(), if crlf { "\r\n" } else { "\n" });
        prop_assert_eq!(ControlRequest::parse(&line), Some(request));
    }
}

// ---- the frame decoder ----------------------------------------------------------------

/// A reader that hands over the given pieces one per read, as a socket may.
struct Pieces(VecDeque<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut piece) = self.0.pop_front() {
            let n = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..n]);
            if n < piece.len() {
                self.0.push_front(piece.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn split_at(bytes: &[u8], cuts: &[usize]) -> Pieces {
    let mut positions: Vec<usize> = cuts
        .iter()
        .map(|cut| {
            if bytes.is_empty() {
                0
            } else {
                cut % bytes.len()
            }
        })
        .collect();
    positions.sort_unstable();
    positions.dedup();
    let mut pieces = VecDeque::new();
    let mut start = 0;
    for end in positions.into_iter().chain([bytes.len()]) {
        if end > start {
            pieces.push_back(bytes[start..end].to_vec());
        }
        start = end;
    }
    Pieces(pieces)
}

fn proxy_message() -> impl Strategy<Value = ProxyMessage> {
    prop_oneof![
        (
            any::<u64>(),
            any::<String>(),
            any::<String>(),
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(ticket, model, requested, stream, arrived)| {
                ProxyMessage::Enqueue {
                    ticket,
                    model,
                    tier: ServiceTier::Priority,
                    request: TicketRequest {
                        model_requested: requested,
                        stream,
                        arrived_unix_ms: arrived,
                    },
                }
            }),
        any::<u64>().prop_map(|ticket| ProxyMessage::HeadersReceived { ticket }),
        any::<u64>().prop_map(|token| ProxyMessage::Arrive { token }),
        (
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            any::<u32>()
        )
            .prop_map(|(query, after, limit)| ProxyMessage::QueryRecords {
                query,
                after,
                limit
            }),
        any::<bool>().prop_map(|draining| ProxyMessage::SetDraining { draining }),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

/// Reads frames until the end or the first error; returns the messages and whether it
/// ended cleanly.
async fn read_all<T: serde::de::DeserializeOwned>(pieces: Pieces, limit: u32) -> (Vec<T>, bool) {
    let mut reader = FrameReader::with_limit(pieces, limit);
    let mut got = Vec::new();
    loop {
        match reader.next::<T>().await {
            Ok(Some(message)) => got.push(message),
            Ok(None) => return (got, true),
            // A frame that does not decode is consumed whole; the reader goes on.
            Err(WireError::Decode(_)) => {}
            Err(_) => return (got, false),
        }
        assert!(reader.buffered() <= limit as usize + 4 + 64 * 1024);
    }
}

proptest! {
    /// Valid frames, cut into arbitrary reads: the same messages, in order, and a clean end.
    #[test]
    fn frames_split_anywhere_decode_the_same(
        messages in proptest::collection::vec(proxy_message(), 0..12),
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        let mut bytes = Vec::new();
        for message in &messages {
            bytes.extend(encode_frame(message).unwrap());
        }
        let (got, clean) = runtime().block_on(read_all::<ProxyMessage>(split_at(&bytes, &cuts), 1 << 20));
        prop_assert!(clean);
        prop_assert_eq!(got, messages);
    }

    /// Arbitrary bytes, cut anywhere, read by both ends' decoders: they end (cleanly or
    /// with an error), never panic and never hold more than the limit plus one read.
    #[test]
    fn arbitrary_bytes_never_panic_the_frame_reader(
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        limit in 0u32..2048,
    ) {
        let rt = runtime();
        rt.block_on(read_all::<ProxyMessage>(split_at(&bytes, &cuts), limit));
        rt.block_on(read_all::<SupervisorMessage>(split_at(&bytes, &cuts), limit));
    }

    /// Arbitrary payloads behind a correct length prefix: decoding fails or succeeds,
    /// without a panic, for both directions.
    #[test]
    fn arbitrary_payloads_never_panic_the_decoder(payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_payload::<ProxyMessage>(&payload);
        let _ = decode_payload::<SupervisorMessage>(&payload);
    }
}
