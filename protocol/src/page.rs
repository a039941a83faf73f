//! One `GET /requests` page: the records after a cursor, and where the
//! reader stands.
//!
//! The supervisor fills a [`RecordsPage`] from its memory ring and sends it
//! to the proxy over the link; the proxy renders it with
//! [`RecordsPage::to_json`]; `strata-ctl requests` and the tests read it
//! back with [`RecordsPage::from_json`]. Each record travels as its exact
//! text (the JSONL line, shared with the file writer), so an HTTP item and
//! the file's line are the same bytes, and nobody re-serializes a record.
//!
//! The page limits live here so the proxy (which parses `limit`) and the
//! supervisor (which clamps it again, for any other caller) agree.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

/// Smallest page; a smaller `limit` is raised to it.
pub const MIN_PAGE_LIMIT: u32 = 1;
/// Largest page; a larger `limit` is lowered to it.
pub const MAX_PAGE_LIMIT: u32 = 1000;
/// The page size when `limit` is omitted.
pub const DEFAULT_PAGE_LIMIT: u32 = 100;

/// `limit` clamped into [`MIN_PAGE_LIMIT`]..=[`MAX_PAGE_LIMIT`].
pub fn clamp_page_limit(limit: u64) -> u32 {
    // The clamp keeps the value inside u32 before the cast.
    limit.clamp(u64::from(MIN_PAGE_LIMIT), u64::from(MAX_PAGE_LIMIT)) as u32
}

/// One `/requests` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordsPage {
    /// The records' exact texts (each a JSON object), in increasing `seq`.
    pub records: Vec<Arc<str>>,
    /// The last returned record's `seq`, or the supplied cursor (0 without
    /// one) when nothing matched: the next request's `after`.
    pub next_seq: u64,
    /// Records after the supplied cursor that were evicted before they
    /// could be read; 0 without a cursor.
    pub dropped: u64,
    /// The oldest retained `seq`; `None` for an empty ring.
    pub oldest_seq: Option<u64>,
    /// The router instance the sequence numbers belong to.
    pub instance_id: String,
}

/// Why a `/requests` body is not a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageError(String);

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PageError {}

/// The document as it is parsed: every member required, nothing else
/// allowed, the records kept as their texts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    records: Vec<Box<RawValue>>,
    next_seq: u64,
    dropped: u64,
    // A bare `Option` would accept a missing member as `None`.
    #[serde(deserialize_with = "present")]
    oldest_seq: Option<u64>,
    instance_id: String,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Option::deserialize(deserializer)
}

