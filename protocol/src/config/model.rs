//! Concrete model entries: the `models` object of the config.
//!
//! An entry describes one set of weights (family, fine-tune, quantization)
//! and the Strata profile that serves it. Whether clients may use it is
//! decided elsewhere (`enabled_models`, see [`super::Registry`]); whether it
//! can load is its [`ModelStatus`].

use super::ConfigError;
use super::json_walk::{JsonPath, Obj, as_bool, quote};
use super::keys::MODEL_KEYS;
use super::metadata::{METADATA_KEYS, ModelMetadata};
use super::profile::{EngineWeights, ProfileInfo};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::PathBuf;

/// Longest accepted model ID, in bytes.
pub const MAX_MODEL_ID_LEN: usize = 128;

/// The two model families. Each has exactly one alias of the same name;
/// there is no alias across families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `qwen3.8-flash-next`
    Qwen38FlashNext,
    /// `qwen3.6-35b-a3b`
    Qwen3635bA3b,
}

impl Family {
    /// Every family, in the fixed order aliases are listed in.
    pub const ALL: [Family; 2] = [Family::Qwen38FlashNext, Family::Qwen3635bA3b];

    /// The family name, which is also its alias name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Family::Qwen38FlashNext => "qwen3.8-flash-next",
            Family::Qwen3635bA3b => "qwen3.6-35b-a3b",
        }
    }

    /// The family called `name`, if any.
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How ready a concrete model is, as `/v1/models` and `check-config` show
/// it. The config yields the first five; the supervisor reports
/// `Verified` (it started once and passed the identity check) and
/// `Loaded` at run time.
///
/// It crosses the supervisor socket, hence the serde derives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelStatus {
    /// `installed` is false.
    NotInstalled,
    /// Installed, but `compatible` is false.
    Incompatible,
    /// No profile configured, or the file does not exist.
    MissingProfile,
    /// The profile cannot be read or breaks a rule (lazy loading,
    /// `before_load`, an API key, a different `model_name`).
    InvalidProfile,
    /// The profile passes every static check; only a start proves more.
    PreparedUnverified,
    /// Started at least once and passed readiness and identity checks.
    Verified,
    /// Currently loaded and serving.
    Loaded,
}

impl ModelStatus {
    /// The name used in JSON and in the summary.
    pub fn as_str(&self) -> &'static str {
        match self {
            ModelStatus::NotInstalled => "not_installed",
            ModelStatus::Incompatible => "incompatible",
            ModelStatus::MissingProfile => "missing_profile",
            ModelStatus::InvalidProfile => "invalid_profile",
            ModelStatus::PreparedUnverified => "prepared_unverified",
            ModelStatus::Verified => "verified",
            ModelStatus::Loaded => "loaded",
        }
    }

    /// Whether the router may try to start this model.
    pub fn is_prepared(&self) -> bool {
        matches!(
            self,
            ModelStatus::PreparedUnverified | ModelStatus::Verified | ModelStatus::Loaded
        )
    }
}

impl fmt::Display for ModelStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One concrete model, validated. `prepared`, `prepared_detail` and
/// `profile_info` are final only after [`super::Config::check_profiles`].
#[derive(Clone, Debug, PartialEq)]
pub struct ModelEntry {
    /// The public router ID (the key in `models`).
    pub id: String,
    pub family: Family,
    /// `None` for base weights.
    pub fine_tune: Option<String>,
    pub quantization: String,
    /// Absolute path of the Strata profile, if configured.
    pub profile: Option<PathBuf>,
    /// The profile's `model_name`, which Strata reports as its identity.
    pub upstream_model: String,
    /// Weights are installed (`installed`, or the legacy `enabled`).
    pub installed: bool,
    /// The operator checked memory and backend compatibility.
    pub compatible: bool,
    /// The config's own `metadata` object.
    pub metadata: ModelMetadata,
    /// Static status: the first of not_installed, incompatible,
    /// missing_profile, invalid_profile, else prepared_unverified.
    pub prepared: ModelStatus,
    /// A generic reason for missing_profile or invalid_profile, such as
    /// `profile sets lazy_load: true`. Never profile contents.
    pub prepared_detail: Option<String>,
    /// What the router read from a valid profile.
    pub profile_info: Option<ProfileInfo>,
    /// `weights`: the files (and directories) the model's load reads, for
    /// prefetching; `None` when the key is absent (then derived from the
    /// profile where it names them, see [`ModelEntry::weights_source`]).
    pub weights: Option<Vec<PathBuf>>,
}

