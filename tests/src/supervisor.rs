//! [`Supervisor`]: a running `strata-supervisor` on a [`TestConfig`], for one test.
//!
//! [`Supervisor::start`] spawns the binary and waits until the control socket answers
//! `status`. [`Supervisor::stop`] is the normal end of a test: SIGTERM, exit status 0, both
//! socket files removed, and no backend process of this test left. If the test fails first,
//! dropping the value SIGKILLs the supervisor, kills any backend of this test that is still
//! alive (by PID, found through the fake log) and prints the supervisor's stderr and the fake
//! log.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use strata_protocol::control::Status;

use crate::Daemon;
use crate::binaries::daemon_command;
use crate::config::TestConfig;
use crate::control::{ControlClient, parse_status};
use crate::fake_log::FakeLog;
use crate::poll::{DEADLINE, POLL_INTERVAL};
use crate::proxy::FakeProxy;

/// The supervisor binary's name.
pub const SUPERVISOR_BIN: &str = "strata-supervisor";

/// A supervisor process and its config.
#[derive(Debug)]
pub struct Supervisor {
    daemon: Daemon,
    /// Earlier processes replaced by [`Supervisor::crash_and_restart`], kept for their stderr.
    crashed: Vec<Daemon>,
    terminated: bool,
    stopped: bool,
    /// Declared last: the directory outlives the process.
    pub config: TestConfig,
}

/// The command that runs `strata-supervisor CONFIG` (see [`daemon_command`]).
pub fn supervisor_command(config: &TestConfig) -> Command {
    daemon_command(SUPERVISOR_BIN, &config.path)
}

/// Spawns `strata-supervisor` on `config` without waiting for anything (for runs that are
/// expected to fail); `name` names its output files in the test directory.
pub fn spawn_supervisor(config: &TestConfig, name: &str) -> Daemon {
    Daemon::spawn(name, supervisor_command(config), config.dir.path())
}

/// Waits until the supervisor spawned as `daemon` answers `status` with its
/// own PID (not an older daemon's), failing at once if it exits.
pub fn wait_supervisor_serving(daemon: &mut Daemon, control: &ControlClient) {
    crate::poll::poll_until(DEADLINE, "the supervisor to serve", || {
        assert!(daemon.is_running(), "{}", daemon.stderr_report());
        control.try_request("status").is_ok_and(|lines| {
            lines.len() == 1 && parse_status(&lines[0]).daemon_pid == daemon.pid()
        })
    });
}

impl Supervisor {
    /// Starts the supervisor and waits until it serves.
    pub fn start(config: TestConfig) -> Supervisor {
        Supervisor::start_with(config, |_| {})
    }

    /// Like [`Supervisor::start`], letting `customize` change the command first (environment
    /// variables, for one).
    pub fn start_with(config: TestConfig, customize: impl FnOnce(&mut Command)) -> Supervisor {
        Supervisor::start_wrapped(config, |mut command| {
            customize(&mut command);
            command
        })
    }

    /// Like [`Supervisor::start`], with the command passed through `wrap` first (for a
    /// launcher such as [`with_ulimit`](crate::binaries::with_ulimit)).
    pub fn start_wrapped(config: TestConfig, wrap: impl FnOnce(Command) -> Command) -> Supervisor {
        let command = wrap(supervisor_command(&config));
        let daemon = Daemon::spawn("supervisor", command, config.dir.path());
        let mut supervisor = Supervisor {
            daemon,
            crashed: Vec::new(),
            terminated: false,
            stopped: false,
            config,
        };
        supervisor.wait_serving();
        supervisor
    }

    fn wait_serving(&mut self) {
        let client = self.control().with_timeout(Duration::from_secs(5));
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.daemon.try_exit() {
                panic!(
                    "strata-supervisor exited with {status} before serving\n{}",
                    self.daemon.stderr_report()
                );
            }
            if self.config.supervisor_socket.exists()
                && let Ok(lines) = client.try_request("status")
                && lines.len() == 1
            {
                // Serving; and its answer is a whole status document.
                parse_status(&lines[0]);
                return;
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "strata-supervisor did not serve within {DEADLINE:?}\n{}",
                    self.daemon.stderr_report()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// What systemd does after a supervisor crash: SIGKILL it (by PID), wait for its exit,
    /// start a new one on the same config (it replaces the stale sockets) and wait until it
    /// serves. The old process's backend dies with it (parent-death signal); the old
    /// process's output stays in the test directory.
    pub fn crash_and_restart(&mut self) {
        self.daemon.kill(Signal::SIGKILL);
        self.daemon.wait_exit(DEADLINE);
        self.start_next();
    }

    /// After the current process exited (a test killed it through [`daemon`](Self::daemon)):
    /// a new supervisor on the same config, waited for until it serves.
    pub fn start_again(&mut self) {
        self.start_next();
    }

    /// After the current process exited: a new supervisor on the same config, kept as the
    /// current one (the old one's output stays in the test directory), waited for until it
    /// serves.
    fn start_next(&mut self) {
        let name = format!("supervisor{}", self.crashed.len() + 2);
        let daemon = Daemon::spawn(
            &name,
            supervisor_command(&self.config),
            self.config.dir.path(),
        );
        self.crashed
            .push(std::mem::replace(&mut self.daemon, daemon));
        self.wait_serving();
    }

    /// A graceful restart, as `systemctl restart` does it: SIGTERM, a clean exit (0) within
    /// `DEADLINE`, then a new supervisor on the same config, waited for until it serves.
    pub fn restart(&mut self) {
        self.daemon.kill(Signal::SIGTERM);
        let status = self.daemon.wait_exit(DEADLINE);
        assert!(
            status.success(),
            "strata-supervisor exited with {status} after SIGTERM\n{}",
            self.daemon.stderr_report()
        );
        self.start_next();
    }

    /// The supervisor's PID.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// The process guard.
    /// Everything this process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.daemon.stderr()
    }

    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// A control client.
    pub fn control(&self) -> ControlClient {
        self.config.control()
    }

    /// Bare `status`.
    pub fn status(&self) -> Status {
        self.control().status()
    }

    /// A connected [`FakeProxy`].
    pub async fn proxy(&self) -> FakeProxy {
        FakeProxy::connect(&self.config).await
    }

    /// The fake backend's log.
    pub fn fake_log(&self) -> FakeLog {
        self.config.fake_log()
    }

    /// Sends SIGTERM once (the start of a graceful shutdown) without waiting; a second
    /// SIGTERM would interrupt active leases, so [`Supervisor::stop`] does not send another.
    pub fn terminate(&mut self) {
        if !self.terminated {
            self.daemon.kill(Signal::SIGTERM);
            self.terminated = true;
        }
    }

    /// The normal end of a test: SIGTERM (unless [`Supervisor::terminate`] sent it already);
    /// the supervisor must exit 0 within `DEADLINE`, remove both sockets, and leave no backend
    /// process of this test running.
    pub fn stop(mut self) {
        self.terminate();
        let status = self.daemon.wait_exit(DEADLINE);
        assert!(
            status.success(),
            "strata-supervisor exited with {status} after SIGTERM\n{}",
            self.daemon.stderr_report()
        );
        for socket in [&self.config.control_socket, &self.config.supervisor_socket] {
            assert!(
                !socket.exists(),
                "{} left behind after a clean stop",
                socket.display()
            );
        }
        self.fake_log().assert_no_backends_left();
        self.stopped = true;
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.daemon.kill_and_reap();
        let log = self.fake_log();
        log.kill_leftovers();
        if std::thread::panicking() {
            eprintln!("{}", log.dump());
        }
    }
}
