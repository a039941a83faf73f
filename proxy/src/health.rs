//! `GET /health` and `GET /metrics`.

use hyper::StatusCode;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use serde_json::{Value, json};

use strata_protocol::wire::{RequestLogStats, ServiceTier};

use crate::app::App;
use crate::body::ProxyBody;
use crate::errors::json_response;

/// 200 while the supervisor is reachable, 503 otherwise; same shape.
pub fn health(app: &App) -> hyper::Response<ProxyBody> {
    let state = app.link.state();
    let router = state.router.as_ref();
    let body = json!({
        "status": if state.connected { "ok" } else { "unavailable" },
        "supervisor": if state.connected { "connected" } else { "disconnected" },
        "routing": router.map(|r| r.routing),
        "loaded_model": router.and_then(|r| r.loaded.clone()),
        "draining": router.map(|r| r.draining),
    });
    let status = if state.connected {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body)
}

/// The `request_log` object: the config values, and the supervisor's
/// counters (null while it is unreachable).
fn request_log(app: &App, stats: Option<&RequestLogStats>) -> Value {
    let config = &app.config.request_log;
    json!({
        "path": config.path.as_ref().map(|path| path.display().to_string()),
        "max_bytes": config.max_bytes,
        "rotate_files": config.rotate_files,
        "capacity": config.capacity,
        "write_errors": stats.map(|s| s.write_errors),
        "write_drops": stats.map(|s| s.write_drops),
        "evicted": stats.map(|s| s.evicted),
        "records_in_ring": stats.map(|s| s.records_in_ring),
        "next_seq": stats.map(|s| s.next_seq),
        "instance_id": stats.map(|s| s.instance_id.clone()),
    })
}

/// The metrics document (JSON). Queue and in-flight counts are the
/// router's totals over every proxy, as the supervisor counts them (null
/// while it is unreachable).
pub async fn metrics_json(app: &App) -> Value {
    let state = app.link.state();
    let router = state.router.as_ref();
    let metrics = app.link.metrics().await;
    let mut tiers = serde_json::Map::new();
    for tier in ServiceTier::ALL {
        let count = metrics
            .as_ref()
            .map(|m| m.queue_depth_by_tier[tier.index()]);
        tiers.insert(tier.as_str().into(), json!(count));
    }
    let last = app.last_stream();
    json!({
        "loaded_model": router.and_then(|r| r.loaded.clone()),
        "loading_model": router.and_then(|r| r.loading.clone()),
        "routing": router.map(|r| r.routing),
        "supervisor_connected": state.connected,
        "in_flight": metrics.as_ref().map(|m| m.in_flight),
        "queue_depth": metrics.as_ref().map(|m| m.queue_depth),
        "queue_depth_by_tier": tiers,
        "max_request_body_bytes": app.config.max_request_body_bytes,
        "last_stream_ttft_ms": last.ttft_ms,
        "last_stream_decode_tokens_per_second": last.decode_tokens_per_second,
        "request_log": request_log(app, metrics.as_ref().map(|m| &m.request_log)),
    })
}

/// The same figures in the Prometheus text format.
fn metrics_prometheus(doc: &Value) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: Option<f64>, labels: &str| {
        out.push_str(&format!(
            "# HELP strata_router_{name} {help}\n# TYPE strata_router_{name} gauge\n"
        ));
        if let Some(value) = value {
            out.push_str(&format!("strata_router_{name}{labels} {value}\n"));
        }
    };
    let number = |key: &str| doc.get(key).and_then(Value::as_f64);
    gauge("in_flight", "Admitted requests.", number("in_flight"), "");
    gauge(
        "queue_depth",
        "Requests waiting for admission.",
        number("queue_depth"),
        "",
    );
    gauge(
        "max_request_body_bytes",
        "Configured request body limit.",
        number("max_request_body_bytes"),
        "",
    );
    gauge(
        "last_stream_ttft_ms",
        "Time to first token of the last streamed request.",
        number("last_stream_ttft_ms"),
        "",
    );
    gauge(
        "last_stream_decode_tokens_per_second",
        "Decode rate of the last streamed request.",
        number("last_stream_decode_tokens_per_second"),
        "",
    );
    out.push_str("# HELP strata_router_queue_depth_by_tier Waiting requests by service tier.\n# TYPE strata_router_queue_depth_by_tier gauge\n");
    for tier in ServiceTier::ALL {
        let count = doc["queue_depth_by_tier"][tier.as_str()]
            .as_u64()
            .unwrap_or(0);
        out.push_str(&format!(
            "strata_router_queue_depth_by_tier{{tier=\"{}\"}} {count}\n",
            tier.as_str()
        ));
    }
    out.push_str("# HELP strata_router_model_loaded The loaded model.\n# TYPE strata_router_model_loaded gauge\n");
    if let Some(model) = doc["loaded_model"].as_str() {
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
