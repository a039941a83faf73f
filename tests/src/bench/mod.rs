//! The router benchmark's parts (`cargo bench -p strata-e2e --bench router`, driven by
//! `tests/benches/router.rs`; results in `tests/benches/RESULTS.md`):
//!
//! - [`upstream`]: the fast fake Strata behind the `bench-upstream` binary (the backend
//!   contract, JSON and SSE in any [`wire::Shape`], HTTP/1.1 keep-alive or HTTP/1.0 + close).
//! - [`wire`]: the request and response bytes both sides agree on.
//! - [`load`]: the load generator's client connections and timed response readers.
//! - [`nginx`]: nginx as the reference proxy, when installed.
//! - [`procstat`]: CPU time and memory of the measured processes from procfs.
//! - [`report`]: percentiles, medians and the printed tables.

pub mod load;
pub mod nginx;
pub mod procstat;
pub mod report;
pub mod upstream;
pub mod wire;
