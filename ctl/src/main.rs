//! `strata-ctl`: operator commands.
#![forbid(unsafe_code)]
fn main() {}
