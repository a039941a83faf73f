//! `GET /v1/models`: enabled concrete models and family aliases.
//!
//! Statuses come from the supervisor's latest state (so `verified` and
//! `loaded` show); while the supervisor is unreachable the listing still
//! works from the config, with each model's static preparation status.

use strata_protocol::api::{
    AliasModel, ConcreteModel, ListObject, ModelItem, ModelList, ModelObject,
};
use strata_protocol::config::{ModelEntry, ModelStatus, ReadinessReport};

use crate::app::App;

const OWNED_BY: &str = "strata-router";

/// What the supervisor last said of one model.
struct Live {
    status: ModelStatus,
    last_error: Option<String>,
    cooldown_remaining_ms: Option<u64>,
    typical_load_ms: Option<u64>,
    backend_state: Option<strata_protocol::wire::BackendState>,
}

fn concrete(entry: &ModelEntry, live: Live) -> ModelItem {
    let metadata = entry.effective_metadata();
    ModelItem::Concrete(ConcreteModel {
        id: entry.id.clone(),
        object: ModelObject::Model,
        owned_by: OWNED_BY.into(),
        family: entry.family.as_str().into(),
        fine_tune: entry.fine_tune.clone(),
        quantization: entry.quantization.clone(),
        status: live.status,
        last_error: live.last_error,
        cooldown_remaining_ms: live.cooldown_remaining_ms,
        typical_load_ms: live.typical_load_ms,
        backend_state: live.backend_state,
        meta: metadata.meta,
        architecture: metadata.architecture,
        thinking: metadata.thinking,
    })
}

/// The listing document.
pub fn listing(app: &App) -> ModelList {
    let registry = &app.config.registry;
    let state = app.link.state();
    // A cooldown counts down from when the state that reported it arrived.
    let since_state = state
        .router_at
        .map_or(0, |at| at.elapsed().as_millis() as u64);
    let live = |entry: &ModelEntry| {
        let reported = state
            .router
            .as_ref()
            .and_then(|router| router.statuses.iter().find(|live| live.id == entry.id));
        match reported {
            Some(reported) => Live {
                status: reported.status,
                last_error: reported.last_error.clone(),
                cooldown_remaining_ms: reported
                    .cooldown_remaining_ms
                    .map(|left| left.saturating_sub(since_state))
                    .filter(|left| *left > 0),
                typical_load_ms: reported.typical_load_ms,
                backend_state: state.router.as_ref().and_then(|router| {
                    (router.loaded.as_deref() == Some(entry.id.as_str())
                        || router.loading.as_deref() == Some(entry.id.as_str()))
                    .then_some(router.backend_health.state)
                }),
            },
            None => Live {
                status: entry.prepared,
                last_error: None,
                cooldown_remaining_ms: None,
                typical_load_ms: None,
                backend_state: None,
            },
        }
    };
    let mut data: Vec<ModelItem> = registry
        .enabled_models()
        .map(|entry| concrete(entry, live(entry)))
        .collect();
    for alias in registry.aliases() {
        data.push(ModelItem::Alias(AliasModel {
            id: alias.name.clone(),
            object: ModelObject::Model,
            owned_by: OWNED_BY.into(),
            family: alias.family.as_str().into(),
            allowed_models: alias.effective.clone(),
            preferred: alias.effective.first().cloned(),
        }));
    }
    ModelList {
        object: ListObject::List,
        data,
        readiness: ReadinessReport::new(
            app.config.readiness,
            state.router.as_ref().and_then(|router| router.readiness),
        ),
    }
}
