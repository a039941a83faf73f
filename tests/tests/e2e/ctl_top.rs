//! `strata-ctl top` against the fake backend: in a pseudo-terminal (a private tmux server)
//! the live view shows the loaded model and a finished request and quits on `q`; with
//! stdout not a terminal it prints the same view as plain text; against the control socket
//! it shows what `status` says. At 80x24 and 160x40 a long model ID shows whole, no line is
//! wider than the pane, and once the stack stops the view says since when the router is
//! unreachable instead of the last figures.
//!
//! Needs tmux; skipped with the reason without it, unless `STRATA_REQUIRE_TMUX=1` (as
//! `.ci/run` sets it, after installing tmux when missing).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use strata_e2e::binaries::binary;
use strata_e2e::http::chat_body;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for, poll_until};
use strata_test_support::tempdir::TempDir;

const A: &str = "flash-a";
/// Longer than the 28 characters the view used to cut every ID at.
const LONG: &str = "flash-a-long-model-id-for-the-terminal-q4_k_m";

fn tmux(socket: &Path, args: &[&str]) -> Output {
    Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .expect("run tmux")
}

/// A detached 110x30 session named `name` running `command`.
fn start_session(socket: &Path, name: &str, command: &str) {
    start_session_sized(socket, name, (110, 30), command);
}

/// A detached `columns`x`rows` session named `name` running `command`.
fn start_session_sized(socket: &Path, name: &str, (columns, rows): (u16, u16), command: &str) {
    let (columns, rows) = (columns.to_string(), rows.to_string());
    let started = tmux(
        socket,
        &[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &columns,
            "-y",
            &rows,
            command,
        ],
    );
    assert!(started.status.success(), "{started:?}");
}

/// The pane's text, one string a row.
fn capture(socket: &Path, name: &str) -> String {
    let out = tmux(socket, &["capture-pane", "-p", "-t", name]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ends the private tmux server (and the `top`s in it) however the test ends.
struct TmuxServer(TempDir);

impl TmuxServer {
    fn socket(&self) -> std::path::PathBuf {
        self.0.path().join("tmux.sock")
    }
}

impl Drop for TmuxServer {
    fn drop(&mut self) {
        let _ = tmux(&self.socket(), &["kill-server"]);
    }
}

fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var("STRATA_REQUIRE_TMUX").as_deref() != Ok("1"),
            "tmux is required (STRATA_REQUIRE_TMUX=1)"
        );
        eprintln!("skipping the pseudo-terminal check: tmux is not installed");
    }
    found
}

