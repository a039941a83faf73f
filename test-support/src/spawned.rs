//! [`Daemon`]: a spawned binary, guarded, with its output in files.
//!
//! stdout and stderr go to files in the test directory (`NAME.stdout`, `NAME.stderr`), so
//! nothing blocks on a full pipe and the output is there to read. When a test fails, the guard
//! prints the daemon's stderr as it is dropped. Dropping a still-running daemon SIGKILLs it
//! by PID and reaps it (a [`Running`] with [`Running::kill_on_drop`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::running::Running;

/// A running (or exited) child process of the test.
#[derive(Debug)]
pub struct Daemon {
    process: Running,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
}

impl Daemon {
    /// Spawns `command` with stdin from `/dev/null` and its output captured in `log_dir`
    /// (`NAME.stdout`, `NAME.stderr`; `name` must be unique within the directory).
    pub fn spawn(name: &str, mut command: Command, log_dir: &Path) -> Daemon {
        let stdout_path = log_dir.join(format!("{name}.stdout"));
        let stderr_path = log_dir.join(format!("{name}.stderr"));
        let create = |path: &Path| {
            File::create(path).unwrap_or_else(|err| panic!("create {}: {err}", path.display()))
        };
        command
            .stdin(Stdio::null())
            .stdout(create(&stdout_path))
            .stderr(create(&stderr_path));
        let child = command
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {name} ({command:?}): {err}"));
        Daemon {
            process: Running::new(name, child).kill_on_drop(),
            stdout_path,
            stderr_path,
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        self.process.name()
    }

    /// Sends `signal` to the process (by PID; nothing if it has exited and been reaped).
    pub fn kill(&mut self, signal: Signal) {
        self.process.signal(signal);
    }

    /// The exit status if the process has exited (reaping it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.process.try_exit()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Waits (bounded) for the process to exit; panics with its stderr on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.process.wait_exit_within(timeout) {
            return status;
        }
        panic!(
            "{} (pid {}) did not exit within {timeout:?}\n{}",
            self.name(),
            self.pid(),
            self.stderr_report()
        );
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Everything written to stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// The stderr file's path.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// stderr with a header, for failure messages.
    pub fn stderr_report(&self) -> String {
        format!(
            "--- {} stderr ({}) ---\n{}",
            self.name(),
            self.stderr_path.display(),
            self.stderr()
        )
    }

    /// SIGKILLs the process if it is still running, and reaps it.
    pub fn kill_and_reap(&mut self) {
        self.process.kill_and_reap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Killed first, so the report holds everything the process wrote.
        self.kill_and_reap();
        if std::thread::panicking() {
            eprintln!("{}", self.stderr_report());
        }
    }
}
