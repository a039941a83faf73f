//! The request lanes: one per model, every request a bar split into its
//! stages, or, where a lane would need more than [`MAX_ROWS`] rows (or the
//! run has more than [`MAX_BARS`] requests), the lane aggregated into
//! [`COLUMNS`] columns.

use std::time::Duration;

use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;
use strata_sim::RequestSpan;
use svg::node::element::{Group, Rectangle, Text, Title};

use super::{COLUMNS, LEFT, column, seconds};

/// A run with more requests draws every lane aggregated.
pub const MAX_BARS: usize = 2000;
/// The most rows of bars a lane takes; a lane needing more is aggregated.
pub const MAX_ROWS: usize = 16;
/// The height of a row of bars (a bar is one pixel less).
pub const ROW: f64 = 7.0;
/// The height of an aggregated lane.
pub const AGGREGATED: f64 = 40.0;
/// Grey: queued; orange: admitted to a load and waiting for it.
pub const QUEUED: &str = "#c8c8c8";
pub const LOADING: &str = "#f28e2b";
/// Flex requests are drawn pale, priority ones outlined.
pub const FLEX_OPACITY: f64 = 0.45;
/// The outline of a request that did not complete.
pub const FAILED: &str = "#d00";

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

/// One lane at `y`: its label with the model's colour, and its requests
/// (in arrival order); returns the lane and its height.
pub fn lane(
    label: &str,
    requests: &[&RequestSpan],
    aggregate_run: bool,
    end: Duration,
    y: f64,
    x: &dyn Fn(Duration) -> f64,
    colour: &str,
) -> (Group, f64) {
    let mut group = Group::new()
        .add(
            Rectangle::new()
                .set("x", 10)
                .set("y", y + 2.0)
                .set("width", 8)
                .set("height", 8)
                .set("fill", colour.to_owned()),
        )
        .add(Text::new(label.to_owned()).set("x", 22).set("y", y + 10.0));
    let rows = pack(requests);
    let needed = rows.iter().max().map_or(0, |row| row + 1);
    if aggregate_run || needed > MAX_ROWS {
        group = group.add(request_columns(label, requests, end, y, x, colour));
        return (group, AGGREGATED);
    }
    for (request, row) in requests.iter().zip(rows) {
        group = group.add(bar(request, y + row as f64 * ROW, x, colour));
    }
    (group, (needed as f64 * ROW).max(12.0))
}

/// One request's bar: queued (grey), waiting for a load (orange) and
/// generating (the model's colour); flex pale, priority outlined, red
/// outline when it did not complete.
fn bar(request: &RequestSpan, y: f64, x: &dyn Fn(Duration) -> f64, colour: &str) -> Group {
    let granted = request.granted;
    let queued_until = request.admitted.or(granted).unwrap_or(request.end);
    let mut group = Group::new()
        .set("class", "request")
        .set("data-tier", request.tier.as_str())
        .add(Title::new(format!(
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
    let opacity = if request.tier == ServiceTier::Flex {
        FLEX_OPACITY
    } else {
        1.0
    };
    let stage = |class: &str, from: Duration, to: Duration, fill: &str, least: f64| {
        Rectangle::new()
            .set("class", class.to_owned())
            .set("x", x(from))
            .set("y", y)
            .set("width", (x(to) - x(from)).max(least))
            .set("height", ROW - 1.0)
            .set("fill", fill.to_owned())
            .set("fill-opacity", opacity)
    };
    group = group.add(stage("queued", request.arrival, queued_until, QUEUED, 0.3));
    if let (Some(admitted), Some(granted)) = (request.admitted, granted) {
        group = group.add(stage("loading", admitted, granted, LOADING, 0.3));
    }
    if let Some(granted) = granted {
        // At least a pixel: a short generation on a long axis stays visible.
        let mut generating = stage("generating", granted, request.end, colour, 1.0);
        if request.outcome != Reason::Completed {
            generating = generating.set("stroke", FAILED).set("stroke-width", 0.8);
        }
        group = group.add(generating);
    } else if request.outcome != Reason::Completed {
        group = group.add(
            stage("failed", request.end, request.end, FAILED, 0.3)
                .set("stroke", FAILED)
                .set("stroke-width", 0.8),
        );
    }
    if request.tier == ServiceTier::Priority {
        group = group.add(
            Rectangle::new()
                .set("class", "outline")
                .set("x", x(request.arrival) - 0.5)
                .set("y", y - 0.5)
                .set(
                    "width",
                    (x(request.end) - x(request.arrival)).max(1.0) + 1.0,
                )
                .set("height", ROW)
                .set("fill", "none")
                .set("stroke", "#000")
                .set("stroke-width", 0.8),
        );
    }
    group
}

/// A lane drawn aggregated: per column, the most requests waiting (queued
/// or for a load) and generating in it, as stacked bars scaled to the
/// lane's busiest column.
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
        let (left, right) = (x(from).max(LEFT), x(to));
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
                    .set("fill", QUEUED),
            );
        }
    }
    group
}
