//! The router's figures in the Prometheus text format (version 0.0.4) or
//! OpenMetrics 1.0.0, for `GET /metrics` when a scraper asks for either.
//! The two differ only where OpenMetrics requires it: a counter family's
//! name in `# HELP`/`# TYPE` lacks the `_total` its samples carry, and the
//! text ends with `# EOF`.
//!
//! The counters and histograms are the supervisor's, counted over every
//! record it stored (so they survive a proxy restart and match
//! `/requests`; they start again with a new supervisor instance, which
//! Prometheus treats as a counter reset). While the supervisor is not
//! reachable, its families are listed without samples. Label values are
//! configured model IDs and fixed enums only.

use std::fmt::Write;

mod model_server;
mod process;

use strata_protocol::api::Metrics;
use strata_protocol::config::Config;
use strata_protocol::stats::{Histogram, RATE_BUCKETS, SECONDS_BUCKETS};
use strata_protocol::wire::{
    ProcessFigures, RouterMetrics, RouterState, SWITCH_REASONS, ServiceTier,
};

/// This build's version, the `version` label of `strata_router_build_info`.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit this build came from, or "unknown" (see `proxy/build.rs`).
const REVISION: &str = env!("STRATA_REVISION");

/// The text of one scrape, in OpenMetrics when `openmetrics`, else in the
/// Prometheus text format.
pub fn render(
    config: &Config,
    doc: &Metrics,
    router: Option<&RouterState>,
    metrics: Option<&RouterMetrics>,
    process: &ProcessFigures,
    openmetrics: bool,
) -> String {
    let mut out = Exposition {
        openmetrics,
        ..Exposition::default()
    };
    let flag = |on: bool| if on { 1.0 } else { 0.0 };

    out.family(
        "build_info",
        "gauge",
        "Always 1: the proxy's version and the git commit it was built from (unknown outside git).",
    );
    out.sample(
        "build_info",
        &[("version", VERSION), ("revision", REVISION)],
        1.0,
    );

    // Counters.
    out.family(
        "requests_total",
        "counter",
        "Finished chat requests, one per record.",
    );
    if let Some(metrics) = metrics {
        for (model, series) in &metrics.requests.requests {
            for (labels, count) in series {
                let stream = if labels.stream { "true" } else { "false" };
                out.sample(
                    "requests_total",
                    &[
                        ("model", model),
                        ("reason", labels.reason.as_str()),
                        ("status_class", labels.status_class()),
                        ("tier", labels.tier.as_str()),
                        ("stream", stream),
                    ],
                    *count as f64,
                );
            }
        }
    }
    out.family(
        "model_loads_total",
        "counter",
        "Finished model loads by outcome (verified, failed, cancelled, abandoned).",
    );
    if let Some(metrics) = metrics {
        for ((model, outcome), count) in &metrics.model_loads {
            out.sample(
                "model_loads_total",
                &[("model", model), ("outcome", outcome)],
                *count as f64,
            );
        }
    }
    out.family(
        "model_switches_total",
        "counter",
        "Model switches and unloads by why the model gave way (grace_expired, bound_due, \
         queue_drained, priority, operator, idle, abandoned).",
    );
    if let Some(metrics) = metrics {
        // Every reason, seen or not, so a rate starts from a sample.
        for reason in SWITCH_REASONS {
            let count = metrics.model_switches.get(reason).copied().unwrap_or(0);
            out.sample("model_switches_total", &[("reason", reason)], count as f64);
        }
    }
    out.family(
        "prefetch_bytes_total",
        "counter",
        "Weights bytes the prefetch read into the page cache that were not resident.",
    );
    if let Some(metrics) = metrics {
        for (model, figures) in &metrics.prefetch {
            out.sample(
                "prefetch_bytes_total",
                &[("model", model)],
                figures.bytes as f64,
            );
        }
    }
    out.family(
        "prefetch_seconds_total",
        "counter",
        "Time the prefetch spent reading weights.",
    );
    if let Some(metrics) = metrics {
        for (model, figures) in &metrics.prefetch {
            out.sample(
                "prefetch_seconds_total",
                &[("model", model)],
                figures.seconds,
            );
        }
    }
    out.family(
        "response_bytes_total",
        "counter",
        "Response bytes sent to clients, over every record.",
    );
    if let Some(metrics) = metrics {
        out.sample(
            "response_bytes_total",
            &[],
            metrics.requests.response_bytes as f64,
        );
    }

    for (name, help, pick) in [
        (
            "prompt_tokens_total",
            "Prompt tokens the backend reported, by model.",
            (|t| t.prompt) as fn(&strata_protocol::stats::TokenCounts) -> u64,
        ),
        (
            "completion_tokens_total",
            "Completion tokens the backend reported, by model.",
            |t| t.completion,
        ),
    ] {
        out.family(name, "counter", help);
        if let Some(metrics) = metrics {
            for (model, tokens) in &metrics.requests.tokens {
                out.sample(name, &[("model", model)], pick(tokens) as f64);
            }
        }
    }

    // Histograms, per model.
    type Pick = fn(&strata_protocol::stats::ModelHistograms) -> &Histogram;
    let histograms: [(&str, &str, &[f64], Pick); 7] = [
        (
            "queue_wait_seconds",
            "Arrival to lease, for granted requests.",
            &SECONDS_BUCKETS,
            |m| &m.queue_wait,
        ),
        (
            "model_load_seconds",
            "Model load (stop, start, readiness) done for a request.",
            &SECONDS_BUCKETS,
            |m| &m.model_load,
        ),
        (
            "ttft_seconds",
            "Arrival to the first generated token (streams).",
            &SECONDS_BUCKETS,
            |m| &m.ttft,
        ),
        (
            "ttft_after_lease_seconds",
            "Lease to the first generated token (streams).",
            &SECONDS_BUCKETS,
            |m| &m.ttft_after_lease,
        ),
        (
            "request_duration_seconds",
            "Arrival to the end of the response.",
            &SECONDS_BUCKETS,
            |m| &m.total,
        ),
        // The old name read as a counter; kept for one release with the
        // same samples so dashboards can move (docs/decisions.md).
        (
            "total_seconds",
            "Deprecated: use strata_router_request_duration_seconds (the same samples; \
             this name goes in the next release). Arrival to the end of the response.",
            &SECONDS_BUCKETS,
            |m| &m.total,
        ),
        (
            "decode_tokens_per_second",
            "Decode rate of a response.",
            &RATE_BUCKETS,
            |m| &m.decode_rate,
        ),
    ];
    for (name, help, bounds, pick) in histograms {
        out.family(name, "histogram", help);
        let Some(metrics) = metrics else { continue };
        for (model, by_model) in &metrics.requests.by_model {
            out.histogram(name, model, bounds, pick(by_model));
        }
    }

    // Gauges.
    let models: Vec<&str> = config
        .registry
        .models()
        .iter()
        .map(|entry| entry.id.as_str())
        .collect();
    out.family(
        "model_loaded",
        "gauge",
        "1 for the loaded model, 0 for every other configured model.",
    );
    out.family(
        "model_loading",
        "gauge",
        "1 for the model being loaded, 0 for every other.",
    );
    out.family(
        "last_startup_error",
        "gauge",
        "1 for a model whose last start failed (until it starts again).",
    );
    if let Some(router) = router {
        for model in &models {
            let loaded = router.loaded.as_deref() == Some(*model);
            out.sample("model_loaded", &[("model", model)], flag(loaded));
        }
        for model in &models {
            let loading = router.loading.as_deref() == Some(*model);
            out.sample("model_loading", &[("model", model)], flag(loading));
        }
        for model in &models {
            let failed = router
                .statuses
                .iter()
                .any(|entry| entry.id == *model && entry.last_error.is_some());
            out.sample("last_startup_error", &[("model", model)], flag(failed));
        }
    }
    out.family(
        "load_resident_ratio",
        "gauge",
        "Fraction of a model's weights in the page cache when its last load started.",
    );
    if let Some(metrics) = metrics {
        for (model, figures) in &metrics.prefetch {
            if let Some(fraction) = figures.resident_at_load {
                out.sample("load_resident_ratio", &[("model", model)], fraction);
            }
        }
    }
    let gauge = |out: &mut Exposition, name: &str, help: &str, value: Option<f64>| {
        out.family(name, "gauge", help);
        if let Some(value) = value {
            out.sample(name, &[], value);
        }
    };
    gauge(
        &mut out,
        "supervisor_connected",
        "1 while this proxy is connected to the supervisor.",
        Some(flag(doc.supervisor_connected)),
    );
    gauge(
        &mut out,
        "routing",
        "1 while routing is on.",
        router.map(|r| flag(r.routing)),
    );
    gauge(
        &mut out,
        "draining",
        "1 while a proxy or the supervisor drains.",
        router.map(|r| flag(r.draining)),
    );
    gauge(
        &mut out,
        "backend_unresponsive",
        "1 while the serving backend does not answer its health probes (backend_probe_ms).",
        router.map(|r| {
            flag(r.backend_health.state == strata_protocol::wire::BackendState::Unresponsive)
        }),
    );
    gauge(
        &mut out,
        "backend_last_good_probe_age_seconds",
        "Seconds since the serving backend last answered its health probe well.",
        router
            .and_then(|r| {
                r.backend_health
                    .last_good_probe_age_ms(strata_protocol::record::unix_ms(
                        std::time::SystemTime::now(),
                    ))
            })
            .map(|ms| ms as f64 / 1000.0),
    );
    gauge(
        &mut out,
        "in_flight",
        "Admitted requests (loading or leased).",
        doc.in_flight.map(|n| n as f64),
    );
    gauge(
        &mut out,
        "queue_depth",
        "Requests waiting for admission.",
        doc.queue_depth.map(|n| n as f64),
    );
    gauge(
        &mut out,
        "proxies",
        "Proxies connected to the supervisor.",
        metrics.map(|m| m.proxies as f64),
    );
    out.family(
        "queue_depth_by_tier",
        "gauge",
        "Requests waiting for admission, by service tier.",
    );
    if let Some(metrics) = metrics {
        for tier in ServiceTier::ALL {
            out.sample(
                "queue_depth_by_tier",
                &[("tier", tier.as_str())],
                metrics.queue_depth_by_tier[tier.index()] as f64,
            );
        }
    }
    out.family(
        "queue_depth_by_model",
        "gauge",
        "Requests waiting for admission, by model.",
    );
    if let Some(metrics) = metrics {
        for (model, count) in &metrics.queue_depth_by_model {
            out.sample("queue_depth_by_model", &[("model", model)], *count as f64);
        }
    }
    gauge(
        &mut out,
        "max_request_body_bytes",
        "Configured request body limit.",
        Some(doc.max_request_body_bytes as f64),
    );
    gauge(
        &mut out,
        "last_stream_ttft_seconds",
        "Time to first token of the last streamed request this proxy served.",
        doc.last_stream_ttft_ms.map(|ms| ms as f64 / 1000.0),
    );
    gauge(
        &mut out,
        "last_stream_decode_tokens_per_second",
        "Decode rate of the last streamed request this proxy served.",
        doc.last_stream_decode_tokens_per_second,
    );

    // The endpoint picker's gauges (the Model Server Protocol).
    model_server::render(&mut out, config, doc, router, metrics);

    // The request log.
    let log = &doc.request_log;
    for (name, kind, help, value) in [
        (
            "request_log_write_errors_total",
            "counter",
            "Records the JSONL writer failed to write.",
            log.write_errors,
        ),
        (
            "request_log_write_drops_total",
            "counter",
            "Records dropped because the writer queue was full.",
            log.write_drops,
        ),
        (
            "request_log_evicted_total",
            "counter",
            "Records evicted from the memory ring.",
            log.evicted,
        ),
        (
            "request_log_records_in_ring",
            "gauge",
            "Records in the memory ring.",
            log.records_in_ring,
        ),
        (
            "request_log_next_seq",
            "gauge",
            "The next completion sequence number.",
            log.next_seq,
        ),
        (
            "request_log_capacity",
            "gauge",
            "Configured ring capacity.",
            Some(log.capacity),
        ),
        (
            "request_log_max_bytes",
            "gauge",
            "Configured JSONL file size before rotation.",
            Some(log.max_bytes),
        ),
    ] {
        out.family(name, kind, help);
        if let Some(value) = value {
            out.sample(name, &[], value as f64);
        }
    }

    // Both daemons' processes, under the standard names every exporter uses.
    process::render(&mut out, process, metrics.map(|m| &m.supervisor_process));
    out.finish()
}

