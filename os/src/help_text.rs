//! Asking a program whether its `--help` lists a flag: no shell, nothing read but standard
//! output, bounded in time and size, and the text dropped once searched (never logged).
//!
//! The supervisor asks its Strata (`python -m serve.server --help`) which readiness contract it
//! supports, and `strata-ctl check-config` asks the same question to say what the supervisor will
//! choose. The help text holds no profile (none is named), so nothing secret is read.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// More help text than this is not read (Strata's is a few KiB).
const MAX_HELP_BYTES: u64 = 1024 * 1024;

/// Runs `command` (stdin and stderr on `/dev/null`, stdout read) and says whether its output
/// contains `flag`; `None` when that could not be found out: it did not start, did not finish
/// within `timeout` (it is killed), or exited non-zero without mentioning the flag.
///
/// Blocking: call it from a blocking thread in async code.
pub fn help_lists_flag(mut command: Command, flag: &str, timeout: Duration) -> Option<bool> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    let (sender, received) = mpsc::channel();
    // The read ends at EOF, when the program exits (or closes its output).
    std::thread::Builder::new()
        .name("help-text".into())
        .spawn(move || {
            let mut text = Vec::new();
            let read = (&mut stdout).take(MAX_HELP_BYTES).read_to_end(&mut text);
            let _ = sender.send(read.map(|_| text));
        })
        .ok()?;
    let text = match received.recv_timeout(timeout) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) | Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    };
    // Bounded too: a program that closed its output but keeps running is killed.
    let status = match wait_bounded(&mut child, timeout) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    };
    let listed = String::from_utf8_lossy(&text).contains(flag);
    // A help that failed (a missing module, say) proves nothing about the flag.
    (listed || status.success()).then_some(listed)
}

fn wait_bounded(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("/bin/sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn the_help_text_decides() {
        let second = Duration::from_secs(10);
        let with = sh("echo 'usage: [--idle-unload S] [--ready-file PATH]'");
        assert_eq!(help_lists_flag(with, "--ready-file", second), Some(true));
        let without = sh("echo 'usage: [--idle-unload S]'");
        assert_eq!(
            help_lists_flag(without, "--ready-file", second),
            Some(false)
        );
    }

    #[test]
    fn a_failed_or_hanging_help_decides_nothing() {
        let second = Duration::from_secs(10);
        let failed = sh("echo 'No module named serve'; exit 1");
        assert_eq!(help_lists_flag(failed, "--ready-file", second), None);
        let missing = Command::new("/nonexistent/python");
        assert_eq!(help_lists_flag(missing, "--ready-file", second), None);
        let hangs = sh("exec sleep 30");
        let started = std::time::Instant::now();
        assert_eq!(
            help_lists_flag(hangs, "--ready-file", Duration::from_millis(200)),
            None
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "killed, not waited for"
        );
    }
}
