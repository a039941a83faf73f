//! [`Running`]: a child process of the test that is stopped by PID and reaped when the guard is
//! dropped, so a failing test leaves no process behind.
//!
//! Two ways to stop it on drop:
//! - the default, SIGTERM and then SIGKILL after [`STOP_GRACE`]: for a launcher whose own
//!   children (a supervisor, a proxy) only go away if it shuts down cleanly;
//! - [`Running::kill_on_drop`], SIGKILL at once: for a daemon whose children die with it
//!   anyway (their parent-death signal), where a quick teardown is all that matters.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::poll::POLL_INTERVAL;
use crate::procs;

/// How long a dropped [`Running`] waits after SIGTERM before it SIGKILLs.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// A spawned child process, stopped by PID and reaped on drop.
#[derive(Debug)]
pub struct Running {
    name: String,
    child: Child,
    /// Whether drop skips the SIGTERM.
    kill_on_drop: bool,
}

impl Running {
    /// Guards `child`; `name` appears in failure messages. Dropped while running, the process
    /// gets SIGTERM, then SIGKILL if it has not exited after [`STOP_GRACE`].
    pub fn new(name: impl Into<String>, child: Child) -> Running {
        Running {
            name: name.into(),
            child,
            kill_on_drop: false,
        }
    }

    /// The same guard, but drop SIGKILLs at once.
    pub fn kill_on_drop(mut self) -> Running {
        self.kill_on_drop = true;
        self
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The name given at spawn.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child, for its pipes.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The exit status if the process has exited (reaping it). `Child` keeps the status once
    /// reaped, so this can be asked again.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|err| panic!("wait for {}: {err}", self.name))
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Sends `signal` to the process by PID (nothing once it has exited and been reaped, when
    /// the PID may belong to someone else).
    pub fn signal(&mut self, signal: Signal) {
        if self.is_running() {
            procs::signal(self.pid(), signal);
        }
    }

    /// Waits at most `timeout` for the process to exit.
    pub fn wait_exit_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.poll_exit(timeout)
            .unwrap_or_else(|err| panic!("wait for {}: {err}", self.name))
    }

    /// Waits at most `timeout` for the process to exit; on timeout SIGKILLs it and panics.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.wait_exit_within(timeout) {
            return status;
        }
        self.kill_and_reap();
        panic!(
            "{} (pid {}) did not exit within {timeout:?}",
            self.name,
            self.pid()
        );
    }

    /// SIGKILLs the process if it is still running, and reaps it.
    pub fn kill_and_reap(&mut self) {
        if self.still_running() {
            procs::signal(self.pid(), Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }

    /// [`Running::is_running`] that never panics, for drop (a panic while unwinding aborts).
    fn still_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls for the exit until `timeout`; errors are returned, not panicked on, for drop.
    fn poll_exit(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.kill_on_drop && self.still_running() {
            procs::signal(self.pid(), Signal::SIGTERM);
            let _ = self.poll_exit(STOP_GRACE);
        }
        self.kill_and_reap();
    }
}
