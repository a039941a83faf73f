//! The figures as a table for people: one row per run, then blocks of
//! waits by model and by tier and counts of switches and failures by
//! reason, each under its title line with its columns aligned under their
//! keys.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use strata_scheduler::{Mode, Rules};
use strata_sim::{Percentiles, Settings, Workload};

use super::Run;

fn seconds(ms: u64) -> String {
    format!("{:.1}", ms as f64 / 1000.0)
}

fn waits(p: Option<&Percentiles>) -> String {
    match p {
        Some(p) => format!("{}/{}/{}", seconds(p.p50), seconds(p.p95), seconds(p.max)),
        None => "-".into(),
    }
}

fn rules_line(rules: &Rules, settings: &Settings) -> String {
    let mode = match rules.mode {
        Mode::WaitFirst => "wait-first".to_owned(),
        Mode::Legacy => format!(
            "legacy (queue_ms {})",
            settings.queue_timeout.map_or(0, |d| d.as_millis())
        ),
    };
    format!(
        "rules: {mode}, max_pending {}, cache_max_active {}, model_grace_ms {}, idle_ms {}, cooldown_ms {}",
        rules.max_pending,
        rules
            .cache_max_active
            .map_or_else(|| "off".to_owned(), |n| n.to_string()),
        rules.grace.as_millis(),
        rules.idle.as_millis(),
        settings.cooldown.as_millis(),
    )
}

pub fn render(
    workload: &Workload,
    source: Option<&str>,
    settings: &Settings,
    runs: &[Run],
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "workload {}: {} ({} requests)",
        workload.name,
        workload.description,
        workload.request_count()
    );
    if let Some(source) = source {
        let _ = writeln!(text, "{source}");
    }
    let _ = writeln!(text, "{}", rules_line(&settings.rules, settings));
    let _ = writeln!(text);
    let width = runs.iter().map(|r| r.label.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        text,
        "{:width$}  {:>6}  {:>8}  {:>9}  {:>5}  {:>6}  {:>6}  {:>10}  {:>16}",
        "policy",
        "swaps",
        "load_s",
        "wasted_s",
        "busy",
        "done",
        "failed",
        "makespan_s",
        "worst wait s"
    );
    for run in runs {
        let m = &run.metrics;
        let failed: u64 = m.failed.values().sum();
        let _ = writeln!(
            text,
            "{:width$}  {:>6}  {:>8.1}  {:>9.1}  {:>5.2}  {:>6}  {:>6}  {:>10.1}  {:>16}",
            run.label,
            m.swaps,
            m.load_s,
            m.wasted_load_s,
            m.busy_fraction,
            m.completed,
            failed,
            m.makespan_s,
            seconds(m.worst_model_wait_ms()),
        );
    }
    let models: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.wait_ms.by_model.keys().map(String::as_str))
        .collect();
    block(
        &mut text,
        width,
        runs,
        "wait by model, p50/p95/max s",
        &models,
        &|run, key| waits(run.metrics.wait_ms.by_model.get(key)),
    );
    let tiers: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.wait_ms.by_tier.keys().map(String::as_str))
        .collect();
    if tiers.len() > 1 {
        block(
            &mut text,
            width,
            runs,
            "wait by tier, p50/p95/max s",
            &tiers,
            &|run, key| waits(run.metrics.wait_ms.by_tier.get(key)),
        );
    }
    let reasons: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.switches.keys().map(String::as_str))
        .collect();
    block(
        &mut text,
        width,
        runs,
        "switches by reason",
        &reasons,
        &|run, key| {
            run.metrics
                .switches
                .get(key)
                .copied()
                .unwrap_or(0)
                .to_string()
        },
    );
    let failures: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.failed.keys().map(String::as_str))
        .collect();
    block(
        &mut text,
        width,
        runs,
        "failed by reason",
        &failures,
        &|run, key| {
            run.metrics
                .failed
                .get(key)
                .copied()
                .unwrap_or(0)
                .to_string()
        },
    );
    // `prefetch_predict`: of the loads after a forecast, those of the model
    // it named (runs without it show "-").
    let forecast_keys: BTreeSet<&str> = match runs.iter().any(|r| r.metrics.forecast.is_some()) {
        true => ["loads", "hits", "hit_rate"].into(),
        false => BTreeSet::new(),
    };
    block(
        &mut text,
        width,
        runs,
        "forecast (prefetch_predict)",
        &forecast_keys,
        &|run, key| match run.metrics.forecast {
            None => "-".to_owned(),
            Some(f) => match key {
                "loads" => f.loads.to_string(),
                "hits" => f.hits.to_string(),
                _ => format!("{:.2}", f.hit_rate),
            },
        },
    );
    text
}

/// A block of figures under its title: a header row naming the keys, then
/// one row per run, each column right-aligned as wide as its widest cell
/// (nothing when no run has any key).
fn block(
    text: &mut String,
    width: usize,
    runs: &[Run],
    title: &str,
    keys: &BTreeSet<&str>,
    cell: &dyn Fn(&Run, &str) -> String,
) {
    if keys.is_empty() {
        return;
    }
    let columns: Vec<(&str, Vec<String>, usize)> = keys
        .iter()
        .map(|key| {
            let cells: Vec<String> = runs.iter().map(|run| cell(run, key)).collect();
            let widest = cells.iter().map(String::len).fold(key.len(), usize::max);
            (*key, cells, widest)
        })
        .collect();
    let _ = writeln!(text);
    let _ = writeln!(text, "{title}");
    let _ = write!(text, "{:width$}", "policy");
    for (key, _, column) in &columns {
        let _ = write!(text, "  {key:>column$}");
    }
    let _ = writeln!(text);
    for (index, run) in runs.iter().enumerate() {
        let _ = write!(text, "{:width$}", run.label);
        for (_, cells, column) in &columns {
            let _ = write!(text, "  {:>column$}", cells[index]);
        }
        let _ = writeln!(text);
    }
}
