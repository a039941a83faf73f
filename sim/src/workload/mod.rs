//! What a simulation serves: models with their cold and warm load times,
//! open-loop requests at fixed instants, and closed-loop agents whose next
//! request follows the end of the previous one. The workload file that
//! holds one (JSON lines, versioned) is `file.rs`, which documents its
//! format.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use strata_protocol::wire::ServiceTier;

mod file;

/// The workload file version this build reads and writes.
pub const WORKLOAD_VERSION: u32 = 1;

/// The largest millisecond value a workload file, a record or a generator
/// parameter may hold: 365 days. Far below any overflow of the simulator's
/// clock, however many requests follow one another.
pub const MAX_MS: u64 = 365 * 86_400_000;

/// The weights size a model with a warm load time and no `weights_mb` is
/// given: 16 GB, a 30-billion-parameter model at 4 bits.
pub const DEFAULT_WEIGHTS_MB: u64 = 16_000;

/// The largest `weights_mb`: a petabyte (the config's prefetch bounds go
/// to 2^50 bytes), to catch unit mistakes.
pub const MAX_WEIGHTS_MB: u64 = 1_000_000_000;

/// How one model loads cold (nothing of its weights in the page cache).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParams {
    pub load: Duration,
    /// The chance that a load of it fails (0 to 1).
    pub fail_rate: f64,
}

/// How one model loads with its weights in the page cache, and how much
/// the prefetch reads to get them there ([`Workload::warm`]).
#[derive(Debug, Clone, PartialEq)]
pub struct WarmLoad {
    /// The load with every weight resident (at most the cold
    /// [`ModelParams::load`]).
    pub load: Duration,
    /// Megabytes (10^6 bytes) of weights.
    pub weights_mb: u64,
}

/// One open-loop request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub at: Duration,
    pub model: String,
    pub tier: ServiceTier,
    pub service: Duration,
    /// When its client gives up, counted from arrival.
    pub patience: Option<Duration>,
    /// Its cached/input fraction (0 when not known).
    pub cache_rank: Option<f64>,
}

/// One request of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// After the end of the previous request (ignored for the first).
    pub gap: Duration,
    pub service: Duration,
    pub patience: Option<Duration>,
    pub cache_rank: Option<f64>,
}

/// A closed loop of requests on one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub model: String,
    pub tier: ServiceTier,
    pub start: Duration,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Workload {
    pub name: String,
    /// One line for people: what the workload is and its parameters.
    pub description: String,
    /// Draws the load failures.
    pub seed: u64,
    pub models: BTreeMap<String, ModelParams>,
    /// The models that load faster warm; a model not here loads in its
    /// cold time whatever was read ahead. Kept beside [`Workload::models`]
    /// rather than in [`ModelParams`] so that a workload without warm
    /// loads (a replay, a version 1 file without the keys) says so by
    /// having none.
    pub warm: BTreeMap<String, WarmLoad>,
    pub requests: Vec<Request>,
    pub agents: Vec<Agent>,
}

impl Workload {
    /// Requests in all, the agents' steps included.
    pub fn request_count(&self) -> usize {
        self.requests.len() + self.agents.iter().map(|a| a.steps.len()).sum::<usize>()
    }

    /// The model's load time (a model no line declared loads in 20 s).
    pub fn load_time(&self, model: &str) -> Duration {
        self.models
            .get(model)
            .map_or(Duration::from_secs(20), |params| params.load)
    }

    /// The model's load time with every weight resident (its cold time
    /// when it has no warm load).
    pub fn warm_load_time(&self, model: &str) -> Duration {
        self.warm
            .get(model)
            .map_or_else(|| self.load_time(model), |warm| warm.load)
    }
}

/// A workload file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    /// 1-based; 0 for the file as a whole.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for WorkloadError {}

pub fn tier_name(tier: ServiceTier) -> &'static str {
    tier.as_str()
}

pub fn parse_tier(name: &str) -> Option<ServiceTier> {
    ServiceTier::ALL
        .into_iter()
        .find(|tier| tier.as_str() == name)
}
