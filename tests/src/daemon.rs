//! [`Daemon`]: a spawned binary, guarded.
//!
//! stdout and stderr go to files in the test directory (`NAME.stdout`, `NAME.stderr`), so
//! nothing blocks on a full pipe and the output is there to read. When a test fails, the guard
//! prints the daemon's stderr as it is dropped. Dropping a still-running daemon SIGKILLs it
//! by PID and reaps it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::poll::POLL_INTERVAL;
use crate::procs;

/// A running (or exited) child process of the test.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    child: Child,
    status: Option<ExitStatus>,
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
            name: name.to_owned(),
            child,
            status: None,
            stdout_path,
            stderr_path,
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `signal` to the process (by PID; nothing if it has exited and been reaped).
    pub fn kill(&mut self, signal: Signal) {
        if self.try_exit().is_none() {
            procs::signal(self.pid(), signal);
        }
    }

    /// The exit status if the process has exited (reaping it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .unwrap_or_else(|err| panic!("wait for {}: {err}", self.name));
        }
        self.status
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Waits (bounded) for the process to exit; panics with its stderr on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} (pid {}) did not exit within {timeout:?}\n{}",
                    self.name,
                    self.pid(),
                    self.stderr_report()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
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
            self.name,
            self.stderr_path.display(),
            self.stderr()
        )
    }

    /// SIGKILLs the process if it is still running, and reaps it.
    pub fn kill_and_reap(&mut self) {
        if self.try_exit().is_none() {
            procs::signal(self.pid(), Signal::SIGKILL);
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill_and_reap();
        if std::thread::panicking() {
            eprintln!("{}", self.stderr_report());
        }
    }
}
