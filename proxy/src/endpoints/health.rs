//! `GET /health`: whether the supervisor is reachable, and what it last
//! said of routing, the loaded model and the drain.

use hyper::StatusCode;
use strata_protocol::api::{Health, HealthStatus, LinkStatus};
use strata_protocol::wire::BackendState;

use crate::app::App;
use crate::link::Mismatch;
use crate::reply::json_response;
use crate::response_body::ProxyBody;

/// 200 while the router can serve what it is configured to; 503 when it
/// cannot: the supervisor is unreachable (or another build, or has other
/// settings: `supervisor` says which) or the serving backend is
/// `unresponsive` (`cause` says why). Same shape either way; the backend's
/// state and the age of its last good probe are always there once the
/// supervisor has spoken.
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
    let backend = router.map(|r| &r.backend_health);
    let unresponsive = state.connected
        && backend.is_some_and(|backend| backend.state == BackendState::Unresponsive);
    let (status, code) = if unresponsive {
        (HealthStatus::Unavailable, StatusCode::SERVICE_UNAVAILABLE)
    } else {
        (status, code)
    };
    let now_unix_ms = strata_protocol::record::unix_ms(std::time::SystemTime::now());
    let body = Health {
        status,
        supervisor,
        routing: router.map(|r| r.routing),
        loaded_model: router.and_then(|r| r.loaded.clone()),
        draining: router.map(|r| r.draining),
        // What the supervisor last said is not repeated once it cannot be reached: the
        // backend may have died with it.
        backend_state: if state.connected {
            backend.map(|backend| backend.state)
        } else {
            Some(BackendState::Unknown)
        },
        last_good_probe_age_ms: backend
            .filter(|_| state.connected)
            .and_then(|backend| backend.last_good_probe_age_ms(now_unix_ms)),
        cause: match supervisor {
            LinkStatus::Connected => backend.and_then(|backend| backend.cause.clone()),
            LinkStatus::Disconnected if !state.first_attempt_done => {
                Some("connecting to the supervisor".to_owned())
            }
            LinkStatus::Disconnected => Some("the supervisor cannot be reached".to_owned()),
            LinkStatus::ConfigMismatch => Some(
                "the supervisor runs with other settings (a config change half applied)".to_owned(),
            ),
            LinkStatus::VersionMismatch => {
                Some("the supervisor is another build (an upgrade half done)".to_owned())
            }
        },
    };
    json_response(code, &body)
}

/// `GET /health/live`: 200 while the proxy runs and accepts, whatever the
/// supervisor or the backend does, for load balancers and liveness checks
/// that must not flap with a model load or a wedged backend.
pub fn live() -> hyper::Response<ProxyBody> {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}
