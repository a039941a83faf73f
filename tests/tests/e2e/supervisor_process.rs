//! The `strata-supervisor` process: parent-death of the backend, the backend's environment and
//! stdio, socket safety, signals, config errors and the open-file limit.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::resource::{Resource, getrlimit};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::{
    ConfigBuilder, DEADLINE, FakeProxy, ModelSpec, Supervisor, TempDir, TestConfig, binary,
    poll_until, procs, spawn_supervisor, with_ulimit, wrap_command,
};
use strata_protocol::wire::LeaseFailure;

const A: &str = "flash-a";

fn loaded_pid(supervisor: &Supervisor) -> u32 {
    let reply = supervisor.control().on(Some(A));
    reply.assert_ok();
    reply.status().child_pid.expect("child_pid")
}

/// SIGKILL of the supervisor takes the backend with it (parent-death signal).
#[test]
fn sigkill_of_the_supervisor_kills_the_backend() {
    let config = ConfigBuilder::new("pdeath")
        .model(ModelSpec::new(A))
        .build();
    let mut supervisor = Supervisor::start(config);
    let pid = loaded_pid(&supervisor);
    assert!(procs::is_alive(pid));
    supervisor.daemon().kill(Signal::SIGKILL);
    let status = supervisor.daemon().wait_exit(DEADLINE);
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32));
    poll_until(DEADLINE, "the orphaned backend to die", || {
        !procs::is_alive(pid) && !procs::group_alive(pid)
    });
    supervisor.fake_log().assert_no_backends_left();
}

