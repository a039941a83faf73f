//! The weights prefetch as the simulator models it: how much of the next
//! model's weights the router's waiting time lets it read, and so how long
//! that model's load then takes.
//!
//! The real one (`supervisor/src/prefetch/`) reads the weights of the model
//! [`next_switch`](strata_scheduler::next_switch) names (a request for it
//! waits and it cannot start yet) at idle I/O priority, and stops as soon
//! as the plan names another model or any load starts. Here:
//!
//! - **What is read.** While the plan names model M, M's weights are read
//!   at [`ReadAhead::bytes_per_s`], up to its [`WarmLoad::weights_mb`]. A
//!   model whose weights are larger than [`ReadAhead::max_bytes`] (the
//!   config's `prefetch_max_bytes`) is not read, as in the router.
//!   `prefetch_min_free_bytes` is not modelled: the machine's memory is not.
//! - **What a load takes.** When M's load starts, a fraction `f` of its
//!   weights read ahead makes it take `cold - (cold - warm) x f`: the cold
//!   and warm times of [`Workload::load_time`] and [`Workload::warm_load_time`]
//!   (a model without a warm time loads cold whatever was read).
//! - **The page cache** holds the read-ahead of one model: reading another
//!   model's weights evicts what was read of the one before, and a load
//!   uses what was read of its model and leaves nothing warm behind (what
//!   a load itself reads is not counted, so no policy's load is warm
//!   unless the prefetch read for it; as if the memory held one model's
//!   weights besides the backend's). A prefetch that pauses (the plan
//!   names no model for a while) keeps what it read.
//!
//! Only the router's runs read ahead; the baselines (fifo, collate) load
//! cold, and the ideal bound loads warm (the best any policy could do).
//! With no warm times (every built-in workload's default, every replay)
//! every load is cold, as before this model existed.
//!
//! Time is accounted lazily: the reading model can only change at a
//! decision, so the bytes read are counted when the plan changes its wish
//! or a load starts, in whole nanoseconds and bytes (no floating point:
//! the same run gives the same figures everywhere).

use std::time::Duration;

use crate::workload::{WarmLoad, Workload};

/// The read rate the simulator assumes unless told otherwise: 1000 MB/s,
/// a modest NVMe disk read at idle priority (the test machine's virtio
/// disk read 644 MiB/s, `tests/benches/RESULTS.md`).
pub const DEFAULT_READ_MB_PER_S: u64 = 1000;

/// One megabyte as `weights_mb` and the read rate count it.
pub const MB: u64 = 1_000_000;

/// The router's prefetch, as a simulation runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadAhead {
    /// How fast the prefetch reads, in bytes per second (at least 1).
    pub bytes_per_s: u64,
    /// `prefetch_max_bytes`: a model whose weights are larger is not read.
    pub max_bytes: u64,
    /// `prefetch_predict`: while the plan names no next model and nothing
    /// waits for another one, read the model the forecast expects
    /// (`strata_scheduler::Forecast`, as the engine does).
    pub predict: bool,
}

/// What the simulated page cache holds of the weights, and what the
/// prefetch is reading.
#[derive(Debug, Default)]
pub(crate) struct PageCache {
    read_ahead: Option<ReadAhead>,
    /// The model the prefetch reads now, and since when.
    reading: Option<(String, Duration)>,
    /// The one model whose weights are (partly) resident, and how many
    /// bytes of them.
    resident: Option<(String, u64)>,
}

impl PageCache {
    /// A page cache that `read_ahead` fills (`None`: nothing is ever read
    /// ahead, every load is cold).
    pub(crate) fn new(read_ahead: Option<ReadAhead>) -> PageCache {
        PageCache {
            read_ahead,
            ..PageCache::default()
        }
    }

    /// Whether anything is ever read ahead.
    pub(crate) fn reads_ahead(&self) -> bool {
        self.read_ahead.is_some()
    }

    /// The model the prefetch reads now.
    pub(crate) fn reading(&self) -> Option<&str> {
        self.reading.as_ref().map(|(model, _)| model.as_str())
    }

    /// From `now` on, the plan names `next` as the model to read ahead
    /// (`None`: no model).
    pub(crate) fn want(&mut self, next: Option<&str>, now: Duration, workload: &Workload) {
        let Some(read_ahead) = self.read_ahead else {
            return;
        };
        if self.reading() == next {
            return;
        }
        self.catch_up(now, workload);
        self.reading = None;
        let Some(model) = next else {
            return;
        };
        if weights_bytes(workload.warm.get(model)) > read_ahead.max_bytes {
            return;
        }
        if self.resident.as_ref().is_none_or(|(held, _)| held != model) {
            self.resident = Some((model.to_owned(), 0));
        }
        self.reading = Some((model.to_owned(), now));
    }

    /// A load of `model` starts at `now`: the prefetch stops, the load uses
    /// what was read of `model`, and takes this long.
    pub(crate) fn load_starts(
        &mut self,
        model: &str,
        now: Duration,
        workload: &Workload,
    ) -> Duration {
        self.catch_up(now, workload);
        self.reading = None;
        let cold = workload.load_time(model);
        let read = match self.resident.take() {
            Some((held, bytes)) if held == model => bytes,
            _ => 0,
        };
        let Some(warm) = workload.warm.get(model) else {
            return cold;
        };
        warmed_load(cold, warm, read)
    }

