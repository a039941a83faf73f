//! A tiny HTTP/1.0 `GET /health` client for the backend (no HTTP library in the supervisor),
//! used to verify a start ([`check_health`]) and, while the backend serves, for each liveness
//! probe ([`probe_once`]).
//!
//! Strata answers HTTP/1.0 with `Connection: close`, so the reply ends at EOF (or at its
//! `Content-Length`). The reply is size-capped and time-bounded, and only two fields are kept:
//! `model` and `loaded`. Nothing from the reply ends up in an error message.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Replies larger than this are rejected (a real `/health` body is ~150 bytes).
const MAX_RESPONSE: usize = 64 * 1024;

/// The identity fields of a `/health` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// The backend's `model_name`.
    pub model: String,
    /// Whether the engine has the model loaded.
    pub loaded: bool,
}

/// Why `GET /health` gave no usable answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthError {
    /// The TCP connection failed (refused while the port is closed, for example).
    Connect(io::ErrorKind),
    /// Sending or receiving failed after connecting.
    Io(io::ErrorKind),
    /// No complete reply within the time allowed.
    TimedOut,
    /// The reply's status was not 200.
    Status(u16),
    /// Not an HTTP reply with a JSON body holding a string `model` and a boolean `loaded`.
    Malformed,
    /// The reply exceeded the size cap.
    TooLarge,
}

impl fmt::Display for HealthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HealthError::Connect(kind) => write!(f, "could not connect ({kind})"),
            HealthError::Io(kind) => write!(f, "connection failed ({kind})"),
            HealthError::TimedOut => f.write_str("timed out"),
            HealthError::Status(code) => write!(f, "HTTP status {code}"),
            HealthError::Malformed => f.write_str("malformed reply"),
            HealthError::TooLarge => f.write_str("reply too large"),
        }
    }
}

impl std::error::Error for HealthError {}

/// `GET http://ADDR/health`, bounded by `timeout` as a whole (connect, send, receive).
pub async fn check_health(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<HealthReport, HealthError> {
    match tokio::time::timeout(timeout, fetch(addr)).await {
        Ok(result) => result,
        Err(_) => Err(HealthError::TimedOut),
    }
}

/// What one liveness probe of a serving backend found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// `/health` answered with the expected model, loaded.
    Good,
    /// No answer within the bound (or no connection).
    Miss,
    /// An answer that says the engine changed: another model, or
    /// `loaded: false` (the cause, for the status and the log).
    Changed(String),
}

/// One probe: `GET /health` of `addr` within `timeout`, judged against the
/// model the backend was verified as.
pub async fn probe_once(addr: SocketAddr, expected_model: &str, timeout: Duration) -> ProbeOutcome {
    match check_health(addr, timeout).await {
        Ok(report) if report.model != expected_model => {
            ProbeOutcome::Changed(format!("/health names model {}", report.model))
        }
        Ok(report) if !report.loaded => {
            ProbeOutcome::Changed("/health says loaded: false".to_owned())
        }
        Ok(_) => ProbeOutcome::Good,
        Err(_) => ProbeOutcome::Miss,
    }
}

async fn fetch(addr: SocketAddr) -> Result<HealthReport, HealthError> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| HealthError::Connect(e.kind()))?;
    // Strata's DNS-rebinding guard accepts an IP literal as Host.
    let request = format!(
        "GET /health HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| HealthError::Io(e.kind()))?;

    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| HealthError::Io(e.kind()))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err(HealthError::TooLarge);
        }
        // Stop early once a Content-Length body is complete, in case a server keeps the
        // connection open despite `Connection: close`.
        if complete_by_length(&buf) {
            break;
        }
    }
    parse_response(&buf)
}

/// Byte offset where the body starts (after the blank line), if the head is complete.
fn body_start(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// The `Content-Length` value from a response head, if present and numeric.
fn content_length(head: &str) -> Option<usize> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("content-length") {
            value.trim().parse().ok()
        } else {
            None
        }
    })
}

