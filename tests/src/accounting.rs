//! Reading and checking per-request accounting records, for the `accounting_*` tests.
//!
//! - [`page`] / [`Page`]: one `GET /requests` answer, raw and read as the typed
//!   `protocol::page::RecordsPage`, each [`Record`] with its exact text (so the tests can
//!   compare it byte for byte with the JSONL line) and read exactly as the typed
//!   `RequestRecord`.
//! - [`all_records`] / [`wait_records`]: every retained record (paging with the cursor);
//!   [`wait_records`] first polls until the ring holds the expected number (records are
//!   submitted after the response ends, so a client can see its EOF before the record exists).
//! - [`jsonl_lines`] / [`wait_jsonl`]: the lines of the JSONL file (written asynchronously).
//! - [`assert_schema`]: the schema table of the spec as code: exact key set (in schema order,
//!   no duplicates), the type of every field, and the relations between fields (timestamps
//!   against durations, nulls that go together).
//! - [`chat_request`]: a chat body with the fake backend's per-request `fake` overrides;
//!   [`rejections`]: requests that each make one record, quickly.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use strata_protocol::page::RecordsPage;
pub use strata_protocol::record::CHAT_ENDPOINT;
use strata_protocol::record::RequestRecord;

/// The spec's record fields, in schema order: the pin the records are checked against
/// (independent of the product's type, which must serialize exactly these).
pub use strata_test_support::RECORD_FIELDS as FIELDS;

/// The spec's `reason` enum.
pub use strata_test_support::RECORD_REASONS as REASONS;

use crate::document::read_exact_str;
use crate::http;
use crate::poll::{DEADLINE, poll_for};

/// One record: its exact text, read exactly as the typed [`RequestRecord`] (its fields
/// through `Deref`: `rec.seq`, `rec.reason`). [`Record::json`] is the parsed text, for the
/// tests of the record's JSON itself (the schema table, `null` against absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub raw: String,
    pub fields: RequestRecord,
}

impl Record {
    /// Reads `raw`; panics unless it is exactly a [`RequestRecord`] (see
    /// [`read_exact`](crate::document::read_exact)).
    pub fn new(raw: &str) -> Record {
        Record {
            raw: raw.to_owned(),
            fields: read_exact_str("RequestRecord", raw),
        }
    }

    /// The record's text parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.raw)
            .unwrap_or_else(|err| panic!("record is not JSON ({err}): {}", self.raw))
    }
}

impl std::ops::Deref for Record {
    type Target = RequestRecord;
    fn deref(&self) -> &RequestRecord {
        &self.fields
    }
}

impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

/// One `/requests` answer.
#[derive(Debug, Clone)]
pub struct Page {
    /// The body as received.
    pub raw: String,
    /// The body read as the typed page (every member required, no other allowed).
    pub page: RecordsPage,
    /// The records, with their exact texts.
    pub records: Vec<Record>,
}

impl Page {
    pub fn next_seq(&self) -> u64 {
        self.page.next_seq
    }
    pub fn dropped(&self) -> u64 {
        self.page.dropped
    }
    pub fn oldest_seq(&self) -> Option<u64> {
        self.page.oldest_seq
    }
    pub fn instance_id(&self) -> &str {
        &self.page.instance_id
    }
    pub fn seqs(&self) -> Vec<u64> {
        self.records.iter().map(|record| record.seq).collect()
    }
}

/// `GET /requests?QUERY` (an empty `query` sends no query string); expects 200 and reads the
/// document as the typed page, each record as the typed record (both exactly).
pub fn page(addr: SocketAddr, query: &str) -> Page {
    let path = if query.is_empty() {
        "/requests".to_owned()
    } else {
        format!("/requests?{query}")
    };
    let response = http::get(addr, &path);
    response.expect_status(200);
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{response}"
    );
    let raw = response.text();
    // `from_json` requires exactly the five members with their types (a missing
    // `oldest_seq` is not read as null).
    let parsed = RecordsPage::from_json(&raw).unwrap_or_else(|err| panic!("{err}: {raw}"));
    assert!(!parsed.instance_id.is_empty(), "{raw}");
    let records: Vec<Record> = parsed
        .records
        .iter()
        .map(|text| Record::new(text))
        .collect();
    let seqs: Vec<u64> = records.iter().map(|record| record.seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "records are not in increasing seq: {seqs:?}"
    );
    Page {
        raw,
        page: parsed,
        records,
    }
}

