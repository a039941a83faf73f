//! The backend's response body, read straight from its socket.
//!
//! Each poll reads whatever the socket has (up to the buffer's free room) and hands
//! over all of it that is body data at once: the payloads of every chunk of
//! a chunked body that arrived together become one piece, so a backend that
//! writes many small chunks costs one hand-over per read, not one per chunk.
//! Nothing waits to fill a buffer: whatever data is there is returned. The
//! three framings of HTTP/1 are supported: `Content-Length`, chunked, and
//! (Strata's, HTTP/1.0 `Connection: close`) until the end of the stream.
//!
//! Dropping the body closes the connection, which is how the proxy cancels
//! a generation. A body that ended cleanly on a reusable connection goes
//! back to the [`UpstreamPool`] instead.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::net::TcpStream;

use super::pool::{PoolKey, UpstreamPool};

/// The buffer grows by this much when it is nearly full.
const READ_CHUNK: usize = 64 * 1024;

/// Below this much free room, a read first makes [`READ_CHUNK`] more.
const MIN_READ_ROOM: usize = 4 * 1024;

/// Makes room for the next read. The buffer's tail is used until it is
/// nearly full: asking for a whole [`READ_CHUNK`] before every read would
/// allocate a fresh 64 KiB for each one, as the data already handed on
/// still shares the old allocation (perf: a tenth of the proxy's CPU in
/// malloc at c=64).
pub fn make_room(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < MIN_READ_ROOM {
        buf.reserve(READ_CHUNK);
    }
}

/// Longest chunk-size line or trailer line accepted.
const MAX_LINE: usize = 4096;

/// How the body's end is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`: this many bytes are left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(ChunkState),
    /// Until the backend closes the connection.
    UntilEof,
}

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
    /// The body is complete.
    Done,
}

/// Where a connection goes once its body ended cleanly.
pub struct Reuse {
    pub pool: std::sync::Arc<UpstreamPool>,
    pub key: PoolKey,
}

pub struct UpstreamBody {
    stream: Option<TcpStream>,
    buf: BytesMut,
    framing: Framing,
    reuse: Option<Reuse>,
}

impl UpstreamBody {
    /// The body on `stream`, starting with the bytes already read past the
    /// head (`buf`).
    pub fn new(stream: TcpStream, buf: BytesMut, framing: Framing, reuse: Option<Reuse>) -> Self {
        UpstreamBody {
            stream: Some(stream),
            buf,
            framing,
            reuse,
        }
    }

    fn is_complete(&self) -> bool {
        matches!(
            self.framing,
            Framing::Length(0) | Framing::Chunked(ChunkState::Done)
        )
    }

    /// The clean end: a reusable connection with nothing left over goes back
    /// to the pool; anything else is closed.
    fn finish(&mut self) {
        if let (Some(stream), Some(reuse)) = (self.stream.take(), self.reuse.take())
            && self.buf.is_empty()
        {
            reuse.pool.check_in(reuse.key, stream);
        }
    }

    /// All the body data the buffer holds, or `None` if it holds none yet.
    fn decode(&mut self) -> io::Result<Option<Bytes>> {
        match &mut self.framing {
            Framing::Length(left) => {
                let n = (*left).min(self.buf.len() as u64) as usize;
                *left -= n as u64;
                Ok((n > 0).then(|| self.buf.split_to(n).freeze()))
            }
            Framing::UntilEof => Ok((!self.buf.is_empty()).then(|| self.buf.split().freeze())),
            Framing::Chunked(state) => decode_chunked(state, &mut self.buf),
        }
    }
}

/// Takes every complete piece of chunked framing out of `buf`, returning
/// the data of all the chunks (and the partial one) it held.
fn decode_chunked(state: &mut ChunkState, buf: &mut BytesMut) -> io::Result<Option<Bytes>> {
    let mut pieces: Vec<Bytes> = Vec::new();
    loop {
        match *state {
            ChunkState::Size => {
                let Some(line) = take_line(buf)? else { break };
                let digits = line[..].split(|b: &u8| *b == b';').next().unwrap_or(&[]);
                let digits = std::str::from_utf8(digits)
                    .map_err(|_| invalid("chunk size is not text"))?
                    .trim();
                let size = u64::from_str_radix(digits, 16)
                    .map_err(|_| invalid("chunk size is not a hex number"))?;
                *state = if size == 0 {
                    ChunkState::Trailers
                } else {
                    ChunkState::Data(size)
                };
            }
            ChunkState::Data(left) => {
                if buf.is_empty() {
                    break;
                }
                let n = left.min(buf.len() as u64) as usize;
                pieces.push(buf.split_to(n).freeze());
                *state = if left == n as u64 {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left - n as u64)
                };
            }
            ChunkState::DataEnd => {
                if buf.len() < 2 {
                    break;
                }
                if &buf[..2] != b"\r\n" {
                    return Err(invalid("chunk data is not followed by CRLF"));
                }
                let _ = buf.split_to(2);
                *state = ChunkState::Size;
            }
            ChunkState::Trailers => {
                let Some(line) = take_line(buf)? else { break };
                if line.is_empty() {
                    *state = ChunkState::Done;
                }
            }
            ChunkState::Done => break,
        }
    }
    Ok(match pieces.len() {
        0 => None,
        1 => pieces.pop(),
        _ => {
            let mut joined = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for piece in pieces {
                joined.extend_from_slice(&piece);
            }
            Some(joined.freeze())
        }
    })
}

/// One CRLF-terminated line (without the CRLF), if a whole one is there.
fn take_line(buf: &mut BytesMut) -> io::Result<Option<BytesMut>> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => {
            let mut line = buf.split_to(end + 2);
            line.truncate(end);
            Ok(Some(line))
        }
        None if buf.len() > MAX_LINE => Err(invalid("chunk framing line too long")),
        None => Ok(None),
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            match this.decode() {
                Ok(Some(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(None) => {}
                Err(err) => {
                    this.stream = None;
                    return Poll::Ready(Some(Err(err)));
                }
            }
            if this.is_complete() {
                this.finish();
                return Poll::Ready(None);
            }
            let Some(stream) = this.stream.as_mut() else {
                return Poll::Ready(None);
            };
            make_room(&mut this.buf);
            let read = loop {
                if let Err(err) = ready!(stream.poll_read_ready(cx)) {
                    break Err(err);
                }
                match stream.try_read_buf(&mut this.buf) {
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                    other => break other,
                }
            };
            match read {
                Ok(0) => {
                    this.stream = None;
                    return Poll::Ready(match this.framing {
                        Framing::UntilEof => None,
                        _ => Some(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the backend closed the connection inside the body",
                        ))),
                    });
                }
                Ok(_) => {}
                Err(err) => {
                    this.stream = None;
                    return Poll::Ready(Some(Err(err)));
                }
            }
        }
    }
}
