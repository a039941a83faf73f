//! Model metadata: the descriptive fields a model entry (config `metadata`)
//! or its profile (`router_metadata`) passes through to `/v1/models`. A leaf
//! of the config: `model.rs` and `profile.rs` both read it.

use super::json_walk::Obj;
use serde_json::Value;

/// Descriptive fields passed through to `/v1/models`; any JSON value.
/// An explicit `null` is treated like an absent field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelMetadata {
    pub meta: Option<Value>,
    pub architecture: Option<Value>,
    pub thinking: Option<Value>,
}

/// The keys a metadata object (config `metadata` or profile
/// `router_metadata`) may carry.
pub(super) const METADATA_KEYS: [&str; 3] = ["meta", "architecture", "thinking"];

impl ModelMetadata {
    /// Reads the three known fields of `obj`; the caller decides what to
    /// do with other keys.
    pub(super) fn from_obj(obj: &Obj<'_>) -> ModelMetadata {
        let field = |key: &str| obj.get(key).filter(|v| !v.is_null()).cloned();
        ModelMetadata {
            meta: field("meta"),
            architecture: field("architecture"),
            thinking: field("thinking"),
        }
    }
}
