//! What happened in one run (simulated, or read back from real records):
//! every load and every request with its stages. Metrics and drawings are
//! computed from this alone, so a simulated policy and the real router are
//! measured the same way.

use std::time::Duration;

use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;
use strata_scheduler::SwitchReason;

/// How a load ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOutcome {
    /// It served; `wasted` when no ticket for its model was left when it
    /// finished (every client had gone).
    Verified {
        wasted: bool,
    },
    Failed,
    /// Cancelled because nobody waited for it any more.
    Abandoned,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadSpan {
    pub model: String,
    pub start: Duration,
    pub end: Duration,
    pub outcome: LoadOutcome,
    /// Why the model before it gave way; `None` when nothing was loaded,
    /// and in a replay of records (which do not say).
    pub reason: Option<SwitchReason>,
}

impl LoadSpan {
    pub fn duration(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }

    /// Load time that served nobody.
    pub fn is_wasted(&self) -> bool {
        matches!(
            self.outcome,
            LoadOutcome::Verified { wasted: true } | LoadOutcome::Abandoned
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpan {
    pub model: String,
    pub tier: ServiceTier,
    pub arrival: Duration,
    /// It joined a load (and waited for it from then on).
    pub admitted: Option<Duration>,
    /// Its generation started.
    pub granted: Option<Duration>,
    pub end: Duration,
    pub outcome: Reason,
}

impl RequestSpan {
    /// Arrival to the start of its generation: the queue wait and any load
    /// it waited for.
    pub fn wait(&self) -> Option<Duration> {
        self.granted.map(|at| at.saturating_sub(self.arrival))
    }
}

/// An idle unload: the model left the GPU with nothing to load after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unload {
    pub model: String,
    pub at: Duration,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    pub loads: Vec<LoadSpan>,
    /// Idle unloads, in time order (a switch's unload is the next load's
    /// start). Not known in a replay of records.
    pub unloads: Vec<Unload>,
    /// In arrival order.
    pub requests: Vec<RequestSpan>,
    /// How `prefetch_predict`'s forecasts fared (a router run with it on).
    pub forecasts: Option<crate::forecast::ForecastCount>,
}

impl Timeline {
    /// Switches and unloads by reason: each load's reason, an abandoned
    /// load's cancel, each idle unload.
    pub fn switches_by_reason(&self) -> std::collections::BTreeMap<SwitchReason, u64> {
        let mut counts = std::collections::BTreeMap::new();
        let reasons = self
            .loads
            .iter()
            .flat_map(|load| {
                let cancelled =
                    (load.outcome == LoadOutcome::Abandoned).then_some(SwitchReason::Abandoned);
                load.reason.into_iter().chain(cancelled)
            })
            .chain(self.unloads.iter().map(|_| SwitchReason::Idle));
        for reason in reasons {
            *counts.entry(reason).or_default() += 1;
        }
        counts
    }

    /// The sequence of models loaded, in order (failed loads included).
    pub fn load_sequence(&self) -> Vec<&str> {
        self.loads.iter().map(|load| load.model.as_str()).collect()
    }

    /// First arrival to the last end.
    pub fn span(&self) -> (Duration, Duration) {
        let start = self
            .requests
            .iter()
            .map(|r| r.arrival)
            .chain(self.loads.iter().map(|l| l.start))
            .min()
            .unwrap_or_default();
        let end = self
            .requests
            .iter()
            .map(|r| r.end)
            .max()
            .unwrap_or_default();
        (start, end.max(start))
    }
}
