//! `GET /metrics`: the router's figures as a JSON document, or in the
//! Prometheus text or OpenMetrics format (`prometheus` writes both), as
//! `metrics_format` negotiates.

use hyper::StatusCode;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue, VARY};
use strata_protocol::api::{Metrics, RequestLogMetrics, TierCounts};
use strata_protocol::wire::{ProcessFigures, RequestLogStats, RouterMetrics, ServiceTier};

use super::metrics_format::MetricsFormat;
use crate::app::App;
use crate::reply::json_response;
use crate::response_body::ProxyBody;

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
fn metrics_document(
    app: &App,
    state: &crate::link::LinkState,
    metrics: Option<&RouterMetrics>,
) -> Metrics {
    let router = state.router.as_ref();
    let tier = |tier: ServiceTier| metrics.map(|m| m.queue_depth_by_tier[tier.index()]);
    let last = app.last_stream();
    Metrics {
        loaded_model: router.and_then(|r| r.loaded.clone()),
        loading_model: router.and_then(|r| r.loading.clone()),
        routing: router.map(|r| r.routing),
        supervisor_connected: state.connected,
        in_flight: metrics.map(|m| m.in_flight),
        queue_depth: metrics.map(|m| m.queue_depth),
        queue_depth_by_tier: TierCounts {
            priority: tier(ServiceTier::Priority),
            default: tier(ServiceTier::Default),
            flex: tier(ServiceTier::Flex),
        },
        queue_depth_by_model: metrics.map(|m| m.queue_depth_by_model.clone()),
        max_request_body_bytes: app.config.max_request_body_bytes,
        last_stream_ttft_ms: last.ttft_ms,
        last_stream_decode_tokens_per_second: last.decode_tokens_per_second,
        request_log: request_log(app, metrics.map(|m| &m.request_log)),
        in_flight_requests: metrics.map(|m| m.in_flight_requests.clone()),
    }
}

/// `GET /metrics`: JSON, or the exposition format a scraper's `Accept`
/// prefers (or `?format=prometheus` asks for).
pub async fn metrics(
    app: &App,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<ProxyBody> {
    let state = app.link.state();
    let metrics = app.link.metrics().await;
    let doc = metrics_document(app, &state, metrics.as_ref());
    let accept = request
        .headers()
        .get(ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = MetricsFormat::choose(request.uri().query(), accept);
    let mut response = match format.content_type() {
        None => json_response(StatusCode::OK, &doc),
        Some(content_type) => {
            let text = super::prometheus::render(
                &app.config,
                &doc,
                state.router.as_ref(),
                metrics.as_ref(),
                &own_process_figures(),
                format == MetricsFormat::OpenMetrics,
            );
            let mut response = hyper::Response::new(ProxyBody::full(text));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            response
        }
    };
    // The body depends on Accept: a cache must not answer a scraper with JSON.
    response
        .headers_mut()
        .insert(VARY, HeaderValue::from_static("accept"));
    response
}

/// This process's `process_*` figures, read at the scrape.
fn own_process_figures() -> ProcessFigures {
    let usage = strata_os::own_process_usage();
    ProcessFigures {
        cpu_seconds: usage.cpu_seconds,
        resident_memory_bytes: usage.resident_memory_bytes,
        virtual_memory_bytes: usage.virtual_memory_bytes,
        open_fds: usage.open_fds,
        max_fds: usage.max_fds,
        start_time_seconds: usage.start_time_seconds,
    }
}
