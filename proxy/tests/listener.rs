//! Tests for `strata_proxy::server::listener::take_listener`.
//!
//! Socket activation is tested on real inherited descriptors: each case runs
//! `tests/launch_with_fd3.py`, which creates the socket(s) itself, places them at fd 3 (4, ...),
//! sets `LISTEN_*` as asked (correctly or not) and exec()s this very test executable with
//! `--exact adopter_child`. In that child, [`adopter_child`] calls `take_listener(EXPECT, true)`
//! and prints machine-readable lines (`LISTENER-CHILD: ...`); when it adopted a socket it also
//! serves one connection with `hello`, so the parent proves the adopted socket is the one the
//! launcher created (the parent never holds it). Without `STRATA_LISTENER_TEST_ROLE`,
//! `adopter_child` is a no-op that passes.
//!
//! The launcher execs in place, so the spawned child *is* the adopter: it is killed and reaped
//! by a drop guard, and every wait is bounded (the stdout pipe reaching EOF marks its exit; no
//! sleeps are used for synchronisation).
//!
//! Python: `strata_test_support::python` (`$STRATA_TEST_PYTHON`, else `python3` on `PATH`).
//!
//! Ports for `--bind` come from `free_port_outside_ephemeral`: the launcher binds them, not this
//! process, and a taken one is retried.
//!
//! Threads: libtest runs `adopter_child` on a thread of its own, so the child process is not
//! strictly single-threaded when `take_listener` removes the `LISTEN_*` variables. Its only other
//! thread is libtest's main thread blocked on a channel, which does not read the environment; the
//! real daemon calls `take_listener` from `main` before any thread exists.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use strata_proxy::server::listener::{ListenerError, take_listener};
use strata_test_support::{Running, free_port_outside_ephemeral, python, repo_root};

const ROLE_ENV: &str = "STRATA_LISTENER_TEST_ROLE";
const EXPECT_ENV: &str = "STRATA_LISTENER_TEST_EXPECT";
const CHILD_TEST: &str = "adopter_child";
const MARK: &str = "LISTENER-CHILD: ";
const ACTIVATION_VARS: [&str; 4] = [
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "LISTEN_FDS_FIRST_FD",
];
/// Generous: a debug test binary can be slow to start on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);
/// Launcher exit status: `--bind` address in use.
const EXIT_ADDRINUSE: i32 = 98;

// ---------------------------------------------------------------------------------------------
// The child side.

fn variant(e: &ListenerError) -> &'static str {
    match e {
        ListenerError::NotLoopback { .. } => "NotLoopback",
        ListenerError::NotActivated { .. } => "NotActivated",
        ListenerError::WrongPid { .. } => "WrongPid",
        ListenerError::MalformedFdCount { .. } => "MalformedFdCount",
        ListenerError::WrongFdCount { .. } => "WrongFdCount",
        ListenerError::UnsupportedFirstFd { .. } => "UnsupportedFirstFd",
        ListenerError::NotAListeningTcpSocket { .. } => "NotAListeningTcpSocket",
        ListenerError::WrongAddress { .. } => "WrongAddress",
        ListenerError::Bind { .. } => "Bind",
        ListenerError::Io { .. } => "Io",
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{MARK}{line}").unwrap();
    out.flush().unwrap();
}

/// The adopter, run only inside a child started by [`Adopter::spawn`]; a no-op otherwise.
#[test]
fn adopter_child() {
    let Some(role) = std::env::var_os(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "adopt", "unknown {ROLE_ENV}");
    let expected: SocketAddr = std::env::var(EXPECT_ENV)
        .expect("expected address")
        .parse()
        .expect("expected address parses");
    let listener = match take_listener(expected, true) {
        Ok(listener) => listener,
        Err(e) => {
            say(&format!("ERROR {} {e}", variant(&e)));
            return;
        }
    };
    say(&format!("ADOPTED {}", listener.local_addr().unwrap()));
    say(&format!("FD {}", listener.as_raw_fd()));
    let fd_flags = FdFlag::from_bits_truncate(fcntl(listener.as_fd(), FcntlArg::F_GETFD).unwrap());
    say(&format!(
        "CLOEXEC {}",
        fd_flags.contains(FdFlag::FD_CLOEXEC)
    ));
    let fl_flags = OFlag::from_bits_truncate(fcntl(listener.as_fd(), FcntlArg::F_GETFL).unwrap());
    say(&format!(
        "NONBLOCKING {}",
        fl_flags.contains(OFlag::O_NONBLOCK)
    ));
    let left: Vec<&str> = ACTIVATION_VARS
        .iter()
        .copied()
        .filter(|name| std::env::var_os(name).is_some())
        .collect();
    say(&format!(
        "ENV {}",
        if left.is_empty() {
            "clean".to_owned()
        } else {
            left.join(",")
        }
    ));
    // Serve exactly one connection. Blocking accept: if the parent never connects, it kills us.
    listener.set_nonblocking(false).unwrap();
    say("SERVING");
    let (mut conn, _) = listener.accept().unwrap();
    conn.write_all(b"hello\n").unwrap();
    say("SERVED");
}

