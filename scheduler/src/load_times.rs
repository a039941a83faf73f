//! How long each model's loads take, learned from its last successful ones:
//! what the waiting stream's `usually 20s`, `strata-ctl on` and `top`,
//! `/v1/models` `typical_load_ms` and a load failure's `Retry-After` say
//! instead of the `startup_ms` limit, and what the hold bound's floor
//! counts ([`crate::Rules::effective_hold`]). In memory only: a new
//! supervisor learns again from its first load (which shows the limit, as
//! before). Here, beside the decision, so the simulator learns the same way
//! as the engine.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Loads remembered per model: few enough that a changed machine (a warm
/// page cache, another disk) shows within a few loads, enough that one odd
/// load does not move the median far.
pub const WINDOW: usize = 5;

#[derive(Debug, Default)]
pub struct LoadTimes {
    by_model: BTreeMap<String, VecDeque<u64>>,
    /// Each learned model's typical load, kept for the scheduler's view
    /// (its hold floor).
    typical: BTreeMap<String, Duration>,
}

impl LoadTimes {
    /// A verified load of `model` took `load_ms`.
    pub fn learn(&mut self, model: &str, load_ms: u64) {
        let window = self.by_model.entry(model.to_owned()).or_default();
        if window.len() == WINDOW {
            window.pop_front();
        }
        window.push_back(load_ms);
        if let Some(ms) = self.typical_ms(model) {
            self.typical
                .insert(model.to_owned(), Duration::from_millis(ms));
        }
    }

    /// Every learned model's typical load time.
    pub fn typical(&self) -> &BTreeMap<String, Duration> {
        &self.typical
    }

    /// The median of `model`'s remembered loads (the mean of the middle two
    /// for an even count); `None` before its first.
    pub fn typical_ms(&self, model: &str) -> Option<u64> {
        let window = self.by_model.get(model)?;
        let mut sorted: Vec<u64> = window.iter().copied().collect();
        sorted.sort_unstable();
        let middle = sorted.len() / 2;
        match sorted.len() {
            0 => None,
            n if n % 2 == 1 => Some(sorted[middle]),
            _ => Some((sorted[middle - 1] + sorted[middle]) / 2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typical_load_is_the_median_of_the_last_five() {
        let mut times = LoadTimes::default();
        assert_eq!(times.typical_ms("a"), None);
        times.learn("a", 20_000);
        assert_eq!(times.typical_ms("a"), Some(20_000));
        times.learn("a", 10_000);
        assert_eq!(times.typical_ms("a"), Some(15_000));
        times.learn("a", 90_000);
        assert_eq!(times.typical_ms("a"), Some(20_000), "one slow load");
        for _ in 0..WINDOW {
            times.learn("a", 4_000);
        }
        assert_eq!(
            times.typical_ms("a"),
            Some(4_000),
            "the old loads are forgotten"
        );
        assert_eq!(times.typical_ms("b"), None, "per model");
    }
}
