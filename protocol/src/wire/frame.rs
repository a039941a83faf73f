//! Length-prefixed bincode frames with a hard size limit.
//!
//! The limit is checked twice: on the length prefix before any payload byte
//! is read (so a garbage prefix cannot make us allocate gigabytes), and by
//! bincode itself while decoding (so a lying payload cannot either).
//!
//! The long-lived ends read through a [`FrameReader`]: one `read` fills its
//! buffer with as many frames as have arrived (instead of a read for each
//! prefix and each payload), and it is cancel-safe, so a connection can wait
//! for frames in one branch of a `select!`. Writers that have several
//! messages at once encode them into one buffer ([`encode_frame_into`]) and
//! write it with one call.

use std::fmt;

use bincode::Options;
use bytes::BytesMut;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest payload either side accepts. A page of 1000 accounting records is
/// about 1.5 MB, so 8 MiB leaves room without letting a broken peer exhaust
/// memory.
pub const MAX_FRAME_BYTES: u32 = 8 * 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug)]
pub enum WireError {
    /// The socket failed or closed in the middle of a frame.
    Io(std::io::Error),
    /// The length prefix (or an encoded message) exceeds the reader's limit
    /// (at most [`MAX_FRAME_BYTES`]).
    TooLarge { len: u64, limit: u32 },
    /// The payload is not a valid message of the expected type.
    Decode(String),
    /// A message could not be encoded (only possible past the size limit).
    Encode(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(err) => write!(f, "supervisor socket i/o error: {err}"),
            WireError::TooLarge { len, limit } => {
                write!(f, "frame of {len} bytes exceeds the {limit}-byte limit")
            }
            WireError::Decode(msg) => write!(f, "malformed frame: {msg}"),
            WireError::Encode(msg) => write!(f, "cannot encode frame: {msg}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<std::io::Error> for WireError {
    fn from(err: std::io::Error) -> Self {
        WireError::Io(err)
    }
}

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_limit(u64::from(MAX_FRAME_BYTES))
        .reject_trailing_bytes()
}

/// Serializes `msg` into a complete frame (length prefix included).
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, WireError> {
    let mut frame = Vec::new();
    encode_frame_into(&mut frame, msg)?;
    Ok(frame)
}

/// Appends the complete frame of `msg` to `out`. On error `out` is as it was.
pub fn encode_frame_into<T: Serialize>(out: &mut Vec<u8>, msg: &T) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    // The limit makes bincode stop at MAX_FRAME_BYTES instead of growing `out` without end.
    if let Err(err) = options().serialize_into(&mut *out, msg) {
        out.truncate(start);
        return Err(match *err {
            bincode::ErrorKind::SizeLimit => WireError::TooLarge {
                len: u64::from(MAX_FRAME_BYTES) + 1,
                limit: MAX_FRAME_BYTES,
            },
            _ => WireError::Encode(err.to_string()),
        });
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// Decodes one payload (the bytes after the length prefix).
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, WireError> {
    options()
        .deserialize(payload)
        .map_err(|err| WireError::Decode(err.to_string()))
}

/// Reads one frame. Returns `Ok(None)` when the peer closed the connection
/// cleanly between frames; a close inside a frame is an error.
pub async fn read_frame<R, T>(reader: &mut R) -> Result<Option<T>, WireError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut prefix = [0u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        let n = reader.read(&mut prefix[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        filled += n;
    }
    let len = u32::from_be_bytes(prefix);
    if len > MAX_FRAME_BYTES {
        return Err(WireError::TooLarge {
            len: u64::from(len),
            limit: MAX_FRAME_BYTES,
        });
    }
    let mut payload = vec![0u8; len as usize];
    reader.read_exact(&mut payload).await?;
    decode_payload(&payload).map(Some)
}

/// Writes one frame and flushes it.
pub async fn write_frame<W, T>(writer: &mut W, msg: &T) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let frame = encode_frame(msg)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

/// How much a [`FrameReader`] asks the socket for at least, per read.
const READ_CHUNK: usize = 16 * 1024;

/// A buffered, cancel-safe reader of frames (see the module docs).
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    buf: BytesMut,
    limit: u32,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader that accepts frames up to [`MAX_FRAME_BYTES`].
    pub fn new(reader: R) -> FrameReader<R> {
        FrameReader::with_limit(reader, MAX_FRAME_BYTES)
    }

    /// A reader that refuses a frame longer than `limit` bytes (capped at
    /// [`MAX_FRAME_BYTES`]) as soon as its length prefix arrives, so what it
    /// buffers stays below `limit` plus one read.
    pub fn with_limit(reader: R, limit: u32) -> FrameReader<R> {
        FrameReader {
            reader,
            buf: BytesMut::new(),
            limit: limit.min(MAX_FRAME_BYTES),
        }
    }

    /// Bytes held for frames not yet returned (read ahead, or a frame still
    /// arriving).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next frame. `Ok(None)` when the peer closed cleanly between
    /// frames; a close inside a frame is an error. Cancel-safe: bytes read
    /// before a cancellation stay in the buffer for the next call. A frame
    /// that does not decode is consumed whole (the stream stays in sync).
    pub async fn next<T: DeserializeOwned>(&mut self) -> Result<Option<T>, WireError> {
        loop {
            if let Some(frame) = self.take_frame()? {
                return decode_payload(&frame).map(Some);
            }
            self.buf.reserve(READ_CHUNK);
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// Splits one complete payload off the buffer, if one has arrived.
    fn take_frame(&mut self) -> Result<Option<BytesMut>, WireError> {
        let Some(prefix) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix);
        if len > self.limit {
            return Err(WireError::TooLarge {
                len: u64::from(len),
                limit: self.limit,
            });
        }
        let total = 4 + len as usize;
        if self.buf.len() < total {
            // Room for the rest at once: one more read completes it.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(total);
        Ok(Some(frame.split_off(4)))
    }
}
