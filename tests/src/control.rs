//! [`ControlClient`]: the operator control socket, blocking.
//!
//! One request per connection: the client sends one line and reads JSON lines until EOF or a
//! `{"event":"done",...}` line. [`ControlClient::request`] does it in one call (half-closing
//! its sending side after the line, like a typical client, which the daemon must not take for
//! a hang-up); [`ControlClient::open`] returns a [`ControlSession`] that keeps the connection
//! open so a test can read events one by one and drop the connection mid-operation.
//!
//! Every read is bounded ([`DEADLINE`] unless given): a hung daemon fails the test instead of
//! hanging it.
//!
//! The lines come back as JSON from the low-level calls ([`ControlClient::request`],
//! [`ControlSession::next_event`]), for the tests of the lines themselves; the operation
//! calls read them as the typed documents: [`Status`] ([`parse_status`]), and an
//! operation's events as [`Progress`] and [`Done`] ([`OpReply`], [`parse_done`]).

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use strata_protocol::control::{ControlEvent, Done, STATUS_FIELDS, Status};

use crate::document::read_exact;
use crate::poll::DEADLINE;

/// A client of one control socket.
#[derive(Debug, Clone)]
pub struct ControlClient {
    path: PathBuf,
    timeout: Duration,
}

impl ControlClient {
    /// A client of the socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> ControlClient {
        ControlClient {
            path: path.into(),
            timeout: DEADLINE,
        }
    }

    /// The same client with another bound on whole requests.
    pub fn with_timeout(mut self, timeout: Duration) -> ControlClient {
        self.timeout = timeout;
        self
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `line` (a newline is added), half-closes, and returns every JSON line received
    /// until EOF or a `done` event. Panics on a connection error, a non-JSON line or timeout.
    pub fn request(&self, line: &str) -> Vec<Value> {
        self.request_raw(format!("{line}\n").as_bytes())
    }

    /// Like [`ControlClient::request`], sending `bytes` as they are. A write error (the daemon
    /// closed early, e.g. on an over-long line) is ignored; the reply is read anyway.
    pub fn request_raw(&self, bytes: &[u8]) -> Vec<Value> {
        let mut session = self.open_raw(bytes);
        session.half_close();
        session.read_to_end(self.timeout)
    }

    /// Like [`ControlClient::request_raw`], but returns the connection error instead of
    /// panicking (used to wait for a daemon to start serving).
    pub fn try_request(&self, line: &str) -> std::io::Result<Vec<Value>> {
        let mut stream = UnixStream::connect(&self.path)?;
        stream.write_all(format!("{line}\n").as_bytes())?;
        stream.shutdown(Shutdown::Write)?;
        let mut session = ControlSession::new(stream);
        Ok(session.read_to_end(self.timeout))
    }

    /// Bare `status`: exactly one line, read as the typed document (see [`parse_status`]).
    pub fn status(&self) -> Status {
        parse_status(&self.status_json())
    }

    /// Bare `status` as its raw JSON line, for the tests of the document's JSON itself.
    pub fn status_json(&self) -> Value {
        let mut lines = self.request("status");
        assert_eq!(lines.len(), 1, "status must answer one line: {lines:?}");
        lines.remove(0)
    }

    /// `{"cmd":"on","model":MODEL}`, to completion.
    pub fn on(&self, model: Option<&str>) -> OpReply {
        OpReply::from_lines(self.request(&on_line(model)))
    }

    /// `{"cmd":"off","now":NOW}`, to completion.
    pub fn off(&self, now: bool) -> OpReply {
        OpReply::from_lines(self.request(&off_line(now)))
    }

    /// Connects and sends `line` (plus a newline), keeping the connection open.
    pub fn open(&self, line: &str) -> ControlSession {
        self.open_raw(format!("{line}\n").as_bytes())
    }

    /// Connects and sends `bytes`, keeping the connection open.
    pub fn open_raw(&self, bytes: &[u8]) -> ControlSession {
        let mut stream = UnixStream::connect(&self.path)
            .unwrap_or_else(|err| panic!("connect to {}: {err}", self.path.display()));
        if let Err(err) = stream.write_all(bytes) {
            assert!(
                matches!(
                    err.kind(),
                    ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
                ),
                "write to {}: {err}",
                self.path.display()
            );
        }
        ControlSession::new(stream)
    }
}

