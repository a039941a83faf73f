//! `strata-ctl simulate` as a person runs it: every built-in workload under
//! all four policies, the `--json` shape, the drawing, a workload file, a
//! replayed request log, and the errors (under both names, which their
//! messages start with).

use std::path::Path;
use std::process::Output;

use crate::common::*;
use serde_json::{Value, json};

under_both_names!(bad_arguments_say_what_is_wrong);

fn simulate(args: &[&str]) -> Output {
    simulate_as(STRATA_CTL, args)
}

fn simulate_as(exe: Exe, args: &[&str]) -> Output {
    let mut all = vec!["simulate"];
    all.extend_from_slice(args);
    exe.run(&all)
}

fn ok_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let output = simulate(&all);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

const POLICY_KEYS: [&str; 9] = [
    "busy_fraction",
    "completed",
    "failed",
    "load_s",
    "makespan_s",
    "swaps",
    "switches",
    "wait_ms",
    "wasted_load_s",
];

fn check_policy(name: &str, policy: &Value) {
    let keys: Vec<&str> = policy
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, POLICY_KEYS, "{name}");
    assert!(
        policy["swaps"].is_u64() && policy["completed"].is_u64(),
        "{name}"
    );
    for key in ["load_s", "wasted_load_s", "busy_fraction", "makespan_s"] {
        assert!(policy[key].is_f64(), "{name}.{key}: {}", policy[key]);
    }
    assert!(policy["failed"].is_object());
    // A switch is a load after another model: never more of them than loads
    // after the first, plus the idle unloads and cancels.
    let switches = policy["switches"].as_object().unwrap();
    for (reason, count) in switches {
        assert!(
            [
                "grace_expired",
                "bound_due",
                "queue_drained",
                "priority",
                "operator",
                "idle",
                "abandoned"
            ]
            .contains(&reason.as_str()),
            "{name}: {reason}"
        );
        assert!(count.as_u64().is_some_and(|n| n > 0), "{name}: {reason}");
    }
    for group in ["by_tier", "by_model"] {
        let waits = policy["wait_ms"][group].as_object().unwrap();
        assert!(!waits.is_empty(), "{name}.{group}");
        for entry in waits.values() {
            let keys: Vec<&str> = entry
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["max", "p50", "p95", "p99"], "{name}.{group}");
            assert!(entry["p50"].as_u64() <= entry["max"].as_u64());
        }
    }
}

#[test]
fn every_built_in_workload_runs_under_the_four_policies() {
    for workload in ["agents", "interactive-batch", "bursty"] {
        let doc = ok_json(&["--workload", workload]);
        assert_eq!(doc["workload"]["name"], workload);
        let policies = doc["policies"].as_object().unwrap();
        let names: Vec<&str> = policies.keys().map(String::as_str).collect();
        assert_eq!(names, ["collate", "fifo", "ideal", "router"], "{workload}");
        for (name, policy) in policies {
            check_policy(name, policy);
        }
        // The router's switches say why: grace, the hold bound (the example
        // config sets both), priority or an idle unload; the baselines switch
        // as soon as a model's queue drains.
        let reasons = |name: &str| {
            let switches = policies[name]["switches"].as_object().unwrap();
            switches.keys().cloned().collect::<Vec<String>>()
        };
        assert!(
            reasons("router")
                .iter()
                .all(|r| ["grace_expired", "bound_due", "priority", "idle"].contains(&r.as_str())),
            "{workload}: {:?}",
            reasons("router")
        );
        assert!(reasons("router").contains(&"grace_expired".to_owned()));
        assert!(
            reasons("fifo")
                .iter()
                .all(|r| ["queue_drained", "idle"].contains(&r.as_str())),
            "{workload}: {:?}",
            reasons("fifo")
        );
        assert!(reasons("ideal").iter().all(|r| r == "idle"), "{workload}");
        // The table counts them.
        let table = text(&simulate(&["--workload", workload]).stdout);
        assert!(table.contains("switches by reason"), "{table}");
        // The bound is a bound.
        let swaps = |name: &str| policies[name]["swaps"].as_u64().unwrap();
        for name in ["fifo", "collate", "router"] {
            assert!(swaps("ideal") <= swaps(name), "{workload}: {name}");
        }
        // The table names every policy.
        let table = text(&simulate(&["--workload", workload]).stdout);
        for name in ["fifo", "collate", "router", "ideal", "swaps", "wasted_s"] {
            assert!(table.contains(name), "{table}");
        }
    }
}

