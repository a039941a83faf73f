//! One set of figures for every policy, computed from a [`Timeline`] alone.
//!
//! - `swaps`: loads started (the first, cold one included; failed and
//!   abandoned ones too).
//! - `switches`: switches and unloads by reason (`grace_expired`,
//!   `bound_due`, `queue_drained`, `priority`, `idle`, `abandoned`: see
//!   `SwitchReason`); a cold load is no switch, and a replay of records
//!   knows no reasons.
//! - `load_s`: their total duration; `wasted_load_s`: the part of it spent
//!   on loads that finished with no ticket left for their model, or were
//!   abandoned.
//! - `busy_fraction`: the time with at least one generation running, over
//!   the makespan.
//! - `completed`, and `failed` by record reason (`client_disconnect`,
//!   `model_load_error`, `queue_timeout`, `queue_full`, ...).
//! - `makespan_s`: first arrival to the last request's end.
//! - `wait_ms`: arrival to the start of generation (the queue wait plus
//!   any load waited for) of every request that started, by tier and by
//!   model: `p50`, `p95`, `p99` (nearest rank) and `max`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use strata_protocol::record::Reason;

use crate::forecast::ForecastFigures;
use crate::timeline::Timeline;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    /// Of `values` in milliseconds (sorted here).
    pub fn of(mut values: Vec<u64>) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let rank = |p: f64| {
            let index = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
            values[index]
        };
        Some(Percentiles {
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: *values.last().expect("not empty"),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waits {
    pub by_tier: BTreeMap<String, Percentiles>,
    pub by_model: BTreeMap<String, Percentiles>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub swaps: u64,
    pub switches: BTreeMap<String, u64>,
    pub load_s: f64,
    pub wasted_load_s: f64,
    pub busy_fraction: f64,
    pub completed: u64,
    pub failed: BTreeMap<String, u64>,
    pub makespan_s: f64,
    pub wait_ms: Waits,
    /// `prefetch_predict`'s forecasts (a router run with it on only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<ForecastFigures>,
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// Seconds with millisecond precision (stable in tables and JSON).
fn secs(duration: Duration) -> f64 {
    (duration.as_millis() as f64) / 1000.0
}

impl Metrics {
    pub fn of(timeline: &Timeline) -> Metrics {
        let (start, end) = timeline.span();
        let makespan = end - start;
        let load: Duration = timeline.loads.iter().map(|l| l.duration()).sum();
        let wasted: Duration = timeline
            .loads
            .iter()
            .filter(|l| l.is_wasted())
            .map(|l| l.duration())
            .sum();
        let mut failed = BTreeMap::new();
        let mut completed = 0;
        for request in &timeline.requests {
            match request.outcome {
                Reason::Completed => completed += 1,
                other => *failed.entry(other.as_str().to_owned()).or_default() += 1,
            }
        }
        let mut by_tier: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut by_model: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for request in &timeline.requests {
            if let Some(wait) = request.wait() {
                by_tier
                    .entry(request.tier.as_str().to_owned())
                    .or_default()
                    .push(ms(wait));
                by_model
                    .entry(request.model.clone())
                    .or_default()
                    .push(ms(wait));
            }
        }
        let summarize = |groups: BTreeMap<String, Vec<u64>>| {
            groups
                .into_iter()
                .filter_map(|(key, values)| Some((key, Percentiles::of(values)?)))
                .collect()
        };
        let busy = busy_time(timeline);
        Metrics {
            swaps: timeline.loads.len() as u64,
            switches: timeline
                .switches_by_reason()
                .into_iter()
                .map(|(reason, count)| (reason.as_str().to_owned(), count))
                .collect(),
            load_s: secs(load),
            wasted_load_s: secs(wasted),
            busy_fraction: if makespan.is_zero() {
                0.0
            } else {
                (busy.as_secs_f64() / makespan.as_secs_f64() * 1000.0).round() / 1000.0
            },
            completed,
            failed,
            makespan_s: secs(makespan),
            wait_ms: Waits {
                by_tier: summarize(by_tier),
                by_model: summarize(by_model),
            },
            forecast: timeline.forecasts.as_ref().map(|count| count.figures()),
        }
    }

    /// The worst wait of any model: the minority model's, usually.
    pub fn worst_model_wait_ms(&self) -> u64 {
        self.wait_ms
            .by_model
            .values()
            .map(|p| p.max)
            .max()
            .unwrap_or(0)
    }
}

/// The union of the generating intervals.
fn busy_time(timeline: &Timeline) -> Duration {
    let mut spans: Vec<(Duration, Duration)> = timeline
        .requests
        .iter()
        .filter_map(|r| r.granted.map(|at| (at, r.end.max(at))))
        .collect();
    spans.sort_unstable();
    let mut busy = Duration::ZERO;
    let mut current: Option<(Duration, Duration)> = None;
    for (start, end) in spans {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                busy += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    if let Some((s, e)) = current {
        busy += e - s;
    }
    busy
}

#[cfg(test)]
mod tests {
    use strata_protocol::wire::ServiceTier;

    use super::*;
    use crate::timeline::{LoadOutcome, LoadSpan, RequestSpan};

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).collect()).unwrap();
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50, 95, 99, 100));
        let p = Percentiles::of(vec![7]).unwrap();
        assert_eq!((p.p50, p.max), (7, 7));
        assert_eq!(Percentiles::of(Vec::new()), None);
    }

    #[test]
    fn figures_come_from_the_timeline() {
        let request = |model: &str, arrival, granted: Option<u64>, end, outcome| RequestSpan {
            model: model.into(),
            tier: ServiceTier::Default,
            arrival: s(arrival),
            admitted: None,
            granted: granted.map(s),
            end: s(end),
            outcome,
        };
        let timeline = Timeline {
            unloads: Vec::new(),
            forecasts: None,
            loads: vec![
                LoadSpan {
                    model: "a".into(),
                    start: s(0),
                    end: s(10),
                    outcome: LoadOutcome::Verified { wasted: false },
                    reason: None,
                },
                LoadSpan {
                    model: "b".into(),
                    start: s(30),
                    end: s(40),
                    outcome: LoadOutcome::Verified { wasted: true },
                    reason: None,
                },
            ],
            requests: vec![
                request("a", 0, Some(10), 20, Reason::Completed),
                request("a", 5, Some(15), 25, Reason::Completed),
                request("b", 30, None, 35, Reason::ClientDisconnect),
            ],
        };
        let m = Metrics::of(&timeline);
        assert_eq!(m.swaps, 2);
        assert_eq!((m.load_s, m.wasted_load_s), (20.0, 10.0));
        assert_eq!(m.makespan_s, 35.0);
        // Generating 10..25 of 0..35.
        assert_eq!(m.busy_fraction, (15.0f64 / 35.0 * 1000.0).round() / 1000.0);
        assert_eq!(m.completed, 2);
        assert_eq!(m.failed["client_disconnect"], 1);
        assert_eq!(m.wait_ms.by_model["a"].max, 10_000);
        assert!(!m.wait_ms.by_model.contains_key("b"), "it never started");
        assert_eq!(m.wait_ms.by_tier["default"].p50, 10_000);
    }
}
