//! The backend band of a panel: which model was loading and resident when,
//! the grace stretches, and each switch and unload marked with its reason
//! (what [`super::residency`] derives from the timeline).

use std::time::Duration;

use strata_scheduler::SwitchReason;
use strata_sim::{LoadOutcome, LoadSpan, Timeline};
use svg::node::element::{Group, Line, Rectangle, Text, Title};

use super::residency::{Ended, Residency, grace, residencies};
use super::{COLUMNS, MAX_LANES, column, seconds};

/// A run with more loads draws its band aggregated.
pub const MAX_LOADS: usize = 2000;
/// The height of the band of a run with one model loaded at a time.
pub const BAND: f64 = 14.0;
/// The height of one model's row in the band of the `ideal` bound.
const IDEAL_ROW: f64 = 7.0;
/// The row above the band holding the switch and unload marks.
pub const MARKS: f64 = 12.0;
/// The fewest pixels between two reason letters; closer marks keep their
/// tick and title only.
const LETTER_GAP: f64 = 8.0;
/// A load's shade: its opacity over the model's colour.
pub const LOAD_OPACITY: f64 = 0.45;
/// The pattern id grace stretches are filled with.
pub const GRACE_PATTERN: &str = "grace";

/// A reason's colour.
pub fn reason_colour(reason: SwitchReason) -> &'static str {
    const COLOURS: [&str; 7] = [
        "#9467bd", "#d62728", "#7f7f7f", "#e377c2", "#bcbd22", "#17becf", "#8c564b",
    ];
    let index = SwitchReason::ALL
        .iter()
        .position(|r| *r == reason)
        .unwrap_or(0);
    COLOURS[index % COLOURS.len()]
}

/// A reason's letter: the first of its label (G, B, Q, P, O, I, A).
pub fn reason_letter(reason: SwitchReason) -> String {
    reason.as_str()[..1].to_uppercase()
}

/// What the band is drawn with.
pub struct Canvas<'a> {
    /// The end of the shared axis.
    pub end: Duration,
    pub x: &'a dyn Fn(Duration) -> f64,
    pub colour: &'a dyn Fn(&str) -> &'static str,
    /// The workload's models, in lane order.
    pub models: &'a [&'a str],
}

/// The marks above the band: each letter drawn only with room beside the
/// last one.
struct Marks {
    group: Group,
    last_letter: f64,
    y: f64,
}

impl Marks {
    fn mark(&mut self, at: f64, reason: SwitchReason) -> Group {
        let colour = reason_colour(reason);
        let mut mark = Group::new().add(
            Rectangle::new()
                .set("x", at - 1.0)
                .set("y", self.y + MARKS - 4.0)
                .set("width", 2)
                .set("height", 4)
                .set("fill", colour),
        );
        if at - self.last_letter >= LETTER_GAP {
            self.last_letter = at;
            mark = mark.add(
                Text::new(reason_letter(reason))
                    .set("x", at)
                    .set("y", self.y + MARKS - 5.0)
                    .set("text-anchor", "middle")
                    .set("font-size", 8)
                    .set("font-weight", "bold")
                    .set("fill", colour),
            );
        }
        mark
    }
}

/// The band at `y` (its marks row first); returns it and its height.
pub fn band(timeline: &Timeline, every_model_kept: bool, y: f64, canvas: &Canvas) -> (Group, f64) {
    let x = canvas.x;
    let loads = &timeline.loads;
    let mut group = Group::new().set("class", "backend");
    let top = y + MARKS;
    if loads.len() > MAX_LOADS {
        group = group
            .add(Text::new("backend").set("x", 10).set("y", top + BAND - 3.0))
            .add(load_columns(loads, canvas.end, top, x));
        return (group, MARKS + BAND);
    }
    // The band's rows: one, or under the ideal bound one per model loaded.
    let mut rows: Vec<&str> = Vec::new();
    if every_model_kept {
        let loaded = |model: &&str| loads.iter().any(|load| load.model == *model);
        rows.extend(canvas.models.iter().copied().filter(loaded));
        for load in loads {
            if !rows.contains(&load.model.as_str()) {
                rows.push(&load.model);
            }
        }
        rows.truncate(MAX_LANES);
    }
    let row_height = if every_model_kept { IDEAL_ROW } else { BAND };
    let height = (rows.len().max(1) as f64 * row_height).max(BAND);
    let row_of = |model: &str| -> f64 {
        let index = rows.iter().position(|row| *row == model);
        top + index.unwrap_or(rows.len().saturating_sub(1)) as f64 * row_height
    };
    let label = if every_model_kept {
        "backend (all kept)"
    } else {
        "backend"
    };
    group = group.add(Text::new(label).set("x", 10).set("y", top + BAND - 3.0));
    let residencies = residencies(timeline, every_model_kept);
    for residency in &residencies {
        group = group.add(resident(
            residency,
            row_of(residency.model),
            row_height,
            canvas,
        ));
    }
    if !every_model_kept {
        group = add_grace(group, timeline, &residencies, top, canvas);
    }
    // Marks in time order, so each letter keeps clear of the one before.
    let mut pending: Vec<(Duration, SwitchReason, String, Option<&str>)> = Vec::new();
    for (index, load) in loads.iter().enumerate() {
        let row = row_of(&load.model);
        group = group.add(load_shade(load, row, row_height, canvas));
        let before = index.checked_sub(1).map(|i| loads[i].model.as_str());
        group = group.add(swap_line(load, before, row, row_height, x));
        if let Some(reason) = load.reason {
            let title = format!(
                "{} gave way to {}: {} at {}",
                before.unwrap_or("nothing"),
                load.model,
                reason.as_str(),
                seconds(load.start)
            );
            pending.push((load.start, reason, title, None));
        }
        if load.outcome == LoadOutcome::Abandoned {
            let title = format!(
                "{}'s load cancelled at {}: abandoned (nobody waited for it)",
                load.model,
                seconds(load.end),
            );
            pending.push((load.end, SwitchReason::Abandoned, title, None));
        }
    }
    for unload in &timeline.unloads {
        let title = format!(
            "{} unloaded at {}: idle (idle_ms of quiet)",
            unload.model,
            seconds(unload.at),
        );
        pending.push((unload.at, SwitchReason::Idle, title, Some(&unload.model)));
    }
    pending.sort_by_key(|(at, ..)| *at);
    let mut marks = Marks {
        group: Group::new().set("class", "marks"),
        last_letter: f64::NEG_INFINITY,
        y,
    };
    for (at, reason, title, unloaded) in pending {
        let mark = marks
            .mark(x(at), reason)
            .set("data-reason", reason.as_str())
            .add(Title::new(title));
        let mark = match unloaded {
            None => mark.set("class", "switch"),
            Some(model) => mark
                .set("class", "unload")
                .set("data-model", model.to_owned())
                .add(
                    Line::new()
                        .set("x1", x(at))
                        .set("x2", x(at))
                        .set("y1", top)
                        .set("y2", top + height)
                        .set("stroke", reason_colour(reason))
                        .set("stroke-width", 1.5)
                        .set("stroke-dasharray", "2,1"),
                ),
        };
        marks.group = marks.group.add(mark);
    }
    (group.add(marks.group), MARKS + height)
}