/// Every retained record, oldest first, read with the cursor from `after=0` in pages of 1000.
/// Also checks that the pages chain without gaps or repeats.
pub fn all_records(addr: SocketAddr) -> Vec<Record> {
    let mut after = 0;
    let mut out: Vec<Record> = Vec::new();
    loop {
        let page = page(addr, &format!("after={after}&limit=1000"));
        if page.records.is_empty() {
            assert_eq!(page.next_seq(), after, "an empty page keeps the cursor");
            return out;
        }
        if let Some(last) = out.last() {
            assert_eq!(page.records[0].seq, last.seq + 1, "pages chain densely");
        }
        after = page.next_seq();
        let last = page.records.last().expect("checked: not empty");
        assert_eq!(after, last.seq, "next_seq is the last record's seq");
        out.extend(page.records);
    }
}

/// The number of records produced so far (the newest record's seq; 0 before the first).
pub fn record_count(addr: SocketAddr) -> u64 {
    page(addr, "limit=1").next_seq()
}

/// Waits until exactly `n` records have been produced, then returns all retained ones.
/// Panics if more than `n` appear, or on the deadline.
pub fn wait_records(addr: SocketAddr, n: u64) -> Vec<Record> {
    poll_for(DEADLINE, format!("{n} accounting records"), || {
        let count = record_count(addr);
        assert!(count <= n, "{count} records, expected {n}");
        (count == n).then_some(())
    });
    all_records(addr)
}

/// The record with `request_id` (panics if there is not exactly one).
pub fn by_request_id<'a>(records: &'a [Record], request_id: &str) -> &'a Record {
    let found: Vec<&Record> = records
        .iter()
        .filter(|r| r.request_id == request_id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "records with request_id {request_id}: {found:#?}"
    );
    found[0]
}

/// The lines of a JSONL file, without their newlines (empty if the file is absent). Panics if
/// the file does not end with a newline (a torn line).
pub fn jsonl_lines(path: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(err) => panic!("read {}: {err}", path.display()),
    };
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends inside a line",
        path.display()
    );
    text.lines().map(str::to_owned).collect()
}

/// Waits until the JSONL file at `path` has `n` lines and returns them.
pub fn wait_jsonl(path: &Path, n: usize) -> Vec<String> {
    wait_jsonl_within(path, n, DEADLINE)
}

/// [`wait_jsonl`] with a deadline.
pub fn wait_jsonl_within(path: &Path, n: usize, timeout: Duration) -> Vec<String> {
    poll_for(timeout, format!("{n} lines in {}", path.display()), || {
        let lines = jsonl_lines(path);
        assert!(lines.len() <= n, "{} lines, expected {n}", lines.len());
        (lines.len() == n).then_some(lines)
    })
}

/// A chat request body for `model` with one user message `content`, `stream`, and the fake
/// backend's per-request overrides `fake` (omitted when null).
pub fn chat_request(model: &str, stream: bool, content: &str, fake: Value) -> Value {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "stream": stream,
    });
    if !fake.is_null() {
        body["fake"] = fake;
    }
    body
}

/// Sends `n` chat requests the proxy rejects at once (the body `[]`: 400), each of which
/// makes one record without touching the backend.
pub fn rejections(addr: SocketAddr, n: usize) {
    for _ in 0..n {
        http::request(
            addr,
            "POST",
            http::CHAT_PATH,
            &[("content-type", "application/json")],
            b"[]",
        )
        .expect_status(400);
    }
}

/// The top-level member names of the JSON object `text`, in order (duplicates kept): what a
/// parsed `Value` cannot show.
pub fn raw_keys(text: &str) -> Vec<String> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<serde::de::IgnoredAny>()?;
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut deserializer, Keys)
        .unwrap_or_else(|err| panic!("not a JSON object ({err}): {text}"))
}

