//! Client disconnects through the real `strata-proxy` free the request's lease, whichever phase
//! the request is in: queued behind another model, while its model loads, or mid-generation.
//! The next request proceeds, and the supervisor's status shows nothing left behind.

use serde_json::json;
use strata_e2e::http::{Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for, poll_until};
use strata_protocol::control::Status;

const A: &str = "flash-a";
const B: &str = "flash-b";

fn wait_idle(stack: &Stack) -> Status {
    poll_for(DEADLINE, "no active lease and nobody waiting", || {
        let status = stack.status();
        (status.active_leases == 0 && status.waiting_requests == 0).then_some(status)
    })
}

fn assert_completes(stack: &Stack, model: &str) {
    let mut stream = stack.open_chat(&chat_body(model, true));
    assert_eq!(stream.status, 200);
    let frames = stream.remaining_frames(DEADLINE);
    assert!(
        frames.last().is_some_and(Frame::is_done),
        "the next request for {model} must complete: {frames:#?}"
    );
}

/// Queued: B waits behind A's active stream; B's client goes away; the supervisor forgets the
/// waiting request while A still streams, B's model is never started for it, and a new B
/// request proceeds once A is done.
#[test]
fn disconnect_while_queued_withdraws_the_request() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("dc-queue")
            .model(ModelSpec::new(A))
            .model(ModelSpec::new(B))
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let log = stack.fake_log();
        let up_b = stack.config().upstream(B);
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 25, "token_delay_ms": 100});
        let mut holder = stack.open_chat(&body);
        holder.frames_until(DEADLINE, "A's first data frame", Frame::is_data);

        let queued = open_pending(&stack, B);
        poll_until(DEADLINE, "B waiting in the supervisor", || {
            stack.status().waiting_requests == 1
        });
        drop(queued);
        poll_until(DEADLINE, "the waiting request to be withdrawn", || {
            stack.status().waiting_requests == 0
        });
        assert!(
            !holder.is_finished(),
            "A must still be streaming when B's request is gone"
        );
        assert_eq!(stack.status().loaded.as_deref(), Some(A));
        assert_eq!(stack.status().active_leases, 1);

        let rest = holder.remaining_frames(DEADLINE);
        assert!(rest.last().is_some_and(Frame::is_done));
        let status = wait_idle(&stack);
        assert_eq!(
            status.loaded.as_deref(),
            Some(A),
            "no switch for a withdrawn request"
        );
        assert_eq!(log.start_count(&up_b), 0, "{}", log.dump());

        assert_completes(&stack, B);
        assert_eq!(log.start_count(&up_b), 1);
        wait_idle(&stack);
        stack.stop();
    }
}

/// A streaming request whose answer is not read. Neither mode sends headers before the request
/// has a byte to forward (wait-first holds its head until then or its first keepalive), so the
/// request is written raw and the connection kept; dropping it disconnects the client.
fn open_pending(stack: &Stack, model: &str) -> strata_e2e::http::Conn {
    strata_e2e::http::send_chat(stack.addr(), &chat_body(model, true))
}

/// Loading: the client goes away while its model loads. The load completes and the model
/// stays loaded; the next request is served without a second start.
#[test]
fn disconnect_while_loading_keeps_the_load_and_frees_the_lease() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("dc-load")
            .model(ModelSpec::new(A).load_ms(1500))
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let log = stack.fake_log();
        let up_a = stack.config().upstream(A);
        let pending = open_pending(&stack, A);
        poll_until(DEADLINE, "the backend to start loading", || {
            log.start_count(&up_a) == 1
        });
        assert_eq!(stack.status().loading.as_deref(), Some(A));
        drop(pending);

        let status = poll_for(
            DEADLINE,
            "the load to finish with nobody holding a lease",
            || {
                let status = stack.status();
                (status.loaded.as_deref() == Some(A)
                    && status.loading.is_none()
                    && status.active_leases == 0)
                    .then_some(status)
            },
        );
        assert_eq!(status.waiting_requests, 0);
        assert!(
            log.events_named("request").is_empty(),
            "the abandoned request must never reach the backend\n{}",
            log.dump()
        );
        assert_completes(&stack, A);
        assert_eq!(log.start_count(&up_a), 1, "no second start\n{}", log.dump());
        wait_idle(&stack);
        stack.stop();
    }
}

/// Generating: the client goes away mid-stream. The backend sees the cancellation, the lease
/// ends, and the next request proceeds.
#[test]
fn disconnect_while_generating_cancels_upstream_and_frees_the_lease() {
    for wait_first in [true, false] {
        let config = ConfigBuilder::new("dc-gen")
            .model(ModelSpec::new(A))
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        let log = stack.fake_log();
        let mut body = chat_body(A, true);
        body["fake"] = json!({"tokens": 100, "token_delay_ms": 100});
        let mut stream = stack.open_chat(&body);
        stream.frames_until(DEADLINE, "a content delta", |frame| {
            frame.is_data()
                && frame.json()["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|text| !text.is_empty())
        });
        assert_eq!(stack.status().active_leases, 1);
        drop(stream);

        let cancel = poll_for(DEADLINE, "the backend to log the cancellation", || {
            log.events_named("cancel").into_iter().next()
        });
        assert_eq!(cancel["reason"], "client_disconnect", "{cancel}");
        assert!(
            cancel["frames"].as_u64().is_some_and(|frames| frames < 50),
            "cancelled early, not at the end: {cancel}"
        );
        wait_idle(&stack);
        assert!(log.events_named("response_done").is_empty());
        assert_completes(&stack, A);
        wait_idle(&stack);
        stack.stop();
    }
}
