//! Reading a chat completion request: just enough to route it.
//!
//! The body is parsed once into its top-level members, each kept as raw
//! JSON text. Only `model`, `stream`, `service_tier` and `speed` are
//! interpreted. The upstream gets the client's exact bytes unless
//! `service_tier` or `speed` had to be removed; then the object is rebuilt
//! from the untouched raw member values, in their original order.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use strata_protocol::wire::ServiceTier;

use super::error::ChatError;

/// The routing-relevant view of a chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// `model` as sent.
    pub model: String,
    pub stream: bool,
    pub tier: ServiceTier,
    /// What to send upstream.
    pub upstream_body: Bytes,
}

/// The top-level members of a JSON object, in order, values unparsed.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// The last value of `key` (JSON parsers keep the last duplicate).
fn member<'a>(members: &[(Cow<'a, str>, &'a RawValue)], key: &str) -> Option<&'a RawValue> {
    members
        .iter()
        .rev()
        .find(|(name, _)| name == key)
        .map(|(_, value)| *value)
}

fn parse_tier(raw: Option<&RawValue>) -> Result<ServiceTier, ChatError> {
    let Some(raw) = raw else {
        return Ok(ServiceTier::Default);
    };
    match serde_json::from_str::<Option<&str>>(raw.get()) {
        Ok(None) => Ok(ServiceTier::Default),
        // `fast` is what current OpenAI SDKs send for Fast mode; OpenAI's
        // API treats it as `priority`.
        Ok(Some("priority" | "fast")) => Ok(ServiceTier::Priority),
        Ok(Some("default" | "auto")) => Ok(ServiceTier::Default),
        Ok(Some("flex")) => Ok(ServiceTier::Flex),
        _ => Err(ChatError::BadServiceTier),
    }
}

/// `speed: "fast"` selects priority; `"standard"` leaves the tier alone.
fn apply_speed(raw: Option<&RawValue>, tier: ServiceTier) -> Result<ServiceTier, ChatError> {
    let Some(raw) = raw else {
        return Ok(tier);
    };
    match serde_json::from_str::<Option<&str>>(raw.get()) {
        Ok(None) | Ok(Some("standard")) => Ok(tier),
        Ok(Some("fast")) => Ok(ServiceTier::Priority),
        _ => Err(ChatError::BadSpeed),
    }
}

/// Parses `body`. The `stream` flag of an unparsable body counts as false.
pub fn parse(body: Bytes) -> Result<ChatRequest, ChatError> {
    let value: &RawValue = serde_json::from_slice(&body).map_err(|_| ChatError::InvalidJson)?;
    if !value.get().starts_with('{') {
        return Err(ChatError::NotAnObject);
    }
    let Members(members) = serde_json::from_str(value.get()).map_err(|_| ChatError::InvalidJson)?;
    let model = match member(&members, "model") {
        None => return Err(ChatError::ModelMissing),
        Some(raw) => {
            serde_json::from_str::<String>(raw.get()).map_err(|_| ChatError::ModelNotAString)?
        }
    };
    let stream = match member(&members, "stream") {
        None => false,
        Some(raw) => match serde_json::from_str::<Option<bool>>(raw.get()) {
            Ok(flag) => flag.unwrap_or(false),
            Err(_) => return Err(ChatError::StreamNotABool),
        },
    };
    let tier = parse_tier(member(&members, "service_tier"))?;
    let tier = apply_speed(member(&members, "speed"), tier)?;
    let strip = |name: &str| name == "service_tier" || name == "speed";
    let upstream_body = if members.iter().any(|(name, _)| strip(name)) {
        let mut out = String::with_capacity(body.len());
        out.push('{');
        for (name, raw) in members.iter().filter(|(name, _)| !strip(name)) {
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(
                &serde_json::to_string(name.as_ref()).map_err(|_| ChatError::InvalidJson)?,
            );
            out.push(':');
            out.push_str(raw.get());
        }
        out.push('}');
        Bytes::from(out)
    } else {
        body.clone()
    };
    Ok(ChatRequest {
        model,
        stream,
        tier,
        upstream_body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<ChatRequest, ChatError> {
        parse(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn untouched_body_is_forwarded_byte_for_byte() {
        let text = "{ \"model\" : \"m\",\n \"messages\": [ {\"role\":\"user\",\"content\":\"hi\"} ], \"temperature\": 0.70 }";
        let parsed = parse_str(text).unwrap();
        assert_eq!(parsed.model, "m");
        assert!(!parsed.stream);
        assert_eq!(parsed.tier, ServiceTier::Default);
        assert_eq!(parsed.upstream_body, text.as_bytes());
    }

    #[test]
    fn tier_fields_are_removed_and_the_rest_kept_in_order() {
        let text = r#"{"service_tier":"priority","model":"m","stream":true,"speed":"standard","x":{"a": 1.50}}"#;
        let parsed = parse_str(text).unwrap();
        assert_eq!(parsed.tier, ServiceTier::Priority);
        assert!(parsed.stream);
        assert_eq!(
            parsed.upstream_body,
            r#"{"model":"m","stream":true,"x":{"a": 1.50}}"#.as_bytes()
        );
    }

    #[test]
    fn tiers_and_speed_parse_as_specified() {
        let cases = [
            (r#""service_tier":"priority""#, Ok(ServiceTier::Priority)),
            (r#""service_tier":"fast""#, Ok(ServiceTier::Priority)),
            (r#""service_tier":"Fast""#, Err(ChatError::BadServiceTier)),
            (r#""service_tier":"default""#, Ok(ServiceTier::Default)),
            (r#""service_tier":"auto""#, Ok(ServiceTier::Default)),
            (r#""service_tier":"flex""#, Ok(ServiceTier::Flex)),
            (r#""service_tier":null"#, Ok(ServiceTier::Default)),
            (r#""service_tier":"scale""#, Err(ChatError::BadServiceTier)),
            (r#""service_tier":1"#, Err(ChatError::BadServiceTier)),
            (r#""speed":"fast""#, Ok(ServiceTier::Priority)),
            (r#""speed":"standard""#, Ok(ServiceTier::Default)),
            (
                r#""service_tier":"flex","speed":"standard""#,
                Ok(ServiceTier::Flex),
            ),
            (
                r#""service_tier":"flex","speed":"fast""#,
                Ok(ServiceTier::Priority),
            ),
            (r#""speed":"slow""#, Err(ChatError::BadSpeed)),
        ];
        for (fields, expected) in cases {
            let text = format!(r#"{{"model":"m",{fields}}}"#);
            assert_eq!(parse_str(&text).map(|r| r.tier), expected, "{fields}");
        }
    }

    #[test]
    fn malformed_bodies_are_rejected_with_the_right_error() {
        let cases = [
            ("", ChatError::InvalidJson),
            ("{", ChatError::InvalidJson),
            ("{\"model\":\"m\"} trailing", ChatError::InvalidJson),
            ("[1]", ChatError::NotAnObject),
            ("\"model\"", ChatError::NotAnObject),
            ("{}", ChatError::ModelMissing),
            ("{\"model\":3}", ChatError::ModelNotAString),
            (
                "{\"model\":\"m\",\"stream\":\"yes\"}",
                ChatError::StreamNotABool,
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_str(text), Err(expected), "{text:?}");
        }
    }
}
