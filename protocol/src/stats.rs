//! Router-wide request counters and histograms, kept by the supervisor (the
//! one place that sees every record, so they survive a proxy restart and
//! match `/requests`) and exposed by the proxy in Prometheus form.
//!
//! Label values are only configured model IDs (a record's `model_resolved`,
//! which is one or null) and fixed enums: never client input.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{Reason, RequestRecord};
use crate::wire::ServiceTier;

/// Upper bounds (seconds) of the duration histograms' buckets. They reach
/// 1800 s because a model load may take that long (docs recommend allowing
/// 900 s), and a queue wait or a request's duration includes any load it
/// waited for. The supervisor counts into them and the proxy labels them,
/// so changing them changes the wire's meaning: bump `PROTOCOL_VERSION`.
pub const SECONDS_BUCKETS: [f64; 18] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    900.0, 1800.0,
];

/// Upper bounds (tokens per second) of the decode-rate histogram's buckets.
pub const RATE_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 500.0,
];

/// The `model` label of a record without a resolved model.
pub const NO_MODEL: &str = "none";

/// One histogram: a count per bucket (not cumulative; the last one is
/// `+Inf`), the sum and the count of observations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub buckets: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        if self.buckets.len() != bounds.len() + 1 {
            self.buckets = vec![0; bounds.len() + 1];
        }
        let index = bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(bounds.len());
        self.buckets[index] += 1;
        self.sum += value;
        self.count += 1;
    }

    /// `(upper bound, cumulative count)` for every bucket, `+Inf` last.
    pub fn cumulative<'a>(&'a self, bounds: &'a [f64]) -> impl Iterator<Item = (f64, u64)> + 'a {
        let mut total = 0;
        bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .enumerate()
            .map(move |(index, bound)| {
                total += self.buckets.get(index).copied().unwrap_or(0);
                (bound, total)
            })
    }
}

/// One model's histograms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelHistograms {
    pub queue_wait: Histogram,
    pub model_load: Histogram,
    pub ttft: Histogram,
    pub ttft_after_lease: Histogram,
    pub total: Histogram,
    pub decode_rate: Histogram,
}

/// The labels of `strata_router_requests_total` besides `model`. Plain
/// enums, so counting a record allocates nothing once its series exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestLabels {
    pub reason: Reason,
    /// The status's hundreds (2, 4, 5), or 0 without a status (the client
    /// left first).
    pub status_hundreds: u16,
    pub tier: ServiceTier,
    pub stream: bool,
    /// The record's `success`: false for a response that failed after its
    /// 2xx headers (a stream's in-band error, a cut, a timeout).
    pub success: bool,
}

impl RequestLabels {
    /// The `status_class` label: `2xx` (succeeded), `failed_after_headers`
    /// (sent 2xx headers, then failed: a stream's error travels in band, so
    /// counting it as `2xx` would hide it), `4xx`, `5xx` or `none`.
    pub fn status_class(&self) -> &'static str {
        match self.status_hundreds {
            0 => "none",
            1 => "1xx",
            2 if !self.success => "failed_after_headers",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        }
    }
}

/// Everything counted over the stored records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestStats {
    /// By `model` label, then by the other labels.
    pub requests: BTreeMap<String, BTreeMap<RequestLabels, u64>>,
    pub response_bytes: u64,
    pub by_model: BTreeMap<String, ModelHistograms>,
    /// Tokens the backend reported, by resolved model.
    pub tokens: BTreeMap<String, TokenCounts>,
}

/// One model's token totals, from the records' usage (a record without
/// usage adds nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub prompt: u64,
    pub completion: u64,
}

fn seconds(ms: Option<u64>) -> Option<f64> {
    ms.map(|ms| ms as f64 / 1000.0)
}

/// The decode rate a record shows: the backend's own figure, else the
/// generated tokens after the first over the generation time.
fn decode_rate(record: &RequestRecord) -> Option<f64> {
    if let Some(rate) = record.predicted_per_second.filter(|rate| rate.is_finite()) {
        return Some(rate);
    }
    let tokens = record.completion_tokens.filter(|tokens| *tokens >= 2)?;
    let ms = record.generation_ms.filter(|ms| *ms > 0)?;
    Some((tokens - 1) as f64 / (ms as f64 / 1000.0))
}

impl RequestStats {
    /// Counts one stored record, which waited in `tier`.
    pub fn observe(&mut self, record: &RequestRecord, tier: ServiceTier) {
        let model = record.model_resolved.as_deref().unwrap_or(NO_MODEL);
        let labels = RequestLabels {
            reason: record.reason,
            status_hundreds: record.status.map_or(0, |status| (status / 100).clamp(1, 5)),
            tier,
            stream: record.stream,
            success: record.success,
        };
        *entry(&mut self.requests, model).entry(labels).or_default() += 1;
        self.response_bytes += record.response_bytes;
        if record.model_resolved.is_none() {
            return;
        }
        let tokens = entry(&mut self.tokens, model);
        tokens.prompt += record.prompt_tokens.unwrap_or(0);
        tokens.completion += record.completion_tokens.unwrap_or(0);
        let histograms = entry(&mut self.by_model, model);
        let pairs = [
            (&mut histograms.queue_wait, seconds(record.queue_wait_ms)),
            (&mut histograms.model_load, seconds(record.model_load_ms)),
            (&mut histograms.ttft, seconds(record.ttft_ms)),
            (
                &mut histograms.ttft_after_lease,
                seconds(record.ttft_after_lease_ms),
            ),
            (&mut histograms.total, seconds(Some(record.total_ms))),
        ];
        for (histogram, value) in pairs {
            if let Some(value) = value {
                histogram.observe(&SECONDS_BUCKETS, value);
            }
        }
        if let Some(rate) = decode_rate(record) {
            histograms.decode_rate.observe(&RATE_BUCKETS, rate);
        }
    }

