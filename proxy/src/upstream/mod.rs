//! One HTTP/1 exchange with the leased backend, written for exactly that.
//!
//! The request is written in one call (head and body), the response head is
//! parsed as it arrives, and its body ([`UpstreamBody`]) is read straight
//! from the socket by the task that forwards it: no connection task, no
//! channel between the socket and the forwarding loop. Strata answers with
//! HTTP/1.0 and `Connection: close`, so each request gets its own TCP
//! connection and its body ends at EOF; a backend that keeps connections
//! open gets them reused through the [`UpstreamPool`]. Dropping an
//! [`Upstream`] mid-body closes its connection: that is how the proxy
//! cancels a generation (Strata notices the closed connection).

mod body;
mod pool;
#[cfg(test)]
mod tests;

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hyper::header::{
    CONNECTION, CONTENT_LENGTH, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING,
};
use hyper::{Response, StatusCode, Version};
use strata_protocol::wire::BackendInstance;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub use body::UpstreamBody;
use body::{ChunkState, Framing, Reuse, make_room};
pub use pool::{PoolKey, UpstreamPool};

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// The first read's buffer.
const FIRST_READ: usize = 16 * 1024;

/// Most response header lines accepted.
const MAX_HEADERS: usize = 64;

/// Why the backend could not be asked.
#[derive(Debug)]
pub enum UpstreamError {
    Connect(io::Error),
    Io(io::Error),
    /// The backend's answer is not an HTTP/1 response.
    Protocol(&'static str),
}

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamError::Connect(err) => write!(f, "cannot connect to the backend: {err}"),
            UpstreamError::Io(err) => write!(f, "backend request failed: {err}"),
            UpstreamError::Protocol(what) => write!(f, "backend answer is not HTTP/1: {what}"),
        }
    }
}

/// The backend's response; its body reads from the connection.
pub struct Upstream {
    pub response: Response<UpstreamBody>,
}

/// Sends the chat request to `instance` at `backend` and waits for the
/// response head.
pub async fn send(
    pool: &Arc<UpstreamPool>,
    backend: SocketAddr,
    instance: BackendInstance,
    body: Bytes,
    accept: Option<HeaderValue>,
) -> Result<Upstream, UpstreamError> {
    let key = PoolKey { backend, instance };
    let head = request_head(backend, body.len(), accept.as_ref());
    if let Some(stream) = pool.check_out(key) {
        match exchange(stream, &head, &body, pool, key).await {
            Ok(upstream) => return Ok(upstream),
            // A kept connection the backend closed before it read the
            // request fails without an answer byte: use a new one.
            Err(Failure::Unanswered(_)) => {}
            Err(Failure::Failed(err)) => return Err(err),
        }
    }
    let stream = TcpStream::connect(backend)
        .await
        .map_err(UpstreamError::Connect)?;
    let _ = stream.set_nodelay(true);
    exchange(stream, &head, &body, pool, key)
        .await
        .map_err(|failure| match failure {
            Failure::Unanswered(err) => UpstreamError::Io(err),
            Failure::Failed(err) => err,
        })
}

/// How one exchange failed.
enum Failure {
    /// Before any byte of an answer arrived.
    Unanswered(io::Error),
    Failed(UpstreamError),
}

fn request_head(backend: SocketAddr, len: usize, accept: Option<&HeaderValue>) -> Vec<u8> {
    let mut head = Vec::with_capacity(160);
    head.extend_from_slice(b"POST /v1/chat/completions HTTP/1.1\r\nhost: ");
    head.extend_from_slice(backend.to_string().as_bytes());
    head.extend_from_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    head.extend_from_slice(len.to_string().as_bytes());
    if let Some(accept) = accept {
        head.extend_from_slice(b"\r\naccept: ");
        head.extend_from_slice(accept.as_bytes());
    }
    head.extend_from_slice(b"\r\n\r\n");
    head
}

async fn exchange(
    mut stream: TcpStream,
    head: &[u8],
    body: &[u8],
    pool: &Arc<UpstreamPool>,
    key: PoolKey,
) -> Result<Upstream, Failure> {
    write_all_vectored(&mut stream, head, body)
        .await
        .map_err(Failure::Unanswered)?;
    // Enough for a head and a JSON answer; a larger body grows it.
    let mut buf = BytesMut::with_capacity(FIRST_READ);
    loop {
        if let Some(parsed) = parse_head(&mut buf).map_err(protocol)? {
            return Ok(finish(parsed, stream, buf, pool, key));
        }
        if buf.len() >= MAX_HEAD {
            return Err(protocol("response head too large"));
        }
        make_room(&mut buf);
        let read = match stream.readable().await {
            Ok(()) => stream.try_read_buf(&mut buf),
            Err(err) => Err(err),
        };
        match read {
            Ok(0) => {
                let eof = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the backend closed the connection",
                );
                return Err(cut(&buf, eof));
            }
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(cut(&buf, err)),
        }
    }
}

fn protocol(what: &'static str) -> Failure {
    Failure::Failed(UpstreamError::Protocol(what))
}

fn cut(buf: &BytesMut, err: io::Error) -> Failure {
    if buf.is_empty() {
        Failure::Unanswered(err)
    } else {
        Failure::Failed(UpstreamError::Io(err))
    }
}

/// The request in one write where the socket takes it (two pieces, no copy
/// of the body).
async fn write_all_vectored(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> io::Result<()> {
    let mut slices = [IoSlice::new(head), IoSlice::new(body)];
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        let n = stream.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// A parsed response head.
struct Head {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
}

/// Parses a complete head off the front of `buf` (skipping interim `1xx`
/// answers); `None` while it is incomplete.
fn parse_head(buf: &mut BytesMut) -> Result<Option<Head>, &'static str> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut slots);
        let len = match response.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err("malformed response head"),
        };
        let status = response
            .code
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or("bad status code")?;
        let version = match response.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let mut headers = HeaderMap::with_capacity(response.headers.len());
        for header in response.headers.iter() {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(header.name.as_bytes()),
                HeaderValue::from_bytes(header.value),
            ) {
                headers.append(name, value);
            }
        }
        let _ = buf.split_to(len);
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            continue;
        }
        return Ok(Some(Head {
            status,
            version,
            headers,
        }));
    }
}

/// Whether a header's comma-separated tokens include `token`.
fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value
                .split(',')
                .any(|item| item.trim().eq_ignore_ascii_case(token))
        })
    })
}

fn finish(
    head: Head,
    stream: TcpStream,
    buf: BytesMut,
    pool: &Arc<UpstreamPool>,
    key: PoolKey,
) -> Upstream {
    let framing = if head.status.is_informational()
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED
    {
        Framing::Length(0)
    } else if has_token(&head.headers, TRANSFER_ENCODING, "chunked") {
        Framing::Chunked(ChunkState::Size)
    } else if let Some(len) = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
    {
        Framing::Length(len)
    } else {
        Framing::UntilEof
    };
    let keep_alive = match head.version {
        Version::HTTP_10 => has_token(&head.headers, CONNECTION, "keep-alive"),
        _ => !has_token(&head.headers, CONNECTION, "close"),
    };
    let reuse = (keep_alive && framing != Framing::UntilEof).then(|| Reuse {
        pool: pool.clone(),
        key,
    });
    let body = UpstreamBody::new(stream, buf, framing, reuse);
    let mut response = Response::new(body);
    *response.status_mut() = head.status;
    *response.version_mut() = head.version;
    *response.headers_mut() = head.headers;
    Upstream { response }
}
