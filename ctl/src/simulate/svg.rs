//! The timeline drawing: one panel per run, stacked on a shared time axis
//! so policies compare at a glance.
//!
//! A panel has a backend band (which model was loaded when; loads shaded,
//! each swap marked by a line) and one lane per model, where every request
//! is one bar (`<g class="request">`) split into its stages: queued (grey),
//! waiting for a load (orange) and generating (the model's colour). A
//! request that did not complete has a red outline; hovering any bar shows
//! its figures.
//!
//! The drawing is bounded whatever it shows:
//! - the time axis has at most 11 ticks (`<g class="axis">`), a round step
//!   in seconds, hours or days;
//! - a run with more than [`MAX_BARS`] requests draws each lane
//!   aggregated (`<g class="lane aggregated">`): [`COLUMNS`] columns
//!   across the time axis, each as high as the most requests waiting
//!   (grey) and generating (the model's colour) in it, scaled to the lane;
//! - a run with more than [`MAX_LOADS`] loads draws its backend band the
//!   same way (`<g class="loads aggregated">`): each column shaded by the
//!   share of its time spent loading;
//! - past [`MAX_LANES`] models, the rest share one lane.
//!
//! So a drawing holds at most a few thousand elements per run, and nothing
//! in it grows with a duration.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use strata_protocol::record::Reason;
use strata_sim::{LoadOutcome, LoadSpan, RequestSpan, Workload};
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

/// A run with more requests draws its lanes aggregated.
pub const MAX_BARS: usize = 2000;
/// A run with more loads draws its backend band aggregated.
pub const MAX_LOADS: usize = 2000;
/// Columns of an aggregated lane or band.
pub const COLUMNS: usize = 350;
/// Lanes per panel; past it the remaining models share the last one.
pub const MAX_LANES: usize = 24;
/// The height of an aggregated lane.
const AGGREGATED: f64 = 40.0;
/// The most characters of the workload's description in the heading.
const DESCRIPTION: usize = 200;

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
    let colours: HashMap<&str, &str> = models
        .iter()
        .enumerate()
        .map(|(index, model)| (model.as_str(), PALETTE[index % PALETTE.len()]))
        .collect();
    let colour = |model: &str| colours.get(model).copied().unwrap_or(PALETTE[0]);
    let mut document = Document::new()
        .set("font-family", "sans-serif")
        .set("font-size", 11);
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
        if loads.len() > MAX_LOADS {
            panel = panel.add(load_columns(loads, end, y, &x));
        } else {
            for (index, load) in loads.iter().enumerate() {
                panel = add_load(panel, load, loads.get(index + 1), end, y, &x, colour);
            }
        }
        y += BAND + 6.0;
        // One lane per model (past MAX_LANES, the rest share the last).
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
        let aggregated = run.timeline.requests.len() > MAX_BARS;
        for (model, requests) in lanes {
            panel = panel.add(Text::new(model.clone()).set("x", 10).set("y", y + 10.0));
            if aggregated {
                panel = panel.add(request_columns(
                    &model,
                    &requests,
                    end,
                    y,
                    &x,
                    colour(&model),
                ));
                y += AGGREGATED + 6.0;
                continue;
            }
            let rows = pack(&requests);
            let height = (rows.iter().max().map_or(1, |r| r + 1) as f64) * ROW;
            for (request, row) in requests.iter().zip(rows) {
                let fill = colour(&request.model);
                panel = panel.add(bar(request, y + row as f64 * ROW, &x, fill));
            }
            y += height.max(12.0) + 6.0;
        }
        document = document.add(panel);
        y += 14.0;
    }
    // The time axis.
    let step = axis_step(end);
    let mut axis = Group::new().set("class", "axis");
    let mut t = Duration::ZERO;
    while t <= end {
        axis = axis
            .add(
                Line::new()
                    .set("class", "tick")
                    .set("x1", x(t))
                    .set("x2", x(t))
                    .set("y1", 40)
                    .set("y2", y)
                    .set("stroke", "#ddd")
                    .set("stroke-width", 0.5),
            )
            .add(
                Text::new(tick_label(t, step))
                    .set("x", x(t))
                    .set("y", y + 12.0)
                    .set("text-anchor", "middle"),
            );
        t += step;
    }
    document = document.add(axis);
    let height = y + 24.0;
    document
        .set("width", LEFT + WIDTH + 20.0)
        .set("height", height)
        .set("viewBox", (0.0, 0.0, LEFT + WIDTH + 20.0, height))
        .to_string()
}

