//! The legend under the heading: what each shade, mark and outline of the
//! panels means.

use strata_scheduler::SwitchReason;
use svg::node::element::{Group, Line, Rectangle, Text};

use super::band::{GRACE_PATTERN, LOAD_OPACITY, reason_colour, reason_letter};
use super::lanes::{FAILED, FLEX_OPACITY, LOADING, QUEUED};

/// A model's colour in the legend (each lane's label shows its own).
const ANY_MODEL: &str = "#888";
/// The height of a legend line.
pub const LINE: f64 = 16.0;

/// How an entry's swatch looks.
enum Swatch {
    Fill(&'static str, f64),
    Grace,
    Outline(&'static str),
    Letter(SwitchReason),
    Unload,
}

/// The legend's two lines at `y`; returns it and its height.
pub fn legend(y: f64) -> (Group, f64) {
    let reasons: Vec<(Swatch, String)> = SwitchReason::ALL
        .into_iter()
        // The simulator has no operator.
        .filter(|reason| *reason != SwitchReason::Operator && *reason != SwitchReason::Idle)
        .map(|reason| (Swatch::Letter(reason), reason.as_str().to_owned()))
        .collect();
    let mut backend = vec![
        (Swatch::Fill(ANY_MODEL, LOAD_OPACITY), "loading".to_owned()),
        (
            Swatch::Fill(ANY_MODEL, 1.0),
            "loaded (the model's colour)".into(),
        ),
        (
            Swatch::Grace,
            "grace: loaded model idle while another model waits".into(),
        ),
        (Swatch::Unload, "I idle unload".into()),
    ];
    backend.extend(reasons);
    let requests = vec![
        (Swatch::Fill(QUEUED, 1.0), "queued".to_owned()),
        (Swatch::Fill(LOADING, 1.0), "waiting for a load".into()),
        (Swatch::Fill(ANY_MODEL, 1.0), "generating".into()),
        (Swatch::Outline(FAILED), "not completed".into()),
        (Swatch::Outline("#000"), "priority tier".into()),
        (Swatch::Fill(ANY_MODEL, 1.0), "default tier".into()),
        (Swatch::Fill(ANY_MODEL, FLEX_OPACITY), "flex tier".into()),
    ];
    let mut group = Group::new().set("class", "legend");
    for (line, (title, entries)) in [("switches and loads:", backend), ("requests:", requests)]
        .into_iter()
        .enumerate()
    {
        let baseline = y + line as f64 * LINE + 11.0;
        group = group.add(
            Text::new(title)
                .set("x", 10)
                .set("y", baseline)
                .set("font-weight", "bold"),
        );
        let mut x = 150.0;
        for (swatch, label) in entries {
            let width = label.chars().count() as f64 * 6.0;
            group = group.add(entry(swatch, &label, x, baseline));
            x += width + 34.0;
        }
    }
    (group, 2.0 * LINE + 4.0)
}

fn entry(swatch: Swatch, label: &str, x: f64, baseline: f64) -> Group {
    let square = |fill: &str, opacity: f64| {
        Rectangle::new()
            .set("x", x)
            .set("y", baseline - 9.0)
            .set("width", 14)
            .set("height", 10)
            .set("fill", fill.to_owned())
            .set("fill-opacity", opacity)
    };
    let shape = match swatch {
        Swatch::Fill(fill, opacity) => Group::new().add(square(fill, opacity)),
        Swatch::Grace => Group::new()
            .add(square(ANY_MODEL, 1.0))
            .add(square("none", 1.0).set("fill", format!("url(#{GRACE_PATTERN})"))),
        Swatch::Outline(stroke) => Group::new().add(
            square(QUEUED, 1.0)
                .set("stroke", stroke)
                .set("stroke-width", 1),
        ),
        Swatch::Letter(reason) => Group::new().add(
            Text::new(reason_letter(reason))
                .set("x", x + 7.0)
                .set("y", baseline)
                .set("text-anchor", "middle")
                .set("font-weight", "bold")
                .set("fill", reason_colour(reason)),
        ),
        Swatch::Unload => Group::new().add(
            Line::new()
                .set("x1", x + 7.0)
                .set("x2", x + 7.0)
                .set("y1", baseline - 10.0)
                .set("y2", baseline + 1.0)
                .set("stroke", reason_colour(SwitchReason::Idle))
                .set("stroke-width", 1.5)
                .set("stroke-dasharray", "2,1"),
        ),
    };
    Group::new().set("class", "legend-entry").add(shape).add(
        Text::new(label.to_owned())
            .set("x", x + 18.0)
            .set("y", baseline),
    )
}
