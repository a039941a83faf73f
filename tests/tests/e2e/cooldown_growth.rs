//! No relaunch storm, whatever the client (issue 29): clients such as the Vercel AI SDK and
//! LiteLLM's router honour `Retry-After` and retry the moment it ends, ignoring `x-should-retry:
//! false`. With `cooldown_max_ms` above `cooldown_ms` a model whose start keeps failing cools
//! down twice as long after each failure in a row, so such a client launches it once per
//! (growing) cooldown window; `Retry-After` and `cooldown_remaining_ms` say the true remaining
//! time; an operator's `on` starts the streak afresh. The default (`cooldown_max_ms` =
//! `cooldown_ms`) keeps the spec's fixed cooldown.

use std::time::{Duration, Instant};

use serde_json::Value;
use strata_e2e::accounting::chat_request;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, ModelSpec, concrete_model};

const BROKEN: &str = "flash-broken";
const COOLDOWN_MS: u64 = 1_000;
const COOLDOWN_MAX_MS: u64 = 8_000;

fn stack(tag: &str, cooldown_max_ms: Option<u64>) -> Stack {
    let mut builder = ConfigBuilder::new(tag)
        .model(ModelSpec::new(BROKEN).start_failure("exit"))
        .wait_when_busy(true)
        .cooldown_ms(COOLDOWN_MS);
    if let Some(max) = cooldown_max_ms {
        builder = builder.set("cooldown_max_ms", max);
    }
    Stack::start(builder.build())
}

/// One request, as a retrying client sees it: the status and the `Retry-After` seconds.
fn attempt(stack: &Stack) -> (u16, Option<u64>) {
    let response = stack.chat(&chat_request(BROKEN, false, "x", Value::Null));
    let retry_after = response
        .header("retry-after")
        .map(|value| value.parse().expect("Retry-After in whole seconds"));
    (response.status, retry_after)
}

/// A client that retries as the AI SDK does: up to three attempts, each retry as soon as
/// `Retry-After` says (the client's own wait, as the SDK's; nothing here waits for the router).
/// Returns each attempt's `Retry-After`.
fn retrying_client(stack: &Stack) -> Vec<u64> {
    let mut waits: Vec<u64> = Vec::new();
    for _ in 0..3 {
        if let Some(&wait) = waits.last() {
            std::thread::sleep(Duration::from_secs(wait));
        }
        let (status, retry_after) = attempt(stack);
        assert_eq!(status, 503, "the start keeps failing");
        waits.push(retry_after.expect("a failed load says when to retry"));
    }
    waits
}

fn launches(stack: &Stack) -> usize {
    stack
        .fake_log()
        .start_count(&stack.config().upstream(BROKEN))
}

#[test]
fn consecutive_failures_lengthen_the_cooldown_so_a_retrying_client_launches_once_per_window() {
    let stack = stack("cooldown-growth", Some(COOLDOWN_MAX_MS));
    let started = Instant::now();
    let waits = retrying_client(&stack);
    // Each attempt came when the previous cooldown ended: one launch each, and the cooldown
    // (what Retry-After says) doubled: 1 s, 2 s, 4 s.
    assert_eq!(waits, [1, 2, 4], "Retry-After per attempt");
    assert_eq!(launches(&stack), 3, "one launch per cooldown window");
    // Right after its third failure the model cools down for 4 s: a request now is refused
    // without a launch, and says so.
    let (status, retry_after) = attempt(&stack);
    assert_eq!(status, 503);
    assert!(
        retry_after.is_some_and(|s| (1..=4).contains(&s)),
        "{retry_after:?}"
    );
    assert_eq!(launches(&stack), 3, "no launch during the cooldown");
    // 3 s of client waits for 3 launches; the next window is 4 s.
    assert!(started.elapsed() >= Duration::from_secs(3));

    // An operator's `on` starts the streak afresh: its failure cools down for cooldown_ms.
    let on = stack.control().on(Some(BROKEN));
    assert!(!on.ok(), "the start fails again");
    assert_eq!(launches(&stack), 4);
    let remaining = concrete_model(&stack.models(), BROKEN)
        .cooldown_remaining_ms
        .expect("cooling down");
    assert!(
        remaining <= COOLDOWN_MS,
        "after on, the base cooldown again: {remaining} ms"
    );
    stack.stop();
}

#[test]
fn by_default_the_cooldown_stays_fixed() {
    let stack = stack("cooldown-fixed", None);
    let waits = retrying_client(&stack);
    assert_eq!(waits, [1, 1, 1], "the spec's fixed cooldown");
    assert_eq!(launches(&stack), 3);
    stack.stop();
}
