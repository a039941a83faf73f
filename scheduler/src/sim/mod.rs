//! A deterministic simulator on the real decision function.
//!
//! [`simulate`] runs a [`Workload`] (built-in [generated](generate()) agents and
//! bursts, a workload file, or a replay of the router's own records) under a
//! [`Policy`]: the router's own [`decide`](crate::decide) with a config's
//! rules, the baselines users would otherwise run, or the ideal bound. What
//! happened is a [`Timeline`]; [`Metrics`] are computed from it the same way
//! for every policy and for the real records.

mod baselines;
pub mod generate;
pub mod metrics;
mod queue;
pub mod records;
mod rng;
pub(super) mod run;
pub mod timeline;
pub mod workload;

pub use generate::{BUILT_IN, Params, generate};
pub use metrics::{Metrics, Percentiles};
pub use records::{Reader, RecordError, Replay, replay};
pub use run::{Policy, Settings, simulate};
pub use timeline::{LoadOutcome, LoadSpan, RequestSpan, Timeline};
pub use workload::{Agent, MAX_MS, ModelParams, Request, Step, Workload, WorkloadError};

#[cfg(test)]
mod tests;
