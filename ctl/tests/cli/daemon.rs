//! `strata-router daemon CONFIG` and `strata-ctl daemon CONFIG` (every test
//! runs under both names): config errors, missing binaries, and the whole
//! start/stop sequence with the real strata-supervisor and a stand-in
//! strata-proxy (`common/fake_proxy.py`), run from a private bin directory
//! so that the launcher finds them "beside its own executable"; and runs
//! with the real strata-proxy: serving, and stopping with `drain_ms: 0`
//! (no deadline: a stream runs to its end after Ctrl-C, a second Ctrl-C
//! still interrupts it).

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use crate::common::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::http::{Frame, Stream, chat_body, open_chat};
use strata_e2e::{model_ids, read_exact_str};
use strata_protocol::api::ModelList;

under_both_names!(
    an_invalid_config_fails_like_check_config,
    missing_sibling_binaries_are_named,
    daemon_serves_then_stops_proxy_first_on_sigint,
    sigterm_is_forwarded_too,
    a_proxy_that_dies_stops_the_supervisor,
    a_supervisor_that_dies_stops_the_proxy,
    a_proxy_that_fails_to_start_stops_the_supervisor,
    a_supervisor_that_fails_to_start_is_reported,
    a_busy_listen_address_is_refused_before_starting,
    daemon_runs_the_real_proxy,
    with_drain_ms_0_a_stream_runs_to_its_end_after_ctrl_c,
    a_second_ctrl_c_interrupts_a_drain_without_deadline,
);

const MODELS: &[TestModel] = &[TestModel {
    id: "up-a",
    load_ms: 300,
    installed: true,
}];

fn an_invalid_config_fails_like_check_config(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = dir.path().join("config.json");
    fs::write(&config, r#"{"python": "/usr/bin/python3", "lsiten": 1}"#).unwrap();
    let config = config.to_str().unwrap();
    let daemon = exe.run(&["daemon", config]);
    let check = exe.run(&["check-config", config]);
    assert_eq!(daemon.status.code(), Some(1));
    assert_eq!(check.status.code(), Some(1));
    let stderr = text(&daemon.stderr);
    assert!(stderr.starts_with(&exe.says("config error: ")), "{stderr}");
    assert_eq!(stderr, text(&check.stderr));
    assert_eq!(text(&daemon.stdout), "");

    let missing = dir.path().join("missing.json");
    let out = exe.run(&["daemon", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no such file"),
        "{}",
        text(&out.stderr)
    );
}

fn missing_sibling_binaries_are_named(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = write_config(&dir, MODELS);
    let bin = dir.subdir("bin", 0o700);
    let lonely = bin.join(exe.name);
    if fs::hard_link(exe.path(), &lonely).is_err() {
        fs::copy(exe.path(), &lonely).unwrap();
    }
    let stderr_path = dir.path().join("ctl.stderr");
    let mut command = Command::new(&lonely);
    command.arg("daemon").arg(&config);
    let (mut ctl, _lines) = spawn_with_lines(command, &stderr_path, "the launcher");
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&exe.says("strata-supervisor not found beside "))
            && stderr.contains(&bin.join("strata-supervisor").display().to_string()),
        "{stderr}"
    );
    // Nothing was started: the control socket never appeared.
    assert!(!dir.path().join("run/control.sock").exists());
}

/// A running `NAME daemon` from a private bin dir.
struct Stack {
    exe: Exe,
    dir: TempDir,
    ctl: Running,
    stderr: std::path::PathBuf,
    proxy_log: std::path::PathBuf,
    socket: std::path::PathBuf,
    listen: String,
    supervisor_pid: u32,
    proxy_pid: u32,
}

impl Stack {
    /// With the stand-in proxy, on the ctl tests' config.
    fn start(exe: Exe) -> Stack {
        Stack::start_with(exe, ProxyKind::Fake, |config| config)
    }

    /// With `proxy`, on the ctl tests' config as `edit` changes it.
    fn start_with(
        exe: Exe,
        proxy: ProxyKind,
        edit: impl FnOnce(ConfigBuilder<TestConfig>) -> ConfigBuilder<TestConfig>,
    ) -> Stack {
        let dir = TempDir::new("daemon");
        let config: TestConfig = edit(ctl_config(MODELS)).build_in(&dir);
        let config = config.path.clone();
        let ctl_path = bin_dir(exe, &dir, proxy);
        let stderr = dir.path().join("ctl.stderr");
        let proxy_log = dir.path().join("proxy.log");
        let mut command = Command::new(ctl_path);
        command
            .arg("daemon")
            .arg(&config)
            .env("STRATA_FAKE_PROXY_LOG", &proxy_log);
        let (ctl, lines) = spawn_with_lines(command, &stderr, "the launcher");
        let ((listen, supervisor_pid, proxy_pid), seen) =
            wait_line(&lines, LONG, "the serving line", |line| {
                parse_serving(exe, line)
            });
        assert_eq!(seen.len(), 1, "the serving line comes first: {seen:#?}");
        Stack {
            exe,
            socket: dir.path().join("run/control.sock"),
            dir,
            ctl,
            stderr,
            proxy_log,
            listen,
            supervisor_pid,
            proxy_pid,
        }
    }

    fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn addr(&self) -> SocketAddr {
        self.listen.parse().expect("a socket address")
    }

    /// Waits for the launcher's line that starts with `NAME: START`.
    fn wait_for_line(&self, start: &str) -> String {
        let start = self.exe.says(start);
        poll_for(SHORT, format!("a line {start:?}"), || {
            self.stderr_text()
                .lines()
                .find(|line| line.starts_with(&start))
                .map(str::to_owned)
        })
    }

    /// The stop line the first signal `name` gets, stopping both daemons.
    fn stop_line(&self, name: &str, deadline: &str) -> String {
        self.exe.says(&format!(
            "{name} received; stopping strata-proxy (pid {}), then strata-supervisor (pid {}), \
             {deadline} (repeat the signal to interrupt active work, a third time to kill)",
            self.proxy_pid, self.supervisor_pid
        ))
    }

    fn proxy_events(&self, event: &str) -> Vec<Value> {
        json_lines(&self.proxy_log)
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }
}

fn daemon_serves_then_stops_proxy_first_on_sigint(exe: Exe) {
    let mut stack = Stack::start(exe);
    assert!(is_alive(stack.supervisor_pid) && is_alive(stack.proxy_pid));
    // Both are serving: the control socket answers with the supervisor's
    // PID, and /health answers.
    assert!(daemon_answers(exe, &stack.socket, stack.supervisor_pid));
    let (status_line, _) = http_get(&stack.listen, "/health");
    assert!(status_line.starts_with("HTTP/1.0 200"), "{status_line}");
    let started = stack.proxy_events("start");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["pid"], stack.proxy_pid);
    assert_eq!(
        started[0]["sigblk"], "0000000000000000",
        "children must not inherit a blocked signal mask"
    );

    // The children are in their own process groups: a terminal's Ctrl-C
    // reaches only the launcher, which forwards it in order.
    for pid in [stack.supervisor_pid, stack.proxy_pid] {
        assert_eq!(
            nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid as i32)))
                .unwrap()
                .as_raw(),
            pid as i32
        );
    }

    signal(stack.ctl.pid(), Signal::SIGINT);
    let status = stack.ctl.wait(LONG);
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let signals = stack.proxy_events("signal");
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0]["signal"], "SIGINT");
    assert_eq!(
        signals[0]["supervisor_up"], true,
        "the proxy is stopped while the supervisor still runs"
    );
    assert_eq!(stack.proxy_events("exit").len(), 1);
    assert!(!is_alive(stack.proxy_pid) && !is_alive(stack.supervisor_pid));
    assert!(!stack.socket.exists(), "the supervisor removed its socket");
    // The ctl tests' timers: drain_ms 5000 and shutdown_ms 5000, plus 30 s.
    let expected = [
        stack.stop_line("SIGINT", "each killed if still running after 40 s"),
        exe.says(&format!("strata-proxy (pid {}) stopped", stack.proxy_pid)),
        exe.says(&format!(
            "strata-supervisor (pid {}) stopped",
            stack.supervisor_pid
        )),
        exe.says("stopped"),
    ];
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with(&exe.says("")))
        .collect();
    assert_eq!(ours, expected, "{stderr}");
}

fn sigterm_is_forwarded_too(exe: Exe) {
    let mut stack = Stack::start(exe);
    signal(stack.ctl.pid(), Signal::SIGTERM);
    let status = stack.ctl.wait(LONG);
    assert_eq!(status.code(), Some(0), "{}", stack.stderr_text());
    assert_eq!(stack.proxy_events("signal")[0]["signal"], "SIGTERM");
    assert!(!is_alive(stack.supervisor_pid));
}

fn a_proxy_that_dies_stops_the_supervisor(exe: Exe) {
    let mut stack = Stack::start(exe);
    signal(stack.proxy_pid, Signal::SIGKILL);
    let status = stack.ctl.wait(LONG);
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&exe.says(&format!(
            "strata-proxy (pid {}) exited on its own (signal 9 (SIGKILL)); \
             stopping strata-supervisor (pid {})",
            stack.proxy_pid, stack.supervisor_pid
        ))),
        "{stderr}"
    );
    assert!(stderr.contains(&exe.says(&format!(
        "strata-supervisor (pid {}) stopped",
        stack.supervisor_pid
    ))));
    assert!(!is_alive(stack.supervisor_pid));
    assert!(!stack.socket.exists());
}

