//! The timeline drawing: one panel per run, stacked on a shared time axis
//! so policies compare at a glance.
//!
//! A panel has a backend band (which model was loaded when; loads shaded,
//! each swap marked by a line) and one lane per model, where every request
//! is one bar (`<g class="request">`) split into its stages: queued (grey),
//! waiting for a load (orange) and generating (the model's colour). A
//! request that did not complete has a red outline; hovering any bar shows
//! its figures.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::record::Reason;
use strata_scheduler::sim::{LoadOutcome, RequestSpan, Workload};
use svg::Document;
use svg::node::element::{Group, Line, Rectangle, Text, Title};

use super::Run;

const LEFT: f64 = 170.0;
const WIDTH: f64 = 1400.0;
const ROW: f64 = 5.0;
const BAND: f64 = 14.0;
const PALETTE: [&str; 8] = [
    "#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759", "#bab0ac",
];

/// Rows for a lane: each request takes the first row free at its arrival.
fn pack(requests: &[&RequestSpan]) -> Vec<usize> {
    let mut ends: Vec<Duration> = Vec::new();
    requests
        .iter()
        .map(|r| match ends.iter().position(|end| *end <= r.arrival) {
            Some(row) => {
                ends[row] = r.end;
                row
            }
            None => {
                ends.push(r.end);
                ends.len() - 1
            }
        })
        .collect()
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

pub fn draw(workload: &Workload, runs: &[Run]) -> String {
    let end = runs
        .iter()
        .map(|run| run.timeline.span().1)
        .max()
        .unwrap_or_default()
        .max(Duration::from_secs(1));
    let x = |t: Duration| LEFT + t.as_secs_f64() / end.as_secs_f64() * WIDTH;
    let models: Vec<&String> = workload.models.keys().collect();
    let colour = |model: &str| {
        let index = models.iter().position(|m| *m == model).unwrap_or(0);
        PALETTE[index % PALETTE.len()]
    };
    let mut document = Document::new()
        .set("font-family", "sans-serif")
        .set("font-size", 11);
    let mut y = 10.0;
    document = document.add(
        Text::new(format!(
            "{}: {} ({} requests)",
            workload.name,
            workload.description,
            workload.request_count()
        ))
        .set("x", 10)
        .set("y", y + 12.0)
        .set("font-size", 14),
    );
    y += 30.0;
    for run in runs {
        let mut panel = Group::new()
            .set("class", "run")
            .set("data-run", run.label.clone());
        let m = &run.metrics;
        panel = panel.add(
            Text::new(format!(
                "{}: {} swaps, load {:.0}s ({:.0}s wasted), busy {:.0}%, worst wait {:.1}s",
                run.label,
                m.swaps,
                m.load_s,
                m.wasted_load_s,
                m.busy_fraction * 100.0,
                m.worst_model_wait_ms() as f64 / 1000.0
            ))
            .set("x", 10)
            .set("y", y + 11.0)
            .set("font-weight", "bold"),
        );
        y += 18.0;
        // The backend band: loads shaded, then the model serving until the
        // next load or the end.
        panel = panel.add(Text::new("backend").set("x", 10).set("y", y + BAND - 3.0));
        let loads = &run.timeline.loads;
        for (index, load) in loads.iter().enumerate() {
            let (kind, opacity) = match load.outcome {
                LoadOutcome::Verified { wasted: false } => ("load", 0.45),
                LoadOutcome::Verified { wasted: true } => ("load wasted", 0.25),
                LoadOutcome::Failed => ("load failed", 0.25),
                LoadOutcome::Abandoned => ("load abandoned", 0.25),
            };
            let shade = Rectangle::new()
                .set("class", kind)
                .set("x", x(load.start))
                .set("y", y)
                .set("width", (x(load.end) - x(load.start)).max(0.5))
                .set("height", BAND)
                .set("fill", colour(&load.model))
                .set("fill-opacity", opacity)
                .add(Title::new(format!(
                    "{} loading {}-{} ({kind})",
                    load.model,
                    seconds(load.start),
                    seconds(load.end)
                )));
            panel = panel.add(shade);
            if matches!(load.outcome, LoadOutcome::Verified { .. }) {
                let until = loads.get(index + 1).map_or(end, |next| next.start);
                if until > load.end {
                    panel = panel.add(
                        Rectangle::new()
                            .set("class", "serving")
                            .set("x", x(load.end))
                            .set("y", y)
                            .set("width", x(until) - x(load.end))
                            .set("height", BAND)
                            .set("fill", colour(&load.model))
                            .add(Title::new(format!("{} loaded", load.model))),
                    );
                }
            }
            panel = panel.add(
                Line::new()
                    .set("class", "swap")
                    .set("x1", x(load.start))
                    .set("x2", x(load.start))
                    .set("y1", y - 2.0)
                    .set("y2", y + BAND + 2.0)
                    .set("stroke", "#000")
                    .set("stroke-width", 1),
            );
        }
        y += BAND + 6.0;
        // One lane per model.
        let mut lanes: BTreeMap<&str, Vec<&RequestSpan>> = BTreeMap::new();
        for model in &models {
            lanes.insert(model.as_str(), Vec::new());
        }
        for request in &run.timeline.requests {
            lanes
                .entry(request.model.as_str())
                .or_default()
                .push(request);
        }
        for (model, requests) in lanes {
            let rows = pack(&requests);
            let height = (rows.iter().max().map_or(1, |r| r + 1) as f64) * ROW;
            panel = panel.add(Text::new(model.to_owned()).set("x", 10).set("y", y + 10.0));
            for (request, row) in requests.iter().zip(rows) {
                panel = panel.add(bar(request, y + row as f64 * ROW, &x, colour(model)));
            }
            y += height.max(12.0) + 6.0;
        }
        document = document.add(panel);
        y += 14.0;
    }
    // The time axis.
    let step = axis_step(end);
    let mut t = Duration::ZERO;
    while t <= end {
        document = document
            .add(
                Line::new()
                    .set("x1", x(t))
                    .set("x2", x(t))
                    .set("y1", 40)
                    .set("y2", y)
                    .set("stroke", "#ddd")
                    .set("stroke-width", 0.5),
            )
            .add(
                Text::new(format!("{}s", t.as_secs()))
                    .set("x", x(t))
                    .set("y", y + 12.0)
                    .set("text-anchor", "middle"),
            );
        t += step;
    }
    let height = y + 24.0;
    document
        .set("width", LEFT + WIDTH + 20.0)
        .set("height", height)
        .set("viewBox", (0.0, 0.0, LEFT + WIDTH + 20.0, height))
        .to_string()
}

/// A round tick interval giving about ten ticks.
fn axis_step(end: Duration) -> Duration {
    let raw = end.as_secs_f64() / 10.0;
    let steps = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
    ];
    let chosen = steps.into_iter().find(|s| *s >= raw).unwrap_or(7200.0);
    Duration::from_secs_f64(chosen)
}

