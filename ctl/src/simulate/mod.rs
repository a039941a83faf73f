//! `strata-ctl simulate`: run a workload under the router's own scheduling
//! decision and the baselines, on a virtual clock, and print one set of
//! figures for each (a table, or `--json`), optionally a timeline drawing
//! (`--svg`).
//!
//! The rules come from `--config` (the file the daemons read, validated the
//! same way; profiles are not read, nothing is started), or without it from
//! the example config `config.example.json` built into this binary; `--set
//! KEY=VALUE` changes one top-level key for this run and `--sweep
//! KEY=V1,V2,...` runs the router once per value. The workload is a
//! built-in generator (`--workload agents`, its parameters with `--param
//! KEY=VALUE`), a workload file (`--workload FILE`), or the router's own
//! records (`--records FILE ...`). The router's runs read the next
//! model's weights ahead at `--prefetch-read-mb-s` (with `prefetch` on in
//! the config), which shortens the loads of models with a warm load time.
//!
//! Exit status 0; 2 for bad arguments; 1 for a config, workload or file
//! that cannot be used (the message names the path, key or line).

mod svg;
mod table;

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use strata_protocol::config::Config;
use strata_sim::records::MAX_LOG_BYTES;
use strata_sim::{
    DEFAULT_READ_MB_PER_S, MB, Metrics, Params, Policy, Reader, Settings, Timeline, Workload,
    generate, simulate,
};

/// The built-in default rules: the example config's.
const EXAMPLE_CONFIG: &str = include_str!("../../../config.example.json");

/// The fastest `--prefetch-read-mb-s`: a terabyte a second, to catch unit
/// mistakes.
pub const MAX_READ_MB_PER_S: u64 = 1_000_000;

/// The most bytes read from a workload file: 256 MiB (a million requests
/// take about 120 MB).
pub const MAX_WORKLOAD_BYTES: u64 = 256 << 20;

#[derive(clap::Args)]
pub struct Args {
    /// The router config whose rules to simulate (default: the example
    /// config's)
    #[arg(long, value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    /// Change one top-level config key for this run (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A built-in workload (agents, interactive-batch, bursty) or a
    /// workload file
    #[arg(long, value_name = "NAME|FILE", default_value = "agents")]
    pub workload: String,
    /// A parameter of the built-in workload (repeatable)
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Replay these request logs (JSONL, the rotated files too) instead of
    /// a workload
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub records: Vec<PathBuf>,
    /// The policies to run, comma-separated
    #[arg(long, default_value = "fifo,collate,router,ideal")]
    pub policies: String,
    /// How fast the router's weights prefetch reads, in MB/s (0: it does
    /// not read ahead; as `--set prefetch=false`)
    #[arg(long, value_name = "MB_PER_S", default_value_t = DEFAULT_READ_MB_PER_S)]
    pub prefetch_read_mb_s: u64,
    /// Run the router once per value of a numeric config key
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Option<String>,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Draw the timelines of every run (and of the records) into this file
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Write the workload as a workload file (to edit or replay later)
    #[arg(long, value_name = "FILE")]
    pub write_workload: Option<PathBuf>,
}

/// A failure that ends the command with status 1.
struct Failed(String);

pub fn run(args: Args) -> ExitCode {
    match simulate_all(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed(message)) => {
            say!("{} simulate: {message}", crate::program());
            ExitCode::from(1)
        }
    }
}

/// One run: its label (a policy, or the router at one sweep value) and what
/// happened.
pub struct Run {
    pub label: String,
    /// The policy simulated; `None` for the records' `observed` run.
    pub policy: Option<Policy>,
    pub timeline: Timeline,
    pub metrics: Metrics,
}

/// What `--records` read.
struct RecordsSource {
    files: Vec<String>,
    records: usize,
    unparsed: usize,
    skipped: usize,
}

