//! The operations files under `contrib/` (docs/monitoring.md): the Prometheus alert rules pass
//! `promtool check rules` and their own unit tests (`promtool test rules`), and every metric
//! family and label that the rules and the Grafana dashboard query exists in a real scrape of
//! a proxy that served, failed and queued requests, so a renamed metric breaks this test
//! rather than an operator's dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use strata_e2e::http::{self, chat_body};
use strata_e2e::stack::Stack;
use strata_e2e::weights::WeightsFile;
use strata_e2e::{A3B, ConfigBuilder, DEADLINE, ModelSpec, poll_until};

const A: &str = "flash-a";
const B: &str = "a3b-b";
const RULES: &str = "contrib/prometheus/strata-router.rules.yml";
const RULE_TESTS: &str = "contrib/prometheus/strata-router.rules.test.yml";
const DASHBOARD: &str = "contrib/grafana/strata-router.json";

/// Labels Prometheus attaches to every series of a target (not in the scrape itself).
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Families whose samples need conditions this shared test binary cannot make reliably:
/// the prefetch reads at the idle I/O class, which any other test's disk reads starve
/// (`tests/tests/prefetch.rs` runs alone for that reason). Their `# TYPE` line must still be
/// in the scrape, and only these labels may be queried on them (docs/http-api.md's table).
const SAMPLED_ELSEWHERE: [(&str, &[&str]); 2] = [
    ("strata_router_prefetch_bytes_total", &["model"]),
    ("strata_router_prefetch_seconds_total", &["model"]),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs `promtool ARGS` in `contrib/prometheus`; None (with the reason said) when promtool is
/// not installed, unless `STRATA_REQUIRE_PROMTOOL=1` (as `.ci/run` sets it).
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    let run = std::process::Command::new("promtool")
        .args(args)
        .current_dir(repo_root().join("contrib/prometheus"))
        .output();
    match run {
        Ok(output) => Some(output),
        Err(err) if std::env::var("STRATA_REQUIRE_PROMTOOL").as_deref() != Ok("1") => {
            eprintln!(
                "skipping promtool {}: promtool not runnable ({err})",
                args[0]
            );
            None
        }
        Err(err) => panic!("promtool is required (STRATA_REQUIRE_PROMTOOL=1): {err}"),
    }
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let file = |path: &str| {
        Path::new(path)
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a file name")
            .to_owned()
    };
    for args in [
        vec!["check".to_owned(), "rules".to_owned(), file(RULES)],
        vec!["test".to_owned(), "rules".to_owned(), file(RULE_TESTS)],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(output) = promtool(&args) else {
            return;
        };
        assert!(
            output.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Every `expr:` of the rules file. A block scalar (`expr: |`) runs while lines are indented
/// deeper than its key; the file is ours, so this small reader need not know all of YAML.
fn rule_exprs(text: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let rest = rest.trim();
        if rest == "|" || rest == ">" {
            let mut block = String::new();
            while let Some(next) = lines.peek() {
                if !next.trim().is_empty() && next.len() - next.trim_start().len() <= indent {
                    break;
                }
                block.push_str(next.trim());
                block.push('\n');
                lines.next();
            }
            exprs.push(block);
        } else {
            exprs.push(rest.to_owned());
        }
    }
    exprs
}

/// Every target `expr` and query variable's query of the dashboard.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a target's expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            exprs.push(query.to_owned());
        }
    }
    exprs
}