/// The backend inherits the supervisor's environment minus `STRATA_API_KEY`, `LISTEN_PID`,
/// `LISTEN_FDS`, `LISTEN_FDNAMES` and `NOTIFY_SOCKET`; the supervisor itself notifies
/// `READY=1` once serving and `STOPPING=1` on SIGTERM.
#[test]
fn the_backend_environment_is_scrubbed() {
    let config = ConfigBuilder::new("env").model(ModelSpec::new(A)).build();
    let notify_path = config.dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    notify
        .set_read_timeout(Some(DEADLINE))
        .expect("notify read timeout");
    let supervisor = Supervisor::start_with(config, |command| {
        command
            .env("STRATA_API_KEY", "not-for-the-backend")
            .env("LISTEN_PID", "1")
            .env("LISTEN_FDS", "1")
            .env("LISTEN_FDNAMES", "http")
            .env("NOTIFY_SOCKET", &notify_path)
            .env("KEEP_ME", "yes");
    });
    let mut datagram = [0u8; 512];
    let n = notify.recv(&mut datagram).expect("READY=1 notification");
    let text = String::from_utf8_lossy(&datagram[..n]).into_owned();
    assert!(text.lines().any(|line| line == "READY=1"), "{text:?}");

    let pid = loaded_pid(&supervisor);
    let log = supervisor.fake_log();
    let start = log.starts().remove(0);
    assert_eq!(start.pid, pid);
    let keys: BTreeSet<&str> = start.env_keys.iter().map(String::as_str).collect();
    for scrubbed in [
        "STRATA_API_KEY",
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
        "NOTIFY_SOCKET",
    ] {
        assert!(
            !keys.contains(scrubbed),
            "{scrubbed} reached the backend: {keys:?}"
        );
    }
    assert!(keys.contains("KEEP_ME"), "{keys:?}");
    assert!(keys.contains("PYTHONDONTWRITEBYTECODE"), "{keys:?}");

    // The exact command line of the backend contract, read from the live process.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("backend cmdline");
    let argv: Vec<String> = cmdline
        .split(|byte| *byte == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect();
    let config = &supervisor.config;
    let ready_file = argv.last().expect("argv").clone();
    let expected = [
        strata_e2e::python().to_string_lossy().into_owned(),
        "-m".into(),
        "serve.server".into(),
        "--engine".into(),
        "strata".into(),
        "--config".into(),
        config.profile_path(A).to_string_lossy().into_owned(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        config.backend_port.to_string(),
        "--idle-unload".into(),
        "0".into(),
        "--ready-file".into(),
        ready_file.clone(),
    ];
    assert_eq!(argv, expected);
    assert!(
        std::path::Path::new(&ready_file).starts_with(&config.run_dir),
        "the ready file lives in the private run directory: {ready_file}"
    );

    supervisor.stop();
    let n = notify.recv(&mut datagram).expect("STOPPING=1 notification");
    let text = String::from_utf8_lossy(&datagram[..n]).into_owned();
    assert!(text.lines().any(|line| line == "STOPPING=1"), "{text:?}");
}

/// The backend's stdin, stdout and stderr are `/dev/null` (the backend contract: its output
/// is discarded, which keeps whatever Strata prints, profile secrets included, out of the
/// supervisor's log and the journal). The supervisor's own three are something else here (a
/// file on stdin, its output files on stdout and stderr), so a backend that inherited any of
/// them would show it.
#[test]
fn the_backend_stdio_is_dev_null() {
    let config = ConfigBuilder::new("stdio").model(ModelSpec::new(A)).build();
    let stdin = config.dir.join("supervisor.stdin");
    std::fs::write(&stdin, "").expect("write the supervisor's stdin file");
    let supervisor = Supervisor::start_wrapped(config, |inner| {
        // The harness gives every daemon /dev/null on stdin; this shell replaces it in place.
        let mut shell = Command::new("/bin/sh");
        shell
            .arg("-c")
            .arg("exec \"$0\" \"$@\" < \"$STRATA_TEST_STDIN\"")
            .env("STRATA_TEST_STDIN", &stdin);
        wrap_command(shell, &inner)
    });
    let fd_target = |pid: u32, fd: u32| -> PathBuf {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .unwrap_or_else(|err| panic!("readlink /proc/{pid}/fd/{fd}: {err}"))
    };
    let dev_null = Path::new("/dev/null");
    let own: Vec<PathBuf> = (0..3).map(|fd| fd_target(supervisor.pid(), fd)).collect();
    let stdin = stdin.canonicalize().expect("canonical stdin path");
    assert_eq!(own[0], stdin, "the supervisor's stdin");
    assert!(
        own.iter().all(|target| target != dev_null),
        "the supervisor's own fds 0-2 must not be /dev/null for this test to see anything: {own:?}"
    );

    let pid = loaded_pid(&supervisor);
    let backend: Vec<PathBuf> = (0..3).map(|fd| fd_target(pid, fd)).collect();
    assert_eq!(
        backend, [dev_null; 3],
        "the backend's fds 0-2 (the supervisor's: {own:?})"
    );
    supervisor.stop();
}

fn assert_exits_refusing(config: &TestConfig, name: &str, needles: &[&str]) -> String {
    let mut daemon = spawn_supervisor(config, name);
    let status = daemon.wait_exit(DEADLINE);
    let stderr = daemon.stderr();
    assert!(!status.success(), "{name} should fail\n{stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{name}: stderr lacks {needle:?}:\n{stderr}"
        );
    }
    stderr
}

/// A socket directory with any group or other permission makes the supervisor exit non-zero,
/// naming the directory, before it binds anything.
#[test]
fn a_socket_directory_open_to_others_is_refused() {
    for mode in [0o750, 0o701] {
        let config = ConfigBuilder::new("opendir")
            .model(ModelSpec::new(A))
            .run_dir_mode(mode)
            .build();
        let dir = config.run_dir.to_string_lossy().into_owned();
        assert_exits_refusing(
            &config,
            "supervisor",
            &[&dir, "no group or other permissions"],
        );
        assert!(!config.control_socket.exists());
        assert!(!config.supervisor_socket.exists());
    }
}

/// A second supervisor on the same sockets exits non-zero saying another daemon serves; the
/// first keeps working.
#[test]
fn a_second_supervisor_does_not_take_over() {
    let config = ConfigBuilder::new("second")
        .model(ModelSpec::new(A))
        .build();
    let supervisor = Supervisor::start(config);
    let first_pid = supervisor.pid();
    assert_exits_refusing(
        &supervisor.config,
        "second",
        &[
            "another daemon is serving on this socket",
            &supervisor.config.control_socket.to_string_lossy(),
        ],
    );
    let status = supervisor.status();
    assert_eq!(status.daemon_pid, first_pid);
    assert!(supervisor.config.supervisor_socket.exists());
    loaded_pid(&supervisor);
    supervisor.stop();
}

/// Stale socket files (nobody listening) are replaced; a path that is not a socket is not;
/// both sockets are created with mode 0600.
#[tokio::test]
async fn stale_sockets_are_replaced_and_new_ones_are_private() {
    let config = ConfigBuilder::new("stale").model(ModelSpec::new(A)).build();
    for path in [&config.control_socket, &config.supervisor_socket] {
        drop(UnixListener::bind(path).expect("bind a soon-stale socket"));
        assert!(
            path.exists(),
            "the stale file stays after the listener closes"
        );
    }
    let supervisor = Supervisor::start(config);
    for path in [
        &supervisor.config.control_socket,
        &supervisor.config.supervisor_socket,
    ] {
        let meta = std::fs::symlink_metadata(path).expect("socket metadata");
        assert!(meta.file_type().is_socket(), "{}", path.display());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o600,
            "{} mode",
            path.display()
        );
    }
    let mut proxy = FakeProxy::connect(&supervisor.config).await;
    proxy.acquire(1, A).await;
    proxy.wait_granted(1).await;
    drop(proxy);
    supervisor.stop();

    let config = ConfigBuilder::new("notsock")
        .model(ModelSpec::new(A))
        .build();
    std::fs::write(&config.control_socket, "not a socket").expect("write a regular file");
    assert_exits_refusing(&config, "supervisor", &["is not a socket"]);
    assert_eq!(
        std::fs::read_to_string(&config.control_socket).expect("still there"),
        "not a socket"
    );
}

