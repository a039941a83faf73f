//! Helpers shared by the strata-ctl integration tests: private temporary
//! directories, the Python interpreter, free ports, the sibling binaries, a
//! real `strata-supervisor` on the fake Strata backend, and processes that
//! are run with a deadline and stopped by PID.
//!
//! Binaries: `strata-ctl` is `CARGO_BIN_EXE_strata-ctl`; `strata-supervisor`
//! (and `strata-proxy`) are looked up beside it (`target/<profile>/` or
//! `target/<triple>/<profile>/`). `cargo test` on the workspace builds them;
//! with `cargo test -p strata-ctl`, run `cargo build --bins` first.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// Generous bound for anything that should take well under a second.
pub const SHORT: Duration = Duration::from_secs(30);
/// Bound for a whole command (a load, a stop).
pub const LONG: Duration = Duration::from_secs(90);

// ---- directories, interpreter, ports, binaries ---------------------------

/// A private (0700) temporary directory with a short name, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "sctl-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A new 0700 subdirectory.
    pub fn subdir(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The real Python interpreter (absolute): `STRATA_TEST_PYTHON`, else
/// `python3` from PATH, resolved through `sys.executable`.
pub fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let wanted =
            PathBuf::from(std::env::var_os("STRATA_TEST_PYTHON").unwrap_or("python3".into()));
        let found = if wanted.components().count() > 1 {
            wanted
        } else {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|dir| dir.join(&wanted))
                .find(|candidate| candidate.is_file())
                .unwrap_or_else(|| panic!("{} not found on PATH", wanted.display()))
        };
        let out = Command::new(&found)
            .args(["-c", "import sys; print(sys.executable)"])
            .stdin(Stdio::null())
            .output()
            .expect("run python");
        assert!(out.status.success(), "python -c failed");
        let exe = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(exe.is_absolute(), "sys.executable is not absolute: {exe:?}");
        exe
    })
}

/// `tests/fake_strata` (the fake backend's `strata_dir`).
pub fn fake_strata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fake_strata")
        .canonicalize()
        .expect("tests/fake_strata exists")
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two distinct free loopback ports.
pub fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

pub fn ctl_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata-ctl"))
}

/// A workspace binary beside strata-ctl.
pub fn sibling_exe(name: &str) -> PathBuf {
    let path = ctl_exe().parent().unwrap().join(name);
    assert!(
        path.is_file(),
        "{} is missing: build every binary first (cargo build --bins), or run the \
         whole workspace's tests",
        path.display()
    );
    path
}

// ---- processes ----------------------------------------------------------

/// Polls `check` until it returns `Some`, at most `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match kill(Pid::from_raw(pid as i32), None) {
        Err(Errno::ESRCH) => false,
        _ => !fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(true),
    }
}

