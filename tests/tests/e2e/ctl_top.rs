//! `strata-ctl top` against the fake backend: in a pseudo-terminal (a private tmux server)
//! the live view shows the loaded model and a finished request and quits on `q`; with
//! stdout not a terminal it prints the same view as plain text; against the control socket
//! it shows what `status` says.
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

const A: &str = "flash-a";

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
    let started = tmux(
        socket,
        &[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "110",
            "-y",
            "30",
            command,
        ],
    );
    assert!(started.status.success(), "{started:?}");
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
