//! What the backend band shows, derived from a run's timeline alone: when
//! each model was resident, and the grace stretches (the GPU idle while a
//! request for another model waits).
//!
//! Residency: a verified load's model is resident from the load's end
//! until the next load starts (one model at a time: the next load replaces
//! it), its idle unload, or the run's own end (its last request's end,
//! never the end of the axis shared with other runs). Under the `ideal`
//! bound every model stays resident from its first load's end to the end
//! of the run.
//!
//! Grace: a stretch of a residency where none of the resident model's
//! requests is generating while a request for another model waits
//! (arrived, and not yet admitted to a load, granted or given up). The
//! router idles there in `model_grace_ms` before it switches (or until the
//! resident model is asked again); fifo and collate switch at once, so
//! theirs have no length. The `ideal` bound has none: nothing waits for
//! another model to give way.

use std::collections::HashMap;
use std::time::Duration;

use strata_sim::{LoadOutcome, Timeline};

/// How a residency ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The next load started.
    Replaced,
    /// An idle unload.
    Unloaded,
    /// The run ended with the model still loaded.
    RunEnd,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Residency<'a> {
    pub model: &'a str,
    pub from: Duration,
    pub until: Duration,
    pub ended: Ended,
}

/// A stretch of time the resident `model` idled while another model's
/// request waited.
#[derive(Debug, Clone, PartialEq)]
pub struct Grace<'a> {
    pub model: &'a str,
    pub from: Duration,
    pub until: Duration,
}

/// The run's own end: its last request's end, or a later load or unload.
pub fn run_end(timeline: &Timeline) -> Duration {
    let loads = timeline.loads.iter().map(|load| load.end);
    let unloads = timeline.unloads.iter().map(|unload| unload.at);
    loads.chain(unloads).fold(timeline.span().1, Duration::max)
}

/// Every residency, in load order. `every_model_kept`: the `ideal` bound,
/// where a load replaces nothing.
pub fn residencies(timeline: &Timeline, every_model_kept: bool) -> Vec<Residency<'_>> {
    let end = run_end(timeline);
    let verified =
        |index: usize| matches!(timeline.loads[index].outcome, LoadOutcome::Verified { .. });
    if every_model_kept {
        let mut seen: Vec<&str> = Vec::new();
        return (0..timeline.loads.len())
            .filter(|index| verified(*index))
            .filter_map(|index| {
                let load = &timeline.loads[index];
                if seen.contains(&load.model.as_str()) {
                    return None;
                }
                seen.push(&load.model);
                Some(Residency {
                    model: &load.model,
                    from: load.end,
                    until: end.max(load.end),
                    ended: Ended::RunEnd,
                })
            })
            .collect();
    }
    (0..timeline.loads.len())
        .filter(|index| verified(*index))
        .map(|index| {
            let load = &timeline.loads[index];
            let next = timeline.loads.get(index + 1).map(|next| next.start);
            let first_unload = timeline
                .unloads
                .partition_point(|unload| unload.at < load.end);
            let unload = timeline.unloads.get(first_unload).map(|unload| unload.at);
            let (until, ended) = match (next, unload) {
                (next, Some(at)) if next.is_none_or(|next| at <= next) => (at, Ended::Unloaded),
                (Some(next), _) => (next, Ended::Replaced),
                (None, _) => (end, Ended::RunEnd),
            };
            Residency {
                model: &load.model,
                from: load.end,
                until: until.max(load.end),
                ended,
            }
        })
        .collect()
}

/// What changes at one instant of the sweep.
#[derive(Clone, Copy)]
enum Change<'a> {
    Waiting(&'a str, i64),
    Generating(&'a str, i64),
    Resident(Option<&'a str>),
}

/// The grace stretches of one-model-at-a-time residencies (see the module
/// doc), in time order: one sweep over every request's waiting and
/// generating spans.
pub fn grace<'a>(timeline: &'a Timeline, residencies: &[Residency<'a>]) -> Vec<Grace<'a>> {
    let mut changes: Vec<(Duration, Change<'a>)> = Vec::new();
    for request in &timeline.requests {
        let model = request.model.as_str();
        let waited_until = request.admitted.or(request.granted).unwrap_or(request.end);
        if waited_until > request.arrival {
            changes.push((request.arrival, Change::Waiting(model, 1)));
            changes.push((waited_until, Change::Waiting(model, -1)));
        }
        if let Some(granted) = request.granted.filter(|granted| request.end > *granted) {
            changes.push((granted, Change::Generating(model, 1)));
            changes.push((request.end, Change::Generating(model, -1)));
        }
    }
    for residency in residencies {
        if residency.until > residency.from {
            changes.push((residency.from, Change::Resident(Some(residency.model))));
            changes.push((residency.until, Change::Resident(None)));
        }
    }
    // A residency's end before the next one's start at the same instant.
    changes.sort_by_key(|(at, change)| (*at, matches!(change, Change::Resident(Some(_)))));
    let mut waiting: HashMap<&str, i64> = HashMap::new();
    let mut generating: HashMap<&str, i64> = HashMap::new();
    let mut waiting_total = 0i64;
    let mut resident: Option<&str> = None;
    let mut stretches: Vec<Grace<'a>> = Vec::new();
    let mut open: Option<(&str, Duration)> = None;
    let mut index = 0;
    while index < changes.len() {
        let at = changes[index].0;
        while index < changes.len() && changes[index].0 == at {
            match changes[index].1 {
                Change::Waiting(model, delta) => {
                    *waiting.entry(model).or_default() += delta;
                    waiting_total += delta;
                }
                Change::Generating(model, delta) => {
                    *generating.entry(model).or_default() += delta;
                }
                Change::Resident(model) => resident = model,
            }
            index += 1;
        }
        // The state from `at` to the next change.
        let idle_in_grace = resident.filter(|model| {
            generating.get(model).copied().unwrap_or(0) == 0
                && waiting_total - waiting.get(model).copied().unwrap_or(0) > 0
        });
        match (open, idle_in_grace) {
            (Some((model, _)), Some(now)) if model == now => {}
            (_, now) => {
                if let Some((model, from)) = open.take()
                    && at > from
                {
                    stretches.push(Grace {
                        model,
                        from,
                        until: at,
                    });
                }
                open = now.map(|model| (model, at));
            }
        }
    }
    stretches
}
