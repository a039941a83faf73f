//! Weights prefetch: the top-level `prefetch*` keys and each model's
//! `weights` list.
//!
//! While the next model cannot start yet (its ticket waits behind the
//! loaded model's leases or grace, or an operator `on` waits), the
//! supervisor reads its weights into the page cache, so the load reads
//! memory instead of the disk; with `prefetch_predict`, also the model
//! likely asked for next while nothing waits. These keys say which files a
//! model reads and bound what a prefetch may take. Existence is not checked
//! here: a missing file is a run-time warning, never a config error, since
//! weights may be on a disk that is mounted later.

use super::ConfigError;
use super::json_walk::{JsonPath, Obj, as_abs_path, as_array};
use std::collections::HashSet;
use std::path::PathBuf;

/// The most entries one `weights` array may hold.
pub const MAX_WEIGHTS_ENTRIES: usize = 64;
/// `prefetch_max_bytes` when unset: 128 GiB, more than any model this
/// router's GPUs hold, so the bound is for machines whose page cache is
/// smaller than their models.
pub const DEFAULT_PREFETCH_MAX_BYTES: u64 = 128 << 30;
/// `prefetch_min_free_bytes` when unset: 4 GiB of `MemAvailable` kept for
/// everything else on the machine.
pub const DEFAULT_PREFETCH_MIN_FREE_BYTES: u64 = 4 << 30;
/// The largest value either byte bound accepts (1 PiB), to catch unit
/// mistakes.
pub const MAX_PREFETCH_BYTES: u64 = 1 << 50;

/// The top-level prefetch settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefetchConfig {
    /// `prefetch`: false turns prefetching off.
    pub enabled: bool,
    /// `prefetch_predict`: while nothing waits for another model, read
    /// ahead the model most likely asked for next (opt-in).
    pub predict: bool,
    /// `prefetch_max_bytes`: a model whose weights are larger is not
    /// prefetched.
    pub max_bytes: u64,
    /// `prefetch_min_free_bytes`: a prefetch is skipped (or stopped) when
    /// `MemAvailable` minus what it has left to read would fall below this.
    pub min_free_bytes: u64,
}

impl Default for PrefetchConfig {
    fn default() -> PrefetchConfig {
        PrefetchConfig {
            enabled: true,
            predict: false,
            max_bytes: DEFAULT_PREFETCH_MAX_BYTES,
            min_free_bytes: DEFAULT_PREFETCH_MIN_FREE_BYTES,
        }
    }
}

pub(crate) fn parse(root: &Obj<'_>) -> Result<PrefetchConfig, ConfigError> {
    Ok(PrefetchConfig {
        enabled: root.bool_or("prefetch", true)?,
        predict: root.bool_or("prefetch_predict", false)?,
        max_bytes: root.u64_or(
            "prefetch_max_bytes",
            1..=MAX_PREFETCH_BYTES,
            DEFAULT_PREFETCH_MAX_BYTES,
        )?,
        min_free_bytes: root.u64_or(
            "prefetch_min_free_bytes",
            0..=MAX_PREFETCH_BYTES,
            DEFAULT_PREFETCH_MIN_FREE_BYTES,
        )?,
    })
}

/// A model entry's `weights`: absent (`None`: derive from the profile),
/// or the absolute paths of files and directories (directories are read
/// recursively), at most [`MAX_WEIGHTS_ENTRIES`], without duplicates. An
/// empty array says the model has nothing to prefetch.
pub(crate) fn parse_weights(obj: &Obj<'_>) -> Result<Option<Vec<PathBuf>>, ConfigError> {
    let Some(value) = obj.get("weights") else {
        return Ok(None);
    };
    let path = obj.path().field("weights");
    if value.is_null() {
        return Ok(None);
    }
    let items = as_array(value, &path)?;
    if items.len() > MAX_WEIGHTS_ENTRIES {
        return Err(path.error(format!(
            "must have at most {MAX_WEIGHTS_ENTRIES} entries, got {}",
            items.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut weights = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let item_path: JsonPath = path.index(index);
        let weight = as_abs_path(item, &item_path)?;
        if !seen.insert(weight.clone()) {
            return Err(item_path.error("duplicate path"));
        }
        weights.push(weight);
    }
    Ok(Some(weights))
}
