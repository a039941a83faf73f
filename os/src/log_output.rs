//! Where a daemon's log lines go: stderr, and under systemd each line led by its level as a
//! journald priority, so that `journalctl -p warning` lists warnings and errors.
//!
//! systemd reads a `<N>` at the start of each line its stream to the journal receives as the
//! line's syslog priority (`SyslogLevelPrefix=`, on by default; sd-daemon(3)). The prefix is
//! chosen over a native journal client (the `tracing-journald` crate) because it keeps one
//! output: the journal shows the very line stderr shows, fields included (a native client files
//! the fields apart from `MESSAGE`, so plain `journalctl -u` would lose them), nothing depends
//! on the journal's socket being there, and no dependency is added. Prefixes are written only
//! when `JOURNAL_STREAM` names the stream stderr is connected to, as systemd documents, so a
//! terminal or a file never sees them.

use std::ffi::OsStr;
use std::io::{self, IsTerminal, Write};

use tracing::{Level, Metadata};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The variable naming the log level (an `EnvFilter` directive such as `debug` or
/// `strata_supervisor=debug,info`); `info` without it.
const LOG_LEVEL_VAR: &str = "STRATA_LOG";

/// Logs to stderr at the level [`LOG_LEVEL_VAR`] names, with colours only on a terminal and
/// journald priorities only when stderr is the journal's stream.
pub(crate) fn init_logging() {
    let filter = EnvFilter::try_from_env(LOG_LEVEL_VAR).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_ansi(io::stderr().is_terminal())
        .with_env_filter(filter);
    if stderr_is_journal_stream(std::env::var_os("JOURNAL_STREAM").as_deref()) {
        builder.with_writer(Prioritized(io::stderr)).init();
    } else {
        builder.with_writer(io::stderr).init();
    }
}

/// Whether `journal_stream` (`JOURNAL_STREAM`, `DEVICE:INODE` in decimal) is the stream stderr
/// is connected to: systemd sets it for a service's output, and a child that inherits the
/// variable with stderr redirected elsewhere must not prefix its lines.
fn stderr_is_journal_stream(journal_stream: Option<&OsStr>) -> bool {
    let Some((device, inode)) = journal_stream.and_then(parse_journal_stream) else {
        return false;
    };
    nix::sys::stat::fstat(io::stderr())
        .is_ok_and(|stat| stat.st_dev == device && stat.st_ino == inode)
}

/// `DEVICE:INODE` as `JOURNAL_STREAM` holds them.
fn parse_journal_stream(value: &OsStr) -> Option<(u64, u64)> {
    let (device, inode) = value.to_str()?.split_once(':')?;
    Some((device.parse().ok()?, inode.parse().ok()?))
}

/// The syslog priority journald files an event of `level` under: `err` (3), `warning` (4),
/// `info` (6) and `debug` (7) for both DEBUG and TRACE.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// A [`MakeWriter`] whose writers lead every line of an event with the event's priority.
struct Prioritized<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Prioritized<M> {
    type Writer = PrioritizedEvent<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        PrioritizedEvent::new(priority(&Level::INFO), self.0.make_writer())
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        PrioritizedEvent::new(priority(meta.level()), self.0.make_writer_for(meta))
    }
}

/// One event's text, gathered and written with a prefix per line when dropped (the formatter
/// makes one writer per event), so that a multi-line message keeps its priority on every line
/// and each line reaches the output in one write.
struct PrioritizedEvent<W: Write> {
    priority: u8,
    text: Vec<u8>,
    out: W,
}

impl<W: Write> PrioritizedEvent<W> {
    fn new(priority: u8, out: W) -> Self {
        PrioritizedEvent {
            priority,
            text: Vec::new(),
            out,
        }
    }
}

impl<W: Write> Write for PrioritizedEvent<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for PrioritizedEvent<W> {
    fn drop(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let lines = prefix_lines(self.priority, &self.text);
        // Logging has nowhere to report its own failure.
        let _ = self.out.write_all(&lines).and_then(|()| self.out.flush());
    }
}

/// `text` with `<PRIORITY>` before each of its lines.
fn prefix_lines(priority: u8, text: &[u8]) -> Vec<u8> {
    let prefix = format!("<{priority}>");
    let mut out = Vec::with_capacity(text.len() + prefix.len());
    for line in text.split_inclusive(|&byte| byte == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A shared buffer the formatter writes into.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    #[test]
    fn each_event_is_led_by_its_levels_journald_priority() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(Level::TRACE)
            .with_writer(Prioritized(captured.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!("an error");
            tracing::warn!(model = "flash-a", "a warning");
            tracing::info!("an info\nsecond line");
            tracing::debug!("a debug");
            tracing::trace!("a trace");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        let expect = [
            ("<3>", "an error"),
            ("<4>", "a warning model=\"flash-a\""),
            ("<6>", "an info"),
            ("<6>", "second line"),
            ("<7>", "a debug"),
            ("<7>", "a trace"),
        ];
        for (line, (prefix, ends)) in lines.iter().zip(expect) {
            assert!(
                line.starts_with(prefix),
                "{line:?} should start with {prefix}"
            );
            assert!(line.ends_with(ends), "{line:?} should end with {ends:?}");
        }
    }

    #[test]
    fn every_line_gets_the_prefix_and_a_last_line_without_newline_too() {
        assert_eq!(prefix_lines(4, b"a\nb\n"), b"<4>a\n<4>b\n");
        assert_eq!(prefix_lines(3, b"a\nb"), b"<3>a\n<3>b");
        assert_eq!(prefix_lines(6, b""), b"");
    }

    #[test]
    fn journal_stream_is_device_colon_inode() {
        assert_eq!(
            parse_journal_stream(OsStr::new("8:12345")),
            Some((8, 12345))
        );
        assert_eq!(parse_journal_stream(OsStr::new("8")), None);
        assert_eq!(parse_journal_stream(OsStr::new("x:1")), None);
        assert!(!stderr_is_journal_stream(None));
        assert!(!stderr_is_journal_stream(Some(OsStr::new("0:0"))));
    }

    #[test]
    fn stderr_matching_journal_stream_is_recognised() {
        let stat = nix::sys::stat::fstat(io::stderr()).unwrap();
        let value = format!("{}:{}", stat.st_dev, stat.st_ino);
        assert!(stderr_is_journal_stream(Some(OsStr::new(&value))));
    }
}
