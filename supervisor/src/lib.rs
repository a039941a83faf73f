//! `strata-supervisor`: owns the one Strata backend process.
//!
//! - [`accounting`]: per-request records: memory ring, `/requests` reads,
//!   the JSONL writer. Owned here so a proxy restart loses nothing.
//! - [`backend`]: start, verify and stop one Strata child.
//! - [`engine`]: the single task that owns the child and decides loads,
//!   switches, idle unloads and operator operations.
//! - [`prefetch`]: the next model's weights read into the page cache while
//!   it waits (and, with `prefetch_predict`, the likely next model's while
//!   nothing waits).
//! - [`link`]: the private supervisor socket proxies lease through.
//! - [`control`]: the operator control socket.
//! - [`sockets`]: private directory checks and safe socket binding.
//! - [`service`]: `run`, wiring it all together.
//!
//! No `unsafe`: the one `pre_exec` hook is `strata_os::die_with_parent`, and
//! the page-cache calls are `strata_os::page_cache`.
#![forbid(unsafe_code)]

pub mod accounting;
pub mod backend;
pub mod control;
pub mod counters;
pub mod engine;
pub mod link;
pub mod prefetch;
pub mod service;
pub mod sockets;

pub use service::{RunError, run};
