//! The shared time axis: at most 11 ticks at a round step in seconds, hours
//! or days, whatever the span.

use std::time::Duration;

use svg::node::element::{Group, Line, Text};

/// The axis under the panels: a tick line from `top` to `bottom` and a
/// label under each.
pub fn axis(end: Duration, top: f64, bottom: f64, x: &dyn Fn(Duration) -> f64) -> Group {
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
                    .set("y1", top)
                    .set("y2", bottom)
                    .set("stroke", "#ddd")
                    .set("stroke-width", 0.5),
            )
            .add(
                Text::new(tick_label(t, step))
                    .set("x", x(t))
                    .set("y", bottom + 12.0)
                    .set("text-anchor", "middle"),
            );
        t += step;
    }
    axis
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
