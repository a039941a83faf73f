//! `strata-ctl on SOCKET [MODEL]`: enable routing and load a model (the
//! spec's `strata-router on`).
//!
//! Sends `{"cmd":"on","model":MODEL}` (`null` without MODEL), prints each
//! progress event on stderr as `[   0.0s] routing enabled`, then the
//! daemon's final JSON event on stdout and its message on stderr. Exit 0
//! only when the final event has `"ok": true`. No client timeout; Ctrl-C
//! cancels the load.

use std::path::PathBuf;
use std::process::ExitCode;

use strata_protocol::control::ControlRequest;

#[derive(clap::Args)]
pub struct Args {
    /// The operator control socket
    pub socket: PathBuf,
    /// A concrete model ID or alias; default: the loaded, last loaded or
    /// first enabled model
    pub model: Option<String>,
}

pub fn run(args: Args) -> ExitCode {
    crate::control::operation(&args.socket, &ControlRequest::On { model: args.model })
}