/// Milliseconds since the Unix epoch of a `YYYY-MM-DDTHH:MM:SS.sssZ` timestamp; `None` if the
/// text is not exactly in that form (RFC3339, UTC, millisecond precision, `Z`).
pub fn timestamp_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 24 {
        return None;
    }
    for (i, &c) in b.iter().enumerate() {
        let ok = match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        };
        if !ok {
            return None;
        }
    }
    let num = |from: usize, to: usize| text[from..to].parse::<i64>().ok();
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second, milli) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + milli)
}

const NULLABLE_STRINGS: [&str; 3] = ["model_requested", "model_resolved", "upstream_model"];
const TIMESTAMPS: [&str; 2] = ["arrived_at", "completed_at"];
const NULLABLE_TIMESTAMPS: [&str; 3] = ["lease_at", "first_token_at", "last_token_at"];
const INTEGERS: [&str; 6] = [
    "seq",
    "arrival_seq",
    "queue_depth_at_arrival",
    "in_flight_at_arrival",
    "total_ms",
    "response_bytes",
];
const NULLABLE_INTEGERS: [&str; 12] = [
    "queue_wait_ms",
    "model_load_ms",
    "upstream_headers_ms",
    "ttft_ms",
    "ttft_after_lease_ms",
    "generation_ms",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "prompt_n",
    "cache_n",
    "predicted_n",
];
const NULLABLE_NUMBERS: [&str; 4] = [
    "prompt_ms",
    "predicted_ms",
    "prompt_per_second",
    "predicted_per_second",
];
const BOOLEANS: [&str; 3] = ["stream", "model_switch", "success"];
const FINISH_REASONS: [&str; 6] = [
    "stop",
    "length",
    "tool_calls",
    "function_call",
    "content_filter",
    "other",
];
const PHASES: [&str; 3] = ["queued", "loading", "generating"];

