//! The client libraries people use, run against the real router on the fake backend: the
//! OpenAI Python SDK (sync and async), httpx-sse, litellm, langchain-openai and openai-node, at the
//! versions pinned in `tests/clients/` (`requirements.txt`, `package-lock.json`).
//!
//! The SDKs are installed on first use into `target/tmp/client-sdks/` (a venv and a
//! `node_modules`), again whenever the pins change. Without a way to install them (the package
//! registries unreachable, no `node`), the test prints why and passes as skipped; an install
//! that fails while the registry answers is a failure. Each script checks its client's matrix
//! itself (`tests/clients/sdk_python.py`, `sdk_node.mjs`) and prints a summary; this test then
//! checks what only the router and the fake can see: one backend launch per failed-load request
//! (the retry hints stop the SDKs' automatic retries), and a `client_disconnect` record for
//! each stream a client cancelled.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use strata_e2e::accounting::all_records;
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, FLASH, ModelSpec, poll_until};
use strata_protocol::record::Reason;
use strata_test_support::python::{python, repo_root};

const CONCRETE: &str = "flash-a";
const BROKEN: &str = "flash-broken";
const BROKEN_SLOW: &str = "flash-broken-slow";
const SLOW: &str = "flash-slow";

fn clients_dir() -> PathBuf {
    repo_root().join("tests/clients")
}

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("client-sdks")
}

/// Whether `host:443` accepts a TCP connection within a few seconds.
fn reachable(host: &str) -> bool {
    let Ok(mut addrs) = (host, 443).to_socket_addrs() else {
        return false;
    };
    addrs.any(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok())
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|err| panic!("run {command:?}: {err}"))
}

fn text(output: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Installs the pinned packages into `dir` with `install` unless `stamp` already records
/// `pins`. `Err(reason)` means skip (the registry cannot be reached).
fn ensure(
    dir: &Path,
    pins: &str,
    registry: &str,
    install: impl Fn() -> Output,
) -> Result<(), String> {
    let stamp = dir.join("installed-pins");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed == pins) {
        return Ok(());
    }
    // A second try absorbs a registry's passing hiccup.
    let mut output = install();
    if !output.status.success() {
        output = install();
    }
    if output.status.success() {
        std::fs::write(&stamp, pins).expect("write the install stamp");
        return Ok(());
    }
    if !reachable(registry) {
        return Err(format!(
            "{registry} cannot be reached and the install failed:\n{}",
            text(&output)
        ));
    }
    panic!(
        "installing the SDKs failed although {registry} is reachable:\n{}",
        text(&output)
    );
}

fn python_sdks() -> Result<PathBuf, String> {
    let dir = cache_dir().join("python");
    std::fs::create_dir_all(&dir).unwrap();
    let requirements = clients_dir().join("requirements.txt");
    let pins = std::fs::read_to_string(&requirements).unwrap();
    let venv = dir.join("venv");
    ensure(&dir, &pins, "pypi.org", || {
        let _ = std::fs::remove_dir_all(&venv);
        let created = run(Command::new(python()).args(["-m", "venv"]).arg(&venv));
        if !created.status.success() {
            return created;
        }
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements))
    })?;
    Ok(venv.join("bin/python"))
}

fn node_sdks() -> Result<PathBuf, String> {
    if run(Command::new("sh").args(["-c", "command -v node && command -v npm"]))
        .status
        .success()
    {
        let dir = cache_dir().join("node");
        std::fs::create_dir_all(&dir).unwrap();
        let lock = std::fs::read_to_string(clients_dir().join("package-lock.json")).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(clients_dir().join(file), dir.join(file)).unwrap();
        }
        ensure(&dir, &lock, "registry.npmjs.org", || {
            run(Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir))
        })?;
        Ok(dir)
    } else {
        Err("node and npm are not installed".into())
    }
}

/// The last stdout line of a client script: its summary.
fn summary(output: &Output, what: &str) -> Value {
    assert!(output.status.success(), "{what}:\n{}", text(output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let summary: Value =
        serde_json::from_str(last).unwrap_or_else(|err| panic!("{what} summary {last:?}: {err}"));
    eprintln!("{what}: {summary}");
    summary
}

#[test]
fn the_openai_sdks_and_httpx_sse_against_the_router() {
    let python_sdk = python_sdks();
    let node_sdk = node_sdks();
    if let (Err(python), Err(node)) = (&python_sdk, &node_sdk) {
        eprintln!("SKIPPED: no client SDK could be installed.\npython: {python}\nnode: {node}");
        return;
    }
    let config = ConfigBuilder::new("sdks")
        .model(ModelSpec::new(CONCRETE))
        .model(ModelSpec::new(BROKEN).start_failure("exit"))
        // Fails after its stream's head went out with the first keepalive (4 s).
        .model(
            ModelSpec::new(BROKEN_SLOW)
                .load_ms(5000)
                .start_failure("exit"),
        )
        .model(ModelSpec::new(SLOW).load_ms(7000))
        .alias(FLASH, &[CONCRETE])
        // No cooldown: an SDK retry of a failed load would launch the backend again.
        .cooldown_ms(0)
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let base = format!("http://{}", stack.addr());
    let scenario = std::env::temp_dir().join(format!("sdk-scenario-{}.json", std::process::id()));
    std::fs::write(
        &scenario,
        json!({"concrete": CONCRETE, "alias": FLASH.to_string(), "broken": BROKEN,
               "broken_slow": BROKEN_SLOW, "slow": SLOW})
        .to_string(),
    )
    .unwrap();

    let mut failed_loads = 0;
    let mut cancelled = 0;
    let mut ran = Vec::new();
    match &python_sdk {
        Ok(venv_python) => {
            let output = run(Command::new(venv_python)
                .arg(clients_dir().join("sdk_python.py"))
                .arg(&base)
                .arg(&scenario));
            let got = summary(&output, "the Python clients");
            failed_loads += got["failed_loads"].as_u64().unwrap();
            cancelled += got["cancelled"].as_u64().unwrap();
            ran.push("openai-python (sync, async), httpx-sse, litellm, langchain-openai");
        }
        Err(reason) => eprintln!("SKIPPED python clients: {reason}"),
    }
    match &node_sdk {
        Ok(dir) => {
            let script = dir.join("sdk_node.mjs");
            std::fs::copy(clients_dir().join("sdk_node.mjs"), &script).unwrap();
            let output = run(Command::new("node").arg(&script).arg(&base).arg(&scenario));
            let got = summary(&output, "openai-node");
            failed_loads += got["failed_loads"].as_u64().unwrap();
            cancelled += got["cancelled"].as_u64().unwrap();
            ran.push("openai-node");
        }
        Err(reason) => eprintln!("SKIPPED openai-node: {reason}"),
    }
    let _ = std::fs::remove_file(&scenario);
    eprintln!("ran: {}", ran.join("; "));

    // One launch per failed-load request: the SDKs did not retry.
    let log = stack.fake_log();
    let launches = [BROKEN, BROKEN_SLOW]
        .iter()
        .map(|model| log.starts_for(&stack.config().upstream(model)).len() as u64)
        .sum::<u64>();
    assert_eq!(launches, failed_loads, "{}", log.dump());
    // Every cancelled stream was seen as a disconnect.
    poll_until(
        Duration::from_secs(20),
        "a record per cancelled stream",
        || {
            all_records(stack.addr())
                .iter()
                .filter(|record| record.reason == Reason::ClientDisconnect)
                .count() as u64
                >= cancelled
        },
    );
    stack.stop();
}
