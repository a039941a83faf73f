//! `prefetch_predict` in a simulation: when the router's prefetch may read
//! the forecast's model (the engine's rule, `supervisor/src/engine/
//! prediction.rs`, on what a simulation has), and how often the forecast
//! named the model that was loaded next.
//!
//! The forecast itself is the engine's ([`strata_scheduler::Forecast`]),
//! fed every arrival. It runs while the plan names no next model, nothing
//! waits for a model other than the loaded one, and no load, stop or switch
//! is under way; the plan's real next model replaces it at once.

use serde::Serialize;
use strata_scheduler::{BackendView, Decision, Plan, View};

/// What the prefetch is told to read after a decision.
pub(crate) enum ReadNext {
    /// The plan's next model (`strata_scheduler::next_switch`).
    Named(String),
    /// Nothing is named and the forecast may run; the loaded model, if any.
    Predict(Option<String>),
    /// Nothing.
    Nothing,
}

/// Whether the forecast may pick what to read after `plan` on `view`.
pub(crate) fn may_predict(view: &View, plan: &Plan) -> bool {
    let quiet_backend = matches!(
        view.backend,
        BackendView::Serving { .. } | BackendView::Empty
    );
    let switching = plan.decisions.iter().any(|decision| {
        matches!(
            decision,
            Decision::StartLoad { .. } | Decision::CancelLoad | Decision::Unload
        )
    });
    let loaded = loaded_model(view);
    let other_waits = view
        .queue
        .iter()
        .any(|ticket| Some(ticket.model.as_str()) != loaded);
    quiet_backend && !switching && !other_waits
}

/// The model a verified backend serves.
pub(crate) fn loaded(view: &View) -> Option<String> {
    loaded_model(view).map(str::to_owned)
}

fn loaded_model<'a>(view: &View<'a>) -> Option<&'a str> {
    match view.backend {
        BackendView::Serving { model } => Some(model),
        _ => None,
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
    /// The forecast named `model` (or nothing).
    pub(crate) fn predicted(&mut self, model: Option<&str>) {
        self.last = model.map(str::to_owned);
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
        count.predicted(Some("b"));
        count.predicted(Some("c"));
        count.load_starts("c");
        count.predicted(Some("a"));
        count.load_starts("b");
        count.load_starts("a");
        assert_eq!((count.loads, count.hits), (2, 1));
        assert_eq!(count.figures().hit_rate, 0.5);
    }
}
