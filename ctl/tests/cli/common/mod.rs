//! Helpers shared by the strata-ctl integration tests: the sibling binaries,
//! the ctl tests' config for a real `strata-supervisor` on the fake Strata
//! backend (started by the end-to-end harness's [`Supervisor`], or its
//! `Stack` with a proxy), the daemon's typed answers ([`parse_status`],
//! [`parse_done`]), the launcher's output lines, and a private bin directory for `daemon` and
//! `demo`. The generic helpers (temporary directories, the Python
//! interpreter, free ports, polling, processes stopped by PID, commands run
//! with a deadline) come from strata-test-support and are re-exported here.
//!
//! Binaries: the operator command under its two names, [`STRATA_CTL`] and
//! [`STRATA_ROUTER`] (`CARGO_BIN_EXE_*`), for tests that run under both
//! ([`under_both_names!`]); `strata-supervisor`
//! (and `strata-proxy`) are found by [`binary`] beside the test executable
//! (`target/<profile>/` or `target/<triple>/<profile>/`). `cargo test` on the
//! workspace builds them; with `cargo test -p strata-ctl`, run
//! `cargo build --bins` first.
// Every test binary includes this module and uses a different part of it.
#![allow(dead_code, unused_imports, unused_macros)]

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
pub use strata_e2e::{Supervisor, parse_done, parse_status};
pub use strata_test_support::procs::{is_alive, signal};
pub use strata_test_support::{
    ConfigBuilder, ModelSpec, Running, TempDir, TestConfig, binary, fake_strata_dir, free_port,
    poll_for, python, run,
};

/// Generous bound for anything that should take well under a second.
pub const SHORT: Duration = Duration::from_secs(30);
/// Bound for a whole command (a load, a stop).
pub const LONG: Duration = Duration::from_secs(90);

// ---- binaries -------------------------------------------------------------

/// The operator command under one of its two names: the same program,
/// which only calls itself by the name it was installed under.
#[derive(Clone, Copy, Debug)]
pub struct Exe {
    /// The binary's name, also the `NAME: ` in front of its own messages.
    pub name: &'static str,
    path: &'static str,
}

pub const STRATA_CTL: Exe = Exe {
    name: "strata-ctl",
    path: env!("CARGO_BIN_EXE_strata-ctl"),
};

/// The spec's name for the same program.
pub const STRATA_ROUTER: Exe = Exe {
    name: "strata-router",
    path: env!("CARGO_BIN_EXE_strata-router"),
};

impl Exe {
    pub fn path(self) -> PathBuf {
        PathBuf::from(self.path)
    }

    pub fn command(self) -> Command {
        Command::new(self.path)
    }

    /// Runs `NAME ARGS` to completion (at most [`LONG`]), capturing its output.
    pub fn run(self, args: &[&str]) -> Output {
        let mut command = self.command();
        command.args(args);
        run(command, LONG)
    }

    /// As [`run`](Self::run), with `env` added to its environment.
    pub fn run_with_env(self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = self.command();
        command.args(args).envs(env.iter().copied());
        run(command, LONG)
    }

    /// `NAME: MESSAGE`, one of its own messages.
    pub fn says(self, message: &str) -> String {
        format!("{}: {message}", self.name)
    }
}

/// `under_both_names!(test, ...)` runs each `fn test(exe: Exe)` as two
/// tests, `test::strata_ctl` and `test::strata_router`: the same assertions
/// hold under either name.
macro_rules! under_both_names {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            #[test]
            fn strata_ctl() {
                super::$test($crate::common::STRATA_CTL)
            }

            #[test]
            fn strata_router() {
                super::$test($crate::common::STRATA_ROUTER)
            }
        }
    )+};
}
pub(crate) use under_both_names;

pub fn ctl_exe() -> PathBuf {
    STRATA_CTL.path()
}

// ---- processes ----------------------------------------------------------

/// Runs `strata-ctl ARGS` to completion (at most [`LONG`]), capturing its output.
pub fn ctl(args: &[&str]) -> Output {
    STRATA_CTL.run(args)
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends each line of a pipe over a channel, as it arrives.
pub fn line_channel(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Receives lines until one satisfies `pick` (at most `limit`); returns
/// the picked value and every line seen.
pub fn wait_line<T>(
    lines: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> (T, Vec<String>) {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let picked = pick(&line);
                seen.push(line);
                if let Some(value) = picked {
                    return (value, seen);
                }
            }
            Err(_) => panic!("no line with {what}; lines so far: {seen:#?}"),
        }
    }
}

// ---- a real supervisor on the fake backend -----------------------------

/// One model of a test config: ID (= upstream name), its fake `load_ms`,
/// and whether it is installed.
pub struct TestModel {
    pub id: &'static str,
    pub load_ms: u64,
    pub installed: bool,
}

/// The ctl tests' config: the control socket is `DIR/run/control.sock`,
/// the fake's log `DIR/fake.log`. The timers are the ctl tests' own (a
/// slow, loaded machine must pass a whole load and stop); `cooldown_ms` and
/// `model_grace_ms` keep the product defaults.
pub fn ctl_config<C: From<TestConfig>>(models: &[TestModel]) -> ConfigBuilder<C> {
    let mut builder = ConfigBuilder::new("ctl")
        .unset("cooldown_ms")
        .unset("model_grace_ms")
        .wait_when_busy(true)
        .startup_ms(30000)
        .idle_ms(600000)
        .shutdown_ms(5000)
        .drain_ms(5000);
    for model in models {
        let spec = ModelSpec::new(model.id)
            .upstream_model(model.id)
            .load_ms(model.load_ms);
        builder = builder.model(if model.installed {
            spec
        } else {
            spec.not_installed()
        });
    }
    builder
}