impl ModelEntry {
    /// Metadata for `/v1/models`: each field from the config's `metadata`,
    /// else from the profile's `router_metadata`.
    pub fn effective_metadata(&self) -> ModelMetadata {
        let from_profile = self.profile_info.as_ref().map(|p| &p.router_metadata);
        let pick = |own: &Option<Value>, profile: Option<&Option<Value>>| {
            own.clone().or_else(|| profile.and_then(Clone::clone))
        };
        ModelMetadata {
            meta: pick(&self.metadata.meta, from_profile.map(|m| &m.meta)),
            architecture: pick(
                &self.metadata.architecture,
                from_profile.map(|m| &m.architecture),
            ),
            thinking: pick(&self.metadata.thinking, from_profile.map(|m| &m.thinking)),
        }
    }

    /// Which files a load of this model reads: the config's `weights`, else
    /// the path the profile's engine arguments name (`--native` or
    /// `--pack`), else none.
    pub fn weights_source(&self) -> WeightsSource {
        if let Some(paths) = &self.weights {
            return WeightsSource::Configured(paths.clone());
        }
        match self
            .profile_info
            .as_ref()
            .and_then(|info| info.engine_weights.clone())
        {
            Some(derived) => WeightsSource::FromProfile(derived),
            None => WeightsSource::None,
        }
    }

    /// The status that needs no profile I/O: not_installed, incompatible,
    /// missing_profile (no path configured), else a provisional
    /// prepared_unverified that [`super::Config::check_profiles`] refines.
    pub(crate) fn static_status(&self) -> (ModelStatus, Option<String>) {
        if !self.installed {
            (ModelStatus::NotInstalled, None)
        } else if !self.compatible {
            (ModelStatus::Incompatible, None)
        } else if self.profile.is_none() {
            (
                ModelStatus::MissingProfile,
                Some("no profile is configured".to_owned()),
            )
        } else {
            (ModelStatus::PreparedUnverified, None)
        }
    }
}

/// Where a model's weights list comes from ([`ModelEntry::weights_source`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightsSource {
    /// The config's `weights` (possibly empty: nothing to prefetch).
    Configured(Vec<PathBuf>),
    /// Derived from the profile's engine arguments.
    FromProfile(EngineWeights),
    /// Neither: the model is not prefetched.
    None,
}

impl WeightsSource {
    /// The paths, however they were found.
    pub fn paths(&self) -> Vec<PathBuf> {
        match self {
            WeightsSource::Configured(paths) => paths.clone(),
            WeightsSource::FromProfile(derived) => vec![derived.path.clone()],
            WeightsSource::None => Vec::new(),
        }
    }

    /// How the list was found, for logs and `check-config` (never a path
    /// read from the profile: profiles may hold secrets).
    pub fn describe(&self) -> String {
        match self {
            WeightsSource::Configured(paths) => format!("weights: {} configured", paths.len()),
            WeightsSource::FromProfile(derived) => {
                format!("weights: from the profile's args ({})", derived.flag)
            }
            WeightsSource::None => "weights: none".to_owned(),
        }
    }
}

