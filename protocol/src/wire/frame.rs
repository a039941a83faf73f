//! Length-prefixed bincode frames with a hard size limit.
//!
//! The limit is checked twice: on the length prefix before any payload byte
//! is read (so a garbage prefix cannot make us allocate gigabytes), and by
//! bincode itself while decoding (so a lying payload cannot either).

use std::fmt;

use bincode::Options;
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
    /// The length prefix (or an encoded message) exceeds [`MAX_FRAME_BYTES`].
    TooLarge { len: u64 },
    /// The payload is not a valid message of the expected type.
    Decode(String),
    /// A message could not be encoded (only possible past the size limit).
    Encode(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(err) => write!(f, "supervisor socket i/o error: {err}"),
            WireError::TooLarge { len } => {
                write!(
                    f,
                    "frame of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
                )
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
    let payload = options()
        .serialize(msg)
        .map_err(|err| WireError::Encode(err.to_string()))?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| *len <= MAX_FRAME_BYTES)
        .ok_or(WireError::TooLarge {
            len: payload.len() as u64,
        })?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
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