fn simulate_all(args: &Args) -> Result<(), Failed> {
    let (base_json, config) = load_config(args)?;
    let policies = parse_policies(&args.policies)?;
    let (workload, observed, source) = load_workload(args, &config)?;
    if let Some(path) = &args.write_workload {
        std::fs::write(path, workload.to_file())
            .map_err(|err| Failed(format!("cannot write {}: {err}", path.display())))?;
    }
    if args.prefetch_read_mb_s > MAX_READ_MB_PER_S {
        return Err(Failed(format!(
            "--prefetch-read-mb-s {}: out of range (0 to {MAX_READ_MB_PER_S})",
            args.prefetch_read_mb_s
        )));
    }
    let settings = settings_of(&config, args);
    let drawn = args.svg.is_some();
    let mut runs = Vec::new();
    if let Some(observed) = observed {
        runs.push(finish("observed".into(), None, observed, drawn));
    }
    let sweep = args.sweep.as_deref().map(parse_sweep).transpose()?;
    for policy in policies {
        match &sweep {
            Some((key, values)) if policy == Policy::Router => {
                for value in values {
                    let mut json = base_json.clone();
                    json[key.as_str()] = json!(value);
                    let config = parse_config(&json, &format!("--sweep {key}={value}"))?;
                    let settings = settings_of(&config, args);
                    let timeline = simulate(&workload, &settings, policy);
                    runs.push(finish(
                        format!("router {key}={value}"),
                        Some(policy),
                        timeline,
                        drawn,
                    ));
                }
            }
            _ => {
                let timeline = simulate(&workload, &settings, policy);
                runs.push(finish(policy.name().into(), Some(policy), timeline, drawn));
            }
        }
    }
    if let Some(path) = &args.svg {
        let drawing = svg::draw(&workload, &runs);
        std::fs::write(path, drawing)
            .map_err(|err| Failed(format!("cannot write {}: {err}", path.display())))?;
    }
    if args.json {
        out!("{}", document(&workload, source.as_ref(), &runs));
    } else {
        let extra = source.as_ref().map(|source| {
            format!(
                "records: {} replayed from {} (open loop), {} lines unparsed, {} skipped (no resolved model, or seen twice)",
                source.records,
                source.files.join(", "),
                source.unparsed,
                source.skipped
            )
        });
        out!(
            "{}",
            table::render(&workload, extra.as_deref(), &settings, &runs)
        );
    }
    Ok(())
}

/// The simulation's settings under `config`, with the prefetch's read rate.
fn settings_of(config: &Config, args: &Args) -> Settings {
    let mut settings = Settings::from_config(config);
    settings.read_ahead = settings
        .read_ahead
        .filter(|_| args.prefetch_read_mb_s > 0)
        .map(|mut read_ahead| {
            read_ahead.bytes_per_s = args.prefetch_read_mb_s * MB;
            read_ahead
        });
    settings
}

/// A run's figures, and its timeline when it is drawn (a replay of a
/// million records keeps a few hundred megabytes less without).
fn finish(label: String, policy: Option<Policy>, timeline: Timeline, drawn: bool) -> Run {
    let metrics = Metrics::of(&timeline);
    Run {
        label,
        policy,
        timeline: if drawn { timeline } else { Timeline::default() },
        metrics,
    }
}

fn parse_policies(list: &str) -> Result<Vec<Policy>, Failed> {
    let mut policies = Vec::new();
    for name in list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        let policy = Policy::parse(name).ok_or_else(|| {
            Failed(format!(
                "--policies: no policy {name:?} (fifo, collate, router, ideal)"
            ))
        })?;
        if !policies.contains(&policy) {
            policies.push(policy);
        }
    }
    if policies.is_empty() {
        return Err(Failed("--policies: name at least one policy".into()));
    }
    Ok(policies)
}

