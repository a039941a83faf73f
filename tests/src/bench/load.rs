//! The benchmark's load generator: HTTP/1.1 client connections, one request at a time per
//! connection, kept alive when the server allows it, and response readers that time what the
//! benchmark reports.
//!
//! Hand-written on a tokio `TcpStream` (heads parsed with httparse) rather than hyper's client
//! on purpose: hyper's client connection runs in a task of its own and hands each body frame
//! (each chunk of a chunked body) to the reading task through a channel, a task wake-up per SSE
//! frame that on two shared cores cost the client more than some of the servers it measured.
//! Here the task that reads a response is the one that owns the socket, and the chunked
//! decoder is a few lines, so the client's cost per frame is small and the same for every
//! target.
//!
//! Every response is checked against what the bench upstream must have sent (status 200 and
//! the exact body length; SSE: the frame count and the final `[DONE]`): a benchmark that
//! measures errors would be worse than none.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{self, SSE_DONE};

/// A benchmark failure: what went wrong, for the report.
pub type Error = String;

/// Response heads larger than this are refused.
const MAX_HEAD: usize = 64 * 1024;
/// How much one body read asks for.
const READ_SIZE: usize = 64 * 1024;

/// How a response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// At EOF (HTTP/1.0, or `Connection: close` without a length).
    Close,
}

/// A response's status line and the headers the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub framing: Framing,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
    pub content_type: String,
}