fn a_supervisor_that_dies_stops_the_proxy(exe: Exe) {
    let mut stack = Stack::start(exe);
    signal(stack.supervisor_pid, Signal::SIGKILL);
    let status = stack.ctl.wait(LONG);
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&exe.says(&format!(
            "strata-supervisor (pid {}) exited on its own (signal 9 (SIGKILL)); \
             stopping strata-proxy (pid {})",
            stack.supervisor_pid, stack.proxy_pid
        ))),
        "{stderr}"
    );
    let signals = stack.proxy_events("signal");
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0]["signal"], "SIGTERM");
    assert!(!is_alive(stack.proxy_pid));
    drop(stack.dir);
}

fn a_proxy_that_fails_to_start_stops_the_supervisor(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = write_config(&dir, MODELS);
    let ctl_path = bin_dir(exe, &dir, ProxyKind::Fake);
    let stderr_path = dir.path().join("ctl.stderr");
    let mut command = Command::new(ctl_path);
    command
        .arg("daemon")
        .arg(&config)
        .env("STRATA_FAKE_PROXY_EXIT", "3")
        .env("STRATA_FAKE_PROXY_LOG", dir.path().join("proxy.log"));
    let (mut ctl, lines) = spawn_with_lines(command, &stderr_path, "the launcher");
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(lines.try_iter().next().is_none(), "no serving line");
    let proxy_pid = json_lines(&dir.path().join("proxy.log"))[0]["pid"]
        .as_u64()
        .unwrap();
    assert!(
        stderr.contains(&exe.says(&format!(
            "strata-proxy (pid {proxy_pid}) exited on its own (exit status 3); \
             stopping strata-supervisor (pid "
        ))),
        "{stderr}"
    );
    assert!(stderr.contains(") stopped"), "{stderr}");
    assert!(!Path::new(&dir.path().join("run/control.sock")).exists());
}

fn a_supervisor_that_fails_to_start_is_reported(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = write_config(&dir, MODELS);
    // The control socket's directory must be private: make it group-readable.
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir.path().join("run"), fs::Permissions::from_mode(0o750)).unwrap();
    let ctl_path = bin_dir(exe, &dir, ProxyKind::Fake);
    let stderr_path = dir.path().join("ctl.stderr");
    let proxy_log = dir.path().join("proxy.log");
    let mut command = Command::new(ctl_path);
    command
        .arg("daemon")
        .arg(&config)
        .env("STRATA_FAKE_PROXY_LOG", &proxy_log);
    let (mut ctl, _lines) = spawn_with_lines(command, &stderr_path, "the launcher");
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&exe.says("strata-supervisor (pid "))
            && stderr.contains(") exited on its own (exit status 1)"),
        "{stderr}"
    );
    assert!(json_lines(&proxy_log).is_empty(), "the proxy never started");
}

fn a_busy_listen_address_is_refused_before_starting(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = write_config(&dir, MODELS);
    let text_config = fs::read_to_string(&config).unwrap();
    let value: Value = serde_json::from_str(&text_config).unwrap();
    let listen = value["listen"].as_str().unwrap().to_owned();
    let _occupied = std::net::TcpListener::bind(&listen).unwrap();
    let ctl_path = bin_dir(exe, &dir, ProxyKind::Fake);
    let stderr_path = dir.path().join("ctl.stderr");
    let mut command = Command::new(ctl_path);
    command.arg("daemon").arg(&config);
    let (mut ctl, _lines) = spawn_with_lines(command, &stderr_path, "the launcher");
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        exe.says(&format!(
            "{listen} is already in use (another strata-proxy?); stop it or change listen\n"
        ))
    );
}

/// The real thing: the launcher with the workspace's strata-proxy (what
/// `nix run . -- daemon CONFIG` runs).
fn daemon_runs_the_real_proxy(exe: Exe) {
    let dir = TempDir::new("daemon");
    let config = write_config(&dir, MODELS);
    let ctl_path = bin_dir(exe, &dir, ProxyKind::Real);
    let stderr_path = dir.path().join("ctl.stderr");
    let mut command = Command::new(ctl_path);
    command.arg("daemon").arg(&config);
    let (mut ctl, lines) = spawn_with_lines(command, &stderr_path, "the launcher");
    let ((listen, supervisor_pid, proxy_pid), _) =
        wait_line(&lines, LONG, "the serving line", |line| {
            parse_serving(exe, line)
        });
    let (status_line, _) = http_get(&listen, "/health");
    assert!(status_line.starts_with("HTTP/1.1 200") || status_line.starts_with("HTTP/1.0 200"));
    let (status_line, body) = http_get(&listen, "/v1/models");
    assert!(status_line.contains(" 200"), "{status_line}");
    let models: ModelList = read_exact_str("ModelList", &body);
    assert_eq!(model_ids(&models), ["up-a"], "{models:#?}");
    signal(ctl.pid(), Signal::SIGINT);
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!is_alive(supervisor_pid) && !is_alive(proxy_pid));
}

