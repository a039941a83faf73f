//! The HTTP API's documents (router spec, "HTTP API"): the exact member names, types and
//! nulls each one serializes to, and that a client reads back what the proxy wrote.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use strata_protocol::api::{
    AliasModel, ConcreteModel, ErrorBody, ErrorDetail, Health, HealthStatus, InFlightRequest,
    LinkStatus, ListObject, Metrics, ModelItem, ModelList, ModelObject, RequestLogMetrics,
    TierCounts,
};
use strata_protocol::config::{
    ModelStatus, Readiness, ReadinessBasis, ReadinessChoice, ReadinessMode, ReadinessReport,
};
use strata_protocol::wire::BackendState;

/// `value` serializes to exactly `expected`, and reads back equal.
fn pins<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T, expected: Value) {
    let text = serde_json::to_string(value).expect("serialize");
    let written: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(written, expected);
    let back: T = serde_json::from_str(&text).expect("read back");
    assert_eq!(&back, value);
}

#[test]
fn an_error_is_message_type_code_and_status_only_in_band() {
    let mut body = ErrorBody {
        error: ErrorDetail {
            message: "model not found".into(),
            kind: "invalid_request_error".into(),
            code: "model_not_found".into(),
            status: None,
            last_error: None,
            cooldown_remaining_ms: None,
        },
    };
    pins(
        &body,
        json!({"error": {"message": "model not found", "type": "invalid_request_error", "code": "model_not_found"}}),
    );
    body.error.status = Some(404);
    pins(
        &body,
        json!({"error": {"message": "model not found", "type": "invalid_request_error", "code": "model_not_found", "status": 404}}),
    );
    // A failed start also says why, and how long its cooldown still runs.
    let load = ErrorBody {
        error: ErrorDetail {
            message: "the model failed to load".into(),
            kind: "server_error".into(),
            code: "model_load_error".into(),
            status: None,
            last_error: Some("backend exited during startup (exit code 3)".into()),
            cooldown_remaining_ms: Some(29_500),
        },
    };
    pins(
        &load,
        json!({"error": {"message": "the model failed to load", "type": "server_error", "code": "model_load_error",
                         "last_error": "backend exited during startup (exit code 3)", "cooldown_remaining_ms": 29_500}}),
    );
}

#[test]
fn health_names_the_supervisor_link_and_nulls_what_only_it_knows() {
    pins(
        &Health {
            status: HealthStatus::Ok,
            supervisor: LinkStatus::Connected,
            routing: Some(true),
            loaded_model: Some("m".into()),
            draining: Some(false),
            backend_state: Some(BackendState::Serving),
            last_good_probe_age_ms: Some(1_200),
            cause: None,
        },
        json!({"status": "ok", "supervisor": "connected", "routing": true, "loaded_model": "m", "draining": false,
               "backend_state": "serving", "last_good_probe_age_ms": 1200, "cause": null}),
    );
    pins(
        &Health {
            status: HealthStatus::Unavailable,
            supervisor: LinkStatus::Connected,
            routing: Some(true),
            loaded_model: Some("m".into()),
            draining: Some(false),
            backend_state: Some(BackendState::Unresponsive),
            last_good_probe_age_ms: Some(16_000),
            cause: Some("no answer to GET /health for 3 probes in a row".into()),
        },
        json!({"status": "unavailable", "supervisor": "connected", "routing": true, "loaded_model": "m", "draining": false,
               "backend_state": "unresponsive", "last_good_probe_age_ms": 16000,
               "cause": "no answer to GET /health for 3 probes in a row"}),
    );
    pins(
        &Health {
            status: HealthStatus::Unavailable,
            supervisor: LinkStatus::Disconnected,
            routing: None,
            loaded_model: None,
            draining: None,
            backend_state: None,
            last_good_probe_age_ms: None,
            cause: None,
        },
        json!({"status": "unavailable", "supervisor": "disconnected", "routing": null, "loaded_model": null, "draining": null,
               "backend_state": null, "last_good_probe_age_ms": null, "cause": null}),
    );
}

