//! `strata-ctl requests URL [--after N] [--follow]` against a real stack:
//! `strata-supervisor` and `strata-proxy` on the fake Strata backend,
//! started by the end-to-end harness's [`Stack`] on the ctl tests' config;
//! the pages and the printed records are read as the typed documents. The
//! first and the error cases run under both names (`strata-router requests`,
//! `strata-ctl requests`).

use std::fs;
use std::io::{Read, Write};
use std::process::{Command, Output};

use crate::common::*;
use nix::sys::signal::Signal;
use strata_e2e::accounting::{Record, page, wait_records};
use strata_e2e::http::{self, CHAT_PATH};
use strata_e2e::stack::Stack;
use strata_protocol::record::Reason;

under_both_names!(
    prints_every_record_in_seq_order_and_after_skips,
    unreachable_or_invalid_urls_exit_1,
);

const MODELS: &[TestModel] = &[TestModel {
    id: "up-a",
    load_ms: 0,
    installed: true,
}];

/// The end-to-end harness's router (supervisor + proxy) on the ctl tests' config, with any
/// further top-level keys `edit` sets.
fn router(
    edit: impl FnOnce(ConfigBuilder<strata_e2e::TestConfig>) -> ConfigBuilder<strata_e2e::TestConfig>,
) -> Stack {
    Stack::start(edit(ctl_config(MODELS)).build())
}

fn url(router: &Stack) -> String {
    format!("http://{}", router.addr())
}

/// One chat completion (`body` as given); the response's status code.
fn chat(router: &Stack, body: &str) -> u16 {
    http::request(
        router.addr(),
        "POST",
        CHAT_PATH,
        &[("content-type", "application/json")],
        body.as_bytes(),
    )
    .status
}

