//! `status`, `on` and `off` against a real strata-supervisor running the
//! fake Strata backend, and against tiny stand-in daemons for the failure
//! cases; every test runs under both names (`strata-router status SOCKET`,
//! the spec's form, and `strata-ctl status SOCKET`) with the same
//! assertions: same output, same exit status.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::process::{Output, Stdio};
use std::thread;

use crate::common::*;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_protocol::control::Done;

under_both_names!(
    on_status_off_against_a_real_supervisor,
    off_now_unloads_a_loaded_model,
    on_for_an_uninstalled_or_unknown_model_fails,
    interrupting_on_cancels_the_load,
    a_missing_socket_is_a_clear_error,
    a_daemon_that_closes_without_a_final_event_is_a_failure,
    requests_are_the_spec_lines,
    an_error_answer_is_a_failure_that_suggests_a_restart,
    a_failed_done_event_exits_one,
);

const MODELS: &[TestModel] = &[
    TestModel {
        id: "up-a",
        load_ms: 300,
        installed: true,
    },
    TestModel {
        id: "up-slow",
        load_ms: 5000,
        installed: true,
    },
    TestModel {
        id: "not-installed",
        load_ms: 0,
        installed: false,
    },
];

/// The progress messages (format checked) and the final stderr line.
fn split_stderr(out: &Output) -> (Vec<String>, String) {
    let stderr = text(&out.stderr);
    let mut lines: Vec<&str> = stderr.lines().collect();
    let last = lines.pop().unwrap_or_default().to_owned();
    let messages = lines
        .iter()
        .map(|line| {
            progress_message(line)
                .unwrap_or_else(|| panic!("not a progress line: {line:?}\n{stderr}"))
                .to_owned()
        })
        .collect();
    (messages, last)
}

/// The one JSON line on stdout.
fn final_event(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout must be one JSON line: {stdout:?}");
    serde_json::from_str(lines[0]).expect("stdout is json")
}

/// The one stdout line of an `on`/`off`: the daemon's `done`, read exactly.
fn final_done(out: &Output) -> Done {
    parse_done(&final_event(out))
}

