//! `strata-ctl off [--now] SOCKET`: disable routing, wait for active
//! work, unload the model (the spec's `strata-router off`).
//!
//! Not implemented yet: it prints so and exits 2.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Interrupt active responses instead of waiting for them
    #[arg(long)]
    pub now: bool,
    /// The operator control socket
    pub socket: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let Args { now: _, socket: _ } = args;
    eprintln!("strata-ctl: off is not implemented yet");
    ExitCode::from(2)
}