#[test]
fn a_sweep_runs_the_router_once_per_value_and_set_changes_a_rule() {
    let doc = ok_json(&[
        "--sweep",
        "model_grace_ms=0,2000,10000",
        "--policies",
        "router,fifo",
    ]);
    let policies = doc["policies"].as_object().unwrap();
    for value in ["0", "2000", "10000"] {
        check_policy(value, &policies[&format!("router model_grace_ms={value}")]);
    }
    assert!(policies.contains_key("fifo"));
    assert_eq!(policies.len(), 4);
    // The default agents: a longer grace never adds swaps.
    let swaps = |v: &str| policies[&format!("router model_grace_ms={v}")]["swaps"].as_u64();
    assert!(swaps("10000") <= swaps("0"));
    // --set: the same as one sweep value.
    let set = ok_json(&["--set", "model_grace_ms=10000", "--policies", "router"]);
    assert_eq!(
        set["policies"]["router"],
        policies["router model_grace_ms=10000"]
    );
}

fn bad_arguments_say_what_is_wrong(exe: Exe) {
    let cases: [(&[&str], &str); 6] = [
        (&["--set", "model_grace_ms=-1"], "model_grace_ms"),
        (&["--set", "no_such_key=1"], "no_such_key"),
        (&["--policies", "lru"], "no policy \"lru\""),
        (&["--param", "agents"], "expected KEY=VALUE"),
        (&["--param", "speed=2"], "no parameter \"speed\""),
        (&["--workload", "/nonexistent/w.jsonl"], "cannot be read"),
    ];
    for (args, message) in cases {
        let output = simulate_as(exe, args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("{} simulate: ", exe.name)) && stderr.contains(message),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_workload_file_is_read_and_a_bad_line_refused_with_its_number() {
    let dir = TempDir::new("simulate-file");
    let written = dir.join("agents.jsonl");
    let from_generator = ok_json(&[
        "--param",
        "agents=2",
        "--param",
        "steps=5",
        "--write-workload",
        written.to_str().unwrap(),
    ]);
    let from_file = ok_json(&["--workload", written.to_str().unwrap()]);
    assert_eq!(from_file["policies"], from_generator["policies"]);

    let bad = dir.write(
        "bad.jsonl",
        "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1}}\n{\"request\": {\"at_ms\": 0}}\n",
    );
    let output = simulate(&["--workload", bad.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("line 3:"), "{stderr}");
}

/// A record as the router writes it (every field present).
fn record(seq: u64, model: &str, arrived_ms: u64, load_ms: Option<u64>, total_ms: u64) -> Value {
    let at = |ms: u64| {
        let secs = ms / 1000;
        format!(
            "2026-12-01T10:{:02}:{:02}.{:03}Z",
            secs / 60,
            secs % 60,
            ms % 1000
        )
    };
    json!({
        "schema_version": 1, "seq": seq, "arrival_seq": seq,
        "request_id": format!("42-1-{seq}"), "endpoint": "/v1/chat/completions", "stream": true,
        "model_requested": model, "model_resolved": model, "upstream_model": format!("up-{model}"),
        "arrived_at": at(arrived_ms), "completed_at": at(arrived_ms + total_ms),
        "lease_at": at(arrived_ms), "first_token_at": null, "last_token_at": null,
        "queue_depth_at_arrival": 0, "in_flight_at_arrival": 0, "queue_wait_ms": 0,
        "model_switch": load_ms.is_some(), "model_load_ms": load_ms, "upstream_headers_ms": null,
        "ttft_ms": null, "ttft_after_lease_ms": null, "generation_ms": null, "total_ms": total_ms,
        "prompt_tokens": null, "completion_tokens": null, "reasoning_tokens": null,
        "prompt_n": null, "cache_n": null, "predicted_n": null, "prompt_ms": null,
        "predicted_ms": null, "prompt_per_second": null, "predicted_per_second": null,
        "finish_reason": "stop", "status": 200, "upstream_status": 200, "success": true,
        "reason": "completed", "response_bytes": 10, "disconnect_phase": null
    })
}

#[test]
fn records_are_replayed_and_drawn_with_unreadable_lines_counted() {
    let dir = TempDir::new("simulate-records");
    let older = [
        record(1, "m-a", 0, Some(3000), 5000),
        record(2, "m-a", 1000, None, 4000),
    ];
    let newer = [
        record(3, "m-b", 9000, Some(3000), 4000),
        record(4, "m-a", 12_000, Some(3000), 5000),
    ];
    let lines = |records: &[Value]| {
        records
            .iter()
            .map(|r| r.to_string() + "\n")
            .collect::<String>()
    };
    let rotated = dir.write("requests.jsonl.1", &lines(&older));
    // A torn last line and a record of another schema version.
    let mut future = record(9, "m-a", 0, None, 1);
    future["schema_version"] = json!(2);
    let active = dir.write(
        "requests.jsonl",
        &format!("{}{future}\n{{\"schema_version\": 1, \"se", lines(&newer)),
    );
    let svg = dir.join("timeline.svg");
    let doc = ok_json(&[
        "--records",
        rotated.to_str().unwrap(),
        active.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(doc["workload"]["records"]["replayed"], 4);
    assert_eq!(doc["workload"]["records"]["unparsed_lines"], 2);
    let policies = doc["policies"].as_object().unwrap();
    assert!(policies.contains_key("observed"));
    assert_eq!(policies["observed"]["swaps"], 3, "{}", policies["observed"]);
    assert_eq!(policies["observed"]["completed"], 4);
    check_policy("observed", &policies["observed"]);

    // The drawing: valid SVG, one panel per run, one bar per request in
    // each, the loads shaded and the swaps marked.
    let drawing = std::fs::read_to_string(&svg).unwrap();
    let tree = roxmltree::Document::parse(&drawing).expect("valid XML");
    let root = tree.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let class = |node: &roxmltree::Node, name: &str| {
        node.attribute("class")
            .is_some_and(|c| c.split(' ').any(|part| part == name))
    };
    let runs: Vec<roxmltree::Node> = root.descendants().filter(|n| class(n, "run")).collect();
    assert_eq!(runs.len(), 5, "observed and four policies");
    for run in &runs {
        let bars = run.descendants().filter(|n| class(n, "request")).count();
        assert_eq!(bars, 4, "{:?}", run.attribute("data-run"));
        let swaps = run.descendants().filter(|n| class(n, "swap")).count();
        let loads = run.descendants().filter(|n| class(n, "load")).count();
        assert!(
            swaps >= 1 && swaps == loads,
            "{:?}",
            run.attribute("data-run")
        );
    }
}

#[test]
fn the_example_config_is_the_default_and_a_given_config_names_the_models() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.json");
    let default = ok_json(&["--policies", "router"]);
    let given = ok_json(&[
        "--config",
        example.to_str().unwrap(),
        "--policies",
        "router",
    ]);
    assert_eq!(default["workload"]["models"], json!(["model-a", "model-b"]));
    let models = given["workload"]["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    assert!(
        models[0].as_str().unwrap().starts_with("qwen"),
        "{models:?}"
    );
    // Same rules, same workload shape: the same figures.
    assert_eq!(
        default["policies"]["router"]["swaps"],
        given["policies"]["router"]["swaps"]
    );
}

/// Runs `simulate` expecting it to refuse with a message containing each
/// of `messages`.
fn refused(args: &[&str], messages: &[&str]) -> String {
    let output = simulate(args);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    for message in messages {
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    stderr
}

#[test]
fn a_record_out_of_range_is_refused_with_its_line() {
    let dir = TempDir::new("simulate-record-range");
    let good = record(1, "m-a", 0, Some(3000), 5000);
    for (field, value, message) in [
        (
            "total_ms",
            json!(u64::MAX),
            "total_ms 18446744073709551615 is out of range",
        ),
        (
            "queue_wait_ms",
            json!(u64::MAX),
            "queue_wait_ms 18446744073709551615 is out of range",
        ),
        (
            "model_load_ms",
            json!(-3),
            "model_load_ms -3 is out of range",
        ),
    ] {
        let mut bad = record(2, "m-a", 1000, Some(3000), 5000);
        bad[field] = value;
        let path = dir.write(&format!("{field}.jsonl"), &format!("{good}\n\n{bad}\n"));
        let file = path.to_str().unwrap();
        refused(
            &["--records", file],
            &[&format!("records {file}: line 3: "), message],
        );
    }
}

#[test]
fn a_record_of_365_days_is_drawn_on_a_few_ticks() {
    // The most a record may last: the drawing's axis keeps to a few ticks,
    // and the drawing to a few kilobytes per run.
    let dir = TempDir::new("simulate-record-long");
    let good = record(1, "m-a", 0, Some(3000), 5000);
    let year = 365 * 86_400_000;
    let mut long = record(2, "m-a", 1000, None, year);
    long["reason"] = json!("client_disconnect");
    let path = dir.write("long.jsonl", &format!("{good}\n{long}\n"));
    let svg = dir.join("long.svg");
    ok_json(&[
        "--records",
        path.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let drawing = std::fs::read_to_string(&svg).unwrap();
    let tree = roxmltree::Document::parse(&drawing).expect("valid XML");
    let ticks = tree
        .descendants()
        .filter(|n| n.attribute("class") == Some("tick"))
        .count();
    assert!((2..=11).contains(&ticks), "{ticks} ticks");
    assert!(drawing.len() < 50_000, "{} bytes", drawing.len());
}

#[test]
fn a_records_file_that_never_ends_is_read_up_to_one_gib() {
    let stderr = refused(
        &["--records", "/dev/zero"],
        &["records /dev/zero: more than 1073741824 bytes"],
    );
    assert!(stderr.contains("not read past them"), "{stderr}");
}

#[test]
fn a_workload_value_out_of_range_is_refused_with_its_line() {
    let dir = TempDir::new("simulate-workload-range");
    let head =
        "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1}}\n";
    for (line, message) in [
        (
            "{\"request\": {\"at_ms\": 0, \"model\": \"a\", \"service_ms\": 1, \"cache_rank\": -1}}",
            "line 3: cache_rank -1 is out of range (0 to 1)",
        ),
        (
            "{\"request\": {\"at_ms\": 18446744073709551615, \"model\": \"a\", \"service_ms\": 1}}",
            "line 3: at_ms 18446744073709551615 is out of range",
        ),
        (
            "{\"agent\": {\"model\": \"a\", \"steps\": [{\"service_ms\": 99999999999999}]}}",
            "line 3: steps[0].service_ms 99999999999999 is out of range",
        ),
    ] {
        let path = dir.write("w.jsonl", &format!("{head}{line}\n"));
        let file = path.to_str().unwrap();
        refused(
            &["--workload", file],
            &[&format!("workload {file}: "), message],
        );
    }
}

#[test]
fn a_workload_file_that_never_ends_is_read_up_to_256_mib() {
    refused(
        &["--workload", "/dev/zero"],
        &["workload /dev/zero: more than 268435456 bytes: not read past them"],
    );
}

#[test]
fn every_param_is_checked_and_named() {
    for (args, message) in [
        (
            ["--workload", "bursty", "--param", "burst_min=9"].as_slice(),
            "--param burst_min=9 is more than burst_max=8 (its default)",
        ),
        (
            &["--param", "gen_min_ms=5000", "--param", "gen_max_ms=1000"],
            "--param gen_min_ms=5000 is more than gen_max_ms=1000",
        ),
        (
            &["--param", "models=0"],
            "--param models=0: out of range (1 to 26)",
        ),
        (
            &["--param", "steps=-1"],
            "--param steps: \"-1\" is not a whole number",
        ),
        (
            &["--param", "agents=1000000", "--param", "steps=2"],
            "agents x steps make 2000000 requests, more than 1000000",
        ),
        (
            &["--param", "seed=1", "--param", "seed=2"],
            "--param seed: given twice",
        ),
        (
            &["--records", "/dev/null", "--param", "agents=2"],
            "--param is for the built-in workloads, not --records",
        ),
    ] {
        refused(args, &[message]);
    }
}

fn has_class(node: &roxmltree::Node, name: &str) -> bool {
    node.attribute("class")
        .is_some_and(|c| c.split(' ').any(|part| part == name))
}

#[test]
fn the_drawing_marks_every_switch_and_unload_and_keeps_every_model_in_the_ideal_panel() {
    // Idle unloads (idle_ms 20 s between bursts) and abandoned loads
    // (clients leave after two minutes) beside grace and the hold bound.
    let dir = TempDir::new("simulate-svg-reasons");
    let svg = dir.join("bursty.svg");
    let doc = ok_json(&[
        "--workload",
        "bursty",
        "--set",
        "idle_ms=20000",
        "--param",
        "patience_ms=120000",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let drawing = std::fs::read_to_string(&svg).unwrap();
    let tree = roxmltree::Document::parse(&drawing).expect("valid XML");
    assert!(
        tree.descendants().any(|n| has_class(&n, "legend")),
        "a legend"
    );
    let policies = doc["policies"].as_object().unwrap();
    let router = policies["router"]["switches"].as_object().unwrap();
    for reason in ["idle", "abandoned", "grace_expired"] {
        assert!(router.contains_key(reason), "{router:?}");
    }
    for (name, policy) in policies {
        let panel = tree
            .descendants()
            .find(|n| has_class(n, "run") && n.attribute("data-run") == Some(name.as_str()))
            .unwrap_or_else(|| panic!("a panel for {name}"));
        // One mark per switch, with its reason; one unload per idle unload.
        let mut marked: std::collections::BTreeMap<String, u64> = Default::default();
        for mark in panel
            .descendants()
            .filter(|n| has_class(n, "switch") || has_class(n, "unload"))
        {
            let reason = mark.attribute("data-reason").expect("a reason");
            assert_eq!(has_class(&mark, "unload"), reason == "idle", "{name}");
            *marked.entry(reason.to_owned()).or_default() += 1;
        }
        let counted: std::collections::BTreeMap<String, u64> = policy["switches"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(reason, n)| (reason.clone(), n.as_u64().unwrap()))
            .collect();
        assert_eq!(marked, counted, "{name}");
        // Every model resident once it is loaded under the ideal bound; the
        // others one at a time, each residency after its load.
        let residents: Vec<(f64, f64)> = panel
            .descendants()
            .filter(|n| has_class(n, "resident"))
            .map(|n| {
                let number = |a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
                (number("x"), number("y"))
            })
            .collect();
        let verified = |n: &roxmltree::Node| {
            has_class(n, "load") && !has_class(n, "abandoned") && !has_class(n, "failed")
        };
        let loads = panel.descendants().filter(verified).count();
        if name == "ideal" {
            let rows: std::collections::BTreeSet<u64> =
                residents.iter().map(|(_, y)| *y as u64).collect();
            assert_eq!(residents.len(), 4, "one per model: {residents:?}");
            assert_eq!(rows.len(), 4, "a row each: {residents:?}");
        } else {
            assert_eq!(residents.len(), loads, "{name}");
            let rows: std::collections::BTreeSet<u64> =
                residents.iter().map(|(_, y)| *y as u64).collect();
            assert_eq!(rows.len(), 1, "{name}: one model at a time");
        }
    }
    // Grace is where the router idles before a switch; fifo never does.
    let grace = |name: &str| {
        let panel = tree
            .descendants()
            .find(|n| has_class(n, "run") && n.attribute("data-run") == Some(name))
            .unwrap();
        panel
            .descendants()
            .filter(|n| has_class(n, "grace"))
            .count()
    };
    assert!(grace("router") > 0);
    assert_eq!(grace("fifo"), 0);
}

/// Each block of `table` (split at blank lines) after the heading: from the
/// line starting with "policy" on, every line as long as the others and
/// its columns (split at two spaces or more) ending where the header's do.
fn misaligned(table: &str) -> Vec<String> {
    let ends = |line: &str| -> Vec<usize> {
        let mut ends = Vec::new();
        let chars: Vec<char> = line.chars().collect();
        for i in 0..chars.len() {
            let last = i + 1 == chars.len() || chars[i + 1..].starts_with(&[' ', ' ']);
            if chars[i] != ' ' && last {
                ends.push(i);
            }
        }
        ends
    };
    let mut problems = Vec::new();
    for block in table.split("\n\n").skip(1) {
        let lines: Vec<&str> = block.lines().filter(|l| !l.is_empty()).collect();
        if lines.is_empty() {
            continue;
        }
        let Some(header) = lines.iter().position(|l| l.starts_with("policy ")) else {
            problems.push(format!("no policy header:\n{block}"));
            continue;
        };
        let columns = ends(lines[header]);
        for line in &lines[header + 1..] {
            let row = ends(line);
            let same = line.chars().count() == lines[header].chars().count()
                && row.len() == columns.len()
                && row[1..] == columns[1..];
            if !same {
                problems.push(format!("{}\n{line}", lines[header]));
            }
        }
    }
    problems
}

#[test]
fn the_tables_columns_line_up_under_their_headers() {
    // Long model names (the example config's), long run labels (a sweep),
    // the tier and reason blocks.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.json");
    let output = simulate(&[
        "--config",
        example.to_str().unwrap(),
        "--workload",
        "interactive-batch",
        "--sweep",
        "model_grace_ms=0,3000",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    for title in [
        "wait by model, p50/p95/max s",
        "wait by tier, p50/p95/max s",
        "switches by reason",
    ] {
        assert!(table.contains(&format!("\n{title}\npolicy ")), "{table}");
    }
    assert_eq!(misaligned(&table), Vec::<String>::new(), "{table}");
    // The check finds a shifted row.
    let shifted = table.replacen("\nfifo ", "\nfifo  ", 1);
    assert!(!misaligned(&shifted).is_empty());
}

#[test]
fn warm_loads_shorten_the_routers_loads_and_leave_the_baselines_cold() {
    let dir = TempDir::new("simulate-warm");
    let file = dir.join("warm.jsonl");
    let cold = ok_json(&["--policies", "fifo,router"]);
    let warm_args = ["--param", "warm_load_ms=10000", "--policies", "fifo,router"];
    let mut written = warm_args.to_vec();
    written.extend(["--write-workload", file.to_str().unwrap()]);
    let warm = ok_json(&written);
    let figure =
        |doc: &Value, policy: &str, key: &str| doc["policies"][policy][key].as_f64().unwrap();
    // FIFO loads cold either way: the same figures.
    assert_eq!(warm["policies"]["fifo"], cold["policies"]["fifo"]);
    // The router's loads read ahead: less load time, each load between the
    // warm and the cold time.
    let (loads, swaps) = (
        figure(&warm, "router", "load_s"),
        figure(&warm, "router", "swaps"),
    );
    assert!(loads < figure(&cold, "router", "load_s"), "{loads}");
    assert!(
        loads >= 10.0 * swaps && loads < 20.0 * swaps,
        "{loads} s for {swaps}"
    );
    assert!(
        warm["workload"]["description"]
            .as_str()
            .unwrap()
            .contains("loads 20 s cold and 10 s warm"),
        "{}",
        warm["workload"]
    );
    // The file keeps the warm times.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\"warm_load_ms\":10000"), "{text}");
    let from_file = ok_json(&[
        "--workload",
        file.to_str().unwrap(),
        "--policies",
        "fifo,router",
    ]);
    assert_eq!(from_file["policies"], warm["policies"]);
    // Without the prefetch, the router loads cold too: `prefetch: false`
    // or a read rate of 0.
    for off in [["--set", "prefetch=false"], ["--prefetch-read-mb-s", "0"]] {
        let mut args = warm_args.to_vec();
        args.extend(off);
        assert_eq!(ok_json(&args)["policies"], cold["policies"], "{off:?}");
    }
    // A slower read warms less of each load (at the default rate the
    // example's waits read most models whole).
    let mut slow = warm_args.to_vec();
    slow.extend(["--prefetch-read-mb-s", "50"]);
    let slow = ok_json(&slow);
    let per_swap = |doc: &Value| figure(doc, "router", "load_s") / figure(doc, "router", "swaps");
    assert!(
        per_swap(&slow) > per_swap(&warm),
        "{} {}",
        per_swap(&slow),
        per_swap(&warm)
    );
    // Bad values are refused, naming them.
    refused(
        &["--param", "warm_load_ms=30000"],
        &["--param warm_load_ms=30000 is more than load_ms=20000 (its default)"],
    );
    refused(
        &["--prefetch-read-mb-s", "1000001"],
        &["--prefetch-read-mb-s 1000001: out of range (0 to 1000000)"],
    );
    let bad = dir.write(
        "bad.jsonl",
        "{\"strata_workload\": {\"version\": 1}}\n{\"model\": {\"id\": \"a\", \"load_ms\": 1000, \"warm_load_ms\": 2000}}\n",
    );
    refused(
        &["--workload", bad.to_str().unwrap()],
        &["line 2: warm_load_ms 2000 is more than load_ms 1000"],
    );
}

#[test]
fn prefetch_predict_is_simulated_and_its_forecasts_counted() {
    let args = [
        "--workload",
        "interactive-batch",
        "--param",
        "warm_load_ms=10000",
        "--policies",
        "fifo,router",
    ];
    let plain = ok_json(&args);
    let mut predicting = args.to_vec();
    predicting.extend(["--set", "prefetch_predict=true"]);
    let predicted = ok_json(&predicting);
    // Only a router run with the key has the figures.
    assert!(plain["policies"]["router"].get("forecast").is_none());
    assert!(predicted["policies"]["fifo"].get("forecast").is_none());
    let forecast = &predicted["policies"]["router"]["forecast"];
    let (loads, hits) = (
        forecast["loads"].as_u64().unwrap(),
        forecast["hits"].as_u64().unwrap(),
    );
    assert!(loads > 0 && hits > 0 && hits <= loads, "{forecast}");
    // Reading the forecast's model ahead shortens loads, never lengthens
    // them, and FIFO is untouched.
    let load_s = |doc: &Value| doc["policies"]["router"]["load_s"].as_f64().unwrap();
    assert!(load_s(&predicted) < load_s(&plain));
    assert_eq!(predicted["policies"]["fifo"], plain["policies"]["fifo"]);
    let table = text(&simulate(&predicting).stdout);
    assert!(table.contains("forecast (prefetch_predict)"), "{table}");
}
