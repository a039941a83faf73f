//! The resolved, immutable model registry: concrete entries, the global
//! `enabled_models` list and the family aliases, plus the lookups the
//! proxy and supervisor route with.

use super::ConfigError;
use super::alias::{Alias, find, parse_aliases, push_unique};
use super::json_walk::{JsonPath, Obj, as_array, as_str, quote};
use super::model::{Family, ModelEntry, parse_models};
use serde_json::Value;
use std::collections::BTreeSet;

/// What a requested model name resolves to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Resolution<'a> {
    /// An enabled concrete ID.
    Concrete(&'a ModelEntry),
    /// A visible alias and the model it picked.
    Alias {
        alias: &'a Alias,
        model: &'a ModelEntry,
    },
    /// Unknown, disabled, or an alias with no enabled entries.
    NotFound,
}

/// Every configured model, which of them clients may use, and the aliases.
#[derive(Clone, Debug, PartialEq)]
pub struct Registry {
    /// Sorted by ID, so lookups can binary-search.
    pub(super) models: Vec<ModelEntry>,
    /// In `enabled_models` order (ID order when omitted).
    enabled: Vec<String>,
    /// The same IDs, for membership tests.
    enabled_set: BTreeSet<String>,
    /// Every configured alias, in [`Family::ALL`] order, including those
    /// whose effective list is empty.
    aliases: Vec<Alias>,
    /// Folded into the fingerprint: a proxy that would send traffic to a
    /// different backend port must not pass the supervisor's hello.
    backend_port: u16,
}

impl Registry {
    /// Reads `models`, `enabled_models` and `aliases` from the top-level
    /// object.
    pub(super) fn parse(
        root: &Obj<'_>,
        backend_port: u16,
        warnings: &mut Vec<String>,
    ) -> Result<Registry, ConfigError> {
        let models = parse_models(
            root.required("models")?,
            root.path().field("models"),
            warnings,
        )?;
        let enabled = parse_enabled(
            root.get("enabled_models"),
            root.path().field("enabled_models"),
            &models,
        )?;
        let enabled_set: BTreeSet<String> = enabled.iter().cloned().collect();
        let aliases = parse_aliases(
            root.get("aliases"),
            root.path().field("aliases"),
            &models,
            |id| enabled_set.contains(id),
        )?;
        Ok(Registry {
            models,
            enabled,
            enabled_set,
            aliases,
            backend_port,
        })
    }

    /// Every configured model, enabled or not, sorted by ID.
    pub fn models(&self) -> &[ModelEntry] {
        &self.models
    }

    /// The configured model `id`, enabled or not.
    pub fn model(&self, id: &str) -> Option<&ModelEntry> {
        find(&self.models, id)
    }

    /// IDs clients may discover and request, in `enabled_models` order (ID
    /// order when the key is omitted).
    pub fn enabled_ids(&self) -> &[String] {
        &self.enabled
    }

    /// The enabled entries, in [`Registry::enabled_ids`] order.
    pub fn enabled_models(&self) -> impl Iterator<Item = &ModelEntry> {
        self.enabled.iter().filter_map(|id| self.model(id))
    }

    pub fn is_enabled(&self, id: &str) -> bool {
        self.enabled_set.contains(id)
    }

    /// Visible aliases (non-empty effective list), `qwen3.8-flash-next`
    /// first.
    pub fn aliases(&self) -> impl Iterator<Item = &Alias> {
        self.aliases
            .iter()
            .filter(|alias| !alias.effective.is_empty())
    }

    /// Every configured alias, hidden ones included (for `check-config`).
    pub fn configured_aliases(&self) -> &[Alias] {
        &self.aliases
    }

    /// The visible alias `name`; `None` if it is not configured or has no
    /// enabled entries.
    pub fn alias(&self, name: &str) -> Option<&Alias> {
        self.aliases().find(|alias| alias.name == name)
    }

    /// Resolves a requested model name.
    ///
    /// An enabled concrete ID resolves to itself. A visible alias resolves
    /// to `loaded` if its effective list contains it, else to the first
    /// effective entry, whatever that entry's status: an uninstalled or
    /// incompatible preferred model is returned as is, never skipped, so
    /// the request fails instead of silently using other weights.
    /// Everything else is [`Resolution::NotFound`].
    pub fn resolve(&self, requested: &str, loaded: Option<&str>) -> Resolution<'_> {
        if let Some(entry) = self.model(requested) {
            return if self.is_enabled(requested) {
                Resolution::Concrete(entry)
            } else {
                Resolution::NotFound
            };
        }
        let Some(alias) = self.alias(requested) else {
            return Resolution::NotFound;
        };
        let chosen = loaded
            .filter(|loaded| alias.effective.iter().any(|id| id == loaded))
            .or(alias.preferred());
        match chosen.and_then(|id| self.model(id)) {
            Some(model) => Resolution::Alias { alias, model },
            None => Resolution::NotFound,
        }
    }

    /// Whether `name` is a configured model ID or configured alias name,
    /// enabled or not. Accounting records only such names in
    /// `model_requested`, so arbitrary client input is never persisted.
    pub fn is_known_name(&self, name: &str) -> bool {
        self.model(name).is_some() || self.aliases.iter().any(|alias| alias.name == name)
    }

    /// The model `on` loads when nothing else applies: the first enabled
    /// ID.
    pub fn default_on_model(&self) -> Option<&str> {
        self.enabled.first().map(String::as_str)
    }

    /// The family's visible alias, if any.
    pub fn family_alias(&self, family: Family) -> Option<&Alias> {
        self.aliases().find(|alias| alias.family == family)
    }

    /// For the fingerprint (`fingerprint.rs`), which covers it.
    pub(super) fn backend_port(&self) -> u16 {
        self.backend_port
    }
}

/// `enabled_models`: omitted means every ID in ID order; `[]` means none.
fn parse_enabled(
    value: Option<&Value>,
    path: JsonPath,
    models: &[ModelEntry],
) -> Result<Vec<String>, ConfigError> {
    let Some(value) = value else {
        return Ok(models.iter().map(|entry| entry.id.clone()).collect());
    };
    let items = as_array(value, &path)?;
    let mut ids: Vec<String> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_path = path.index(index);
        let id = as_str(item, &item_path)?;
        if Family::from_name(id).is_some() {
            return Err(item_path.error(format!(
                "{} is an alias; enabled_models lists concrete model ids only",
                quote(id)
            )));
        }
        if find(models, id).is_none() {
            return Err(item_path.error(format!("{} is not a configured model id", quote(id))));
        }
        push_unique(&mut ids, id, &item_path)?;
    }
    Ok(ids)
}
