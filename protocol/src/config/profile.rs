//! Static checks of a Strata profile, the JSON file Strata setup writes.
//!
//! A profile is trusted executable configuration, but some of its settings
//! would break the router's contract with the backend: lazy loading (the
//! port would open before the model is loaded), `before_load` commands (a
//! shell the router does not control), an API key (the router talks to the
//! backend without one), or a `model_name` other than the entry's
//! `upstream_model` (the identity check would fail on every start). Such a
//! profile makes the model `invalid_profile`; it does not reject the whole
//! config, because the other models are still usable.
//!
//! Every detail string here is generic: nothing read from the profile is
//! ever echoed, since profiles may hold secrets.

use super::json_walk::{JsonPath, Obj};
use super::metadata::ModelMetadata;
use serde_json::{Map, Value};
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

/// The `model_name` Strata's server uses when a profile does not set one.
pub const STRATA_DEFAULT_MODEL_NAME: &str = "qwen3.8-flash-next";

/// Profiles larger than this are refused instead of read: a real one is a
/// few kilobytes, and both daemons read every profile at start.
pub const MAX_PROFILE_BYTES: u64 = 16 * 1024 * 1024;

/// What the router reads from a valid profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProfileInfo {
    /// The backend's threshold for cache-aware ordering, if set.
    pub conversation_cache_min_tokens: Option<u64>,
    /// `meta`, `architecture` and `thinking` from `router_metadata`; other
    /// keys there are ignored.
    pub router_metadata: ModelMetadata,
    /// Strata's own `aliases` for the model: names it answers with in a
    /// response's `model` when a request asks for one of them (otherwise it
    /// answers `model_name`). Entries that are not strings are ignored.
    pub aliases: Vec<String>,
    /// The weights the engine's arguments name, if they name one
    /// unambiguously (the one `--native` or `--pack` in `args`).
    pub engine_weights: Option<EngineWeights>,
    /// The file Strata appends its engine's stderr to (the profile's `log`),
    /// absolute: a relative value is Strata's working directory's,
    /// `strata_dir`. The router never reads it (it may hold secrets); a
    /// failed start's cause and `check-config` name it.
    pub engine_log: Option<PathBuf>,
}

/// The weights path a profile's engine arguments name: the value of the one
/// `--native` or `--pack` in `args` (Strata's `model_path`), resolved the
/// way the engine resolves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineWeights {
    /// `--native` or `--pack`.
    pub flag: &'static str,
    /// Absolute: a relative value is taken against the profile's `cwd`,
    /// itself relative to `strata_dir` (the server's working directory,
    /// which the engine's is resolved against).
    pub path: PathBuf,
}

/// The engine flags that name the weights.
const WEIGHTS_FLAGS: [&str; 2] = ["--native", "--pack"];

/// Derives [`EngineWeights`] from a profile: only when `args` is an array
/// holding exactly one weights flag with a value (`--native PATH` or
/// `--native=PATH`, likewise `--pack`); anything else (no flag, both, one
/// twice, a flag without a value) derives nothing.
fn engine_weights(profile: &Map<String, Value>, strata_dir: &Path) -> Option<EngineWeights> {
    let args: Vec<&str> = profile
        .get("args")?
        .as_array()?
        .iter()
        .map(|arg| arg.as_str().unwrap_or(""))
        .collect();
    let mut found = Vec::new();
    for (index, arg) in args.iter().enumerate() {
        for flag in WEIGHTS_FLAGS {
            let value = if *arg == flag {
                Some(args.get(index + 1).copied().unwrap_or(""))
            } else {
                arg.strip_prefix(flag)
                    .and_then(|rest| rest.strip_prefix('='))
            };
            if let Some(value) = value {
                found.push((flag, value));
            }
        }
    }
    let [(flag, value)] = found[..] else {
        return None;
    };
    if value.is_empty() {
        return None;
    }
    let value = Path::new(value);
    let path = if value.is_absolute() {
        value.to_path_buf()
    } else {
        let base = match profile.get("cwd").and_then(Value::as_str) {
            Some(cwd) => strata_dir.join(cwd),
            None => strata_dir.to_path_buf(),
        };
        base.join(value)
    };
    Some(EngineWeights { flag, path })
}

