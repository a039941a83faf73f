//! `strata-ctl status SOCKET`: print the supervisor's status (the spec's
//! `strata-router status`).
//!
//! Sends the bare word `status` and prints the daemon's one JSON line on
//! stdout; exit 0. Exit 1 with a message on stderr if the socket is absent
//! or refuses, or the daemon answers with an `{"error":...}` object (that
//! line is printed on stdout too).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The operator control socket
    pub socket: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    crate::control::status(&args.socket)
}