/// The text being written.
#[derive(Default)]
struct Exposition {
    text: String,
    /// OpenMetrics 1.0.0 rather than the Prometheus text format.
    openmetrics: bool,
}

impl Exposition {
    /// A family's `# HELP` and `# TYPE` lines. `name` is the sample name;
    /// OpenMetrics names a counter family without its samples' `_total`.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        self.family_named(&format!("strata_router_{name}"), kind, help);
    }

    /// [`Self::family`] with the whole name, for the standard families
    /// (`process_*`) that carry no router prefix.
    fn family_named(&mut self, name: &str, kind: &str, help: &str) {
        // OpenMetrics requires a counter's samples to end in `_total`.
        debug_assert!(
            kind != "counter" || name.ends_with("_total"),
            "counter {name} without _total"
        );
        let name = match name.strip_suffix("_total") {
            Some(family) if self.openmetrics && kind == "counter" => family,
            _ => name,
        };
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// The finished text: OpenMetrics ends with `# EOF`.
    fn finish(mut self) -> String {
        if self.openmetrics {
            self.text.push_str("# EOF\n");
        }
        self.text
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.sample_named(&format!("strata_router_{name}"), labels, value);
    }

    /// [`Self::sample`] with the whole name.
    fn sample_named(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.text, "{name}");
        if !labels.is_empty() {
            self.text.push('{');
            for (n, (label, value)) in labels.iter().enumerate() {
                if n > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"{}\"", escape(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    fn histogram(&mut self, name: &str, model: &str, bounds: &[f64], histogram: &Histogram) {
        for (bound, count) in histogram.cumulative(bounds) {
            let le = if bound.is_infinite() {
                "+Inf".to_owned()
            } else {
                number(bound)
            };
            self.sample(
                &format!("{name}_bucket"),
                &[("model", model), ("le", &le)],
                count as f64,
            );
        }
        self.sample(&format!("{name}_sum"), &[("model", model)], histogram.sum);
        self.sample(
            &format!("{name}_count"),
            &[("model", model)],
            histogram.count as f64,
        );
    }
}

/// A label value with `\`, `"` and newlines escaped (model IDs never have
/// them; this keeps the format valid whatever a label holds).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: integers without a fraction, others as Rust prints them.
fn number(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else if value.is_nan() {
        "NaN".to_owned()
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_written_in_the_text_format() {
        let mut out = Exposition::default();
        out.family("x_total", "counter", "Things.");
        out.sample("x_total", &[("model", "a\"b"), ("tier", "flex")], 3.0);
        out.sample("x_total", &[], 0.25);
        assert_eq!(
            out.finish(),
            "# HELP strata_router_x_total Things.\n# TYPE strata_router_x_total counter\n\
             strata_router_x_total{model=\"a\\\"b\",tier=\"flex\"} 3\nstrata_router_x_total 0.25\n"
        );
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let mut out = Exposition {
            openmetrics: true,
            ..Exposition::default()
        };
        out.family("x_total", "counter", "Things.");
        out.sample("x_total", &[("model", "m")], 3.0);
        out.family("y_total_bytes", "gauge", "A gauge keeps its name.");
        out.sample("y_total_bytes", &[], 1.0);
        out.family("z_total", "gauge", "So does a gauge ending in _total.");
        assert_eq!(
            out.finish(),
            "# HELP strata_router_x Things.\n# TYPE strata_router_x counter\n\
             strata_router_x_total{model=\"m\"} 3\n\
             # HELP strata_router_y_total_bytes A gauge keeps its name.\n\
             # TYPE strata_router_y_total_bytes gauge\nstrata_router_y_total_bytes 1\n\
             # HELP strata_router_z_total So does a gauge ending in _total.\n\
             # TYPE strata_router_z_total gauge\n# EOF\n"
        );
    }

    #[test]
    fn build_info_names_the_version_and_a_revision() {
        let config = strata_protocol::config::testing::one_model_config(std::path::Path::new(
            "/nonexistent/control.sock",
        ));
        // The document of a proxy that never reached its supervisor.
        let doc: Metrics = serde_json::from_value(serde_json::json!({
            "supervisor_connected": false, "queue_depth_by_tier": {},
            "max_request_body_bytes": 1,
            "request_log": {"max_bytes": 1, "rotate_files": 1, "capacity": 1}
        }))
        .unwrap();
        let text = render(&config, &doc, None, None, &ProcessFigures::default(), false);
        let line = format!(
            "strata_router_build_info{{version=\"{}\",revision=\"{REVISION}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("# TYPE strata_router_build_info gauge\n"));
        // A commit's short hash (or what a packager set), or the fallback
        // outside git: a plain label value either way.
        assert!(
            !REVISION.is_empty()
                && !REVISION
                    .chars()
                    .any(|c| c.is_whitespace() || c == '"' || c == '\\'),
            "{REVISION}"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_a_sum_and_a_count() {
        let mut stats = strata_protocol::stats::RequestStats::default();
        let record: strata_protocol::record::RequestRecord =
            serde_json::from_value(strata_test_support::record_json("r")).unwrap();
        stats.observe(&record, ServiceTier::Default);
        let mut out = Exposition::default();
        out.histogram(
            "total_seconds",
            "m",
            &SECONDS_BUCKETS,
            &stats.by_model["m"].total,
        );
        // total_ms 1000: 1 s falls in the le="1" bucket.
        assert!(
            out.text
                .contains("strata_router_total_seconds_bucket{model=\"m\",le=\"0.5\"} 0\n")
        );
        assert!(
            out.text
                .contains("strata_router_total_seconds_bucket{model=\"m\",le=\"1\"} 1\n")
        );
        assert!(
            out.text
                .contains("strata_router_total_seconds_bucket{model=\"m\",le=\"+Inf\"} 1\n")
        );
        assert!(
            out.text
                .contains("strata_router_total_seconds_sum{model=\"m\"} 1\n")
        );
        assert!(
            out.text
                .contains("strata_router_total_seconds_count{model=\"m\"} 1\n")
        );
    }
}