#[test]
fn metrics_carry_every_figure_and_the_request_log() {
    let metrics = Metrics {
        loaded_model: Some("a".into()),
        loading_model: None,
        routing: Some(true),
        supervisor_connected: true,
        in_flight: Some(2),
        queue_depth: Some(3),
        queue_depth_by_tier: TierCounts {
            priority: Some(1),
            default: Some(2),
            flex: Some(0),
        },
        queue_depth_by_model: Some([("a".to_owned(), 1), ("b".to_owned(), 2)].into()),
        max_request_body_bytes: 1024,
        last_stream_ttft_ms: Some(12),
        last_stream_decode_tokens_per_second: Some(40.5),
        request_log: RequestLogMetrics {
            path: None,
            max_bytes: 10,
            rotate_files: 2,
            capacity: 100,
            write_errors: None,
            write_drops: None,
            evicted: None,
            records_in_ring: None,
            next_seq: None,
            instance_id: None,
        },
        in_flight_requests: Some(vec![InFlightRequest {
            request_id: "1-2-7".into(),
            model: "a".into(),
            tier: "priority".into(),
            stage: "leased".into(),
            age_ms: 1500,
        }]),
    };
    pins(
        &metrics,
        json!({
            "loaded_model": "a", "loading_model": null, "routing": true,
            "supervisor_connected": true, "in_flight": 2, "queue_depth": 3,
            "queue_depth_by_tier": {"priority": 1, "default": 2, "flex": 0},
            "queue_depth_by_model": {"a": 1, "b": 2},
            "max_request_body_bytes": 1024, "last_stream_ttft_ms": 12,
            "last_stream_decode_tokens_per_second": 40.5,
            "request_log": {
                "path": null, "max_bytes": 10, "rotate_files": 2, "capacity": 100,
                "write_errors": null, "write_drops": null, "evicted": null,
                "records_in_ring": null, "next_seq": null, "instance_id": null
            },
            "in_flight_requests": [
                {"request_id": "1-2-7", "model": "a", "tier": "priority", "stage": "leased", "age_ms": 1500}
            ]
        }),
    );
}

#[test]
fn the_model_list_has_concrete_models_and_aliases_by_kind() {
    let list = ModelList {
        object: ListObject::List,
        data: vec![
            ModelItem::Concrete(ConcreteModel {
                id: "m-q4".into(),
                object: ModelObject::Model,
                owned_by: "strata-router".into(),
                family: "fam".into(),
                fine_tune: None,
                quantization: "q4".into(),
                status: ModelStatus::Verified,
                last_error: Some("backend exited during startup (exit code 3)".into()),
                cooldown_remaining_ms: None,
                typical_load_ms: Some(20_500),
                backend_state: Some(BackendState::Serving),
                meta: Some(json!({"k": 1})),
                architecture: None,
                thinking: None,
            }),
            ModelItem::Alias(AliasModel {
                id: "fam".into(),
                object: ModelObject::Model,
                owned_by: "strata-router".into(),
                family: "fam".into(),
                allowed_models: vec!["m-q4".into()],
                preferred: Some("m-q4".into()),
            }),
        ],
        readiness: ReadinessReport::new(
            Readiness::Auto,
            Some(ReadinessChoice {
                mode: ReadinessMode::Health,
                basis: ReadinessBasis::HelpLacksReadyFile,
            }),
        ),
    };
    pins(
        &list,
        json!({"object": "list", "data": [
            {"id": "m-q4", "object": "model", "owned_by": "strata-router", "kind": "concrete",
             "family": "fam", "fine_tune": null, "quantization": "q4", "status": "verified",
             "last_error": "backend exited during startup (exit code 3)",
             "cooldown_remaining_ms": null, "typical_load_ms": 20500, "backend_state": "serving",
             "meta": {"k": 1}},
            {"id": "fam", "object": "model", "owned_by": "strata-router", "kind": "alias",
             "family": "fam", "allowed_models": ["m-q4"], "preferred": "m-q4"}
        ], "readiness": {
            "configured": "auto", "mode": "health",
            "why": "auto: `python -m serve.server --help` has no --ready-file (a stock Strata), so /health decides"
        }}),
    );
    let ids: Vec<&str> = list.data.iter().map(ModelItem::id).collect();
    assert_eq!(ids, ["m-q4", "fam"], "an entry's id, whatever its kind");
}
