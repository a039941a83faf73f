//! A minimal in-memory [`Config`] for the daemons' unit tests, and the
//! sample document and per-key sample values the key-table tests use
//! ([`sample_document`], [`set_sample`], [`set_default`]): protocol's own
//! (`keys_tests.rs`) and `check-config`'s.
//!
//! Compiled only for protocol's own tests and with the `testing` feature,
//! which the supervisor, the proxy and `ctl` enable in their
//! dev-dependencies alone, so no product build contains it. It lives here because a test
//! that wants a `Config` without writing a file needs this crate:
//! `strata-test-support` depends on no workspace crate (protocol's own
//! tests use it) and can only write config files.

use std::path::Path;

use serde_json::{Value, json};

use super::Config;
use super::keys::{Default, Form, Key, Place};

/// A config with one model, `m` (`qwen3.8-flash-next`, `q4`, upstream `m`),
/// that nothing can launch: its interpreter and `strata_dir` do not exist.
/// The control socket is `control_socket`, the supervisor socket beside it.
pub fn one_model_config(control_socket: &Path) -> Config {
    let text = serde_json::json!({
        "python": "/nonexistent/python3",
        "strata_dir": "/nonexistent",
        "backend_port": 1,
        "control_socket": control_socket,
        "models": {"m": {"family": "qwen3.8-flash-next", "quantization": "q4", "upstream_model": "m"}},
    })
    .to_string();
    Config::from_json_str(&text).expect("the test config is valid")
}

/// The model of [`sample_document`] that model-entry samples change: it is
/// installed and compatible but has no profile (`missing_profile`), and no
/// alias lists it, so its family may change.
pub const SAMPLE_MODEL: &str = "x";

/// A valid config document every key sample applies to: three models (one
/// per family in the aliases, and [`SAMPLE_MODEL`]), both aliases, and a
/// request log file, so the summary shows the file's settings too. Nothing
/// it names exists.
pub fn sample_document() -> Value {
    json!({
        "python": "/nonexistent/python3",
        "strata_dir": "/nonexistent",
        "backend_port": 8095,
        "control_socket": "/nonexistent/control.sock",
        "request_log_path": "/nonexistent/requests.jsonl",
        "models": {
            "a": {"family": "qwen3.8-flash-next", "quantization": "q4", "upstream_model": "a"},
            "b": {"family": "qwen3.6-35b-a3b", "quantization": "q4", "upstream_model": "b"},
            SAMPLE_MODEL: {
                "family": "qwen3.8-flash-next",
                "quantization": "q4",
                "upstream_model": SAMPLE_MODEL,
                "installed": true,
                "compatible": true
            }
        },
        "aliases": {
            "qwen3.8-flash-next": {"allowed_models": ["a"]},
            "qwen3.6-35b-a3b": {"allowed_models": ["b"]}
        }
    })
}

/// The object `key` lives in within `document`.
pub fn key_owner<'a>(document: &'a mut Value, key: &Key) -> &'a mut serde_json::Map<String, Value> {
    let owner = match key.place {
        Place::TopLevel => document,
        Place::Model => &mut document["models"][SAMPLE_MODEL],
    };
    owner.as_object_mut().expect("an object")
}

/// Sets `key` in `document` (a [`sample_document`]) to a valid value that
/// differs from what the document has (set or by default), so the parsed
/// config differs. Most samples follow from the key's declared form; the
/// others are written here by name.
///
/// # Panics
/// For a key whose form gives no sample and that has none here.
pub fn set_sample(document: &mut Value, key: &Key) {
    let current = key_owner(document, key).get(key.name).cloned();
    let by_name = match (key.place, key.name) {
        (Place::TopLevel, "listen") => Some(json!("127.0.0.1:9")),
        (Place::TopLevel, "models") => {
            let mut models = document["models"].clone();
            models["y"] =
                json!({"family": "qwen3.6-35b-a3b", "quantization": "q4", "upstream_model": "y"});
            Some(models)
        }
        (Place::TopLevel, "aliases") => {
            Some(json!({"qwen3.8-flash-next": {"allowed_models": ["a"]}}))
        }
        (Place::TopLevel, "enabled_models") => Some(json!(["a", SAMPLE_MODEL])),
        (Place::TopLevel, "queue_ms" | "response_ms") => Some(json!(5)),
        (Place::TopLevel, "cooldown_max_ms") => Some(json!(600_000)),
        (Place::Model, "fine_tune" | "quantization" | "upstream_model") => Some(json!("sample")),
        (Place::Model, "metadata") => Some(json!({"meta": "sample"})),
        (Place::Model, "weights") => Some(json!(["/nonexistent/weights"])),
        (Place::Model, "enabled") => {
            // The legacy spelling must agree with `installed`: replace it.
            let owner = key_owner(document, key);
            owner.remove("installed");
            owner.insert("enabled".to_owned(), json!(false));
            return;
        }
        _ => None,
    };
    let sample = by_name.unwrap_or_else(|| {
        generic_sample(key, current.as_ref()).unwrap_or_else(|| {
            panic!(
                "no sample value for config key {}: add one to config::testing::set_sample",
                key.name
            )
        })
    });
    key_owner(document, key).insert(key.name.to_owned(), sample);
}

/// A sample that follows from the key's form: the other boolean, an end of
/// the range, another choice, another path.
fn generic_sample(key: &Key, current: Option<&Value>) -> Option<Value> {
    let current = current.cloned().or_else(|| default_value(key));
    match key.form {
        Form::Bool => Some(json!(!current?.as_bool()?)),
        Form::Integer { min, max, .. } => {
            let value = if current.as_ref().and_then(Value::as_u64) == Some(min) {
                max
            } else {
                min
            };
            Some(json!(value))
        }
        Form::Choice(values) => values
            .iter()
            .find(|value| current.as_ref().and_then(Value::as_str) != Some(**value))
            .map(|value| json!(value)),
        Form::Path { .. } => Some(json!(format!("/nonexistent/sample/{}", key.name))),
        Form::IntegerRule { .. } | Form::Other { .. } => None,
    }
}

/// The key's declared default as JSON; `None` when it is required or
/// derived from other settings.
pub fn default_value(key: &Key) -> Option<Value> {
    match key.default {
        Default::Integer(value) => Some(json!(value)),
        Default::Json(text) => {
            Some(serde_json::from_str(text).expect("a declared default is JSON"))
        }
        Default::Required | Default::Derived(_) => None,
    }
}

/// Sets `key` in `document` to its declared default; false (and nothing
/// changed) when it has no concrete default.
pub fn set_default(document: &mut Value, key: &Key) -> bool {
    let Some(value) = default_value(key) else {
        return false;
    };
    key_owner(document, key).insert(key.name.to_owned(), value);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_config_has_one_model_and_the_given_sockets() {
        let config = one_model_config(Path::new("/nonexistent/control.sock"));
        let ids: Vec<&str> = config
            .registry
            .models()
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["m"]);
        assert_eq!(
            config.control_socket,
            Path::new("/nonexistent/control.sock")
        );
        assert_eq!(
            config.supervisor_socket.parent(),
            Some(Path::new("/nonexistent"))
        );
    }
}