fn ok_chat(router: &Stack) {
    let status = chat(
        router,
        r#"{"model":"up-a","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(status, 200);
}

/// The instance the router's `/requests` pages name.
fn instance(router: &Stack) -> String {
    page(router.addr(), "after=0").instance_id().to_owned()
}

fn requests(exe: Exe, args: &[&str]) -> Output {
    let mut all = vec!["requests"];
    all.extend_from_slice(args);
    exe.run(&all)
}

/// The `seq` of each stdout line, each read exactly as a record.
fn seqs(stdout: &str) -> Vec<u64> {
    stdout.lines().map(|line| Record::new(line).seq).collect()
}

fn prints_every_record_in_seq_order_and_after_skips(exe: Exe) {
    let router = router(|config| config);
    let url = url(&router);

    // Nothing yet: no output, success.
    let out = requests(exe, &[&url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "");

    ok_chat(&router);
    assert_eq!(chat(&router, "{not json"), 400);
    ok_chat(&router);
    assert_eq!(chat(&router, r#"{"model":"nope","messages":[]}"#), 404);
    wait_records(router.addr(), 4);

    let out = requests(exe, &[&url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let stdout = text(&out.stdout);
    assert_eq!(seqs(&stdout), [1, 2, 3, 4]);
    // Each line is exactly the endpoint's item text: the raw body is
    // `{"records":[L1,L2,...],...}`.
    let all = page(router.addr(), "after=0&limit=1000");
    let joined = stdout.lines().collect::<Vec<_>>().join(",");
    assert!(
        all.raw.starts_with(&format!("{{\"records\":[{joined}],")),
        "stdout:\n{stdout}\nbody:\n{}",
        all.raw
    );
    let printed: Vec<Record> = stdout.lines().map(Record::new).collect();
    assert_eq!(printed, all.records);
    assert_eq!(printed[1].reason, Reason::InvalidRequest);
    assert_eq!(printed[3].status, Some(404));

    // --after skips; a trailing slash in the URL is fine.
    let out = requests(exe, &[&format!("{url}/"), "--after", "2"]);
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
        let out = requests(exe, &[&url, "--after", after]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "", "--after {after}");
    }

    // Reading does not drain: a second full read prints the same.
    let again = requests(exe, &[&url]);
    assert_eq!(text(&again.stdout), stdout);

    // A base URL whose /requests is not the endpoint: HTTP 404, exit 1.
    let out = requests(exe, &[&format!("{url}/elsewhere")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&exe.says("requests: GET ")) && stderr.contains("HTTP 404"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    router.stop();
}

#[test]
fn pages_through_more_than_one_page_and_warns_about_evicted_records() {
    let exe = STRATA_CTL;
    // Capacity 1003: 1005 records evict two, and reading them all takes two
    // pages of at most 1000.
    let router = router(|config| config.set("request_log_capacity", 1003));
    let url = url(&router);
    for _ in 0..1005 {
        assert_eq!(chat(&router, "[]"), 400);
    }
    wait_records(router.addr(), 1005);

    let out = requests(exe, &[&url]);
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
    let out = requests(exe, &[&url, "--after", "1001"]);
    assert_eq!(seqs(&text(&out.stdout)), [1002, 1003, 1004, 1005]);
    assert_eq!(text(&out.stderr), "");
    // From a cursor with one evicted record after it.
    let out = requests(exe, &[&url, "--after", "1"]);
    assert_eq!(text(&out.stdout).lines().count(), 1003);
    assert!(
        text(&out.stderr).contains("warning: 1 record(s) after seq 1 were evicted"),
        "{}",
        text(&out.stderr)
    );
    router.stop();
}

#[test]
fn follow_restarts_from_zero_when_the_router_restarts() {
    let mut router = router(|config| config);
    let url = url(&router);
    ok_chat(&router);
    ok_chat(&router);
    wait_records(router.addr(), 2);
    let first_instance = instance(&router);

    let stderr_path = router.config().dir.path().join("follow.stderr");
    let mut command = Command::new(ctl_exe());
    command.args(["requests", &url, "--follow"]);
    let (follow, lines) = spawn_with_lines(command, &stderr_path, "strata-ctl requests --follow");
    let stderr = || fs::read_to_string(&stderr_path).unwrap_or_default();
    // Every line is a record, read exactly.
    let record = |line: &str| Some(Record::new(line));
    let (_, seen) = wait_line(&lines, LONG, "seq 2", |line| {
        record(line).filter(|r| r.seq == 2)
    });
    assert_eq!(seqs(&seen.join("\n")), [1, 2], "{}", stderr());

    // New records appear while following.
    ok_chat(&router);
    let (third, seen) = wait_line(&lines, LONG, "seq 3", record);
    assert_eq!(seen.len(), 1);
    assert_eq!(third.seq, 3);
    assert!(third.request_id.starts_with(&first_instance), "{third}");

    // The whole router restarts: a new instance. While the proxy is down,
    // the follower notes the failure and keeps retrying; the supervisor
    // restarts (a clean stop, then a new instance) before the proxy comes
    // back.
    router.kill_proxy(Signal::SIGTERM);
    let status = router.wait_proxy_exit(LONG);
    assert!(status.success(), "strata-proxy exited with {status}");
    poll_for(LONG, "a retry note", || {
        stderr().contains("; retrying every 1s").then_some(())
    });
    router.supervisor().restart();
    router.start_proxy();
    let second_instance = instance(&router);
    assert_ne!(first_instance, second_instance);
    ok_chat(&router);
    let (fresh, seen) = wait_line(&lines, LONG, "a record of the new instance", record);
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(fresh.seq, 1, "reading restarted from after=0");
    assert_eq!(fresh.request_id, format!("{second_instance}-1"));
    ok_chat(&router);
    let (next, _) = wait_line(&lines, LONG, "seq 2 of the new instance", record);
    assert_eq!(next.seq, 2);

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
    router.stop();
}

fn unreachable_or_invalid_urls_exit_1(exe: Exe) {
    // Nothing listens on a fresh port.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = requests(exe, &[&url]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&exe.says(&format!(
            "requests: GET {url}/requests?after=0&limit=1000: cannot connect to \
             127.0.0.1:{port}: "
        ))) && stderr.lines().count() == 1,
        "{stderr}"
    );

    for (bad, why) in [
        ("https://127.0.0.1:8088", "only http:// is supported"),
        ("http://127.0.0.1:notaport", "invalid port"),
        ("http://", "expected http://HOST:PORT"),
    ] {
        let out = requests(exe, &[bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&exe.says(&format!("requests: invalid URL {bad:?}: ")))
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
    let out = requests(exe, &[&format!("http://{addr}")]);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("incomplete HTTP answer"), "{stderr}");
}
