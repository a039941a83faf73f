//! Warm loads in whole simulations, worked out by hand: the router's load
//! of a model that waited is shorter by what its prefetch read, the
//! baselines load cold, the ideal bound loads warm, a replay assumes every
//! load cold, and a workload without warm times runs as before.

use std::time::Duration;

use strata_scheduler::Mode;

use super::*;
use crate::prefetch::MB;
use crate::tests::{ms, request, settings, workload};

/// `a` loads in 1 s; `b` in 10 s cold and 2 s warm, with 1000 MB of
/// weights. `a`'s request generates for 5 s from its load's end at 1 s;
/// `b`'s arrives at 1 s and waits for it.
fn a_then_b() -> Workload {
    let mut w = workload(&[("a", 1000), ("b", 10_000)]);
    let warm = WarmLoad {
        load: ms(2000),
        weights_mb: 1000,
    };
    w.warm.insert("b".into(), warm);
    w.requests = vec![request(0, "a", 5000), request(1000, "b", 100)];
    w
}

/// No grace; the prefetch reads 100 MB/s (all of `b` in 10 s).
fn reading() -> Settings {
    Settings {
        read_ahead: Some(ReadAhead {
            bytes_per_s: 100 * MB,
            max_bytes: u64::MAX,
            predict: false,
        }),
        ..settings(Mode::WaitFirst, 0)
    }
}

fn load_of(timeline: &Timeline, model: &str) -> (Duration, Duration) {
    let load = timeline.loads.iter().find(|l| l.model == model).unwrap();
    (load.start, load.end)
}

#[test]
fn the_routers_load_is_shorter_by_what_the_wait_let_it_read() {
    let w = a_then_b();
    let timeline = simulate(&w, &reading(), Policy::Router);
    // b was named next from a's readiness (1 s) to the end of a's
    // generation (6 s): 5 s at 100 MB/s is half of b's weights, so its
    // load takes half way from 10 s to 2 s.
    assert_eq!(load_of(&timeline, "b"), (ms(6000), ms(6000 + 6000)));
    assert_eq!(timeline.requests[1].wait(), Some(ms(12_000 - 1000)));
    // A longer wait reads it all: never faster than warm.
    let mut long = a_then_b();
    long.requests[0].service = ms(60_000);
    let timeline = simulate(&long, &reading(), Policy::Router);
    assert_eq!(load_of(&timeline, "b"), (ms(61_000), ms(63_000)));
    // A slower read rate reads less in the same wait.
    let mut slow = reading();
    slow.read_ahead.as_mut().unwrap().bytes_per_s = 20 * MB;
    let timeline = simulate(&w, &slow, Policy::Router);
    // 5 s at 20 MB/s: a tenth; 10 s - 0.8 s.
    assert_eq!(load_of(&timeline, "b"), (ms(6000), ms(6000 + 9200)));
    // Without the prefetch (`prefetch: false`, or a model past
    // `prefetch_max_bytes`) the router's load is cold.
    let mut off = reading();
    off.read_ahead = None;
    let timeline = simulate(&w, &off, Policy::Router);
    assert_eq!(load_of(&timeline, "b"), (ms(6000), ms(16_000)));
    let mut bounded = reading();
    bounded.read_ahead.as_mut().unwrap().max_bytes = 999 * MB;
    assert_eq!(simulate(&w, &bounded, Policy::Router), timeline);
}

#[test]
fn the_baselines_load_cold_and_the_ideal_bound_warm() {
    let w = a_then_b();
    for policy in [Policy::Fifo, Policy::Collate] {
        let timeline = simulate(&w, &reading(), policy);
        assert_eq!(
            load_of(&timeline, "b"),
            (ms(6000), ms(16_000)),
            "{policy:?}"
        );
    }
    // Every model resident after one load, and that one warm.
    let ideal = simulate(&w, &reading(), Policy::Ideal);
    assert_eq!(load_of(&ideal, "b"), (ms(1000), ms(3000)));
}

