//! The bench upstream: a fast stand-in for Strata that follows the backend contract
//! (RESEARCH.md) and nothing more, so that what the benchmark measures is the router.
//!
//! It takes the supervisor's backend argv (`-m serve.server --engine strata --config PROFILE
//! --host H --port P --idle-unload 0 --ready-file PATH`; `-m`, `--engine` and `--idle-unload`
//! are accepted and ignored), so a config's `python` can point at the `bench-upstream` binary.
//! The benchmark also runs it on its own port as the "direct" upstream.
//!
//! Start: wait `bench.load_ms` (+ up to `bench.load_jitter_ms`, so the ready file does not
//! always appear at the same phase of the supervisor's polling) with the port closed, bind,
//! write the ready file `{pid, model_name, port}` atomically (temp file, fsync, rename), then
//! append a `ready` event with `ready_ns` (CLOCK_REALTIME right after the rename) to the
//! profile's `fake.log`, the same JSON-lines log the Python fake writes (`start` and `ready`
//! events, so [`crate::FakeLog`] finds these processes too). The process's first `/health`
//! request and first chat request are logged too (`health` and `request` events with
//! `arrived_ns`, when the request was read whole; written after the answer), for the
//! benchmark's switch breakdown; no later request is, so the timed phases write nothing.
//!
//! HTTP: `GET /health` (`loaded: true`, `model`), `GET /v1/models`, `POST
//! /v1/chat/completions` answering JSON or SSE in the [`Shape`] the body's `bench` object asks
//! for (defaults from the profile), anything else 404. `bench.http` picks the connection
//! behaviour: `"1.1"` keeps connections alive (JSON with `Content-Length`, SSE chunked, one
//! chunk per frame); `"1.0"` is Strata's: `HTTP/1.0`, `Connection: close`, SSE bodies end at
//! EOF. Every SSE frame is one write, the first at once. A single-threaded runtime; SIGTERM's
//! default action stops it.
//!
//! Profile keys: `model_name` (default `qwen3.8-flash-next`), `fake.log` (optional), and
//! `bench`: `{"http": "1.1"|"1.0", "load_ms", "load_jitter_ms", "chunks", "bytes",
//! "pace_ms"}`, every key optional.

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::wire::{self, ChatBody, Shape};

/// Request heads larger than this are refused (the router's are a few hundred bytes).
const MAX_HEAD: usize = 64 * 1024;
/// Request bodies larger than this are refused.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub profile: PathBuf,
    pub host: IpAddr,
    pub port: u16,
    pub ready_file: Option<PathBuf>,
}

/// Parses the backend argv (without the program name).
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
    let mut args = args.into_iter();
    let mut profile = None;
    let mut host = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut port = 8095;
    let mut ready_file = None;
    while let Some(flag) = args.next() {
        let flag = flag.to_string_lossy().into_owned();
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value"))
                .map(PathBuf::from)
        };
        match flag.as_str() {
            "-m" | "--engine" | "--idle-unload" => {
                value()?;
            }
            "--config" => profile = Some(value()?),
            "--host" => {
                let text = value()?;
                host = text
                    .to_string_lossy()
                    .parse()
                    .map_err(|_| format!("--host: not an IP address: {}", text.display()))?;
            }
            "--port" => {
                let text = value()?;
                port = text
                    .to_string_lossy()
                    .parse()
                    .map_err(|_| format!("--port: not a port: {}", text.display()))?;
            }
            "--ready-file" => ready_file = Some(value()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        profile: profile.ok_or("--config PROFILE is required")?,
        host,
        port,
        ready_file,
    })
}

/// How connections behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum HttpMode {
    /// HTTP/1.1 keep-alive; SSE chunked.
    #[default]
    #[serde(rename = "1.1")]
    KeepAlive,
    /// HTTP/1.0 with `Connection: close` on every response, like Strata.
    #[serde(rename = "1.0")]
    Close,
}

