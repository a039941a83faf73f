//! The proxy's link to its supervisor, through the real binaries: a proxy
//! configured differently waits for a matching supervisor (503
//! `config_mismatch` meanwhile) instead of exiting, and while the supervisor
//! is away `/v1/models` still lists from the config.

use nix::sys::signal::Signal;
use serde_json::json;
use strata_e2e::stack::proxy_command;
use strata_e2e::{
    ConfigBuilder, DEADLINE, Daemon, ModelSpec, concrete_model, http, model_ids, poll_until,
};
use strata_protocol::api::{Health, LinkStatus, ModelList};
use strata_protocol::config::ModelStatus;
use strata_protocol::wire::RefuseReason;

const A: &str = "flash-a";

/// A named change to a config document.
type ConfigEdit = (&'static str, fn(&mut serde_json::Value));

#[test]
fn a_proxy_with_a_different_configuration_waits_instead_of_exiting() {
    let config = ConfigBuilder::new("fp-mismatch")
        .model(ModelSpec::new(A))
        .build();
    let control = config.control();
    let mut supervisor = strata_e2e::spawn_supervisor(&config, "supervisor");
    strata_e2e::wait_supervisor_serving(&mut supervisor, &control);

    // Same sockets and listener, but another registry (different enabled models), or the same
    // models with other scheduling rules or timers: each is refused by the supervisor, and the
    // proxy neither exits (a restart loop, systemd's trigger limit) nor serves: it answers 503
    // naming the mismatch and says hello again until a matching supervisor answers
    // (tests/tests/e2e/config_change.rs restarts one).
    let edits: [ConfigEdit; 3] = [
        ("registry", |v| v["enabled_models"] = json!([])),
        ("scheduling", |v| v["wait_when_busy"] = json!(true)),
        ("timers", |v| v["model_grace_ms"] = json!(1)),
    ];
    for (name, edit) in edits {
        let mut other = config.json.clone();
        edit(&mut other);
        let other_path = config.dir.path().join(format!("other-{name}.json"));
        std::fs::write(&other_path, other.to_string()).unwrap();
        let mut command = std::process::Command::new(strata_e2e::binary("strata-proxy"));
        command.arg(&other_path);
        let mut proxy = Daemon::spawn(&format!("proxy-{name}"), command, config.dir.path());
        poll_until(DEADLINE, "the proxy reports the mismatch", || {
            http::try_request(config.listen, "GET", "/health", &[], b"").is_ok_and(|r| {
                r.status == 503 && r.document::<Health>().supervisor == LinkStatus::ConfigMismatch
            })
        });
        // (With no model enabled, the proxy's own registry answers 404 first.)
        if name != "registry" {
            let response = http::chat(config.listen, &http::chat_body(A, false));
            assert_eq!(response.status, 503, "{name}: {response}");
            assert_eq!(response.error().code, "config_mismatch", "{name}");
        }
        assert!(
            proxy.try_exit().is_none(),
            "{name}: the proxy keeps running"
        );
        let stderr = proxy.stderr();
        assert!(
            stderr.contains(&RefuseReason::Fingerprint.to_string()),
            "{name}: the log names the supervisor's reason:\n{stderr}"
        );
        proxy.kill(Signal::SIGTERM);
        assert!(proxy.wait_exit(DEADLINE).success(), "{name}");
    }
    // The supervisor is unaffected.
    assert_eq!(control.status().proxies, 0);
    supervisor.kill(Signal::SIGTERM);
    assert!(supervisor.wait_exit(DEADLINE).success());
}

#[test]
fn models_are_listed_from_the_config_while_the_supervisor_is_away() {
    let config = ConfigBuilder::new("away-models")
        .model(ModelSpec::new(A))
        .build();
    let control = config.control();
    let mut supervisor = strata_e2e::spawn_supervisor(&config, "supervisor");
    strata_e2e::wait_supervisor_serving(&mut supervisor, &control);
    let mut proxy = Daemon::spawn("proxy", proxy_command(&config), config.dir.path());
    let addr = config.listen;
    poll_until(DEADLINE, "the proxy to serve", || {
        assert!(proxy.is_running(), "{}", proxy.stderr_report());
        http::try_request(addr, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200)
    });

    supervisor.kill(Signal::SIGTERM);
    assert!(supervisor.wait_exit(DEADLINE).success());
    poll_until(DEADLINE, "the proxy to notice", || {
        http::get(addr, "/health").status == 503
    });
    let health: Health = http::get(addr, "/health").document();
    assert_eq!(health.supervisor, LinkStatus::Disconnected, "{health:?}");
    let models: ModelList = http::get(addr, "/v1/models").expect_status(200).document();
    assert_eq!(model_ids(&models), [A], "{models:#?}");
    assert_eq!(
        concrete_model(&models, A).status,
        ModelStatus::PreparedUnverified,
        "{models:#?}"
    );

    proxy.kill(Signal::SIGTERM);
    assert!(proxy.wait_exit(DEADLINE).success());
}
