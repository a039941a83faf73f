//! `strata-ctl requests URL [--after N] [--follow]`: read accounting
//! records from a proxy's `GET /requests` and print them as JSON lines.
//!
//! Pages through `/requests?after=CURSOR&limit=1000` from `--after`
//! (default 0), printing each record exactly as the proxy sent it (the same
//! bytes as the JSONL line) and advancing the cursor to `next_seq`, until a
//! page is empty. `--follow` keeps polling every second instead.
//!
//! The first page's `instance_id` is remembered: if it changes, the router
//! restarted (sequences start again at 1), so a note goes to stderr and
//! reading restarts from `after=0`. A page with `dropped > 0` means records
//! were evicted from the ring before they could be read: a warning names
//! how many (the JSONL files may still have them).
//!
//! Errors (connection refused, a non-200 answer, an unexpected document)
//! print one line to stderr and exit 1; with `--follow` they print a note
//! and the command keeps retrying.
//!
//! The HTTP client is a minimal HTTP/1.1 one on a std `TcpStream` (one
//! request per connection, `Connection: close`): the proxy is on loopback
//! or behind an SSH tunnel, and only plain `http://` is supported.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use strata_protocol::api::ErrorBody;
use strata_protocol::page::{MAX_PAGE_LIMIT, RecordsPage};

/// Records asked for per page: the endpoint's maximum.
const PAGE_LIMIT: u32 = MAX_PAGE_LIMIT;
/// How often `--follow` polls once it has caught up, and retries after an
/// error.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on connecting to the proxy.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on each read or write of one exchange.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer accepted (a full page is about 1 MB).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the proxy, e.g. http://127.0.0.1:8088
    pub url: String,
    /// Exclusive cursor: only records with a greater sequence (default 0:
    /// every retained record)
    #[arg(long)]
    pub after: Option<u64>,
    /// Keep polling for new records (every second) until interrupted
    #[arg(long)]
    pub follow: bool,
}

