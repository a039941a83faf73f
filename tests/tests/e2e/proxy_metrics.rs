//! `GET /metrics` against live traffic: the loaded model, in-flight and
//! queued counts (by tier), the body limit, the last streamed request's
//! TTFT and decode rate, and the same figures in Prometheus text and OpenMetrics, each
//! format chosen by the `Accept` header a client sends.

use serde_json::json;
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::{A3B, ConfigBuilder, DEADLINE, ModelSpec, poll_for, poll_until};
use strata_protocol::api::TierCounts;

const A: &str = "flash-a";
const B: &str = "a3b-b";

fn config(tag: &str) -> strata_e2e::TestConfig {
    ConfigBuilder::new(tag)
        .model(
            ModelSpec::new(A)
                .fake("token_delay_ms", 150)
                .fake("tokens", 6),
        )
        .model(ModelSpec::new(B).family(A3B))
        .wait_when_busy(true)
        .set("max_request_body_bytes", 123_456)
        .build()
}

#[test]
fn metrics_follow_a_stream_and_a_queued_priority_request() {
    let stack = Stack::start(config("metrics"));
    let idle = stack.metrics();
    assert_eq!(idle.in_flight, Some(0), "{idle:?}");
    assert_eq!(idle.queue_depth, Some(0), "{idle:?}");
    assert_eq!(
        idle.queue_depth_by_tier,
        TierCounts {
            priority: Some(0),
            default: Some(0),
            flex: Some(0)
        },
        "{idle:?}"
    );
    assert_eq!(idle.max_request_body_bytes, 123_456);
    assert!(idle.supervisor_connected);
    assert_eq!(idle.routing, Some(true));
    assert_eq!(idle.loaded_model, None, "{idle:?}");
    assert_eq!(idle.in_flight_requests, Some(vec![]), "{idle:?}");
    assert_eq!(idle.last_stream_ttft_ms, None, "{idle:?}");
    assert_eq!(idle.last_stream_decode_tokens_per_second, None, "{idle:?}");

    // A slow stream on A holds its lease: one request in flight.
    let mut stream_a = stack.open_chat(&chat_body(A, true));
    poll_until(DEADLINE, "A in flight and loaded", || {
        let m = stack.metrics();
        m.in_flight == Some(1) && m.loaded_model.as_deref() == Some(A)
    });

    // A priority request for B must wait for A's lease: queued, by tier.
    let mut body_b = chat_body(B, true);
    body_b["service_tier"] = json!("priority");
    // Written raw: a held wait-first stream gets its headers only with its first data.
    let conn_b = http::send_chat(stack.addr(), &body_b);
    poll_until(DEADLINE, "B queued as priority", || {
        let m = stack.metrics();
        let tiers = m.queue_depth_by_tier;
        m.queue_depth == Some(1) && tiers.priority == Some(1) && tiers.default == Some(0)
    });
    // Both held requests are listed, oldest first, with their stage and age.
    let held = stack
        .metrics()
        .in_flight_requests
        .expect("in_flight_requests with the supervisor up");
    let described: Vec<(&str, &str, &str)> = held
        .iter()
        .map(|request| {
            (
                request.model.as_str(),
                request.stage.as_str(),
                request.tier.as_str(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [(A, "leased", "default"), (B, "waiting", "priority")],
        "{held:?}"
    );
    assert!(held[0].age_ms >= held[1].age_ms, "{held:?}");
    assert!(!held[0].request_id.is_empty(), "{held:?}");

    let frames_a = stream_a.remaining_frames(DEADLINE);
    assert!(frames_a.iter().any(|f| f.is_done()), "A completed");
    let mut stream_b = conn_b.into_stream(DEADLINE);
    let frames_b = stream_b.remaining_frames(DEADLINE);
    assert!(frames_b.iter().any(|f| f.is_done()), "B completed");
    poll_until(DEADLINE, "nothing in flight or queued", || {
        let m = stack.metrics();
        m.in_flight == Some(0) && m.queue_depth == Some(0) && m.loaded_model.as_deref() == Some(B)
    });

    // The last streamed request was B (five tokens without a delay), and
    // A before it had six tokens 150 ms apart; the figures are B's.
    let done = stack.metrics();
    let ttft = done
        .last_stream_ttft_ms
        .unwrap_or_else(|| panic!("ttft after a stream: {done:?}"));
    assert!(ttft > 0, "B waited for A and a load: {done:?}");
    // The decode rate may be null (five tokens without a delay); the type says it is a
    // number when present.
    stack.stop();
}

#[test]
fn a_paced_stream_reports_its_decode_rate() {
    let stack = Stack::start(config("decode"));
    let mut stream = stack.open_chat(&chat_body(A, true));
    let frames = stream.remaining_frames(DEADLINE);
    assert!(frames.iter().any(|f| f.is_done()));
    poll_until(DEADLINE, "last stream figures", || {
        stack.metrics().last_stream_ttft_ms.is_some()
    });
    let metrics = stack.metrics();
    // Six tokens 150 ms apart: five intervals over about 750 ms, so about
    // 6.7 tokens per second; allow for a slow machine on either side.
    let rate = metrics
        .last_stream_decode_tokens_per_second
        .unwrap_or_else(|| panic!("decode rate: {metrics:?}"));
    assert!((2.0..=20.0).contains(&rate), "rate {rate}: {metrics:?}");
    stack.stop();
}

#[test]
fn prometheus_text_has_the_same_figures() {
    let stack = Stack::start(config("prom"));
    for (path, headers) in [
        ("/metrics?format=prometheus", vec![]),
        ("/metrics", vec![("Accept", "text/plain")]),
        (
            "/metrics",
            vec![("Accept", "application/json;q=0.5, text/plain")],
        ),
    ] {
        let response = http::request(stack.addr(), "GET", path, &headers, b"");
        response.expect_status(200);
        let content_type = response.header("content-type").unwrap_or_default();
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let text = response.text();
        promtool_check(&text);
        for line in [
            "strata_router_in_flight 0",
            "strata_router_queue_depth 0",
            "strata_router_max_request_body_bytes 123456",
            "strata_router_queue_depth_by_tier{tier=\"priority\"} 0",
            "strata_router_queue_depth_by_tier{tier=\"flex\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
    stack.stop();
}

/// What Prometheus 2.42 (Debian bookworm's) sends, and 3.x with its default scrape protocols.
const PROMETHEUS_2_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
const PROMETHEUS_3_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
    application/openmetrics-text;version=0.0.1;q=0.5,\
    text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";

/// Prometheus's own Accept headers get OpenMetrics (counter families named without `_total`,
/// `# EOF` last); curl's `*/*`, no Accept and `application/json` keep the spec's JSON.
#[test]
fn accept_negotiates_openmetrics_for_prometheus_and_json_for_the_rest() {
    let stack = Stack::start(config("prom-accept"));
    stack.chat(&chat_body(A, false)).expect_status(200);
    for accept in [PROMETHEUS_2_ACCEPT, PROMETHEUS_3_ACCEPT] {
        let response = http::request(stack.addr(), "GET", "/metrics", &[("Accept", accept)], b"");
        response.expect_status(200);
        assert_eq!(
            response.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            "{accept}"
        );
        let text = response.text();
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        for line in [
            "# TYPE strata_router_requests counter",
            "# TYPE strata_router_request_log_write_errors counter",
            "# TYPE strata_router_queue_depth gauge",
            "strata_router_max_request_body_bytes 123456",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("strata_router_requests_total{")),
            "{text}"
        );
        assert!(
            !text.contains("# TYPE strata_router_requests_total"),
            "{text}"
        );
    }
    for headers in [
        vec![],
        vec![("Accept", "*/*")],
        vec![("Accept", "application/json")],
        vec![("Accept", "application/json, text/plain;q=0.5")],
        vec![("Accept", "text/plain;q=0")],
    ] {
        let response = http::request(stack.addr(), "GET", "/metrics", &headers, b"");
        response.expect_status(200);
        assert_eq!(
            response.header("content-type"),
            Some("application/json"),
            "{headers:?}"
        );
        assert_eq!(
            response.json()["max_request_body_bytes"],
            123_456,
            "{headers:?}"
        );
    }
    stack.stop();
}

/// The Prometheus samples of one scrape: `name{labels}` to value.
fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').expect("a sample line");
            (key.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// `promtool check metrics` on a scrape. Skipped with the reason when promtool is not
/// installed, unless `STRATA_REQUIRE_PROMTOOL=1` (as `.ci/run` sets it).
fn promtool_check(text: &str) {
    use std::io::Write;
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) if std::env::var("STRATA_REQUIRE_PROMTOOL").as_deref() != Ok("1") => {
            eprintln!("skipping promtool check metrics: promtool not runnable ({err})");
            return;
        }
        Err(err) => panic!("promtool is required (STRATA_REQUIRE_PROMTOOL=1): {err}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Under traffic (streams and JSON on two models, so loads and a switch; a request for an
/// unknown model; a stream that fails after its headers), the supervisor's counters and histograms match the records one for one,
/// the scrape passes `promtool check metrics`, and the counts survive a proxy restart.
#[test]
fn prometheus_counters_match_the_records_and_pass_promtool() {
    let mut stack = Stack::start(config("prom-traffic"));
    let addr = stack.addr();
    let mut sent = 0;
    for (model, stream) in [(A, true), (A, false), (B, true), (A, true), (B, false)] {
        let mut body = chat_body(model, stream);
        body["fake"] = json!({"tokens": 4, "token_delay_ms": 5});
        if stream {
            let mut response = stack.open_chat(&body);
            response.read_to_end(DEADLINE);
        } else {
            stack.chat(&body).expect_status(200);
        }
        sent += 1;
    }
    stack
        .chat(&chat_body("no-such-model", false))
        .expect_status(404);
    sent += 1;
    // A stream that fails after its 200 headers (an in-band error frame).
    let mut body = chat_body(A, true);
    body["fake"] = json!({"mid_stream": "error", "mid_stream_after": 2, "tokens": 4});
    stack.open_chat(&body).read_to_end(DEADLINE);
    sent += 1;
    let records = strata_e2e::accounting::wait_records(addr, sent);
    let scrape = |stack: &Stack| {
        http::request(stack.addr(), "GET", "/metrics?format=prometheus", &[], b"").text()
    };
    let text = scrape(&stack);
    promtool_check(&text);
    let got = samples(&text);

    // One count per record, under its labels.
    let mut expected: std::collections::BTreeMap<String, f64> = Default::default();
    let mut bytes = 0.0;
    for record in &records {
        let status_class = match record.status {
            None => "none".to_owned(),
            Some(s) if s / 100 == 2 && !record.success => "failed_after_headers".to_owned(),
            Some(s) => format!("{}xx", s / 100),
        };
        let key = format!(
            "strata_router_requests_total{{model=\"{}\",reason=\"{}\",status_class=\"{status_class}\",tier=\"default\",stream=\"{}\"}}",
            record.model_resolved.as_deref().unwrap_or("none"),
            record.reason.as_str(),
            record.stream
        );
        *expected.entry(key).or_default() += 1.0;
        bytes += record.response_bytes as f64;
    }
    let counted: std::collections::BTreeMap<String, f64> = got
        .iter()
        .filter(|(key, _)| key.starts_with("strata_router_requests_total{"))
        .map(|(key, value)| (key.clone(), *value))
        .collect();
    assert_eq!(counted, expected, "{text}");
    assert!(
        counted
            .keys()
            .any(|key| key.contains("status_class=\"failed_after_headers\"")),
        "the failed stream is not counted as 2xx: {text}"
    );
    assert_eq!(got["strata_router_response_bytes_total"], bytes);
    for model in [A, B] {
        let with_ttft = records
            .iter()
            .filter(|r| r.model_resolved.as_deref() == Some(model) && r.ttft_ms.is_some())
            .count() as f64;
        assert_eq!(
            got[&format!("strata_router_ttft_seconds_count{{model=\"{model}\"}}")],
            with_ttft,
            "{text}"
        );
        let total = records
            .iter()
            .filter(|r| r.model_resolved.as_deref() == Some(model))
            .count() as f64;
        assert_eq!(
            got[&format!(
                "strata_router_request_duration_seconds_bucket{{model=\"{model}\",le=\"+Inf\"}}"
            )],
            total
        );
        for (family, tokens) in [
            (
                "prompt",
                (|r| r.prompt_tokens) as fn(&strata_protocol::record::RequestRecord) -> Option<u64>,
            ),
            ("completion", |r| r.completion_tokens),
        ] {
            let reported: u64 = records
                .iter()
                .filter(|r| r.model_resolved.as_deref() == Some(model))
                .filter_map(|r| tokens(r))
                .sum();
            assert!(reported > 0, "{family}: the fake reports usage");
            assert_eq!(
                got[&format!("strata_router_{family}_tokens_total{{model=\"{model}\"}}")],
                reported as f64,
                "{text}"
            );
        }
        let starts = stack
            .fake_log()
            .start_count(&stack.config().upstream(model)) as f64;
        assert_eq!(
            got[&format!(
                "strata_router_model_loads_total{{model=\"{model}\",outcome=\"verified\"}}"
            )],
            starts,
            "{text}"
        );
    }
    assert_eq!(got["strata_router_proxies"], 1.0);
    // Both daemons' process families, under their standard names, each with its own figures.
    for (daemon, pid) in [
        ("proxy", stack.proxy_pid()),
        ("supervisor", stack.supervisor_pid()),
    ] {
        let figure = |family: &str| got[&format!("{family}{{daemon=\"{daemon}\"}}")];
        assert!(figure("process_resident_memory_bytes") > 0.0, "{text}");
        assert!(figure("process_open_fds") > 0.0, "{text}");
        assert_eq!(
            figure("process_max_fds"),
            strata_test_support::procs::open_file_limits(pid).unwrap().0 as f64,
            "{daemon}: {text}"
        );
        let started = start_time_seconds(pid);
        assert!(
            (figure("process_start_time_seconds") - started).abs() < 0.015,
            "{daemon} started at {started}: {text}"
        );
    }
    // The duration histogram's deprecated old name carries the same samples
    // for one release, and says so.
    let deprecated: Vec<_> = got
        .iter()
        .filter(|(key, _)| key.starts_with("strata_router_total_seconds_"))
        .collect();
    assert!(!deprecated.is_empty(), "{text}");
    for (key, value) in deprecated {
        let renamed = key.replacen("total_seconds", "request_duration_seconds", 1);
        assert_eq!(got.get(&renamed), Some(value), "{renamed}");
    }
    assert!(
        text.contains(
            "# HELP strata_router_total_seconds Deprecated: use strata_router_request_duration_seconds"
        ),
        "{text}"
    );
    assert_eq!(
        got[&format!("strata_router_model_loaded{{model=\"{A}\"}}")]
            + got[&format!("strata_router_model_loaded{{model=\"{B}\"}}")],
        1.0
    );
    assert_eq!(
        got[&format!("strata_router_last_startup_error{{model=\"{A}\"}}")],
        0.0
    );
    assert_eq!(got["strata_router_routing"], 1.0);

    // A scrape while a stream runs and another request waits passes promtool too.
    let mut slow = chat_body(A, true);
    slow["fake"] = json!({"tokens": 30, "token_delay_ms": 50});
    let mut running = stack.open_chat(&slow);
    let waiting = http::send_chat(addr, &chat_body(B, false));
    poll_until(DEADLINE, "a request in flight and one queued", || {
        let m = stack.metrics();
        m.in_flight == Some(1) && m.queue_depth == Some(1)
    });
    let busy_text = scrape(&stack);
    promtool_check(&busy_text);
    model_server_protocol_gauges(&busy_text, A, B);
    let busy = samples(&busy_text);
    assert_eq!(busy["strata_router_in_flight"], 1.0);
    assert_eq!(
        busy[&format!("strata_router_queue_depth_by_model{{model=\"{B}\"}}")],
        1.0
    );
    running.read_to_end(DEADLINE);
    waiting.response(DEADLINE).expect_status(200);
    // Their records come right after their responses; then the counters have them too.
    let counted: std::collections::BTreeMap<String, f64> =
        poll_for(DEADLINE, "the two new requests counted", || {
            let counted: std::collections::BTreeMap<String, f64> = samples(&scrape(&stack))
                .into_iter()
                .filter(|(key, _)| key.starts_with("strata_router_requests_total{"))
                .collect();
            (counted.values().sum::<f64>() == (sent + 2) as f64).then_some(counted)
        });

    // A new proxy reads the same counters from the supervisor.
    stack.restart_proxy();
    let again = samples(&scrape(&stack));
    for (key, value) in &counted {
        assert_eq!(again.get(key), Some(value), "{key} after a proxy restart");
    }
    stack.stop();
}

/// The endpoint picker's gauges (Model Server Protocol, `docs/many-hosts.md`) on a scrape
/// while `running` is loaded and serves one request and one request waits for `waiting`:
/// their types, one sample each, and the info gauge's labels as vLLM writes them.
fn model_server_protocol_gauges(text: &str, running: &str, waiting: &str) {
    for family in [
        "num_requests_waiting",
        "num_requests_running",
        "lora_requests_info",
    ] {
        let type_line = format!("# TYPE strata_router_{family} gauge");
        assert!(
            text.lines().any(|l| l == type_line),
            "missing {type_line:?} in\n{text}"
        );
    }
    let got = samples(text);
    assert_eq!(got["strata_router_num_requests_waiting"], 1.0, "{text}");
    assert_eq!(got["strata_router_num_requests_running"], 1.0, "{text}");
    let info = format!(
        "strata_router_lora_requests_info{{running_lora_adapters=\"{running}\",\
         waiting_lora_adapters=\"{waiting}\",max_lora=\"1\"}}"
    );
    assert_eq!(got.get(&info), Some(&1.0), "missing {info} in\n{text}");
    assert_eq!(
        got.keys()
            .filter(|key| key.starts_with("strata_router_lora_requests_info"))
            .count(),
        1,
        "{text}"
    );
    // No backend reports a KV-cache figure, so none is made up.
    assert!(!text.contains("cache_usage"), "{text}");
}

/// When process `pid` started, seconds since the epoch, from `/proc` (proc(5): the boot time
/// plus field 22 of `/proc/PID/stat` in clock ticks), read here independently of the daemons.
fn start_time_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_command = stat.rsplit_once(')').unwrap().1;
    // The text after the command starts at field 3.
    let start_ticks: f64 = after_command
        .split_whitespace()
        .nth(22 - 3)
        .unwrap()
        .parse()
        .unwrap();
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as f64;
    boot + start_ticks / ticks
}
