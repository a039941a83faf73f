//! `strata-ctl on SOCKET [MODEL]`: enable routing and load a model (the
//! spec's `strata-router on`).
//!
//! Not implemented yet: it prints so and exits 2.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The operator control socket
    pub socket: PathBuf,
    /// A concrete model ID or alias; default: the loaded, last loaded or
    /// first enabled model
    pub model: Option<String>,
}

pub fn run(args: Args) -> ExitCode {
    let Args {
        socket: _,
        model: _,
    } = args;
    eprintln!("strata-ctl: on is not implemented yet");
    ExitCode::from(2)
}
