//! Keepalives a 5 s client timeout never misses (issue 29): httpx's default read timeout is
//! 5.0 s, and comments sent every 5.0 s reached a client under load 5.002 s apart (one stream
//! in 12 failed). Measured here at the client: 16 streams wait behind another model's
//! generation for about 14 s, and no gap between two things a waiting client reads (the held
//! head, each comment, the first data frame) reaches 5.0 s.

use std::time::{Duration, Instant};

use serde_json::json;
use strata_e2e::http::{Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec};

const A: &str = "flash-a";
const B: &str = "flash-b";
const WAITERS: usize = 16;

#[test]
fn no_gap_between_what_a_waiting_client_reads_reaches_five_seconds() {
    let config = ConfigBuilder::new("ka-gap")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .wait_when_busy(true)
        .set("response_ms", 0)
        .build();
    let stack = Stack::start(config);
    // A holds the backend for about 14 s: one token after a 14 s pause.
    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 1, "token_delay_ms": 14_000});
    let mut holder = stack.open_chat(&body);
    holder.frames_until(DEADLINE, "A's role frame", Frame::is_data);

    let largest: Vec<Duration> = std::thread::scope(|scope| {
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                scope.spawn(|| {
                    let sent = Instant::now();
                    let mut stream = stack.open_chat(&chat_body(B, true));
                    assert_eq!(stream.status, 200);
                    // The held head counts from the request's sending, as a client's timeout.
                    let mut last = Instant::now();
                    let mut largest = last - sent;
                    loop {
                        let frame = stream
                            .next_frame(DEADLINE)
                            .expect("a frame before the deadline");
                        let now = Instant::now();
                        largest = largest.max(now - last);
                        last = now;
                        if frame.is_data() {
                            break largest;
                        }
                        assert!(frame.is_keepalive(), "{frame:?}");
                    }
                })
            })
            .collect();
        waiters.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let worst = largest.iter().max().unwrap();
    assert!(
        *worst < Duration::from_secs(5),
        "a waiting client read nothing for {worst:?} (each client's largest gap: {largest:?})"
    );
    assert!(
        holder
            .remaining_frames(DEADLINE)
            .last()
            .is_some_and(Frame::is_done)
    );
    stack.stop();
}
