//! The router behind CLIProxyAPI, through the behavioural stand-in in
//! `tests/cliproxy_standin/standin.py` (what `research/cliproxyapi.md` documents from
//! CLIProxyAPI's source; no binary can be run here). The router as its single
//! `openai-compatibility` upstream: the router's keepalives keep the silent wait alive though
//! the stand-in drops them, a load failure during the wait reaches the end client as a real
//! status, a backend's own mid-stream error as the error line CLIProxyAPI writes after its
//! headers, and with `disable-cooling` the route is used again at once after a 5xx (without
//! it, CLIProxyAPI answers 429 `model_cooldown` itself for 60 s).

use std::net::SocketAddr;
use std::process::Command;

use serde_json::{Value, json};
use strata_e2e::accounting::all_records;
use strata_e2e::http::{self, Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for};
use strata_test_support::python::{python, repo_root};
use strata_test_support::running::Running;
use strata_test_support::tempdir::TempDir;

const A: &str = "flash-a";
const BROKEN_SLOW: &str = "flash-broken-slow";
const SLOW: &str = "flash-slow";

/// A running stand-in and its address.
struct StandIn {
    _process: Running,
    addr: SocketAddr,
}

fn start_standin(dir: &TempDir, router: SocketAddr, disable_cooling: bool) -> StandIn {
    let tag = if disable_cooling { "nocool" } else { "cool" };
    let ready = dir.join(format!("standin-{tag}.port"));
    let config = dir.write(
        &format!("standin-{tag}.json"),
        &json!({"listen_port": 0, "base_url": format!("http://{router}/v1"),
                "disable_cooling": disable_cooling, "keepalive_seconds": 0,
                "ready_file": ready})
        .to_string(),
    );
    let child = Command::new(python())
        .arg(repo_root().join("tests/cliproxy_standin/standin.py"))
        .arg(&config)
        .spawn()
        .expect("start the CLIProxyAPI stand-in");
    let process = Running::new(format!("standin-{tag}"), child).kill_on_drop();
    let port: u16 = poll_for(DEADLINE, "the stand-in listening", || {
        std::fs::read_to_string(&ready)
            .ok()
            .and_then(|port| port.trim().parse().ok())
    });
    StandIn {
        _process: process,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

fn records(stack: &Stack) -> usize {
    all_records(stack.addr()).len()
}

#[test]
fn the_router_behind_cliproxyapi() {
    let stack = Stack::start(
        ConfigBuilder::new("cliproxy")
            .model(ModelSpec::new(A))
            .model(
                ModelSpec::new(BROKEN_SLOW)
                    .load_ms(5000)
                    .start_failure("exit"),
            )
            .model(ModelSpec::new(SLOW).load_ms(7000))
            .cooldown_ms(0)
            .wait_when_busy(true)
            .build(),
    );
    let dir = TempDir::new("cliproxy-standin");
    let standin = start_standin(&dir, stack.addr(), true);

    // A stream that waits through a 7 s load: the router's comments keep the connection to
    // the stand-in alive, the stand-in drops them, and the end client gets the answer.
    let mut stream = http::open_chat(standin.addr, &chat_body(SLOW, true));
    assert_eq!(stream.status, 200);
    let frames = stream.remaining_frames(DEADLINE);
    assert!(frames.iter().all(|f| !f.is_comment()), "{frames:#?}");
    assert!(frames.iter().any(Frame::is_data), "{frames:#?}");
    assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");

    // A load that fails after the router committed its head (with its first keepalive, which
    // the stand-in dropped): the stand-in has not committed, so the end client gets a real 503
    // with the router's error, from the `event: error` frame's `error.status`.
    let failed = http::chat(standin.addr, &chat_body(BROKEN_SLOW, true));
    assert_eq!(failed.status, 503, "{failed}");
    let body: Value = failed.json();
    assert_eq!(body["error"]["code"], "model_load_error", "{failed}");

    // With disable-cooling the route is used again at once after that 5xx.
    let again = http::chat(standin.addr, &chat_body(A, true));
    assert_eq!(again.status, 200, "{again}");

    // A backend's own error after two deltas: the router turns it into its error frame
    // (status 502), which the stand-in, committed by then, writes as one error data line
    // with no [DONE].
    let mut body = chat_body(A, true);
    body["fake"] = json!({"mid_stream": "error", "mid_stream_after": 2, "tokens": 4});
    let mut stream = http::open_chat(standin.addr, &body);
    assert_eq!(stream.status, 200);
    let frames = stream.remaining_frames(DEADLINE);
    let last = frames.last().expect("frames");
    assert_eq!(last.json()["error"]["status"], 502, "{frames:#?}");
    assert!(!frames.iter().any(Frame::is_done), "{frames:#?}");

    // Without disable-cooling, one 5xx makes CLIProxyAPI refuse the model for 60 s by itself:
    // the router never sees the next request.
    let cooling = start_standin(&dir, stack.addr(), false);
    let mut body = chat_body(A, false);
    body["fake"] = json!({"error_status": 500});
    assert_eq!(http::chat(cooling.addr, &body).status, 500);
    let before = poll_for(DEADLINE, "the 500's record", || {
        let count = records(&stack);
        all_records(stack.addr())
            .iter()
            .any(|r| r.json["upstream_status"] == 500)
            .then_some(count)
    });
    let refused = http::chat(cooling.addr, &chat_body(A, false));
    assert_eq!(refused.status, 429, "{refused}");
    assert_eq!(
        refused.json()["error"]["code"],
        "model_cooldown",
        "{refused}"
    );
    assert!(refused.header("retry-after").is_some(), "{refused}");
    assert_eq!(records(&stack), before, "the router never saw it");
    stack.stop();
    drop(standin);
    drop(cooling);
}
