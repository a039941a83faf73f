//! `strata-supervisor`: owns the one Strata backend process.

pub mod backend;
