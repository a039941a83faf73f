//! The scheduling fixes the simulator showed (docs/scheduling.md), through the real binaries
//! and the fake backend: a load nobody waits for any more is cancelled when another model
//! waits, and the opt-in `model_hold_max_ms` ends an agent's hold on the model.

use std::time::Duration;

use serde_json::{Value, json};
use strata_e2e::accounting::{chat_request, wait_record_where};
use strata_e2e::http::{self, spawn_chat};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, FakeLog, ModelSpec, poll_until};
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const B: &str = "flash-b";

fn tagged(model: &str, tag: &str, fake: Value) -> Value {
    let mut fake = fake;
    // The tag travels in the fake's `error_message`, which it reads only with `error_status`.
    fake["error_message"] = json!(tag);
    chat_request(model, false, tag, fake)
}

/// The tags of the chat requests the backend received, in order.
fn order(log: &FakeLog) -> Vec<String> {
    log.events_named("request")
        .into_iter()
        .filter(|event| event["path"] == "/v1/chat/completions")
        .filter_map(|event| event["fake"]["error_message"].as_str().map(str::to_owned))
        .collect()
}

/// `strata_router_model_loads_total{model=MODEL,outcome=OUTCOME}` in the Prometheus text.
fn loads(stack: &Stack, model: &str, outcome: &str) -> u64 {
    let series =
        format!("strata_router_model_loads_total{{model=\"{model}\",outcome=\"{outcome}\"}}");
    counter(stack, &series)
}

/// `strata_router_model_switches_total{reason=REASON}` in the Prometheus text.
fn switches(stack: &Stack, reason: &str) -> u64 {
    counter(
        stack,
        &format!("strata_router_model_switches_total{{reason=\"{reason}\"}}"),
    )
}

/// The value of one series (0 when absent).
fn counter(stack: &Stack, series: &str) -> u64 {
    let text = stack.get("/metrics?format=prometheus").text();
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.trim().parse::<f64>().unwrap_or(0.0) as u64)
}

/// In wait-first mode, a load whose only client left while a request for another model waits
/// is cancelled: its starting backend is stopped before it is ready, the load is counted as
/// `abandoned`, and the other model loads next. Without another model waiting, an abandoned
/// load goes on as the spec says (the next request may want it).
#[test]
fn an_abandoned_load_is_cancelled_when_another_model_waits() {
    let stack = Stack::start(
        ConfigBuilder::new("abandon")
            .wait_when_busy(true)
            // Long enough that B is queued and A's client has left well before the load
            // would finish, also on a loaded machine.
            .model(ModelSpec::new(A).load_ms(16_000))
            .model(ModelSpec::new(B))
            .model_grace_ms(0)
            .startup_ms(60_000)
            .build(),
    );
    let log = stack.fake_log();
    let (up_a, up_b) = (stack.config().upstream(A), stack.config().upstream(B));

    // A's client waits through A's load, then leaves while B's waits.
    let leaving = http::send_chat(stack.addr(), &tagged(A, "leaves", Value::Null));
    poll_until(DEADLINE, "A's backend started", || {
        log.start_count(&up_a) == 1
    });
    let b = spawn_chat(stack.addr(), tagged(B, "b", Value::Null));
    // A's admitted ticket stays in the queue until it is granted: B queued makes two. (Waiting
    // for one passed at once, so A's client often left before B arrived and the cancel came
    // on B's arrival; when B won that race the test failed, as in a CI run.)
    poll_until(DEADLINE, "B queued", || stack.waiting() == 2);
    drop(leaving);
    let response = b.join().expect("B's request");
    assert_eq!(response.status, 200, "{response}");
    let a_start = &log.starts_for(&up_a)[0];
    assert_eq!(
        log.index_of(a_start.pid, "ready"),
        None,
        "A never became ready"
    );
    // A cancelled start is killed at once (no exit of its own is logged): it is gone, and B
    // started after it.
    assert!(
        !strata_test_support::procs::is_alive(a_start.pid),
        "A's backend stopped"
    );
    let b_start = log.starts_for(&up_b)[0].index;
    assert!(
        a_start.index < b_start,
        "A started before B:\n{}",
        log.dump()
    );
    assert_eq!(loads(&stack, A, "abandoned"), 1);
    assert_eq!(loads(&stack, A, "verified"), 0);
    // The cancel is a switch that says why, in the metrics and the log.
    assert_eq!(switches(&stack, "abandoned"), 1);
    assert!(
        stack
            .supervisor_stderr()
            .contains("cancelling it model=\"flash-a\" reason=\"abandoned\""),
        "{}",
        stack.supervisor_stderr()
    );
    wait_record_where(stack.addr(), "A's client left while loading", |record| {
        record.reason == Reason::ClientDisconnect && record.model_resolved.as_deref() == Some(A)
    });
    assert_eq!(order(&log), ["b"]);

    // Nobody else waits: the abandoned load of A finishes.
    let leaving = http::send_chat(stack.addr(), &tagged(A, "leaves again", Value::Null));
    poll_until(DEADLINE, "A's second start", || log.start_count(&up_a) == 2);
    drop(leaving);
    let second = log.starts_for(&up_a)[1].pid;
    poll_until(Duration::from_secs(45), "A's second load verified", || {
        loads(&stack, A, "verified") == 1
    });
    assert!(log.index_of(second, "ready").is_some());
    assert_eq!(loads(&stack, A, "abandoned"), 1);
    stack.stop();
}

/// An agent whose gaps stay inside the grace keeps its model while another model waits (the
/// spec's accepted cost, the default); with `model_hold_max_ms` the waiting model gets in once
/// its request has waited that long, as soon as the agent's running request ends, and the
/// agent's next request waits its turn.
#[test]
fn the_hold_bound_lets_a_waiting_model_in_between_an_agents_requests() {
    for bound_ms in [0, 1500] {
        let stack = Stack::start(
            ConfigBuilder::new("hold")
                .wait_when_busy(true)
                .model(ModelSpec::new(A))
                .model(ModelSpec::new(B))
                .model_grace_ms(2_000)
                .set("model_hold_max_ms", bound_ms)
                .build(),
        );
        let log = stack.fake_log();
        let addr = stack.addr();
        let steps = 14;
        // The agent: short requests back to back, 100 ms apart (inside the grace).
        let agent = std::thread::spawn(move || {
            for step in 0..steps {
                let body = tagged(
                    A,
                    &format!("a{step}"),
                    json!({"tokens": 4, "token_delay_ms": 50}),
                );
                assert_eq!(http::chat(addr, &body).status, 200);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        poll_until(DEADLINE, "the agent's first request served", || {
            order(&log).len() == 1
        });
        let b = spawn_chat(addr, tagged(B, "b", Value::Null));
        assert_eq!(b.join().expect("B's request").status, 200);
        agent.join().expect("the agent");
        let order = order(&log);
        let b_at = order.iter().position(|tag| tag == "b").expect("b served");
        if bound_ms == 0 {
            assert_eq!(
                b_at, steps,
                "without a bound B waits for the whole session: {order:?}"
            );
        } else {
            assert!(
                b_at < steps - 2,
                "B gets in between the agent's requests: {order:?}"
            );
            // And A is loaded again for the rest of the session.
            assert_eq!(log.start_count(&stack.config().upstream(A)), 2);
            // The switch to B says why.
            assert!(switches(&stack, "bound_due") >= 1);
            assert!(
                stack.supervisor_stderr().contains(
                    "loading model model=\"flash-b\" from=\"flash-a\" reason=\"bound_due\""
                ),
                "{}",
                stack.supervisor_stderr()
            );
        }
        stack.stop();
    }
}