/// The profile's `bench` object.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchProfile {
    pub http: HttpMode,
    pub load_ms: u64,
    pub load_jitter_ms: u64,
    /// The default [`Shape`]'s fields (a chat body's `bench` object overrides them).
    pub chunks: Option<u32>,
    pub bytes: Option<u32>,
    pub pace_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct FakeKeys {
    log: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct Profile {
    model_name: Option<String>,
    #[serde(default)]
    bench: BenchProfile,
    #[serde(default)]
    fake: Option<FakeKeys>,
}

struct State {
    name: String,
    mode: HttpMode,
    shape: Shape,
    health: Vec<u8>,
    models: Vec<u8>,
    log: Option<PathBuf>,
    /// Whether the first `/health` and the first chat request were logged.
    health_logged: std::sync::atomic::AtomicBool,
    request_logged: std::sync::atomic::AtomicBool,
}

impl State {
    /// Logs `event` (with `arrived_ns`) the first time only.
    fn log_first(&self, logged: &std::sync::atomic::AtomicBool, event: &str, arrived_ns: u128) {
        if self.log.is_some() && !logged.swap(true, std::sync::atomic::Ordering::Relaxed) {
            log_event(
                self.log.as_deref(),
                json!({"event": event, "pid": std::process::id(), "model_name": self.name, "arrived_ns": arrived_ns}),
            );
        }
    }
}

/// Runs the upstream until it is killed. Errors are start failures (bad profile, port taken).
pub fn run(args: Args) -> Result<(), String> {
    let text = std::fs::read(&args.profile)
        .map_err(|err| format!("read {}: {err}", args.profile.display()))?;
    let profile: Profile = serde_json::from_slice(&text)
        .map_err(|err| format!("profile {}: {err}", args.profile.display()))?;
    let name = profile
        .model_name
        .unwrap_or_else(|| "qwen3.8-flash-next".to_owned());
    let log = profile.fake.and_then(|fake| fake.log);
    let pid = std::process::id();
    let argv: Vec<String> = std::env::args().collect();
    log_event(
        log.as_deref(),
        json!({"event": "start", "pid": pid, "model_name": name, "argv": argv, "port": args.port}),
    );
    let base = Shape::default();
    let bench = profile.bench;
    let shape = Shape {
        chunks: bench.chunks.unwrap_or(base.chunks),
        bytes: bench.bytes.unwrap_or(base.bytes),
        pace_ms: bench.pace_ms.unwrap_or(base.pace_ms),
    };
    let state = Arc::new(State {
        health: serde_json::to_vec(&json!({
            "status": "ok", "max_context": 32768, "model": name, "images": false,
            "api_key": false, "loaded": true, "service": "strata",
        }))
        .expect("health serializes"),
        models: serde_json::to_vec(&json!({
            "object": "list",
            "data": [{"id": name, "object": "model", "status": {"value": "loaded"}}],
        }))
        .expect("models serialize"),
        name,
        mode: bench.http,
        shape,
        log: log.clone(),
        health_logged: Default::default(),
        request_logged: Default::default(),
    });
    let load = Duration::from_millis(bench.load_ms + jitter(bench.load_jitter_ms));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("runtime: {err}"))?;
    runtime.block_on(async move {
        tokio::time::sleep(load).await;
        let addr = SocketAddr::new(args.host, args.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|err| format!("bind {addr}: {err}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        if let Some(path) = &args.ready_file {
            write_ready_file(path, pid, &state.name, port)
                .map_err(|err| format!("ready file {}: {err}", path.display()))?;
            let ready_ns = realtime_ns();
            log_event(
                log.as_deref(),
                json!({"event": "ready", "pid": pid, "model_name": state.name, "ready_ns": ready_ns}),
            );
        }
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(serve(stream, state.clone()));
                }
                // Out of descriptors or a connection reset before accept: try again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
}

/// CLOCK_REALTIME in nanoseconds.
pub fn realtime_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A pseudo-random value in `0..=max` from the clock and the PID (no RNG crate needed).
fn jitter(max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let mut x = realtime_ns() as u64 ^ (u64::from(std::process::id()) << 32);
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) % (max + 1)
}

fn log_event(path: Option<&Path>, mut event: serde_json::Value) {
    let Some(path) = path else { return };
    let ts = realtime_ns() as f64 / 1e9;
    event["ts"] = json!(ts);
    let mut line = event.to_string();
    line.push('\n');
    // One write in append mode, so several processes can share the file.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

fn write_ready_file(path: &Path, pid: u32, name: &str, port: u16) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".ready-{pid}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(
        json!({"pid": pid, "model_name": name, "port": port})
            .to_string()
            .as_bytes(),
    )?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// One parsed request.
struct Request {
    post: bool,
    path: String,
    /// HTTP/1.1 (else 1.0).
    http11: bool,
    /// The client allows another request on this connection.
    keep_alive: bool,
    body: Vec<u8>,
}

/// Reads one request; `Ok(None)` at a clean EOF between requests.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<Request>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut headers);
        match parsed.parse(buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let mut length = 0usize;
                let mut close = false;
                let mut keep = false;
                for header in parsed.headers.iter() {
                    if header.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(header.value)
                            .ok()
                            .and_then(|v| v.trim().parse().ok())
                            .ok_or_else(|| bad("bad content-length"))?;
                    } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                        return Err(bad("chunked request bodies are not supported"));
                    } else if header.name.eq_ignore_ascii_case("connection") {
                        let value = String::from_utf8_lossy(header.value).to_ascii_lowercase();
                        close |= value.contains("close");
                        keep |= value.contains("keep-alive");
                    }
                }
                if length > MAX_BODY {
                    return Err(bad("body too large"));
                }
                let http11 = parsed.version == Some(1);
                let post = parsed.method == Some("POST");
                let path = parsed.path.unwrap_or("").to_owned();
                let keep_alive = if http11 { !close } else { keep };
                while buf.len() < head_len + length {
                    if read_more(stream, buf).await? == 0 {
                        return Err(bad("body cut short"));
                    }
                }
                let body = buf[head_len..head_len + length].to_vec();
                buf.drain(..head_len + length);
                return Ok(Some(Request {
                    post,
                    path,
                    http11,
                    keep_alive,
                    body,
                }));
            }
            Ok(httparse::Status::Partial) => {
                if buf.len() > MAX_HEAD {
                    return Err(bad("request head too large"));
                }
                if read_more(stream, buf).await? == 0 {
                    return if buf.is_empty() {
                        Ok(None)
                    } else {
                        Err(bad("request cut short"))
                    };
                }
            }
            Err(_) => return Err(bad("malformed request")),
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let request = match read_request(&mut stream, &mut buf).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let arrived_ns = realtime_ns();
        let keep = state.mode == HttpMode::KeepAlive && request.keep_alive;
        let answered = respond(&mut stream, &state, &request, keep).await;
        // Logged after the answer, so the log write is not part of what is measured.
        match (request.post, request.path.split('?').next().unwrap_or("")) {
            (false, "/health") => state.log_first(&state.health_logged, "health", arrived_ns),
            (true, wire::CHAT_PATH) => {
                state.log_first(&state.request_logged, "request", arrived_ns)
            }
            _ => {}
        }
        if answered.is_err() {
            return;
        }
        if !keep {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The status line and headers. `chunked` only with `keep` on an HTTP/1.1 request.
fn head(
    state: &State,
    status: &str,
    content_type: &str,
    length: Option<usize>,
    keep: bool,
) -> Vec<u8> {
    let version = match state.mode {
        HttpMode::KeepAlive => "HTTP/1.1",
        HttpMode::Close => "HTTP/1.0",
    };
    let mut head =
        format!("{version} {status}\r\nServer: bench-upstream\r\nContent-Type: {content_type}\r\n");
    match length {
        Some(length) => head.push_str(&format!("Content-Length: {length}\r\n")),
        None => {
            head.push_str("Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
            if keep {
                head.push_str("Transfer-Encoding: chunked\r\n");
            }
        }
    }
    if !keep {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

async fn send_json(
    stream: &mut TcpStream,
    state: &State,
    status: &str,
    body: &[u8],
    keep: bool,
) -> io::Result<()> {
    let mut out = head(state, status, "application/json", Some(body.len()), keep);
    out.extend_from_slice(body);
    stream.write_all(&out).await
}

async fn respond(
    stream: &mut TcpStream,
    state: &State,
    request: &Request,
    keep: bool,
) -> io::Result<()> {
    let path = request.path.split('?').next().unwrap_or("");
    match (request.post, path) {
        (false, "/health" | "/api/health") => {
            send_json(stream, state, "200 OK", &state.health, keep).await
        }
        (false, "/v1/models" | "/models") => {
            send_json(stream, state, "200 OK", &state.models, keep).await
        }
        (true, wire::CHAT_PATH | "/chat/completions") => {
            let body: ChatBody = match serde_json::from_slice(&request.body) {
                Ok(body) => body,
                Err(_) => {
                    let error = br#"{"error":{"type":"invalid_request_error","message":"invalid JSON body"}}"#;
                    return send_json(stream, state, "400 Bad Request", error, keep).await;
                }
            };
            let shape = body.bench.apply(state.shape);
            if body.stream {
                stream_sse(stream, state, shape, keep && request.http11).await
            } else {
                let json = wire::json_response(&state.name, &shape);
                send_json(stream, state, "200 OK", &json, keep).await
            }
        }
        _ => {
            send_json(
                stream,
                state,
                "404 Not Found",
                br#"{"error":{"message":"not found"}}"#,
                keep,
            )
            .await
        }
    }
}

/// Wraps `frame` as one chunk of a chunked body.
fn chunk(frame: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", frame.len()).into_bytes();
    out.extend_from_slice(frame);
    out.extend_from_slice(b"\r\n");
    out
}

async fn stream_sse(
    stream: &mut TcpStream,
    state: &State,
    shape: Shape,
    chunked: bool,
) -> io::Result<()> {
    let wrap = |frame: Vec<u8>| if chunked { chunk(&frame) } else { frame };
    let delta = wrap(wire::sse_chunk(&state.name, shape.bytes as usize));
    stream
        .write_all(&head(state, "200 OK", "text/event-stream", None, chunked))
        .await?;
    let pace = Duration::from_millis(shape.pace_ms);
    for i in 0..shape.chunks {
        if i > 0 && !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        stream.write_all(&delta).await?;
    }
    let mut tail = wrap(wire::sse_final(&state.name, shape.chunks));
    tail.extend_from_slice(&wrap(wire::SSE_DONE.to_vec()));
    if chunked {
        tail.extend_from_slice(b"0\r\n\r\n");
    }
    stream.write_all(&tail).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn accepts_the_supervisors_argv() {
        let args = parse_args(os(&[
            "-m",
            "serve.server",
            "--engine",
            "strata",
            "--config",
            "/p.json",
            "--host",
            "127.0.0.1",
            "--port",
            "9001",
            "--idle-unload",
            "0",
            "--ready-file",
            "/r.json",
        ]))
        .unwrap();
        assert_eq!(
            args,
            Args {
                profile: "/p.json".into(),
                host: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: 9001,
                ready_file: Some("/r.json".into()),
            }
        );
        assert!(parse_args(os(&["--port", "1"])).is_err());
        assert!(parse_args(os(&["--config", "/p", "--what"])).is_err());
    }

    #[test]
    fn profiles_parse() {
        let profile: Profile = serde_json::from_str(
            r#"{"model_name":"m","fake":{"log":"/l"},"bench":{"http":"1.0","load_ms":5,"chunks":3}}"#,
        )
        .unwrap();
        assert_eq!(profile.bench.http, HttpMode::Close);
        assert_eq!(profile.bench.chunks, Some(3));
        assert!(serde_json::from_str::<Profile>(r#"{"bench":{"htp":"1.0"}}"#).is_err());
        assert!(jitter(10) <= 10);
    }
}
