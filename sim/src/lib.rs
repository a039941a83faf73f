//! A deterministic simulator on the real decision function (`strata-ctl
//! simulate`).
//!
//! [`simulate`] runs a [`Workload`] (built-in [generated](generate()) agents and
//! bursts, a workload file, or a replay of the router's own records) under a
//! [`Policy`]: the router's own [`decide`](strata_scheduler::decide) with a config's
//! rules, the baselines users would otherwise run, or the ideal bound. What
//! happened is a [`Timeline`]; [`Metrics`] are computed from it the same way
//! for every policy and for the real records.
//!
//! A crate of its own so that the supervisor, which needs only the decision
//! ([`strata_scheduler`]), compiles none of this nor its serde: only
//! `strata-ctl` and the end-to-end fidelity test depend on it.

#![forbid(unsafe_code)]

mod baselines;
mod forecast;
pub mod generate;
pub mod metrics;
mod params;
mod prefetch;
mod queue;
pub mod records;
mod rng;
mod run;
pub mod timeline;
pub mod workload;

pub use forecast::{ForecastCount, ForecastFigures};
pub use generate::{BUILT_IN, Params, generate};
pub use metrics::{Metrics, Percentiles};
pub use prefetch::{DEFAULT_READ_MB_PER_S, MB, ReadAhead};
pub use records::{Reader, RecordError, Replay, replay};
pub use run::{Policy, Settings, simulate};
pub use timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline};
pub use workload::{
    Agent, DEFAULT_WEIGHTS_MB, MAX_MS, MAX_WEIGHTS_MB, ModelParams, Request, Step, WarmLoad,
    Workload, WorkloadError,
};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod thrash_tests;
#[cfg(test)]
mod warm_tests;
