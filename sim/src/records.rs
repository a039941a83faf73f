//! Replay of the router's own request log: the records of a real run
//! become an open-loop workload, and the timeline of what the real router
//! did with it.
//!
//! From each record (schema version 1):
//! - its arrival (`arrived_at`) and model (`model_resolved`; records
//!   without one were rejected before routing and are skipped);
//! - its service time, `total_ms - queue_wait_ms - model_load_ms` when it
//!   held a lease; a request that never got one (a failed load, a legacy
//!   queue timeout) is given its model's median observed service;
//! - a client that gave up (`client_disconnect`) gives up at its
//!   `total_ms` again;
//! - each model's load time: the median `model_load_ms` of the records
//!   that switched to it (a model never seen loading takes 20 s). The
//!   records do not say how much of the weights was resident when a load
//!   started (the prefetch's effect is in `/metrics`, not in the log), so
//!   a replay assumes that median for every load, warm equal to cold: no
//!   policy's load is shortened by the prefetch. To see what it is worth
//!   on the replayed mix, write the replay as a workload file
//!   (`--write-workload`), add each model's `warm_load_ms` and
//!   `weights_mb`, and simulate that file.
//!
//! Records carry no service tier, so every replayed request is `default`.
//! Replay is **open loop**: arrivals stay where they were. An agent sends
//! its next request when its previous one ends, so under a policy that
//! serves it sooner (or later) the real agent would have come back sooner
//! (or later); replay cannot show that feedback, and a policy's advantage
//! for agents is understated by it (use the `agents` workload for the
//! closed loop).
//!
//! Lines that do not parse (a truncated last line, another schema version)
//! are counted and reported, never fatal; a record seen twice (the same
//! `request_id`) counts once. A version 1 record with a value out of range
//! refuses the replay, naming its line: a `total_ms`, `queue_wait_ms` or
//! `model_load_ms` that is negative, fractional or more than [`MAX_MS`]
//! (365 days), an `arrival_seq` that is not a whole number, or any number
//! too large for JSON's doubles.
//!
//! Reading is bounded and linear: [`Reader::read`] takes at most the bytes
//! it is given leave to from a source (one that never ends is refused past
//! them), holds one line at a time (a line longer than [`MAX_LINE`] is no
//! record: counted as unparsed and skipped without being held), and keeps
//! a few figures of each record; each model's medians are taken once, and
//! the load a record joined is found through an index, not a scan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{BufRead, Read};
use std::time::Duration;

use serde_json::Value;
use strata_protocol::record::{Reason, RequestRecord, SCHEMA_VERSION, parse_unix_ms};
use strata_protocol::wire::ServiceTier;

use crate::timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline};
use crate::workload::{MAX_MS, ModelParams, Request, Workload};

/// The longest line read as a possible record (a record is a few
/// kilobytes).
pub const MAX_LINE: usize = 1 << 20;

/// The most bytes `strata-ctl simulate --records` reads from one file:
/// 1 GiB, the largest `request_log_max_bytes`, so no file the router writes
/// is larger (about a million records).
pub const MAX_LOG_BYTES: u64 = 1 << 30;

/// A replayed log.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub workload: Workload,
    /// What the real router did.
    pub observed: Timeline,
    /// Records replayed.
    pub records: usize,
    /// Lines that did not parse as a version 1 record.
    pub unparsed: usize,
    /// Records without a resolved model (rejected before routing), and
    /// records seen twice.
    pub skipped: usize,
}

/// A log that cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// 1-based; 0 for the source as a whole.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for RecordError {}

fn median(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

/// Replays the records in `texts` (the JSONL files, in any order); an
/// error names the line in its text.
pub fn replay(texts: &[&str]) -> Result<Replay, RecordError> {
    let mut reader = Reader::new();
    for text in texts {
        for (index, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                reader.line(index + 1, line)?;
            }
        }
    }
    Ok(reader.finish())
}

/// What replay keeps of one record.
#[derive(Debug)]
struct Row {
    arrived: u64,
    arrival_seq: u64,
    model: usize,
    queue_wait: Option<u64>,
    load: Option<u64>,
    total: u64,
    reason: Reason,
    switch: bool,
}

/// Reads logs line by line ([`Reader::read`], or [`Reader::line`] for each
/// line), then replays what it read ([`Reader::finish`]).
#[derive(Debug, Default)]
pub struct Reader {
    models: Vec<String>,
    model_ids: HashMap<String, usize>,
    seen: HashSet<String>,
    rows: Vec<Row>,
    unparsed: usize,
    skipped: usize,
}