pub fn run(args: Args) -> ExitCode {
    let base = match BaseUrl::parse(&args.url) {
        Ok(base) => base,
        Err(message) => {
            note!("requests: invalid URL {:?}: {message}", args.url);
            return ExitCode::FAILURE;
        }
    };
    let mut reader = Reader {
        base,
        cursor: args.after.unwrap_or(0),
        instance: None,
    };
    let mut failing: Option<String> = None;
    loop {
        match reader.step() {
            Ok(Step::Printed) => {
                if failing.take().is_some() {
                    note!("requests: {} answers again", reader.base.url);
                }
            }
            Ok(Step::Empty) => {
                if failing.take().is_some() {
                    note!("requests: {} answers again", reader.base.url);
                }
                if !args.follow {
                    return ExitCode::SUCCESS;
                }
                std::thread::sleep(POLL_INTERVAL);
            }
            Ok(Step::OutputClosed) => return ExitCode::SUCCESS,
            Err(Failure::Output(err)) => {
                note!("requests: cannot write to stdout: {err}");
                return ExitCode::FAILURE;
            }
            Err(Failure::Fetch(message)) => {
                if !args.follow {
                    note!("requests: {message}");
                    return ExitCode::FAILURE;
                }
                // One note per distinct failure, not one per retry.
                if failing.as_deref() != Some(message.as_str()) {
                    note!(
                        "requests: {message}; retrying every {}s",
                        POLL_INTERVAL.as_secs()
                    );
                    failing = Some(message);
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
    }
}

/// What one page did.
enum Step {
    /// Records were printed; ask again at once.
    Printed,
    /// Nothing new after the cursor.
    Empty,
    /// stdout was closed (`| head`): stop quietly.
    OutputClosed,
}

enum Failure {
    /// The proxy could not be read (the message names the URL).
    Fetch(String),
    /// stdout failed other than by being closed.
    Output(io::Error),
}

/// The cursor state of one reader.
struct Reader {
    base: BaseUrl,
    cursor: u64,
    /// The `instance_id` the cursor belongs to, once a page was read.
    instance: Option<String>,
}

impl Reader {
    /// Reads and prints one page.
    fn step(&mut self) -> Result<Step, Failure> {
        let target = format!(
            "{}/requests?after={}&limit={PAGE_LIMIT}",
            self.base.path, self.cursor
        );
        let shown = format!("{}{target}", self.base.origin());
        let body = get(&self.base, &target)
            .map_err(|err| Failure::Fetch(format!("GET {shown}: {err}")))?;
        let page = std::str::from_utf8(&body)
            .map_err(|_| "the body is not UTF-8".to_owned())
            .and_then(|text| RecordsPage::from_json(text).map_err(|err| err.to_string()))
            .map_err(|err| Failure::Fetch(format!("GET {shown}: unexpected answer: {err}")))?;

        match &self.instance {
            None => self.instance = Some(page.instance_id.clone()),
            Some(known) if *known != page.instance_id => {
                note!(
                    "requests: the router restarted (instance {known} is now {}); \
                     its sequences start again, reading from after=0",
                    page.instance_id
                );
                self.instance = Some(page.instance_id);
                self.cursor = 0;
                // This page answered the old cursor in the new instance: ask again.
                return Ok(Step::Printed);
            }
            Some(_) => {}
        }
        if page.dropped > 0 {
            note!(
                "requests: warning: {} record(s) after seq {} were evicted from \
                 the ring before they could be read (oldest retained seq: {}); the JSONL \
                 files (request_log_path) may still have them",
                page.dropped,
                self.cursor,
                page.oldest_seq
                    .map_or_else(|| "none".to_owned(), |seq| seq.to_string())
            );
        }
        if page.records.is_empty() {
            self.cursor = page.next_seq;
            return Ok(Step::Empty);
        }
        let mut text = String::with_capacity(page.records.iter().map(|r| r.len() + 1).sum());
        for record in &page.records {
            text.push_str(record);
            text.push('\n');
        }
        let mut stdout = io::stdout().lock();
        if let Err(err) = stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
        {
            return if err.kind() == io::ErrorKind::BrokenPipe {
                Ok(Step::OutputClosed)
            } else {
                Err(Failure::Output(err))
            };
        }
        self.cursor = page.next_seq;
        Ok(Step::Printed)
    }
}

/// `http://HOST[:PORT][/PREFIX]`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BaseUrl {
    /// As given, for messages.
    url: String,
    /// `HOST[:PORT]` as given (the `Host` header).
    authority: String,
    host: String,
    port: u16,
    /// The path prefix without a trailing slash (usually empty).
    pub(crate) path: String,
}

impl BaseUrl {
    pub(crate) fn parse(url: &str) -> Result<BaseUrl, String> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "only http:// is supported, not {scheme}:// (use an SSH tunnel for a remote router)"
                ));
            }
            None => url,
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if path.contains(['?', '#']) {
            return Err("the base URL cannot have a query or fragment".into());
        }
        if authority.is_empty() || authority.contains('@') {
            return Err("expected http://HOST:PORT".into());
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| "unclosed [ in the host".to_owned())?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| "expected :PORT after ]".to_owned())?,
                    ),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        let port = match port {
            None => 80,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| format!("invalid port {port:?}"))?,
        };
        Ok(BaseUrl {
            url: url.to_owned(),
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// `http://AUTHORITY`.
    fn origin(&self) -> String {
        format!("http://{}", self.authority)
    }
}

/// `GET TARGET` on one connection; the body of a 200 answer.
pub(crate) fn get(base: &BaseUrl, target: &str) -> Result<Vec<u8>, String> {
    let (status, body) = get_with_status(base, target)?;
    if status != 200 {
        return Err(format!("HTTP {status}{}", error_detail(&body)));
    }
    Ok(body)
}

/// `GET target`, whatever the status: `/health` says the same document
/// with 200 and with 503.
pub(crate) fn get_with_status(base: &BaseUrl, target: &str) -> Result<(u16, Vec<u8>), String> {
    let addrs: Vec<_> = (base.host.as_str(), base.port)
        .to_socket_addrs()
        .map_err(|err| format!("cannot resolve {}: {err}", base.host))?
        .collect();
    let mut last_error = format!("{} resolves to no address", base.host);
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(err) => last_error = format!("cannot connect to {addr}: {err}"),
        }
    }
    let mut stream = stream.ok_or(last_error)?;
    let io = |err: io::Error| format!("connection failed: {err}");
    stream.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: strata-ctl/{}\r\nConnection: close\r\n\r\n",
        base.authority,
        env!("CARGO_PKG_VERSION")
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut response = Vec::new();
    (&mut stream)
        .take(MAX_RESPONSE_BYTES as u64 + 1)
        .read_to_end(&mut response)
        .map_err(io)?;
    if response.len() > MAX_RESPONSE_BYTES {
        return Err(format!("answer larger than {MAX_RESPONSE_BYTES} bytes"));
    }
    parse_response(&response)
}

