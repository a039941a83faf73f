//! Hand-walking a parsed JSON document with a path tracker.
//!
//! The config is not deserialized with `#[derive(Deserialize)]` because
//! serde's errors cannot name the JSON path of the offending value, and the
//! interface requires that every error does (`models["x"].profile: ...`).
//! These helpers read one typed value each and turn every mismatch into a
//! [`ConfigError`] at the right path.

use super::ConfigError;
use serde_json::{Map, Value};
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;

/// A position in the config document, written the way errors show it:
/// schema keys with dots (`request_log_path`, `models["x"].profile`),
/// user-chosen keys in brackets with JSON quoting (`models["x"]`), array
/// items by index (`enabled_models[2]`). The document itself is `$`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JsonPath(String);

impl JsonPath {
    /// The whole document.
    pub(crate) fn root() -> Self {
        JsonPath(String::new())
    }

    /// A key of a fixed-schema object. Keys that are not plain identifiers
    /// (an unknown key may be anything) fall back to the bracket form so
    /// the path stays unambiguous and free of control characters.
    pub(crate) fn field(&self, key: &str) -> Self {
        let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !plain {
            return self.entry(key);
        }
        if self.0.is_empty() {
            JsonPath(key.to_owned())
        } else {
            JsonPath(format!("{}.{key}", self.0))
        }
    }

    /// A user-chosen key (a model ID or an alias name).
    pub(crate) fn entry(&self, key: &str) -> Self {
        let base = if self.0.is_empty() { "$" } else { &self.0 };
        JsonPath(format!("{base}[{}]", quote(key)))
    }

    /// An array item.
    pub(crate) fn index(&self, index: usize) -> Self {
        let base = if self.0.is_empty() { "$" } else { &self.0 };
        JsonPath(format!("{base}[{index}]"))
    }

    /// An error at this path.
    pub(crate) fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.to_string(), message)
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("$")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// `s` as a JSON string literal: quoted, with control characters escaped,
/// so a config value quoted in an error cannot forge log lines.
pub(crate) fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// One JSON object being read, with its path.
pub(crate) struct Obj<'a> {
    path: JsonPath,
    map: &'a Map<String, Value>,
    /// The keys declared for this object ([`super::keys`]), once
    /// [`Obj::with_schema`] has checked them.
    declared: Option<&'static [&'static str]>,
}

impl<'a> Obj<'a> {
    /// `value` must be an object.
    pub(crate) fn new(value: &'a Value, path: JsonPath) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Ok(Obj {
                path,
                map,
                declared: None,
            }),
            _ => Err(path.error("expected an object")),
        }
    }

    pub(crate) fn path(&self) -> &JsonPath {
        &self.path
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// This object, checked against the keys declared for it: an unknown
    /// key is an error ([`Obj::deny_unknown`]), and from now on reading a
    /// key that is not declared is a bug, caught in debug builds (every
    /// test), so no key can be parsed without being declared in
    /// [`super::keys::KEYS`].
    pub(crate) fn with_schema(
        self,
        declared: &'static [&'static str],
    ) -> Result<Self, ConfigError> {
        self.deny_unknown(declared)?;
        Ok(Obj {
            declared: Some(declared),
            ..self
        })
    }

    /// Fails on the first key (in sorted order, so the error is the same
    /// on every run) that is not in `known`.
    pub(crate) fn deny_unknown(&self, known: &[&str]) -> Result<(), ConfigError> {
        match self
            .entries()
            .into_iter()
            .find(|(key, _)| !known.contains(key))
        {
            Some((key, _)) => Err(self.path.field(key).error("unknown key")),
            None => Ok(()),
        }
    }

    /// All members, sorted by key.
    pub(crate) fn entries(&self) -> Vec<(&'a str, &'a Value)> {
        let mut entries: Vec<_> = self.map.iter().map(|(k, v)| (k.as_str(), v)).collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries
    }

    /// The member `key`; an explicit `null` counts as present.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        debug_assert!(
            self.declared.is_none_or(|declared| declared.contains(&key)),
            "{}: parsed but not declared in config::keys::KEYS",
            self.path.field(key)
        );
        self.map.get(key)
    }

    pub(crate) fn required(&self, key: &str) -> Result<&'a Value, ConfigError> {
        self.get(key)
            .ok_or_else(|| self.path.field(key).error("required key is missing"))
    }

    /// An optional boolean (`null` is not a boolean).
    pub(crate) fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        self.get(key)
            .map(|value| as_bool(value, &self.path.field(key)))
            .transpose()
    }

    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        Ok(self.opt_bool(key)?.unwrap_or(default))
    }

    /// An optional integer in `range`.
    pub(crate) fn opt_u64_in(
        &self,
        key: &str,
        range: RangeInclusive<u64>,
    ) -> Result<Option<u64>, ConfigError> {
        self.get(key)
            .map(|value| as_u64_in(value, &self.path.field(key), range))
            .transpose()
    }

    /// An integer in `range`, `default` when the key is omitted.
    pub(crate) fn u64_or(
        &self,
        key: &str,
        range: RangeInclusive<u64>,
        default: u64,
    ) -> Result<u64, ConfigError> {
        debug_assert!(range.contains(&default), "{key} default out of range");
        Ok(self.opt_u64_in(key, range)?.unwrap_or(default))
    }

    /// A required non-empty string.
    pub(crate) fn string(&self, key: &str) -> Result<&'a str, ConfigError> {
        as_nonempty_str(self.required(key)?, &self.path.field(key))
    }

    /// A non-empty string, or `None` when omitted or `null`.
    pub(crate) fn opt_string(&self, key: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(_)) => self.string(key).map(Some),
            Some(_) => Err(self.path.field(key).error("expected a string or null")),
        }
    }

    /// A required absolute path.
    pub(crate) fn abs_path(&self, key: &str) -> Result<PathBuf, ConfigError> {
        as_abs_path(self.required(key)?, &self.path.field(key))
    }

    /// An absolute path, or `None` when omitted or `null`.
    pub(crate) fn opt_abs_path(&self, key: &str) -> Result<Option<PathBuf>, ConfigError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value @ Value::String(_)) => as_abs_path(value, &self.path.field(key)).map(Some),
            Some(_) => Err(self
                .path
                .field(key)
                .error("expected an absolute path string or null")),
        }
    }
}

