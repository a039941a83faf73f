//! Reading a chat request's body under `max_request_body_bytes`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// How much of an oversized body is read and discarded after the 413, so
/// the client gets the answer instead of a connection reset.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
const DRAIN_LIMIT_TIME: Duration = Duration::from_secs(10);

/// Why a request body could not be used.
pub enum BodyError {
    /// Over the limit; the rest of the body, if any is left to discard.
    TooLarge(Option<Incoming>),
    /// The client's body ended early (it went away mid-upload).
    Client,
    /// The client's body framing is invalid (a bad chunk size line, say).
    Malformed,
}

/// Tells a malformed body from one the client abandoned: hyper reports bad
/// framing as an `InvalidInput`/`InvalidData` I/O error and an early end as
/// `UnexpectedEof` (or a connection error).
fn body_error(err: &hyper::Error) -> BodyError {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                    BodyError::Malformed
                }
                _ => BodyError::Client,
            };
        }
        source = cause.source();
    }
    BodyError::Client
}

/// Reads the whole body, refusing a declared length over `limit` before
/// reading anything and stopping a chunked body as soon as it passes it.
pub async fn read_body(
    mut body: Incoming,
    declared_length: Option<u64>,
    limit: u64,
) -> Result<Bytes, BodyError> {
    if declared_length.is_some_and(|length| length > limit) {
        return Err(BodyError::TooLarge(Some(body)));
    }
    let mut buffer = BytesMut::with_capacity(declared_length.unwrap_or(0).min(limit) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| body_error(&err))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() as u64 + data.len() as u64 > limit {
                return Err(BodyError::TooLarge(Some(body)));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}

/// Discards what is left of a rejected body, bounded in bytes and time, so
/// the connection closes cleanly after the error response.
pub async fn drain(mut body: Incoming) {
    let mut seen = 0u64;
    let _ = tokio::time::timeout(DRAIN_LIMIT_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen += data.len() as u64;
                if seen > DRAIN_LIMIT_BYTES {
                    break;
                }
            }
        }
    })
    .await;
}
