//! `prefetch_predict` in a simulation: the engine's own step
//! ([`strata_scheduler::prediction`]) on what a simulation has, and how
//! often the forecast named the model that was loaded next.
//!
//! The forecast is fed every arrival. The step runs after each decision
//! while the plan names no next model; a plan that starts, cancels or
//! unloads counts as a load or stop running, as it is by the time the
//! engine asks. Every model of the workload is a candidate (each has
//! weights; one past `prefetch_max_bytes` is not read, as in the router).

use serde::Serialize;
use strata_scheduler::prediction::Facts;
use strata_scheduler::{BackendView, Decision, Plan, View};

/// What the prefetch is told to read after a decision.
pub(crate) enum ReadNext {
    /// The plan's next model (`strata_scheduler::next_switch`).
    Named(String),
    /// Nothing is named; what the prediction names, if anything.
    Predicted(Option<String>),
    /// Nothing is named and nothing is predicted.
    Nothing,
}

/// The facts the engine's prediction step reads, as a simulation has them
/// after `plan` on `view` (routing always on; no operator, drain or
/// restart in a simulation).
pub(crate) fn facts<'a>(view: &View<'a>, plan: &Plan) -> Facts<'a> {
    let switching = plan.decisions.iter().any(|decision| {
        matches!(
            decision,
            Decision::StartLoad { .. } | Decision::CancelLoad | Decision::Unload
        )
    });
    let (serving, busy) = match view.backend {
        BackendView::Serving { model } => (Some(model), false),
        BackendView::Empty => (None, false),
        BackendView::Loading { .. } | BackendView::Busy => (None, true),
    };
    Facts {
        serving,
        queue: view.queue,
        op_running: busy || switching,
        operator_running: false,
        routing: true,
        held: false,
        cooldowns: view.cooldowns,
    }
}

/// How the forecasts fared: of the loads that started after a forecast,
/// how many loaded the model it named last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForecastCount {
    /// Loads that started with a forecast made before them.
    pub loads: u64,
    /// Of those, the loads of the model the last forecast named.
    pub hits: u64,
    /// The last forecast since the previous load.
    last: Option<String>,
}

impl ForecastCount {
    /// The forecast named `model` (a step that named none, or did not
    /// run, leaves the last forecast standing).
    pub(crate) fn predicted(&mut self, model: &str) {
        if self.last.as_deref() != Some(model) {
            self.last = Some(model.to_owned());
        }
    }

    /// A load of `model` starts.
    pub(crate) fn load_starts(&mut self, model: &str) {
        if let Some(last) = self.last.take() {
            self.loads += 1;
            self.hits += u64::from(last == model);
        }
    }

    /// The figures for `--json` and the table.
    pub fn figures(&self) -> ForecastFigures {
        ForecastFigures {
            loads: self.loads,
            hits: self.hits,
            hit_rate: if self.loads == 0 {
                0.0
            } else {
                (self.hits as f64 / self.loads as f64 * 1000.0).round() / 1000.0
            },
        }
    }
}

/// [`ForecastCount`] as the metrics show it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ForecastFigures {
    pub loads: u64,
    pub hits: u64,
    pub hit_rate: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_counts_against_the_last_forecast_before_it() {
        let mut count = ForecastCount::default();
        // No forecast before the first load: not counted.
        count.load_starts("a");
        count.predicted("b");
        count.predicted("c");
        count.load_starts("c");
        count.predicted("a");
        count.load_starts("b");
        count.load_starts("a");
        assert_eq!((count.loads, count.hits), (2, 1));
        assert_eq!(count.figures().hit_rate, 0.5);
    }
}
