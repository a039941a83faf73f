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
//!   that switched to it (a model never seen loading takes 20 s).
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
//! `request_id`) counts once.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use strata_protocol::record::{Reason, RequestRecord, SCHEMA_VERSION};
use strata_protocol::wire::ServiceTier;

use super::timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline};
use super::workload::{ModelParams, Request, Workload};

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

/// Milliseconds since the Unix epoch of a record timestamp
/// (`2025-11-30T03:40:00.250Z`).
pub fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[10] != b'T' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> { text.get(range)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms;
    u64::try_from(ms).ok()
}

fn median(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

/// Replays the records in `texts` (the JSONL files, in any order).
pub fn replay(texts: &[&str]) -> Replay {
    let mut unparsed = 0;
    let mut skipped = 0;
    let mut seen = HashSet::new();
    let mut records: Vec<(u64, RequestRecord, String)> = Vec::new();
    for text in texts {
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            let record: RequestRecord = match serde_json::from_str(line) {
                Ok(record) => record,
                Err(_) => {
                    unparsed += 1;
                    continue;
                }
            };
            let arrived = parse_timestamp(&record.arrived_at);
            let (Some(arrived), true) = (arrived, record.schema_version == SCHEMA_VERSION) else {
                unparsed += 1;
                continue;
            };
            if !seen.insert(record.request_id.clone()) {
                skipped += 1;
                continue;
            }
            let Some(model) = record.model_resolved.clone() else {
                skipped += 1;
                continue;
            };
            records.push((arrived, record, model));
        }
    }
    records.sort_by_key(|(arrived, record, _)| (*arrived, record.arrival_seq));
    let t0 = records.first().map_or(0, |(arrived, _, _)| *arrived);

    // What each record tells of service and loads.
    let served = |record: &RequestRecord| {
        record.queue_wait_ms.map(|wait| {
            record
                .total_ms
                .saturating_sub(wait + record.model_load_ms.unwrap_or(0))
        })
    };
    let mut services: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut loads: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, record, model) in &records {
        if record.reason == Reason::Completed
            && let Some(service) = served(record)
        {
            services.entry(model).or_default().push(service);
        }
        if record.model_switch
            && let Some(load) = record.model_load_ms
        {
            loads.entry(model).or_default().push(load);
        }
    }
    let median_service: BTreeMap<&str, u64> = services
        .into_iter()
        .filter_map(|(model, values)| Some((model, median(values)?)))
        .collect();
    let mut models = BTreeMap::new();
    for (_, _, model) in &records {
        let load = loads
            .get(model.as_str())
            .and_then(|values| median(values.clone()))
            .map_or(Duration::from_secs(20), Duration::from_millis);
        models.insert(
            model.clone(),
            ModelParams {
                load,
                fail_rate: 0.0,
            },
        );
    }

    let mut requests = Vec::with_capacity(records.len());
    let mut observed = Timeline::default();
    for (arrived, record, model) in &records {
        let at = Duration::from_millis(arrived - t0);
        let service = served(record)
            .or_else(|| median_service.get(model.as_str()).copied())
            .unwrap_or(0);
        requests.push(Request {
            at,
            model: model.clone(),
            tier: ServiceTier::Default,
            service: Duration::from_millis(service),
            patience: (record.reason == Reason::ClientDisconnect)
                .then(|| Duration::from_millis(record.total_ms)),
            cache_rank: None,
        });
        let ms = Duration::from_millis;
        let admitted = record.queue_wait_ms.map(|wait| at + ms(wait));
        observed.requests.push(RequestSpan {
            model: model.clone(),
            tier: ServiceTier::Default,
            arrival: at,
            admitted: admitted.filter(|_| record.model_load_ms.is_some()),
            granted: admitted.map(|at| at + ms(record.model_load_ms.unwrap_or(0))),
            end: at + ms(record.total_ms),
            outcome: record.reason,
        });
        // The load this record switched to (or joined), if it saw one.
        if let (Some(start), Some(load)) = (admitted, record.model_load_ms) {
            let failed = record.reason == Reason::ModelLoadError;
            let end = start + ms(load);
            let joined = observed.loads.iter_mut().rev().find(|span| {
                span.model == *model && start <= span.end && end + ms(1000) >= span.end
            });
            match joined {
                Some(span) => {
                    span.start = span.start.min(start);
                    if failed {
                        span.outcome = LoadOutcome::Failed;
                    }
                }
                None => observed.loads.push(LoadSpan {
                    model: model.clone(),
                    start,
                    end,
                    outcome: if failed {
                        LoadOutcome::Failed
                    } else {
                        LoadOutcome::Verified { wasted: false }
                    },
                }),
            }
        }
    }
    let count = records.len();
    Replay {
        workload: Workload {
            name: "records".into(),
            description: format!("{count} replayed records (open loop)"),
            seed: 0,
            models,
            requests,
            agents: Vec::new(),
        },
        observed,
        records: count,
        unparsed,
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_to_unix_milliseconds() {
        assert_eq!(
            parse_timestamp("2025-11-30T03:40:00.250Z"),
            Some(1_764_474_000_250)
        );
        assert_eq!(parse_timestamp("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            parse_timestamp("2024-02-29T23:59:59.999Z"),
            Some(1_709_251_199_999)
        );
        for bad in [
            "",
            "2025-11-30 03:40:00.250Z",
            "2025-13-30T03:40:00.250Z",
            "x",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }
}