/// Whether `id` is acceptable as a model ID: 1 to 128 ASCII letters,
/// digits, `_`, `.` or `-`. IDs reach HTTP headers, logs and records, so
/// nothing else is allowed.
pub fn is_valid_model_id(id: &str) -> bool {
    (1..=MAX_MODEL_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Reads the `models` object into entries sorted by ID. Legacy-spelling
/// notes go to `warnings`.
pub(crate) fn parse_models(
    value: &Value,
    path: JsonPath,
    warnings: &mut Vec<String>,
) -> Result<Vec<ModelEntry>, ConfigError> {
    let models = Obj::new(value, path)?;
    if models.is_empty() {
        return Err(models.path().error("must contain at least one model entry"));
    }
    let mut entries = Vec::new();
    // `entries()` is sorted, so the result is sorted by ID.
    for (id, entry) in models.entries() {
        entries.push(parse_entry(id, entry, models.path().entry(id), warnings)?);
    }
    Ok(entries)
}

fn parse_entry(
    id: &str,
    value: &Value,
    path: JsonPath,
    warnings: &mut Vec<String>,
) -> Result<ModelEntry, ConfigError> {
    if !is_valid_model_id(id) {
        return Err(path.error(format!(
            "model id must be 1 to {MAX_MODEL_ID_LEN} ascii letters, digits, \"_\", \".\" or \"-\""
        )));
    }
    if let Some(family) = Family::from_name(id) {
        return Err(path.error(format!(
            "model id must not be the alias name {family}; concrete ids and aliases share one namespace"
        )));
    }
    let obj = Obj::new(value, path)?.with_schema(&MODEL_KEYS)?;

    let family_path = obj.path().field("family");
    let family_name = obj.string("family")?;
    let family = Family::from_name(family_name).ok_or_else(|| {
        family_path.error(format!(
            "must be {} or {}, got {}",
            quote(Family::Qwen38FlashNext.as_str()),
            quote(Family::Qwen3635bA3b.as_str()),
            quote(family_name)
        ))
    })?;

    let installed = parse_installed(&obj, id, warnings)?;
    let metadata = match obj.get("metadata") {
        None => ModelMetadata::default(),
        Some(value) => {
            let meta = Obj::new(value, obj.path().field("metadata"))?;
            meta.deny_unknown(&METADATA_KEYS)?;
            ModelMetadata::from_obj(&meta)
        }
    };

    let mut entry = ModelEntry {
        id: id.to_owned(),
        family,
        fine_tune: obj.opt_string("fine_tune")?.map(str::to_owned),
        quantization: obj.string("quantization")?.to_owned(),
        profile: obj.opt_abs_path("profile")?,
        upstream_model: obj.string("upstream_model")?.to_owned(),
        installed,
        compatible: obj.bool_or("compatible", false)?,
        metadata,
        prepared: ModelStatus::NotInstalled,
        prepared_detail: None,
        profile_info: None,
        weights: super::prefetch::parse_weights(&obj)?,
    };
    (entry.prepared, entry.prepared_detail) = entry.static_status();
    Ok(entry)
}

/// `installed`, with the legacy per-model `enabled` accepted as another
/// spelling of it. Older configs used `enabled` for what is now
/// `installed`; access control moved to the top-level `enabled_models`.
fn parse_installed(
    obj: &Obj<'_>,
    id: &str,
    warnings: &mut Vec<String>,
) -> Result<bool, ConfigError> {
    let installed = obj.opt_bool("installed")?;
    let legacy = match obj.get("enabled") {
        None => None,
        Some(value) => Some(as_bool(value, &obj.path().field("enabled"))?),
    };
    match (installed, legacy) {
        (Some(a), Some(b)) if a != b => Err(obj.path().field("enabled").error(format!(
            "legacy enabled is a spelling of installed and must agree with it (enabled: {b}, installed: {a})"
        ))),
        (_, Some(b)) => {
            warnings.push(format!(
                "{}: legacy spelling of installed; use installed, and enabled_models to restrict access to {id}",
                obj.path().field("enabled")
            ));
            Ok(b)
        }
        (Some(a), None) => Ok(a),
        (None, None) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_allow_only_the_documented_characters() {
        for ok in ["a", "Qwen3.6_x-1", &"x".repeat(128)] {
            assert!(is_valid_model_id(ok), "{ok}");
        }
        for bad in ["", "a b", "a/b", "é", "a:b", &"x".repeat(129)] {
            assert!(!is_valid_model_id(bad), "{bad}");
        }
    }

    #[test]
    fn status_names_match_serde_names() {
        for status in [
            ModelStatus::NotInstalled,
            ModelStatus::Incompatible,
            ModelStatus::MissingProfile,
            ModelStatus::InvalidProfile,
            ModelStatus::PreparedUnverified,
            ModelStatus::Verified,
            ModelStatus::Loaded,
        ] {
            let json = serde_json::to_value(status).unwrap();
            assert_eq!(json, status.as_str());
            let back: ModelStatus = serde_json::from_value(json).unwrap();
            assert_eq!(back, status);
        }
    }

    #[test]
    fn bincode_round_trips_status() {
        let bytes = bincode::serialize(&ModelStatus::Loaded).unwrap();
        let back: ModelStatus = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, ModelStatus::Loaded);
    }
}
