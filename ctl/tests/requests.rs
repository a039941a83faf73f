//! `strata-ctl requests URL [--after N] [--follow]` against a real stack:
//! `strata-supervisor` and `strata-proxy` (from beside strata-ctl) on the
//! fake Strata backend.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

const MODELS: &[TestModel] = &[TestModel {
    id: "up-a",
    load_ms: 0,
    installed: true,
}];

/// A router (supervisor + proxy) on one config, restartable as a whole.
struct Router {
    dir: TempDir,
    config: PathBuf,
    listen: String,
    supervisor: Option<Running>,
    proxy: Option<Running>,
    starts: u32,
}

impl Router {
    /// Writes a config (`edit` may change it) and starts both daemons.
    fn start(edit: impl FnOnce(&mut Value)) -> Router {
        let dir = TempDir::new("requests");
        let config = write_config(&dir, MODELS);
        let mut json: Value = serde_json::from_slice(&fs::read(&config).unwrap()).unwrap();
        edit(&mut json);
        fs::write(&config, serde_json::to_string_pretty(&json).unwrap()).unwrap();
        let listen = json["listen"].as_str().unwrap().to_owned();
        let mut router = Router {
            dir,
            config,
            listen,
            supervisor: None,
            proxy: None,
            starts: 0,
        };
        router.up();
        router
    }

    fn url(&self) -> String {
        format!("http://{}", self.listen)
    }

    fn spawn(&self, name: &str) -> Running {
        let log = self.dir.path().join(format!("{name}-{}.log", self.starts));
        let child = Command::new(binary(name))
            .arg(&self.config)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {name}: {err}"));
        Running::new(name, child)
    }

    /// Starts the supervisor, then the proxy, and waits until `/health`
    /// answers 200.
    fn up(&mut self) {
        self.starts += 1;
        let mut supervisor = self.spawn("strata-supervisor");
        let socket = self.dir.path().join("run/control.sock");
        let pid = supervisor.pid();
        poll_for(LONG, "the supervisor's control socket", || {
            if let Some(status) = supervisor.try_exit() {
                panic!("strata-supervisor exited with {status}");
            }
            daemon_answers(&socket, pid).then_some(())
        });
        self.supervisor = Some(supervisor);
        let mut proxy = self.spawn("strata-proxy");
        poll_for(LONG, "the proxy's /health", || {
            if let Some(status) = proxy.try_exit() {
                panic!("strata-proxy exited with {status}");
            }
            let ok = TcpStream::connect(&self.listen).is_ok()
                && http_get(&self.listen, "/health")
                    .0
                    .split(' ')
                    .nth(1)
                    .is_some_and(|code| code == "200");
            ok.then_some(())
        });
        self.proxy = Some(proxy);
    }

    /// Stops the proxy, then the supervisor (SIGTERM, both must exit 0).
    fn down(&mut self) {
        for process in [self.proxy.take(), self.supervisor.take()]
            .into_iter()
            .flatten()
        {
            let mut process = process;
            signal(process.pid(), Signal::SIGTERM);
            let status = process.wait(LONG);
            assert!(status.success(), "{} exited with {status}", process.name());
        }
    }

    /// One chat completion (`body` as given); the response's status code.
    fn chat(&self, body: &str) -> u16 {
        let mut stream = TcpStream::connect(&self.listen).unwrap();
        stream.set_read_timeout(Some(LONG)).unwrap();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.listen,
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {response:?}"))
    }

