//! `strata-router daemon CONFIG` (or `strata-ctl daemon CONFIG`): start
//! strata-supervisor and strata-proxy for development and
//! `nix run . -- daemon CONFIG`. Production uses the systemd units in
//! `contrib/` instead. NAME below is the name this program runs under.
//!
//! 1. Validate the config exactly like `check-config` (same message, exit 1).
//! 2. Find `strata-supervisor` and `strata-proxy` beside this executable.
//! 3. Start the supervisor; wait (at most 30 s) until its control socket
//!    answers `status` with the child's own PID.
//! 4. Start the proxy; wait (at most 30 s) until `GET /health` on `listen`
//!    answers with any HTTP status line.
//! 5. Print `NAME: serving on http://ADDR (supervisor pid N, proxy pid M);
//!    Ctrl-C stops both` on stdout.
//! 6. On SIGINT or SIGTERM (SIGHUP counts as SIGTERM): forward the signal to
//!    the proxy and wait for it to exit, then the same for the supervisor;
//!    exit 0 when both stopped cleanly. A second signal is forwarded again
//!    (the daemons then interrupt active work); a third gets SIGKILL. With
//!    `drain_ms: 0` (the daemons wait for all accepted work, without a
//!    deadline) the launcher waits without a deadline too; with a positive
//!    `drain_ms`, a child still running after a generous deadline (drain and
//!    shutdown bounds plus slack) gets SIGKILL.
//! 7. If either child exits on its own, stop the other the same way and
//!    exit 1, naming the one that died and its status.
//!
//! The children inherit stdout and stderr (their logs go to the terminal)
//! and run in their own process groups, so a terminal's Ctrl-C reaches only
//! this process, which then stops them in order. Each child gets a
//! parent-death SIGTERM, so they also stop if this process is killed.

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use strata_os::{current_thread_runtime, die_with_parent};
use strata_protocol::config::Config;
use strata_protocol::control::Status;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::control::describe_io;

#[derive(clap::Args)]
pub struct Args {
    /// The config file (JSON)
    pub config: PathBuf,
}

/// How long each daemon may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Bound on one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Added to the config's own drain and shutdown bounds before SIGKILL.
const STOP_SLACK: Duration = Duration::from_secs(30);

/// Environment that belongs to this process's own service manager, not to
/// the children.
const SCRUBBED_ENV: [&str; 4] = [
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
];

pub fn run(args: Args) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let mut signals = match Signals::install() {
            Ok(signals) => signals,
            Err(code) => return code,
        };
        launch(&args.config, &mut signals, |_| {}).await
    })
}

/// A current-thread runtime: the children are spawned from the main
/// thread, which lives as long as the process (the parent-death signal
/// fires when the forking *thread* exits).
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    current_thread_runtime().map_err(|err| {
        note!("cannot start the runtime: {err}");
        ExitCode::FAILURE
    })
}

/// Loads and validates a config the way `check-config` and the daemons do,
/// printing `NAME: config error: ...` on failure.
pub fn load_config(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|err| {
        note!("config error: {err}");
        ExitCode::FAILURE
    })
}

/// The shutdown signals this process listens for, installed before any
/// child starts so that an early Ctrl-C still stops everything in order.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> Result<Signals, ExitCode> {
        let install = |kind| {
            signal(kind).map_err(|err| {
                note!("cannot install signal handlers: {err}");
                ExitCode::FAILURE
            })
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// The next shutdown signal, as the signal to forward to the children
    /// (SIGHUP is forwarded as SIGTERM) and its own name.
    async fn recv(&mut self) -> (Signal, &'static str) {
        tokio::select! {
            Some(()) = self.interrupt.recv() => (Signal::SIGINT, "SIGINT"),
            Some(()) = self.terminate.recv() => (Signal::SIGTERM, "SIGTERM"),
            Some(()) = self.hangup.recv() => (Signal::SIGTERM, "SIGHUP"),
            else => std::future::pending().await,
        }
    }
}

/// What `launch` tells its caller once both daemons serve.
pub struct Serving {
    pub listen: SocketAddr,
    pub control_socket: PathBuf,
}

/// The two sibling executables.
struct Binaries {
    supervisor: PathBuf,
    proxy: PathBuf,
}

fn find_binaries() -> Result<Binaries, ExitCode> {
    let exe = std::env::current_exe().map_err(|err| {
        note!("cannot find this executable's path: {err}");
        ExitCode::FAILURE
    })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let find = |name: &str| {
        let path = dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            note!(
                "{name} not found beside {} (expected {}); build every binary \
                 (cargo build --bins) or install all three together",
                exe.display(),
                path.display()
            );
            Err(ExitCode::FAILURE)
        }
    };
    Ok(Binaries {
        supervisor: find("strata-supervisor")?,
        proxy: find("strata-proxy")?,
    })
}

