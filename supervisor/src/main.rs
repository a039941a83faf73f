//! `strata-supervisor CONFIG`: a thin binary around [`strata_supervisor::run`].
//!
//! The runtime is current-thread on purpose: the backend child's
//! parent-death signal is tied to the thread that spawned it, and the main
//! thread lives exactly as long as the process.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use strata_os::{
    EXIT_CONFIG, config_path_from_args, count_shutdown_signals, init_logging, raise_open_file_limit,
};
use strata_protocol::config::Config;

fn main() -> ExitCode {
    let config_path = match config_path_from_args("strata-supervisor") {
        Ok(path) => path,
        Err(code) => return code,
    };
    init_logging();
    let config = match Config::load(&config_path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strata-supervisor: config error: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // Before the runtime, once tracing can report it (the backend inherits the raised limit).
    raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("strata-supervisor: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let Ok(signals) = count_shutdown_signals() else {
            eprintln!("strata-supervisor: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        match strata_supervisor::run(Arc::new(config), signals).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("strata-supervisor: {err}");
                ExitCode::FAILURE
            }
        }
    })
}