/// The outcome of checking one profile.
#[derive(Debug, PartialEq)]
pub(crate) enum ProfileCheck {
    /// The file does not exist.
    Missing(String),
    /// The file exists but cannot be used; the string is a generic reason.
    Invalid(String),
    /// Every rule passes.
    Valid(Box<ProfileInfo>),
}

/// Reads and checks the profile at `path` for a model whose backend must
/// report `upstream_model`.
pub(crate) fn check_profile(path: &Path, upstream_model: &str, strata_dir: &Path) -> ProfileCheck {
    let object = match read_object(path) {
        Ok(object) => object,
        Err(check) => return check,
    };
    match check_rules(&object, upstream_model) {
        Ok(mut info) => {
            info.engine_weights = engine_weights(&object, strata_dir);
            info.engine_log = object
                .get("log")
                .and_then(Value::as_str)
                .filter(|log| !log.is_empty())
                .map(|log| strata_dir.join(log));
            ProfileCheck::Valid(Box::new(info))
        }
        Err(reason) => ProfileCheck::Invalid(reason.to_owned()),
    }
}

fn read_object(path: &Path) -> Result<Map<String, Value>, ProfileCheck> {
    let invalid = |reason: String| ProfileCheck::Invalid(reason);
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Err(ProfileCheck::Missing(
                "profile file does not exist".to_owned(),
            ));
        }
        Err(err) => {
            return Err(invalid(format!(
                "profile file cannot be read: {}",
                err.kind()
            )));
        }
    };
    let metadata = file
        .metadata()
        .map_err(|err| invalid(format!("profile file cannot be read: {}", err.kind())))?;
    if !metadata.is_file() {
        return Err(invalid("profile path is not a regular file".to_owned()));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| invalid(format!("profile file cannot be read: {}", err.kind())))?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        return Err(invalid(format!(
            "profile file is larger than {MAX_PROFILE_BYTES} bytes"
        )));
    }
    // Plain serde_json on purpose: like Python's json module, it keeps the
    // last of duplicate keys, so the router sees what Strata will see.
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(invalid("profile is not a json object".to_owned())),
        Err(err) => Err(invalid(format!(
            "profile is not valid json (line {}, column {})",
            err.line(),
            err.column()
        ))),
    }
}

