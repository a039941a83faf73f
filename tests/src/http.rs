//! A minimal, blocking HTTP/1.1 client over [`std::net::TcpStream`] for the proxy's tests.
//!
//! No HTTP crate on purpose: the tests need to see exactly what goes over the wire (raw body
//! bytes for byte-exact comparisons, SSE frames as they arrive, a connection that can be dropped
//! mid-stream, requests no well-behaved client would send).
//!
//! - [`request`] / [`get`] / [`post_json`] / [`chat`]: one request, the whole [`Response`]
//!   (status, lowercased headers, decoded body: `Content-Length`, chunked or close-delimited);
//!   [`Response::document`] reads the body as a router document type, exactly.
//! - [`open`] / [`open_chat`]: send a request, read the status line and headers, and return a
//!   [`Stream`] that pulls the body incrementally with timeouts ([`Stream::read_some`],
//!   [`Stream::next_frame`], ...). Dropping it closes the connection (a client disconnect).
//! - [`Conn`]: a raw connection for requests written by hand (chunked request bodies, a
//!   `Content-Length` larger than the body, half-closing), turned into a [`Response`] or a
//!   [`Stream`] when the answer is wanted. [`send_raw`] does it in one call.
//! - [`sse_frames`]: splits SSE bytes into [`Frame`]s.
//!
//! Every request sends `Connection: close`, so each one has its own TCP connection. Every read
//! is bounded (by [`DEADLINE`] unless a timeout is given): a hung proxy fails the test instead
//! of hanging it.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use strata_protocol::api::{ErrorBody, ErrorDetail};

use crate::document::read_exact;
use crate::poll::DEADLINE;

/// The chat completions path.
pub const CHAT_PATH: &str = "/v1/chat/completions";

/// The header naming a request's ID (and its record's `request_id`).
pub const REQUEST_ID: &str = "x-strata-request-id";

/// A whole HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased, in the order received (repeated names stay separate).
    pub headers: Vec<(String, String)>,
    /// The body with the transfer framing removed.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// The router's `x-strata-request-id`; panics (showing the response) without one.
    pub fn request_id(&self) -> &str {
        self.header(REQUEST_ID)
            .unwrap_or_else(|| panic!("no {REQUEST_ID}: {self}"))
    }

    /// Every value of header `name` (case-insensitive).
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    /// The body as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; panics (showing the response) if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("response body is not JSON ({err}): {self}"))
    }

    /// The body read as the router document `T`, exactly (see [`read_exact`]); panics
    /// (showing the body) if it is not one.
    pub fn document<T: Serialize + DeserializeOwned>(&self) -> T {
        read_exact(short_type_name::<T>(), &self.json())
    }

    /// The router's error document in the body (`{"error":{...}}`), read exactly.
    pub fn error(&self) -> ErrorDetail {
        self.document::<ErrorBody>().error
    }

    /// The body split into SSE frames.
    pub fn frames(&self) -> Vec<Frame> {
        sse_frames(&self.body)
    }

    /// Panics (showing the response) unless the status is `status`.
    pub fn expect_status(&self, status: u16) -> &Response {
        assert_eq!(self.status, status, "unexpected status: {self}");
        self
    }
}

impl std::fmt::Display for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "HTTP {}", self.status)?;
        for (name, value) in &self.headers {
            writeln!(f, "{name}: {value}")?;
        }
        if self.body.len() > 4096 {
            write!(
                f,
                "\n{}... ({} bytes)",
                String::from_utf8_lossy(&self.body[..4096]),
                self.body.len()
            )
        } else {
            write!(f, "\n{}", self.text())
        }
    }
}

fn header_in<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// One SSE frame (the lines up to a blank line).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The `event:` field, if any (the last one wins, as in the SSE spec).
    pub event: Option<String>,
    /// Each `data:` line's value, in order.
    pub data: Vec<String>,
    /// Each comment line's text (after the `:` and one optional space).
    pub comments: Vec<String>,
}

impl Frame {
    /// The data lines joined with `\n`, as an SSE client delivers them.
    pub fn data_text(&self) -> String {
        self.data.join("\n")
    }

