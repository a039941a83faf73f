//! The timeline drawing: one panel per run, stacked on a shared time axis
//! so policies compare at a glance, under a legend.
//!
//! A panel has a backend band and one lane per model:
//! - the band (`band.rs`, derived by `residency.rs`, whose doc states the
//!   rules): each load shaded in its model's colour (`load`) with a line
//!   at its start (`swap`), then the model resident (`resident`) until
//!   the next load, its idle unload or the run's own end; under the
//!   `ideal` bound one row per model, each resident from its first load
//!   on. Grace stretches, where the loaded model idles while another
//!   model's request waits, are hatched (`grace`). Above the band each
//!   switch is marked with its reason (`<g class="switch"
//!   data-reason="grace_expired">`, a tick and the reason's letter) and
//!   each idle unload with a dashed line (`<g class="unload"
//!   data-reason="idle">`);
//! - a lane (`lanes.rs`): every request one bar (`<g class="request"
//!   data-tier="flex">`) split into its stages: queued (grey), waiting for
//!   a load (orange) and generating (the model's colour); priority
//!   requests outlined in black, flex ones pale, one that did not
//!   complete outlined in red; hovering any bar, load or mark shows its
//!   figures.
//!
//! The drawing is bounded whatever it shows:
//! - the time axis has at most 11 ticks (`axis.rs`), a round step in
//!   seconds, hours or days;
//! - a lane needing more than [`lanes::MAX_ROWS`] rows of bars, and every
//!   lane of a run with more than [`lanes::MAX_BARS`] requests, is drawn
//!   aggregated (`<g class="lane aggregated">`): [`COLUMNS`] columns
//!   across the time axis, each as high as the requests waiting (grey) and
//!   generating (the model's colour) in it, scaled to the lane;
//! - a run with more than [`band::MAX_LOADS`] loads draws its band the
//!   same way (`<g class="loads aggregated">`): each column shaded by the
//!   share of its time spent loading, without residency, grace or marks;
//!   grace stretches less than a pixel apart are drawn as one;
//! - past [`MAX_LANES`] models, the rest share one lane.
//!
//! So a drawing holds at most a few thousand elements per run, and nothing
//! in it grows with a duration.

mod axis;
mod band;
mod lanes;
mod legend;
mod residency;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use strata_sim::{Policy, RequestSpan, Workload};
use svg::Document;
use svg::node::element::{Definitions, Group, Pattern, Rectangle, Text};

use super::Run;

const LEFT: f64 = 170.0;
const WIDTH: f64 = 1400.0;
const PALETTE: [&str; 8] = [
    "#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#e15759", "#bab0ac",
];

/// Columns of an aggregated lane or band.
pub const COLUMNS: usize = 350;
/// Lanes per panel; past it the remaining models share the last one.
pub const MAX_LANES: usize = 24;
/// The most characters of the workload's description in the heading.
const DESCRIPTION: usize = 200;

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The column of the time axis `t` falls in.
fn column(t: Duration, end: Duration) -> usize {
    let at = t.as_secs_f64() / end.as_secs_f64() * COLUMNS as f64;
    (at as usize).min(COLUMNS - 1)
}

/// The hatching of grace stretches: white stripes over the model's colour.
fn grace_pattern() -> Definitions {
    Definitions::new().add(
        Pattern::new()
            .set("id", band::GRACE_PATTERN)
            .set("patternUnits", "userSpaceOnUse")
            .set("width", 4)
            .set("height", 4)
            .set("patternTransform", "rotate(45)")
            .add(
                Rectangle::new()
                    .set("width", 2)
                    .set("height", 4)
                    .set("fill", "#fff")
                    .set("fill-opacity", 0.8),
            ),
    )
}

pub fn draw(workload: &Workload, runs: &[Run]) -> String {
    let end = runs
        .iter()
        .map(|run| residency::run_end(&run.timeline))
        .max()
        .unwrap_or_default()
        .max(Duration::from_secs(1));
    let x = |t: Duration| LEFT + t.as_secs_f64() / end.as_secs_f64() * WIDTH;
    let models: Vec<&str> = workload.models.keys().map(String::as_str).collect();
    let colours: HashMap<&str, &'static str> = models
        .iter()
        .enumerate()
        .map(|(index, model)| (*model, PALETTE[index % PALETTE.len()]))
        .collect();
    let colour = |model: &str| colours.get(model).copied().unwrap_or(PALETTE[0]);
    let mut document = Document::new()
        .set("font-family", "sans-serif")
        .set("font-size", 11)
        .add(grace_pattern());
    let mut y = 10.0;
    let mut description: String = workload.description.chars().take(DESCRIPTION).collect();
    if description.len() < workload.description.len() {
        description.push_str("...");
    }
    document = document.add(
        Text::new(format!(
            "{}: {} ({} requests)",
            workload.name,
            description,
            workload.request_count()
        ))
        .set("x", 10)
        .set("y", y + 12.0)
        .set("font-size", 14),
    );
    y += 22.0;
    let (legend, height) = legend::legend(y);
    document = document.add(legend);
    y += height + 6.0;
    let top = y;
    let canvas = band::Canvas {
        end,
        x: &x,
        colour: &colour,
        models: &models,
    };
    for run in runs {
        let (panel, height) = panel(run, y, &canvas);
        document = document.add(panel);
        y += height + 14.0;
    }
    document = document.add(axis::axis(end, top, y, &x));
    let height = y + 24.0;
    document
        .set("width", LEFT + WIDTH + 20.0)
        .set("height", height)
        .set("viewBox", (0.0, 0.0, LEFT + WIDTH + 20.0, height))
        .to_string()
}

/// One run's panel at `y`: its figures, its band and its lanes; returns it
/// and its height.
fn panel(run: &Run, top: f64, canvas: &band::Canvas) -> (Group, f64) {
    let mut panel = Group::new()
        .set("class", "run")
        .set("data-run", run.label.clone());
    let m = &run.metrics;
    let mut y = top;
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
    y += 14.0;
    let every_model_kept = run.policy == Some(Policy::Ideal);
    let (band, height) = band::band(&run.timeline, every_model_kept, y, canvas);
    panel = panel.add(band);
    y += height + 6.0;
    // One lane per model (past MAX_LANES, the rest share the last).
    let mut lanes: BTreeMap<&str, Vec<&RequestSpan>> = BTreeMap::new();
    for model in canvas.models {
        lanes.insert(model, Vec::new());
    }
    for request in &run.timeline.requests {
        lanes
            .entry(request.model.as_str())
            .or_default()
            .push(request);
    }
    let mut lanes: Vec<(String, Vec<&RequestSpan>)> = lanes
        .into_iter()
        .map(|(model, requests)| (model.to_owned(), requests))
        .collect();
    if lanes.len() > MAX_LANES {
        let rest = lanes.split_off(MAX_LANES - 1);
        let label = format!("{} other models", rest.len());
        let mut requests: Vec<&RequestSpan> = rest
            .into_iter()
            .flat_map(|(_, requests)| requests)
            .collect();
        requests.sort_by_key(|r| r.arrival);
        lanes.push((label, requests));
    }
    let aggregate_run = run.timeline.requests.len() > lanes::MAX_BARS;
    for (model, requests) in lanes {
        let colour = (canvas.colour)(&model);
        let (lane, height) = lanes::lane(
            &model,
            &requests,
            aggregate_run,
            canvas.end,
            y,
            canvas.x,
            colour,
        );
        panel = panel.add(lane);
        y += height + 6.0;
    }
    (panel, y - top)
}