    fn ok_chat(&self) {
        let status = self.chat(r#"{"model":"up-a","messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(status, 200);
    }

    /// The `/requests` document for `query`.
    fn page(&self, query: &str) -> Value {
        let (status, body) = http_get(&self.listen, &format!("/requests?{query}"));
        assert!(status.contains(" 200 "), "{status}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The raw `/requests` body for `after=0&limit=1000`.
    fn raw_all(&self) -> String {
        http_get(&self.listen, "/requests?after=0&limit=1000").1
    }

    /// Waits until the ring has produced `n` records in total (records are
    /// submitted after the response ends).
    fn wait_records(&self, n: u64) {
        poll_for(LONG, format!("{n} records"), || {
            let page = self.page("limit=1");
            (page["next_seq"].as_u64() == Some(n)).then_some(())
        });
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        // Proxy first, then the supervisor (`Running` SIGTERMs and reaps).
        drop(self.proxy.take());
        drop(self.supervisor.take());
    }
}

fn requests(args: &[&str]) -> Output {
    let mut all = vec!["requests"];
    all.extend_from_slice(args);
    ctl(&all)
}

/// The `seq` of each stdout line, checking each is a JSON object.
fn seqs(stdout: &str) -> Vec<u64> {
    stdout
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            record["seq"].as_u64().unwrap()
        })
        .collect()
}

/// The exact texts of the records in a raw `/requests` body, as the
/// endpoint's own JSON nesting gives them (re-serialised values would
/// reorder keys, so compare via re-parsing only for order and count).
fn raw_records(body: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(body).unwrap();
    doc["records"].as_array().unwrap().clone()
}

#[test]
fn prints_every_record_in_seq_order_and_after_skips() {
    let router = Router::start(|_| {});
    let url = router.url();

    // Nothing yet: no output, success.
    let out = requests(&[&url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "");

    router.ok_chat();
    assert_eq!(router.chat("{not json"), 400);
    router.ok_chat();
    assert_eq!(router.chat(r#"{"model":"nope","messages":[]}"#), 404);
    router.wait_records(4);

    let out = requests(&[&url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let stdout = text(&out.stdout);
    assert_eq!(seqs(&stdout), [1, 2, 3, 4]);
    // Each line is exactly the endpoint's item text: the raw body is
    // `{"records":[L1,L2,...],...}`.
    let raw = router.raw_all();
    let joined = stdout.lines().collect::<Vec<_>>().join(",");
    assert!(
        raw.starts_with(&format!("{{\"records\":[{joined}],")),
        "stdout:\n{stdout}\nbody:\n{raw}"
    );
    let parsed: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, raw_records(&raw));
    assert_eq!(parsed[1]["reason"], "invalid_request");
    assert_eq!(parsed[3]["status"], 404);

    // --after skips; a trailing slash in the URL is fine.
    let out = requests(&[&format!("{url}/"), "--after", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(seqs(&text(&out.stdout)), [3, 4]);
    assert_eq!(
        text(&out.stdout),
        stdout
            .lines()
            .skip(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    for after in ["4", "1000"] {
        let out = requests(&[&url, "--after", after]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "", "--after {after}");
    }

    // Reading does not drain: a second full read prints the same.
    let again = requests(&[&url]);
    assert_eq!(text(&again.stdout), stdout);

    // A base URL whose /requests is not the endpoint: HTTP 404, exit 1.
    let out = requests(&[&format!("{url}/elsewhere")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("strata-ctl: requests: GET ") && stderr.contains("HTTP 404"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn pages_through_more_than_one_page_and_warns_about_evicted_records() {
    // Capacity 1003: 1005 records evict two, and reading them all takes two
    // pages of at most 1000.
    let router = Router::start(|config| config["request_log_capacity"] = 1003.into());
    let url = router.url();
    for _ in 0..1005 {
        assert_eq!(router.chat("[]"), 400);
    }
    router.wait_records(1005);

    let out = requests(&[&url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(seqs(&text(&out.stdout)), (3..=1005).collect::<Vec<_>>());
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr,
        "strata-ctl: requests: warning: 2 record(s) after seq 0 were evicted from the ring \
         before they could be read (oldest retained seq: 3); the JSONL files \
         (request_log_path) may still have them\n"
    );

    // From a cursor inside the ring: no warning, the rest in order.
    let out = requests(&[&url, "--after", "1001"]);
    assert_eq!(seqs(&text(&out.stdout)), [1002, 1003, 1004, 1005]);
    assert_eq!(text(&out.stderr), "");
    // From a cursor with one evicted record after it.
    let out = requests(&[&url, "--after", "1"]);
    assert_eq!(text(&out.stdout).lines().count(), 1003);
    assert!(
        text(&out.stderr).contains("warning: 1 record(s) after seq 1 were evicted"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn follow_restarts_from_zero_when_the_router_restarts() {
    let mut router = Router::start(|_| {});
    let url = router.url();
    router.ok_chat();
    router.ok_chat();
    router.wait_records(2);
    let first_instance = router.page("after=0")["instance_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let stderr_path = router.dir.path().join("follow.stderr");
    let mut command = Command::new(ctl_exe());
    command.args(["requests", &url, "--follow"]);
    let (follow, lines) = spawn_with_lines(command, &stderr_path, "strata-ctl requests --follow");
    let stderr = || fs::read_to_string(&stderr_path).unwrap_or_default();
    let record = |line: &str| serde_json::from_str::<Value>(line).ok();
    let (_, seen) = wait_line(&lines, LONG, "seq 2", |line| {
        record(line).filter(|r| r["seq"] == 2)
    });
    assert_eq!(seqs(&seen.join("\n")), [1, 2], "{}", stderr());

    // New records appear while following.
    router.ok_chat();
    let (third, seen) = wait_line(&lines, LONG, "seq 3", record);
    assert_eq!(seen.len(), 1);
    assert_eq!(third["seq"], 3);
    assert!(
        third["request_id"]
            .as_str()
            .unwrap()
            .starts_with(&first_instance)
    );

    // The whole router restarts: a new instance. While it is down, the
    // follower notes the failure and keeps retrying.
    router.down();
    poll_for(LONG, "a retry note", || {
        stderr().contains("; retrying every 1s").then_some(())
    });
    router.up();
    let second_instance = router.page("after=0")["instance_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(first_instance, second_instance);
    router.ok_chat();
    let (fresh, seen) = wait_line(&lines, LONG, "a record of the new instance", record);
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(fresh["seq"], 1, "reading restarted from after=0");
    assert_eq!(fresh["request_id"], format!("{second_instance}-1"));
    router.ok_chat();
    let (next, _) = wait_line(&lines, LONG, "seq 2 of the new instance", record);
    assert_eq!(next["seq"], 2);

    let notes = stderr();
    assert!(
        notes.contains(&format!(
            "strata-ctl: requests: the router restarted (instance {first_instance} is now \
             {second_instance}); its sequences start again, reading from after=0\n"
        )),
        "{notes}"
    );
    assert!(
        notes.contains(&format!("strata-ctl: requests: {url} answers again\n")),
        "{notes}"
    );
    // One note per failure kind (refused while down; perhaps a reset while stopping or a 503
    // while the new proxy reaches its supervisor), not one per retry.
    let retry_notes = notes.matches("retrying every 1s").count();
    assert!((1..=3).contains(&retry_notes), "{notes}");

    // Still following; SIGINT ends it.
    let mut follow = follow;
    assert!(follow.try_exit().is_none());
    signal(follow.pid(), Signal::SIGINT);
    follow.wait(SHORT);
}

#[test]
fn unreachable_or_invalid_urls_exit_1() {
    // Nothing listens on a fresh port.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = requests(&[&url]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "strata-ctl: requests: GET {url}/requests?after=0&limit=1000: cannot connect to \
             127.0.0.1:{port}: "
        )) && stderr.lines().count() == 1,
        "{stderr}"
    );

    for (bad, why) in [
        ("https://127.0.0.1:8088", "only http:// is supported"),
        ("http://127.0.0.1:notaport", "invalid port"),
        ("http://", "expected http://HOST:PORT"),
    ] {
        let out = requests(&[bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!("strata-ctl: requests: invalid URL {bad:?}: "))
                && stderr.contains(why),
            "{stderr}"
        );
    }

    // Something that is not an HTTP server: a clear error, exit 1.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf);
        let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.6\r\n");
    });
    let out = requests(&[&format!("http://{addr}")]);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("incomplete HTTP answer"), "{stderr}");
}