/// Checks one record against the schema table ("Record schema, version 1") and the relations
/// between its fields; panics naming the rule and showing the record.
pub fn assert_schema(rec: &Record) {
    let fail = |rule: &str| -> ! { panic!("record breaks the schema: {rule}\n{}", rec.raw) };
    let json = rec.json();
    let v = &json;

    // Exactly the 41 fields, in schema order, each once.
    let keys = raw_keys(&rec.raw);
    if keys != FIELDS {
        fail(&format!("keys are {keys:?}, expected exactly {FIELDS:?}"));
    }
    // Every field has exactly one type class in the lists above.
    // schema_version, request_id, endpoint, finish_reason, reason, disconnect_phase: 6.
    let classified = 6
        + NULLABLE_STRINGS.len()
        + TIMESTAMPS.len()
        + NULLABLE_TIMESTAMPS.len()
        + INTEGERS.len()
        + NULLABLE_INTEGERS.len()
        + NULLABLE_NUMBERS.len()
        + BOOLEANS.len()
        + 2; // status, upstream_status
    assert_eq!(classified, FIELDS.len(), "the checker covers every field");

    if v["schema_version"] != json!(1) || !v["schema_version"].is_u64() {
        fail("schema_version is the integer 1");
    }
    if v["endpoint"] != json!(CHAT_ENDPOINT) {
        fail("endpoint is /v1/chat/completions");
    }
    if v["request_id"].as_str().is_none_or(str::is_empty) {
        fail("request_id is a non-empty string");
    }
    for key in NULLABLE_STRINGS {
        if !(v[key].is_null() || v[key].as_str().is_some_and(|s| !s.is_empty())) {
            fail(&format!("{key} is a string or null"));
        }
    }
    let ts = |key: &str| -> Option<i64> {
        match &v[key] {
            Value::Null => None,
            Value::String(s) => Some(timestamp_ms(s).unwrap_or_else(|| {
                fail(&format!(
                    "{key} is an RFC3339 UTC timestamp with milliseconds ending in Z"
                ))
            })),
            _ => fail(&format!("{key} is a timestamp string")),
        }
    };
    for key in TIMESTAMPS {
        if ts(key).is_none() {
            fail(&format!("{key} is always present"));
        }
    }
    for key in NULLABLE_TIMESTAMPS {
        ts(key);
    }
    for key in INTEGERS {
        if !v[key].is_u64() {
            fail(&format!("{key} is an unsigned integer"));
        }
    }
    if v["seq"] == json!(0) || v["arrival_seq"] == json!(0) {
        fail("seq and arrival_seq start at 1");
    }
    for key in NULLABLE_INTEGERS {
        if !(v[key].is_null() || v[key].is_u64()) {
            fail(&format!("{key} is an unsigned integer or null"));
        }
    }
    for key in NULLABLE_NUMBERS {
        if !(v[key].is_null() || v[key].as_f64().is_some_and(|n| n.is_finite() && n >= 0.0)) {
            fail(&format!("{key} is a nonnegative number or null"));
        }
    }
    for key in BOOLEANS {
        if !v[key].is_boolean() {
            fail(&format!("{key} is a boolean"));
        }
    }
    for key in ["status", "upstream_status"] {
        if !(v[key].is_null() || v[key].as_u64().is_some_and(|s| (100..=599).contains(&s))) {
            fail(&format!("{key} is an HTTP status code or null"));
        }
    }
    if !(v["finish_reason"].is_null()
        || v["finish_reason"]
            .as_str()
            .is_some_and(|r| FINISH_REASONS.contains(&r)))
    {
        fail("finish_reason is one of the enum or null");
    }
    let reason = v["reason"]
        .as_str()
        .filter(|r| REASONS.contains(r))
        .unwrap_or_else(|| fail("reason is one of the enum"));
    match (&v["disconnect_phase"], reason) {
        (Value::Null, r) if r != "client_disconnect" => {}
        (Value::String(phase), "client_disconnect") if PHASES.contains(&phase.as_str()) => {}
        _ => fail("disconnect_phase is queued/loading/generating exactly for client_disconnect"),
    }

    // Relations.
    if v["success"] == json!(true)
        && !(reason == "completed"
            && v["status"]
                .as_u64()
                .is_some_and(|s| (200..300).contains(&s)))
    {
        fail("success only for completed responses with a 2xx status");
    }
    let arrived = ts("arrived_at").unwrap();
    let completed = ts("completed_at").unwrap();
    let lease = ts("lease_at");
    let first = ts("first_token_at");
    let last = ts("last_token_at");
    let ms = |key: &str| v[key].as_u64().map(|n| n as i64);
    // Timestamps are cut to whole milliseconds, durations too: a difference of timestamps is
    // the duration or one more.
    let close_to = |duration: i64, from: i64, to: i64| {
        (to - from - duration) == 0 || (to - from - duration) == 1
    };
    if !close_to(ms("total_ms").unwrap(), arrived, completed) {
        fail("total_ms is completed_at - arrived_at");
    }
    let mut chain = vec![arrived];
    chain.extend(lease);
    chain.extend(first);
    chain.extend(last);
    chain.push(completed);
    if chain.windows(2).any(|w| w[0] > w[1]) {
        fail("arrived_at <= lease_at <= first_token_at <= last_token_at <= completed_at");
    }
    match (ms("queue_wait_ms"), lease) {
        (Some(wait), Some(lease)) if close_to(wait, arrived, lease) => {}
        (Some(_), _) => fail("queue_wait_ms is lease_at - arrived_at"),
        (None, _) => {}
    }
    match (ms("ttft_ms"), first) {
        (Some(ttft), Some(first)) if close_to(ttft, arrived, first) => {}
        (None, None) => {}
        _ => fail("ttft_ms is first_token_at - arrived_at, both or neither"),
    }
    match (ms("ttft_after_lease_ms"), first, lease) {
        (Some(ttft), Some(first), Some(lease)) if close_to(ttft, lease, first) => {}
        (None, None, _) | (None, _, None) => {}
        _ => fail("ttft_after_lease_ms is first_token_at - lease_at"),
    }
    match (ms("generation_ms"), first, last) {
        (Some(generation), Some(first), Some(last)) if close_to(generation, first, last) => {}
        (None, None, None) => {}
        _ => fail("generation_ms is last_token_at - first_token_at, all or none"),
    }
    if let Some(headers) = ms("upstream_headers_ms")
        && headers > ms("total_ms").unwrap()
    {
        fail("upstream_headers_ms <= total_ms");
    }
    if !v["upstream_status"].is_null() && v["upstream_headers_ms"].is_null() {
        fail("an upstream status comes with upstream_headers_ms");
    }
    if v["model_resolved"].is_null() && !(v["upstream_model"].is_null() && lease.is_none()) {
        fail("nothing is resolved, upstream or admitted before resolution");
    }
    if v["model_switch"] == json!(true) && lease.is_none() {
        fail("model_switch is false before admission");
    }
    if !v["model_requested"].is_null() && v["model_resolved"].is_null() {
        fail("a recognised model is resolved");
    }
    // A request that arrived while the supervisor was unreachable has a proxy-made ID
    // (`proxy-PID-STARTMS-N`, see docs/decisions.md); its arrival_seq is assigned later.
    let request_id = &rec.request_id;
    if !request_id.starts_with("proxy-") && !request_id.ends_with(&format!("-{}", rec.arrival_seq))
    {
        fail("request_id ends with the arrival sequence");
    }
}

