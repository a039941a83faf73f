//! The benchmark's load generator: HTTP/1.1 client connections (hyper's connection-level
//! client, one request at a time per connection, kept alive when the server allows it) and
//! response readers that time what the benchmark reports.
//!
//! Every response is checked against what the bench upstream must have sent (status 200 and
//! the exact body length; SSE: the frame count and the final `[DONE]`): a benchmark that
//! measures errors would be worse than none.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::wire::{self, SSE_DONE};

/// A benchmark failure: what went wrong, for the report.
pub type Error = String;

/// One client connection to `addr`, reopened whenever the server closed the last one.
pub struct Conn {
    addr: SocketAddr,
    host: HeaderValue,
    sender: Option<SendRequest<Full<Bytes>>>,
    /// TCP connections opened so far.
    pub connects: u64,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            host: HeaderValue::from_str(&addr.to_string()).expect("an address is a header value"),
            sender: None,
            connects: 0,
        }
    }

    async fn connect(&mut self) -> Result<SendRequest<Full<Bytes>>, Error> {
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|err| format!("connect {}: {err}", self.addr))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| format!("handshake with {}: {err}", self.addr))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        self.connects += 1;
        Ok(sender)
    }

    /// Sends `POST /v1/chat/completions` with `body` and returns the response once its headers
    /// are in. The caller reads the body with [`read_json`] or [`read_sse`].
    pub async fn post(&mut self, body: Bytes) -> Result<Response<Incoming>, Error> {
        let reused = match self.sender.take() {
            Some(mut sender) => sender.ready().await.is_ok().then_some(sender),
            None => None,
        };
        let mut sender = match reused {
            Some(sender) => sender,
            None => self.connect().await?,
        };
        let request = Request::post(wire::CHAT_PATH)
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(Full::new(body))
            .expect("a valid request");
        let response = sender
            .send_request(request)
            .await
            .map_err(|err| format!("request to {}: {err}", self.addr))?;
        let reusable = response.version() == Version::HTTP_11
            && !response
                .headers()
                .get(CONNECTION)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        if reusable {
            self.sender = Some(sender);
        }
        if response.status() != StatusCode::OK {
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            return Err(format!("{} answered {status}: {body}", self.addr));
        }
        Ok(response)
    }
}

/// Reads a JSON answer to the end; fails unless it is `expect` bytes long.
pub async fn read_json(response: Response<Incoming>, expect: u64) -> Result<(), Error> {
    let mut body = response.into_body();
    let mut len = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| format!("reading a JSON body: {err}"))?;
        if let Ok(data) = frame.into_data() {
            len += data.len() as u64;
        }
    }
    if len != expect {
        return Err(format!("JSON body of {len} bytes, expected {expect}"));
    }
    Ok(())
}

/// Reads a JSON answer whole (for the checks before measuring).
pub async fn read_all(response: Response<Incoming>) -> Result<Bytes, Error> {
    response
        .into_body()
        .collect()
        .await
        .map(|body| body.to_bytes())
        .map_err(|err| format!("reading a body: {err}"))
}

/// What one stream's timing was.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamTiming {
    /// From sending the request to the first body byte.
    pub first_event: Duration,
    /// From sending the request to the end of the body.
    pub total: Duration,
    /// The longest pause between two frames (after the first).
    pub max_gap: Duration,
    pub events: u64,
    pub bytes: u64,
}

/// Reads an SSE body to the end, timing it from `sent`. `expect_bytes` is the exact body
/// length; `count_events` also counts frames (two newlines each: the bench's frames are
/// single-line) and times the gaps between them (skip it for bulk transfers, where the count
/// would cost the client more than the router's copy).
pub async fn read_sse(
    response: Response<Incoming>,
    sent: Instant,
    expect_bytes: u64,
    count_events: bool,
) -> Result<StreamTiming, Error> {
    let mut body = response.into_body();
    let mut timing = StreamTiming::default();
    let mut newlines = 0u64;
    let mut last_event: Option<Instant> = None;
    let mut tail: Vec<u8> = Vec::with_capacity(2 * SSE_DONE.len());
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| format!("reading an SSE body: {err}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let now = Instant::now();
        if timing.bytes == 0 {
            timing.first_event = now - sent;
        }
        timing.bytes += data.len() as u64;
        if count_events {
            let before = newlines / 2;
            newlines += data.iter().filter(|b| **b == b'\n').count() as u64;
            if newlines / 2 > before {
                if let Some(last) = last_event {
                    timing.max_gap = timing.max_gap.max(now - last);
                }
                last_event = Some(now);
            }
        }
        tail.extend_from_slice(&data[data.len().saturating_sub(SSE_DONE.len())..]);
        if tail.len() > SSE_DONE.len() {
            tail.drain(..tail.len() - SSE_DONE.len());
        }
    }
    timing.total = sent.elapsed();
    timing.events = newlines / 2;
    if timing.bytes != expect_bytes {
        return Err(format!(
            "SSE body of {} bytes, expected {expect_bytes}",
            timing.bytes
        ));
    }
    if tail != SSE_DONE {
        return Err("SSE body does not end with data: [DONE]".into());
    }
    Ok(timing)
}
