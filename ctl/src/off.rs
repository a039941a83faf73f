//! `strata-ctl off [--now] SOCKET`: disable routing, wait for active
//! work, unload the model (the spec's `strata-router off`).
//!
//! Sends `{"cmd":"off","now":BOOL}` and reports like `on`: progress lines on
//! stderr, the final JSON event on stdout, exit 0 only for `"ok": true`.
//! No client timeout; Ctrl-C cancels the wait (routing stays disabled).

use std::path::PathBuf;
use std::process::ExitCode;

use strata_protocol::control::ControlRequest;

#[derive(clap::Args)]
pub struct Args {
    /// Interrupt active responses instead of waiting for them
    #[arg(long)]
    pub now: bool,
    /// The operator control socket
    pub socket: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    crate::control::operation(&args.socket, &ControlRequest::Off { now: args.now })
}
