//! Many parallel chat requests: completion sequences are unique and dense (1..=N), arrival
//! sequences and request IDs unique, no record lost (ring and JSONL file), and a reader that
//! follows the cursor during the traffic sees every record exactly once, in order.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use strata_e2e::accounting::{
    Record, assert_all_schema, chat_request, page, wait_jsonl, wait_records, with_request_log,
};
use strata_e2e::http::{self, CHAT_PATH};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec};
use strata_protocol::record::Reason;

const A: &str = "flash-a";
const N: usize = 50;

/// Request `i` of the mix: streams and JSON, quick and a little slower, a few rejections.
fn one_request(addr: std::net::SocketAddr, i: usize) -> String {
    let response = match i % 5 {
        0 => {
            let mut stream = http::open_chat(
                addr,
                &chat_request(A, true, "x", json!({"tokens": 3, "token_delay_ms": 5})),
            );
            stream.remaining_frames(DEADLINE);
            return stream.header("x-strata-request-id").unwrap().to_owned();
        }
        1 => http::chat(addr, &chat_request(A, false, "x", json!({"tokens": 2}))),
        2 => http::chat(addr, &chat_request(A, true, "x", Value::Null)),
        3 => http::request(
            addr,
            "POST",
            CHAT_PATH,
            &[("content-type", "application/json")],
            b"{",
        ),
        _ => http::chat(
            addr,
            &chat_request(A, false, "x", json!({"header_delay_ms": 20})),
        ),
    };
    assert!(
        response.status == 200 || (i % 5 == 3 && response.status == 400),
        "{response}"
    );
    response.header("x-strata-request-id").unwrap().to_owned()
}

#[test]
fn parallel_requests_get_unique_dense_sequences_and_no_record_is_lost() {
    for wait_first in [true, false] {
        let mut config = ConfigBuilder::new("acct-conc")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .set("max_pending", 100)
            .build();
        let log = with_request_log(&mut config, json!({}));
        let stack = Stack::start(config);
        let addr = stack.addr();
        // Load the model first so the burst is about accounting, not one cold start.
        http::chat(addr, &chat_request(A, false, "x", Value::Null)).expect_status(200);
        wait_records(addr, 1);

        let done = AtomicBool::new(false);
        let (ids, followed) = std::thread::scope(|scope| {
            // A reader following the cursor while the records are produced.
            let reader = scope.spawn(|| {
                let mut after = 0u64;
                let mut seen = Vec::new();
                loop {
                    let finished = done.load(Ordering::SeqCst);
                    let page = page(addr, &format!("after={after}&limit=7"));
                    assert_eq!(page.dropped(), 0, "nothing is evicted at this size");
                    seen.extend(page.seqs());
                    after = page.next_seq();
                    if finished && page.records.is_empty() {
                        return seen;
                    }
                    if page.records.is_empty() {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            });
            let workers: Vec<_> = (0..N)
                .map(|i| scope.spawn(move || one_request(addr, i)))
                .collect();
            let ids: Vec<String> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            // Every client has its answer; the last records may still be on their way.
            wait_records(addr, N as u64 + 1);
            done.store(true, Ordering::SeqCst);
            (ids, reader.join().unwrap())
        });

        let records = wait_records(addr, N as u64 + 1);
        let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
        assert_eq!(
            seqs,
            (1..=N as u64 + 1).collect::<Vec<_>>(),
            "dense, unique"
        );
        let arrivals: HashSet<u64> = records.iter().map(|r| r.arrival_seq).collect();
        assert_eq!(
            arrivals,
            (1..=N as u64 + 1).collect::<HashSet<_>>(),
            "one arrival number per request"
        );
        let recorded: HashSet<&str> = records.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(recorded.len(), N + 1);
        for id in &ids {
            assert!(recorded.contains(id.as_str()), "no record for {id}");
        }
        let instance = page(addr, "").instance_id().to_owned();
        assert_all_schema(&records, &instance);
        let failures: Vec<&Record> = records
            .iter()
            .filter(|r| r.reason != Reason::Completed && r.reason != Reason::InvalidRequest)
            .collect();
        assert!(failures.is_empty(), "{failures:#?}");
        assert_eq!(
            followed, seqs,
            "the cursor reader saw each record once, in order"
        );

        let lines = wait_jsonl(&log, N + 1);
        let raw: Vec<&str> = records.iter().map(|r| r.raw.as_str()).collect();
        assert_eq!(lines, raw, "the file has every record once, in seq order");
        let metrics = stack.metrics().request_log;
        assert_eq!(
            (metrics.next_seq, metrics.write_errors, metrics.write_drops),
            (Some(N as u64 + 2), Some(0), Some(0)),
            "{metrics:?}"
        );
        stack.stop();
    }
}