/// SIGTERM: the backend is stopped (gracefully), both sockets are removed, exit status 0.
#[test]
fn sigterm_stops_the_backend_and_removes_the_sockets() {
    let config = ConfigBuilder::new("sigterm")
        .model(ModelSpec::new(A))
        .build();
    let supervisor = Supervisor::start(config);
    let pid = loaded_pid(&supervisor);
    let log = supervisor.fake_log();
    // `stop` asserts exit 0, both sockets gone and no backend left.
    supervisor.stop();
    assert!(!procs::group_alive(pid));
    assert!(
        log.index_of(pid, "stop").is_some(),
        "the backend got SIGTERM first\n{}",
        log.dump()
    );
}

/// At start the supervisor raises its soft open-file limit to the hard limit (started here
/// with a soft limit of 100) and logs the result.
#[test]
fn the_open_file_limit_is_raised_to_the_hard_limit_and_logged() {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    assert!(
        hard > 100,
        "this test needs a hard open-file limit above 100, not {hard}"
    );
    let config = ConfigBuilder::new("nofile")
        .model(ModelSpec::new(A))
        .build();
    let mut supervisor =
        Supervisor::start_wrapped(config, |command| with_ulimit("-S -n 100", &command));
    assert_eq!(
        procs::open_file_limits(supervisor.pid()),
        Some((hard, hard))
    );
    let stderr = supervisor.daemon().stderr();
    let logged: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("open file limit:"))
        .collect();
    assert_eq!(logged.len(), 1, "{stderr}");
    assert!(
        logged[0].ends_with(&format!("open file limit: {hard}")),
        "{stderr}"
    );
    supervisor.stop();
}

/// During a SIGTERM drain, proxies see `draining`, new leases fail with `ShuttingDown`, and an
/// active lease is revoked once `drain_ms` has passed; then the supervisor exits 0.
#[tokio::test]
async fn sigterm_drains_active_leases_up_to_drain_ms() {
    let config = ConfigBuilder::new("drain")
        .model(ModelSpec::new(A))
        .drain_ms(800)
        .build();
    let mut supervisor = Supervisor::start(config);
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy.wait_granted(1).await;
    let pid = supervisor.status().child_pid.expect("pid");

    supervisor.terminate();
    proxy.wait_state("draining", |state| state.draining).await;
    let status = supervisor.status();
    assert!(status.draining);
    assert_eq!(
        status.loaded.as_deref(),
        Some(A),
        "the lease keeps the model"
    );
    proxy.acquire(2, A).await;
    assert_eq!(proxy.wait_failed(2).await, LeaseFailure::ShuttingDown);
    assert!(procs::is_alive(pid));
    proxy.wait_revoked(1).await;
    assert!(proxy.wait_closed(DEADLINE).await, "the link closes at exit");
    supervisor.stop();
    assert!(!procs::group_alive(pid));
}

