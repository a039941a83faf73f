//! [`Stack`]: the whole router for one test: `strata-supervisor` plus `strata-proxy` on a
//! [`TestConfig`], talking HTTP on the config's `listen` address.
//!
//! [`Stack::start`] starts the supervisor (waiting until its control socket answers), then the
//! proxy (waiting until `GET /health` answers 200, i.e. it serves and reached the supervisor).
//! Works the same for wait-first and legacy configs: the config decides.
//!
//! The proxy can be stopped, killed and replaced while the supervisor keeps running
//! ([`Stack::kill_proxy`], [`Stack::wait_proxy_exit`], [`Stack::start_proxy`],
//! [`Stack::restart_proxy`]), or started through a wrapper such as the socket-activation
//! launcher ([`Stack::start_proxy_with`], [`Stack::spawn_proxy_with`], [`launch_with_fd3`],
//! [`with_ulimit`](crate::binaries::with_ulimit)).
//! Replaced proxy processes are kept (reaped, with their stderr) until the stack is dropped.
//!
//! [`Stack::stop`] is the clean end of a test: SIGTERM to the proxy (exit 0), then the
//! supervisor's own clean stop (exit 0, sockets removed, no backend left). Dropping the stack
//! instead (a failing test) SIGKILLs the proxies first, then the supervisor and any backend of
//! this test, by PID, and prints their stderr and the fake log if the test panicked.
//!
//! The router's documents come back typed ([`Stack::status`], [`Stack::metrics`],
//! [`Stack::health`], [`Stack::models`]), read exactly (see [`crate::document`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_protocol::api::{Health, Metrics, ModelList};
use strata_protocol::control::Status;

use crate::Daemon;
use crate::accounting::chat_request;
use crate::binaries::{binary, wrap_command};
use crate::config::TestConfig;
use crate::control::ControlClient;
use crate::fake_log::FakeLog;
use crate::http::{self, Response};
use crate::poll::{DEADLINE, POLL_INTERVAL};
use crate::python::python;
use crate::supervisor::Supervisor;

/// The proxy binary's name.
pub const PROXY_BIN: &str = "strata-proxy";

/// The command that runs `strata-proxy CONFIG`: `STRATA_LOG` passed through (default `info`).
pub fn proxy_command(config: &TestConfig) -> Command {
    let mut command = Command::new(binary(PROXY_BIN));
    command
        .arg(&config.path)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env(
            "STRATA_LOG",
            std::env::var("STRATA_LOG").unwrap_or_else(|_| "info".into()),
        );
    command
}

/// `tests/launch_with_fd3.py`: starts a program the way systemd socket activation does (or
/// deliberately not quite); see its `--help`.
pub fn launcher_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("launch_with_fd3.py")
}

/// `python launch_with_fd3.py ARGS -- PROGRAM PROGRAM-ARGS`, with `inner`'s program, arguments
/// and environment changes. The launcher exec()s the program in place, so the spawned process
/// *is* the program (same PID).
pub fn launch_with_fd3(args: &[&str], inner: &Command) -> Command {
    let mut command = Command::new(python());
    command.arg(launcher_path()).args(args).arg("--");
    wrap_command(command, inner)
}

/// The resident set size of `pid` in KiB (`VmRSS` of `/proc/PID/status`), if it exists.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// A supervisor and a proxy for one test.
pub struct Stack {
    /// The current proxy (none between a kill and the next start).
    proxy: Option<Daemon>,
    /// Further proxies on listeners of their own ([`Stack::start_extra_proxy`]).
    extra: Vec<Daemon>,
    /// Earlier proxy processes, kept for their stderr and reaped on drop.
    retired: Vec<Daemon>,
    spawned: usize,
    /// Always `Some` until [`Stack::stop`] takes it.
    supervisor: Option<Supervisor>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("listen", &self.supervisor.as_ref().map(|s| s.config.listen))
            .field("proxy", &self.proxy.as_ref().map(Daemon::pid))
            .field("supervisor", &self.supervisor.as_ref().map(Supervisor::pid))
            .finish()
    }
}

