//! `GET /v1/models`: enabled concrete models and family aliases.
//!
//! Statuses come from the supervisor's latest state (so `verified` and
//! `loaded` show); while the supervisor is unreachable the listing still
//! works from the config, with each model's static preparation status.

use strata_protocol::api::{
    AliasModel, ConcreteModel, ListObject, ModelItem, ModelList, ModelObject,
};
use strata_protocol::config::{ModelEntry, ModelStatus};

use crate::app::App;

const OWNED_BY: &str = "strata-router";

fn concrete(entry: &ModelEntry, status: ModelStatus) -> ModelItem {
    let metadata = entry.effective_metadata();
    ModelItem::Concrete(ConcreteModel {
        id: entry.id.clone(),
        object: ModelObject::Model,
        owned_by: OWNED_BY.into(),
        family: entry.family.as_str().into(),
        fine_tune: entry.fine_tune.clone(),
        quantization: entry.quantization.clone(),
        status,
        meta: metadata.meta,
        architecture: metadata.architecture,
        thinking: metadata.thinking,
    })
}

/// The listing document.
pub fn listing(app: &App) -> ModelList {
    let registry = &app.config.registry;
    let state = app.link.state();
    let live_status = |id: &str| {
        state.router.as_ref().and_then(|router| {
            router
                .statuses
                .iter()
                .find(|entry| entry.id == id)
                .map(|entry| entry.status)
        })
    };
    let mut data: Vec<ModelItem> = registry
        .enabled_models()
        .map(|entry| concrete(entry, live_status(&entry.id).unwrap_or(entry.prepared)))
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
    }
}
