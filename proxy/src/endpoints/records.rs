//! `GET /requests`: pages of accounting records, read from the supervisor.
//!
//! The supervisor holds the ring (so records survive a proxy restart) and
//! answers with a [`RecordsPage`](strata_protocol::page::RecordsPage) of the stored record texts; this endpoint
//! validates the cursor and renders the page, so an item is byte-for-byte
//! the JSONL line.

use hyper::StatusCode;

use strata_protocol::page::{DEFAULT_PAGE_LIMIT, clamp_page_limit};

use crate::app::App;
use crate::reply::{EndpointError, json_text_response};
use crate::response_body::ProxyBody;

/// A parsed `/requests` query.
#[derive(Debug, PartialEq, Eq)]
pub struct RecordsQuery {
    pub after: Option<u64>,
    pub limit: u32,
}

/// Parses `after` and `limit`; a present but non-integer value is an error.
/// Other parameters are ignored.
pub fn parse_query(query: Option<&str>) -> Result<RecordsQuery, EndpointError> {
    let mut after = None;
    let mut limit = u64::from(DEFAULT_PAGE_LIMIT);
    for pair in query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "after" => {
                after = Some(value.parse::<u64>().map_err(|_| EndpointError::BadCursor)?);
            }
            "limit" => {
                limit = value.parse::<u64>().map_err(|_| EndpointError::BadLimit)?;
            }
            _ => {}
        }
    }
    Ok(RecordsQuery {
        after,
        limit: clamp_page_limit(limit),
    })
}

/// `GET /requests?after=&limit=`: the page the supervisor answers, as
/// stored.
pub async fn records(app: &App, query: Option<&str>) -> hyper::Response<ProxyBody> {
    let query = match parse_query(query) {
        Ok(query) => query,
        Err(error) => return error.into_response(),
    };
    let Some(page) = app.link.records(query.after, query.limit).await else {
        return EndpointError::RecordsUnavailable.into_response();
    };
    json_text_response(StatusCode::OK, page.to_json())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_and_limit_parse_and_clamp() {
        let ok = |after, limit| Ok(RecordsQuery { after, limit });
        assert_eq!(parse_query(None), ok(None, 100));
        assert_eq!(parse_query(Some("")), ok(None, 100));
        assert_eq!(parse_query(Some("after=0")), ok(Some(0), 100));
        assert_eq!(parse_query(Some("after=123&limit=5")), ok(Some(123), 5));
        assert_eq!(parse_query(Some("limit=0")), ok(None, 1));
        assert_eq!(parse_query(Some("limit=5000")), ok(None, 1000));
        assert!(parse_query(Some("limit=99999999999999999999")).is_err());
        assert_eq!(parse_query(Some("x=1&limit=2")), ok(None, 2));
        for bad in [
            "after=-1",
            "after=abc",
            "after=",
            "after",
            "limit=1.5",
            "limit=-3",
        ] {
            assert!(parse_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
