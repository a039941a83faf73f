//! The client side of the operator control socket (the spec's "Control the
//! existing daemon"), shared by `status`, `on` and `off`.
//!
//! One connection per command. The client writes one line and then only
//! reads; it never shuts down its write side, because the daemon treats a
//! client that has closed its connection as cancelling. There is no
//! signal handling here on purpose: Ctrl-C kills the process with the
//! default SIGINT action, the kernel closes the socket, and the daemon
//! cancels the wait or load in progress.
//!
//! Output:
//! - `status`: the daemon's one JSON line on stdout.
//! - `on`/`off`: each progress event as `[   6.1s] MESSAGE` on stderr; the
//!   final `done` event's JSON line on stdout and its `message` as the last
//!   stderr line. Exit 0 only for `"ok": true`.
//! - An `{"error":...}` answer: the line on stdout, an explanation on
//!   stderr, exit 1.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use strata_protocol::control::{ControlRequest, ErrorAnswer, ReplyLine};

/// How long `status` waits for its answer. The daemon answers `status` at
/// once (it reports `busy` instead of waiting), so this only catches a
/// wedged daemon; `on` and `off` have no client timeout.
const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

/// The text of an OS error without Rust's ` (os error N)` suffix.
pub fn describe_io(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_owned(),
        None => err.to_string(),
    }
}

/// Connects to the control socket, or explains on stderr why not.
pub fn connect(socket: &Path) -> Result<UnixStream, ExitCode> {
    UnixStream::connect(socket).map_err(|err| {
        let hint = match err.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                " (is the daemon running?)"
            }
            io::ErrorKind::PermissionDenied => " (run this as the daemon's user)",
            _ => "",
        };
        note!(
            "cannot connect to {}: {}{hint}",
            socket.display(),
            describe_io(&err)
        );
        ExitCode::FAILURE
    })
}

fn send_line(stream: &mut UnixStream, socket: &Path, line: &str) -> Result<(), ExitCode> {
    let mut bytes = line.as_bytes().to_vec();
    bytes.push(b'\n');
    stream
        .write_all(&bytes)
        .and_then(|()| stream.flush())
        .map_err(|err| {
            note!(
                "cannot send the request to {}: {}",
                socket.display(),
                describe_io(&err)
            );
            ExitCode::FAILURE
        })
}

/// Prints a line to stdout; a closed stdout is not worth a panic.
fn print_stdout(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Reports an `{"error": ...}` answer and returns the failure exit code.
fn report_error_answer(line: &str, text: &str) -> ExitCode {
    print_stdout(line);
    let hint = if text == ErrorAnswer::UNKNOWN_COMMAND {
        format!(
            " (the running daemon predates this {}; restart the daemon after upgrading)",
            crate::program()
        )
    } else {
        String::new()
    };
    note!("the daemon answered with an error: {text}{hint}");
    ExitCode::FAILURE
}

fn unexpected_reply(line: &str) -> ExitCode {
    let shown: String = line.chars().take(200).collect();
    note!("unexpected reply from the daemon: {shown:?}");
    ExitCode::FAILURE
}

/// Reads one line. `Ok(None)` at end of input before any byte.
fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut bytes = Vec::new();
    if reader.read_until(b'\n', &mut bytes)? == 0 {
        return Ok(None);
    }
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `strata-ctl status SOCKET`.
pub fn status(socket: &Path) -> ExitCode {
    let mut stream = match connect(socket) {
        Ok(stream) => stream,
        Err(code) => return code,
    };
    if let Err(code) = send_line(&mut stream, socket, &ControlRequest::Status.to_line()) {
        return code;
    }
    let _ = stream.set_read_timeout(Some(STATUS_TIMEOUT));
    let mut reader = BufReader::new(&stream);
    let line = match read_line(&mut reader) {
        Ok(Some(line)) => line,
        Ok(None) => {
            note!("the daemon closed the connection without an answer");
            return ExitCode::FAILURE;
        }
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            note!(
                "no answer from {} within {} s",
                socket.display(),
                STATUS_TIMEOUT.as_secs()
            );
            return ExitCode::FAILURE;
        }
        Err(err) => {
            note!("lost the connection to the daemon: {}", describe_io(&err));
            return ExitCode::FAILURE;
        }
    };
    match ReplyLine::parse(&line) {
        Some(ReplyLine {
            error: Some(error), ..
        }) => report_error_answer(&line, &error),
        Some(_) => {
            print_stdout(&line);
            ExitCode::SUCCESS
        }
        None => unexpected_reply(&line),
    }
}

/// The progress line for an event, exactly as the spec shows it:
/// `[   6.1s] MESSAGE`.
pub fn progress_line(elapsed_ms: u64, message: &str) -> String {
    format!("[{:>6.1}s] {}", elapsed_ms as f64 / 1000.0, message)
}

/// `strata-ctl on` and `strata-ctl off`: sends `request` and relays the
/// events until the `done` event. No client timeout.
pub fn operation(socket: &Path, request: &ControlRequest) -> ExitCode {
    let mut stream = match connect(socket) {
        Ok(stream) => stream,
        Err(code) => return code,
    };
    if let Err(code) = send_line(&mut stream, socket, &request.to_line()) {
        return code;
    }
    // `stream` stays open (both directions) until this function returns:
    // closing it is how a client cancels.
    let mut reader = BufReader::new(&stream);
    loop {
        let line = match read_line(&mut reader) {
            Ok(Some(line)) => line,
            Ok(None) => {
                note!("the daemon closed the connection without a final answer");
                return ExitCode::FAILURE;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                note!(
                    "lost the connection to the daemon before a final answer: {}",
                    describe_io(&err)
                );
                return ExitCode::FAILURE;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let Some(reply) = ReplyLine::parse(&line) else {
            return unexpected_reply(&line);
        };
        if let Some(error) = &reply.error {
            return report_error_answer(&line, error);
        }
        let message = reply.message.as_deref().unwrap_or("");
        match reply.event.as_deref() {
            Some("progress") => say!("{}", progress_line(reply.elapsed_ms.unwrap_or(0), message)),
            Some("done") => {
                print_stdout(&line);
                if !message.is_empty() {
                    say!("{message}");
                }
                return if reply.ok == Some(true) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                };
            }
            // Events a newer daemon may add are skipped.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_look_like_the_spec() {
        assert_eq!(
            progress_line(0, "routing enabled"),
            "[   0.0s] routing enabled"
        );
        assert_eq!(
            progress_line(6_100, "unloading model m"),
            "[   6.1s] unloading model m"
        );
        assert_eq!(progress_line(12_549, "x"), "[  12.5s] x");
        assert_eq!(progress_line(123_456, "x"), "[ 123.5s] x");
        assert_eq!(progress_line(1_234_567, "x"), "[1234.6s] x");
    }

    #[test]
    fn os_errors_read_like_strerror() {
        let err = io::Error::from_raw_os_error(nix::libc::ENOENT);
        assert_eq!(describe_io(&err), "No such file or directory");
    }
}