impl Reader {
    pub fn new() -> Reader {
        Reader::default()
    }

    /// Reads one log, its lines numbered from 1, taking at most `limit`
    /// bytes from `source`: a source with more is refused (line 0).
    pub fn read(&mut self, source: impl BufRead, limit: u64) -> Result<(), RecordError> {
        let io = |err: std::io::Error| RecordError {
            line: 0,
            reason: format!("cannot read: {err}"),
        };
        // One byte past the limit tells a source that has more.
        let mut source = source.take(limit.saturating_add(1));
        let mut line = Vec::new();
        let mut number = 0;
        loop {
            line.clear();
            let read = (&mut source)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(io)?;
            if read == 0 {
                return Ok(());
            }
            number += 1;
            let whole = line.last() == Some(&b'\n') || line.len() <= MAX_LINE;
            if !whole {
                source.skip_until(b'\n').map_err(io)?;
            }
            if source.limit() == 0 {
                return Err(RecordError {
                    line: 0,
                    reason: format!("more than {limit} bytes: not read past them"),
                });
            }
            if !whole {
                self.unparsed += 1;
                continue;
            }
            // A torn last write may end inside a character: such a line
            // fails to parse and is counted, the rest is read.
            let text = match std::str::from_utf8(&line) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(&line),
            };
            let text = text.strip_suffix('\n').unwrap_or(&text);
            if !text.trim().is_empty() {
                self.line(number, text)?;
            }
        }
    }

    /// One line of a log (`number` names it in an error).
    pub fn line(&mut self, number: usize, text: &str) -> Result<(), RecordError> {
        let record: RequestRecord = match serde_json::from_str(text) {
            Ok(record) => record,
            Err(_) => {
                out_of_range_unparsed(number, text)?;
                self.unparsed += 1;
                return Ok(());
            }
        };
        let arrived = parse_unix_ms(&record.arrived_at);
        let (Some(arrived), true) = (arrived, record.schema_version == SCHEMA_VERSION) else {
            self.unparsed += 1;
            return Ok(());
        };
        for (name, value) in [
            ("total_ms", Some(record.total_ms)),
            ("queue_wait_ms", record.queue_wait_ms),
            ("model_load_ms", record.model_load_ms),
        ] {
            if let Some(value) = value.filter(|value| *value > MAX_MS) {
                return Err(RecordError {
                    line: number,
                    reason: format!("{name} {value} is out of range ({})", duration_range()),
                });
            }
        }
        if !self.seen.insert(record.request_id) {
            self.skipped += 1;
            return Ok(());
        }
        let Some(model) = record.model_resolved else {
            self.skipped += 1;
            return Ok(());
        };
        let model = match self.model_ids.get(&model) {
            Some(id) => *id,
            None => {
                self.models.push(model.clone());
                self.model_ids.insert(model, self.models.len() - 1);
                self.models.len() - 1
            }
        };
        self.rows.push(Row {
            arrived,
            arrival_seq: record.arrival_seq,
            model,
            queue_wait: record.queue_wait_ms,
            load: record.model_load_ms,
            total: record.total_ms,
            reason: record.reason,
            switch: record.model_switch,
        });
        Ok(())
    }

    /// The replay of every record read.
    pub fn finish(self) -> Replay {
        let Reader {
            models,
            mut rows,
            unparsed,
            skipped,
            seen,
            model_ids,
        } = self;
        drop((seen, model_ids));
        rows.sort_by_key(|row| (row.arrived, row.arrival_seq));
        let t0 = rows.first().map_or(0, |row| row.arrived);

        // What each record tells of service and loads.
        let served = |row: &Row| {
            row.queue_wait.map(|wait| {
                row.total
                    .saturating_sub(wait.saturating_add(row.load.unwrap_or(0)))
            })
        };
        let mut services = vec![Vec::new(); models.len()];
        let mut loads = vec![Vec::new(); models.len()];
        for row in &rows {
            if row.reason == Reason::Completed
                && let Some(service) = served(row)
            {
                services[row.model].push(service);
            }
            if row.switch
                && let Some(load) = row.load
            {
                loads[row.model].push(load);
            }
        }
        let median_service: Vec<Option<u64>> = services.into_iter().map(median).collect();
        let params: BTreeMap<String, ModelParams> = loads
            .into_iter()
            .zip(&models)
            .map(|(values, model)| {
                let load = median(values).map_or(Duration::from_secs(20), Duration::from_millis);
                let params = ModelParams {
                    load,
                    fail_rate: 0.0,
                };
                (model.clone(), params)
            })
            .collect();

        let ms = Duration::from_millis;
        let mut requests = Vec::with_capacity(rows.len());
        let mut observed = Timeline::default();
        let mut joins = Joins::new(&rows, t0);
        for row in &rows {
            let model = &models[row.model];
            let at = ms(row.arrived - t0);
            let service = served(row).or(median_service[row.model]).unwrap_or(0);
            requests.push(Request {
                at,
                model: model.clone(),
                tier: ServiceTier::Default,
                service: ms(service),
                patience: (row.reason == Reason::ClientDisconnect).then(|| ms(row.total)),
                cache_rank: None,
            });
            let admitted = row.queue_wait.map(|wait| at + ms(wait));
            observed.requests.push(RequestSpan {
                model: model.clone(),
                tier: ServiceTier::Default,
                arrival: at,
                admitted: admitted.filter(|_| row.load.is_some()),
                granted: admitted.map(|at| at + ms(row.load.unwrap_or(0))),
                end: at + ms(row.total),
                outcome: row.reason,
            });
            // The load this record switched to (or joined), if it saw one:
            // the latest of its model that ended between the record's
            // admission and a second after its load.
            if let (Some(start), Some(load)) = (admitted, row.load) {
                let failed = row.reason == Reason::ModelLoadError;
                let end = start + ms(load);
                match joins.latest(row.model, start, end + ms(1000)) {
                    Some(index) => {
                        let span = &mut observed.loads[index];
                        span.start = span.start.min(start);
                        if failed {
                            span.outcome = LoadOutcome::Failed;
                        }
                    }
                    None => {
                        joins.add(row.model, end, observed.loads.len());
                        observed.loads.push(LoadSpan {
                            model: model.clone(),
                            start,
                            end,
                            outcome: if failed {
                                LoadOutcome::Failed
                            } else {
                                LoadOutcome::Verified { wasted: false }
                            },
                            reason: None,
                        });
                    }
                }
            }
        }
        let count = rows.len();
        Replay {
            workload: Workload {
                name: "records".into(),
                description: format!("{count} replayed records (open loop)"),
                seed: 0,
                models: params,
                // The records do not say how much of a model's weights was
                // resident at its loads: every replayed load is cold.
                warm: BTreeMap::new(),
                requests,
                agents: Vec::new(),
            },
            observed,
            records: count,
            unparsed,
            skipped,
        }
    }
}

