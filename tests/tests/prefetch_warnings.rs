//! The weights prefetch's warnings end to end, in a test binary of their own so that its file
//! reads do not compete with `prefetch.rs`'s (the prefetch reads at the idle I/O class, which
//! other readers starve): a listed path that does not exist is warned about once per model
//! and left out, and the paths that exist are still prefetched each time B waits.

use std::path::Path;

use serde_json::{Value, json};
use strata_e2e::accounting::chat_request;
use strata_e2e::http;
use strata_e2e::stack::Stack;
use strata_e2e::weights::WeightsFile as Weights;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";
const B: &str = "flash-b";

fn b_request(tag: &str) -> Value {
    chat_request(B, false, tag, Value::Null)
}

/// A listed path that does not exist is warned about once per model and left out; the
/// paths that exist are still prefetched, every time B waits.
#[test]
fn a_missing_weights_path_is_warned_once_and_the_rest_prefetched() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prefetch");
    let weights = Weights::create(&dir, "missing", 64 << 20);
    let missing = weights.path.with_extension("absent");
    let b = ModelSpec::new(B)
        .entry_key("weights", json!([missing, weights.path]))
        .fake("read_weights", json!(weights.path));
    let config = ConfigBuilder::new("prefetch-missing")
        .wait_when_busy(true)
        .model_grace_ms(0)
        .model(ModelSpec::new(A))
        .model(b)
        .build();
    let stack = Stack::start(config);
    let holder = stack.hold(A, "holder");
    let said = "a weights path does not exist; it is not prefetched";
    for round in 1..=2 {
        if !weights.evict() {
            return;
        }
        let client = http::send_chat(stack.addr(), &b_request("b"));
        poll_until(
            DEADLINE,
            format!("round {round}: B's file resident"),
            || weights.resident() >= weights.len * 99 / 100,
        );
        let log = stack.supervisor_stderr();
        assert_eq!(log.matches(said).count(), 1, "round {round}:\n{log}");
        drop(client);
        poll_until(DEADLINE, format!("round {round}: B's ticket left"), || {
            stack.waiting() == 0
        });
    }
    holder.disconnect();
    stack.stop();
}