pub(crate) fn as_bool(value: &Value, path: &JsonPath) -> Result<bool, ConfigError> {
    value
        .as_bool()
        .ok_or_else(|| path.error("expected a boolean"))
}

/// A JSON integer (not a float, not a string) inside `range`.
pub(crate) fn as_u64_in(
    value: &Value,
    path: &JsonPath,
    range: RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let Value::Number(number) = value else {
        return Err(path.error("expected an integer"));
    };
    let out_of_range = |shown: &dyn fmt::Display| {
        let rule = if *range.end() == u64::MAX {
            format!("must be at least {}", range.start())
        } else {
            format!("must be between {} and {}", range.start(), range.end())
        };
        path.error(format!("{rule}, got {shown}"))
    };
    if let Some(n) = number.as_u64() {
        if range.contains(&n) {
            Ok(n)
        } else {
            Err(out_of_range(&n))
        }
    } else if let Some(n) = number.as_i64() {
        // Only negative integers reach here.
        Err(out_of_range(&n))
    } else {
        Err(path.error("expected an integer"))
    }
}

pub(crate) fn as_str<'a>(value: &'a Value, path: &JsonPath) -> Result<&'a str, ConfigError> {
    value
        .as_str()
        .ok_or_else(|| path.error("expected a string"))
}

/// A non-empty string without control characters: these strings end up in
/// logs, `/v1/models` and accounting records.
pub(crate) fn as_nonempty_str<'a>(
    value: &'a Value,
    path: &JsonPath,
) -> Result<&'a str, ConfigError> {
    let s = as_str(value, path)?;
    if s.is_empty() {
        return Err(path.error("must not be empty"));
    }
    if s.chars().any(char::is_control) {
        return Err(path.error("must not contain control characters"));
    }
    Ok(s)
}

/// An absolute path. Existence is not checked here: the config is
/// validated before anything is bound or spawned, and profiles are checked
/// separately.
pub(crate) fn as_abs_path(value: &Value, path: &JsonPath) -> Result<PathBuf, ConfigError> {
    let s = as_str(value, path)?;
    if s.contains('\0') {
        return Err(path.error("must not contain a nul byte"));
    }
    let p = PathBuf::from(s);
    if !p.is_absolute() {
        return Err(path.error("must be an absolute path"));
    }
    Ok(p)
}

pub(crate) fn as_array<'a>(value: &'a Value, path: &JsonPath) -> Result<&'a [Value], ConfigError> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| path.error("expected an array"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_render_like_the_interface_examples() {
        let root = JsonPath::root();
        assert_eq!(root.to_string(), "$");
        assert_eq!(root.field("backend_port").to_string(), "backend_port");
        assert_eq!(
            root.field("models").entry("x").field("profile").to_string(),
            r#"models["x"].profile"#
        );
        assert_eq!(
            root.field("aliases")
                .entry("qwen3.6-35b-a3b")
                .field("allowed_models")
                .index(2)
                .to_string(),
            r#"aliases["qwen3.6-35b-a3b"].allowed_models[2]"#
        );
        assert_eq!(root.index(0).to_string(), "$[0]");
        // An odd unknown key is quoted rather than spliced in raw.
        assert_eq!(root.field("a b\n").to_string(), r#"$["a b\n"]"#);
        assert_eq!(
            root.field("models").field("a.b").to_string(),
            r#"models["a.b"]"#
        );
    }

    #[test]
    fn integers_must_be_json_integers_in_range() {
        let p = JsonPath::root().field("k");
        assert_eq!(as_u64_in(&json!(5), &p, 1..=10), Ok(5));
        let err = as_u64_in(&json!(0), &p, 1..=10).unwrap_err();
        assert_eq!(err.to_string(), "k: must be between 1 and 10, got 0");
        let err = as_u64_in(&json!(-3), &p, 0..=10).unwrap_err();
        assert_eq!(err.message, "must be between 0 and 10, got -3");
        let err = as_u64_in(&json!(-3), &p, 0..=u64::MAX).unwrap_err();
        assert_eq!(err.message, "must be at least 0, got -3");
        for bad in [json!(1.0), json!("5"), json!(null), json!(true)] {
            let err = as_u64_in(&bad, &p, 0..=10).unwrap_err();
            assert_eq!(err.message, "expected an integer", "{bad}");
        }
    }

    #[test]
    fn unknown_keys_are_reported_in_sorted_order() {
        let value = json!({"b": 1, "zz": 2, "aa": 3});
        let obj = Obj::new(&value, JsonPath::root()).unwrap();
        let err = obj.deny_unknown(&["b"]).unwrap_err();
        assert_eq!(err.to_string(), "aa: unknown key");
    }
}