/// An invalid config: exit status 78 before any socket exists, stderr naming the JSON path.
#[test]
fn an_invalid_config_exits_78_naming_the_json_path() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 3] = [
        (
            "relprofile",
            |json| json["models"][A]["profile"] = json!("profiles/flash-a.json"),
            "models[\"flash-a\"].profile",
        ),
        (
            "typo",
            |json| json["lsiten"] = json!("127.0.0.1:1"),
            "lsiten",
        ),
        (
            "noport",
            |json| {
                json.as_object_mut().expect("object").remove("backend_port");
            },
            "backend_port",
        ),
    ];
    for (tag, edit, json_path) in cases {
        let config = ConfigBuilder::new(tag)
            .model(ModelSpec::new(A))
            .edit(edit)
            .build();
        let mut daemon = spawn_supervisor(&config, "supervisor");
        let status = daemon.wait_exit(DEADLINE);
        let stderr = daemon.stderr();
        assert_eq!(status.code(), Some(78), "{tag}: {status}\n{stderr}");
        assert!(stderr.contains(json_path), "{tag}: {stderr}");
        assert!(stderr.contains("config error"), "{tag}: {stderr}");
        let left: Vec<_> = std::fs::read_dir(&config.run_dir)
            .expect("run dir")
            .collect();
        assert!(left.is_empty(), "{tag}: {left:?}");
        assert!(config.fake_log().events().is_empty());
    }
}

/// SIGTERM during a slow `on` drains: the load may finish, but only for `drain_ms` (legacy
/// default: `shutdown_ms`, 2 s here). When the drain ends the operation fails, the load is
/// cancelled at its next readiness poll (long before it would finish), and the supervisor exits
/// 0.
#[test]
fn the_drain_deadline_cancels_a_slow_load() {
    let config = ConfigBuilder::new("termload")
        .model(ModelSpec::new(A).load_ms(8_000))
        .build();
    let mut supervisor = Supervisor::start(config);
    let log = supervisor.fake_log();
    let mut session = supervisor.control().open(&strata_e2e::on_line(Some(A)));
    session.wait_progress(DEADLINE, "started, waiting for readiness");
    let pid = strata_e2e::poll_for(DEADLINE, "the backend to run", || {
        log.starts().first().map(|start| start.pid)
    });
    let asked = std::time::Instant::now();
    supervisor.terminate();
    let reply = session.wait_done(DEADLINE);
    reply.assert_failed();
    assert_eq!(reply.message(), "on: the daemon is shutting down");
    let status = supervisor.daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(5),
        "shutdown waited for the load: {:?}",
        asked.elapsed()
    );
    assert!(!procs::group_alive(pid));
    assert!(log.events_named("ready").is_empty());
    supervisor.stop();
}

/// With `drain_ms: 0` a SIGTERM waits for active leases without a deadline; a second SIGTERM
/// interrupts them.
#[tokio::test]
async fn a_second_sigterm_interrupts_an_unbounded_drain() {
    let config = ConfigBuilder::new("term2")
        .model(ModelSpec::new(A))
        .drain_ms(0)
        .build();
    let mut supervisor = Supervisor::start(config);
    let mut proxy = supervisor.proxy().await;
    proxy.acquire(1, A).await;
    proxy.wait_granted(1).await;
    supervisor.terminate();
    proxy.wait_state("draining", |state| state.draining).await;
    proxy.drain(std::time::Duration::from_millis(1_000)).await;
    assert!(!proxy.was_revoked(1), "drain_ms 0 has no deadline");
    assert!(supervisor.daemon().is_running());

    supervisor.daemon().kill(Signal::SIGTERM);
    proxy.wait_revoked(1).await;
    let status = supervisor.daemon().wait_exit(DEADLINE);
    assert!(status.success(), "{status}");
    drop(proxy);
    supervisor.stop();
}

