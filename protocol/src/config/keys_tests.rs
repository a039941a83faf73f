//! The key table ([`super::keys::KEYS`]) against the parser and the
//! fingerprint: every declared key is parsed, with the declared default and
//! bounds, and the fingerprint covers exactly the keys declared
//! `fingerprinted`. Each key is tried on [`sample_document`] with its
//! sample value ([`set_sample`]).

use super::keys::{Default, Form, KEYS, Key, MODEL_KEYS, Place, TOP_LEVEL_KEYS};
use super::testing::{key_owner, sample_document, set_default, set_sample};
use super::{Config, ConfigError};
use serde_json::{Value, json};

fn parse(document: &Value) -> Result<Config, ConfigError> {
    Config::from_json_str(&document.to_string())
}

fn valid(document: &Value, what: &str) -> Config {
    parse(document).unwrap_or_else(|err| panic!("{what}: expected a valid config, got {err}"))
}

fn with_sample(key: &Key) -> Config {
    let mut document = sample_document();
    set_sample(&mut document, key);
    valid(&document, &format!("{} set to its sample", key.name))
}

/// The path errors about `key` name.
fn error_path(key: &Key) -> String {
    match key.place {
        Place::TopLevel => key.name.to_owned(),
        Place::Model => format!(r#"models["{}"].{}"#, super::testing::SAMPLE_MODEL, key.name),
    }
}

#[test]
fn names_are_unique_per_place() {
    for (index, key) in KEYS.iter().enumerate() {
        assert!(
            !KEYS[..index]
                .iter()
                .any(|other| other.place == key.place && other.name == key.name),
            "{} is declared twice",
            key.name
        );
    }
    assert_eq!(TOP_LEVEL_KEYS.len() + MODEL_KEYS.len(), KEYS.len());
}

#[test]
fn every_declared_key_is_parsed() {
    let base = valid(&sample_document(), "the sample document");
    for key in KEYS {
        assert_ne!(
            with_sample(key),
            base,
            "{}: declared in config::keys but setting it changes nothing the parser returns",
            key.name
        );
    }
}

#[test]
fn the_fingerprint_covers_exactly_the_keys_declared_fingerprinted() {
    let base = valid(&sample_document(), "the sample document").fingerprint();
    for key in KEYS {
        let changed = with_sample(key).fingerprint() != base;
        assert_eq!(
            changed,
            key.fingerprinted,
            "{}: declared fingerprinted: {}, but its sample {} the fingerprint \
             (settings_text in fingerprint.rs and the declaration must agree)",
            key.name,
            key.fingerprinted,
            if changed {
                "changes"
            } else {
                "does not change"
            }
        );
    }
}

#[test]
fn declared_defaults_are_the_parsers() {
    for key in KEYS {
        let mut omitted = sample_document();
        key_owner(&mut omitted, key).remove(key.name);
        let mut spelled_out = omitted.clone();
        if !set_default(&mut spelled_out, key) {
            continue;
        }
        let what = format!("{} at its declared default", key.name);
        let (omitted, spelled_out) = (
            valid(&omitted, &format!("{} omitted", key.name)),
            valid(&spelled_out, &what),
        );
        assert_eq!(spelled_out, omitted, "{what}");
        assert_eq!(spelled_out.fingerprint(), omitted.fingerprint(), "{what}");
    }
}

#[test]
fn declared_bounds_are_the_parsers() {
    let attempt = |key: &Key, value: Value| {
        let mut document = sample_document();
        key_owner(&mut document, key).insert(key.name.to_owned(), value);
        parse(&document)
    };
    let rejected = |key: &Key, value: Value| match attempt(key, value.clone()) {
        Ok(_) => panic!("{}: {value} is declared invalid but accepted", key.name),
        Err(err) => err,
    };
    for key in KEYS {
        match key.form {
            Form::Integer { min, max, .. } => {
                for inside in [min, max] {
                    if let Err(err) = attempt(key, json!(inside)) {
                        panic!("{}: {inside} is declared valid: {err}", key.name);
                    }
                }
                let outside = [min.checked_sub(1), max.checked_add(1)];
                for value in outside.into_iter().flatten() {
                    let err = rejected(key, json!(value));
                    assert_eq!(err.path, error_path(key), "{}", key.name);
                    assert!(err.message.contains("must be between"), "{err}");
                }
            }
            Form::Choice(values) => {
                for value in values {
                    if let Err(err) = attempt(key, json!(value)) {
                        panic!("{}: {value:?} is declared valid: {err}", key.name);
                    }
                }
                let err = rejected(key, json!("bogus"));
                assert_eq!(err.path, error_path(key), "{}", key.name);
            }
            Form::Path { nullable } => {
                let err = rejected(key, json!("relative/path"));
                assert_eq!(err.message, "must be an absolute path", "{}", key.name);
                assert_eq!(attempt(key, Value::Null).is_ok(), nullable, "{}", key.name);
            }
            Form::Bool => {
                let err = rejected(key, json!("yes"));
                assert_eq!(err.message, "expected a boolean", "{}", key.name);
            }
            Form::IntegerRule { .. } | Form::Other { .. } => {}
        }
    }
}

#[test]
fn integer_defaults_lie_in_the_declared_range() {
    for key in KEYS {
        if let (Default::Integer(value), Form::Integer { min, max, .. }) = (key.default, key.form) {
            assert!((min..=max).contains(&value), "{}", key.name);
        }
    }
}
