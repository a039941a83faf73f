//! JSON text to [`serde_json::Value`], refusing duplicate object keys.
//!
//! `serde_json` silently keeps the last of two equal keys. In a config that
//! is exactly the kind of typo that must not change behaviour unnoticed (two
//! `backend_port` lines, the second one forgotten), so the document is built
//! through this visitor instead, which fails on the second occurrence.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `text` as one JSON value; duplicate keys in any object are an
/// error. The error text comes from `serde_json` and carries a line and
/// column but never the document's contents.
pub(crate) fn parse(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<StrictValue>(text).map(|strict| strict.0)
}

struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON text cannot spell NaN or infinity, so this only guards
        // against a future parser change.
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key {}",
                    super::json_walk::quote(&key)
                )));
            }
            let StrictValue(value) = access.next_value()?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let err = parse(r#"{"a": 1, "a": 2}"#).unwrap_err().to_string();
        assert!(err.contains(r#"duplicate key "a""#), "{err}");
        let err = parse(r#"{"m": {"x": {"k": 1, "k": 1}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains(r#"duplicate key "k""#), "{err}");
    }

    #[test]
    fn values_keep_their_json_types() {
        let value = parse(r#"{"u": 1, "i": -1, "f": 1.5, "s": "x", "n": null, "a": [true]}"#)
            .expect("valid json");
        assert!(value["u"].is_u64());
        assert!(value["i"].is_i64());
        assert!(value["f"].is_f64());
        assert_eq!(value["s"], "x");
        assert!(value["n"].is_null());
        assert_eq!(value["a"][0], true);
    }

    #[test]
    fn trailing_garbage_is_refused() {
        assert!(parse("{} {}").is_err());
    }
}