    /// Counts what the prefetch read from its start (or the last count)
    /// to `now`.
    fn catch_up(&mut self, now: Duration, workload: &Workload) {
        let (Some(read_ahead), Some((model, since))) = (self.read_ahead, self.reading.as_mut())
        else {
            return;
        };
        let Some((held, bytes)) = self.resident.as_mut() else {
            return;
        };
        debug_assert_eq!(held, model, "the prefetch reads into the resident model");
        let nanos = now.saturating_sub(*since).as_nanos();
        let read = nanos.saturating_mul(u128::from(read_ahead.bytes_per_s)) / 1_000_000_000;
        let weights = weights_bytes(workload.warm.get(model.as_str()));
        *bytes = u64::try_from(u128::from(*bytes).saturating_add(read))
            .unwrap_or(u64::MAX)
            .min(weights);
        *since = now;
    }
}

/// The bytes of weights the prefetch reads for a model (a model without a
/// warm load has the default size: reading it takes as long, gains
/// nothing, and evicts the model read before).
fn weights_bytes(warm: Option<&WarmLoad>) -> u64 {
    let mb = warm.map_or(crate::workload::DEFAULT_WEIGHTS_MB, |warm| warm.weights_mb);
    mb.saturating_mul(MB)
}

/// The load time with `read` bytes of the weights resident: between the
/// cold and the warm time in proportion, fully warm once all are.
fn warmed_load(cold: Duration, warm: &WarmLoad, read: u64) -> Duration {
    let weights = u128::from(warm.weights_mb.saturating_mul(MB)).max(1);
    let read = u128::from(read).min(weights);
    let gain = cold.saturating_sub(warm.load).as_nanos();
    let saved = gain * read / weights;
    // `saved` is at most the cold time, which is a Duration.
    cold.saturating_sub(Duration::from_nanos(
        u64::try_from(saved).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::ModelParams;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Models `a` (cold 20 s, warm 10 s, 1000 MB) and `b` (cold 20 s, no
    /// warm time); the prefetch reads 100 MB/s, so `a` is warm after 10 s.
    fn two_models() -> Workload {
        let mut workload = Workload::default();
        for id in ["a", "b"] {
            let params = ModelParams {
                load: ms(20_000),
                fail_rate: 0.0,
            };
            workload.models.insert(id.into(), params);
        }
        let warm = WarmLoad {
            load: ms(10_000),
            weights_mb: 1000,
        };
        workload.warm.insert("a".into(), warm);
        workload
    }

    fn cache() -> PageCache {
        PageCache::new(Some(ReadAhead {
            bytes_per_s: 100 * MB,
            max_bytes: u64::MAX,
            predict: false,
        }))
    }

    #[test]
    fn a_load_is_shorter_by_the_share_of_its_weights_read_ahead() {
        let w = two_models();
        for (waited, load) in [
            (0, 20_000),
            (2_500, 17_500),
            (4_000, 16_000),
            (10_000, 10_000),
            (60_000, 10_000),
        ] {
            let mut cache = cache();
            cache.want(Some("a"), ms(1000), &w);
            assert_eq!(
                cache.load_starts("a", ms(1000 + waited), &w),
                ms(load),
                "{waited} ms read"
            );
        }
        // A model without a warm time loads cold however long it was read.
        let mut cache = cache();
        cache.want(Some("b"), ms(0), &w);
        assert_eq!(cache.load_starts("b", ms(60_000), &w), ms(20_000));
    }

    #[test]
    fn a_pause_keeps_what_was_read_and_another_model_evicts_it() {
        let w = two_models();
        let mut cache = cache();
        cache.want(Some("a"), ms(0), &w);
        cache.want(None, ms(2_000), &w);
        cache.want(Some("a"), ms(50_000), &w);
        // 2 s, a pause, then 1 s more: 300 MB of 1000.
        assert_eq!(cache.load_starts("a", ms(51_000), &w), ms(17_000));
        // The load used it: the next load of a starts from nothing.
        assert_eq!(cache.load_starts("a", ms(90_000), &w), ms(20_000));
        // Reading b evicts what was read of a.
        cache.want(Some("a"), ms(100_000), &w);
        cache.want(Some("b"), ms(105_000), &w);
        cache.want(Some("a"), ms(106_000), &w);
        assert_eq!(cache.load_starts("a", ms(107_000), &w), ms(19_000));
        // A load of another model leaves nothing of a either.
        cache.want(Some("a"), ms(200_000), &w);
        assert_eq!(cache.load_starts("b", ms(205_000), &w), ms(20_000));
        assert_eq!(cache.load_starts("a", ms(205_000), &w), ms(20_000));
    }

    #[test]
    fn without_read_ahead_or_past_the_size_bound_every_load_is_cold() {
        let w = two_models();
        let mut off = PageCache::new(None);
        off.want(Some("a"), ms(0), &w);
        assert_eq!(off.load_starts("a", ms(60_000), &w), ms(20_000));
        // prefetch_max_bytes below a's 1000 MB.
        let mut bounded = PageCache::new(Some(ReadAhead {
            bytes_per_s: 100 * MB,
            max_bytes: 999 * MB,
            predict: false,
        }));
        bounded.want(Some("a"), ms(0), &w);
        assert_eq!(bounded.load_starts("a", ms(60_000), &w), ms(20_000));
    }
}
