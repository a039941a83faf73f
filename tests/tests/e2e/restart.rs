//! The spec's `tests/restart.py`: a proxy upgrade with one retained listening descriptor, the
//! way systemd's socket unit carries it from the old proxy process to the new one.
//!
//! A holder keeps the listener and starts proxy A on it (fd 3, `LISTEN_PID`, `LISTEN_FDS=1`).
//! A gets accepted streaming requests for the loaded model, a request whose backend delays its
//! response headers, and queued requests for a second model. A gets SIGTERM; more requests
//! arrive during A's drain, and wait in the backlog; proxy B starts on the same descriptor and
//! serves them. Every request succeeds with the right model, exactly once; A exits after its
//! last response; each model's backend started once; the instance stayed the same.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use strata_e2e::accounting::{all_records, chat_request};
use strata_e2e::holder::SocketHolder;
use strata_e2e::http::{self, Response};
use strata_e2e::stack::{PROXY_BIN, Stack};
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, binary, free_port, poll_until};
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const B: &str = "flash-b";

/// A request on its own thread; `tag` travels in the fake's `error_message` (read only when
/// `error_status` is set, so harmless) and shows up in the fake's event log.
fn spawn(
    addr: SocketAddr,
    model: &str,
    stream: bool,
    tag: &str,
    fake: Value,
) -> JoinHandle<Response> {
    let mut fake = fake;
    fake["error_message"] = json!(tag);
    let body = chat_request(model, stream, tag, fake);
    std::thread::spawn(move || http::chat(addr, &body))
}

fn upstream_model_of(response: &Response) -> Option<String> {
    let text = response.text();
    if response.header("content-type") == Some("text/event-stream") {
        let frames = http::sse_frames(text.as_bytes());
        frames
            .iter()
            .find(|frame| frame.is_data() && !frame.is_done())
            .and_then(|frame| frame.json()["model"].as_str().map(str::to_owned))
    } else {
        response.json()["model"].as_str().map(str::to_owned)
    }
}

#[test]
fn a_retained_listener_carries_every_request_from_the_old_proxy_to_the_new() {
    let port = free_port();
    let config = ConfigBuilder::new("restart")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B).load_ms(500))
        .wait_when_busy(true)
        .model_grace_ms(0)
        .drain_ms(0)
        .listen_port(port)
        .set("require_socket_activation", true)
        .build();
    let mut stack = Stack::supervisor_only(config);
    let addr = stack.addr();
    let mut holder = SocketHolder::bind(addr);
    let log_dir = stack.config().dir.path().to_path_buf();
    let config_path = stack.config().path.to_string_lossy().into_owned();
    let proxy_bin = binary(PROXY_BIN);
    let first = holder.start("proxy-a", &proxy_bin, &[&config_path], &log_dir);
    poll_until(DEADLINE, "proxy A serving", || {
        http::try_request(addr, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200)
    });
    let instance = stack.status().instance_id.clone();
    stack.warm(A);

    // A's accepted work: two streams for the loaded model, a delayed-header request, and two
    // requests for B that wait behind them.
    let long = json!({"tokens": 20, "token_delay_ms": 60});
    let mut before = vec![
        spawn(addr, A, true, "s1", long.clone()),
        spawn(addr, A, true, "s2", long.clone()),
        spawn(addr, A, false, "h1", json!({"header_delay_ms": 1200})),
    ];
    let log = stack.fake_log();
    poll_until(DEADLINE, "A's three requests at the backend", || {
        log.events_named("request").len() == 4
    });
    before.push(spawn(addr, B, false, "q1", json!({})));
    before.push(spawn(addr, B, true, "q2", json!({})));
    poll_until(DEADLINE, "q1 and q2 queued", || {
        stack.status().waiting_requests == 2
    });

    // SIGTERM: A stops accepting and drains. It reports draining to the supervisor only after
    // it has closed its copy of the listener, so requests sent from then on can only wait in
    // the retained backlog for the next proxy.
    kill(Pid::from_raw(first as i32), Signal::SIGTERM).expect("SIGTERM proxy A");
    poll_until(DEADLINE, "A to drain", || stack.status().draining);
    let after: Vec<JoinHandle<Response>> = (1..=3)
        .map(|i| spawn(addr, B, i % 2 == 0, &format!("n{i}"), json!({})))
        .collect();
    // While only the draining A runs, nobody takes them.
    assert!(
        after.iter().all(|handle| !handle.is_finished()),
        "a request sent during the drain was answered by the draining proxy"
    );
    // A keeps running while its accepted work does.
    assert_eq!(
        holder.wait(first, Duration::from_millis(200)),
        None,
        "A exited early"
    );
    let second = holder.start("proxy-b", &proxy_bin, &[&config_path], &log_dir);

    let mut ids = HashSet::new();
    for (handle, model) in before
        .into_iter()
        .zip([A, A, A, B, B])
        .chain(after.into_iter().zip([B, B, B]))
    {
        let response = handle.join().expect("request thread");
        assert_eq!(response.status, 200, "{response}");
        assert_eq!(response.header("x-strata-concrete-model"), Some(model));
        assert_eq!(
            upstream_model_of(&response),
            Some(stack.config().upstream(model)),
            "{response}"
        );
        if response.header("content-type") == Some("text/event-stream") {
            let frames = http::sse_frames(response.text().as_bytes());
            assert!(
                frames.last().is_some_and(|frame| frame.is_done()),
                "{frames:#?}"
            );
        }
        assert!(ids.insert(response.header("x-strata-request-id").unwrap().to_owned()));
    }
    assert_eq!(
        holder.wait(first, DEADLINE),
        Some(0),
        "proxy A exits cleanly after its last response"
    );

    // Exactly once each: the backend's log and the records agree.
    let mut tags: Vec<String> = log
        .events_named("request")
        .iter()
        .filter_map(|event| event["fake"]["error_message"].as_str().map(str::to_owned))
        .collect();
    tags.sort();
    assert_eq!(tags, ["h1", "n1", "n2", "n3", "q1", "q2", "s1", "s2"]);
    poll_until(DEADLINE, "every record", || all_records(addr).len() == 9);
    let records = all_records(addr);
    let recorded: HashSet<String> = records
        .iter()
        .map(|record| record.request_id.to_owned())
        .collect();
    assert!(ids.is_subset(&recorded), "{ids:?} vs {recorded:?}");
    assert!(
        records
            .iter()
            .all(|record| record.reason == Reason::Completed)
    );
    for model in [A, B] {
        let upstream = stack.config().upstream(model);
        assert_eq!(log.start_count(&upstream), 1, "{model} started once");
    }
    assert_eq!(stack.status().instance_id, instance);

    kill(Pid::from_raw(second as i32), Signal::SIGTERM).expect("SIGTERM proxy B");
    assert_eq!(holder.wait(second, DEADLINE), Some(0));
    holder.stop();
    let supervisor = stack.supervisor();
    supervisor.terminate();
    assert!(supervisor.daemon().wait_exit(DEADLINE).success());
}