fn complete_by_length(buf: &[u8]) -> bool {
    let Some(start) = body_start(buf) else {
        return false;
    };
    let Ok(head) = std::str::from_utf8(&buf[..start]) else {
        return false;
    };
    content_length(head).is_some_and(|len| buf.len() - start >= len)
}

#[derive(Deserialize)]
struct HealthBody {
    model: String,
    loaded: bool,
}

/// Parse a complete HTTP/1.x response to `GET /health`.
pub(crate) fn parse_response(buf: &[u8]) -> Result<HealthReport, HealthError> {
    let start = body_start(buf).ok_or(HealthError::Malformed)?;
    let head = std::str::from_utf8(&buf[..start]).map_err(|_| HealthError::Malformed)?;
    let status_line = head.split("\r\n").next().unwrap_or_default();
    let mut parts = status_line.split_ascii_whitespace();
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(HealthError::Malformed);
    }
    let status: u16 = parts
        .next()
        .and_then(|code| code.parse().ok())
        .ok_or(HealthError::Malformed)?;
    if status != 200 {
        return Err(HealthError::Status(status));
    }
    let mut body = &buf[start..];
    if let Some(len) = content_length(head) {
        body = body.get(..len).ok_or(HealthError::Malformed)?;
    }
    let parsed: HealthBody = serde_json::from_slice(body).map_err(|_| HealthError::Malformed)?;
    Ok(HealthReport {
        model: parsed.model,
        loaded: parsed.loaded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    const OK: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 58\r\n\r\n{\"status\":\"ok\",\"model\":\"m1\",\"loaded\":true,\"api_key\":false}";

    #[test]
    fn parses_a_strata_reply() {
        assert_eq!(
            parse_response(OK),
            Ok(HealthReport {
                model: "m1".into(),
                loaded: true
            })
        );
    }

    #[test]
    fn rejects_bad_replies() {
        let not_found = b"HTTP/1.0 404 Not Found\r\n\r\n{}";
        assert_eq!(parse_response(not_found), Err(HealthError::Status(404)));
        assert_eq!(
            parse_response(b"HTTP/1.0 200 OK\r\n"),
            Err(HealthError::Malformed)
        );
        assert_eq!(
            parse_response(b"HTTP/1.0 200 OK\r\n\r\n{\"model\":\"m\"}"),
            Err(HealthError::Malformed),
            "loaded is required"
        );
        assert_eq!(
            parse_response(b"SSH-2.0-x\r\n\r\n"),
            Err(HealthError::Malformed)
        );
        assert_eq!(
            parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 99\r\n\r\n{}"),
            Err(HealthError::Malformed),
            "truncated body"
        );
    }

    async fn serve_once(reply: &'static [u8], close: bool) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 1024];
            let n = sock.read(&mut req).await.unwrap();
            assert!(req[..n].starts_with(b"GET /health HTTP/1.0\r\n"));
            sock.write_all(reply).await.unwrap();
            if close {
                drop(sock);
            } else {
                // Keep the connection open: the client must stop at Content-Length.
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        });
        addr
    }

    #[tokio::test(flavor = "current_thread")]
    async fn fetches_over_loopback() {
        let addr = serve_once(OK, true).await;
        let report = check_health(addr, Duration::from_secs(5)).await.unwrap();
        assert_eq!(report.model, "m1");
        assert!(report.loaded);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stops_at_content_length_without_eof() {
        let addr = serve_once(OK, false).await;
        let report = check_health(addr, Duration::from_secs(5)).await.unwrap();
        assert_eq!(report.model, "m1");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn silent_server_times_out_and_closed_port_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepted by the kernel backlog, never answered.
        let err = check_health(addr, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(err, HealthError::TimedOut);
        drop(listener);
        let err = check_health(addr, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(err, HealthError::Connect(io::ErrorKind::ConnectionRefused));
    }
}