/// One client connection to `addr`, reopened whenever the server closed the last one.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    /// Bytes read past the end of what was consumed so far.
    pending: Vec<u8>,
    scratch: Vec<u8>,
    /// TCP connections opened so far.
    pub connects: u64,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            stream: None,
            pending: Vec::new(),
            scratch: Vec::new(),
            connects: 0,
        }
    }

    /// Sends a request and reads the response head. The caller must read the body (one of
    /// the `read_*` methods) before the next request.
    pub async fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<Head, Error> {
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        if method == "POST" {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        let mut bytes = request.into_bytes();
        bytes.extend_from_slice(body);
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|err| format!("connect {}: {err}", self.addr))?;
            let _ = stream.set_nodelay(true);
            self.stream = Some(stream);
            self.pending.clear();
            self.connects += 1;
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream
            .write_all(&bytes)
            .await
            .map_err(|err| format!("send to {}: {err}", self.addr))?;
        self.read_head().await
    }

    /// `POST /v1/chat/completions` with `body`; fails unless the status is 200 (reading the
    /// error body for the message).
    pub async fn post(&mut self, body: &[u8]) -> Result<Head, Error> {
        let head = self.send("POST", wire::CHAT_PATH, body).await?;
        if head.status != 200 {
            let body = self.read_all(&head).await.unwrap_or_default();
            return Err(format!(
                "{} answered {}: {}",
                self.addr,
                head.status,
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(head)
    }

    async fn fill(&mut self) -> Result<usize, Error> {
        let stream = self.stream.as_mut().ok_or("not connected")?;
        if self.scratch.len() < READ_SIZE {
            self.scratch.resize(READ_SIZE, 0);
        }
        let n = stream
            .read(&mut self.scratch)
            .await
            .map_err(|err| format!("read from {}: {err}", self.addr))?;
        self.pending.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    async fn read_head(&mut self) -> Result<Head, Error> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&self.pending) {
                Ok(httparse::Status::Complete(len)) => {
                    let http11 = response.version == Some(1);
                    let mut framing = if http11 { None } else { Some(Framing::Close) };
                    let mut close = !http11;
                    let mut content_type = String::new();
                    for header in response.headers.iter() {
                        let value = String::from_utf8_lossy(header.value);
                        if header.name.eq_ignore_ascii_case("transfer-encoding")
                            && value.to_ascii_lowercase().contains("chunked")
                        {
                            framing = Some(Framing::Chunked);
                        } else if header.name.eq_ignore_ascii_case("content-length")
                            && framing.is_none()
                        {
                            let n = value.trim().parse().map_err(|_| "bad content-length")?;
                            framing = Some(Framing::Length(n));
                        } else if header.name.eq_ignore_ascii_case("connection") {
                            let value = value.to_ascii_lowercase();
                            if value.contains("close") {
                                close = true;
                            } else if value.contains("keep-alive") {
                                close = false;
                            }
                        } else if header.name.eq_ignore_ascii_case("content-type") {
                            content_type = value.into_owned();
                        }
                    }
                    let status = response.code.unwrap_or(0);
                    let framing = framing.unwrap_or(Framing::Close);
                    self.pending.drain(..len);
                    return Ok(Head {
                        status,
                        framing,
                        keep_alive: !close && framing != Framing::Close,
                        content_type,
                    });
                }
                Ok(httparse::Status::Partial) => {
                    if self.pending.len() > MAX_HEAD {
                        return Err(format!("{}: response head too large", self.addr));
                    }
                    if self.fill().await? == 0 {
                        self.stream = None;
                        return Err(format!("{} closed before a response", self.addr));
                    }
                }
                Err(err) => return Err(format!("{}: malformed response: {err}", self.addr)),
            }
        }
    }

    /// Reads the body of `head`, handing each piece of decoded body to `sink` with the time
    /// the read that brought it returned. Closes the connection afterwards unless it may be
    /// reused.
    pub async fn read_body(
        &mut self,
        head: &Head,
        mut sink: impl FnMut(&[u8], Instant),
    ) -> Result<(), Error> {
        let mut now = Instant::now();
        match head.framing {
            Framing::Length(mut left) => loop {
                let take = (self.pending.len() as u64).min(left) as usize;
                if take > 0 {
                    sink(&self.pending[..take], now);
                    self.pending.drain(..take);
                    left -= take as u64;
                }
                if left == 0 {
                    break;
                }
                if self.fill().await? == 0 {
                    self.stream = None;
                    return Err(format!("{}: body cut short", self.addr));
                }
                now = Instant::now();
            },
            Framing::Close => {
                loop {
                    if !self.pending.is_empty() {
                        sink(&self.pending, now);
                        self.pending.clear();
                    }
                    if self.fill().await? == 0 {
                        break;
                    }
                    now = Instant::now();
                }
                self.stream = None;
                return Ok(());
            }
            Framing::Chunked => {
                let mut decoder = Chunked::default();
                loop {
                    let (used, done) = decoder
                        .feed(&self.pending, |data| sink(data, now))
                        .map_err(|err| format!("{}: {err}", self.addr))?;
                    self.pending.drain(..used);
                    if done {
                        break;
                    }
                    if self.fill().await? == 0 {
                        self.stream = None;
                        return Err(format!("{}: chunked body cut short", self.addr));
                    }
                    now = Instant::now();
                }
            }
        }
        if !head.keep_alive {
            self.stream = None;
        }
        Ok(())
    }

    /// Reads the whole body.
    pub async fn read_all(&mut self, head: &Head) -> Result<Vec<u8>, Error> {
        let mut body = Vec::new();
        self.read_body(head, |data, _| body.extend_from_slice(data))
            .await?;
        Ok(body)
    }

    /// Reads a JSON answer to the end; fails unless it is `expect` bytes long.
    pub async fn read_json(&mut self, head: &Head, expect: u64) -> Result<(), Error> {
        let mut len = 0u64;
        self.read_body(head, |data, _| len += data.len() as u64)
            .await?;
        if len != expect {
            return Err(format!("JSON body of {len} bytes, expected {expect}"));
        }
        Ok(())
    }

    /// Reads an SSE body to the end, timing it from `sent` (see [`StreamTiming`]).
    /// `expect_bytes` is the exact body length; `count_events` also counts frames (two
    /// newlines each: the bench's frames are single-line) and the gaps between them (skip it
    /// for bulk transfers, where counting would cost the client more than the copy).
    pub async fn read_sse(
        &mut self,
        head: &Head,
        sent: Instant,
        expect_bytes: u64,
        count_events: bool,
    ) -> Result<StreamTiming, Error> {
        let mut timing = StreamTiming::default();
        let mut newlines = 0u64;
        let mut last_event: Option<Instant> = None;
        let mut tail: Vec<u8> = Vec::with_capacity(2 * SSE_DONE.len());
        self.read_body(head, |data, at| {
            if data.is_empty() {
                return;
            }
            if timing.bytes == 0 {
                timing.first_event = at - sent;
            }
            timing.bytes += data.len() as u64;
            if count_events {
                let before = newlines / 2;
                newlines += data.iter().filter(|b| **b == b'\n').count() as u64;
                if newlines / 2 > before {
                    if let Some(last) = last_event {
                        timing.max_gap = timing.max_gap.max(at - last);
                    }
                    last_event = Some(at);
                }
            }
            tail.extend_from_slice(&data[data.len().saturating_sub(SSE_DONE.len())..]);
            if tail.len() > SSE_DONE.len() {
                tail.drain(..tail.len() - SSE_DONE.len());
            }
        })
        .await?;
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
}

/// What one stream's timing was.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamTiming {
    /// From sending the request to the read that brought the first body byte.
    pub first_event: Duration,
    /// From sending the request to the end of the body.
    pub total: Duration,
    /// The longest time between two reads that completed frames (after the first).
    pub max_gap: Duration,
    pub events: u64,
    pub bytes: u64,
}

