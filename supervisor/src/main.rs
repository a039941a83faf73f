//! `strata-supervisor CONFIG`: a thin binary around [`strata_supervisor::run`].
//!
//! The runtime is current-thread on purpose: the backend child's
//! parent-death signal is tied to the thread that spawned it, and the main
//! thread lives exactly as long as the process.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use strata_os::Daemon;
use strata_protocol::config::Config;

fn main() -> ExitCode {
    let daemon = Daemon::new("strata-supervisor");
    let config = match daemon.load_config(Config::load) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // `serve` raises the open-file limit before the runtime, once tracing can report it (the
    // backend inherits the raised limit), and runs the runtime on this, the main thread.
    daemon.serve(
        async |signals| match strata_supervisor::run(Arc::new(config), signals).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => daemon.fail(ExitCode::FAILURE, err),
        },
    )
}