/// A status line (or the status fields of a `done`) as the typed [`Status`]. Its keys must be
/// exactly [`STATUS_FIELDS`] (plus `event`, `ok` and `message` in a `done`): serde would
/// read a missing optional field as `None`, and a test would then compare against `None`
/// without noticing.
pub fn parse_status(line: &Value) -> Status {
    let object = line
        .as_object()
        .unwrap_or_else(|| panic!("a status line is an object: {line}"));
    let mut keys: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|key| !["event", "ok", "message"].contains(key))
        .collect();
    keys.sort_unstable();
    let mut expected = STATUS_FIELDS;
    expected.sort_unstable();
    assert_eq!(keys, expected, "the status keys of {line}");
    serde_json::from_value(line.clone())
        .unwrap_or_else(|err| panic!("not a status document ({err}): {line}"))
}

/// The backend's PID in `status`; panics (showing the status) when no backend runs.
pub fn child_pid(status: &Status) -> u32 {
    status
        .child_pid
        .unwrap_or_else(|| panic!("no child_pid in {status:?}"))
}

/// The line of `{"cmd":"on","model":MODEL}`.
pub fn on_line(model: Option<&str>) -> String {
    json!({"cmd": "on", "model": model}).to_string()
}

/// The line of `{"cmd":"off","now":NOW}`.
pub fn off_line(now: bool) -> String {
    json!({"cmd": "off", "now": now}).to_string()
}

/// An open control connection.
#[derive(Debug)]
pub struct ControlSession {
    reader: BufReader<UnixStream>,
    partial: Vec<u8>,
    events: Vec<Value>,
    eof: bool,
}

impl ControlSession {
    fn new(stream: UnixStream) -> ControlSession {
        ControlSession {
            reader: BufReader::new(stream),
            partial: Vec::new(),
            events: Vec::new(),
            eof: false,
        }
    }

    /// Shuts down the sending side (the daemon sees end of input, not a hang-up).
    pub fn half_close(&mut self) {
        let _ = self.reader.get_ref().shutdown(Shutdown::Write);
    }

    /// Every line received so far.
    pub fn events(&self) -> &[Value] {
        &self.events
    }

    /// Whether the daemon closed the connection.
    pub fn is_closed(&self) -> bool {
        self.eof
    }

    /// The next JSON line, or `None` on EOF or when `timeout` passes first.
    pub fn next_event(&mut self, timeout: Duration) -> Option<Value> {
        if self.eof {
            return None;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .expect("set a read timeout");
            // Bytes read before a timeout stay in `partial`, so no line is ever split.
            match self.reader.read_until(b'\n', &mut self.partial) {
                Ok(0) => {
                    self.eof = true;
                    assert!(
                        self.partial.is_empty(),
                        "connection closed inside a line: {:?}",
                        String::from_utf8_lossy(&self.partial)
                    );
                    return None;
                }
                Ok(_) if self.partial.ends_with(b"\n") => {
                    let line = std::mem::take(&mut self.partial);
                    let value: Value = serde_json::from_slice(&line).unwrap_or_else(|err| {
                        panic!(
                            "control line is not JSON ({err}): {:?}",
                            String::from_utf8_lossy(&line)
                        )
                    });
                    self.events.push(value.clone());
                    return Some(value);
                }
                Ok(_) => continue,
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue;
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) if err.kind() == ErrorKind::ConnectionReset => {
                    self.eof = true;
                    return None;
                }
                Err(err) => panic!("control socket read failed: {err}"),
            }
        }
    }

    /// Reads events until one matches `pred` (returned); panics with `what` on EOF or timeout.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left) {
                Some(event) if pred(&event) => return event,
                Some(_) => {}
                None => panic!(
                    "{} while waiting for {what}; received so far: {:#?}",
                    if self.eof {
                        "connection closed"
                    } else {
                        "timed out"
                    },
                    self.events
                ),
            }
        }
    }

    /// Reads a progress event whose message contains `text`.
    pub fn wait_progress(&mut self, timeout: Duration, text: &str) -> Progress {
        let event = self.wait_for(timeout, &format!("progress {text:?}"), |event| {
            read_progress(event).is_some_and(|progress| progress.message.contains(text))
        });
        read_progress(&event).expect("matched a progress event")
    }

    /// Reads until EOF or a `done` event; returns every line of the connection.
    pub fn read_to_end(&mut self, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        while !self.eof && !self.events.iter().any(is_done) {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.next_event(left).is_none() && !self.eof {
                panic!(
                    "timed out after {timeout:?} waiting for the end of a control reply; received: {:#?}",
                    self.events
                );
            }
        }
        self.events.clone()
    }

    /// Reads to the `done` event and checks the operation's shape (see [`OpReply`]).
    pub fn wait_done(&mut self, timeout: Duration) -> OpReply {
        OpReply::from_lines(self.read_to_end(timeout))
    }

    /// Asserts that no line arrives within `window` (a bounded negative check).
    pub fn expect_silence(&mut self, window: Duration, why: &str) {
        if let Some(event) = self.next_event(window) {
            panic!("expected no control event ({why}), got {event}");
        }
        assert!(!self.eof, "control connection closed ({why})");
    }
}