#[test]
fn a_replay_assumes_every_load_cold() {
    use crate::records::reading::{lines, record};
    // b's loads took 8 s and 4 s (median 4 s) in the real router: with or
    // without its prefetch, the records do not say.
    let log = lines(&[
        record(1, "a", 0, 0, Some(1000)),
        record(2, "b", 500, 0, Some(8000)),
        record(3, "a", 20_000, 0, Some(1000)),
        record(4, "b", 40_000, 0, Some(4000)),
    ]);
    let replayed = crate::records::replay(&[&log]).unwrap();
    assert!(replayed.workload.warm.is_empty());
    assert_eq!(replayed.workload.warm_load_time("b"), ms(4000));
    let timeline = simulate(&replayed.workload, &reading(), Policy::Router);
    for load in &timeline.loads {
        assert_eq!(
            load.end - load.start,
            replayed.workload.load_time(&load.model),
            "{load:?}"
        );
    }
}

#[test]
fn without_warm_times_the_prefetch_changes_nothing() {
    // Every built-in workload's default: the same timelines as a router
    // that does not read ahead, so the earlier results stand.
    for name in BUILT_IN {
        let w = generate(name, &Params::default(), &[]).unwrap();
        assert!(w.warm.is_empty(), "{name}");
        let mut off = reading();
        off.read_ahead = None;
        assert_eq!(
            simulate(&w, &reading(), Policy::Router),
            simulate(&w, &off, Policy::Router),
            "{name}"
        );
    }
    // With them the router's loads get shorter and nothing else does.
    let mut params = Params::default();
    params.set("warm_load_ms", 10_000);
    let warm = generate("agents", &params, &[]).unwrap();
    let cold = generate("agents", &Params::default(), &[]).unwrap();
    let rules = Settings {
        read_ahead: Some(ReadAhead {
            bytes_per_s: 1000 * MB,
            max_bytes: u64::MAX,
            predict: false,
        }),
        ..settings(Mode::WaitFirst, 3000)
    };
    for policy in [Policy::Fifo, Policy::Collate] {
        assert_eq!(
            simulate(&warm, &rules, policy),
            simulate(&cold, &rules, policy),
            "{policy:?}"
        );
    }
    let load_s = |w: &Workload| Metrics::of(&simulate(w, &rules, Policy::Router)).load_s;
    assert!(load_s(&warm) < load_s(&cold));
}

/// `prefetch_predict`: after b was asked for, a is loaded for its own
/// request and then idles; the forecast names b (the only other model
/// asked for) and reads it while nothing waits, so b's next load is warm.
/// Without the key nothing is read until b's request waits.
#[test]
fn the_forecast_reads_the_likely_next_model_while_nothing_waits() {
    let mut w = workload(&[("a", 1000), ("b", 10_000)]);
    w.warm.insert(
        "b".into(),
        WarmLoad {
            load: ms(2000),
            weights_mb: 1000,
        },
    );
    // b at 0 (cold load 0-10 s), a at 20 s (switch 20-21 s, served by
    // 21.1 s), then b again at 60 s: 39 s of a idle, enough to read b.
    w.requests = vec![
        request(0, "b", 100),
        request(20_000, "a", 100),
        request(60_000, "b", 100),
    ];
    let mut predicting = reading();
    predicting.read_ahead.as_mut().unwrap().predict = true;
    let with = simulate(&w, &predicting, Policy::Router);
    let without = simulate(&w, &reading(), Policy::Router);
    let last_b = |timeline: &Timeline| {
        let load = timeline.loads.iter().rfind(|l| l.model == "b").unwrap();
        (load.start, load.end)
    };
    // With the forecast: b warm (2 s); without: cold (10 s).
    assert_eq!(last_b(&with), (ms(60_000), ms(62_000)));
    assert_eq!(last_b(&without), (ms(60_000), ms(70_000)));
    assert_eq!(with.requests[2].wait(), Some(ms(2000)));
    // Its forecast named b before b's second load: one hit of one (the
    // first loads came before any forecast, a's after none).
    let count = with.forecasts.as_ref().unwrap();
    assert_eq!((count.loads, count.hits), (1, 1));
    assert_eq!(without.forecasts, None);
}
