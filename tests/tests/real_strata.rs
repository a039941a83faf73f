//! The router in front of the public Strata server (issue 28), for anyone who has it:
//!
//!     STRATA_SERVER_DIR=/path/to/Strata cargo test -p strata-e2e --test real_strata
//!
//! `STRATA_SERVER_DIR` is a tree holding `serve/server.py` at revision 5f8f3f2 of
//! Niko1221/Strata and the companion files it imports (RESEARCH.md "Running the public Strata
//! server" lists them); Python needs `jinja2` and `regex`. The server runs unmodified with
//! `--engine strata` over `tests/real_strata/standin_engine.py`, this project's stand-in for the
//! native engine (it speaks the engine's stdin/stdout line protocol and logs what it was told).
//! Without the variable every test skips with one line (CI has no copy).
//!
//! Checked: stream and JSON for each model and through an alias the profile lists (Strata
//! answers with the alias name then), a swap in which the old engine exits by `QUIT`, records
//! whose usage and timings come from the real frames, `off`/`on`, idle unload (QUIT again), a
//! client disconnect reaching the engine as `STOP`, SIGKILL of the server and of the engine,
//! `readiness: "auto"` choosing `health` (this Strata has no `--ready-file`).
//!
//! A test binary of its own, not a module of `e2e/`, so that the command above builds and
//! runs these tests alone.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{chat_request, wait_record};
use strata_e2e::control::child_pid;
use strata_e2e::http::Frame;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, TempDir, poll_for, poll_until};
use strata_protocol::config::ReadinessMode;
use strata_test_support::procs::{is_alive, signal};
use strata_test_support::python;

const A: &str = "standin-a";
const B: &str = "standin-b";
const SLOW: &str = "standin-slow";
const ALIAS: &str = "qwen3.8-flash-next";

/// The server tree, or `None` (and one line saying why the test skips).
fn server_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("STRATA_SERVER_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("serve/server.py").is_file(),
                "STRATA_SERVER_DIR={} has no serve/server.py",
                dir.display()
            );
            Some(dir)
        }
        _ => {
            // Past the test harness's capture, so the skip shows in a plain `cargo test`.
            let _ = writeln!(
                std::io::stderr(),
                "real_strata::{test}: skipped: STRATA_SERVER_DIR is not set (a tree with the public \
                 Strata serve/server.py at 5f8f3f2; see RESEARCH.md)"
            );
            None
        }
    }
}

fn standin(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("real_strata")
        .join(file)
}

/// What one model's engine was told, from its `--events` file.
struct Engine {
    events: PathBuf,
}

impl Engine {
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn count(&self, name: &str) -> usize {
        self.events().iter().filter(|e| e["event"] == name).count()
    }

    /// The pid of the engine that started last.
    fn last_pid(&self) -> u32 {
        let events = self.events();
        let start = events
            .iter()
            .rev()
            .find(|e| e["event"] == "start")
            .expect("an engine started");
        start["pid"].as_u64().expect("a pid") as u32
    }
}

/// A model whose Strata profile runs the stand-in engine.
fn model(dir: &TempDir, tokenizer: &Path, id: &str, engine_args: &[&str]) -> (ModelSpec, Engine) {
    let events = dir.join(format!("{id}.events.jsonl"));
    let mut args: Vec<String> = vec![
        "--tokenizer".into(),
        tokenizer.display().to_string(),
        "--load-ms".into(),
        "300".into(),
        "--events".into(),
        events.display().to_string(),
    ];
    args.extend(engine_args.iter().map(|a| a.to_string()));
    let aliases = if id == A { json!([ALIAS]) } else { json!([]) };
    let spec = ModelSpec::new(id)
        .profile_key("exe", standin("standin_engine.py").display().to_string())
        .profile_key("args", json!(args))
        .profile_key(
            "log",
            dir.join(format!("{id}.engine.log")).display().to_string(),
        )
        .profile_key("tokenizer", tokenizer.display().to_string())
        .profile_key("aliases", aliases)
        .profile_key("idle_unload_s", 0);
    (spec, Engine { events })
}

