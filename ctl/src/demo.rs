//! `strata-ctl demo`: run the whole stack against the bundled fake
//! backend.
//!
//! Not implemented yet: it prints so and exits 2.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> ExitCode {
    eprintln!("strata-ctl: demo is not implemented yet");
    ExitCode::from(2)
}
