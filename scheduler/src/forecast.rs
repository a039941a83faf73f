//! Which model is likely asked for next, from the requests seen lately:
//! what the weights prefetch reads ahead under `prefetch_predict`.
//!
//! The rule, exactly: each arrival of a request for a model weighs
//! `exp(-age / 15 min)`, and arrivals more than one hour old weigh nothing;
//! a model's weight is the sum over its arrivals. The likely next model is
//! the candidate (the caller says which models may be named: the
//! supervisor's are the enabled ones with a weights list) other than the
//! loaded one with the greatest weight; on a tie (weights within a
//! billionth of each other) the one asked for most recently, then the first
//! by name. Arrivals of one model within one second of the first of them
//! count as arriving with that first one (which changes a weight by at most
//! a 900th), so at most 3,600 are kept per model and a weight costs one
//! multiplication to read.
//!
//! Pure: arrivals in, a model out, the clock passed in (`tokio`'s
//! [`Instant`], so the simulator's virtual clock and the engine's real one
//! both fit). The supervisor's engine feeds it every ticket it numbers; the
//! simulator can feed it its workload's arrivals the same way.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// Arrivals older than this weigh nothing.
pub const WINDOW: Duration = Duration::from_secs(3600);
/// The recency scale: an arrival this old weighs `1/e`.
pub const TAU: Duration = Duration::from_secs(15 * 60);
/// Arrivals of one model within this of the first of them are kept as one.
pub const BUCKET: Duration = Duration::from_secs(1);

/// Two weights this close (relative) are a tie.
const TIE: f64 = 1e-9;

/// The recent arrivals of every model.
#[derive(Debug, Clone, Default)]
pub struct Forecast {
    models: BTreeMap<String, Arrivals>,
}

/// One model's arrivals in the window.
#[derive(Debug, Clone)]
struct Arrivals {
    /// (first arrival of the bucket, arrivals in it), oldest first.
    buckets: VecDeque<(Instant, u32)>,
    /// The sum over the buckets of `count * exp(-(newest - start) / τ)`,
    /// where `newest` is the newest bucket's start: the model's weight at
    /// that instant.
    weight_at_newest: f64,
    /// The latest arrival itself (ties go to the most recent).
    latest: Instant,
}

impl Forecast {
    pub fn new() -> Forecast {
        Forecast::default()
    }

    /// A request for `model` arrived at `at`. Arrivals come in time order;
    /// one earlier than the model's latest counts at its latest.
    pub fn arrive(&mut self, model: &str, at: Instant) {
        let Some(arrivals) = self.models.get_mut(model) else {
            self.models.insert(
                model.to_owned(),
                Arrivals {
                    buckets: VecDeque::from([(at, 1)]),
                    weight_at_newest: 1.0,
                    latest: at,
                },
            );
            return;
        };
        let at = at.max(arrivals.latest);
        arrivals.latest = at;
        let (newest, count) = arrivals
            .buckets
            .back_mut()
            .expect("a model's entry has an arrival");
        if at.duration_since(*newest) < BUCKET {
            *count += 1;
            arrivals.weight_at_newest += 1.0;
        } else {
            arrivals.weight_at_newest = arrivals.weight_at_newest * decay(at - *newest) + 1.0;
            arrivals.buckets.push_back((at, 1));
        }
    }

    /// The weight of `model` at `now` (0 when it had no arrival in the
    /// last hour).
    pub fn weight(&mut self, model: &str, now: Instant) -> f64 {
        self.forget_before(now);
        self.models
            .get(model)
            .map_or(0.0, |arrivals| arrivals.weight(now))
    }

    /// The model most likely asked for next at `now`: the heaviest of the
    /// models `candidate` accepts other than `loaded` (see the module doc
    /// for the rule and its ties); `None` when none of them was asked for
    /// in the last hour.
    pub fn likely_next(
        &mut self,
        now: Instant,
        loaded: Option<&str>,
        candidate: impl Fn(&str) -> bool,
    ) -> Option<&str> {
        self.forget_before(now);
        let mut best: Option<(&str, f64, Instant)> = None;
        for (model, arrivals) in &self.models {
            if Some(model.as_str()) == loaded || !candidate(model) {
                continue;
            }
            let weight = arrivals.weight(now);
            let better = match best {
                None => true,
                Some((_, best_weight, best_latest)) => {
                    if (weight - best_weight).abs() <= TIE * weight.max(best_weight) {
                        arrivals.latest > best_latest
                    } else {
                        weight > best_weight
                    }
                }
            };
            if better {
                best = Some((model, weight, arrivals.latest));
            }
        }
        best.map(|(model, _, _)| model)
    }

    /// Drops every arrival more than [`WINDOW`] before `now`, and a model
    /// with none left.
    fn forget_before(&mut self, now: Instant) {
        self.models.retain(|_, arrivals| {
            let newest = arrivals.buckets.back().expect("an arrival").0;
            while let Some(&(start, count)) = arrivals.buckets.front() {
                if now.saturating_duration_since(start) <= WINDOW {
                    break;
                }
                arrivals.buckets.pop_front();
                arrivals.weight_at_newest -= f64::from(count) * decay(newest - start);
            }
            // What is left can only be positive; rounding must not say
            // otherwise.
            arrivals.weight_at_newest = arrivals.weight_at_newest.max(0.0);
            !arrivals.buckets.is_empty()
        });
    }
}

impl Arrivals {
    fn weight(&self, now: Instant) -> f64 {
        let newest = self.buckets.back().expect("an arrival").0;
        self.weight_at_newest * decay(now.saturating_duration_since(newest))
    }
}