/// What one PromQL expression asks of the scrape: metric names as written, and label names
/// (from `{...}` matchers and `by`/`without` lists) with the metric names of the expression
/// any of which must carry them.
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn uses(expr: &str) -> Uses {
    let mut uses = Uses::default();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '"' {
            // A string literal: skip it (it may hold anything).
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if chars[i] == '{' {
            // Matchers: `name op "value"` separated by commas.
            i += 1;
            loop {
                while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
                    i += 1;
                }
                if i >= chars.len() || chars[i] == '}' {
                    i += 1;
                    break;
                }
                let start = i;
                while i < chars.len() && is_ident(chars[i]) {
                    i += 1;
                }
                uses.labels.insert(chars[start..i].iter().collect());
                while i < chars.len() && chars[i] != '"' {
                    i += 1;
                }
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
        } else if is_ident(chars[i]) && (i == 0 || !is_ident(chars[i - 1])) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if word.starts_with("strata_router_") || word.starts_with("process_") {
                uses.metrics.insert(word);
            } else if word == "by" || word == "without" {
                while i < chars.len() && chars[i].is_whitespace() {
                    i += 1;
                }
                if chars.get(i) == Some(&'(') {
                    let close = chars[i..].iter().position(|&c| c == ')').expect("a ')'") + i;
                    let list: String = chars[i + 1..close].iter().collect();
                    for label in list.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                        uses.labels.insert(label.to_owned());
                    }
                    i = close + 1;
                }
            }
        } else {
            i += 1;
        }
    }
    uses
}

/// A scrape's families (`# TYPE` lines: name and type) and the label names seen on each
/// family's samples (a histogram's `_bucket`, `_sum` and `_count` under its family).
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Scrape {
    fn add(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                let name = parts.next().expect("a family name").to_owned();
                let kind = parts.next().expect("a family type").to_owned();
                self.types.insert(name, kind);
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).expect("a sample line");
            let family = self.family_of(&line[..name_end]).to_owned();
            let names = self.labels.entry(family).or_default();
            if line[name_end..].starts_with('{') {
                let body = &line[name_end + 1..line.rfind('}').expect("a '}'")];
                // `name="value"` pairs; values are model IDs and enums (no quotes inside).
                for pair in body.split("\",") {
                    let name = pair.split('=').next().expect("a label name").trim();
                    if !name.is_empty() {
                        names.insert(name.to_owned());
                    }
                }
            }
        }
    }

    /// The family a sample or query name belongs to: itself, or the histogram it is a
    /// series of.
    fn family_of<'a>(&self, name: &'a str) -> &'a str {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(family) = name.strip_suffix(suffix)
                && self.types.get(family).map(String::as_str) == Some("histogram")
            {
                return family;
            }
        }
        name
    }
}

/// What the rules and the dashboard ask that the scrape lacks, one line each.
fn missing(scrape: &Scrape, source: &str, exprs: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for expr in exprs {
        let uses = uses(expr);
        let families: Vec<&str> = uses.metrics.iter().map(|m| scrape.family_of(m)).collect();
        for (written, family) in uses.metrics.iter().zip(&families) {
            if !scrape.types.contains_key(*family) {
                missing.push(format!(
                    "{source}: metric {written} is not in the scrape ({expr})"
                ));
            }
        }
        for label in &uses.labels {
            if TARGET_LABELS.contains(&label.as_str()) || label == "__name__" {
                continue;
            }
            let carried = uses.metrics.iter().zip(&families).any(|(written, family)| {
                let on_samples = scrape
                    .labels
                    .get(*family)
                    .is_some_and(|names| names.contains(label));
                let bucket = label == "le" && written.ends_with("_bucket");
                let elsewhere = SAMPLED_ELSEWHERE
                    .iter()
                    .any(|(name, labels)| name == family && labels.contains(&label.as_str()));
                on_samples || bucket || elsewhere
            });
            if !carried {
                missing.push(format!(
                    "{source}: label {label} is on no sample of {:?} ({expr})",
                    uses.metrics
                ));
            }
        }
    }
    missing
}