impl Stack {
    /// Starts the supervisor, then the proxy, and waits until `GET /health` answers 200.
    pub fn start(config: TestConfig) -> Stack {
        let mut stack = Stack::supervisor_only(config);
        stack.start_proxy();
        stack
    }

    /// Like [`Stack::start`], letting `customize` change the supervisor's command first (an
    /// environment variable, say).
    pub fn start_with_supervisor(
        config: TestConfig,
        customize: impl FnOnce(&mut Command),
    ) -> Stack {
        let mut stack = Stack {
            proxy: None,
            extra: Vec::new(),
            retired: Vec::new(),
            spawned: 0,
            supervisor: Some(Supervisor::start_with(config, customize)),
        };
        stack.start_proxy();
        stack
    }

    /// Like [`Stack::start`], with both daemons logging at `level` (`STRATA_LOG`).
    pub fn start_logging(config: TestConfig, level: &str) -> Stack {
        let mut stack = Stack {
            proxy: None,
            extra: Vec::new(),
            retired: Vec::new(),
            spawned: 0,
            supervisor: Some(Supervisor::start_with(config, |command| {
                command.env("STRATA_LOG", level);
            })),
        };
        stack.start_proxy_with(|mut command| {
            command.env("STRATA_LOG", level);
            command
        });
        stack
    }

    /// Everything the supervisor wrote to stderr so far.
    pub fn supervisor_stderr(&self) -> String {
        self.sup().stderr()
    }

    /// Starts only the supervisor (start a proxy with [`Stack::start_proxy`] or
    /// [`Stack::start_proxy_with`]).
    pub fn supervisor_only(config: TestConfig) -> Stack {
        Stack {
            proxy: None,
            extra: Vec::new(),
            retired: Vec::new(),
            spawned: 0,
            supervisor: Some(Supervisor::start(config)),
        }
    }

    /// The config.
    pub fn config(&self) -> &TestConfig {
        &self.sup().config
    }

    /// The proxy's HTTP address (`listen`).
    pub fn addr(&self) -> SocketAddr {
        self.sup().config.listen
    }

