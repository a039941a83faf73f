//! The figures as a table for people: one row per run, then the waits by
//! model and by tier.

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
    let mut groups =
        |title: &str, keys: BTreeSet<&str>, get: &dyn Fn(&Run, &str) -> Option<Percentiles>| {
            if keys.is_empty() {
                return;
            }
            let _ = writeln!(text);
            let _ = write!(text, "{:width$}", format!("{title} p50/p95/max s"));
            for key in &keys {
                let _ = write!(text, "  {key:>20}");
            }
            let _ = writeln!(text);
            for run in runs {
                let _ = write!(text, "{:width$}", run.label);
                for key in &keys {
                    let _ = write!(text, "  {:>20}", waits(get(run, key).as_ref()));
                }
                let _ = writeln!(text);
            }
        };
    let models: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.wait_ms.by_model.keys().map(String::as_str))
        .collect();
    groups("wait by model", models, &|run, key| {
        run.metrics.wait_ms.by_model.get(key).copied()
    });
    let tiers: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.wait_ms.by_tier.keys().map(String::as_str))
        .collect();
    if tiers.len() > 1 {
        groups("wait by tier", tiers, &|run, key| {
            run.metrics.wait_ms.by_tier.get(key).copied()
        });
    }
    let reasons: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.switches.keys().map(String::as_str))
        .collect();
    counts(
        &mut text,
        width,
        runs,
        "switches by reason",
        &reasons,
        &|run, key| run.metrics.switches.get(key).copied(),
    );
    let failures: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.metrics.failed.keys().map(String::as_str))
        .collect();
    counts(
        &mut text,
        width,
        runs,
        "failed by reason",
        &failures,
        &|run, key| run.metrics.failed.get(key).copied(),
    );
    text
}

/// A block of counts: one column per key, one row per run (nothing when no
/// run has any).
fn counts(
    text: &mut String,
    width: usize,
    runs: &[Run],
    title: &str,
    keys: &BTreeSet<&str>,
    get: &dyn Fn(&Run, &str) -> Option<u64>,
) {
    if keys.is_empty() {
        return;
    }
    let _ = writeln!(text);
    let _ = write!(text, "{title:width$}");
    for key in keys {
        let _ = write!(text, "  {key:>18}");
    }
    let _ = writeln!(text);
    for run in runs {
        let _ = write!(text, "{:width$}", run.label);
        for key in keys {
            let _ = write!(text, "  {:>18}", get(run, key).unwrap_or(0));
        }
        let _ = writeln!(text);
    }
}