#[test]
fn the_tokenizer_finds_metrics_and_labels() {
    let found = uses(
        "histogram_quantile(0.95, sum by (model, le) (rate(strata_router_ttft_seconds_bucket{instance=~\"$i\", reason!=\"a{b}\"}[5m]))) / on (job) process_open_fds",
    );
    assert_eq!(
        found.metrics,
        BTreeSet::from([
            "strata_router_ttft_seconds_bucket".to_owned(),
            "process_open_fds".to_owned()
        ])
    );
    assert_eq!(
        found.labels,
        BTreeSet::from(["model", "le", "instance", "reason"].map(str::to_owned))
    );
    assert_eq!(
        rule_exprs(
            "  - alert: X\n    expr: |\n      a > 0\n      and b\n    for: 5m\n  - alert: Y\n    expr: c == 1\n"
        ),
        vec!["a > 0\nand b\n".to_owned(), "c == 1".to_owned()]
    );
}

/// A scrape after streamed, plain, failed and queued requests and a load of a model with
/// weights, so every family the files query has its samples.
fn scrapes() -> Scrape {
    let weights = WeightsFile::create(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("contrib-ops"),
        "b",
        1 << 20,
    );
    let config = ConfigBuilder::new("contrib-ops")
        .model(ModelSpec::new(A))
        .model(
            ModelSpec::new(B)
                .family(A3B)
                .entry_key("weights", json!([weights.path])),
        )
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let addr = stack.addr();
    let scrape_text = || http::request(addr, "GET", "/metrics?format=prometheus", &[], b"").text();
    let mut scrape = Scrape::default();

    let mut body = chat_body(A, true);
    body["fake"] = json!({"tokens": 4, "token_delay_ms": 5});
    stack.open_chat(&body).read_to_end(DEADLINE);
    stack.chat(&chat_body(A, false)).expect_status(200);
    stack
        .chat(&chat_body("no-such-model", false))
        .expect_status(404);
    let mut failing = chat_body(A, true);
    failing["fake"] = json!({"mid_stream": "error", "mid_stream_after": 2, "tokens": 4});
    stack.open_chat(&failing).read_to_end(DEADLINE);

    // One request runs on A while another waits for B: the queue gauges by model have samples.
    let mut slow = chat_body(A, true);
    slow["fake"] = json!({"tokens": 30, "token_delay_ms": 50});
    let mut running = stack.open_chat(&slow);
    let waiting = http::send_chat(addr, &chat_body(B, false));
    poll_until(DEADLINE, "a request in flight and one queued", || {
        let m = stack.metrics();
        m.in_flight == Some(1) && m.queue_depth == Some(1)
    });
    scrape.add(&scrape_text());
    running.read_to_end(DEADLINE);
    waiting.response(DEADLINE).expect_status(200);

    // B's load measured its weights' residency; the records of all six requests are counted.
    poll_until(DEADLINE, "B's residency and every request counted", || {
        let text = scrape_text();
        let counted: f64 = text
            .lines()
            .filter(|l| l.starts_with("strata_router_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        text.contains("strata_router_load_resident_ratio{") && counted >= 6.0
    });
    scrape.add(&scrape_text());
    stack.stop();
    scrape
}

#[test]
fn every_metric_and_label_the_rules_and_dashboard_query_is_in_a_real_scrape() {
    let root = repo_root();
    let rules = std::fs::read_to_string(root.join(RULES)).expect("the rules file");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(DASHBOARD)).expect("the dashboard file"),
    )
    .expect("the dashboard is JSON");
    let rule_exprs = rule_exprs(&rules);
    let dashboard_exprs = dashboard_exprs(&dashboard);
    assert!(rule_exprs.len() >= 7, "rules read: {rule_exprs:?}");
    assert!(
        dashboard_exprs.len() >= 20,
        "targets read: {dashboard_exprs:?}"
    );

    let scrape = scrapes();
    for (family, _) in SAMPLED_ELSEWHERE {
        assert!(scrape.types.contains_key(family), "{family} not declared");
    }
    let mut gaps = missing(&scrape, RULES, &rule_exprs);
    gaps.extend(missing(&scrape, DASHBOARD, &dashboard_exprs));
    assert!(
        gaps.is_empty(),
        "queried but not scraped:\n{}\nscraped: {scrape:#?}",
        gaps.join("\n")
    );
}
