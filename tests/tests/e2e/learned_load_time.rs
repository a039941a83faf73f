//! The learned load time end to end (docs/backend.md#learned-load-times): before a model's
//! first load
//! `/v1/models` says `typical_load_ms: null` and progress shows the `startup_ms` limit; after
//! it, the waiting stream's comment (`loading M, 3s, usually 5s`), `strata-ctl on`'s progress,
//! `strata-ctl top` (on the proxy URL and on the control socket), `/v1/models` and the
//! `Retry-After` of a 503 after a failed load all use it.

use std::process::Command;

use serde_json::{Value, json};
use strata_e2e::binaries::binary;
use strata_e2e::control::on_line;
use strata_e2e::http::{Frame, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, concrete_model, poll_for};
use strata_protocol::wire::typical_load_seconds;

const A: &str = "flash-a";
const B: &str = "flash-b";
/// The fake's load of A: long enough for a keepalive comment (4 s) and a "still waiting"
/// progress line (every 2 s) during it.
const LOAD_MS: u64 = 5_000;

/// `strata-ctl top TARGET --once`, as plain text.
fn top_once(target: &str) -> String {
    let output = Command::new(binary("strata-ctl"))
        .args(["top", target, "--once"])
        .output()
        .expect("run strata-ctl top");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `model:` line of a `top` view.
fn model_line(text: &str) -> String {
    text.lines()
        .find(|line| line.starts_with("model: "))
        .unwrap_or_else(|| panic!("no model line in\n{text}"))
        .to_owned()
}

fn typical_load_ms(stack: &Stack, id: &str) -> Option<u64> {
    concrete_model(&stack.models(), id).typical_load_ms
}

/// Rewrites one key of the fake's settings in `id`'s profile, for the next start.
fn set_fake_key(stack: &Stack, id: &str, key: &str, value: Value) {
    let path = stack.config().profile_path(id);
    let mut profile: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    profile["fake"][key] = value;
    std::fs::write(&path, serde_json::to_vec_pretty(&profile).unwrap()).unwrap();
}

#[test]
fn the_learned_load_time_shows_wherever_load_progress_does() {
    let config = ConfigBuilder::new("learned")
        .model(ModelSpec::new(A).load_ms(LOAD_MS))
        .model(ModelSpec::new(B))
        .startup_ms(30_000)
        .cooldown_ms(40_000)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let control = stack.control();
    let socket = stack.config().control_socket.to_string_lossy().into_owned();
    let url = format!("http://{}", stack.addr());

    // Before the first load: null, and the first `on` shows the limit, not a guess.
    assert_eq!(typical_load_ms(&stack, A), None);
    assert_eq!(typical_load_ms(&stack, B), None);
    let first = control.on(Some(A));
    first.assert_ok();
    let messages = first.messages();
    assert!(
        messages.iter().all(|message| !message.contains("usually")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|message| message.contains("s of 30s allowed")),
        "{messages:#?}"
    );
    // The proxy learns it from the supervisor's next state, which may come a moment after
    // `on`'s answer on the control socket.
    let learned = poll_for(DEADLINE, "A's load learned in /v1/models", || {
        typical_load_ms(&stack, A)
    });
    assert!(
        (LOAD_MS..LOAD_MS + 10_000).contains(&learned),
        "the fake's load takes {LOAD_MS} ms, learned {learned}"
    );
    let usually = format!("usually {}s", typical_load_seconds(learned));
    assert_eq!(typical_load_ms(&stack, B), None, "B never loaded");
    control.off(false).assert_ok();

    // The second load of A, by `on`; a wait-first stream for A joins it.
    let mut on = control.open(&on_line(Some(A)));
    let spawned = on.wait_progress(DEADLINE, "started, waiting for readiness");
    assert!(
        spawned
            .message
            .ends_with(&format!("(loading model {A}, {usually})")),
        "{spawned:?}"
    );
    let mut stream = stack.open_chat(&chat_body(A, true));
    // `top` on both sources while A loads.
    for target in [&url, &socket] {
        let line = poll_for(DEADLINE, format!("top {target} shows A loading"), || {
            let line = model_line(&top_once(target));
            line.starts_with(&format!("model: loading {A}"))
                .then_some(line)
        });
        assert!(
            line.contains(&format!("s, {usually})")),
            "top {target}: {line}"
        );
    }
    let still = on.wait_progress(DEADLINE, "still waiting for readiness");
    assert!(
        still
            .message
            .contains(&format!(", {usually}; 30s allowed)")),
        "{still:?}"
    );
    on.wait_done(DEADLINE).assert_ok();
    let frames = stream.frames_until(DEADLINE, "the first data frame", Frame::is_data);
    let comments: Vec<&str> = frames.iter().filter_map(Frame::comment).collect();
    assert!(
        !comments.is_empty(),
        "a comment while A loaded: {frames:#?}"
    );
    for comment in &comments {
        let elapsed = comment
            .strip_prefix(&format!("loading {A}, "))
            .and_then(|rest| rest.strip_suffix(&format!("s, {usually}")))
            .unwrap_or_else(|| panic!("a learned-load comment: {comment:?}"));
        elapsed.parse::<u64>().expect("whole seconds");
    }
    let rest = stream.remaining_frames(DEADLINE);
    assert!(rest.last().is_some_and(Frame::is_done), "{rest:#?}");
    let relearned = poll_for(DEADLINE, "A's load still known", || {
        typical_load_ms(&stack, A)
    });
    assert!(
        (LOAD_MS..LOAD_MS + 10_000).contains(&relearned),
        "{relearned}"
    );

    // A failed start: the 503's Retry-After is the cooldown, then a load of the usual length.
    // (B takes the GPU, so that routing stays on and A must start again.)
    control.on(Some(B)).assert_ok();
    set_fake_key(&stack, A, "start_failure", json!("exit"));
    let failed = stack.chat(&chat_body(A, false));
    assert_eq!(failed.status, 503, "{failed}");
    let retry_after = |response: &strata_e2e::http::Response| -> u64 {
        response
            .header("retry-after")
            .unwrap_or_else(|| panic!("no Retry-After: {response}"))
            .parse()
            .expect("Retry-After in seconds")
    };
    let typical_s = relearned.div_ceil(1000);
    let after_load = retry_after(&failed);
    assert!(
        (40 + typical_s - 1..=40 + typical_s + 1).contains(&after_load),
        "cooldown 40 s + usually {relearned} ms, Retry-After {after_load}"
    );
    // During the cooldown too (no launch): what is left of it, then the usual load.
    let refused = stack.chat(&chat_body(A, false));
    assert_eq!(refused.status, 503, "{refused}");
    let during = retry_after(&refused);
    assert!(
        during > typical_s && during <= after_load,
        "Retry-After {during} during the cooldown (after the load: {after_load})"
    );
    assert_eq!(
        typical_load_ms(&stack, A),
        Some(relearned),
        "a failed load teaches nothing"
    );
    stack.stop();
}
