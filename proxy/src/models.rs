//! `GET /v1/models`: enabled concrete models and family aliases.
//!
//! Statuses come from the supervisor's latest state (so `verified` and
//! `loaded` show); while the supervisor is unreachable the listing still
//! works from the config, with each model's static preparation status.

use serde_json::{Map, Value, json};
use strata_protocol::config::{ModelEntry, ModelStatus};

use crate::app::App;

const OWNED_BY: &str = "strata-router";

fn concrete(entry: &ModelEntry, status: ModelStatus) -> Value {
    let mut item = Map::new();
    item.insert("id".into(), json!(entry.id));
    item.insert("object".into(), json!("model"));
    item.insert("owned_by".into(), json!(OWNED_BY));
    item.insert("kind".into(), json!("concrete"));
    item.insert("family".into(), json!(entry.family.as_str()));
    item.insert("fine_tune".into(), json!(entry.fine_tune));
    item.insert("quantization".into(), json!(entry.quantization));
    item.insert("status".into(), json!(status.as_str()));
    let metadata = entry.effective_metadata();
    for (key, value) in [
        ("meta", metadata.meta),
        ("architecture", metadata.architecture),
        ("thinking", metadata.thinking),
    ] {
        if let Some(value) = value {
            item.insert(key.into(), value);
        }
    }
    Value::Object(item)
}

/// The listing document.
pub fn listing(app: &App) -> Value {
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
    let mut data: Vec<Value> = registry
        .enabled_models()
        .map(|entry| concrete(entry, live_status(&entry.id).unwrap_or(entry.prepared)))
        .collect();
    for alias in registry.aliases() {
        data.push(json!({
            "id": alias.name,
            "object": "model",
            "owned_by": OWNED_BY,
            "kind": "alias",
            "family": alias.family.as_str(),
            "allowed_models": alias.effective,
            "preferred": alias.effective.first(),
        }));
    }
    json!({ "object": "list", "data": data })
}