/// `: MESSAGE` from an OpenAI-style error body, if it is one.
fn error_detail(body: &[u8]) -> String {
    serde_json::from_slice::<ErrorBody>(body)
        .map(|doc| format!(": {}", doc.error.message))
        .unwrap_or_default()
}

/// The status and (de-chunked) body of a complete HTTP/1.x response.
fn parse_response(response: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            if response.is_empty() {
                "the connection closed without an answer".to_owned()
            } else {
                "incomplete HTTP answer".to_owned()
            }
        })?;
    let head = std::str::from_utf8(&response[..head_end])
        .map_err(|_| "malformed HTTP header".to_owned())?;
    let body = &response[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| format!("not an HTTP answer: {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| "malformed Content-Length".to_owned())?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(length) = length {
        body.get(..length)
            .ok_or_else(|| "the answer ended early".to_owned())?
            .to_vec()
    } else {
        body.to_vec()
    };
    Ok((status, body))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let early = || "the chunked answer ended early".to_owned();
    let mut body = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(early)?;
        let size_text = std::str::from_utf8(&data[..line_end]).map_err(|_| early())?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| "malformed chunk size".to_owned())?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = data.get(..size).ok_or_else(early)?;
        body.extend_from_slice(chunk);
        data = data.get(size + 2..).ok_or_else(early)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = BaseUrl::parse("http://127.0.0.1:8088").unwrap();
        assert_eq!(
            (
                url.host.as_str(),
                url.port,
                url.path.as_str(),
                url.authority.as_str()
            ),
            ("127.0.0.1", 8088, "", "127.0.0.1:8088")
        );
        let url = BaseUrl::parse("127.0.0.1:8088/").unwrap();
        assert_eq!((url.port, url.path.as_str()), (8088, ""));
        let url = BaseUrl::parse("HTTP://localhost/router/").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("localhost", 80, "/router")
        );
        let url = BaseUrl::parse("http://[::1]:9000").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 9000));
        for bad in [
            "https://127.0.0.1:8088",
            "http://",
            "http://:80",
            "http://host:0",
            "http://host:x",
            "http://host:99999",
            "http://u@host:1",
            "http://host:1/?after=3",
            "http://[::1",
        ] {
            assert!(BaseUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn responses() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nabcdEXTRA";
        assert_eq!(parse_response(plain).unwrap(), (200, b"abcd".to_vec()));
        let chunked =
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), (503, b"abcde".to_vec()));
        let until_eof = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(parse_response(until_eof).unwrap().1, b"all of it");
        assert!(parse_response(b"").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort").is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert_eq!(
            error_detail(
                br#"{"error":{"message":"after must be a non-negative integer","type":"invalid_request_error","code":"invalid_cursor"}}"#
            ),
            ": after must be a non-negative integer"
        );
        assert_eq!(error_detail(b"<html>"), "");
    }
}
