//! The `aliases` object: one ordered list of concrete IDs per family.
//!
//! An alias stands for "the best available model of this family": the
//! loaded model if the alias allows it, else the first enabled entry. The
//! lists hold concrete IDs only, which also rules out cycles, and never mix
//! families.

use super::ConfigError;
use super::json_walk::{JsonPath, Obj, as_array, as_str, quote};
use super::model::{Family, ModelEntry};
use serde_json::Value;

/// One family alias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The alias name, equal to the family name.
    pub name: String,
    pub family: Family,
    /// The list as configured.
    pub allowed_models: Vec<String>,
    /// `allowed_models` filtered through `enabled_models`, in the same
    /// order. The first item is the preferred model; an empty list hides
    /// the alias.
    pub effective: Vec<String>,
}

impl Alias {
    /// The model a request for this alias gets when nothing allowed is
    /// loaded.
    pub fn preferred(&self) -> Option<&str> {
        self.effective.first().map(String::as_str)
    }
}

/// Reads `aliases` (optional, default empty). `models` is sorted by ID;
/// `is_enabled` says whether an ID is in `enabled_models`. The result is
/// in [`Family::ALL`] order.
pub(crate) fn parse_aliases(
    value: Option<&Value>,
    path: JsonPath,
    models: &[ModelEntry],
    is_enabled: impl Fn(&str) -> bool,
) -> Result<Vec<Alias>, ConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let aliases = Obj::new(value, path)?;
    let mut parsed = Vec::new();
    for (name, body) in aliases.entries() {
        let alias_path = aliases.path().entry(name);
        let family = Family::from_name(name).ok_or_else(|| {
            alias_path.error(format!(
                "unknown alias; only {} and {} may be configured (there is no cross-family alias)",
                quote(Family::Qwen38FlashNext.as_str()),
                quote(Family::Qwen3635bA3b.as_str())
            ))
        })?;
        let allowed_models = parse_allowed(body, alias_path, family, models)?;
        let effective = allowed_models
            .iter()
            .filter(|id| is_enabled(id))
            .cloned()
            .collect();
        parsed.push(Alias {
            name: name.to_owned(),
            family,
            allowed_models,
            effective,
        });
    }
    parsed.sort_by_key(|alias| alias.family);
    Ok(parsed)
}

fn parse_allowed(
    body: &Value,
    path: JsonPath,
    family: Family,
    models: &[ModelEntry],
) -> Result<Vec<String>, ConfigError> {
    let obj = Obj::new(body, path)?;
    obj.deny_unknown(&["allowed_models"])?;
    let list_path = obj.path().field("allowed_models");
    let items = as_array(obj.required("allowed_models")?, &list_path)?;
    if items.is_empty() {
        return Err(list_path.error("must list at least one concrete model id"));
    }
    let mut ids: Vec<String> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_path = list_path.index(index);
        let id = as_str(item, &item_path)?;
        if Family::from_name(id).is_some() {
            return Err(item_path.error(format!(
                "{} is an alias; only concrete model ids may appear (alias references, including cycles, are rejected)",
                quote(id)
            )));
        }
        let Some(entry) = find(models, id) else {
            return Err(item_path.error(format!("{} is not a configured model id", quote(id))));
        };
        if entry.family != family {
            return Err(item_path.error(format!(
                "{} belongs to family {}",
                quote(id),
                entry.family
            )));
        }
        push_unique(&mut ids, id, &item_path)?;
    }
    Ok(ids)
}

/// Appends `id` to the list being read at `item_path`, refusing a repeat.
pub(crate) fn push_unique(
    ids: &mut Vec<String>,
    id: &str,
    item_path: &JsonPath,
) -> Result<(), ConfigError> {
    if let Some(first) = ids.iter().position(|seen| seen == id) {
        return Err(item_path.error(format!(
            "{} is listed twice (first at index {first})",
            quote(id)
        )));
    }
    ids.push(id.to_owned());
    Ok(())
}

/// The entry with ID `id` in `models`, which is sorted by ID.
pub(crate) fn find<'a>(models: &'a [ModelEntry], id: &str) -> Option<&'a ModelEntry> {
    models
        .binary_search_by(|entry| entry.id.as_str().cmp(id))
        .ok()
        .map(|index| &models[index])
}
