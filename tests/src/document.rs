//! Reading the router's cross-process documents as their `strata_protocol` types, exactly.
//!
//! serde reads leniently where a test must not: a missing `Option` field reads as `None` and
//! an unknown field is ignored, so a field the product renamed would read as null and a
//! "wait until nothing waits" would pass at once. [`read_exact`] deserializes a document and
//! then requires that serializing the value gives back the very JSON it came from: a renamed,
//! missing or extra field, or a `null` where the type leaves the key out, fails the test,
//! naming the paths that differ.
//!
//! The documents read this way: `/metrics` ([`Metrics`]), `/health` ([`Health`]),
//! `/v1/models` ([`ModelList`]), the router's error bodies and in-band error frames
//! ([`ErrorBody`]), the accounting records ([`RequestRecord`], through
//! [`crate::accounting::Record`]) and the control socket's events
//! ([`ControlEvent`](strata_protocol::control::ControlEvent), through
//! [`crate::control::OpReply`]). Tests of the JSON itself (key sets, `null` against absent,
//! the schema table) read the `serde_json::Value` instead.
//!
//! [`Metrics`]: strata_protocol::api::Metrics
//! [`Health`]: strata_protocol::api::Health
//! [`ErrorBody`]: strata_protocol::api::ErrorBody
//! [`RequestRecord`]: strata_protocol::record::RequestRecord

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use strata_protocol::api::{AliasModel, ConcreteModel, ModelItem, ModelList};

/// `json` read as the document `T` (`what` names it in a failure). Panics unless it
/// deserializes and serializes back to exactly `json`.
pub fn read_exact<T: Serialize + DeserializeOwned>(what: &str, json: &Value) -> T {
    let typed: T = serde_json::from_value(json.clone())
        .unwrap_or_else(|err| panic!("not a {what} document ({err}): {json}"));
    let back = serde_json::to_value(&typed)
        .unwrap_or_else(|err| panic!("a {what} does not serialize ({err})"));
    if back != *json {
        let mut differences = Vec::new();
        differ("", json, &back, &mut differences);
        panic!(
            "the {what} document does not read back exactly (a renamed, missing or extra \
             field?): {}\n{json}",
            differences.join("; ")
        );
    }
    typed
}

/// [`read_exact`] of a JSON text.
pub fn read_exact_str<T: Serialize + DeserializeOwned>(what: &str, text: &str) -> T {
    let json: Value = serde_json::from_str(text)
        .unwrap_or_else(|err| panic!("a {what} is not JSON ({err}): {text}"));
    read_exact(what, &json)
}

/// The paths at which `got` (the document) and `typed` (what its type writes) differ.
fn differ(path: &str, got: &Value, typed: &Value, out: &mut Vec<String>) {
    match (got, typed) {
        (Value::Object(got), Value::Object(typed)) => {
            for (key, value) in got {
                let at = format!("{path}.{key}");
                match typed.get(key) {
                    Some(other) => differ(&at, value, other, out),
                    None if value.is_null() => {
                        out.push(format!("{at} is null where the type leaves the key out"));
                    }
                    None => out.push(format!("{at} is not a field of the type")),
                }
            }
            for key in typed.keys().filter(|key| !got.contains_key(*key)) {
                out.push(format!("{path}.{key} is missing"));
            }
        }
        (Value::Array(got), Value::Array(typed)) if got.len() == typed.len() => {
            for (i, (value, other)) in got.iter().zip(typed).enumerate() {
                differ(&format!("{path}[{i}]"), value, other, out);
            }
        }
        _ if got == typed => {}
        _ => out.push(format!("{path} is {got}, reads back as {typed}")),
    }
}

/// The concrete model `id` of a `/v1/models` listing; panics (showing the listing) if there
/// is none.
pub fn concrete_model<'a>(models: &'a ModelList, id: &str) -> &'a ConcreteModel {
    models
        .data
        .iter()
        .find_map(|item| match item {
            ModelItem::Concrete(model) if model.id == id => Some(model),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no concrete model {id} in {models:#?}"))
}

/// The alias `id` of a `/v1/models` listing; panics (showing the listing) if there is none.
pub fn alias_model<'a>(models: &'a ModelList, id: &str) -> &'a AliasModel {
    models
        .data
        .iter()
        .find_map(|item| match item {
            ModelItem::Alias(alias) if alias.id == id => Some(alias),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no alias {id} in {models:#?}"))
}

/// The IDs of a `/v1/models` listing, in order.
pub fn model_ids(models: &ModelList) -> Vec<&str> {
    models.data.iter().map(ModelItem::id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Doc {
        count: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    }

    #[test]
    fn an_exact_document_reads() {
        let doc: Doc = read_exact("doc", &json!({"count": null}));
        assert_eq!(
            doc,
            Doc {
                count: None,
                note: None
            }
        );
        let doc: Doc = read_exact_str("doc", r#"{"count":3,"note":"n"}"#);
        assert_eq!(doc.count, Some(3));
    }

    #[test]
    #[should_panic(expected = ".count is missing")]
    fn a_missing_field_fails_instead_of_reading_as_none() {
        read_exact::<Doc>("doc", &json!({}));
    }

    #[test]
    #[should_panic(expected = ".counted is not a field of the type")]
    fn a_renamed_field_fails() {
        read_exact::<Doc>("doc", &json!({"count": 1, "counted": 1}));
    }

    #[test]
    #[should_panic(expected = ".note is null where the type leaves the key out")]
    fn a_null_where_the_type_leaves_the_key_out_fails() {
        // `note: null` reads as None, which the type writes as no key at all.
        read_exact::<Doc>("doc", &json!({"count": 1, "note": null}));
    }
}