/// One load shaded, the model serving after it until `next` starts, and
/// its swap marked.
fn add_load(
    mut panel: Group,
    load: &LoadSpan,
    next: Option<&LoadSpan>,
    end: Duration,
    y: f64,
    x: &dyn Fn(Duration) -> f64,
    colour: impl Fn(&str) -> &'static str,
) -> Group {
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
        let until = next.map_or(end, |next| next.start);
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
    panel.add(
        Line::new()
            .set("class", "swap")
            .set("x1", x(load.start))
            .set("x2", x(load.start))
            .set("y1", y - 2.0)
            .set("y2", y + BAND + 2.0)
            .set("stroke", "#000")
            .set("stroke-width", 1),
    )
}

/// The column of the time axis `t` falls in.
fn column(t: Duration, end: Duration) -> usize {
    let at = t.as_secs_f64() / end.as_secs_f64() * COLUMNS as f64;
    (at as usize).min(COLUMNS - 1)
}

/// The backend band of a run with many loads: each column shaded by the
/// share of its time spent loading, with the loads started in it.
fn load_columns(loads: &[LoadSpan], end: Duration, y: f64, x: &dyn Fn(Duration) -> f64) -> Group {
    let width = end.as_secs_f64() / COLUMNS as f64;
    let mut busy = vec![0.0f64; COLUMNS];
    // Columns a load covers whole, as a running sum.
    let mut whole = vec![0i64; COLUMNS + 1];
    let mut started = vec![0u64; COLUMNS];
    for load in loads {
        let (from, to) = (
            load.start.as_secs_f64(),
            load.end.as_secs_f64().min(end.as_secs_f64()),
        );
        let (first, last) = (column(load.start, end), column(load.end.min(end), end));
        started[first] += 1;
        if first == last {
            busy[first] += (to - from).max(0.0);
        } else {
            busy[first] += (first + 1) as f64 * width - from;
            busy[last] += to - last as f64 * width;
            whole[first + 1] += 1;
            whole[last] -= 1;
        }
    }
    let mut group = Group::new()
        .set("class", "loads aggregated")
        .add(Title::new(format!(
            "{} loads: each column shaded by the share of its time spent loading",
            loads.len()
        )));
    let mut covering = 0i64;
    for c in 0..COLUMNS {
        covering += whole[c];
        let share = ((busy[c] + covering as f64 * width) / width).clamp(0.0, 1.0);
        if share == 0.0 && started[c] == 0 {
            continue;
        }
        let from = Duration::from_secs_f64(c as f64 * width);
        let to = Duration::from_secs_f64((c + 1) as f64 * width);
        group = group.add(
            Rectangle::new()
                .set("class", "loading")
                .set("x", x(from))
                .set("y", y)
                .set("width", x(to) - x(from))
                .set("height", BAND)
                .set("fill", "#555")
                .set("fill-opacity", (0.1 + 0.8 * share).min(0.9))
                .add(Title::new(format!(
                    "{}-{}: {} loads started, {:.0}% loading",
                    seconds(from),
                    seconds(to),
                    started[c],
                    share * 100.0
                ))),
        );
    }
    group
}

/// A lane of a run with many requests: per column, the most requests
/// waiting (queued or for a load) and generating in it, as stacked bars
/// scaled to the lane's busiest column.
fn request_columns(
    label: &str,
    requests: &[&RequestSpan],
    end: Duration,
    y: f64,
    x: &dyn Fn(Duration) -> f64,
    colour: &str,
) -> Group {
    // Requests overlapping each column, as running sums.
    let mut waiting = vec![0i64; COLUMNS + 1];
    let mut generating = vec![0i64; COLUMNS + 1];
    let mut unfinished = 0;
    for request in requests {
        let started = request.granted.unwrap_or(request.end).min(request.end);
        let (from, to) = (column(request.arrival, end), column(started, end));
        waiting[from] += 1;
        waiting[to + 1] -= 1;
        if let Some(granted) = request.granted {
            let (from, to) = (column(granted, end), column(request.end, end));
            generating[from] += 1;
            generating[to + 1] -= 1;
        }
        if request.outcome != Reason::Completed {
            unfinished += 1;
        }
    }
    let sums = |diffs: &mut Vec<i64>| {
        let mut running = 0;
        for value in diffs.iter_mut() {
            running += *value;
            *value = running;
        }
    };
    sums(&mut waiting);
    sums(&mut generating);
    let most = (0..COLUMNS)
        .map(|c| waiting[c] + generating[c])
        .max()
        .unwrap_or(0)
        .max(1);
    let mut group = Group::new()
        .set("class", "lane aggregated")
        .set("data-lane", label.to_owned())
        .add(Title::new(format!(
            "{label}: {} requests ({unfinished} not completed); each column shows the requests waiting (grey) and generating during it, {most} in the busiest",
            requests.len()
        )));
    let width = end.as_secs_f64() / COLUMNS as f64;
    let scale = AGGREGATED / most as f64;
    for c in 0..COLUMNS {
        let from = Duration::from_secs_f64(c as f64 * width);
        let to = Duration::from_secs_f64((c + 1) as f64 * width);
        let (left, right) = (x(from), x(to));
        let bottom = y + AGGREGATED;
        let busy = generating[c] as f64 * scale;
        if generating[c] > 0 {
            group = group.add(
                Rectangle::new()
                    .set("class", "generating")
                    .set("x", left)
                    .set("y", bottom - busy)
                    .set("width", right - left)
                    .set("height", busy)
                    .set("fill", colour.to_owned()),
            );
        }
        if waiting[c] > 0 {
            let high = waiting[c] as f64 * scale;
            group = group.add(
                Rectangle::new()
                    .set("class", "waiting")
                    .set("x", left)
                    .set("y", bottom - busy - high)
                    .set("width", right - left)
                    .set("height", high)
                    .set("fill", "#c8c8c8"),
            );
        }
    }
    group
}