/// The rules, in a fixed order so the reported reason is deterministic.
fn check_rules(
    profile: &Map<String, Value>,
    upstream_model: &str,
) -> Result<ProfileInfo, &'static str> {
    match profile.get("lazy_load") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => return Err("profile sets lazy_load: true"),
        Some(_) => return Err("profile sets lazy_load to a value other than true or false"),
    }
    match profile.get("before_load") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(Value::String(_) | Value::Array(_)) => {
            return Err("profile sets before_load commands");
        }
        Some(_) => return Err("profile sets before_load to an unsupported value"),
    }
    // `null` is how a generated profile says "no key"; any other value,
    // even an empty string or list, is an API key setting.
    if profile.get("api_key").is_some_and(|v| !v.is_null()) {
        return Err("profile contains an api_key");
    }
    match profile.get("model_name") {
        None if upstream_model != STRATA_DEFAULT_MODEL_NAME => {
            return Err(
                "profile has no model_name, so strata serves its default qwen3.8-flash-next, which differs from upstream_model",
            );
        }
        None => {}
        Some(Value::String(name)) if name != upstream_model => {
            return Err("profile model_name differs from upstream_model");
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err("profile model_name is not a string"),
    }
    let conversation_cache_min_tokens = match profile.get("conversation_cache_min_tokens") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .ok_or("profile conversation_cache_min_tokens is not a non-negative integer")?,
        ),
    };
    let router_metadata = match profile.get("router_metadata") {
        None | Some(Value::Null) => ModelMetadata::default(),
        Some(value) => {
            let obj = Obj::new(value, JsonPath::root())
                .map_err(|_| "profile router_metadata is not an object")?;
            ModelMetadata::from_obj(&obj)
        }
    };
    let aliases = match profile.get("aliases") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(|name| name.as_str().map(str::to_owned))
            .collect(),
        Some(Value::String(name)) => vec![name.clone()],
        _ => Vec::new(),
    };
    Ok(ProfileInfo {
        conversation_cache_min_tokens,
        router_metadata,
        aliases,
        engine_weights: None,
        engine_log: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(profile: Value, upstream: &str) -> Result<ProfileInfo, &'static str> {
        check_rules(profile.as_object().unwrap(), upstream)
    }

    #[test]
    fn accepted_spellings_of_off() {
        let off = json!({
            "model_name": "m", "lazy_load": false, "before_load": [],
            "api_key": null, "router_metadata": null,
            "conversation_cache_min_tokens": null
        });
        assert_eq!(rules(off, "m"), Ok(ProfileInfo::default()));
        assert!(rules(json!({"model_name": "m", "before_load": ""}), "m").is_ok());
    }

    #[test]
    fn strata_aliases_are_read_leniently() {
        let info = rules(json!({"model_name": "m", "aliases": ["a", 5, "b"]}), "m").unwrap();
        assert_eq!(info.aliases, ["a", "b"]);
        let info = rules(json!({"model_name": "m", "aliases": "a"}), "m").unwrap();
        assert_eq!(info.aliases, ["a"]);
        let info = rules(json!({"model_name": "m", "aliases": {"x": 1}}), "m").unwrap();
        assert!(info.aliases.is_empty());
    }

    #[test]
    fn the_weights_are_derived_only_from_one_unambiguous_flag() {
        let dir = Path::new("/opt/strata");
        let derive = |profile: Value| engine_weights(profile.as_object().unwrap(), dir);
        let weights = |flag, path: &str| {
            Some(EngineWeights {
                flag,
                path: PathBuf::from(path),
            })
        };
        let cases = [
            (
                json!({"args": ["--native", "/m/a.strata"]}),
                weights("--native", "/m/a.strata"),
            ),
            (
                json!({"args": ["-x", "--pack=/m/b.pack"]}),
                weights("--pack", "/m/b.pack"),
            ),
            (
                json!({"args": ["--native", "w/a.strata"], "cwd": "engine"}),
                weights("--native", "/opt/strata/engine/w/a.strata"),
            ),
            (
                json!({"args": ["--native", "a.strata"], "cwd": "/srv"}),
                weights("--native", "/srv/a.strata"),
            ),
            (
                json!({"args": ["--native", "a.strata"]}),
                weights("--native", "/opt/strata/a.strata"),
            ),
            (json!({"args": ["--native", "/a", "--pack", "/b"]}), None),
            (json!({"args": ["--native", "/a", "--native", "/a"]}), None),
            (json!({"args": ["--native"]}), None),
            (json!({"args": ["--native="]}), None),
            (json!({"args": ["--natives", "/a"]}), None),
            (json!({"args": "--native /a"}), None),
            (json!({}), None),
        ];
        for (profile, expected) in cases {
            assert_eq!(derive(profile.clone()), expected, "{profile}");
        }
    }

    #[test]
    fn refused_values() {
        let cases = [
            (json!({"lazy_load": 1}), "lazy_load to a value"),
            (
                json!({"before_load": {"a": 1}}),
                "before_load to an unsupported",
            ),
            (json!({"before_load": ["x"]}), "before_load commands"),
            (json!({"api_key": ""}), "api_key"),
            (json!({"api_key": []}), "api_key"),
            (json!({"model_name": 5}), "model_name is not a string"),
            (json!({"conversation_cache_min_tokens": -1}), "non-negative"),
            (
                json!({"conversation_cache_min_tokens": 1.5}),
                "non-negative",
            ),
            (
                json!({"router_metadata": []}),
                "router_metadata is not an object",
            ),
        ];
        for (mut profile, expected) in cases {
            if profile.get("model_name").is_none() {
                profile["model_name"] = json!("m");
            }
            let err = rules(profile.clone(), "m").unwrap_err();
            assert!(err.contains(expected), "{profile}: {err}");
        }
    }
}