    /// Requests counted so far.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().flat_map(BTreeMap::values).sum()
    }
}

/// The value for `key`, inserted (with the key's one allocation) only the
/// first time.
fn entry<'a, V: Default>(map: &'a mut BTreeMap<String, V>, key: &str) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(json: serde_json::Value) -> RequestRecord {
        let mut base = serde_json::json!({
            "schema_version": 1, "seq": 1, "arrival_seq": 1, "request_id": "i-1",
            "endpoint": "/v1/chat/completions", "stream": true, "model_requested": "m",
            "model_resolved": "m", "upstream_model": "up-m",
            "arrived_at": "2026-01-01T00:00:00.000Z", "completed_at": "2026-01-01T00:00:01.000Z",
            "lease_at": null, "first_token_at": null, "last_token_at": null,
            "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0, "queue_wait_ms": 20,
            "model_switch": false, "model_load_ms": null, "upstream_headers_ms": null,
            "ttft_ms": 150, "ttft_after_lease_ms": 130, "generation_ms": 900, "total_ms": 1000,
            "prompt_tokens": null, "completion_tokens": 10, "reasoning_tokens": null,
            "prompt_n": null, "cache_n": null, "predicted_n": null, "prompt_ms": null,
            "predicted_ms": null, "prompt_per_second": null, "predicted_per_second": null,
            "finish_reason": null, "status": 200, "upstream_status": 200, "success": true,
            "reason": "completed", "response_bytes": 100, "disconnect_phase": null
        });
        for (key, value) in json.as_object().unwrap() {
            base[key] = value.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn records_are_counted_by_their_labels_and_measured_per_model() {
        let mut stats = RequestStats::default();
        stats.observe(&record(serde_json::json!({})), ServiceTier::Priority);
        stats.observe(&record(serde_json::json!({})), ServiceTier::Priority);
        stats.observe(
            &record(
                serde_json::json!({"model_resolved": null, "model_requested": null,
                "upstream_model": null, "status": 400, "reason": "invalid_request", "success": false,
                "stream": false, "response_bytes": 50}),
            ),
            ServiceTier::Default,
        );
        assert_eq!(stats.total_requests(), 3);
        assert_eq!(stats.response_bytes, 250);
        let completed = RequestLabels {
            reason: Reason::Completed,
            status_hundreds: 2,
            tier: ServiceTier::Priority,
            stream: true,
            success: true,
        };
        assert_eq!(completed.status_class(), "2xx");
        assert_eq!(stats.requests["m"][&completed], 2);
        let rejected = RequestLabels {
            reason: Reason::InvalidRequest,
            status_hundreds: 4,
            tier: ServiceTier::Default,
            stream: false,
            success: false,
        };
        assert_eq!(stats.requests[NO_MODEL][&rejected], 1);
        // Only resolved requests are measured.
        assert_eq!(stats.by_model.len(), 1);
        let m = &stats.by_model["m"];
        assert_eq!(m.ttft.count, 2);
        assert!((m.ttft.sum - 0.3).abs() < 1e-9);
        assert_eq!(m.model_load.count, 0, "no load, no observation");
        // 10 completion tokens each, no prompt usage reported.
        assert_eq!(
            stats.tokens["m"],
            TokenCounts {
                prompt: 0,
                completion: 20
            }
        );
        assert!(!stats.tokens.contains_key(NO_MODEL));
        // 9 tokens after the first in 0.9 s.
        assert!((m.decode_rate.sum - 20.0).abs() < 1e-9);
        // 0.15 s falls in the 0.25 bucket; cumulative counts end at the total.
        let cumulative: Vec<(f64, u64)> = m.ttft.cumulative(&SECONDS_BUCKETS).collect();
        assert_eq!(cumulative.len(), SECONDS_BUCKETS.len() + 1);
        assert_eq!(cumulative[4], (0.1, 0));
        assert_eq!(cumulative[5], (0.25, 2));
        assert_eq!(cumulative.last().unwrap().1, 2);
    }

    #[test]
    fn a_stream_that_fails_after_its_headers_is_not_counted_as_2xx() {
        let mut stats = RequestStats::default();
        stats.observe(
            &record(serde_json::json!({"reason": "upstream_error", "success": false})),
            ServiceTier::Default,
        );
        let (labels, count) = stats.requests["m"].iter().next().unwrap();
        assert_eq!(*count, 1);
        assert_eq!(labels.status_hundreds, 2, "the client got 200 headers");
        assert_eq!(labels.status_class(), "failed_after_headers");
        assert_eq!(labels.reason, Reason::UpstreamError);
    }

    #[test]
    fn a_load_of_a_quarter_hour_has_a_bucket_below_infinity() {
        let mut stats = RequestStats::default();
        stats.observe(
            &record(
                serde_json::json!({"model_switch": true, "model_load_ms": 1_000_000,
                "total_ms": 1_100_000}),
            ),
            ServiceTier::Default,
        );
        let m = &stats.by_model["m"];
        // 1000 s falls in the 1800 s bucket, not only in +Inf.
        let load: Vec<(f64, u64)> = m.model_load.cumulative(&SECONDS_BUCKETS).collect();
        assert_eq!(load[load.len() - 3], (900.0, 0));
        assert_eq!(load[load.len() - 2], (1800.0, 1));
        let total: Vec<(f64, u64)> = m.total.cumulative(&SECONDS_BUCKETS).collect();
        assert_eq!(total[total.len() - 2], (1800.0, 1));
    }
}
