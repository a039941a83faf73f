//! `strata-ctl daemon CONFIG`: start strata-supervisor and strata-proxy
//! for development and `nix run`.
//!
//! Not implemented yet: it prints so and exits 2.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The config file (JSON)
    pub config: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    let Args { config: _ } = args;
    eprintln!("strata-ctl: daemon is not implemented yet");
    ExitCode::from(2)
}