/// Runs the whole `daemon` command on `config_path` until it stops.
/// `on_serving` runs once both daemons serve, after the serving line.
pub async fn launch(
    config_path: &Path,
    signals: &mut Signals,
    on_serving: impl FnOnce(&Serving),
) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if config.require_socket_activation {
        note!(
            "{} sets require_socket_activation: true, but `{} daemon` lets strata-proxy \
             bind {} itself; set it to false for development, or use the systemd units in \
             contrib/",
            config_path.display(),
            crate::program(),
            config.listen
        );
        return ExitCode::FAILURE;
    }
    if config.listen.port() == 0 {
        note!(
            "listen is {}; `{} daemon` needs a fixed port to check that the proxy serves",
            config.listen,
            crate::program()
        );
        return ExitCode::FAILURE;
    }
    let binaries = match find_binaries() {
        Ok(binaries) => binaries,
        Err(code) => return code,
    };
    // The children resolve a relative path against the same cwd, but an
    // absolute one reads better in their logs and `ps`.
    let config_path = std::path::absolute(config_path).unwrap_or_else(|_| config_path.into());
    if let Ok(Ok(_)) = timeout(Duration::from_secs(1), TcpStream::connect(config.listen)).await {
        note!(
            "{} is already in use (another strata-proxy?); stop it or change listen",
            config.listen
        );
        return ExitCode::FAILURE;
    }

    let grace = stop_deadline(&config);
    let supervisor = match Child::spawn("strata-supervisor", &binaries.supervisor, &config_path) {
        Ok(child) => child,
        Err(code) => return code,
    };
    let mut stack = Stack {
        supervisor,
        proxy: None,
        signals,
        grace,
    };
    let supervisor_pid = stack.supervisor.pid;
    match stack
        .until(wait_for_control(&config.control_socket, supervisor_pid))
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(message)) => return stack.finish(Interrupt::NotReady(message)).await,
        Err(interrupt) => return stack.finish(interrupt).await,
    }

    let proxy = match Child::spawn("strata-proxy", &binaries.proxy, &config_path) {
        Ok(child) => child,
        Err(_) => return stack.finish(Interrupt::NotReady(String::new())).await,
    };
    let proxy_pid = proxy.pid;
    stack.proxy = Some(proxy);
    match stack.until(wait_for_health(config.listen)).await {
        Ok(Ok(())) => {}
        Ok(Err(message)) => return stack.finish(Interrupt::NotReady(message)).await,
        Err(interrupt) => return stack.finish(interrupt).await,
    }

    let serving = Serving {
        listen: config.listen,
        control_socket: config.control_socket.clone(),
    };
    out!(
        "{}: serving on http://{} (supervisor pid {supervisor_pid}, proxy pid \
         {proxy_pid}); Ctrl-C stops both",
        crate::program(),
        config.listen
    );
    on_serving(&serving);
    let interrupt = match stack.until(std::future::pending::<()>()).await {
        Ok(()) => unreachable!("pending never completes"),
        Err(interrupt) => interrupt,
    };
    stack.finish(interrupt).await
}

/// How long a child may take to stop after its first signal before it is
/// killed: `None` for `drain_ms: 0`, where the daemons finish every accepted
/// request however long it takes (the operator's second signal interrupts
/// them, a third kills); else the drain bound, plus the backend's shutdown
/// bound, plus slack.
fn stop_deadline(config: &Config) -> Option<Duration> {
    match config.timers.drain_ms {
        0 => None,
        ms => Some(
            Duration::from_millis(ms)
                + Duration::from_millis(config.timers.shutdown_ms)
                + STOP_SLACK,
        ),
    }
}

/// How the stop line describes `deadline`.
fn describe_deadline(deadline: Option<Duration>) -> String {
    match deadline {
        None => "without a deadline (drain_ms is 0)".to_owned(),
        Some(deadline) => format!(
            "each killed if still running after {} s",
            deadline.as_secs()
        ),
    }
}

/// One daemon child.
struct Child {
    name: &'static str,
    pid: u32,
    child: tokio::process::Child,
    status: Option<ExitStatus>,
}

impl Child {
    /// Starts `program CONFIG` with stdin on /dev/null, inherited stdout and
    /// stderr, in its own process group, with a parent-death SIGTERM.
    fn spawn(name: &'static str, program: &Path, config: &Path) -> Result<Child, ExitCode> {
        let mut command = std::process::Command::new(program);
        command.arg(config).stdin(Stdio::null()).process_group(0);
        for key in SCRUBBED_ENV {
            command.env_remove(key);
        }
        die_with_parent(&mut command, Signal::SIGTERM);
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(false);
        let child = command.spawn().map_err(|err| {
            note!("cannot start {}: {}", program.display(), describe_io(&err));
            ExitCode::FAILURE
        })?;
        let pid = child.id().unwrap_or_default();
        Ok(Child {
            name,
            pid,
            child,
            status: None,
        })
    }