pub fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Waits for `child` at most `limit`; on timeout kills it and panics.
pub fn wait_child(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `command` to completion (at most `limit`), capturing its output.
pub fn run(mut command: Command, limit: Duration) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn");
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    let status = wait_child(&mut child, limit, &format!("{command:?}"));
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Runs `strata-ctl ARGS`.
pub fn ctl(args: &[&str]) -> Output {
    let mut command = Command::new(ctl_exe());
    command.args(args);
    run(command, LONG)
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

/// A spawned process that is killed (by PID) and reaped if the test ends
/// early.
pub struct Running {
    pub child: Child,
    pub name: String,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        wait_child(&mut self.child, limit, &self.name)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), Signal::SIGTERM);
            let deadline = Instant::now() + SHORT;
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
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

/// Writes a config (and profiles) into `dir` and returns its path. The
/// control socket is `dir/run/control.sock`, the fake's log `dir/fake.log`.
pub fn write_config(dir: &TempDir, models: &[TestModel]) -> PathBuf {
    let run = dir.subdir("run");
    let (listen, backend) = free_ports();
    let log = dir.path().join("fake.log");
    let mut entries = serde_json::Map::new();
    for model in models {
        let profile = dir.path().join(format!("{}.json", model.id));
        fs::write(
            &profile,
            json!({"model_name": model.id, "fake": {"load_ms": model.load_ms, "log": log}})
                .to_string(),
        )
        .unwrap();
        entries.insert(
            model.id.into(),
            json!({
                "family": "qwen3.8-flash-next",
                "quantization": "q4_k_m",
                "profile": profile,
                "upstream_model": model.id,
                "installed": model.installed,
                "compatible": true,
            }),
        );
    }
    let config = json!({
        "python": python(),
        "strata_dir": fake_strata_dir(),
        "listen": format!("127.0.0.1:{listen}"),
        "backend_port": backend,
        "control_socket": run.join("control.sock"),
        "wait_when_busy": true,
        "startup_ms": 30000,
        "idle_ms": 600000,
        "shutdown_ms": 5000,
        "drain_ms": 5000,
        "models": entries,
    });
    let path = dir.path().join("config.json");
    fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// A `status` answer from `socket` with `pid` as the daemon, if any.
pub fn daemon_answers(socket: &Path, pid: u32) -> bool {
    let out = ctl(&["status", socket.to_str().unwrap()]);
    out.status.success()
        && serde_json::from_slice::<Value>(&out.stdout)
            .is_ok_and(|status| status["daemon_pid"] == json!(pid))
}

/// A real `strata-supervisor` on a config from [`write_config`], stopped by
/// PID (SIGTERM, then SIGKILL) on drop. Its stderr goes to `dir/supervisor.log`.
pub struct Supervisor {
    pub process: Running,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub fake_log: PathBuf,
    pub dir: TempDir,
}

impl Supervisor {
    pub fn start(models: &[TestModel]) -> Supervisor {
        let dir = TempDir::new();
        let config = write_config(&dir, models);
        let log = dir.path().join("supervisor.log");
        let child = Command::new(sibling_exe("strata-supervisor"))
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn strata-supervisor");
        let mut process = Running {
            child,
            name: "strata-supervisor".into(),
        };
        let socket = dir.path().join("run/control.sock");
        let pid = process.pid();
        wait_for(SHORT, "the supervisor's control socket", || {
            if let Some(status) = process.child.try_wait().unwrap() {
                panic!(
                    "strata-supervisor exited with {status}: {}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            daemon_answers(&socket, pid).then_some(())
        });
        Supervisor {
            process,
            socket,
            log,
            fake_log: dir.path().join("fake.log"),
            dir,
        }
    }

    pub fn socket(&self) -> &str {
        self.socket.to_str().unwrap()
    }

    /// The current status document.
    pub fn status(&self) -> Value {
        let out = ctl(&["status", self.socket()]);
        assert!(out.status.success(), "status failed: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status is json")
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
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

/// `dir/bin` holding strata-ctl (hard link or copy: `current_exe` must
/// resolve here), strata-supervisor (symlink) and a strata-proxy. Returns
/// the strata-ctl path.
pub fn bin_dir(dir: &TempDir, proxy: ProxyKind) -> PathBuf {
    let bin = dir.subdir("bin");
    let ctl = bin.join("strata-ctl");
    if fs::hard_link(ctl_exe(), &ctl).is_err() {
        fs::copy(ctl_exe(), &ctl).unwrap();
    }
    std::os::unix::fs::symlink(
        sibling_exe("strata-supervisor"),
        bin.join("strata-supervisor"),
    )
    .unwrap();
    let proxy_path = bin.join("strata-proxy");
    match proxy {
        ProxyKind::Fake => {
            let script = format!("#!{}\n{FAKE_PROXY}", python().display());
            fs::write(&proxy_path, script).unwrap();
            fs::set_permissions(&proxy_path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        ProxyKind::Real => {
            std::os::unix::fs::symlink(sibling_exe("strata-proxy"), &proxy_path).unwrap()
        }
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
    let deadline = Instant::now() + SHORT;
    let mut child = loop {
        match command.spawn() {
            Ok(child) => break child,
            Err(err) if err.raw_os_error() == Some(nix::libc::ETXTBSY) => {
                assert!(Instant::now() < deadline, "{name}: {err}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) => panic!("spawn {name}: {err}"),
        }
    };
    let lines = line_channel(child.stdout.take().unwrap());
    (
        Running {
            child,
            name: name.into(),
        },
        lines,
    )
}

/// `(listen, supervisor pid, proxy pid)` from the serving line.
pub fn parse_serving(line: &str) -> Option<(String, u32, u32)> {
    let rest = line.strip_prefix("strata-ctl: serving on http://")?;
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
