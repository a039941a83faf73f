//! `GET /health`: whether the supervisor is reachable, and what it last
//! said of routing, the loaded model and the drain.

use hyper::StatusCode;
use strata_protocol::api::{Health, HealthStatus, LinkStatus};

use crate::app::App;
use crate::reply::json_response;
use crate::response_body::ProxyBody;

/// 200 while the supervisor is reachable, 503 otherwise; same shape.
pub fn health(app: &App) -> hyper::Response<ProxyBody> {
    let state = app.link.state();
    let router = state.router.as_ref();
    let (status, code, supervisor) = if state.connected {
        (HealthStatus::Ok, StatusCode::OK, LinkStatus::Connected)
    } else {
        (
            HealthStatus::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            LinkStatus::Disconnected,
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