// ---------------------------------------------------------------------------------------------
// The parent side.

fn launcher() -> PathBuf {
    repo_root().join("tests/launch_with_fd3.py")
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A running adopter child (the launcher exec()s into it, so this is one process). Killed and
/// reaped on drop.
struct Adopter {
    child: Running,
    lines: Receiver<String>,
    /// Every stdout line so far (diagnostics).
    transcript: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    status: Option<ExitStatus>,
}

enum Next {
    Line(String),
    Exited(ExitStatus),
}

impl Adopter {
    /// Start the adopter child through the launcher with `launcher_args`, or directly (no
    /// activation at all) when `launcher_args` is `None`.
    fn spawn(launcher_args: Option<&[&str]>, expect: SocketAddr, env: &[(&str, &str)]) -> Self {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = match launcher_args {
            Some(args) => {
                let mut c = Command::new(python());
                c.arg(launcher()).args(args).arg("--").arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.args([
            "--exact",
            CHILD_TEST,
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(ROLE_ENV, "adopt")
        .env(EXPECT_ENV, expect.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        for name in ACTIVATION_VARS {
            cmd.env_remove(name);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e} (set STRATA_TEST_PYTHON?)", cmd));
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Adopter {
            child: Running::new("adopter", child).kill_on_drop(),
            lines,
            transcript: Vec::new(),
            stderr: Some(stderr),
            status: None,
        }
    }

    /// The next stdout line, or the exit status once stdout reached EOF (the process exited:
    /// nothing else holds the pipe). Panics after [`DEADLINE`].
    fn next(&mut self, deadline: Instant) -> Next {
        if let Some(status) = self.status {
            return Next::Exited(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => {
                self.transcript.push(line.clone());
                Next::Line(line)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait(DEADLINE);
                self.status = Some(status);
                Next::Exited(status)
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("adopter timed out; {}", self.diagnostics())
            }
        }
    }

    /// The next `LISTENER-CHILD:` line's payload (or the launcher's `BOUND` line when `bound`).
    fn next_marked(&mut self, deadline: Instant) -> Result<String, ExitStatus> {
        loop {
            match self.next(deadline) {
                Next::Line(line) => {
                    if let Some(pos) = line.find(MARK) {
                        return Ok(line[pos + MARK.len()..].to_owned());
                    }
                    if line.starts_with("BOUND ") {
                        return Ok(line);
                    }
                }
                Next::Exited(status) => return Err(status),
            }
        }
    }

    fn expect_marked(&mut self, deadline: Instant) -> String {
        match self.next_marked(deadline) {
            Ok(s) => s,
            Err(status) => panic!(
                "adopter exited ({status}) before reporting; {}",
                self.diagnostics()
            ),
        }
    }

    /// Wait (bounded) for the exit and require success.
    fn expect_success(&mut self, deadline: Instant) {
        loop {
            if let Next::Exited(status) = self.next(deadline) {
                assert!(
                    status.success(),
                    "adopter failed ({status}); {}",
                    self.diagnostics()
                );
                return;
            }
        }
    }

    fn diagnostics(&mut self) -> String {
        // Only when the process is gone is the stderr thread sure to finish.
        let stderr = if self.status.is_some() || !self.child.is_running() {
            self.stderr
                .take()
                .map(|h| h.join().unwrap_or_default())
                .unwrap_or_default()
        } else {
            "(still running)".to_owned()
        };
        format!("stdout: {:?}\nstderr: {stderr}", self.transcript)
    }
}

/// What an activation attempt in the child came to.
#[derive(Debug)]
enum Outcome {
    /// `ERROR <variant> <message>`.
    Refused { variant: String, message: String },
    /// `ADOPTED <addr>`, the adopter still running and serving one connection.
    Adopted { addr: String, adopter: Adopter },
}

impl std::fmt::Debug for Adopter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Adopter(pid {})", self.child.pid())
    }
}

/// The launcher could not bind the requested port (someone took it meanwhile).
struct PortTaken;

/// Run the adopter through the launcher with `args`, and `--bind 127.0.0.1:PORT` when `bind_port`.
fn try_activate(
    args: &[&str],
    bind_port: Option<u16>,
    expect: SocketAddr,
    env: &[(&str, &str)],
) -> Result<Outcome, PortTaken> {
    let bind = bind_port.map(|p| loopback(p).to_string());
    let mut full: Vec<&str> = args.to_vec();
    if let Some(b) = &bind {
        full.extend(["--bind", b]);
    }
    let mut adopter = Adopter::spawn(Some(&full), expect, env);
    let deadline = Instant::now() + DEADLINE;
    let line = match adopter.next_marked(deadline) {
        Ok(line) => line,
        Err(status) if status.code() == Some(EXIT_ADDRINUSE) => return Err(PortTaken),
        Err(status) => panic!("launcher failed ({status}); {}", adopter.diagnostics()),
    };
    let bound = line
        .strip_prefix("BOUND ")
        .unwrap_or_else(|| panic!("expected the BOUND line first, got {line:?}"));
    if let Some(b) = &bind {
        assert_eq!(bound, b, "the launcher bound what it was asked to");
    }
    Ok(finish(adopter, deadline))
}

/// Through the launcher without `--bind` (its socket, if any, gets an OS-chosen port).
fn activate(args: &[&str], expect: SocketAddr) -> Outcome {
    try_activate(args, None, expect, &[]).unwrap_or_else(|_| unreachable!("no --bind"))
}

/// Through the launcher with `--bind` on a free port, retried on another port if that one gets
/// taken meanwhile. `expect` maps the bound port to the address the child must expect.
fn activate_on_free_port(
    args: &[&str],
    env: &[(&str, &str)],
    expect: impl Fn(u16) -> SocketAddr,
) -> (u16, Outcome) {
    for _ in 0..5 {
        let port = free_port_outside_ephemeral();
        if let Ok(outcome) = try_activate(args, Some(port), expect(port), env) {
            return (port, outcome);
        }
    }
    panic!("could not bind a free port in 5 attempts");
}

fn finish(mut adopter: Adopter, deadline: Instant) -> Outcome {
    let line = adopter.expect_marked(deadline);
    if let Some(rest) = line.strip_prefix("ERROR ") {
        let (variant, message) = rest.split_once(' ').unwrap_or((rest, ""));
        adopter.expect_success(deadline);
        return Outcome::Refused {
            variant: variant.to_owned(),
            message: message.to_owned(),
        };
    }
    if let Some(addr) = line.strip_prefix("ADOPTED ") {
        return Outcome::Adopted {
            addr: addr.to_owned(),
            adopter,
        };
    }
    panic!("unexpected report {line:?}; {}", adopter.diagnostics())
}

fn refused(outcome: Outcome) -> (String, String) {
    match outcome {
        Outcome::Refused { variant, message } => (variant, message),
        Outcome::Adopted { addr, .. } => panic!("adopted {addr}, expected a refusal"),
    }
}

fn assert_refused(outcome: Outcome, want_variant: &str, want_in_message: &str) {
    let (variant, message) = refused(outcome);
    assert_eq!(variant, want_variant, "message: {message}");
    assert!(
        message.contains(want_in_message),
        "{message:?} should mention {want_in_message:?}"
    );
    assert_message_style(&message);
}

fn assert_message_style(message: &str) {
    assert!(!message.is_empty());
    assert!(
        !message.starts_with(|c: char| c.is_ascii_uppercase()),
        "starts lowercase: {message:?}"
    );
    assert!(!message.ends_with('.'), "no trailing period: {message:?}");
    assert!(!message.contains('\n'), "one line: {message:?}");
}

// ---------------------------------------------------------------------------------------------
// Activation cases.

#[test]
fn activation_accepted_serves_the_launchers_socket() {
    let (port, outcome) = activate_on_free_port(&[], &[], loopback);
    let Outcome::Adopted { addr, mut adopter } = outcome else {
        panic!("refused: {outcome:?}");
    };
    assert_eq!(addr, loopback(port).to_string());
    let deadline = Instant::now() + DEADLINE;
    assert_eq!(adopter.expect_marked(deadline), "FD 3");
    assert_eq!(adopter.expect_marked(deadline), "CLOEXEC true");
    assert_eq!(adopter.expect_marked(deadline), "NONBLOCKING true");
    assert_eq!(
        adopter.expect_marked(deadline),
        "ENV clean",
        "LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are removed"
    );
    assert_eq!(adopter.expect_marked(deadline), "SERVING");

    // Only the child holds the socket the launcher created (the launcher exec()ed into it and
    // this process never had it): a greeting on that port proves the adopted socket is it.
    let mut conn = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(10))
        .expect("connect to the adopted socket");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut greeting = String::new();
    conn.read_to_string(&mut greeting)
        .expect("read the greeting");
    assert_eq!(greeting, "hello\n");
    assert_eq!(adopter.expect_marked(deadline), "SERVED");
    adopter.expect_success(deadline);
}

#[test]
fn activation_accepted_with_empty_fdnames_and_first_fd_3() {
    // An empty LISTEN_FDNAMES is no reason to refuse, nor is a LISTEN_FDS_FIRST_FD that says 3.
    let (_, outcome) = activate_on_free_port(
        &["--fdnames", ""],
        &[("LISTEN_FDS_FIRST_FD", "3")],
        loopback,
    );
    let Outcome::Adopted { mut adopter, .. } = outcome else {
        panic!("refused: {outcome:?}");
    };
    let deadline = Instant::now() + DEADLINE;
    for want in ["FD 3", "CLOEXEC true", "NONBLOCKING true"] {
        assert_eq!(adopter.expect_marked(deadline), want);
    }
    // LISTEN_FDS_FIRST_FD is not ours to remove (that would need `unsafe`); the three systemd
    // variables are gone.
    assert_eq!(adopter.expect_marked(deadline), "ENV LISTEN_FDS_FIRST_FD");
}

#[test]
fn activation_refuses_another_processes_pid() {
    let (_, outcome) = activate_on_free_port(&["--listen-pid", "other"], &[], loopback);
    assert_refused(outcome, "WrongPid", "another process");
}

#[test]
fn activation_refuses_garbage_pid() {
    let (_, outcome) = activate_on_free_port(&["--listen-pid", "garbage"], &[], loopback);
    assert_refused(outcome, "WrongPid", "\"not-a-pid\"");
}

#[test]
fn activation_refuses_empty_pid() {
    // listenfd itself would accept an empty LISTEN_PID.
    let (_, outcome) = activate_on_free_port(&["--listen-pid", "empty"], &[], loopback);
    assert_refused(outcome, "WrongPid", "LISTEN_PID=\"\"");
}

#[test]
fn activation_refuses_unset_pid() {
    // listenfd itself would accept a missing LISTEN_PID.
    let (_, outcome) = activate_on_free_port(&["--listen-pid", "unset"], &[], loopback);
    assert_refused(outcome, "NotActivated", "LISTEN_PID missing");
}

#[test]
fn activation_refuses_two_fds() {
    let (_, outcome) = activate_on_free_port(&["--fds", "2"], &[], loopback);
    assert_refused(outcome, "WrongFdCount", "passed 2 sockets");
}

#[test]
fn activation_refuses_zero_fds() {
    let outcome = activate(&["--fds", "0"], loopback(free_port_outside_ephemeral()));
    assert_refused(outcome, "WrongFdCount", "passed 0 sockets");
}

#[test]
fn activation_refuses_malformed_fd_count() {
    let (_, outcome) = activate_on_free_port(&["--listen-fds", "1x"], &[], loopback);
    assert_refused(outcome, "MalformedFdCount", "LISTEN_FDS=\"1x\"");
    let (_, outcome) = activate_on_free_port(&["--listen-fds", "+1"], &[], loopback);
    assert_refused(outcome, "MalformedFdCount", "LISTEN_FDS=\"+1\"");
}

#[test]
fn activation_refuses_listenfd_first_fd_elsewhere() {
    let (_, outcome) = activate_on_free_port(&[], &[("LISTEN_FDS_FIRST_FD", "4")], loopback);
    assert_refused(outcome, "UnsupportedFirstFd", "LISTEN_FDS_FIRST_FD=\"4\"");
}

#[test]
fn activation_refuses_a_bound_but_not_listening_socket() {
    let (_, outcome) = activate_on_free_port(&["--no-listen"], &[], loopback);
    assert_refused(outcome, "NotAListeningTcpSocket", "not listening");
}

#[test]
fn activation_refuses_the_wrong_port() {
    let other = free_port_outside_ephemeral();
    let (port, outcome) = activate_on_free_port(&[], &[], |_| loopback(other));
    if port == other {
        return; // vanishingly unlikely; nothing to test then
    }
    let (variant, message) = refused(outcome);
    assert_eq!(variant, "WrongAddress", "{message}");
    assert!(
        message.contains(&format!(
            "bound to {} but listen is {}",
            loopback(port),
            loopback(other)
        )),
        "{message}"
    );
    assert_message_style(&message);
}

#[test]
fn activation_refuses_the_wrong_ip() {
    let (port, outcome) =
        activate_on_free_port(&[], &[], |p| SocketAddr::from(([127, 0, 0, 2], p)));
    assert_refused(
        outcome,
        "WrongAddress",
        &format!("bound to 127.0.0.1:{port} but listen is 127.0.0.2:{port}"),
    );
}

#[test]
fn activation_refuses_non_tcp_descriptors() {
    for (kind, why) in [
        ("udp", "fd 3 is not a valid tcp socket"),
        ("unix", "fd 3 is not a valid tcp socket"),
        ("file", "fd 3 is not a socket"),
        ("none", "not a listening TCP socket"),
    ] {
        let outcome = activate(&["--kind", kind], loopback(free_port_outside_ephemeral()));
        let (variant, message) = refused(outcome);
        assert_eq!(variant, "NotAListeningTcpSocket", "{kind}: {message}");
        assert!(message.contains(why), "{kind}: {message}");
        assert_message_style(&message);
    }
}

#[test]
fn activation_required_but_missing_is_an_error() {
    // No launcher at all: no LISTEN_* variables. Never falls back to binding.
    let adopter = Adopter::spawn(None, loopback(free_port_outside_ephemeral()), &[]);
    let outcome = finish(adopter, Instant::now() + DEADLINE);
    assert_refused(outcome, "NotActivated", "LISTEN_PID and LISTEN_FDS missing");
}

#[test]
fn activation_refuses_non_loopback_before_looking_at_the_environment() {
    // Checked first, so this is safe in-process: nothing reads or changes LISTEN_*.
    let err = take_listener("0.0.0.0:8088".parse().unwrap(), true).unwrap_err();
    assert!(matches!(err, ListenerError::NotLoopback { .. }), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The direct binding path (activation not required).

#[test]
fn bind_path_binds_loopback_non_blocking() {
    let listener = take_listener(loopback(0), false).expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let fd_flags = FdFlag::from_bits_truncate(fcntl(listener.as_fd(), FcntlArg::F_GETFD).unwrap());
    assert!(fd_flags.contains(FdFlag::FD_CLOEXEC));
    // Non-blocking: accept with nothing pending returns at once.
    let err = listener.accept().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    // And it really listens.
    // And it really listens (the connection completes in the backlog; accept then returns it).
    let _client = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    listener.set_nonblocking(false).unwrap();
    let (_conn, peer) = listener.accept().unwrap();
    assert!(peer.ip().is_loopback());
}

#[test]
fn bind_path_refuses_non_loopback() {
    for addr in [
        "0.0.0.0:0",
        "192.0.2.1:8088",
        "[::]:0",
        "[::ffff:127.0.0.1]:0",
    ] {
        let addr: SocketAddr = addr.parse().unwrap();
        let err = take_listener(addr, false).unwrap_err();
        assert!(
            matches!(err, ListenerError::NotLoopback { listen } if listen == addr),
            "{addr}: {err}"
        );
        assert_message_style(&err.to_string());
    }
}

#[test]
fn bind_path_reports_a_taken_port() {
    let taken = TcpListener::bind(loopback(0)).unwrap();
    let addr = taken.local_addr().unwrap();
    let err = take_listener(addr, false).unwrap_err();
    assert!(matches!(err, ListenerError::Bind { .. }), "{err}");
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert_message_style(&err.to_string());
}

#[test]
fn every_message_is_lowercase_single_line_without_period() {
    let a = loopback(8088);
    let b = loopback(8089);
    let errors = [
        ListenerError::NotLoopback { listen: a },
        ListenerError::NotActivated {
            missing: "LISTEN_FDS",
        },
        ListenerError::WrongPid {
            value: "1".into(),
            own: 2,
        },
        ListenerError::MalformedFdCount { value: "x".into() },
        ListenerError::WrongFdCount { n: 2 },
        ListenerError::UnsupportedFirstFd { value: "4".into() },
        ListenerError::NotAListeningTcpSocket {
            reason: "bound but not listening".into(),
        },
        ListenerError::WrongAddress {
            bound: a,
            expected: b,
        },
        ListenerError::Bind {
            listen: a,
            error: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        },
        ListenerError::Io {
            context: "make the passed socket non-blocking",
            error: std::io::Error::from(std::io::ErrorKind::Other),
        },
    ];
    for e in &errors {
        assert_message_style(&e.to_string());
        let _: &dyn std::error::Error = e;
    }
    assert!(
        ListenerError::NotActivated {
            missing: "LISTEN_FDS"
        }
        .to_string()
        .contains(".socket unit")
    );
}