impl RecordsPage {
    /// The `/requests` body: `{"records":[...],"next_seq":..,"dropped":..,
    /// "oldest_seq":..,"instance_id":".."}`, each record written verbatim.
    pub fn to_json(&self) -> String {
        let records_len: usize = self.records.iter().map(|r| r.len() + 1).sum();
        let mut out = String::with_capacity(records_len + self.instance_id.len() + 96);
        out.push_str("{\"records\":[");
        for (i, record) in self.records.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(record);
        }
        out.push_str("],\"next_seq\":");
        out.push_str(&self.next_seq.to_string());
        out.push_str(",\"dropped\":");
        out.push_str(&self.dropped.to_string());
        out.push_str(",\"oldest_seq\":");
        match self.oldest_seq {
            Some(seq) => out.push_str(&seq.to_string()),
            None => out.push_str("null"),
        }
        out.push_str(",\"instance_id\":");
        out.push_str(&serde_json::Value::from(self.instance_id.as_str()).to_string());
        out.push('}');
        out
    }

    /// Parses a `/requests` body, keeping each record's exact text. Every
    /// member must be present with its type, no other member may be, and
    /// every record must be a JSON object.
    pub fn from_json(text: &str) -> Result<RecordsPage, PageError> {
        let doc: Document = serde_json::from_str(text).map_err(|err| PageError(err.to_string()))?;
        let mut records = Vec::with_capacity(doc.records.len());
        for (i, record) in doc.records.iter().enumerate() {
            let text = record.get();
            if !text.starts_with('{') {
                return Err(PageError(format!("records[{i}] is not an object")));
            }
            records.push(Arc::from(text));
        }
        Ok(RecordsPage {
            records,
            next_seq: doc.next_seq,
            dropped: doc.dropped,
            oldest_seq: doc.oldest_seq,
            instance_id: doc.instance_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(records: &[&str], oldest_seq: Option<u64>) -> RecordsPage {
        RecordsPage {
            records: records.iter().map(|r| Arc::from(*r)).collect(),
            next_seq: 7,
            dropped: 2,
            oldest_seq,
            instance_id: "inst-\"1\"".into(),
        }
    }

    #[test]
    fn to_json_writes_the_members_in_order_and_records_verbatim() {
        let records = [r#"{"seq":6, "b":1}"#, r#"{"seq":7,"a":"x\u00e9"}"#];
        assert_eq!(
            page(&records, Some(3)).to_json(),
            r#"{"records":[{"seq":6, "b":1},{"seq":7,"a":"x\u00e9"}],"next_seq":7,"dropped":2,"oldest_seq":3,"instance_id":"inst-\"1\""}"#
        );
        assert_eq!(
            page(&[], None).to_json(),
            r#"{"records":[],"next_seq":7,"dropped":2,"oldest_seq":null,"instance_id":"inst-\"1\""}"#
        );
    }

    #[test]
    fn from_json_reads_back_what_to_json_wrote_byte_for_byte() {
        for original in [
            page(
                &[r#"{"seq":6, "b":[1,{"c":"]"}]}"#, r#"{"seq":7}"#],
                Some(1),
            ),
            page(&[], None),
        ] {
            let text = original.to_json();
            assert_eq!(RecordsPage::from_json(&text), Ok(original));
        }
    }

    #[test]
    fn from_json_keeps_the_exact_item_text_whatever_the_spacing() {
        let body = r#" { "instance_id" : "i-1" , "records" : [ {"seq":1,"x":"a]},\"b","f":1.50} ,{"seq":2,"n":null,"l":[1,{"z":[]}]}] , "next_seq" : 2 , "dropped" : 3 , "oldest_seq" : 1 } "#;
        let page = RecordsPage::from_json(body).expect("a page");
        let texts: Vec<&str> = page.records.iter().map(|r| &**r).collect();
        assert_eq!(
            texts,
            [
                r#"{"seq":1,"x":"a]},\"b","f":1.50}"#,
                r#"{"seq":2,"n":null,"l":[1,{"z":[]}]}"#
            ]
        );
        assert_eq!(
            (
                page.next_seq,
                page.dropped,
                page.oldest_seq,
                page.instance_id.as_str()
            ),
            (2, 3, Some(1), "i-1")
        );
    }

    #[test]
    fn from_json_refuses_what_is_not_a_page() {
        let ok = r#"{"records":[],"next_seq":0,"dropped":0,"oldest_seq":null,"instance_id":"i"}"#;
        assert!(RecordsPage::from_json(ok).is_ok());
        for bad in [
            "",
            "[]",
            "not json",
            r#"{"next_seq":0,"dropped":0,"oldest_seq":null,"instance_id":"i"}"#,
            r#"{"records":[],"next_seq":0,"dropped":0,"instance_id":"i"}"#,
            r#"{"records":[],"next_seq":0,"dropped":0,"oldest_seq":null}"#,
            r#"{"records":[],"next_seq":-1,"dropped":0,"oldest_seq":null,"instance_id":"i"}"#,
            r#"{"records":[1],"next_seq":0,"dropped":0,"oldest_seq":null,"instance_id":"i"}"#,
            r#"{"records":{},"next_seq":0,"dropped":0,"oldest_seq":null,"instance_id":"i"}"#,
            r#"{"records":[],"next_seq":0,"dropped":0,"oldest_seq":null,"instance_id":"i","x":1}"#,
        ] {
            assert!(RecordsPage::from_json(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_clamp_into_the_page_range() {
        assert_eq!(clamp_page_limit(0), MIN_PAGE_LIMIT);
        assert_eq!(clamp_page_limit(5), 5);
        assert_eq!(clamp_page_limit(u64::MAX), MAX_PAGE_LIMIT);
        const { assert!(MIN_PAGE_LIMIT <= DEFAULT_PAGE_LIMIT && DEFAULT_PAGE_LIMIT <= MAX_PAGE_LIMIT) };
    }

    #[test]
    fn a_page_crosses_the_link_unchanged() {
        let original = page(&[r#"{"seq":6}"#], Some(6));
        let bytes = bincode::serialize(&original).expect("serialize");
        let back: RecordsPage = bincode::deserialize(&bytes).expect("deserialize");
        assert_eq!(back, original);
    }
}