/// `exp(-age / τ)`.
fn decay(age: Duration) -> f64 {
    (-age.as_secs_f64() / TAU.as_secs_f64()).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn any(_: &str) -> bool {
        true
    }

    /// The weights the rule gives, summed by hand.
    #[test]
    fn each_arrival_weighs_its_recency_and_the_hour_bounds_them() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        forecast.arrive("b", start);
        forecast.arrive("b", start + 15 * MINUTE);
        let now = start + 30 * MINUTE;
        let expected = (-2.0f64).exp() + (-1.0f64).exp();
        assert!((forecast.weight("b", now) - expected).abs() < 1e-12);
        // An hour after the first arrival it still counts; a moment later
        // only the second one does.
        let at_hour = start + WINDOW;
        let expected = (-4.0f64).exp() + (-3.0f64).exp();
        assert!((forecast.weight("b", at_hour) - expected).abs() < 1e-12);
        let later = at_hour + Duration::from_millis(1);
        let expected = (-(45.0 * 60.0 + 0.001) / 900.0f64).exp();
        assert!((forecast.weight("b", later) - expected).abs() < 1e-12);
        assert_eq!(forecast.weight("c", later), 0.0, "never asked for");
        // Two hours on nothing is left of b.
        assert_eq!(forecast.weight("b", start + 2 * WINDOW), 0.0);
        assert_eq!(forecast.likely_next(start + 2 * WINDOW, None, any), None);
        assert!(forecast.models.is_empty(), "b's entry is gone");
    }

    /// Recent requests outweigh more numerous old ones: three requests for
    /// b 50 minutes ago (3e^-3.3 = 0.11) against one for c a minute ago
    /// (0.94).
    #[test]
    fn recency_outweighs_old_numbers() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        for second in 0..3 {
            forecast.arrive("b", start + Duration::from_secs(10 * second));
        }
        let mut soon = forecast.clone();
        forecast.arrive("c", start + 49 * MINUTE);
        assert_eq!(
            forecast.likely_next(start + 50 * MINUTE, None, any),
            Some("c")
        );
        // Ten minutes after b's requests, three of them still outweigh one
        // a minute old (1.56 against 0.94).
        soon.arrive("c", start + 9 * MINUTE);
        assert_eq!(soon.likely_next(start + 10 * MINUTE, None, any), Some("b"));
    }

    /// The loaded model and models the caller excludes are never named.
    #[test]
    fn the_loaded_model_and_non_candidates_are_skipped() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        for second in 0..5 {
            forecast.arrive("a", start + Duration::from_secs(2 * second));
        }
        forecast.arrive("b", start);
        forecast.arrive("c", start + Duration::from_secs(2));
        forecast.arrive("c", start + Duration::from_secs(4));
        let now = start + MINUTE;
        assert_eq!(forecast.likely_next(now, None, any), Some("a"));
        assert_eq!(forecast.likely_next(now, Some("a"), any), Some("c"));
        assert_eq!(
            forecast.likely_next(now, Some("a"), |model| model != "c"),
            Some("b")
        );
        assert_eq!(
            forecast.likely_next(now, Some("a"), |model| model == "a"),
            None
        );
    }

    /// Equal weights: the model asked for most recently wins, then the
    /// first by name.
    #[test]
    fn ties_go_to_the_most_recent_then_the_name() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        // Both weigh two arrivals at `start` (one bucket each); c's second
        // came later.
        forecast.arrive("b", start);
        forecast.arrive("c", start);
        forecast.arrive("b", start + Duration::from_millis(200));
        forecast.arrive("c", start + Duration::from_millis(700));
        let now = start + MINUTE;
        assert_eq!(forecast.weight("b", now), forecast.weight("c", now));
        assert_eq!(forecast.likely_next(now, None, any), Some("c"));
        // The same arrivals exactly: the name decides.
        let mut forecast = Forecast::new();
        forecast.arrive("c", start);
        forecast.arrive("b", start);
        assert_eq!(forecast.likely_next(now, None, any), Some("b"));
    }

    /// Arrivals within a second share one bucket and its instant; many of
    /// them keep at most one entry per second, and a long run of them
    /// keeps the weight the rule gives (no drift from the running sum).
    #[test]
    fn many_arrivals_are_kept_per_second_and_weigh_as_summed() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        let step = Duration::from_millis(100);
        let arrivals = 3 * 36_000; // ten a second for three hours
        for i in 0..arrivals {
            forecast.arrive("b", start + step * i);
        }
        let now = start + step * (arrivals - 1);
        let weight = forecast.weight("b", now);
        // The last hour's buckets of ten, each weighed by its start.
        let expected: f64 = (0..3600)
            .map(|second| 10.0 * decay(Duration::from_secs(second) + Duration::from_millis(900)))
            .sum();
        assert!(
            (weight - expected).abs() < 1e-6 * expected,
            "{weight} against {expected}"
        );
        assert!(forecast.models["b"].buckets.len() <= 3601);
    }

    /// An arrival stamped before the model's latest (clocks read in
    /// another order) counts at the latest.
    #[test]
    fn an_arrival_out_of_order_counts_at_the_latest() {
        let start = Instant::now();
        let mut forecast = Forecast::new();
        forecast.arrive("b", start + MINUTE);
        forecast.arrive("b", start);
        assert!((forecast.weight("b", start + MINUTE) - 2.0).abs() < 1e-12);
    }
}
