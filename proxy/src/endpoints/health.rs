//! `GET /health`: whether the supervisor is reachable, and what it last
//! said of routing, the loaded model and the drain.

use hyper::StatusCode;
use strata_protocol::api::{Health, HealthStatus, LinkStatus};

use crate::app::App;
use crate::link::Mismatch;
use crate::reply::json_response;
use crate::response_body::ProxyBody;

/// 200 while the supervisor is reachable, 503 otherwise; same shape, and
/// `supervisor` says whether a supervisor answers with other settings or
/// another build (`config_mismatch`, `version_mismatch`).
pub fn health(app: &App) -> hyper::Response<ProxyBody> {
    let state = app.link.state();
    let router = state.router.as_ref();
    let unavailable = |link| {
        (
            HealthStatus::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            link,
        )
    };
    let (status, code, supervisor) = match (state.connected, state.mismatch) {
        (true, _) => (HealthStatus::Ok, StatusCode::OK, LinkStatus::Connected),
        (false, Some(Mismatch::Config)) => unavailable(LinkStatus::ConfigMismatch),
        (false, Some(Mismatch::Version)) => unavailable(LinkStatus::VersionMismatch),
        (false, None) => unavailable(LinkStatus::Disconnected),
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