fn duration_range() -> String {
    format!("a whole number of milliseconds from 0 to {MAX_MS}, 365 days")
}

/// A line that is no record may still be a version 1 record with a value
/// out of range (negative, fractional, past `u64` or past a double).
fn out_of_range_unparsed(number: usize, text: &str) -> Result<(), RecordError> {
    let refuse = |reason: String| {
        Err(RecordError {
            line: number,
            reason,
        })
    };
    let fields = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => return Ok(()),
        Err(err) if err.to_string().starts_with("number out of range") => {
            return refuse(format!("a number out of range at column {}", err.column()));
        }
        Err(_) => return Ok(()),
    };
    if fields.get("schema_version").and_then(Value::as_u64) != Some(u64::from(SCHEMA_VERSION)) {
        return Ok(());
    }
    for name in ["total_ms", "queue_wait_ms", "model_load_ms", "arrival_seq"] {
        if let Some(Value::Number(value)) = fields.get(name)
            && !value.is_u64()
        {
            let range = if name == "arrival_seq" {
                "a whole number, 0 or more".to_owned()
            } else {
                duration_range()
            };
            return refuse(format!("{name} {value} is out of range ({range})"));
        }
    }
    Ok(())
}

/// The observed loads by model and end, for the latest one ending in a
/// window: a max segment tree over every end a load could have.
struct Joins {
    /// (model, end in ms), sorted.
    keys: Vec<(usize, u64)>,
    /// Over `keys`' positions: 1 + the latest load's index, 0 for none.
    tree: Vec<usize>,
}