    /// The backend's address (`127.0.0.1:backend_port`), for talking to the fake directly.
    pub fn backend_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.sup().config.backend_port))
    }

    /// A control-socket client.
    pub fn control(&self) -> ControlClient {
        self.sup().control()
    }

    /// Bare `status` from the control socket.
    pub fn status(&self) -> Status {
        self.sup().status()
    }

    /// The requests waiting in the engine's queue, as the supervisor's status counts them.
    pub fn waiting(&self) -> usize {
        self.status().waiting_requests
    }

    /// The fake backend's log.
    pub fn fake_log(&self) -> FakeLog {
        self.sup().fake_log()
    }

    /// The supervisor.
    pub fn supervisor(&mut self) -> &mut Supervisor {
        self.supervisor
            .as_mut()
            .expect("the stack owns its supervisor")
    }

    fn sup(&self) -> &Supervisor {
        self.supervisor
            .as_ref()
            .expect("the stack owns its supervisor")
    }

    /// The current proxy process; panics if there is none.
    pub fn proxy(&mut self) -> &mut Daemon {
        self.proxy.as_mut().expect("no proxy is running")
    }

    /// The supervisor's PID.
    pub fn supervisor_pid(&self) -> u32 {
        self.sup().pid()
    }

    /// The current proxy's PID; panics if there is none.
    pub fn proxy_pid(&self) -> u32 {
        self.proxy.as_ref().expect("no proxy is running").pid()
    }

    /// The default proxy command for this stack's config.
    pub fn proxy_command(&self) -> Command {
        proxy_command(&self.sup().config)
    }

    /// Starts a proxy with the default command and waits until it serves. Panics if a proxy
    /// is already current (kill it and wait for its exit first).
    pub fn start_proxy(&mut self) -> &mut Daemon {
        self.start_proxy_with(|command| command)
    }

    /// Like [`Stack::start_proxy`], with the command passed through `wrap` first (add
    /// environment, or wrap it in a launcher with [`launch_with_fd3`]).
    pub fn start_proxy_with(&mut self, wrap: impl FnOnce(Command) -> Command) -> &mut Daemon {
        self.spawn_proxy_with(wrap);
        self.wait_proxy_serving(DEADLINE);
        self.proxy()
    }

    /// Spawns a proxy through `wrap` without waiting for anything (for runs expected to fail).
    pub fn spawn_proxy_with(&mut self, wrap: impl FnOnce(Command) -> Command) -> &mut Daemon {
        if let Some(mut old) = self.proxy.take() {
            assert!(
                !old.is_running(),
                "a proxy (pid {}) is still running; stop it before starting another",
                old.pid()
            );
            self.retired.push(old);
        }
        self.spawned += 1;
        let name = format!("proxy{}", self.spawned);
        let command = wrap(self.proxy_command());
        let daemon = Daemon::spawn(&name, command, self.sup().config.dir.path());
        self.proxy.insert(daemon)
    }

    /// Waits (bounded) until the current proxy answers `GET /health` with 200; panics with its
    /// stderr if it exits first or the deadline passes.
    pub fn wait_proxy_serving(&mut self, timeout: Duration) {
        let addr = self.addr();
        let deadline = Instant::now() + timeout;
        loop {
            let proxy = self.proxy.as_mut().expect("no proxy is running");
            if let Some(status) = proxy.try_exit() {
                panic!(
                    "strata-proxy exited with {status} before serving\n{}",
                    proxy.stderr_report()
                );
            }
            let last = match http::try_request(addr, "GET", "/health", &[], b"") {
                Ok(response) if response.status == 200 => return,
                Ok(response) => format!("{response}"),
                Err(err) => err.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "strata-proxy did not serve /health with 200 within {timeout:?} (last: {last})\n{}",
                    proxy.stderr_report()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Starts one more proxy beside the current one, on its own loopback listener (a copy of
    /// the config that differs only in `listen`, which the fingerprint leaves out), and waits
    /// until it serves. Returns its address. It is stopped with the stack.
    pub fn start_extra_proxy(&mut self) -> SocketAddr {
        let addr = self.spawn_extra_proxy();
        let deadline = Instant::now() + DEADLINE;
        loop {
            let daemon = self.extra.last_mut().expect("just spawned");
            if let Some(status) = daemon.try_exit() {
                panic!(
                    "the extra proxy exited with {status}\n{}",
                    daemon.stderr_report()
                );
            }
            if http::try_request(addr, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200) {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "the extra proxy did not serve\n{}",
                daemon.stderr_report()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Like [`Stack::start_extra_proxy`], without waiting for anything.
    pub fn spawn_extra_proxy(&mut self) -> SocketAddr {
        let config = &self.sup().config;
        let addr = SocketAddr::from(([127, 0, 0, 1], crate::net::free_port()));
        let mut json = config.json.clone();
        json["listen"] = serde_json::json!(addr.to_string());
        let n = self.extra.len() + 1;
        let path = config.dir.join(format!("config-extra{n}.json"));
        std::fs::write(&path, json.to_string()).expect("write the extra proxy's config");
        let mut command = Command::new(binary(PROXY_BIN));
        command.arg(&path).env(
            "STRATA_LOG",
            std::env::var("STRATA_LOG").unwrap_or_else(|_| "info".into()),
        );
        let daemon = Daemon::spawn(&format!("proxy-extra{n}"), command, config.dir.path());
        self.extra.push(daemon);
        addr
    }

    /// Sends `signal` to the current proxy (by PID). It stays the current proxy until
    /// [`Stack::wait_proxy_exit`] or the next start.
    pub fn kill_proxy(&mut self, signal: Signal) {
        self.proxy().kill(signal);
    }

    /// Waits (bounded) for the current proxy to exit and returns its status.
    pub fn wait_proxy_exit(&mut self, timeout: Duration) -> ExitStatus {
        self.proxy().wait_exit(timeout)
    }

    /// SIGTERMs the current proxy, expects a clean exit (0), and starts a new one.
    pub fn restart_proxy(&mut self) -> &mut Daemon {
        self.kill_proxy(Signal::SIGTERM);
        let status = self.wait_proxy_exit(DEADLINE);
        assert!(
            status.success(),
            "strata-proxy exited with {status} after SIGTERM\n{}",
            self.proxy().stderr_report()
        );
        self.start_proxy()
    }

    /// `GET path` on the proxy.
    pub fn get(&self, path: &str) -> Response {
        http::get(self.addr(), path)
    }

    /// `POST /v1/chat/completions` on the proxy, read to the end.
    pub fn chat(&self, body: &Value) -> Response {
        http::chat(self.addr(), body)
    }

    /// `POST /v1/chat/completions` on the proxy, returning once the headers are in.
    pub fn open_chat(&self, body: &Value) -> http::Stream {
        http::open_chat(self.addr(), body)
    }

    /// Serves one JSON request for `model` (its message `warm`, nothing for the fake), so that a
    /// scenario starts with the model loaded and its load behind it.
    pub fn warm(&self, model: &str) {
        self.chat(&chat_request(model, false, "warm", Value::Null))
            .expect_status(200);
    }

    /// A streaming request that holds `model` busy until the test lets go of it (it would run
    /// for a minute), read up to its first data frame: it has its lease then. Letting go
    /// (dropping or disconnecting it) is a client disconnect, which ends the lease at once, so
    /// no timing is involved. `tag` is its message, and its `fake.error_message` (a key the
    /// fake reads only with `error_status`), so the fake's event log names it.
    pub fn hold(&self, model: &str, tag: &str) -> http::Stream {
        let fake = json!({"tokens": 600, "token_delay_ms": 100, "error_message": tag});
        let mut stream = self.open_chat(&chat_request(model, true, tag, fake));
        assert_eq!(stream.status, 200, "{tag}: {:?}", stream.headers);
        stream.frames_until(DEADLINE, "the holder's first data frame", |frame| {
            frame.is_data()
        });
        stream
    }

    /// The proxy's `/metrics`, read exactly as the typed document.
    pub fn metrics(&self) -> Metrics {
        self.get("/metrics").expect_status(200).document()
    }

    /// The proxy's `/metrics` as its raw JSON, for the tests of the document's JSON itself.
    pub fn metrics_json(&self) -> Value {
        self.get("/metrics").expect_status(200).json()
    }

    /// The proxy's `/health` (200 or 503), read exactly as the typed document.
    pub fn health(&self) -> Health {
        self.get("/health").document()
    }

    /// The proxy's `/v1/models`, read exactly as the typed listing.
    pub fn models(&self) -> ModelList {
        self.get("/v1/models").expect_status(200).document()
    }

    /// Everything the proxies of this stack wrote to stderr, in start order.
    pub fn proxy_stderr(&self) -> String {
        self.retired
            .iter()
            .chain(self.proxy.as_ref())
            .map(Daemon::stderr_report)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The clean end of a test: SIGTERM to the current proxy (it must exit 0), then the
    /// supervisor's clean stop (exit 0, sockets removed, no backend process left).
    pub fn stop(mut self) {
        for proxy in &mut self.extra {
            proxy.kill(Signal::SIGTERM);
            let status = proxy.wait_exit(DEADLINE);
            assert!(
                status.success(),
                "an extra strata-proxy exited with {status} after SIGTERM\n{}",
                proxy.stderr_report()
            );
        }
        if let Some(proxy) = self.proxy.as_mut()
            && proxy.is_running()
        {
            proxy.kill(Signal::SIGTERM);
            let status = proxy.wait_exit(DEADLINE);
            assert!(
                status.success(),
                "strata-proxy exited with {status} after SIGTERM\n{}",
                proxy.stderr_report()
            );
        }
        let supervisor = self
            .supervisor
            .take()
            .expect("the stack owns its supervisor");
        supervisor.stop();
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Proxies first (by PID), then the supervisor (its own Drop kills any backend of this
        // test and prints the fake log when the test failed).
        if let Some(mut proxy) = self.proxy.take() {
            proxy.kill_and_reap();
            self.retired.push(proxy);
        }
        for mut proxy in self.extra.drain(..) {
            proxy.kill_and_reap();
            self.retired.push(proxy);
        }
        for proxy in &mut self.retired {
            proxy.kill_and_reap();
        }
        // Each Daemon prints its stderr on drop while panicking.
        self.retired.clear();
        self.supervisor.take();
    }
}