/// Root only: a socket directory owned by another user is refused, naming both users.
#[test]
fn a_socket_directory_owned_by_another_user_is_refused() {
    if !strata_e2e::is_root() || strata_e2e::in_nix_sandbox() {
        eprintln!("skipped: chown needs real root");
        return;
    }
    let config = ConfigBuilder::new("dirowner")
        .model(ModelSpec::new(A))
        .build();
    std::os::unix::fs::chown(&config.run_dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    assert_exits_refusing(
        &config,
        "supervisor",
        &[
            &config.run_dir.to_string_lossy(),
            &format!("belongs to uid {NOBODY}, not to the daemon user"),
        ],
    );
    assert!(!config.control_socket.exists());
}

/// The unprivileged user the root-only tests act as.
const NOBODY: u32 = 65534;

/// Copies of the build's binaries that any user can run. The checkout may be where other users
/// cannot go (under `/root`, or a 0700 directory under `/tmp`), and the tests below run the
/// socket client and the daemon as other users; so they run these copies, in a directory
/// opened to everyone (0711), instead.
struct Runnable {
    dir: TempDir,
}

impl Runnable {
    /// Copies of `names` (binaries of the build, found like [`binary`]; `e2e-unix-client` is
    /// this crate's own).
    fn new(names: &[&str]) -> Runnable {
        let dir = TempDir::new("anyone");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod the copies' directory");
        for name in names {
            let source = match *name {
                "e2e-unix-client" => PathBuf::from(env!("CARGO_BIN_EXE_e2e-unix-client")),
                other => binary(other),
            };
            let copy = dir.join(name);
            std::fs::copy(&source, &copy)
                .unwrap_or_else(|err| panic!("copy {}: {err}", source.display()));
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))
                .expect("chmod a copy");
        }
        Runnable { dir }
    }

    /// The copy of `name`.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Runs `e2e-unix-client` (`client`, a copy any user can run) as [`NOBODY`] against `socket`
/// with `arg` (see [`as_user`]).
fn as_nobody(client: &Path, socket: &std::path::Path, arg: &str) -> Vec<u8> {
    as_user(client, NOBODY, socket, arg)
}

/// Root only: with the file permissions opened up, another user can reach both sockets, and
/// the peer-credential check still refuses it; the daemon keeps serving its own user.
#[test]
fn another_user_is_refused_by_peer_credentials() {
    if !strata_e2e::is_root() || strata_e2e::in_nix_sandbox() {
        eprintln!("skipped: acting as another user needs real root");
        return;
    }
    let config = ConfigBuilder::new("peercred")
        .model(ModelSpec::new(A))
        .build();
    let runnable = Runnable::new(&["e2e-unix-client"]);
    let client = runnable.path("e2e-unix-client");
    let supervisor = Supervisor::start(config);
    let config = &supervisor.config;
    let open = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    // Only for this test: let the other user reach the sockets at all.
    open(config.dir.path(), 0o711);
    open(&config.run_dir, 0o711);
    open(&config.control_socket, 0o666);
    open(&config.supervisor_socket, 0o666);

    let reply = as_nobody(&client, &config.control_socket, &hex(b"status\n"));
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "{\"error\":\"permission denied\"}\n"
    );
    // A hello with the client's own pid, which the supervisor checks against the connection.
    let hello = format!("hello:{}", config.fingerprint());
    let reply = as_nobody(&client, &config.supervisor_socket, &hello);
    assert!(reply.len() > 4, "no reply frame: {reply:?}");
    let message: strata_protocol::wire::SupervisorMessage =
        strata_protocol::wire::decode_payload(&reply[4..]).expect("a supervisor frame");
    assert_eq!(
        message,
        strata_protocol::wire::SupervisorMessage::Refused {
            reason: "permission denied: wrong user".into()
        }
    );

    open(&config.run_dir, 0o700);
    open(config.dir.path(), 0o700);
    let status = supervisor.status();
    assert_eq!(status.proxies, 0);
    assert!(supervisor.fake_log().events().is_empty());
    supervisor.stop();
}

/// Another unprivileged user, for a third party.
const NOGROUP_OTHER: u32 = 65533;

