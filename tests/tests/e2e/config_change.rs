//! A config change in any restart order (docs/deployment-systemd.md#changing-the-config): a
//! proxy whose
//! settings differ from its supervisor's never exits, so restarting the two daemons in either
//! order converges, and no restart loop can push the socket unit into its trigger limit. While
//! they differ, the proxy answers 503 `config_mismatch` and `/health` says so; a config that
//! does not validate still exits 78.

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{Record, all_records, chat_request, jsonl_lines, with_request_log};
use strata_e2e::http;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, Daemon, ModelSpec, poll_until};
use strata_protocol::api::{Health, HealthStatus, LinkStatus};
use strata_protocol::wire::RefuseReason;

const A: &str = "flash-a";

/// Rewrites the stack's config file in place, as an operator edits it.
fn edit_config(stack: &Stack, edit: impl FnOnce(&mut Value)) {
    let path = &stack.config().path;
    let mut json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(path, json.to_string()).unwrap();
}

fn wait_link(stack: &Stack, link: LinkStatus) {
    // A proxy just started may not listen yet.
    poll_until(DEADLINE, format!("/health says {link:?}"), || {
        http::try_request(stack.addr(), "GET", "/health", &[], b"")
            .is_ok_and(|response| response.document::<Health>().supervisor == link)
    });
}

/// While the two differ: 503 `config_mismatch` for a chat, `/health` 503 naming it. Returns
/// the request IDs told to the clients of three such answers (the proxy's own instance: no
/// supervisor numbered them).
fn assert_mismatch(stack: &Stack) -> Vec<String> {
    wait_link(stack, LinkStatus::ConfigMismatch);
    let health = stack.get("/health");
    assert_eq!(health.status, 503, "{health}");
    assert_eq!(
        health.document::<Health>().status,
        HealthStatus::Unavailable
    );
    (0..3)
        .map(|_| {
            let response = stack.chat(&chat_request(A, false, "during the change", Value::Null));
            assert_eq!(response.status, 503, "{response}");
            assert_eq!(response.error().code, "config_mismatch", "{response}");
            let id = response.request_id().to_owned();
            assert!(id.starts_with("proxy-"), "a proxy-made ID: {id}");
            id
        })
        .collect()
}

/// Every request ID told to a client during the mismatch has exactly one record, in
/// `/requests` and in the file, saying what the client got.
fn assert_recorded_once(stack: &Stack, log: &std::path::Path, ids: &[String]) {
    poll_until(DEADLINE, "the mismatch's records", || {
        let records = all_records(stack.addr());
        ids.iter()
            .all(|id| records.iter().any(|r| &r.request_id == id))
    });
    let records = all_records(stack.addr());
    let lines: Vec<Record> = jsonl_lines(log).iter().map(|l| Record::new(l)).collect();
    for id in ids {
        let in_ring: Vec<&Record> = records.iter().filter(|r| &r.request_id == id).collect();
        assert_eq!(in_ring.len(), 1, "{id} in /requests: {in_ring:?}");
        assert_eq!(in_ring[0].status, Some(503));
        let in_file = lines.iter().filter(|r| &r.request_id == id).count();
        assert_eq!(in_file, 1, "{id} in the file");
    }
}

fn assert_serving(stack: &Stack) {
    wait_link(stack, LinkStatus::Connected);
    stack
        .chat(&chat_request(A, false, "after the change", Value::Null))
        .expect_status(200);
}

/// The current proxy is still the one that was started (it never exited).
fn assert_proxy_alive(stack: &mut Stack) {
    assert!(stack.proxy().try_exit().is_none(), "the proxy exited");
}

#[test]
fn a_config_change_converges_in_either_restart_order() {
    let mut config = ConfigBuilder::new("config-change")
        .model(ModelSpec::new(A))
        .model_grace_ms(100)
        .build();
    let log = with_request_log(&mut config, json!({}));
    let mut stack = Stack::start(config);
    assert_serving(&stack);

    // Proxy first: the new proxy has the new settings, the supervisor the old ones.
    edit_config(&stack, |v| v["model_grace_ms"] = json!(200));
    stack.kill_proxy(Signal::SIGTERM);
    assert!(stack.wait_proxy_exit(DEADLINE).success());
    stack.spawn_proxy_with(|command| command);
    let told = assert_mismatch(&stack);
    assert_proxy_alive(&mut stack);
    stack.supervisor().restart();
    assert_serving(&stack);
    assert_proxy_alive(&mut stack);
    // Kept by the proxy and handed to the supervisor with its settings.
    assert_recorded_once(&stack, &log, &told);
    // It said hello again until the matching supervisor answered, and
    // logged the mismatch once, not at every hello.
    assert_eq!(
        stack
            .proxy_stderr()
            .matches(&RefuseReason::Fingerprint.to_string())
            .count(),
        1,
        "logged once:\n{}",
        stack.proxy_stderr()
    );

    // Supervisor first: the old proxy meets a supervisor with the new settings.
    edit_config(&stack, |v| v["model_grace_ms"] = json!(300));
    stack.supervisor().restart();
    let told = assert_mismatch(&stack);
    assert_proxy_alive(&mut stack);
    stack.restart_proxy();
    assert_serving(&stack);
    // The old proxy handed them over on its way out, although the settings differed.
    assert_recorded_once(&stack, &log, &told);
    assert!(
        stack
            .supervisor_stderr()
            .contains("stored the records of a proxy with other settings"),
        "{}",
        stack.supervisor_stderr()
    );
    stack.stop();
}

/// Only settings that differ are waited out: a config that does not validate stops the proxy
/// with EX_CONFIG (78), before it binds anything, as before.
#[test]
fn a_proxy_config_that_does_not_validate_still_exits_78() {
    let config = ConfigBuilder::new("bad-proxy-config")
        .model(ModelSpec::new(A))
        .build();
    let mut broken = config.json.clone();
    broken["max_pending"] = json!(0);
    let path = config.dir.path().join("broken.json");
    std::fs::write(&path, broken.to_string()).unwrap();
    let mut command = std::process::Command::new(strata_e2e::binary("strata-proxy"));
    command.arg(&path);
    let mut proxy = Daemon::spawn("proxy-broken", command, config.dir.path());
    assert_eq!(proxy.wait_exit(DEADLINE).code(), Some(78));
    let stderr = proxy.stderr();
    assert!(stderr.contains("max_pending"), "names the key:\n{stderr}");
}
