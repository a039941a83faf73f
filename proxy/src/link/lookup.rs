//! One cache lookup: the waiting tickets' bodies against the backend's
//! prompt cache, `POST /v1/cache/lookup` (the backend contract, RESEARCH.md).
//!
//! The bodies never leave this proxy except to the backend. They go in
//! batches of [`BATCH`], one after the other, all within the budget the
//! supervisor gave (`cache_lookup_ms` for the whole lookup). The reply must
//! name every ticket of its batch exactly once with whole-number counts;
//! anything else (a 404 from a Strata without the extension, a 409 from a
//! busy engine, another status, a timeout, a refused connection, a reply of
//! another shape) fails the whole lookup, and the supervisor keeps arrival
//! order.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use strata_protocol::wire::{CacheScores, LookupFailure, TicketId, TicketScore};
use tokio::net::TcpStream;

/// Tickets per request to the backend.
pub const BATCH: usize = 16;

/// The longest reply accepted (a reply names each ticket with two numbers).
const MAX_REPLY_BYTES: usize = 1024 * 1024;

/// Scores every ticket of `bodies` within `budget`.
pub async fn run(
    backend: SocketAddr,
    bodies: Vec<(TicketId, Bytes)>,
    budget: Duration,
) -> Result<CacheScores, LookupFailure> {
    match tokio::time::timeout(budget, run_batches(backend, bodies)).await {
        Ok(result) => result,
        Err(_) => Err(LookupFailure::Timeout),
    }
}

async fn run_batches(
    backend: SocketAddr,
    bodies: Vec<(TicketId, Bytes)>,
) -> Result<CacheScores, LookupFailure> {
    let mut results = Vec::with_capacity(bodies.len());
    let mut min_tokens = 0;
    for batch in bodies.chunks(BATCH) {
        let reply = post(backend, request_body(batch)).await?;
        min_tokens = reply.min_tokens;
        results.extend(check_reply(batch, reply)?);
    }
    Ok(CacheScores {
        min_tokens,
        results,
    })
}

/// `{"requests":[{"id":"7","body":{...}},...]}`, with each body's bytes
/// as the client sent them (they are a JSON object already).
fn request_body(batch: &[(TicketId, Bytes)]) -> Bytes {
    let size: usize = batch.iter().map(|(_, body)| body.len() + 32).sum();
    let mut out = BytesMut::with_capacity(size + 16);
    out.put_slice(b"{\"requests\":[");
    for (index, (ticket, body)) in batch.iter().enumerate() {
        if index > 0 {
            out.put_u8(b',');
        }
        out.put_slice(format!("{{\"id\":\"{ticket}\",\"body\":").as_bytes());
        out.put_slice(body);
        out.put_u8(b'}');
    }
    out.put_slice(b"]}");
    out.freeze()
}

#[derive(Debug, Deserialize)]
struct Reply {
    min_tokens: u64,
    results: Vec<ReplyItem>,
}

#[derive(Debug, Deserialize)]
struct ReplyItem {
    id: String,
    input_tokens: u64,
    cached_tokens: u64,
}

/// The scores of `batch` if `reply` names each of its tickets exactly once.
fn check_reply(
    batch: &[(TicketId, Bytes)],
    reply: Reply,
) -> Result<Vec<TicketScore>, LookupFailure> {
    let mut by_id: HashMap<String, ReplyItem> = HashMap::with_capacity(reply.results.len());
    for item in reply.results {
        if by_id.insert(item.id.clone(), item).is_some() {
            return Err(LookupFailure::Invalid);
        }
    }
    if by_id.len() != batch.len() {
        return Err(LookupFailure::Invalid);
    }
    batch
        .iter()
        .map(|(ticket, _)| {
            let item = by_id
                .get(&ticket.to_string())
                .ok_or(LookupFailure::Invalid)?;
            if item.cached_tokens > item.input_tokens {
                return Err(LookupFailure::Invalid);
            }
            Ok(TicketScore {
                ticket: *ticket,
                input_tokens: item.input_tokens,
                cached_tokens: item.cached_tokens,
            })
        })
        .collect()
}

/// One `POST /v1/cache/lookup`; Strata answers HTTP/1.0 and closes.
async fn post(backend: SocketAddr, body: Bytes) -> Result<Reply, LookupFailure> {
    let stream = TcpStream::connect(backend)
        .await
        .map_err(|_| LookupFailure::Unavailable)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| LookupFailure::Unavailable)?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let host =
        HeaderValue::from_str(&backend.to_string()).expect("a socket address is a valid header");
    let request = Request::post("/v1/cache/lookup")
        .header(HOST, host)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .body(Full::new(body))
        .expect("static request parts are valid");
    let outcome = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|_| LookupFailure::Unavailable)?;
        match response.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Err(LookupFailure::Unsupported),
            StatusCode::CONFLICT => return Err(LookupFailure::Busy),
            _ => return Err(LookupFailure::Invalid),
        }
        let bytes = Limited::new(response.into_body(), MAX_REPLY_BYTES)
            .collect()
            .await
            .map_err(|_| LookupFailure::Invalid)?
            .to_bytes();
        serde_json::from_slice::<Reply>(&bytes).map_err(|_| LookupFailure::Invalid)
    }
    .await;
    connection.abort();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ids: &[u64]) -> Vec<(TicketId, Bytes)> {
        ids.iter()
            .map(|id| (*id, Bytes::from(format!("{{\"model\":\"m{id}\"}}"))))
            .collect()
    }

    #[test]
    fn the_request_carries_each_body_unchanged() {
        let body = request_body(&batch(&[3, 12]));
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"requests": [
                {"id": "3", "body": {"model": "m3"}},
                {"id": "12", "body": {"model": "m12"}},
            ]})
        );
    }

    fn reply(items: &[(&str, u64, u64)]) -> Reply {
        Reply {
            min_tokens: 100,
            results: items
                .iter()
                .map(|(id, input, cached)| ReplyItem {
                    id: (*id).into(),
                    input_tokens: *input,
                    cached_tokens: *cached,
                })
                .collect(),
        }
    }

    #[test]
    fn a_reply_must_name_every_ticket_once() {
        let tickets = batch(&[1, 2]);
        let ok = check_reply(&tickets, reply(&[("2", 10, 5), ("1", 20, 0)])).unwrap();
        assert_eq!(
            ok,
            vec![
                TicketScore {
                    ticket: 1,
                    input_tokens: 20,
                    cached_tokens: 0
                },
                TicketScore {
                    ticket: 2,
                    input_tokens: 10,
                    cached_tokens: 5
                },
            ]
        );
        for bad in [
            reply(&[("1", 20, 0)]),
            reply(&[("1", 20, 0), ("1", 20, 0)]),
            reply(&[("1", 20, 0), ("3", 1, 0)]),
            reply(&[("1", 20, 0), ("2", 5, 6)]),
            reply(&[("1", 20, 0), ("2", 5, 1), ("9", 1, 1)]),
        ] {
            assert_eq!(check_reply(&tickets, bad), Err(LookupFailure::Invalid));
        }
    }

    #[test]
    fn replies_of_another_shape_do_not_parse() {
        for text in [
            r#"{"results":[]}"#,
            r#"{"min_tokens":-1,"results":[]}"#,
            r#"{"min_tokens":1,"results":[{"id":1,"input_tokens":1,"cached_tokens":0}]}"#,
            r#"{"min_tokens":1,"results":[{"id":"1","input_tokens":1.5,"cached_tokens":0}]}"#,
            "[]",
        ] {
            assert!(serde_json::from_str::<Reply>(text).is_err(), "{text}");
        }
    }
}