/// `payload` as `e2e-unix-client`'s HEX argument.
fn hex(payload: &[u8]) -> String {
    payload.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Runs `e2e-unix-client` (`client`, a copy any user can run: [`Runnable`]) as `uid` against
/// `socket` with `arg` (HEX or `hello:FINGERPRINT`).
fn as_user(client: &Path, uid: u32, socket: &std::path::Path, arg: &str) -> Vec<u8> {
    use std::os::unix::process::CommandExt;
    let output = std::process::Command::new(client)
        .arg(socket)
        .arg(arg)
        .uid(uid)
        .gid(uid)
        .output()
        .expect("run e2e-unix-client");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Root only: a supervisor running as its own (unprivileged) user accepts that user and root
/// on both sockets, so `sudo strata-ctl status` works, and refuses every other user.
#[test]
fn the_daemon_user_and_root_are_accepted_every_other_user_refused() {
    if !strata_e2e::is_root() || strata_e2e::in_nix_sandbox() {
        eprintln!("skipped: running the daemon as another user needs real root");
        return;
    }
    let config = ConfigBuilder::new("sockusers")
        .model(ModelSpec::new(A))
        .build();
    // The daemon's user owns its directories (the private socket directory included).
    for entry in walk(config.dir.path()) {
        std::os::unix::fs::chown(&entry, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let runnable = Runnable::new(&["e2e-unix-client", "strata-supervisor"]);
    let client = runnable.path("e2e-unix-client");
    let supervisor = Supervisor::start_wrapped(config, |command| {
        use std::os::unix::process::CommandExt;
        // The same command, run from the copy.
        let mut copy = Command::new(runnable.path("strata-supervisor"));
        copy.args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => copy.env(key, value),
                None => copy.env_remove(key),
            };
        }
        copy.uid(NOBODY).gid(NOBODY);
        copy
    });
    let config = &supervisor.config;
    // Root (this test) is accepted on the control socket...
    let status = supervisor.status();
    assert_eq!(status.daemon_pid, supervisor.pid(), "{status:?}");
    // ...and on the supervisor socket.
    // A hello with the client's own pid, which the supervisor checks against the connection.
    let hello = format!("hello:{}", config.fingerprint());
    // The first frame of the reply (a welcome is followed by a state snapshot).
    let welcome = |reply: &[u8]| -> strata_protocol::wire::SupervisorMessage {
        assert!(reply.len() > 4, "no reply frame: {reply:?}");
        let len = u32::from_be_bytes(reply[..4].try_into().unwrap()) as usize;
        strata_protocol::wire::decode_payload(&reply[4..4 + len]).expect("a supervisor frame")
    };
    let reply = as_user(&client, 0, &config.supervisor_socket, &hello);
    assert!(
        matches!(
            welcome(&reply),
            strata_protocol::wire::SupervisorMessage::Welcome { .. }
        ),
        "root is welcome"
    );
    // The daemon's own user too.
    let reply = as_user(&client, NOBODY, &config.control_socket, &hex(b"status\n"));
    assert!(String::from_utf8_lossy(&reply).contains("daemon_pid"));
    // Any other user, even with the file permissions opened up, is refused.
    let open = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    open(config.dir.path(), 0o711);
    open(&config.run_dir, 0o711);
    open(&config.control_socket, 0o666);
    open(&config.supervisor_socket, 0o666);
    let reply = as_user(
        &client,
        NOGROUP_OTHER,
        &config.control_socket,
        &hex(b"status\n"),
    );
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "{\"error\":\"permission denied\"}\n"
    );
    let reply = as_user(&client, NOGROUP_OTHER, &config.supervisor_socket, &hello);
    assert_eq!(
        welcome(&reply),
        strata_protocol::wire::SupervisorMessage::Refused {
            reason: "permission denied: wrong user".into()
        }
    );
    open(&config.run_dir, 0o700);
    open(config.dir.path(), 0o700);
    supervisor.stop();
}

/// Every path below `dir`, `dir` included.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// A backend that ignores SIGTERM and has a grandchild in its process group: `off` escalates
/// to SIGKILL after `shutdown_ms` and answers only once the whole group is gone.
#[test]
fn off_kills_a_stubborn_backend_and_its_whole_group() {
    let shutdown = std::time::Duration::from_millis(600);
    let config = ConfigBuilder::new("stubborn")
        .model(
            ModelSpec::new(A)
                .fake("ignore_sigterm", true)
                .fake("spawn_grandchild", true),
        )
        .shutdown_ms(shutdown.as_millis() as u64)
        .build();
    let supervisor = Supervisor::start(config);
    let pid = loaded_pid(&supervisor);
    let log = supervisor.fake_log();
    let grandchild = log.events_named("grandchild")[0]["child_pid"]
        .as_u64()
        .expect("grandchild pid") as u32;
    assert!(procs::is_alive(grandchild));

    let asked = std::time::Instant::now();
    let reply = supervisor.control().off(false);
    reply.assert_ok();
    assert!(
        asked.elapsed() >= shutdown - std::time::Duration::from_millis(50),
        "SIGKILL before shutdown_ms: {:?}",
        asked.elapsed()
    );
    assert!(
        !procs::group_alive(pid),
        "off answered before the group was gone"
    );
    assert!(!procs::is_alive(grandchild));
    assert!(
        !log.events_named("signal_ignored").is_empty(),
        "{}",
        log.dump()
    );
    supervisor.stop();
}
