//! What happened in one run (simulated, or read back from real records):
//! every load and every request with its stages. Metrics and drawings are
//! computed from this alone, so a simulated policy and the real router are
//! measured the same way.

use std::time::Duration;

use strata_protocol::record::Reason;
use strata_protocol::wire::ServiceTier;

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

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    pub loads: Vec<LoadSpan>,
    /// In arrival order.
    pub requests: Vec<RequestSpan>,
}

impl Timeline {
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