    /// Whether this is `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data.len() == 1 && self.data[0] == "[DONE]"
    }

    /// Whether the frame carries nothing but comments (a keepalive).
    pub fn is_comment(&self) -> bool {
        self.event.is_none() && self.data.is_empty() && !self.comments.is_empty()
    }

    /// Whether this is a keepalive: a comment-only frame, either `: keep-alive` or one of the
    /// router's progress comments for a waiting stream (`: loading MODEL, 23s of 120s`).
    pub fn is_keepalive(&self) -> bool {
        self.is_comment()
    }

    /// The frame's one comment line, if it is a comment-only frame of one line.
    pub fn comment(&self) -> Option<&str> {
        match self.comments.as_slice() {
            [one] if self.is_comment() => Some(one.trim_start()),
            _ => None,
        }
    }

    /// Whether the frame has data that is not `[DONE]`.
    pub fn is_data(&self) -> bool {
        !self.data.is_empty() && !self.is_done()
    }

    /// The data parsed as JSON; panics if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data_text())
            .unwrap_or_else(|err| panic!("SSE data is not JSON ({err}): {self:?}"))
    }

    /// The router's in-band error document in the data (`{"error":{...,"status":N}}`), read
    /// exactly (see [`read_exact`]).
    pub fn error(&self) -> ErrorDetail {
        read_exact::<ErrorBody>("ErrorBody", &self.json()).error
    }
}

/// `T`'s name without its path, for failure messages.
fn short_type_name<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    name.rsplit("::").next().unwrap_or(name)
}

fn parse_block(block: &str) -> Frame {
    let mut frame = Frame::default();
    for line in block.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix(':') {
            frame
                .comments
                .push(comment.strip_prefix(' ').unwrap_or(comment).to_owned());
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => frame.event = Some(value.to_owned()),
            "data" => frame.data.push(value.to_owned()),
            _ => {}
        }
    }
    frame
}

/// Where the next frame ends in `bytes`: `(end of the frame's text, start of what follows)`.
/// Linear in the frame's length (a CRLF blank line is only looked for before the first LF one).
fn frame_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    let crlf_scope = match lf {
        Some(at) => &bytes[..(at + 2).min(bytes.len())],
        None => bytes,
    };
    let crlf = crlf_scope.windows(4).position(|w| w == b"\r\n\r\n");
    match (lf, crlf) {
        (Some(a), Some(b)) if b < a => Some((b, b + 4)),
        (Some(a), _) => Some((a, a + 2)),
        (None, Some(b)) => Some((b, b + 4)),
        (None, None) => None,
    }
}

/// Splits SSE bytes into frames. Text after the last blank line (an unfinished frame) is
/// returned as a last frame too, so a truncated stream is visible.
pub fn sse_frames(bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut rest = bytes;
    while let Some((end, next)) = frame_end(rest) {
        let block = String::from_utf8_lossy(&rest[..end]);
        if !block.trim().is_empty() {
            frames.push(parse_block(&block));
        }
        rest = &rest[next..];
    }
    let tail = String::from_utf8_lossy(rest);
    if !tail.trim().is_empty() {
        frames.push(parse_block(&tail));
    }
    frames
}

/// A chat request body: `model`, one user message, `stream`, and any extra members.
pub fn chat_body(model: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
    })
}

/// One request; panics on a connection error or timeout.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_request(addr, method, path, headers, body).unwrap_or_else(|err| {
        panic!("{method} http://{addr}{path} failed: {err}");
    })
}

/// One request, returning connection errors (used to wait for a listener, or to check that
/// one is closed).
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut conn = Conn::connect(addr)?;
    conn.write(&request_bytes(addr, method, path, headers, body))?;
    conn.try_response(DEADLINE)
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

