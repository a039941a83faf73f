//! Alias resolution through the real `strata-proxy`: a loaded allowed model wins, otherwise
//! the first entry of the alias's effective list (after `enabled_models`); an uninstalled
//! preferred entry is an error, never a reason to fall back to the next one.
//! `x-strata-concrete-model` names the resolved model every time.

use serde_json::json;
use strata_e2e::http::{Response, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, FLASH, ModelSpec, alias_model, poll_until};
use strata_protocol::api::AliasModel;

const A: &str = "flash-a";
const B: &str = "flash-b";
const D: &str = "flash-d";
const ALIAS: &str = "qwen3.8-flash-next";

/// One alias request (stream or not) that must succeed on `expected`.
fn assert_resolves(stack: &Stack, stream: bool, expected: &str) -> Response {
    let response = stack.chat(&chat_body(ALIAS, stream));
    assert_eq!(response.status, 200, "{response}");
    assert_eq!(
        response.header("x-strata-concrete-model"),
        Some(expected),
        "alias resolved to the wrong model: {response}"
    );
    // The backend that answered is the expected model's.
    let upstream = stack.config().upstream(expected);
    if stream {
        let frames = response.frames();
        assert!(frames.last().is_some_and(|f| f.is_done()), "{frames:#?}");
        assert_eq!(frames[0].json()["model"], json!(upstream), "{response}");
    } else {
        assert_eq!(response.json()["model"], json!(upstream), "{response}");
    }
    response
}

/// Waits until the proxy's view (`/health`) shows `model` loaded: the proxy resolves aliases
/// from the supervisor state it has received.
fn wait_proxy_sees_loaded(stack: &Stack, model: &str) {
    poll_until(
        DEADLINE,
        format_args!("the proxy to see {model} loaded"),
        || stack.health().loaded_model.as_deref() == Some(model),
    );
}

fn alias_item(stack: &Stack) -> AliasModel {
    alias_model(&stack.models(), ALIAS).clone()
}

/// (b) nothing loaded: the first entry; (a) another allowed entry loaded: it wins, even though
/// it is not first, with no start of the first; a loaded model outside the alias does not win.
#[test]
fn loaded_allowed_model_wins_otherwise_the_first_entry() {
    let config = ConfigBuilder::new("alias-load")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .model(ModelSpec::new(D))
        .alias(FLASH, &[A, B])
        .build();
    let stack = Stack::start(config);
    let log = stack.fake_log();
    let (up_a, up_b, up_d) = (
        stack.config().upstream(A),
        stack.config().upstream(B),
        stack.config().upstream(D),
    );
    let item = alias_item(&stack);
    assert_eq!(item.allowed_models, [A, B]);
    assert_eq!(item.preferred.as_deref(), Some(A));

    // (b) Nothing loaded: the first entry is loaded.
    assert_resolves(&stack, false, A);
    assert_eq!(log.start_count(&up_a), 1);

    // (a) B loaded (by the operator): the alias goes to B, in both modes of request, without
    // starting A again.
    stack.control().on(Some(B)).assert_ok();
    wait_proxy_sees_loaded(&stack, B);
    assert_resolves(&stack, false, B);
    assert_resolves(&stack, true, B);
    assert_eq!(log.start_count(&up_a), 1, "{}", log.dump());
    assert_eq!(log.start_count(&up_b), 1, "{}", log.dump());
    // Preference in the listing is the configured one, whatever is loaded.
    assert_eq!(alias_item(&stack).preferred.as_deref(), Some(A));

    // D is loaded but not allowed by the alias: the alias loads its first entry again.
    stack.control().on(Some(D)).assert_ok();
    wait_proxy_sees_loaded(&stack, D);
    assert_resolves(&stack, true, A);
    assert_eq!(log.start_count(&up_a), 2, "{}", log.dump());
    assert_eq!(log.start_count(&up_d), 1);
    assert_eq!(stack.status().loaded.as_deref(), Some(A));
    stack.stop();
}

/// (c) `enabled_models` without the first entry: the next enabled entry is preferred (also in
/// `/v1/models`) and loaded, and the excluded one is never started.
#[test]
fn a_disabled_first_entry_makes_the_next_one_preferred() {
    let config = ConfigBuilder::new("alias-enab")
        .model(ModelSpec::new(A))
        .model(ModelSpec::new(B))
        .model(ModelSpec::new(D))
        .alias(FLASH, &[A, D, B])
        .enabled_models(&[B, D])
        .build();
    let stack = Stack::start(config);
    let item = alias_item(&stack);
    assert_eq!(item.allowed_models, [D, B], "{item:?}");
    assert_eq!(item.preferred.as_deref(), Some(D), "{item:?}");
    assert_resolves(&stack, false, D);
    assert_resolves(&stack, true, D);
    let log = stack.fake_log();
    assert_eq!(log.start_count(&stack.config().upstream(A)), 0);
    assert_eq!(log.start_count(&stack.config().upstream(D)), 1);
    // A itself cannot be requested.
    let response = stack.chat(&chat_body(A, false));
    assert_eq!(response.status, 404, "{response}");
    stack.stop();
}

/// (d) An uninstalled first entry: the alias resolves to it and fails with 503
/// `model_not_prepared`; the second entry is not started as a fallback.
#[test]
fn an_uninstalled_preferred_entry_errors_without_fallback() {
    for wait_first in [false, true] {
        let config = ConfigBuilder::new("alias-unin")
            .model(ModelSpec::new(A).not_installed())
            .model(ModelSpec::new(B))
            .alias(FLASH, &[A, B])
            .wait_when_busy(wait_first)
            .build();
        let stack = Stack::start(config);
        assert_eq!(alias_item(&stack).preferred.as_deref(), Some(A));
        for stream in [false, true] {
            // Refused before it is queued, so even a wait-first stream gets the real status
            // (its SSE headers wait for the supervisor's first answer).
            let response = stack.chat(&chat_body(ALIAS, stream));
            assert_eq!(response.header("x-strata-concrete-model"), Some(A));
            assert_eq!(response.status, 503, "{response}");
            assert_eq!(response.error().code, "model_not_prepared", "{response}");
        }
        assert!(
            stack.fake_log().starts().is_empty(),
            "no backend may start (no fallback to {B})\n{}",
            stack.fake_log().dump()
        );
        assert!(stack.status().loaded.is_none());
        stack.stop();
    }
}
