//! `GET /health` and `GET /metrics`.

use hyper::StatusCode;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use strata_protocol::api::{
    Health, HealthStatus, Metrics, RequestLogMetrics, SupervisorLink, TierCounts,
};
use strata_protocol::wire::{RequestLogStats, ServiceTier};

use crate::app::App;
use crate::body::ProxyBody;
use crate::errors::json_response;

/// 200 while the supervisor is reachable, 503 otherwise; same shape.
pub fn health(app: &App) -> hyper::Response<ProxyBody> {
    let state = app.link.state();
    let router = state.router.as_ref();
    let (status, code, supervisor) = if state.connected {
        (HealthStatus::Ok, StatusCode::OK, SupervisorLink::Connected)
    } else {
        (
            HealthStatus::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            SupervisorLink::Disconnected,
        )
    };
    let body = Health {
        status,
        supervisor,
        routing: router.map(|r| r.routing),
        loaded_model: router.and_then(|r| r.loaded.clone()),
        draining: router.map(|r| r.draining),
    };
    json_response(code, &body)
}

/// The `request_log` object: the config values, and the supervisor's
/// counters (null while it is unreachable).
fn request_log(app: &App, stats: Option<&RequestLogStats>) -> RequestLogMetrics {
    let config = &app.config.request_log;
    RequestLogMetrics {
        path: config.path.as_ref().map(|path| path.display().to_string()),
        max_bytes: config.max_bytes,
        rotate_files: config.rotate_files,
        capacity: config.capacity as u64,
        write_errors: stats.map(|s| s.write_errors),
        write_drops: stats.map(|s| s.write_drops),
        evicted: stats.map(|s| s.evicted),
        records_in_ring: stats.map(|s| s.records_in_ring),
        next_seq: stats.map(|s| s.next_seq),
        instance_id: stats.map(|s| s.instance_id.clone()),
    }
}

/// The metrics document (JSON). Queue and in-flight counts are the
/// router's totals over every proxy, as the supervisor counts them (null
/// while it is unreachable).
pub async fn metrics_json(app: &App) -> Metrics {
    let state = app.link.state();
    let router = state.router.as_ref();
    let metrics = app.link.metrics().await;
    let tier = |tier: ServiceTier| {
        metrics
            .as_ref()
            .map(|m| m.queue_depth_by_tier[tier.index()])
    };
    let last = app.last_stream();
    Metrics {
        loaded_model: router.and_then(|r| r.loaded.clone()),
        loading_model: router.and_then(|r| r.loading.clone()),
        routing: router.map(|r| r.routing),
        supervisor_connected: state.connected,
        in_flight: metrics.as_ref().map(|m| m.in_flight),
        queue_depth: metrics.as_ref().map(|m| m.queue_depth),
        queue_depth_by_tier: TierCounts {
            priority: tier(ServiceTier::Priority),
            default: tier(ServiceTier::Default),
            flex: tier(ServiceTier::Flex),
        },
        max_request_body_bytes: app.config.max_request_body_bytes,
        last_stream_ttft_ms: last.ttft_ms,
        last_stream_decode_tokens_per_second: last.decode_tokens_per_second,
        request_log: request_log(app, metrics.as_ref().map(|m| &m.request_log)),
    }
}

/// The same figures in the Prometheus text format. A figure that is null
/// in the JSON (the supervisor is unreachable) has no sample line.
fn metrics_prometheus(doc: &Metrics) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: Option<f64>| {
        out.push_str(&format!(
            "# HELP strata_router_{name} {help}\n# TYPE strata_router_{name} gauge\n"
        ));
        if let Some(value) = value {
            out.push_str(&format!("strata_router_{name} {value}\n"));
        }
    };
    let count = |value: Option<u64>| value.map(|n| n as f64);
    gauge("in_flight", "Admitted requests.", count(doc.in_flight));
    gauge(
        "queue_depth",
        "Requests waiting for admission.",
        count(doc.queue_depth),
    );
    gauge(
        "max_request_body_bytes",
        "Configured request body limit.",
        Some(doc.max_request_body_bytes as f64),
    );
    gauge(
        "last_stream_ttft_ms",
        "Time to first token of the last streamed request.",
        count(doc.last_stream_ttft_ms),
    );
    gauge(
        "last_stream_decode_tokens_per_second",
        "Decode rate of the last streamed request.",
        doc.last_stream_decode_tokens_per_second,
    );
    out.push_str("# HELP strata_router_queue_depth_by_tier Waiting requests by service tier.\n# TYPE strata_router_queue_depth_by_tier gauge\n");
    let tiers = &doc.queue_depth_by_tier;
    for (tier, count) in [
        (ServiceTier::Priority, tiers.priority),
        (ServiceTier::Default, tiers.default),
        (ServiceTier::Flex, tiers.flex),
    ] {
        if let Some(count) = count {
            out.push_str(&format!(
                "strata_router_queue_depth_by_tier{{tier=\"{}\"}} {count}\n",
                tier.as_str()
            ));
        }
    }
    out.push_str("# HELP strata_router_model_loaded The loaded model.\n# TYPE strata_router_model_loaded gauge\n");
    if let Some(model) = &doc.loaded_model {
        out.push_str(&format!(
            "strata_router_model_loaded{{model=\"{model}\"}} 1\n"
        ));
    }
    out
}

/// `GET /metrics`: JSON, or Prometheus text on `Accept: text/plain` or
/// `?format=prometheus`.
pub async fn metrics(
    app: &App,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<ProxyBody> {
    let doc = metrics_json(app).await;
    let wants_text = request
        .uri()
        .query()
        .is_some_and(|query| query.split('&').any(|pair| pair == "format=prometheus"))
        || request
            .headers()
            .get(ACCEPT)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|accept| accept.starts_with("text/plain"));
    if wants_text {
        let mut response = hyper::Response::new(ProxyBody::full(metrics_prometheus(&doc)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        );
        return response;
    }
    json_response(StatusCode::OK, &doc)
}