/// A round tick interval giving at most ten intervals: the steps below two
/// hours, then 3, 6, 12 and 24 hours, then 1, 2 or 5 times a power of ten
/// days.
fn axis_step(end: Duration) -> Duration {
    let raw = end.as_secs_f64() / 10.0;
    let steps = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
        10_800.0, 21_600.0, 43_200.0, 86_400.0,
    ];
    if let Some(step) = steps.into_iter().find(|s| *s >= raw) {
        return Duration::from_secs_f64(step);
    }
    let mut days = 1.0;
    loop {
        for factor in [2.0, 5.0, 10.0] {
            if days * factor * 86_400.0 >= raw {
                return Duration::from_secs_f64(days * factor * 86_400.0);
            }
        }
        days *= 10.0;
    }
}

/// A tick's label: seconds up to two-hour steps, then hours, then days.
fn tick_label(t: Duration, step: Duration) -> String {
    let secs = t.as_secs();
    match step.as_secs() {
        0..=7200 => format!("{secs}s"),
        7201..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
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

#[cfg(test)]
mod tests {
    use strata_protocol::wire::ServiceTier;
    use strata_sim::{Metrics, Timeline};

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn request(model: &str, arrival: Duration, granted: Duration, end: Duration) -> RequestSpan {
        RequestSpan {
            model: model.into(),
            tier: ServiceTier::Default,
            arrival,
            admitted: None,
            granted: Some(granted),
            end,
            outcome: Reason::Completed,
        }
    }

    fn load(model: &str, start: Duration, end: Duration) -> LoadSpan {
        LoadSpan {
            model: model.into(),
            start,
            end,
            outcome: LoadOutcome::Verified { wasted: false },
            reason: None,
        }
    }

    fn drawing(workload: &Workload, timeline: Timeline) -> String {
        let metrics = Metrics::of(&timeline);
        let run = Run {
            label: "router".into(),
            timeline,
            metrics,
        };
        draw(workload, &[run])
    }

    fn has_class(node: &roxmltree::Node, name: &str) -> bool {
        node.attribute("class")
            .is_some_and(|c| c.split(' ').any(|part| part == name))
    }

    fn count(svg: &str, class: &str) -> usize {
        let tree = roxmltree::Document::parse(svg).expect("valid XML");
        tree.descendants().filter(|n| has_class(n, class)).count()
    }

    fn elements(svg: &str) -> usize {
        let tree = roxmltree::Document::parse(svg).expect("valid XML");
        tree.descendants().filter(|n| n.is_element()).count()
    }

    fn labels(svg: &str) -> Vec<String> {
        let tree = roxmltree::Document::parse(svg).expect("valid XML");
        let axis = tree
            .descendants()
            .find(|n| has_class(n, "axis"))
            .expect("an axis");
        axis.children()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or_default().trim().to_owned())
            .collect()
    }

    fn texts(svg: &str) -> Vec<String> {
        let tree = roxmltree::Document::parse(svg).expect("valid XML");
        tree.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or_default().trim().to_owned())
            .collect()
    }

    #[test]
    fn the_time_axis_has_at_most_eleven_ticks_whatever_the_span() {
        let year = 365 * 86_400_000;
        for (end, first_labels) in [
            (ms(500), ["0s", "1s"].as_slice()),
            (ms(59_000), &["0s", "10s", "20s"]),
            (ms(3_600_000), &["0s", "600s"]),
            (ms(36_000_000), &["0s", "3600s"]),
            (ms(200_000_000), &["0h", "6h", "12h"]),
            (ms(year), &["0d", "50d", "100d"]),
            (ms(8000 * year), &["0d", "500000d"]),
            (ms(u64::MAX), &["0d"]),
        ] {
            let timeline = Timeline {
                loads: vec![load("a", ms(0), ms(10))],
                requests: vec![request("a", ms(0), ms(10), end)],
                unloads: Vec::new(),
            };
            let svg = drawing(&Workload::default(), timeline);
            let ticks = count(&svg, "tick");
            assert!((2..=11).contains(&ticks), "{end:?}: {ticks} ticks");
            let labels = labels(&svg);
            assert_eq!(labels.len(), ticks);
            assert!(
                labels.starts_with(
                    &first_labels
                        .iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                ),
                "{end:?}: {labels:?}"
            );
            assert!(svg.len() < 10_000, "{end:?}: {} bytes", svg.len());
        }
    }

    /// `count` requests over two models, one after another, each loaded
    /// once.
    fn busy(count: u64) -> (Workload, Timeline) {
        let mut workload = Workload::default();
        for model in ["a", "b"] {
            let params = strata_sim::ModelParams {
                load: ms(1000),
                fail_rate: 0.0,
            };
            workload.models.insert(model.into(), params);
        }
        let requests = (0..count)
            .map(|i| {
                let model = if i % 2 == 0 { "a" } else { "b" };
                request(model, ms(i * 10), ms(i * 10 + 5), ms(i * 10 + 500))
            })
            .collect();
        let loads = vec![load("a", ms(0), ms(5)), load("b", ms(5), ms(15))];
        (
            workload,
            Timeline {
                loads,
                requests,
                unloads: Vec::new(),
            },
        )
    }

    #[test]
    fn past_max_bars_requests_each_lane_is_aggregated() {
        let (workload, timeline) = busy(MAX_BARS as u64);
        let svg = drawing(&workload, timeline);
        assert_eq!(count(&svg, "request"), MAX_BARS);
        assert_eq!(count(&svg, "aggregated"), 0);

        let (workload, timeline) = busy(MAX_BARS as u64 + 1);
        let svg = drawing(&workload, timeline);
        assert_eq!(count(&svg, "request"), 0, "no bar per request");
        assert_eq!(count(&svg, "aggregated"), 2, "one lane per model");
        let columns = count(&svg, "generating");
        assert!(columns > 0 && columns <= 2 * COLUMNS, "{columns}");
        assert!(count(&svg, "waiting") <= 2 * COLUMNS);

        // A hundred thousand requests: no more elements.
        let (workload, timeline) = busy(100_000);
        let svg = drawing(&workload, timeline);
        assert!(
            elements(&svg) < 4 * COLUMNS + 100,
            "{} elements",
            elements(&svg)
        );
    }

    #[test]
    fn past_max_loads_the_backend_band_is_aggregated() {
        let loads: Vec<LoadSpan> = (0..MAX_LOADS as u64 + 1)
            .map(|i| {
                load(
                    if i % 2 == 0 { "a" } else { "b" },
                    ms(i * 100),
                    ms(i * 100 + 60),
                )
            })
            .collect();
        let timeline = Timeline {
            loads,
            requests: vec![request("a", ms(0), ms(10), ms(300_000))],
            unloads: Vec::new(),
        };
        let svg = drawing(&Workload::default(), timeline);
        assert_eq!(count(&svg, "swap"), 0);
        assert_eq!(count(&svg, "aggregated"), 1);
        let columns = count(&svg, "loading");
        assert!(columns > 0 && columns <= COLUMNS, "{columns}");
    }

    #[test]
    fn past_max_lanes_the_other_models_share_one() {
        let mut workload = Workload::default();
        for i in 0..100 {
            let params = strata_sim::ModelParams {
                load: ms(1000),
                fail_rate: 0.0,
            };
            workload.models.insert(format!("m{i:03}"), params);
        }
        let requests = (0..100)
            .map(|i| request(&format!("m{i:03}"), ms(i), ms(i + 1), ms(i + 2)))
            .collect();
        let svg = drawing(
            &workload,
            Timeline {
                loads: Vec::new(),
                requests,
                unloads: Vec::new(),
            },
        );
        assert_eq!(count(&svg, "request"), 100, "every request is still drawn");
        let texts = texts(&svg);
        assert!(texts.iter().any(|t| t == "77 other models"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "m022"));
        assert!(!texts.iter().any(|t| t == "m023"));
    }
}
