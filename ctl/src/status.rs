//! `strata-ctl status SOCKET`: print the supervisor's status (the
//! spec's `strata-router status`).
//!
//! Not implemented yet: it prints so and exits 2.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The operator control socket
    pub socket: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let Args { socket: _ } = args;
    eprintln!("strata-ctl: status is not implemented yet");
    ExitCode::from(2)
}
