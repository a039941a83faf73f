//! The drawing's structure, parsed back.

use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;
use strata_sim::{LoadOutcome, LoadSpan, Metrics, Timeline};

use strata_scheduler::SwitchReason;

use super::band::MAX_LOADS;
use super::lanes::MAX_BARS;
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

fn params() -> strata_sim::ModelParams {
    strata_sim::ModelParams {
        load: ms(1000),
        fail_rate: 0.0,
    }
}

fn drawing(workload: &Workload, timeline: Timeline) -> String {
    let metrics = Metrics::of(&timeline);
    let run = Run {
        label: "router".into(),
        policy: Some(Policy::Router),
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
            forecasts: None,
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

/// `count` requests over two models, one after another (each lane one
/// row), each loaded once.
fn busy(count: u64) -> (Workload, Timeline) {
    let mut workload = Workload::default();
    for model in ["a", "b"] {
        workload.models.insert(model.into(), params());
    }
    let requests = (0..count)
        .map(|i| {
            let model = if i % 2 == 0 { "a" } else { "b" };
            request(model, ms(i * 10), ms(i * 10 + 5), ms(i * 10 + 15))
        })
        .collect();
    let loads = vec![load("a", ms(0), ms(5)), load("b", ms(5), ms(15))];
    (
        workload,
        Timeline {
            loads,
            requests,
            unloads: Vec::new(),
            forecasts: None,
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
        elements(&svg) < 4 * COLUMNS + 200,
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
        forecasts: None,
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
        workload.models.insert(format!("m{i:03}"), params());
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
            forecasts: None,
        },
    );
    assert_eq!(count(&svg, "request"), 100, "every request is still drawn");
    let texts = texts(&svg);
    assert!(texts.iter().any(|t| t == "77 other models"), "{texts:?}");
    assert!(texts.iter().any(|t| t == "m022"));
    assert!(!texts.iter().any(|t| t == "m023"));
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn two_models() -> Workload {
    let mut workload = Workload::default();
    for model in ["a", "b"] {
        workload.models.insert(model.into(), params());
    }
    workload
}

fn with_reason(mut load: LoadSpan, reason: SwitchReason) -> LoadSpan {
    load.reason = Some(reason);
    load
}

/// Request `model` arriving at `arrival`, admitted to a load at
/// `admitted`, generating from `granted` to `end` (seconds).
fn loaded(model: &str, arrival: u64, admitted: u64, granted: u64, end: u64) -> RequestSpan {
    RequestSpan {
        admitted: Some(secs(admitted)),
        ..request(model, secs(arrival), secs(granted), secs(end))
    }
}

/// One model at a time over 175 s: a grace switch, an idle unload, a
/// priority switch, and a load abandoned after the queue drained.
fn switching() -> Timeline {
    let mut abandoned = load("a", secs(170), secs(175));
    abandoned.outcome = LoadOutcome::Abandoned;
    let mut gave_up = loaded("a", 165, 170, 0, 175);
    gave_up.granted = None;
    gave_up.outcome = Reason::ClientDisconnect;
    Timeline {
        loads: vec![
            load("a", secs(0), secs(10)),
            with_reason(load("b", secs(50), secs(60)), SwitchReason::GraceExpired),
            load("a", secs(120), secs(130)),
            with_reason(load("b", secs(150), secs(160)), SwitchReason::Priority),
            with_reason(abandoned, SwitchReason::QueueDrained),
        ],
        unloads: vec![strata_sim::timeline::Unload {
            model: "b".into(),
            at: secs(100),
        }],
        requests: vec![
            loaded("a", 0, 0, 10, 30),
            loaded("b", 20, 50, 60, 70),
            request("a", secs(35), secs(35), secs(40)),
            loaded("a", 120, 120, 130, 140),
            loaded("b", 135, 150, 160, 170),
            gave_up,
        ],
        forecasts: None,
    }
}

fn run(label: &str, policy: Policy, timeline: Timeline) -> Run {
    Run {
        label: label.into(),
        policy: Some(policy),
        metrics: Metrics::of(&timeline),
        timeline,
    }
}

fn number(node: &roxmltree::Node, attribute: &str) -> f64 {
    node.attribute(attribute)
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{attribute} of {node:?}"))
}

/// Each `resident` rectangle of the panel `label`: its model, left and
/// right edge and top.
fn residents(svg: &str, label: &str) -> Vec<(String, f64, f64, f64)> {
    let tree = roxmltree::Document::parse(svg).expect("valid XML");
    let panel = tree
        .descendants()
        .find(|n| has_class(n, "run") && n.attribute("data-run") == Some(label))
        .expect("the panel");
    panel
        .descendants()
        .filter(|n| has_class(n, "resident"))
        .map(|n| {
            let x = number(&n, "x");
            (
                n.attribute("data-model").unwrap_or_default().to_owned(),
                x,
                x + number(&n, "width"),
                number(&n, "y"),
            )
        })
        .collect()
}

/// The x of `t` on an axis ending at `end` seconds.
fn at(t: f64, end: f64) -> f64 {
    LEFT + t / end * WIDTH
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[test]
fn every_switch_and_unload_is_marked_with_its_reason() {
    let timeline = switching();
    let expected = timeline.switches_by_reason();
    let svg = drawing(&two_models(), timeline.clone());
    let tree = roxmltree::Document::parse(&svg).expect("valid XML");
    for reason in SwitchReason::ALL {
        let marked = tree
            .descendants()
            .filter(|n| n.attribute("data-reason") == Some(reason.as_str()))
            .count() as u64;
        let counted = expected.get(&reason).copied().unwrap_or(0);
        assert_eq!(marked, counted, "{}", reason.as_str());
    }
    // Idle unloads are unload elements, the rest switch marks.
    let unloads: Vec<roxmltree::Node> = tree
        .descendants()
        .filter(|n| has_class(n, "unload"))
        .collect();
    assert_eq!(unloads.len(), timeline.unloads.len());
    assert_eq!(unloads[0].attribute("data-model"), Some("b"));
    assert_eq!(unloads[0].attribute("data-reason"), Some("idle"));
    assert_eq!(
        count(&svg, "switch"),
        4,
        "three loads with a reason, one cancel"
    );
    // Each mark's letter, in time order: the unload at 100 s between.
    let letters: Vec<String> = tree
        .descendants()
        .filter(|n| has_class(n, "switch") || has_class(n, "unload"))
        .map(|n| {
            n.descendants()
                .filter(|t| t.has_tag_name("text"))
                .map(|t| t.text().unwrap_or_default().trim().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(letters, ["G", "I", "P", "Q", "A"]);
}

#[test]
fn a_model_is_resident_until_its_unload_the_next_load_or_its_runs_end() {
    // The switching run ends at 175 s; a second run to 350 s makes the
    // shared axis twice as long.
    let mut longer = switching();
    longer.requests.pop();
    longer.loads.pop();
    longer.loads.push(with_reason(
        load("a", secs(170), secs(175)),
        SwitchReason::QueueDrained,
    ));
    longer.requests.push(loaded("a", 165, 170, 175, 350));
    let runs = [
        run("router", Policy::Router, switching()),
        run("longer", Policy::Router, longer),
    ];
    let svg = draw(&two_models(), &runs);
    let end = 350.0;
    let spans: Vec<(String, f64, f64)> = residents(&svg, "router")
        .into_iter()
        .map(|(model, from, until, _)| (model, from, until))
        .collect();
    let expected = [
        ("a", 10.0, 50.0),  // until b's load
        ("b", 60.0, 100.0), // until its idle unload
        ("a", 130.0, 150.0),
        ("b", 160.0, 170.0), // until the abandoned load
    ];
    assert_eq!(spans.len(), expected.len(), "{spans:?}");
    for ((model, from, until), (want, start, stop)) in spans.iter().zip(expected) {
        assert_eq!(model, want);
        assert!(close(*from, at(start, end)), "{spans:?}");
        assert!(close(*until, at(stop, end)), "{spans:?}");
    }
    // Nothing is drawn loaded past the run's own end, in either panel.
    let (_, _, last, _) = residents(&svg, "longer").pop().unwrap();
    assert!(close(last, at(350.0, end)));
    let mut ending = switching();
    ending.loads.pop();
    ending.requests.pop();
    let runs = [
        run("router", Policy::Router, ending),
        run("longer", Policy::Router, runs[1].timeline.clone()),
    ];
    let svg = draw(&two_models(), &runs);
    let (model, _, until, _) = residents(&svg, "router").pop().unwrap();
    assert_eq!(model, "b");
    assert!(close(until, at(170.0, end)), "{until}: the run's end");
}

#[test]
fn grace_is_the_loaded_model_idle_while_another_model_waits() {
    let timeline = switching();
    let residencies = residency::residencies(&timeline, false);
    let stretches: Vec<(&str, u64, u64)> = residency::grace(&timeline, &residencies)
        .into_iter()
        .map(|g| (g.model, g.from.as_secs(), g.until.as_secs()))
        .collect();
    // a idles 30-35 and 40-50 while b's request waits (a's own request
    // 35-40 between); b has nothing waiting beside it; a idles again 140-150.
    assert_eq!(stretches, [("a", 30, 35), ("a", 40, 50), ("a", 140, 150)]);
    let svg = drawing(&two_models(), timeline);
    assert_eq!(count(&svg, "grace"), 3);
    // The ideal bound has none.
    let svg = draw(&two_models(), &[run("ideal", Policy::Ideal, switching())]);
    assert_eq!(count(&svg, "grace"), 0);
}

#[test]
fn the_ideal_panel_keeps_every_model_resident_after_its_first_load() {
    let timeline = Timeline {
        // Loaded in parallel; a loaded again would change nothing.
        loads: vec![
            load("a", secs(0), secs(10)),
            load("b", secs(5), secs(20)),
            load("a", secs(30), secs(31)),
        ],
        unloads: Vec::new(),
        forecasts: None,
        requests: vec![
            request("a", secs(0), secs(10), secs(30)),
            request("b", secs(5), secs(20), secs(40)),
        ],
    };
    let svg = draw(
        &two_models(),
        &[run("ideal", Policy::Ideal, timeline.clone())],
    );
    let spans = residents(&svg, "ideal");
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (a, b) = (&spans[0], &spans[1]);
    assert_eq!((a.0.as_str(), b.0.as_str()), ("a", "b"));
    assert!(close(a.1, at(10.0, 40.0)) && close(b.1, at(20.0, 40.0)));
    assert!(close(a.2, at(40.0, 40.0)) && close(b.2, at(40.0, 40.0)));
    assert!(a.3 < b.3, "one row each: {spans:?}");
    // The same loads one at a time: each gives way to the next.
    let svg = draw(&two_models(), &[run("router", Policy::Router, timeline)]);
    let spans = residents(&svg, "router");
    assert!(close(spans[0].2, at(10.0, 40.0)), "{spans:?}");
}

#[test]
fn the_legend_names_every_shade_reason_and_tier() {
    let svg = drawing(&two_models(), switching());
    let tree = roxmltree::Document::parse(&svg).expect("valid XML");
    let legend = tree
        .descendants()
        .find(|n| has_class(n, "legend"))
        .expect("a legend");
    let texts: Vec<&str> = legend
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    let mut wanted = vec![
        "loading",
        "I idle unload",
        "queued",
        "waiting for a load",
        "generating",
        "not completed",
        "priority tier",
        "default tier",
        "flex tier",
    ];
    for reason in SwitchReason::ALL {
        if !matches!(reason, SwitchReason::Operator | SwitchReason::Idle) {
            wanted.push(reason.as_str());
        }
    }
    for text in wanted {
        assert!(texts.contains(&text), "{text}: {texts:?}");
    }
    assert!(texts.iter().any(|t| t.starts_with("grace: ")), "{texts:?}");
}

#[test]
fn tiers_are_distinguishable_on_the_bars() {
    let requests = ServiceTier::ALL
        .into_iter()
        .enumerate()
        .map(|(i, tier)| RequestSpan {
            tier,
            ..request("a", secs(i as u64), secs(10), secs(20))
        })
        .collect();
    let timeline = Timeline {
        loads: vec![load("a", secs(0), secs(10))],
        unloads: Vec::new(),
        forecasts: None,
        requests,
    };
    let svg = drawing(&two_models(), timeline);
    let tree = roxmltree::Document::parse(&svg).expect("valid XML");
    let bars: Vec<roxmltree::Node> = tree
        .descendants()
        .filter(|n| has_class(n, "request"))
        .collect();
    let look = |bar: &roxmltree::Node| {
        let outlined = bar.children().any(|n| has_class(&n, "outline"));
        let generating = bar
            .children()
            .find(|n| has_class(n, "generating"))
            .expect("generating");
        (
            bar.attribute("data-tier").unwrap_or_default().to_owned(),
            outlined,
            number(&generating, "fill-opacity"),
        )
    };
    let looks: Vec<(String, bool, f64)> = bars.iter().map(look).collect();
    assert_eq!(
        looks,
        [
            ("priority".to_owned(), true, 1.0),
            ("default".to_owned(), false, 1.0),
            ("flex".to_owned(), false, lanes::FLEX_OPACITY),
        ]
    );
}

#[test]
fn a_lane_needing_more_than_max_rows_is_aggregated_and_bars_are_tall() {
    let overlapping = |n: u64| Timeline {
        loads: vec![load("a", secs(0), secs(1))],
        unloads: Vec::new(),
        forecasts: None,
        requests: (0..n)
            .map(|i| request("a", secs(i), secs(100), secs(100 + i)))
            .collect(),
    };
    let rows = lanes::MAX_ROWS as u64;
    let svg = drawing(&two_models(), overlapping(rows));
    assert_eq!(count(&svg, "request"), lanes::MAX_ROWS);
    assert_eq!(count(&svg, "aggregated"), 0);
    let tree = roxmltree::Document::parse(&svg).expect("valid XML");
    let queued = tree
        .descendants()
        .find(|n| has_class(n, "queued"))
        .expect("a bar");
    assert!(number(&queued, "height") >= 6.0, "tall enough to see");
    let svg = drawing(&two_models(), overlapping(rows + 1));
    assert_eq!(count(&svg, "request"), 0);
    assert_eq!(count(&svg, "aggregated"), 1, "lane a only");
}