/// An incremental decoder of a chunked body.
#[derive(Debug, Default)]
struct Chunked {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a size line.
    #[default]
    Size,
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// After the last (empty) chunk: the trailer section up to an empty line.
    Trailer,
}

impl Chunked {
    /// Decodes what it can of `input`, handing data to `sink`; returns the bytes consumed and
    /// whether the body is complete.
    fn feed(&mut self, input: &[u8], mut sink: impl FnMut(&[u8])) -> Result<(usize, bool), Error> {
        let mut pos = 0;
        loop {
            match self.state {
                ChunkState::Size | ChunkState::Trailer | ChunkState::DataEnd => {
                    let Some(end) = input[pos..].windows(2).position(|w| w == b"\r\n") else {
                        if input.len() - pos > 4096 {
                            return Err("chunk size line too long".into());
                        }
                        return Ok((pos, false));
                    };
                    let line = &input[pos..pos + end];
                    pos += end + 2;
                    match self.state {
                        ChunkState::Size => {
                            let text = std::str::from_utf8(line).map_err(|_| "bad chunk size")?;
                            let hex = text.split(';').next().unwrap_or("").trim();
                            let size =
                                u64::from_str_radix(hex, 16).map_err(|_| "bad chunk size")?;
                            self.state = if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            };
                        }
                        ChunkState::DataEnd => {
                            if !line.is_empty() {
                                return Err("missing CRLF after a chunk".into());
                            }
                            self.state = ChunkState::Size;
                        }
                        _ => {
                            if line.is_empty() {
                                return Ok((pos, true));
                            }
                        }
                    }
                }
                ChunkState::Data(left) => {
                    if pos == input.len() {
                        return Ok((pos, false));
                    }
                    let take = ((input.len() - pos) as u64).min(left) as usize;
                    sink(&input[pos..pos + take]);
                    pos += take;
                    self.state = if left == take as u64 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - take as u64)
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode_at_every_split() {
        let wire = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n";
        for split in 0..wire.len() {
            let mut decoder = Chunked::default();
            let mut out = Vec::new();
            let (used, done) = decoder
                .feed(&wire[..split], |d| out.extend_from_slice(d))
                .unwrap();
            assert!(!done || split == wire.len());
            let mut rest = wire[used..split].to_vec();
            rest.extend_from_slice(&wire[split..]);
            let (used2, done) = decoder.feed(&rest, |d| out.extend_from_slice(d)).unwrap();
            assert!(done, "split {split}");
            assert_eq!(used2, rest.len());
            assert_eq!(out, b"hello world!");
        }
        assert!(Chunked::default().feed(b"zz\r\n", |_| {}).is_err());
    }
}
