//! A real Prometheus server scrapes the proxy with a scrape job of default settings (no
//! `params`, no headers): the target is up, its health has no error, and a query returns
//! the router's metrics. Prometheus asks for OpenMetrics first in its `Accept`, so this is
//! the check that `/metrics` negotiates what a scraper prefers rather than answering JSON.
//!
//! The server is Debian's `prometheus` package (`/usr/bin/prometheus`, beside `promtool`),
//! or the binary `STRATA_PROMETHEUS_BIN` names. Skipped with one line on stderr where it is
//! not runnable, unless `STRATA_REQUIRE_PROMETHEUS=1` or `STRATA_REQUIRE_PROMTOOL=1` (as
//! `.ci/run` sets both), where that fails the test instead.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::tempdir::TempDir;
use strata_e2e::{ConfigBuilder, ModelSpec, poll_for};
use strata_test_support::spawned::Daemon;

const MODEL: &str = "flash-a";
const JOB: &str = "strata-router";
/// Prometheus's start (it opens a TSDB) and its first scrapes, on a loaded CI machine.
const SCRAPED_WITHIN: Duration = Duration::from_secs(90);

/// The Prometheus executable, or None (after saying why on stderr) when it is not runnable
/// and not required.
fn prometheus_binary() -> Option<String> {
    let bin = std::env::var("STRATA_PROMETHEUS_BIN")
        .ok()
        .filter(|bin| !bin.is_empty())
        .unwrap_or_else(|| "prometheus".to_owned());
    let required = ["STRATA_REQUIRE_PROMETHEUS", "STRATA_REQUIRE_PROMTOOL"]
        .iter()
        .any(|var| std::env::var(var).as_deref() == Ok("1"));
    match Command::new(&bin).arg("--version").output() {
        Ok(output) if output.status.success() => Some(bin),
        result => {
            let why = match result {
                Ok(output) => format!("`{bin} --version` exited with {}", output.status),
                Err(err) => format!("{bin} not runnable ({err})"),
            };
            assert!(
                !required,
                "a Prometheus server is required (STRATA_REQUIRE_PROMETHEUS or \
                 STRATA_REQUIRE_PROMTOOL is 1): {why}"
            );
            eprintln!("SKIPPED: real Prometheus scrape: {why}");
            None
        }
    }
}

/// `text` with everything but unreserved characters percent-encoded, for a query string.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The result vector of an instant query, or None while Prometheus is not answering.
fn query(prometheus: SocketAddr, promql: &str) -> Option<Vec<Value>> {
    let path = format!("/api/v1/query?query={}", percent_encode(promql));
    let response = http::try_request(prometheus, "GET", &path, &[], b"").ok()?;
    let body: Value = serde_json::from_str(&response.text()).ok()?;
    if body["status"] != "success" {
        return None;
    }
    body["data"]["result"].as_array().cloned()
}

/// What to wait for, with Prometheus's view of the targets read when the wait fails (their
/// `lastError` says why a scrape failed: "INVALID is not a valid start token" was JSON).
struct WithTargets<'a>(&'a str, SocketAddr);

impl std::fmt::Display for WithTargets<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let targets = http::try_request(self.1, "GET", "/api/v1/targets", &[], b"").map_or_else(
            |err| format!("unreadable: {err}"),
            |response| response.text(),
        );
        write!(f, "{}; Prometheus's targets: {targets}", self.0)
    }
}

/// The single sample's value of a vector result, as a number.
fn value(sample: &Value) -> Option<f64> {
    sample["value"][1].as_str()?.parse().ok()
}

#[test]
fn a_default_scrape_job_sees_the_router_up_and_its_metrics() {
    let Some(bin) = prometheus_binary() else {
        return;
    };
    let stack = Stack::start(
        ConfigBuilder::new("prometheus-server")
            .model(ModelSpec::new(MODEL))
            .build(),
    );
    // A finished request, so the request counter has a sample to query.
    stack.chat(&chat_body(MODEL, false)).expect_status(200);

    let dir = TempDir::new("prometheus");
    let port = strata_e2e::net::free_port();
    let prometheus = SocketAddr::from(([127, 0, 0, 1], port));
    // Only a short interval differs from Prometheus's defaults, so the test is quick: the
    // job has no params, headers, scheme or path of its own.
    let config = dir.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n\
             \x20     - targets: ['{}']\n",
            stack.addr()
        ),
    );
    let data = dir.subdir("data", 0o700);
    let mut command = Command::new(&bin);
    command
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address={prometheus}"));
    let mut server = Daemon::spawn("prometheus", command, dir.path());

    let up = format!("up{{job=\"{JOB}\"}}");
    let waited_for = format!("{up} == 1");
    poll_for(SCRAPED_WITHIN, WithTargets(&waited_for, prometheus), || {
        let result = query(prometheus, &up)?;
        (result.len() == 1 && value(&result[0]) == Some(1.0)).then_some(())
    });

    // The router's own series arrived under the job's labels.
    let requests = format!("strata_router_requests_total{{job=\"{JOB}\",model=\"{MODEL}\"}}");
    let samples = poll_for(SCRAPED_WITHIN, format!("a sample of {requests}"), || {
        query(prometheus, &requests).filter(|result| !result.is_empty())
    });
    let total: f64 = samples.iter().filter_map(value).sum();
    assert_eq!(total, 1.0, "one finished request: {samples:?}");
    let loaded = query(
        prometheus,
        &format!("strata_router_model_loaded{{job=\"{JOB}\",model=\"{MODEL}\"}}"),
    )
    .expect("query model_loaded");
    assert_eq!(
        loaded.first().and_then(value),
        Some(1.0),
        "model loaded: {loaded:?}"
    );
    // Both daemons' process families, one series each.
    let memory = query(
        prometheus,
        &format!("process_resident_memory_bytes{{job=\"{JOB}\"}}"),
    )
    .expect("query process_resident_memory_bytes");
    let mut daemons: Vec<&str> = memory
        .iter()
        .filter(|series| value(series).is_some_and(|bytes| bytes > 0.0))
        .filter_map(|series| series["metric"]["daemon"].as_str())
        .collect();
    daemons.sort_unstable();
    assert_eq!(daemons, ["proxy", "supervisor"], "{memory:?}");

    // The target's health, as the Prometheus UI shows it.
    let targets: Value =
        serde_json::from_str(&http::get(prometheus, "/api/v1/targets").text()).expect("JSON");
    let active = targets["data"]["activeTargets"]
        .as_array()
        .expect("activeTargets");
    let target = active
        .iter()
        .find(|target| target["labels"]["job"] == JOB)
        .unwrap_or_else(|| panic!("no {JOB} target: {targets}"));
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");

    server.kill(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(SCRAPED_WITHIN);
    assert!(status.success(), "prometheus exited with {status}");
    stack.stop();
}