fn is_content(frame: &Frame) -> bool {
    frame.is_data()
        && frame.json()["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|text| !text.is_empty())
}

/// The frames left in `stream` until it ends, finished or cut off.
fn frames_to_the_end(stream: &mut Stream) -> Vec<Frame> {
    let mut frames = Vec::new();
    loop {
        match stream.try_next_frame(LONG) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return frames,
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return frames,
            Err(err) => panic!("{err}; frames so far: {frames:#?}"),
        }
    }
}

/// `drain_ms: 0` means no deadline, for the launcher too (it used to SIGKILL
/// both daemons 60 s + shutdown_ms + 30 s after the signal): after Ctrl-C it
/// says so, the proxy finishes a stream that still had most of its tokens
/// to send, and the launcher exits 0 without killing anything.
fn with_drain_ms_0_a_stream_runs_to_its_end_after_ctrl_c(exe: Exe) {
    let mut stack = Stack::start_with(exe, ProxyKind::Real, |config| {
        config.drain_ms(0).shutdown_ms(1000)
    });
    let mut body = chat_body("up-a", true);
    body["fake"] = json!({"tokens": 20, "token_delay_ms": 100});
    let mut stream = open_chat(stack.addr(), &body);
    let mut frames = stream.frames_until(LONG, "the first content delta", is_content);

    signal(stack.ctl.pid(), Signal::SIGINT);
    let line = stack.wait_for_line("SIGINT received; ");
    assert_eq!(
        line,
        stack.stop_line("SIGINT", "without a deadline (drain_ms is 0)")
    );
    assert!(is_alive(stack.proxy_pid), "the proxy drains the stream");

    frames.extend(frames_to_the_end(&mut stream));
    assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
    assert_eq!(
        frames.iter().filter(|frame| is_content(frame)).count(),
        20,
        "every delta arrived: {frames:#?}"
    );
    let status = stack.ctl.wait(LONG);
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("killing"), "{stderr}");
    assert!(stderr.ends_with(&exe.says("stopped\n")), "{stderr}");
    assert!(!is_alive(stack.proxy_pid) && !is_alive(stack.supervisor_pid));
}

/// Without a deadline the operator still decides: a second Ctrl-C is
/// forwarded, and the proxy (as it does for a second signal) abandons a
/// stream that had a minute left; the launcher then stops the supervisor
/// and exits 0.
fn a_second_ctrl_c_interrupts_a_drain_without_deadline(exe: Exe) {
    let mut stack = Stack::start_with(exe, ProxyKind::Real, |config| {
        config.drain_ms(0).shutdown_ms(1000)
    });
    let mut body = chat_body("up-a", true);
    body["fake"] = json!({"tokens": 600, "token_delay_ms": 100});
    let mut stream = open_chat(stack.addr(), &body);
    stream.frames_until(LONG, "the first content delta", is_content);

    signal(stack.ctl.pid(), Signal::SIGINT);
    stack.wait_for_line("SIGINT received; ");
    // The drain goes on: more deltas arrive after the first signal.
    for _ in 0..3 {
        stream.frames_until(LONG, "another content delta", is_content);
    }
    assert!(is_alive(stack.proxy_pid));

    signal(stack.ctl.pid(), Signal::SIGINT);
    let line = stack.wait_for_line("SIGINT again: ");
    assert_eq!(
        line,
        exe.says(&format!(
            "SIGINT again: asking strata-proxy (pid {}) to interrupt active work",
            stack.proxy_pid
        ))
    );
    let rest = frames_to_the_end(&mut stream);
    assert!(!rest.iter().any(Frame::is_done), "cut off: {rest:#?}");
    let status = stack.ctl.wait(LONG);
    let stderr = stack.stderr_text();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("killing"), "{stderr}");
    assert!(stderr.contains(&exe.says(&format!("strata-proxy (pid {}) stopped", stack.proxy_pid))));
    assert!(!is_alive(stack.proxy_pid) && !is_alive(stack.supervisor_pid));
}