impl Joins {
    fn new(rows: &[Row], t0: u64) -> Joins {
        let mut keys: Vec<(usize, u64)> = rows
            .iter()
            .filter_map(|row| {
                let (wait, load) = (row.queue_wait?, row.load?);
                let end = (row.arrived - t0).saturating_add(wait).saturating_add(load);
                Some((row.model, end))
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let tree = vec![0; 2 * keys.len()];
        Joins { keys, tree }
    }

    fn millis(at: Duration) -> u64 {
        u64::try_from(at.as_millis()).unwrap_or(u64::MAX)
    }

    fn add(&mut self, model: usize, end: Duration, index: usize) {
        let key = (model, Joins::millis(end));
        let mut at = self.keys.binary_search(&key).expect("every end is a key") + self.keys.len();
        self.tree[at] = self.tree[at].max(index + 1);
        while at > 1 {
            at /= 2;
            self.tree[at] = self.tree[2 * at].max(self.tree[2 * at + 1]);
        }
    }

    /// The latest load of `model` that ended in `from..=to`.
    fn latest(&self, model: usize, from: Duration, to: Duration) -> Option<usize> {
        let n = self.keys.len();
        let mut low = self
            .keys
            .partition_point(|key| *key < (model, Joins::millis(from)))
            + n;
        let mut high = self
            .keys
            .partition_point(|key| *key <= (model, Joins::millis(to)))
            + n;
        let mut best = 0;
        while low < high {
            if low % 2 == 1 {
                best = best.max(self.tree[low]);
                low += 1;
            }
            if high % 2 == 1 {
                high -= 1;
                best = best.max(self.tree[high]);
            }
            low /= 2;
            high /= 2;
        }
        best.checked_sub(1)
    }
}

#[cfg(test)]
pub(crate) mod reading {
    use std::io::{BufReader, Read};

    use serde_json::json;

    use super::*;
    use crate::rng::Rng;

    /// A record as the router writes it.
    pub(crate) fn record(
        seq: u64,
        model: &str,
        arrived_ms: u64,
        wait: u64,
        load: Option<u64>,
    ) -> Value {
        let at = |ms: u64| {
            let (secs, ms) = (ms / 1000, ms % 1000);
            format!(
                "2026-12-01T{:02}:{:02}:{:02}.{ms:03}Z",
                secs / 3600,
                secs / 60 % 60,
                secs % 60
            )
        };
        json!({
            "schema_version": 1, "seq": seq, "arrival_seq": seq,
            "request_id": format!("42-1-{seq}"), "endpoint": "/v1/chat/completions",
            "stream": true, "model_requested": model, "model_resolved": model,
            "upstream_model": model, "arrived_at": at(arrived_ms),
            "completed_at": at(arrived_ms), "lease_at": null, "first_token_at": null,
            "last_token_at": null, "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0,
            "queue_wait_ms": wait, "model_switch": load.is_some(), "model_load_ms": load,
            "upstream_headers_ms": null, "ttft_ms": null, "ttft_after_lease_ms": null,
            "generation_ms": null, "total_ms": wait + load.unwrap_or(0) + 500,
            "prompt_tokens": null, "completion_tokens": null, "reasoning_tokens": null,
            "prompt_n": null, "cache_n": null, "predicted_n": null, "prompt_ms": null,
            "predicted_ms": null, "prompt_per_second": null, "predicted_per_second": null,
            "finish_reason": "stop", "status": 200, "upstream_status": 200, "success": true,
            "reason": "completed", "response_bytes": 10, "disconnect_phase": null
        })
    }

    pub(crate) fn lines(records: &[Value]) -> String {
        records.iter().map(|r| format!("{r}\n")).collect()
    }

    #[test]
    fn a_value_out_of_range_is_refused_with_its_line() {
        let cases: [(&str, Value, &str); 7] = [
            (
                "total_ms",
                json!(u64::MAX),
                "total_ms 18446744073709551615 is out of range",
            ),
            (
                "total_ms",
                json!(MAX_MS + 1),
                "total_ms 31536000001 is out of range",
            ),
            ("total_ms", json!(-5), "total_ms -5 is out of range"),
            (
                "queue_wait_ms",
                json!(u64::MAX),
                "queue_wait_ms 18446744073709551615",
            ),
            (
                "queue_wait_ms",
                json!(1.5),
                "queue_wait_ms 1.5 is out of range",
            ),
            (
                "model_load_ms",
                json!(-1),
                "model_load_ms -1 is out of range",
            ),
            ("arrival_seq", json!(-1), "arrival_seq -1 is out of range"),
        ];
        for (field, value, message) in cases {
            let mut bad = record(2, "a", 1000, 0, Some(1));
            bad[field] = value;
            let text = format!("{}\n{bad}\n", record(1, "a", 0, 0, None));
            let err = replay(&[&text]).unwrap_err();
            assert_eq!(err.line, 2, "{field}: {err}");
            assert!(err.to_string().starts_with("line 2: "), "{err}");
            assert!(err.reason.contains(message), "{field}: {err}");
        }
        // A number past a double, and the largest accepted values.
        let huge = record(1, "a", 0, 0, None)
            .to_string()
            .replace("\"total_ms\":500", "\"total_ms\":1e400");
        let err = replay(&[&huge]).unwrap_err();
        assert_eq!(err.line, 1, "{err}");
        assert!(err.reason.contains("number out of range"), "{err}");
        let mut largest = record(1, "a", 0, MAX_MS, Some(MAX_MS));
        largest["total_ms"] = json!(MAX_MS);
        let replayed = replay(&[&largest.to_string()]).unwrap();
        assert_eq!(replayed.records, 1);
        // Other schema versions and torn lines are still only counted.
        let mut other = record(1, "a", 0, 0, None);
        other["schema_version"] = json!(2);
        other["total_ms"] = json!(-1);
        let replayed = replay(&[&format!("{other}\n{{\"schema_version\": 1, \"tot")]).unwrap();
        assert_eq!((replayed.records, replayed.unparsed), (0, 2));
    }

    /// A source that never ends: `line` again and again.
    struct Endless {
        line: Vec<u8>,
        at: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            for byte in buf.iter_mut() {
                *byte = self.line[self.at];
                self.at = (self.at + 1) % self.line.len();
            }
            Ok(buf.len())
        }
    }

    #[test]
    fn a_source_that_never_ends_is_refused_past_the_limit() {
        let limit = 1 << 20;
        // Records, each seen again and again (one request ID).
        let line = format!("{}\n", record(1, "a", 0, 0, None)).into_bytes();
        let mut reader = Reader::new();
        let err = reader
            .read(BufReader::new(Endless { line, at: 0 }), limit)
            .unwrap_err();
        assert_eq!(err.line, 0);
        assert_eq!(err.reason, "more than 1048576 bytes: not read past them");
        // No line at all (zeros, as from /dev/zero).
        let err = Reader::new()
            .read(BufReader::new(std::io::repeat(0)), limit)
            .unwrap_err();
        assert_eq!(err.reason, "more than 1048576 bytes: not read past them");
        // Exactly the limit is read.
        let text = lines(&[record(1, "a", 0, 0, None)]);
        let mut reader = Reader::new();
        reader.read(text.as_bytes(), text.len() as u64).unwrap();
        assert_eq!(reader.finish().records, 1);
    }

    #[test]
    fn a_line_too_long_for_a_record_is_counted_and_skipped() {
        let mut text = "x".repeat(MAX_LINE + 10);
        text.push('\n');
        text.push_str(&lines(&[record(1, "a", 0, 0, None)]));
        let mut reader = Reader::new();
        reader.read(text.as_bytes(), u64::MAX).unwrap();
        let replayed = reader.finish();
        assert_eq!((replayed.records, replayed.unparsed), (1, 1));
    }

    /// The loads the records show, found by scanning every earlier load
    /// (the simple way the index replaces).
    fn loads_by_scanning(replayed: &Replay) -> Vec<LoadSpan> {
        let ms = Duration::from_millis;
        let mut loads: Vec<LoadSpan> = Vec::new();
        for request in &replayed.observed.requests {
            let (Some(start), Some(granted)) = (request.admitted, request.granted) else {
                continue;
            };
            let joined = loads.iter_mut().rev().find(|span| {
                span.model == request.model && start <= span.end && granted + ms(1000) >= span.end
            });
            match joined {
                Some(span) => span.start = span.start.min(start),
                None => loads.push(LoadSpan {
                    model: request.model.clone(),
                    start,
                    end: granted,
                    outcome: LoadOutcome::Verified { wasted: false },
                    reason: None,
                }),
            }
        }
        loads
    }

    #[test]
    fn the_load_a_record_joined_is_the_one_a_scan_finds() {
        let mut rng = Rng::new(7);
        let records: Vec<Value> = (1..=3000)
            .map(|seq| {
                let model = ["a", "b", "c"][rng.below(3)];
                let load = (rng.below(3) > 0).then(|| 500 + rng.below(30_000) as u64);
                let wait = rng.below(20_000) as u64;
                record(seq, model, seq * 700, wait, load)
            })
            .collect();
        let replayed = replay(&[&lines(&records)]).unwrap();
        assert_eq!(replayed.observed.loads, loads_by_scanning(&replayed));
        assert!(replayed.observed.loads.len() > 500);
        let with_load = records
            .iter()
            .filter(|r| r["model_load_ms"].is_u64())
            .count();
        let joined = with_load - replayed.observed.loads.len();
        assert!(joined > 100, "{joined} records joined a load");
    }
}