    /// Waits for the child to exit (cancel-safe; remembers the status).
    async fn wait(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        let status = match self.child.wait().await {
            Ok(status) => status,
            Err(err) => {
                // Cannot happen for our own unreaped child; report it as a
                // failure rather than waiting forever.
                note!("cannot wait for {} (pid {}): {err}", self.name, self.pid);
                ExitStatus::from_raw(1 << 8)
            }
        };
        self.status = Some(status);
        status
    }

    /// Signals the child unless it has been reaped (so never a reused PID).
    fn signal(&self, signal: Signal) {
        if self.status.is_some() {
            return;
        }
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    fn label(&self) -> String {
        format!("{} (pid {})", self.name, self.pid)
    }
}

async fn wait_optional(child: Option<&mut Child>) -> ExitStatus {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

/// `exit status N`, or `signal N (SIGNAME)`.
fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(number) => match Signal::try_from(number) {
            Ok(signal) => format!("signal {number} ({})", signal.as_str()),
            Err(_) => format!("signal {number}"),
        },
        None => status.to_string(),
    }
}

/// Why the stack is being stopped.
enum Interrupt {
    /// A shutdown signal: the signal to forward, and the one received.
    Signal(Signal, &'static str),
    /// A child exited on its own: true for the proxy.
    Died { proxy: bool, status: ExitStatus },
    /// A daemon did not become ready (the message is already explained, or
    /// empty when it was printed already).
    NotReady(String),
}

/// The running children and what stops them.
struct Stack<'a> {
    supervisor: Child,
    proxy: Option<Child>,
    signals: &'a mut Signals,
    /// See [`stop_deadline`].
    grace: Option<Duration>,
}

impl Stack<'_> {
    /// Runs `future` unless a signal arrives or a child exits first.
    async fn until<T>(&mut self, future: impl Future<Output = T>) -> Result<T, Interrupt> {
        let Stack {
            supervisor,
            proxy,
            signals,
            ..
        } = self;
        tokio::select! {
            biased;
            (forward, name) = signals.recv() => Err(Interrupt::Signal(forward, name)),
            status = supervisor.wait() => Err(Interrupt::Died { proxy: false, status }),
            status = wait_optional(proxy.as_mut()) => Err(Interrupt::Died { proxy: true, status }),
            value = future => Ok(value),
        }
    }

    /// Stops whatever still runs (proxy first) and returns the exit code.
    async fn finish(mut self, interrupt: Interrupt) -> ExitCode {
        let running = self.running_labels();
        let (forward, code) = match interrupt {
            Interrupt::Signal(forward, name) => {
                if running.is_empty() {
                    note!("{name} received");
                } else {
                    note!(
                        "{name} received; stopping {}, {} (repeat the signal to interrupt \
                         active work, a third time to kill)",
                        running.join(", then "),
                        describe_deadline(self.grace)
                    );
                }
                (forward, None)
            }
            Interrupt::Died { proxy, status } => {
                let child = if proxy {
                    self.proxy.as_ref().expect("a proxy that died exists")
                } else {
                    &self.supervisor
                };
                let what = format!(
                    "{}: {} exited on its own ({})",
                    crate::program(),
                    child.label(),
                    describe_status(status)
                );
                if running.is_empty() {
                    say!("{what}");
                } else {
                    say!("{what}; stopping {}", running.join(", then "));
                }
                (Signal::SIGTERM, Some(ExitCode::FAILURE))
            }
            Interrupt::NotReady(message) => {
                if !message.is_empty() {
                    note!("{message}");
                }
                if !running.is_empty() {
                    note!("stopping {}", running.join(", then "));
                }
                (Signal::SIGTERM, Some(ExitCode::FAILURE))
            }
        };
        let mut clean = true;
        if let Some(mut proxy) = self.proxy.take() {
            clean &= stop(&mut proxy, forward, self.signals, self.grace).await;
        }
        clean &= stop(&mut self.supervisor, forward, self.signals, self.grace).await;
        match code {
            Some(code) => code,
            None if clean => {
                note!("stopped");
                ExitCode::SUCCESS
            }
            None => ExitCode::FAILURE,
        }
    }

    fn running_labels(&self) -> Vec<String> {
        self.proxy
            .iter()
            .chain(std::iter::once(&self.supervisor))
            .filter(|child| child.status.is_none())
            .map(Child::label)
            .collect()
    }
}