fn backend_pid(message: &str) -> Option<u32> {
    message
        .strip_prefix("backend pid ")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

fn on_status_off_against_a_real_supervisor(exe: Exe) {
    let sup = start_supervisor(MODELS);

    // status: one JSON line with the daemon's PID.
    let out = exe.run(&["status", control_socket(&sup)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let status = parse_status(&final_event(&out));
    assert_eq!(status.daemon_pid, sup.pid());
    assert_eq!(status.loaded, None);

    // on: the spec's progress lines, in order, then the final message.
    let out = exe.run(&["on", control_socket(&sup), "up-a"]);
    let (messages, last) = split_stderr(&out);
    assert!(out.status.success(), "{messages:#?}\n{last}");
    let pid = messages
        .iter()
        .find_map(|m| backend_pid(m))
        .expect("a `backend pid N started` line");
    let expected_order = [
        "routing enabled".to_owned(),
        "starting backend for model up-a".to_owned(),
        format!("backend pid {pid} started, waiting for readiness (loading model up-a)"),
        "backend reported ready, running health check".to_owned(),
        "health check passed, model identity verified".to_owned(),
    ];
    let without_still_waiting: Vec<&String> = messages
        .iter()
        .filter(|m| !m.starts_with("still waiting for readiness ("))
        .collect();
    assert_eq!(
        without_still_waiting,
        expected_order.iter().collect::<Vec<_>>()
    );
    assert_eq!(last, "on: model up-a loaded and healthy, routing enabled");
    let done = final_done(&out);
    assert!(done.ok);
    assert_eq!(done.message, last);
    let status = done.status;
    assert_eq!(status.loaded.as_deref(), Some("up-a"));
    assert_eq!(status.child_pid, Some(pid));
    assert!(status.routing);
    assert_eq!(status.daemon_pid, sup.pid());
    assert!(is_alive(pid));

    // on again, with and without the model: already on, no progress.
    for args in [
        vec!["on", control_socket(&sup), "up-a"],
        vec!["on", control_socket(&sup)],
    ] {
        let out = exe.run(&args);
        assert!(out.status.success());
        assert_eq!(text(&out.stderr), "on: already on\n");
        assert!(final_done(&out).ok);
    }

    // status while loaded.
    let status = sup.status();
    assert_eq!(status.loaded.as_deref(), Some("up-a"));
    assert_eq!(status.child_pid, Some(pid));
    assert!(!status.busy);

    // off: routing off, unload, stop, exited; the backend is gone.
    let out = exe.run(&["off", control_socket(&sup)]);
    let (messages, last) = split_stderr(&out);
    assert!(out.status.success(), "{messages:#?}\n{last}");
    assert_eq!(
        messages,
        [
            "routing disabled: new and queued requests get 503".to_owned(),
            "unloading model up-a".to_owned(),
            format!("stopping backend pid {pid}"),
            format!("backend pid {pid} exited, memory released"),
        ]
    );
    assert_eq!(last, "off: model unloaded, routing disabled");
    let done = final_done(&out);
    assert!(done.ok);
    let status = done.status;
    assert_eq!(status.loaded, None);
    assert_eq!(status.child_pid, None);
    assert!(!status.routing);
    assert!(!is_alive(pid), "backend pid {pid} still running after off");

    // off --now with nothing loaded.
    let out = exe.run(&["off", "--now", control_socket(&sup)]);
    assert!(out.status.success());
    let (messages, last) = split_stderr(&out);
    assert_eq!(
        messages,
        ["routing disabled: new and queued requests get 503"]
    );
    assert_eq!(last, "off: no model loaded, routing disabled");
}

fn off_now_unloads_a_loaded_model(exe: Exe) {
    let sup = start_supervisor(MODELS);
    let out = exe.run(&["on", control_socket(&sup), "up-a"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pid = final_done(&out)
        .status
        .child_pid
        .expect("a backend after on");

    let out = exe.run(&["off", "--now", control_socket(&sup)]);
    let (messages, last) = split_stderr(&out);
    assert!(out.status.success(), "{messages:#?}\n{last}");
    assert_eq!(
        messages,
        [
            "routing disabled: new and queued requests get 503".to_owned(),
            "unloading model up-a".to_owned(),
            format!("stopping backend pid {pid}"),
            format!("backend pid {pid} exited, memory released"),
        ]
    );
    assert_eq!(last, "off: model unloaded, routing disabled");
    assert!(!is_alive(pid));
    assert_eq!(sup.status().loaded, None);
}

fn on_for_an_uninstalled_or_unknown_model_fails(exe: Exe) {
    let sup = start_supervisor(MODELS);
    let before = sup.status();

    let out = exe.run(&["on", control_socket(&sup), "not-installed"]);
    assert_eq!(out.status.code(), Some(1));
    let done = final_done(&out);
    assert!(!done.ok);
    assert_eq!(
        text(&out.stderr),
        "on: model not-installed is not prepared (not_installed)\n"
    );
    assert_eq!(
        done.message,
        "on: model not-installed is not prepared (not_installed)"
    );

    let out = exe.run(&["on", control_socket(&sup), "no-such-model"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!final_done(&out).ok);

    let after = sup.status();
    assert_eq!(after.routing, before.routing);
    assert_eq!(after.loaded, None);
}

fn interrupting_on_cancels_the_load(exe: Exe) {
    let sup = start_supervisor(MODELS);
    let routing_before = sup.status().routing;

    let mut child = exe
        .command()
        .args(["on", control_socket(&sup), "up-slow"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = line_channel(child.stderr.take().unwrap());
    let mut on = Running::new("on", child);
    let (pid, _) = wait_line(&lines, LONG, "backend pid N started", |line| {
        progress_message(line).and_then(backend_pid)
    });
    assert!(is_alive(pid));
    signal(on.pid(), Signal::SIGINT);
    let status = on.wait(SHORT);
    assert_eq!(
        status.signal(),
        Some(Signal::SIGINT as i32),
        "Ctrl-C ends the client with the default SIGINT action ({status})"
    );

    let status = poll_for(LONG, "the daemon to cancel the load", || {
        let status = sup.status();
        (!status.busy && status.loading.is_none() && status.child_pid.is_none()).then_some(status)
    });
    assert_eq!(status.loaded, None);
    assert_eq!(status.routing, routing_before);
    poll_for(SHORT, "the cancelled backend to be gone", || {
        (!is_alive(pid)).then_some(())
    });
    // The load never finished: the fake never wrote its ready file (it may
    // not even have got as far as logging its start).
    let events = sup.fake_log().events();
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "ready" && e["pid"] == json!(pid)),
        "{events:?}"
    );
}

fn a_missing_socket_is_a_clear_error(exe: Exe) {
    let dir = TempDir::new("control");
    let socket = dir.path().join("control.sock");
    let socket = socket.to_str().unwrap();
    for args in [
        vec!["status", socket],
        vec!["on", socket],
        vec!["off", socket],
        vec!["off", "--now", socket],
    ] {
        let out = exe.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stdout), "");
        assert_eq!(
            text(&out.stderr),
            exe.says(&format!(
                "cannot connect to {socket}: No such file or directory (is the daemon running?)\n"
            ))
        );
    }
}

/// A one-connection stand-in daemon: reads the request line, writes
/// `replies`, then closes. Returns the request line it read.
fn stand_in(listener: UnixListener, replies: Vec<String>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(&stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let mut writer = &stream;
        for reply in replies {
            writer.write_all(reply.as_bytes()).unwrap();
            writer.write_all(b"\n").unwrap();
        }
        line
    })
}

fn a_daemon_that_closes_without_a_final_event_is_a_failure(exe: Exe) {
    let dir = TempDir::new("control");
    let path = dir.path().join("control.sock");
    let progress = json!({"event":"progress","op":"on","phase":"routing",
                          "message":"routing enabled","elapsed_ms":0});
    let server = stand_in(
        UnixListener::bind(&path).unwrap(),
        vec![progress.to_string()],
    );
    let out = exe.run(&["on", path.to_str().unwrap(), "m"]);
    assert_eq!(server.join().unwrap(), "{\"cmd\":\"on\",\"model\":\"m\"}\n");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        format!(
            "[   0.0s] routing enabled\n{}",
            exe.says("the daemon closed the connection without a final answer\n")
        )
    );

    // The same for off, and the request line it sends.
    let path = dir.path().join("control2.sock");
    let server = stand_in(UnixListener::bind(&path).unwrap(), vec![]);
    let out = exe.run(&["off", "--now", path.to_str().unwrap()]);
    assert_eq!(server.join().unwrap(), "{\"cmd\":\"off\",\"now\":true}\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("without a final answer"));
}

fn requests_are_the_spec_lines(exe: Exe) {
    let dir = TempDir::new("control");
    let cases: [(&[&str], &str); 4] = [
        (&["on"], "{\"cmd\":\"on\",\"model\":null}\n"),
        (&["on", "M"], "{\"cmd\":\"on\",\"model\":\"M\"}\n"),
        (&["off"], "{\"cmd\":\"off\",\"now\":false}\n"),
        (&["status"], "status\n"),
    ];
    for (index, (args, expected)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("c{index}.sock"));
        let done = json!({"event":"done","ok":true,"message":"fine","daemon_pid":1});
        let server = stand_in(UnixListener::bind(&path).unwrap(), vec![done.to_string()]);
        let socket = path.to_str().unwrap();
        let mut full = vec![args[0]];
        full.push(socket);
        full.extend(&args[1..]);
        let out = exe.run(&full);
        assert_eq!(server.join().unwrap(), expected, "{args:?}");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("{done}\n"));
    }
}

fn an_error_answer_is_a_failure_that_suggests_a_restart(exe: Exe) {
    let dir = TempDir::new("control");
    let error = r#"{"error":"unknown control command"}"#;
    for (index, command) in ["on", "off", "status"].into_iter().enumerate() {
        let path = dir.path().join(format!("e{index}.sock"));
        let server = stand_in(UnixListener::bind(&path).unwrap(), vec![error.to_owned()]);
        let out = exe.run(&[command, path.to_str().unwrap()]);
        server.join().unwrap();
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(text(&out.stdout), format!("{error}\n"));
        let stderr = text(&out.stderr);
        assert_eq!(
            stderr,
            exe.says(&format!(
                "the daemon answered with an error: unknown control command (the running \
                 daemon predates this {}; restart the daemon after upgrading)\n",
                exe.name
            ))
        );
    }
}

fn a_failed_done_event_exits_one(exe: Exe) {
    let dir = TempDir::new("control");
    let path = dir.path().join("c.sock");
    let done = json!({"event":"done","ok":false,"message":"on: startup failed"});
    let server = stand_in(UnixListener::bind(&path).unwrap(), vec![done.to_string()]);
    let out = exe.run(&["on", path.to_str().unwrap()]);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), format!("{done}\n"));
    assert_eq!(text(&out.stderr), "on: startup failed\n");
}