/// [`assert_schema`] for each record, plus: seqs, arrival numbers and request IDs unique, every
/// request ID of the form `INSTANCE-ARRIVAL_SEQ` (except the proxy-made `proxy-` ones).
pub fn assert_all_schema(records: &[Record], instance_id: &str) {
    let mut seqs = HashSet::new();
    let mut ids = HashSet::new();
    let mut arrivals = HashSet::new();
    for rec in records {
        assert_schema(rec);
        assert!(seqs.insert(rec.seq), "duplicate seq: {rec}");
        assert!(
            ids.insert(rec.request_id.clone()),
            "duplicate request_id: {rec}"
        );
        assert!(
            arrivals.insert(rec.arrival_seq),
            "duplicate arrival_seq: {rec}"
        );
        if !rec.request_id.starts_with("proxy-") {
            assert_eq!(
                rec.request_id,
                format!("{instance_id}-{}", rec.arrival_seq),
                "request_id is the instance and the arrival sequence"
            );
        }
    }
}

/// Merges the top-level `keys` (an object) into the config and rewrites its file (for the
/// request log keys, whose paths live inside the test directory, known only after `build`).
pub fn set_config_keys(config: &mut crate::config::TestConfig, keys: Value) {
    let Value::Object(keys) = keys else {
        panic!("set_config_keys takes an object");
    };
    let root = config
        .json
        .as_object_mut()
        .expect("the config is an object");
    root.extend(keys);
    let text = serde_json::to_string_pretty(&config.json).expect("serialize the config");
    std::fs::write(&config.path, text)
        .unwrap_or_else(|err| panic!("write {}: {err}", config.path.display()));
}

/// Configures a JSONL request log at `DIR/log/requests.jsonl` (a private 0700 directory) with
/// any further request log keys in `extra`, and returns the file's path.
pub fn with_request_log(
    config: &mut crate::config::TestConfig,
    extra: Value,
) -> std::path::PathBuf {
    let dir = config.dir.subdir("log", 0o700);
    let path = dir.join("requests.jsonl");
    let mut keys = json!({ "request_log_path": path });
    if let Value::Object(extra) = extra {
        keys.as_object_mut().expect("object").extend(extra);
    }
    set_config_keys(config, keys);
    path
}

/// Waits until the record with `request_id` exists and returns it.
pub fn wait_record(addr: SocketAddr, request_id: &str) -> Record {
    poll_for(DEADLINE, format!("the record of {request_id}"), || {
        all_records(addr)
            .into_iter()
            .find(|r| r.request_id == request_id)
    })
}

/// Waits until a record satisfying `pred` exists and returns it (for requests whose ID the
/// client never saw: no response headers arrived).
pub fn wait_record_where(
    addr: SocketAddr,
    what: &str,
    mut pred: impl FnMut(&Record) -> bool,
) -> Record {
    poll_for(DEADLINE, format!("a record: {what}"), || {
        all_records(addr).into_iter().find(|r| pred(r))
    })
}

/// Asserts that each member of the object `expected` equals the record's field, written in
/// the spec's own names and JSON values (a table of what a record of each kind says). A name
/// the record does not have fails, rather than comparing against a missing value's null.
pub fn assert_fields(rec: &Record, expected: Value) {
    let json = rec.json();
    for (key, value) in expected.as_object().expect("an object of expected fields") {
        let field = json
            .get(key)
            .unwrap_or_else(|| panic!("a record has no field {key}: {rec}"));
        assert_eq!(field, value, "field {key} of {rec}");
    }
}