fn parse_sweep(text: &str) -> Result<(String, Vec<u64>), Failed> {
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| Failed(format!("--sweep {text:?}: expected KEY=V1,V2,...")))?;
    let values = values
        .split(',')
        .map(|value| {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| Failed(format!("--sweep {key}: {value:?} is not a whole number")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((key.to_owned(), values))
}

/// The config as JSON (with `--set` applied) and validated.
fn load_config(args: &Args) -> Result<(Value, Config), Failed> {
    let (text, name) = match &args.config {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|err| Failed(format!("cannot read {}: {err}", path.display())))?,
            path.display().to_string(),
        ),
        None => (EXAMPLE_CONFIG.to_owned(), "the example config".to_owned()),
    };
    let mut json: Value = serde_json::from_str(&text)
        .map_err(|err| Failed(format!("config error: {name}: invalid json: {err}")))?;
    for pair in &args.set {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| Failed(format!("--set {pair:?}: expected KEY=VALUE")))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| json!(value));
        json[key] = value;
    }
    let config = parse_config(&json, &name)?;
    Ok((json, config))
}

fn parse_config(json: &Value, name: &str) -> Result<Config, Failed> {
    Config::from_json_str(&json.to_string())
        .map_err(|err| Failed(format!("config error: {name}: {err}")))
}

type Loaded = (Workload, Option<Timeline>, Option<RecordsSource>);

fn load_workload(args: &Args, config: &Config) -> Result<Loaded, Failed> {
    if !args.records.is_empty() {
        if !args.params.is_empty() {
            return Err(Failed(
                "--param is for the built-in workloads, not --records".into(),
            ));
        }
        let mut reader = Reader::new();
        for path in &args.records {
            let file = std::fs::File::open(path)
                .map_err(|err| Failed(format!("cannot read {}: {err}", path.display())))?;
            reader
                .read(BufReader::with_capacity(1 << 16, file), MAX_LOG_BYTES)
                .map_err(|err| Failed(format!("records {}: {err}", path.display())))?;
        }
        let replayed = reader.finish();
        let source = RecordsSource {
            files: args
                .records
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            records: replayed.records,
            unparsed: replayed.unparsed,
            skipped: replayed.skipped,
        };
        return Ok((replayed.workload, Some(replayed.observed), Some(source)));
    }
    if strata_sim::BUILT_IN.contains(&args.workload.as_str()) {
        let params = Params::parse(&args.params).map_err(Failed)?;
        // A given config's models, when it names any; otherwise neutral
        // names (the example config's would only be long).
        let models: Vec<String> = if args.config.is_some() {
            config.registry.enabled_ids().to_vec()
        } else {
            Vec::new()
        };
        let workload = generate(&args.workload, &params, &models).map_err(Failed)?;
        return Ok((workload, None, None));
    }
    if !args.params.is_empty() {
        return Err(Failed(
            "--param is for the built-in workloads, not a workload file".into(),
        ));
    }
    let path = &args.workload;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_WORKLOAD_BYTES + 1).read_to_string(&mut text))
        .map_err(|err| {
            Failed(format!(
                "--workload {path}: not a built-in workload ({}) and cannot be read: {err}",
                strata_sim::BUILT_IN.join(", ")
            ))
        })?;
    if text.len() as u64 > MAX_WORKLOAD_BYTES {
        return Err(Failed(format!(
            "workload {path}: more than {MAX_WORKLOAD_BYTES} bytes: not read past them"
        )));
    }
    let workload =
        Workload::parse(&text).map_err(|err| Failed(format!("workload {path}: {err}")))?;
    Ok((workload, None, None))
}

/// The `--json` document.
fn document(workload: &Workload, source: Option<&RecordsSource>, runs: &[Run]) -> Value {
    let mut info = json!({
        "name": workload.name,
        "description": workload.description,
        "requests": workload.request_count(),
        "models": workload.models.keys().collect::<Vec<_>>(),
    });
    if let Some(source) = source {
        info["records"] = json!({
            "files": source.files,
            "replayed": source.records,
            "unparsed_lines": source.unparsed,
            "skipped": source.skipped,
        });
    }
    let policies: BTreeMap<&str, &Metrics> = runs
        .iter()
        .map(|run| (run.label.as_str(), &run.metrics))
        .collect();
    json!({ "workload": info, "policies": policies })
}