#[test]
fn top_shows_the_loaded_model_and_a_finished_request() {
    let config = ConfigBuilder::new("top").model(ModelSpec::new(A)).build();
    let stack = Stack::start(config);
    let response = stack.chat(&chat_body(A, false));
    response.expect_status(200);
    let url = format!("http://{}", stack.addr());
    let ctl = binary("strata-ctl");

    // Not a terminal: the same view, as plain text.
    let plain = Command::new(&ctl)
        .args(["top", &url, "--once"])
        .output()
        .expect("run strata-ctl top");
    assert!(plain.status.success(), "{plain:?}");
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains(&format!("model: loaded {A}")), "{text}");
    assert!(
        text.contains("routing: on") && text.contains("drain: no"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|line| line.contains("completed"))
        .unwrap_or_else(|| panic!("no finished request in\n{text}"));
    assert!(row.contains(A) && row.contains("200"), "{row}");

    // The control socket: status only.
    let socket_view = Command::new(&ctl)
        .arg("top")
        .arg(&stack.config().control_socket)
        .arg("--once")
        .output()
        .expect("run strata-ctl top SOCKET");
    let socket_text = String::from_utf8_lossy(&socket_view.stdout);
    assert!(socket_view.status.success(), "{socket_view:?}");
    assert!(
        socket_text.contains(&format!("model: loaded {A}")),
        "{socket_text}"
    );

    if !tmux_available() {
        stack.stop();
        return;
    }
    // In a pseudo-terminal of a private tmux server, 110x30.
    let socket = stack.config().dir.join("tmux.sock");
    let command = format!("{} top {url} --interval 0.2", ctl.display());
    start_session(&socket, "top", &command);
    let screen = poll_for(
        DEADLINE,
        "the view to show the model and the request",
        || {
            let out = tmux(&socket, &["capture-pane", "-p", "-t", "top"]);
            let screen = String::from_utf8_lossy(&out.stdout).into_owned();
            (screen.contains(&format!("model: loaded {A}")) && screen.contains("completed"))
                .then_some(screen)
        },
    );
    assert!(screen.contains("in flight: 0"), "{screen}");
    println!("captured screen:\n{screen}");
    // A slow stream shows as held (leased, with its age), then as a second record, in place.
    let mut slow = chat_body(A, true);
    slow["fake"] = serde_json::json!({"tokens": 20, "token_delay_ms": 100});
    let mut stream = stack.open_chat(&slow);
    let id = stream.header("x-strata-request-id").unwrap().to_owned();
    poll_until(DEADLINE, "the held stream on the screen", || {
        let out = tmux(&socket, &["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|line| line.starts_with(&id) && line.contains("leased"))
    });
    stream.read_to_end(DEADLINE);
    poll_until(DEADLINE, "the second request on the screen", || {
        let out = tmux(&socket, &["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout)
            .matches("completed")
            .count()
            >= 2
    });
    // `q` quits: the session (and the private server) goes away.
    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    poll_until(Duration::from_secs(10), "top to quit on q", || {
        !tmux(&socket, &["has-session", "-t", "top"])
            .status
            .success()
    });
    // So does Ctrl-C (raw mode delivers it as a key, not a signal).
    start_session(&socket, "top2", &command);
    poll_until(DEADLINE, "the second view to draw", || {
        let out = tmux(&socket, &["capture-pane", "-p", "-t", "top2"]);
        String::from_utf8_lossy(&out.stdout).contains("model: loaded")
    });
    tmux(&socket, &["send-keys", "-t", "top2", "C-c"]);
    poll_until(Duration::from_secs(10), "top to quit on Ctrl-C", || {
        !tmux(&socket, &["has-session", "-t", "top2"])
            .status
            .success()
    });
    let _ = tmux(&socket, &["kill-server"]);
    stack.stop();
}

/// `HH:MM:SS` (two digits each) at the start of `text`.
fn starts_with_clock_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 8
        && [0, 1, 3, 4, 6, 7]
            .iter()
            .all(|&at| bytes[at].is_ascii_digit())
        && bytes[2] == b':'
        && bytes[5] == b':'
}

#[test]
fn top_fits_80x24_and_160x40_and_says_since_when_the_router_is_unreachable() {
    let config = ConfigBuilder::new("top-size")
        .model(ModelSpec::new(LONG))
        .build();
    let stack = Stack::start(config);
    stack.chat(&chat_body(LONG, false)).expect_status(200);
    if !tmux_available() {
        stack.stop();
        return;
    }
    let url = format!("http://{}", stack.addr());
    let command = format!(
        "{} top {url} --interval 0.2",
        binary("strata-ctl").display()
    );
    // Its own directory: the stack's goes away when the stack stops, and the panes are read
    // after that.
    let server = TmuxServer(TempDir::new("top-tmux"));
    let socket = server.socket();
    let panes = [("narrow", 80, 24), ("wide", 160, 40)];
    for (name, columns, rows) in panes {
        start_session_sized(&socket, name, (columns, rows), &command);
    }
    for (name, columns, rows) in panes {
        let screen = poll_for(DEADLINE, "the view with the finished request", || {
            let screen = capture(&socket, name);
            screen.contains("completed").then_some(screen)
        });
        println!("{name} ({columns}x{rows}):\n{screen}");
        let lines: Vec<&str> = screen.lines().collect();
        assert!(lines.len() <= usize::from(rows), "{screen}");
        for line in &lines {
            assert!(
                line.chars().count() <= usize::from(columns),
                "wider than {columns}: {line:?}"
            );
        }
        // The ID whole on the model line and in the record's row, and the row's last column
        // (total ms, kept at 80 where seq, tok/s and ttft ms give way) not cut off.
        assert!(
            lines
                .iter()
                .any(|line| line.starts_with(&format!("model: loaded {LONG}"))),
            "{screen}"
        );
        let row = lines
            .iter()
            .find(|line| line.contains("completed"))
            .unwrap_or_else(|| panic!("{screen}"));
        assert!(row.contains(LONG), "{row}");
        assert!(
            row.split_whitespace()
                .last()
                .is_some_and(|total| total.bytes().all(|b| b.is_ascii_digit())),
            "{row}"
        );
        let heading = lines
            .iter()
            .find(|line| line.contains("reason"))
            .unwrap_or_else(|| panic!("{screen}"));
        assert!(heading.ends_with("total ms"), "{heading}");
        if columns >= 160 {
            for column in ["seq", "ttft ms", "tok/s"] {
                assert!(heading.contains(column), "{heading}");
            }
        } else {
            assert!(!heading.contains("tok/s"), "{heading}");
        }
    }

    // The router goes away: both views say since when, and show none of the old figures.
    stack.stop();
    for (name, _, _) in panes {
        let screen = poll_for(DEADLINE, "the unreachable line", || {
            let screen = capture(&socket, name);
            screen
                .contains("router unreachable since ")
                .then_some(screen)
        });
        println!("{name} after the stop:\n{screen}");
        let line = screen
            .lines()
            .find_map(|line| line.strip_prefix("router unreachable since "))
            .unwrap_or_else(|| panic!("{screen}"));
        assert!(starts_with_clock_time(line), "{screen}");
        assert!(
            !screen.contains("model: loaded") && !screen.contains("completed"),
            "{screen}"
        );
    }
    for (name, _, _) in panes {
        tmux(&socket, &["send-keys", "-t", name, "q"]);
        poll_until(Duration::from_secs(10), "top to quit on q", || {
            !tmux(&socket, &["has-session", "-t", name]).status.success()
        });
    }
}
