//! A Strata without the router's `--ready-file` extension (the public `serve/server.py`),
//! played by the fake with `FAKE_STRATA_UPSTREAM_CLI=1`: with `readiness: "ready_file"` every
//! start fails, and the cause says why and what to do, in the status, in `/v1/models`, in the
//! 503 body and in the supervisor's log; with `"health"`, and with the default `"auto"` (which
//! asks the Strata's `--help` and says what it chose, in `status`, `/v1/models` and the log),
//! the same Strata serves.

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_e2e::accounting::chat_request;
use strata_e2e::python::python;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, ModelSpec, TempDir, concrete_model};
use strata_protocol::config::{Readiness, ReadinessMode};

const A: &str = "flash-a";

/// A Python that runs the fake as the public Strata CLI (a wrapper setting the fake's switch).
fn upstream_cli_python(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("python-upstream-cli");
    let script = format!(
        "#!/bin/sh\nFAKE_STRATA_UPSTREAM_CLI=1 exec {} \"$@\"\n",
        python().display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_strata_without_the_ready_file_flag_is_named_and_the_health_mode_serves_it() {
    let wrappers = TempDir::new("stock-strata");
    let stock = upstream_cli_python(wrappers.path());
    let cause = format!(
        "the Strata at {} does not accept --ready-file: set readiness to auto or health, or upgrade Strata",
        stock.display()
    );

    let stack = Stack::start(
        ConfigBuilder::new("stock-ready-file")
            .model(ModelSpec::new(A))
            .set("python", stock.to_str().unwrap())
            .set("readiness", "ready_file")
            .build(),
    );
    let response = stack.chat(&chat_request(A, false, "first", Value::Null));
    assert_eq!(response.status, 503, "{response}");
    let error = response.error();
    assert_eq!(error.code, "model_load_error");
    assert_eq!(
        error.last_error.as_deref(),
        Some(cause.as_str()),
        "{response}"
    );
    assert_eq!(
        stack.status().last_startup_error.as_deref(),
        Some(cause.as_str())
    );
    let models = stack.models();
    assert_eq!(
        concrete_model(&models, A).last_error.as_deref(),
        Some(cause.as_str())
    );
    assert!(
        stack.supervisor_stderr().contains(&cause),
        "the log names the cause:\n{}",
        stack.supervisor_stderr()
    );
    stack.stop();

    for readiness in [Some("health"), None] {
        let mut builder = ConfigBuilder::new("stock-health")
            .model(ModelSpec::new(A))
            .set("python", stock.to_str().unwrap());
        if let Some(readiness) = readiness {
            builder = builder.set("readiness", readiness);
        }
        let stack = Stack::start(builder.build());
        stack
            .chat(&chat_request(A, false, "served", Value::Null))
            .expect_status(200);
        let start = &stack.fake_log().starts()[0];
        assert!(
            !start.argv.iter().any(|a| a == "--ready-file"),
            "{:?}",
            start.argv
        );
        let status = stack.status();
        assert_eq!(status.readiness.mode, Some(ReadinessMode::Health));
        if readiness.is_none() {
            // auto: it says what it chose and why, everywhere.
            assert_eq!(status.readiness.configured, Readiness::Auto);
            assert!(
                status.readiness.why.contains("has no --ready-file"),
                "{status:?}"
            );
            assert_eq!(stack.models().readiness, status.readiness);
            assert!(
                stack.supervisor_stderr().contains("readiness mode chosen"),
                "{}",
                stack.supervisor_stderr()
            );
        }
        stack.stop();
    }
}
