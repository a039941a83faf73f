//! A proxy SIGKILLed under load loses no record of work the supervisor knew of (issue 15,
//! item 1). Streams and JSON requests in the middle of generating (leases), and requests
//! waiting in the queue for another model, are in flight when the proxy dies: the supervisor
//! writes one record for each (`reason: "shutdown"`, `status: null`, what it knew), the ring
//! and the JSONL file agree, and nothing is left: no lease, no waiting ticket.

use std::collections::HashSet;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{
    Record, assert_all_schema, jsonl_lines, wait_jsonl, wait_records, with_request_log,
};
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for};
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const B: &str = "flash-b";
const STREAMS: usize = 4;
const JSON_LEASES: usize = 2;
const WAITING: usize = 3;

fn slow(model: &str, stream: bool) -> Value {
    let mut body = chat_body(model, stream);
    body["fake"] = json!({"tokens": 400, "token_delay_ms": 50});
    body
}

#[test]
fn a_sigkilled_proxys_in_flight_requests_each_get_one_supervisor_record() {
    let mut config = ConfigBuilder::new("proxy-crash")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .build();
    let log_path = with_request_log(&mut config, json!({}));
    let mut stack = Stack::start(config);
    let addr = stack.addr();
    stack.chat(&chat_body(A, false)).expect_status(200);
    wait_records(addr, 1);

    // Leases: streams that have started, and JSON requests the backend is generating.
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let mut stream = stack.open_chat(&slow(A, true));
        stream.frames_until(DEADLINE, "a first frame", http::Frame::is_data);
        streams.push(stream);
    }
    let mut conns: Vec<http::Conn> = (0..JSON_LEASES)
        .map(|_| http::send_chat(addr, &slow(A, false)))
        .collect();
    // Waiting: B needs a switch, which the leases on A hold off.
    conns.extend((0..WAITING).map(|_| http::send_chat(addr, &chat_body(B, false))));
    poll_for(DEADLINE, "every request to reach the supervisor", || {
        let status = stack.status();
        (status.active_leases == STREAMS + JSON_LEASES && status.waiting_requests == WAITING)
            .then_some(())
    });

    stack.kill_proxy(Signal::SIGKILL);
    stack.wait_proxy_exit(DEADLINE);
    drop(streams);
    drop(conns);
    let status = poll_for(DEADLINE, "the supervisor to forget the dead proxy", || {
        let status = stack.status();
        (status.proxies == 0).then_some(status)
    });
    assert_eq!(status.active_leases, 0, "{status:?}");
    assert_eq!(status.waiting_requests, 0, "{status:?}");

    stack.start_proxy();
    let total = 1 + STREAMS + JSON_LEASES + WAITING;
    let records = wait_records(addr, total as u64);
    assert_eq!(
        records.len(),
        total,
        "exactly one record each: {records:#?}"
    );
    let instance = stack.status().instance_id.clone();
    assert_all_schema(&records, &instance);

    let lost: Vec<&Record> = records[1..].iter().collect();
    for record in &lost {
        assert_eq!(record.reason, Reason::Shutdown, "{record}");
        assert_eq!(record.status, None, "{record}");
        assert!(!record.success, "{record}");
        assert_eq!(record.response_bytes, 0, "{record}");
    }
    let leased: Vec<&&Record> = lost
        .iter()
        .filter(|record| record.model_resolved.as_deref() == Some(A))
        .collect();
    assert_eq!(leased.len(), STREAMS + JSON_LEASES);
    let upstream = stack.config().upstream(A);
    for record in &leased {
        // Granted: the lease and what it was for are known.
        assert!(record.lease_at.is_some(), "{record}");
        assert!(record.queue_wait_ms.is_some(), "{record}");
        assert_eq!(record.upstream_model, Some(upstream.clone()), "{record}");
    }
    let streamed = leased.iter().filter(|record| record.stream).count();
    assert_eq!(streamed, STREAMS);
    for record in lost
        .iter()
        .filter(|r| r.model_resolved.as_deref() == Some(B))
    {
        // Still waiting: nothing of admission, but its model resolved, so
        // its backend name is known (as the proxy's own record has it).
        assert!(record.lease_at.is_none(), "{record}");
        assert_eq!(
            record.upstream_model,
            Some(stack.config().upstream(B)),
            "{record}"
        );
        assert!(!record.stream, "{record}");
    }

    // The file has the same lines as the ring, once each.
    let lines = wait_jsonl(&log_path, total);
    assert_eq!(lines.len(), total, "{lines:#?}");
    let ring: HashSet<&str> = records.iter().map(|record| record.raw.as_str()).collect();
    let file: HashSet<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(ring, file);
    // Nothing more arrives later (the new proxy has nothing to resubmit).
    stack.chat(&chat_body(A, false)).expect_status(200);
    let after = wait_records(addr, total as u64 + 1);
    assert_eq!(after.len(), total + 1);
    assert_eq!(jsonl_lines(&log_path).len(), total + 1);
    stack.stop();
}