fn is_done(event: &Value) -> bool {
    event["event"] == "done"
}

/// A line of an `on`/`off` operation read exactly as the typed [`ControlEvent`]: its
/// [`Progress`], or `None` for the `done`.
fn read_progress(line: &Value) -> Option<Progress> {
    match read_exact("ControlEvent", line) {
        ControlEvent::Progress {
            op,
            phase,
            message,
            elapsed_ms,
        } => Some(Progress {
            op,
            phase,
            message,
            elapsed_ms,
        }),
        ControlEvent::Done(_) => None,
    }
}

/// One progress event of an operation: the fields of [`ControlEvent::Progress`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// `on` or `off`.
    pub op: String,
    /// The step's machine-readable name (`routing`, `starting`, ...).
    pub phase: String,
    pub message: String,
    pub elapsed_ms: u64,
}

/// The `done` line of an operation read exactly as the typed [`Done`] (its `ok`, `message`
/// and status fields); panics if the line is anything else.
pub fn parse_done(line: &Value) -> Done {
    match read_exact("ControlEvent", line) {
        ControlEvent::Done(done) => done,
        ControlEvent::Progress { .. } => panic!("a progress event, not a done: {line}"),
    }
}

/// The reply to an `on`/`off` operation: progress events, then exactly one `done`, each line
/// read exactly as the typed [`ControlEvent`].
#[derive(Debug, Clone)]
pub struct OpReply {
    /// Every line as received, for the tests of the lines' JSON itself.
    pub lines: Vec<Value>,
    pub progress: Vec<Progress>,
    pub done: Done,
}

impl OpReply {
    /// Checks the protocol shape: only `progress` events, then exactly one `done`, last.
    pub fn from_lines(lines: Vec<Value>) -> OpReply {
        let dones = lines.iter().filter(|line| is_done(line)).count();
        assert_eq!(dones, 1, "exactly one done event expected: {lines:#?}");
        let (last, before) = lines.split_last().expect("one done line");
        assert!(is_done(last), "done must be the last event: {lines:#?}");
        let progress = before
            .iter()
            .map(|line| read_progress(line).unwrap_or_else(|| panic!("unexpected event: {line}")))
            .collect();
        let done = parse_done(last);
        OpReply {
            progress,
            done,
            lines,
        }
    }

    /// The status fields of the done event.
    pub fn status(&self) -> Status {
        self.done.status.clone()
    }

    /// The done event's `ok`.
    pub fn ok(&self) -> bool {
        self.done.ok
    }

    /// The done event's `message`.
    pub fn message(&self) -> &str {
        &self.done.message
    }

    /// The progress messages, in order.
    pub fn messages(&self) -> Vec<&str> {
        self.progress
            .iter()
            .map(|event| event.message.as_str())
            .collect()
    }

    /// The progress phases, in order.
    pub fn phases(&self) -> Vec<&str> {
        self.progress
            .iter()
            .map(|event| event.phase.as_str())
            .collect()
    }

    /// Panics (with everything received) unless the operation succeeded.
    pub fn assert_ok(&self) -> &OpReply {
        assert!(self.ok(), "operation failed: {self:#?}");
        self
    }

    /// Panics unless the operation failed.
    pub fn assert_failed(&self) -> &OpReply {
        assert!(!self.ok(), "operation unexpectedly succeeded: {self:#?}");
        self
    }
}
