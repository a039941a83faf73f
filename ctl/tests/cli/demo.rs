//! `demo` (under both names where its output names the program): the
//! generated config, and whole runs (with the real
//! strata-supervisor, the embedded fake backend and a stand-in
//! strata-proxy) that must leave nothing behind. `TMPDIR` points into the
//! test's own private directory, so the demo's directory is found and
//! checked there. Two runs use the real strata-proxy (the `/requests`
//! one is ignored until the proxy serves it).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use nix::sys::signal::Signal;
use serde_json::Value;
use strata_e2e::accounting::Record;
use strata_e2e::{model_ids, read_exact_str};
use strata_protocol::api::ModelList;
use strata_protocol::page::RecordsPage;

fn print_config(tmp: &Path) -> String {
    let mut command = Command::new(ctl_exe());
    command
        .args(["demo", "--print-config", "--python"])
        .arg(python())
        .env("TMPDIR", tmp);
    let out = run(command, LONG);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn print_config_prints_a_config_that_check_config_accepts() {
    let dir = TempDir::new("demo");
    let tmp = dir.subdir("tmp", 0o700);
    let config_text = print_config(&tmp);
    let config: Value = serde_json::from_str(&config_text).expect("the config is json");
    let path = dir.path().join("demo.json");
    fs::write(&path, &config_text).unwrap();
    let out = ctl(&["check-config", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    assert!(summary.contains(": valid"), "{summary}");
    assert!(summary.contains("wait-first"), "{summary}");

    // Both families, aliases, the fake backend's knobs and private paths.
    let strata_dir = PathBuf::from(config["strata_dir"].as_str().unwrap());
    let demo_dir = strata_dir.parent().unwrap();
    assert!(demo_dir.starts_with(&tmp), "the demo lives under TMPDIR");
    assert_eq!(config["wait_when_busy"], true);
    assert_eq!(config["python"], Value::from(python().to_str().unwrap()));
    assert_eq!(
        config["control_socket"],
        Value::from(demo_dir.join("run/control.sock").to_str().unwrap())
    );
    assert_eq!(
        config["request_log_path"],
        Value::from(demo_dir.join("requests.jsonl").to_str().unwrap())
    );
    let aliases = config["aliases"].as_object().unwrap();
    assert!(aliases.contains_key("qwen3.8-flash-next") && aliases.contains_key("qwen3.6-35b-a3b"));
    let listen = config["listen"].as_str().unwrap();
    assert!(listen.starts_with("127.0.0.1:"));
    assert_ne!(
        listen.rsplit_once(':').unwrap().1,
        config["backend_port"].to_string()
    );

    // Nothing was created.
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
}

/// A running demo from a private bin dir, with `TMPDIR` = `dir/tmp`.
struct Demo {
    exe: Exe,
    dir: TempDir,
    tmp: PathBuf,
    ctl_path: PathBuf,
    ctl: Running,
    stderr: PathBuf,
    demo_dir: PathBuf,
    socket: PathBuf,
    listen: String,
    printed: Vec<String>,
}

impl Demo {
    fn start(exe: Exe, proxy: ProxyKind) -> Demo {
        let dir = TempDir::new("demo");
        let tmp = dir.subdir("tmp", 0o700);
        let ctl_path = bin_dir(exe, &dir, proxy);
        let stderr = dir.path().join("demo.stderr");
        let mut command = Command::new(&ctl_path);
        command
            .args(["demo", "--python"])
            .arg(python())
            .env("TMPDIR", &tmp)
            .env("STRATA_FAKE_PROXY_LOG", dir.path().join("proxy.log"));
        let (ctl, lines) = spawn_with_lines(command, &stderr, "demo");
        let (_, printed) = wait_line(&lines, LONG, "the end of the instructions", |line| {
            line.starts_with("Ctrl-C stops everything").then_some(())
        });
        let (listen, _, _) = parse_serving(exe, &printed[0]).expect("the serving line comes first");
        let demo_dir = printed
            .iter()
            .find_map(|line| {
                let rest = line.strip_prefix("  directory ")?;
                Some(PathBuf::from(
                    rest.strip_suffix(" (removed when the demo stops)")?,
                ))
            })
            .expect("a directory line");
        let socket = demo_dir.join("run/control.sock");
        Demo {
            exe,
            dir,
            tmp,
            ctl_path,
            ctl,
            stderr,
            demo_dir,
            socket,
            listen,
            printed,
        }
    }

    fn ctl(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(&self.ctl_path);
        command.args(args);
        run(command, LONG)
    }

    /// Ctrl-C; the demo exits 0 and leaves nothing in TMPDIR.
    fn interrupt_and_check_cleanup(mut self) {
        signal(self.ctl.pid(), Signal::SIGINT);
        let status = self.ctl.wait(LONG);
        let stderr = fs::read_to_string(&self.stderr).unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(
            stderr.ends_with(&format!(
                "{}\n{}\n",
                self.exe.says("stopped"),
                self.exe
                    .says(&format!("removed {}", self.demo_dir.display()))
            )),
            "{stderr}"
        );
        assert!(!self.demo_dir.exists());
        assert_eq!(fs::read_dir(&self.tmp).unwrap().count(), 0);
        drop(self.dir);
    }
}

under_both_names!(
    demo_runs_the_embedded_fake_and_cleans_up,
    a_missing_python_is_a_clear_error,
);

fn demo_runs_the_embedded_fake_and_cleans_up(exe: Exe) {
    let demo = Demo::start(exe, ProxyKind::Fake);
    let socket = demo.socket.to_str().unwrap().to_owned();

    // The private directory and the embedded fake, byte for byte.
    let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert!(demo.demo_dir.starts_with(&demo.tmp));
    assert_eq!(mode(&demo.demo_dir), 0o700);
    assert_eq!(mode(&demo.demo_dir.join("run")), 0o700);
    let listed = fs::read_to_string(fake_strata_dir().join("FILES.txt")).unwrap();
    for name in listed.lines().filter(|l| !l.trim().is_empty()) {
        let written = fs::read(demo.demo_dir.join("strata").join(name)).unwrap();
        let original = fs::read(fake_strata_dir().join(name)).unwrap();
        assert!(written == original, "{name} differs from tests/fake_strata");
    }

    // What to try: curl lines for each endpoint and the control commands
    // with this executable's path.
    let printed = demo.printed.join("\n");
    let base = format!("http://{}", demo.listen);
    for expected in [
        format!(
            "{} demo: strata-router in front of a fake Strata backend",
            exe.name
        ),
        format!("curl -s {base}/v1/models"),
        format!("curl -sN {base}/v1/chat/completions"),
        r#""model":"qwen3.8-flash-next","stream":true"#.to_owned(),
        format!("curl -s {base}/metrics"),
        format!("curl -s '{base}/requests?after=0'"),
        format!("{} status {socket}", demo.ctl_path.display()),
        format!("{} off {socket}", demo.ctl_path.display()),
        format!("{} on {socket} qwen3.6-35b-a3b", demo.ctl_path.display()),
    ] {
        assert!(
            printed.contains(&expected),
            "missing {expected:?} in\n{printed}"
        );
    }

    // The printed commands work: load a model through its alias with the
    // embedded fake backend, then unload it.
    let out = demo.ctl(&["on", &socket, "qwen3.6-35b-a3b"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let done = parse_done(&serde_json::from_slice(&out.stdout).unwrap());
    assert_eq!(
        done.status.loaded.as_deref(),
        Some("qwen3.6-35b-a3b-q4_k_s")
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("still waiting") || stderr.contains("backend reported ready"),
        "{stderr}"
    );
    let out = demo.ctl(&["off", &socket]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = demo.ctl(&["status", &socket]);
    assert!(out.status.success());

    demo.interrupt_and_check_cleanup();
}

#[test]
fn a_failed_demo_removes_its_directory() {
    let dir = TempDir::new("demo");
    let tmp = dir.subdir("tmp", 0o700);
    let ctl_path = bin_dir(STRATA_CTL, &dir, ProxyKind::Fake);
    let stderr_path = dir.path().join("demo.stderr");
    let mut command = Command::new(&ctl_path);
    command
        .args(["demo", "--python"])
        .arg(python())
        .env("TMPDIR", &tmp)
        .env("STRATA_FAKE_PROXY_EXIT", "3");
    let (mut ctl, _lines) = spawn_with_lines(command, &stderr_path, "demo");
    let status = ctl.wait(LONG);
    let stderr = fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exited on its own (exit status 3)"),
        "{stderr}"
    );
    assert!(stderr.contains("strata-ctl: removed "), "{stderr}");
    assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
}

fn a_missing_python_is_a_clear_error(exe: Exe) {
    let dir = TempDir::new("demo");
    let out = run(
        {
            let mut command = exe.command();
            command.arg("demo").env("PATH", dir.path());
            command
        },
        LONG,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(&exe.says("python3 not found on PATH")),
        "{}",
        text(&out.stderr)
    );
}

/// One HTTP/1.0 POST of a JSON body; the whole response.
fn http_post(addr: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LONG)).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The real thing, as a newcomer runs it: the printed requests work.
#[test]
fn demo_serves_the_printed_requests_with_the_real_proxy() {
    let demo = Demo::start(STRATA_CTL, ProxyKind::Real);
    let (status_line, body) = http_get(&demo.listen, "/v1/models");
    assert!(status_line.contains(" 200"), "{status_line}");
    let models: ModelList = read_exact_str("ModelList", &body);
    assert!(
        model_ids(&models).contains(&"qwen3.8-flash-next"),
        "{models:#?}"
    );
    let response = http_post(
        &demo.listen,
        "/v1/chat/completions",
        r#"{"model":"qwen3.8-flash-next","stream":true,"messages":[{"role":"user","content":"Hello"}]}"#,
    );
    assert!(response.contains("data: [DONE]"), "{response}");
    let (status_line, _) = http_get(&demo.listen, "/metrics");
    assert!(status_line.contains(" 200"), "/metrics: {status_line}");
    demo.interrupt_and_check_cleanup();
}

/// The printed `/requests?after=0` line.
#[test]
fn demo_serves_the_request_log_with_the_real_proxy() {
    let demo = Demo::start(STRATA_CTL, ProxyKind::Real);
    let response = http_post(
        &demo.listen,
        "/v1/chat/completions",
        r#"{"model":"qwen3.8-flash-next","messages":[{"role":"user","content":"Hello"}]}"#,
    );
    assert!(response.starts_with("HTTP/1."), "{response}");
    let (status_line, body) = http_get(&demo.listen, "/requests?after=0");
    assert!(status_line.contains(" 200"), "/requests: {status_line}");
    let page = RecordsPage::from_json(&body).unwrap_or_else(|err| panic!("{err}: {body}"));
    let records: Vec<Record> = page.records.iter().map(|text| Record::new(text)).collect();
    assert!(
        records
            .iter()
            .any(|record| record.model_requested.as_deref() == Some("qwen3.8-flash-next")),
        "{body}"
    );
    demo.interrupt_and_check_cleanup();
}