/// A model resident from its load's end until it gave way.
fn resident(residency: &Residency, y: f64, height: f64, canvas: &Canvas) -> Rectangle {
    let x = canvas.x;
    let ended = match residency.ended {
        Ended::Replaced => "the next load",
        Ended::Unloaded => "its idle unload",
        Ended::RunEnd => "the end of the run",
    };
    Rectangle::new()
        .set("class", "resident")
        .set("data-model", residency.model.to_owned())
        .set("x", x(residency.from))
        .set("y", y)
        .set("width", (x(residency.until) - x(residency.from)).max(0.0))
        .set("height", height)
        .set("fill", (canvas.colour)(residency.model))
        .add(Title::new(format!(
            "{} loaded {}-{} (until {ended})",
            residency.model,
            seconds(residency.from),
            seconds(residency.until)
        )))
}

/// The grace stretches over the band, hatched; stretches less than a pixel
/// apart drawn as one, so a panel holds at most about one per pixel.
fn add_grace(
    mut group: Group,
    timeline: &Timeline,
    residencies: &[Residency],
    top: f64,
    canvas: &Canvas,
) -> Group {
    let x = canvas.x;
    let mut merged: Vec<(Duration, Duration, usize)> = Vec::new();
    for stretch in grace(timeline, residencies) {
        match merged.last_mut() {
            Some((_, until, count)) if x(stretch.from) - x(*until) < 1.0 => {
                *until = stretch.until;
                *count += 1;
            }
            _ => merged.push((stretch.from, stretch.until, 1)),
        }
    }
    for (from, until, count) in merged {
        let what = if count == 1 {
            String::new()
        } else {
            format!(" ({count} stretches)")
        };
        group = group.add(
            Rectangle::new()
                .set("class", "grace")
                .set("x", x(from))
                .set("y", top)
                .set("width", (x(until) - x(from)).max(0.5))
                .set("height", BAND)
                .set("fill", format!("url(#{GRACE_PATTERN})"))
                .add(Title::new(format!(
                    "grace {}-{}{what}: the loaded model idle while another model's request waits",
                    seconds(from),
                    seconds(until)
                ))),
        );
    }
    group
}

/// A load shaded in its model's colour.
fn load_shade(load: &LoadSpan, y: f64, height: f64, canvas: &Canvas) -> Rectangle {
    let x = canvas.x;
    let (kind, opacity) = match load.outcome {
        LoadOutcome::Verified { wasted: false } => ("load", LOAD_OPACITY),
        LoadOutcome::Verified { wasted: true } => ("load wasted", 0.25),
        LoadOutcome::Failed => ("load failed", 0.25),
        LoadOutcome::Abandoned => ("load abandoned", 0.25),
    };
    Rectangle::new()
        .set("class", kind)
        .set("x", x(load.start))
        .set("y", y)
        .set("width", (x(load.end) - x(load.start)).max(0.5))
        .set("height", height)
        .set("fill", (canvas.colour)(&load.model))
        .set("fill-opacity", opacity)
        .add(Title::new(format!(
            "{} loading {}-{} ({kind})",
            load.model,
            seconds(load.start),
            seconds(load.end)
        )))
}

/// The line at a load's start.
fn swap_line(
    load: &LoadSpan,
    before: Option<&str>,
    y: f64,
    height: f64,
    x: &dyn Fn(Duration) -> f64,
) -> Line {
    let why = match (load.reason, before) {
        (Some(reason), _) => reason.as_str().to_owned(),
        (None, None) => "the first load".to_owned(),
        (None, Some(_)) => "nothing loaded, or the reason is not recorded".to_owned(),
    };
    Line::new()
        .set("class", "swap")
        .set("x1", x(load.start))
        .set("x2", x(load.start))
        .set("y1", y - 1.0)
        .set("y2", y + height + 1.0)
        .set("stroke", "#000")
        .set("stroke-width", 1)
        .add(Title::new(format!(
            "{} load started at {} ({why})",
            load.model,
            seconds(load.start)
        )))
}

/// The band of a run with many loads: each column shaded by the share of
/// its time spent loading, with the loads started in it.
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