/// Stops one child: `first`, then (on another signal) `first` again, then
/// SIGKILL on a third signal or after `grace` (never, for `None`). True when
/// it exited cleanly (status 0, or ended by the signal it was sent) without
/// SIGKILL.
async fn stop(
    child: &mut Child,
    first: Signal,
    signals: &mut Signals,
    grace: Option<Duration>,
) -> bool {
    if child.status.is_some() {
        // It exited before we asked; that was reported already (or it is
        // reported here if nobody has seen it yet).
        return false;
    }
    child.signal(first);
    let deadline = grace.map(|grace| (Instant::now() + grace, grace));
    let expired = async {
        match deadline {
            Some((at, grace)) => {
                sleep_until(at).await;
                grace
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expired);
    let mut repeats = 0u32;
    let mut killed = false;
    loop {
        tokio::select! {
            status = child.wait() => {
                let by_our_signal = status.signal() == Some(first as i32);
                let clean = !killed && (status.success() || by_our_signal);
                if clean {
                    note!("{} stopped", child.label());
                } else {
                    note!(
                        "{} ended with {}",
                        child.label(),
                        describe_status(status)
                    );
                }
                return clean;
            }
            (_, name) = signals.recv() => {
                repeats += 1;
                if repeats == 1 {
                    note!(
                        "{name} again: asking {} to interrupt active work",
                        child.label()
                    );
                    child.signal(first);
                } else {
                    note!("{name} again: killing {}", child.label());
                    child.signal(Signal::SIGKILL);
                    killed = true;
                }
            }
            grace = &mut expired, if !killed => {
                note!(
                    "{} did not stop within {} s; killing it",
                    child.label(),
                    grace.as_secs()
                );
                child.signal(Signal::SIGKILL);
                killed = true;
            }
        }
    }
}

/// Polls until the control socket answers `status` with `pid` as the daemon
/// PID (so an old daemon on the same socket does not count).
async fn wait_for_control(socket: &Path, pid: u32) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(daemon_pid)) = timeout(PROBE_TIMEOUT, probe_status(socket)).await
            && daemon_pid == pid
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "strata-supervisor (pid {pid}) did not answer on {} within {} s",
                socket.display(),
                READY_TIMEOUT.as_secs()
            ));
        }
        sleep(PROBE_INTERVAL).await;
    }
}

/// One `status` request; the daemon PID it reports.
async fn probe_status(socket: &Path) -> Option<u32> {
    let mut stream = UnixStream::connect(socket).await.ok()?;
    stream.write_all(b"status\n").await.ok()?;
    let mut line = String::new();
    BufReader::new(&mut stream)
        .take(64 * 1024)
        .read_line(&mut line)
        .await
        .ok()?;
    let status: Status = serde_json::from_str(&line).ok()?;
    Some(status.daemon_pid)
}

/// Polls until `GET /health` on `listen` answers with an HTTP status line.
async fn wait_for_health(listen: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(_status_line)) = timeout(PROBE_TIMEOUT, probe_health(listen)).await {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "strata-proxy did not answer GET /health on {listen} within {} s",
                READY_TIMEOUT.as_secs()
            ));
        }
        sleep(PROBE_INTERVAL).await;
    }
}

/// One HTTP/1.0 `GET /health`; the status line if the answer has one.
async fn probe_health(listen: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(listen).await.ok()?;
    let request = format!("GET /health HTTP/1.0\r\nHost: {listen}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut line = String::new();
    BufReader::new(&mut stream)
        .take(1024)
        .read_line(&mut line)
        .await
        .ok()?;
    let line = line.trim_end();
    line.starts_with("HTTP/").then(|| line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_described_for_humans() {
        assert_eq!(
            describe_status(ExitStatus::from_raw(3 << 8)),
            "exit status 3"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "signal 9 (SIGKILL)"
        );
    }

    #[test]
    fn the_stop_deadline_covers_drain_and_shutdown_and_is_none_for_drain_ms_0() {
        let text = |drain: u64| {
            format!(
                r#"{{"python":"/usr/bin/python3","strata_dir":"/srv","backend_port":9,
                   "control_socket":"/run/x/c.sock","shutdown_ms":5000,"drain_ms":{drain},
                   "models":{{"m":{{"family":"qwen3.8-flash-next","quantization":"q",
                   "upstream_model":"m"}}}}}}"#
            )
        };
        let config = Config::from_json_str(&text(7000)).unwrap();
        assert_eq!(
            stop_deadline(&config),
            Some(Duration::from_secs(7 + 5 + 30))
        );
        // drain_ms: 0 means "no deadline" (the spec): the launcher must not
        // put one back (it used to SIGKILL after 60 s + shutdown + slack).
        let config = Config::from_json_str(&text(0)).unwrap();
        assert_eq!(stop_deadline(&config), None);
    }
}