/// `POST path` with a JSON body.
pub fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Response {
    request(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// `POST /v1/chat/completions` with `body`, read to the end.
pub fn chat(addr: SocketAddr, body: &Value) -> Response {
    post_json(addr, CHAT_PATH, body)
}

/// [`chat`] on a thread of its own, for requests that wait while the test goes on.
pub fn spawn_chat(addr: SocketAddr, body: Value) -> std::thread::JoinHandle<Response> {
    std::thread::spawn(move || chat(addr, &body))
}

/// The bytes of a request: request line, `Host`, `Connection: close`, `Content-Length` (unless
/// `headers` sets `Content-Length` or `Transfer-Encoding`), `headers`, then `body` as given.
pub fn request_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    let framed = headers.iter().any(|(name, _)| {
        name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
    });
    if !framed && (!body.is_empty() || method == "POST" || method == "PUT") {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Sends `bytes` as they are on a new connection (half-closing nothing) and reads the whole
/// response.
pub fn send_raw(addr: SocketAddr, bytes: &[u8]) -> std::io::Result<Response> {
    let mut conn = Conn::connect(addr)?;
    conn.write(bytes)?;
    conn.try_response(DEADLINE)
}

/// Sends a request and returns once the status line and headers are in; the body is read
/// through the returned [`Stream`]. Panics on a connection error or timeout.
pub fn open(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Stream {
    let mut conn = Conn::connect(addr)
        .unwrap_or_else(|err| panic!("connect to {addr} for {method} {path}: {err}"));
    conn.write(&request_bytes(addr, method, path, headers, body))
        .unwrap_or_else(|err| panic!("send {method} {path} to {addr}: {err}"));
    conn.into_stream(DEADLINE)
}

/// Sends `POST /v1/chat/completions` with a JSON body and returns the connection without
/// reading anything: for a request that waits (a held wait-first stream has no headers to read
/// yet) or whose client is to disconnect. Panics on a connection error.
pub fn send_chat(addr: SocketAddr, body: &Value) -> Conn {
    let mut conn =
        Conn::connect(addr).unwrap_or_else(|err| panic!("connect to {addr} for a chat: {err}"));
    conn.write(&request_bytes(
        addr,
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    ))
    .unwrap_or_else(|err| panic!("send a chat to {addr}: {err}"));
    conn
}

/// [`open`] for `POST /v1/chat/completions` with a JSON body.
pub fn open_chat(addr: SocketAddr, body: &Value) -> Stream {
    open(
        addr,
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// A raw client connection: write anything, then read the answer.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
}

impl Conn {
    /// Connects (bounded by [`DEADLINE`]).
    pub fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, DEADLINE)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(DEADLINE))?;
        Ok(Conn { stream, addr })
    }

    /// Connects with the receive buffer fixed at `bytes` (`SO_RCVBUF` set before connecting,
    /// which also turns off the kernel's receive-buffer autotuning), so a client that reads
    /// slowly cannot hide a server's lack of backpressure in a huge kernel buffer.
    pub fn connect_with_recv_buffer(addr: SocketAddr, bytes: usize) -> std::io::Result<Conn> {
        use nix::sys::socket::{
            AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6, connect, setsockopt,
            socket, sockopt,
        };
        use std::os::fd::AsRawFd;
        let family = match addr {
            SocketAddr::V4(_) => AddressFamily::Inet,
            SocketAddr::V6(_) => AddressFamily::Inet6,
        };
        let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
        setsockopt(&fd, sockopt::RcvBuf, &bytes)?;
        match addr {
            SocketAddr::V4(v4) => connect(fd.as_raw_fd(), &SockaddrIn::from(v4))?,
            SocketAddr::V6(v6) => connect(fd.as_raw_fd(), &SockaddrIn6::from(v6))?,
        }
        let stream = TcpStream::from(fd);
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(DEADLINE))?;
        Ok(Conn { stream, addr })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes all of `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Writes one chunk of a chunked body (an empty `data` writes the last chunk).
    pub fn write_chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        let mut bytes = format!("{:x}\r\n", data.len()).into_bytes();
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(b"\r\n");
        if data.is_empty() {
            // "0\r\n" then the empty trailer line.
            bytes = b"0\r\n\r\n".to_vec();
        }
        self.write(&bytes)
    }

    /// Shuts down the sending side (the server sees end of input).
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Reads the whole response within `timeout`; panics on an error.
    pub fn response(self, timeout: Duration) -> Response {
        let addr = self.addr;
        self.try_response(timeout)
            .unwrap_or_else(|err| panic!("reading a response from {addr}: {err}"))
    }

    /// Reads the whole response within `timeout`.
    pub fn try_response(self, timeout: Duration) -> std::io::Result<Response> {
        let deadline = Instant::now() + timeout;
        let mut stream = Stream::start(self, deadline)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let body = stream.try_read_to_end(left)?;
        Ok(Response {
            status: stream.status,
            headers: stream.headers.clone(),
            body,
        })
    }

    /// Reads the status line and headers within `timeout` and returns the body reader, or
    /// the error (the connection closed or failed first, or the time ran out).
    pub fn try_into_stream(self, timeout: Duration) -> std::io::Result<Stream> {
        Stream::start(self, Instant::now() + timeout)
    }

    /// Reads the status line and headers within `timeout` and returns the body reader;
    /// panics on an error.
    pub fn into_stream(self, timeout: Duration) -> Stream {
        let addr = self.addr;
        Stream::start(self, Instant::now() + timeout)
            .unwrap_or_else(|err| panic!("reading response headers from {addr}: {err}"))
    }
}

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked(ChunkState),
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty line.
    Trailers,
}

/// A response being read: the status and headers are in, the body comes on demand.
///
/// Reads are bounded by the timeout given to each call; bytes that arrive before a timeout are
/// kept, so a frame or chunk is never split. Dropping the stream closes the connection (an
/// abrupt client disconnect).
#[derive(Debug)]
pub struct Stream {
    pub status: u16,
    /// Header names lowercased, in order.
    pub headers: Vec<(String, String)>,
    conn: Conn,
    framing: Framing,
    /// Bytes read from the socket and not yet decoded.
    raw: Vec<u8>,
    /// Decoded body bytes not yet handed out.
    decoded: Vec<u8>,
    /// The body has ended (all of it is in `decoded`).
    finished: bool,
    /// Every body byte handed out so far (unless `keep` is off).
    received: Vec<u8>,
    received_len: u64,
    keep: bool,
    /// The most bytes one socket read may take (small values make a slow reader).
    read_size: usize,
}

impl Stream {
    fn start(conn: Conn, deadline: Instant) -> std::io::Result<Stream> {
        let mut stream = Stream {
            status: 0,
            headers: Vec::new(),
            conn,
            framing: Framing::Close,
            raw: Vec::new(),
            decoded: Vec::new(),
            finished: false,
            received: Vec::new(),
            received_len: 0,
            keep: true,
            read_size: 64 * 1024,
        };
        loop {
            let head_end = loop {
                if let Some(end) = stream.raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end;
                }
                if stream.fill(deadline)? == 0 {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!(
                            "connection closed before the response headers ({} bytes: {:?})",
                            stream.raw.len(),
                            String::from_utf8_lossy(&stream.raw)
                        ),
                    ));
                }
            };
            let head = String::from_utf8_lossy(&stream.raw[..head_end]).into_owned();
            stream.raw.drain(..head_end + 4);
            let mut lines = head.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let mut parts = status_line.splitn(3, ' ');
            let version = parts.next().unwrap_or_default();
            let status = parts.next().and_then(|code| code.parse::<u16>().ok());
            let Some(status) = status.filter(|_| version.starts_with("HTTP/1.")) else {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    format!("bad status line {status_line:?}"),
                ));
            };
            if (100..200).contains(&status) {
                continue; // 100 Continue and friends: the real answer follows
            }
            stream.status = status;
            stream.headers = lines
                .filter_map(|line| line.split_once(':'))
                .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
                .collect();
            let chunked = header_in(&stream.headers, "transfer-encoding")
                .is_some_and(|value| value.to_ascii_lowercase().contains("chunked"));
            let length = header_in(&stream.headers, "content-length")
                .and_then(|value| value.parse::<u64>().ok());
            stream.framing = if status == 204 || status == 304 {
                Framing::Length(0)
            } else if chunked {
                Framing::Chunked(ChunkState::Size)
            } else if let Some(length) = length {
                Framing::Length(length)
            } else {
                Framing::Close
            };
            stream.decode()?;
            return Ok(stream);
        }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// The router's `x-strata-request-id`; panics without one.
    pub fn request_id(&self) -> &str {
        self.header(REQUEST_ID).unwrap_or_else(|| {
            panic!(
                "no {REQUEST_ID} on the {} stream: {:?}",
                self.status, self.headers
            )
        })
    }

    /// Stop keeping a copy of the body handed out (for very large bodies).
    pub fn discard_received(&mut self) {
        self.keep = false;
        self.received = Vec::new();
    }

    /// Limits each socket read to `bytes` (a slow reader reads in small pieces).
    pub fn set_read_size(&mut self, bytes: usize) {
        self.read_size = bytes.max(1);
    }

    /// Every body byte handed out so far (empty after [`Stream::discard_received`]).
    pub fn received(&self) -> &[u8] {
        &self.received
    }

    /// How many body bytes were handed out so far.
    pub fn received_len(&self) -> u64 {
        self.received_len
    }

    /// Whether the body has ended and everything was handed out.
    pub fn is_finished(&self) -> bool {
        self.finished && self.decoded.is_empty()
    }

    /// Reads from the socket once (bounded by `deadline`); 0 means EOF.
    fn fill(&mut self, deadline: Instant) -> std::io::Result<usize> {
        let mut buffer = vec![0u8; self.read_size];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(ErrorKind::TimedOut, "read timed out"));
            }
            self.conn.stream.set_read_timeout(Some(left))?;
            match self.conn.stream.read(&mut buffer) {
                Ok(n) => {
                    self.raw.extend_from_slice(&buffer[..n]);
                    return Ok(n);
                }
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue;
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Moves whatever can be decoded from `raw` to `decoded`.
    fn decode(&mut self) -> std::io::Result<()> {
        loop {
            match self.framing {
                Framing::Close => {
                    self.decoded.append(&mut self.raw);
                    return Ok(());
                }
                Framing::Length(left) => {
                    let take = (left.min(self.raw.len() as u64)) as usize;
                    self.decoded.extend(self.raw.drain(..take));
                    self.framing = Framing::Length(left - take as u64);
                    if left - take as u64 == 0 {
                        self.finished = true;
                    }
                    return Ok(());
                }
                Framing::Chunked(state) => {
                    let Some(next) = self.decode_chunk(state)? else {
                        return Ok(());
                    };
                    self.framing = Framing::Chunked(next);
                    if self.finished {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One step of chunked decoding; `None` when more input is needed.
    fn decode_chunk(&mut self, state: ChunkState) -> std::io::Result<Option<ChunkState>> {
        let line_end = |raw: &[u8]| raw.windows(2).position(|w| w == b"\r\n");
        match state {
            ChunkState::Size => {
                let Some(end) = line_end(&self.raw) else {
                    return Ok(None);
                };
                let line = String::from_utf8_lossy(&self.raw[..end]).into_owned();
                self.raw.drain(..end + 2);
                let size_text = line.split(';').next().unwrap_or_default().trim();
                let size = u64::from_str_radix(size_text, 16).map_err(|_| {
                    std::io::Error::new(ErrorKind::InvalidData, format!("bad chunk size {line:?}"))
                })?;
                Ok(Some(if size == 0 {
                    ChunkState::Trailers
                } else {
                    ChunkState::Data(size)
                }))
            }
            ChunkState::Data(left) => {
                if self.raw.is_empty() {
                    return Ok(None);
                }
                let take = (left.min(self.raw.len() as u64)) as usize;
                self.decoded.extend(self.raw.drain(..take));
                let left = left - take as u64;
                Ok(Some(if left == 0 {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left)
                }))
            }
            ChunkState::DataEnd => {
                if self.raw.len() < 2 {
                    return Ok(None);
                }
                if &self.raw[..2] != b"\r\n" {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        "chunk data not followed by CRLF",
                    ));
                }
                self.raw.drain(..2);
                Ok(Some(ChunkState::Size))
            }
            ChunkState::Trailers => {
                let Some(end) = line_end(&self.raw) else {
                    return Ok(None);
                };
                self.raw.drain(..end + 2);
                if end == 0 {
                    self.finished = true;
                }
                Ok(Some(ChunkState::Trailers))
            }
        }
    }

    /// Reads more of the body into `decoded`; false at the end of the body.
    fn pull(&mut self, deadline: Instant) -> std::io::Result<bool> {
        if self.finished {
            return Ok(false);
        }
        let n = self.fill(deadline)?;
        if n == 0 {
            if self.framing == Framing::Close {
                self.finished = true;
                return Ok(false);
            }
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "connection closed before the end of the body (truncated transfer)",
            ));
        }
        self.decode()?;
        Ok(true)
    }

    fn hand_out(&mut self, count: usize) -> Vec<u8> {
        let bytes: Vec<u8> = self.decoded.drain(..count).collect();
        self.received_len += bytes.len() as u64;
        if self.keep {
            self.received.extend_from_slice(&bytes);
        }
        bytes
    }

    /// Up to `max` body bytes: what has arrived, waiting up to `timeout` if nothing has.
    /// `Ok(None)` at the end of the body; `Err` (kind `TimedOut`) if nothing arrived in time;
    /// `Err` (kind `UnexpectedEof`) if the connection closed inside a delimited body.
    pub fn read_some(&mut self, max: usize, timeout: Duration) -> std::io::Result<Option<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        while self.decoded.is_empty() {
            if !self.pull(deadline)? {
                return Ok(None);
            }
        }
        let count = self.decoded.len().min(max.max(1));
        Ok(Some(self.hand_out(count)))
    }

    /// The rest of the body within `timeout` (what was already handed out is not repeated).
    pub fn try_read_to_end(&mut self, timeout: Duration) -> std::io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        while self.pull(deadline)? {}
        let count = self.decoded.len();
        Ok(self.hand_out(count))
    }

    /// [`Stream::try_read_to_end`], panicking on an error.
    pub fn read_to_end(&mut self, timeout: Duration) -> Vec<u8> {
        self.try_read_to_end(timeout)
            .unwrap_or_else(|err| panic!("reading the rest of the body: {err}"))
    }

    /// The next SSE frame within `timeout`. `Ok(None)` at the end of the body (an unfinished
    /// last frame is returned first, as a frame).
    pub fn try_next_frame(&mut self, timeout: Duration) -> std::io::Result<Option<Frame>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((end, next)) = frame_end(&self.decoded) {
                let bytes = self.hand_out(next);
                let block = String::from_utf8_lossy(&bytes[..end]).into_owned();
                if block.trim().is_empty() {
                    continue;
                }
                return Ok(Some(parse_block(&block)));
            }
            if !self.pull(deadline)? {
                if self.decoded.is_empty() {
                    return Ok(None);
                }
                let count = self.decoded.len();
                let bytes = self.hand_out(count);
                let block = String::from_utf8_lossy(&bytes).into_owned();
                if block.trim().is_empty() {
                    return Ok(None);
                }
                return Ok(Some(parse_block(&block)));
            }
        }
    }

    /// [`Stream::try_next_frame`], panicking on an error or timeout (showing what arrived).
    pub fn next_frame(&mut self, timeout: Duration) -> Option<Frame> {
        match self.try_next_frame(timeout) {
            Ok(frame) => frame,
            Err(err) => panic!(
                "waiting {timeout:?} for an SSE frame: {err}; body so far: {:?}",
                String::from_utf8_lossy(&self.received)
            ),
        }
    }

    /// Reads frames until one matches `pred`, returning every frame read (the match last).
    /// Panics on the end of the body or after `timeout`.
    pub fn frames_until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&Frame) -> bool,
    ) -> Vec<Frame> {
        let deadline = Instant::now() + timeout;
        let mut frames = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.try_next_frame(left) {
                Ok(Some(frame)) => {
                    let done = pred(&frame);
                    frames.push(frame);
                    if done {
                        return frames;
                    }
                }
                Ok(None) => panic!("the body ended before {what}; frames: {frames:#?}"),
                Err(err) => panic!("{err} while waiting for {what}; frames: {frames:#?}"),
            }
        }
    }

    /// Every remaining frame up to the end of the body (bounded by `timeout`).
    pub fn remaining_frames(&mut self, timeout: Duration) -> Vec<Frame> {
        let deadline = Instant::now() + timeout;
        let mut frames = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.try_next_frame(left) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => return frames,
                Err(err) => {
                    panic!("{err} while reading the stream to its end; frames so far: {frames:#?}")
                }
            }
        }
    }

    /// Closes the connection now (the same as dropping the stream).
    pub fn disconnect(self) {}

    /// The underlying connection's local address (to tell connections apart).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.conn.stream.local_addr().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_events_data_and_comments() {
        let bytes = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: error\ndata: x\ndata: y\n\ndata: [DONE]\n\ndata: partial";
        let frames = sse_frames(bytes);
        assert_eq!(frames.len(), 5);
        assert!(frames[0].is_keepalive());
        assert_eq!(frames[1].json()["a"], 1);
        assert_eq!(frames[2].event.as_deref(), Some("error"));
        assert_eq!(frames[2].data_text(), "x\ny");
        assert!(frames[3].is_done());
        assert_eq!(frames[4].data, vec!["partial".to_owned()]);
    }

    #[test]
    fn chunked_and_length_bodies_decode_over_a_real_socket() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for answer in [
                &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-Test: 1\r\n\r\n5\r\nhello\r\n1;ext\r\n!\r\n0\r\n\r\n"[..],
                &b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nok"[..],
                &b"HTTP/1.0 200 OK\r\n\r\nuntil close"[..],
            ] {
                let (mut socket, _) = listener.accept().unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    socket.read_exact(&mut byte).unwrap();
                    head.push(byte[0]);
                }
                socket.write_all(answer).unwrap();
            }
        });
        let chunked = get(addr, "/");
        assert_eq!(chunked.status, 200);
        assert_eq!(chunked.header("x-test"), Some("1"));
        assert_eq!(chunked.body, b"hello!");
        let length = get(addr, "/");
        assert_eq!(length.status, 404);
        assert_eq!(length.body, b"ok");
        let close = get(addr, "/");
        assert_eq!(close.body, b"until close");
        server.join().unwrap();
    }
}