fn bar(request: &RequestSpan, y: f64, x: &dyn Fn(Duration) -> f64, colour: &str) -> Group {
    let granted = request.granted;
    let queued_until = request.admitted.or(granted).unwrap_or(request.end);
    let mut group = Group::new().set("class", "request").add(Title::new(format!(
        "{} {}: arrived {}, {}, ended {} ({})",
        request.model,
        request.tier.as_str(),
        seconds(request.arrival),
        match request.wait() {
            Some(wait) => format!("waited {}", seconds(wait)),
            None => "never started".into(),
        },
        seconds(request.end),
        request.outcome.as_str()
    )));
    let stage = |class: &str, from: Duration, to: Duration, fill: &str| {
        Rectangle::new()
            .set("class", class.to_owned())
            .set("x", x(from))
            .set("y", y)
            .set("width", (x(to) - x(from)).max(0.3))
            .set("height", ROW - 1.0)
            .set("fill", fill.to_owned())
    };
    group = group.add(stage("queued", request.arrival, queued_until, "#c8c8c8"));
    if let (Some(admitted), Some(granted)) = (request.admitted, granted) {
        group = group.add(stage("loading", admitted, granted, "#f28e2b"));
    }
    if let Some(granted) = granted {
        let mut generating = stage("generating", granted, request.end, colour);
        if request.outcome != Reason::Completed {
            generating = generating.set("stroke", "#d00").set("stroke-width", 0.8);
        }
        group = group.add(generating);
    } else if request.outcome != Reason::Completed {
        group = group.add(
            stage("failed", request.end, request.end, "#d00")
                .set("stroke", "#d00")
                .set("stroke-width", 0.8),
        );
    }
    group
}