/// Writes a [`ctl_config`] (and profiles) into `dir` and returns its path.
pub fn write_config(dir: &TempDir, models: &[TestModel]) -> PathBuf {
    let config: TestConfig = ctl_config(models).build_in(dir);
    config.path.clone()
}

/// A `status` answer from `socket` with `pid` as the daemon, if any (asked
/// with `exe status`).
pub fn daemon_answers(exe: Exe, socket: &Path, pid: u32) -> bool {
    let out = exe.run(&["status", socket.to_str().unwrap()]);
    out.status.success()
        && serde_json::from_slice::<Value>(&out.stdout)
            .is_ok_and(|line| parse_status(&line).daemon_pid == pid)
}

/// A real `strata-supervisor` on a [`ctl_config`], started and stopped by the
/// end-to-end harness (it waits until the supervisor serves, and on drop
/// kills it and any backend of the test by PID).
pub fn start_supervisor(models: &[TestModel]) -> Supervisor {
    Supervisor::start(ctl_config(models).build())
}

/// The control socket's path as `strata-ctl` takes it.
pub fn control_socket(supervisor: &Supervisor) -> &str {
    supervisor
        .config
        .control_socket
        .to_str()
        .expect("a UTF-8 socket path")
}

/// The `message` of each progress line `[   0.0s] MESSAGE`, checking the
/// format; `None` for a line that is not one.
pub fn progress_message(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('[')?;
    let (time, message) = rest.split_once("s] ")?;
    let number = time.trim_start_matches(' ');
    let (whole, tenth) = number.split_once('.')?;
    let well_formed = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && tenth.len() == 1
        && tenth.bytes().all(|b| b.is_ascii_digit())
        && time.len() >= 6;
    well_formed.then_some(message)
}

// ---- a private bin directory for `daemon` and `demo` --------------------

/// The fake proxy's source (see `fake_proxy.py`).
const FAKE_PROXY: &str = include_str!("fake_proxy.py");

/// Which strata-proxy a [`bin_dir`] holds.
pub enum ProxyKind {
    /// `fake_proxy.py`: serves /health, logs signals.
    Fake,
    /// The workspace's real strata-proxy.
    Real,
}

/// `dir/bin` holding `exe` under its name (hard link or copy:
/// `current_exe` must resolve here), strata-supervisor (symlink) and a
/// strata-proxy. Returns the path of `exe` there.
pub fn bin_dir(exe: Exe, dir: &TempDir, proxy: ProxyKind) -> PathBuf {
    let bin = dir.subdir("bin", 0o700);
    let ctl = bin.join(exe.name);
    if fs::hard_link(exe.path(), &ctl).is_err() {
        fs::copy(exe.path(), &ctl).unwrap();
    }
    std::os::unix::fs::symlink(binary("strata-supervisor"), bin.join("strata-supervisor")).unwrap();
    let proxy_path = bin.join("strata-proxy");
    match proxy {
        ProxyKind::Fake => {
            let script = format!("#!{}\n{FAKE_PROXY}", python().display());
            fs::write(&proxy_path, script).unwrap();
            fs::set_permissions(&proxy_path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        ProxyKind::Real => std::os::unix::fs::symlink(binary("strata-proxy"), &proxy_path).unwrap(),
    }
    ctl
}

/// Spawns `command` with stdout piped (as a line channel) and stderr to
/// `stderr_file`; retries briefly on ETXTBSY (a freshly copied executable
/// can still be open for writing in a child another test thread forked).
pub fn spawn_with_lines(
    mut command: Command,
    stderr_file: &Path,
    name: &str,
) -> (Running, mpsc::Receiver<String>) {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(fs::File::create(stderr_file).unwrap());
    let mut child = poll_for(
        SHORT,
        format!("{name} to spawn (ETXTBSY)"),
        || match command.spawn() {
            Ok(child) => Some(child),
            Err(err) if err.raw_os_error() == Some(nix::libc::ETXTBSY) => None,
            Err(err) => panic!("spawn {name}: {err}"),
        },
    );
    let lines = line_channel(child.stdout.take().unwrap());
    (Running::new(name, child), lines)
}

/// `(listen, supervisor pid, proxy pid)` from the serving line of `exe`.
pub fn parse_serving(exe: Exe, line: &str) -> Option<(String, u32, u32)> {
    let rest = line
        .strip_prefix(exe.name)?
        .strip_prefix(": serving on http://")?;
    let (listen, rest) = rest.split_once(" (supervisor pid ")?;
    let (supervisor, rest) = rest.split_once(", proxy pid ")?;
    let (proxy, rest) = rest.split_once(')')?;
    (rest == "; Ctrl-C stops both").then_some(())?;
    Some((listen.into(), supervisor.parse().ok()?, proxy.parse().ok()?))
}

/// One HTTP/1.0 GET; `(status line, body)`.
pub fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(SHORT)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or("").into(), body.into())
}

/// The JSON lines of a log file (empty if absent).
pub fn json_lines(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