struct Setup {
    stack: Stack,
    engines: Vec<(&'static str, Engine)>,
    _dir: TempDir,
}

impl Setup {
    fn engine(&self, id: &str) -> &Engine {
        &self.engines.iter().find(|(m, _)| *m == id).unwrap().1
    }
}

fn setup(strata: &Path, tag: &str, idle_ms: u64) -> Setup {
    let dir = TempDir::new(tag);
    let tokenizer = dir.join("tokenizer");
    let made = Command::new(python())
        .arg(standin("make_tokenizer.py"))
        .arg(&tokenizer)
        .status()
        .expect("run make_tokenizer.py");
    assert!(made.success(), "make_tokenizer.py failed");
    let mut builder = ConfigBuilder::new(tag)
        .set("strata_dir", strata.display().to_string())
        .wait_when_busy(true)
        .set("response_ms", 0)
        .set("backend_probe_ms", 1000)
        .startup_ms(30_000)
        .shutdown_ms(10_000)
        .idle_ms(idle_ms)
        .unset("readiness");
    let mut engines = Vec::new();
    for (id, args) in [
        (A, &["--token-ms", "10"][..]),
        (B, &["--token-ms", "10"][..]),
        (SLOW, &["--token-ms", "300", "--tokens", "200"][..]),
    ] {
        let (spec, engine) = model(&dir, &tokenizer, id, args);
        builder = builder.model(spec);
        engines.push((id, engine));
    }
    let config = builder.alias(ALIAS, &[A]).build();
    Setup {
        stack: Stack::start(config),
        engines,
        _dir: dir,
    }
}

/// A stream's data frames, `[DONE]` last; the frame before it carries `usage`.
fn stream_ok(stack: &Stack, model: &str, answered_as: &str) -> String {
    let mut stream = stack.open_chat(&chat_request(model, true, "hello there", Value::Null));
    assert_eq!(stream.status, 200, "{model}");
    let id = stream.header("x-strata-request-id").unwrap().to_owned();
    let frames = stream.remaining_frames(DEADLINE);
    let data: Vec<&Frame> = frames.iter().filter(|f| f.is_data()).collect();
    assert!(data.len() >= 3, "{model}: {frames:#?}");
    assert!(frames.last().is_some_and(Frame::is_done), "{frames:#?}");
    let first = data[0].json();
    assert_eq!(first["model"], answered_as, "{model}: {first}");
    id
}

fn json_ok(stack: &Stack, model: &str, answered_as: &str) -> String {
    let response = stack.chat(&chat_request(model, false, "hello there", Value::Null));
    assert_eq!(response.status, 200, "{model}: {}", response.text());
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(body["model"], answered_as, "{model}: {body}");
    assert!(
        body["usage"]["completion_tokens"].as_u64().unwrap() > 0,
        "{body}"
    );
    response.header("x-strata-request-id").unwrap().to_owned()
}

#[test]
fn the_router_in_front_of_the_public_strata_server() {
    let Some(strata) = server_dir("the_router_in_front_of_the_public_strata_server") else {
        return;
    };
    let setup = setup(&strata, "real-strata", 600_000);
    let stack = &setup.stack;

    // Streams and JSON for each model, and through the alias the profile lists (Strata then
    // answers with the alias's name; otherwise with its model_name).
    let up = |id: &str| stack.config().upstream(id);
    let first = stream_ok(stack, A, &up(A));
    let status = stack.control().status();
    assert_eq!(
        status.readiness.mode,
        Some(ReadinessMode::Health),
        "auto chose health for a Strata without --ready-file: {:?}",
        status.readiness
    );
    assert_eq!(stack.models().readiness.mode, Some(ReadinessMode::Health));
    json_ok(stack, A, &up(A));
    stream_ok(stack, ALIAS, ALIAS);
    json_ok(stack, ALIAS, ALIAS);

    // Records with usage and the engine's timings from the real final frame.
    let record = wait_record(stack.addr(), &first);
    assert!(record.prompt_tokens.is_some_and(|n| n > 0), "{record:?}");
    assert!(
        record.completion_tokens.is_some_and(|n| n > 0),
        "{record:?}"
    );
    assert!(record.predicted_ms.is_some(), "{record:?}");
    assert!(record.first_token_at.is_some(), "{record:?}");
    assert_eq!(record.reason.as_str(), "completed", "{record:?}");

    // A swap: A's engine exits by QUIT (the router SIGTERMs the server alone).
    let a_quits = setup.engine(A).count("quit");
    let b_id = stream_ok(stack, B, &up(B));
    json_ok(stack, B, &up(B));
    poll_until(DEADLINE, "A's engine told QUIT on the swap", || {
        setup.engine(A).count("quit") > a_quits
    });
    assert_eq!(
        setup.engine(A).count("sigterm"),
        0,
        "the engine got SIGTERM"
    );
    assert!(wait_record(stack.addr(), &b_id).model_switch);

    // off unloads (QUIT), on loads again.
    let b_quits = setup.engine(B).count("quit");
    assert!(stack.control().off(false).ok());
    poll_until(DEADLINE, "B's engine told QUIT on off", || {
        setup.engine(B).count("quit") > b_quits
    });
    assert!(stack.control().on(Some(A)).ok());
    assert_eq!(stack.control().status().loaded.as_deref(), Some(A));
    json_ok(stack, A, &up(A));

    // A client that leaves mid-stream: the engine is told STOP (mid-generation, not the STOP
    // Strata sends after every end-of-turn).
    let mut stream = stack.open_chat(&chat_request(SLOW, true, "a long one", Value::Null));
    stream.frames_until(DEADLINE, "the first token", |f| {
        f.data_text().contains("\"content\"")
    });
    let mid_stops = |e: &Engine| {
        e.events()
            .iter()
            .filter(|e| e["event"] == "stop" && e["idle"] != true)
            .count()
    };
    let stops = mid_stops(setup.engine(SLOW));
    drop(stream);
    poll_until(DEADLINE, "the engine told STOP", || {
        mid_stops(setup.engine(SLOW)) > stops
    });

    // SIGKILL of the engine: Strata stays up (/health loaded false) and restarts it for the
    // next request.
    json_ok(stack, B, &up(B));
    let engine = setup.engine(B).last_pid();
    let server = child_pid(&stack.control().status());
    signal(engine, Signal::SIGKILL);
    poll_until(DEADLINE, "the engine gone", || !is_alive(engine));
    poll_for(DEADLINE, "a request after the engine's death", || {
        let response = stack.chat(&chat_request(B, false, "again", Value::Null));
        (response.status == 200).then_some(())
    });
    assert_ne!(setup.engine(B).last_pid(), engine, "a new engine");
    assert_eq!(child_pid(&stack.control().status()), server, "same server");

    // SIGKILL of the server: its group goes, the next request starts it again.
    signal(server, Signal::SIGKILL);
    poll_until(DEADLINE, "the server gone", || !is_alive(server));
    poll_for(DEADLINE, "a request after the server's death", || {
        let response = stack.chat(&chat_request(B, false, "again", Value::Null));
        (response.status == 200).then_some(())
    });
    assert_ne!(child_pid(&stack.control().status()), server);

    // The drain: SIGTERM to the supervisor stops the server, which QUITs its engine.
    let b_quits = setup.engine(B).count("quit");
    let Setup {
        stack,
        engines,
        _dir,
    } = setup;
    stack.stop();
    let b = &engines.iter().find(|(m, _)| *m == B).unwrap().1;
    poll_until(DEADLINE, "B's engine told QUIT on the drain", || {
        b.count("quit") > b_quits
    });
    for (id, engine) in &engines {
        assert_eq!(engine.count("sigterm"), 0, "{id}'s engine got SIGTERM");
    }
}

#[test]
fn idle_unload_stops_the_real_server_through_its_engines_quit() {
    let Some(strata) = server_dir("idle_unload_stops_the_real_server_through_its_engines_quit")
    else {
        return;
    };
    let setup = setup(&strata, "real-strata-idle", 1500);
    json_ok(&setup.stack, A, &setup.stack.config().upstream(A));
    poll_until(DEADLINE, "the idle unload", || {
        setup.stack.control().status().loaded.is_none() && setup.engine(A).count("quit") == 1
    });
    assert_eq!(setup.engine(A).count("sigterm"), 0);
    setup.stack.stop();
}
