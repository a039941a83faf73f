//! `strata-proxy CONFIG`: a thin binary around [`strata_proxy::run`].
//!
//! The listener is taken before the runtime exists: adopting a systemd
//! socket edits the environment, which is only sound while the process is
//! single-threaded.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use strata_protocol::config::Config;
use strata_protocol::os::{
    EXIT_CONFIG, config_path_from_args, count_shutdown_signals, init_logging, raise_open_file_limit,
};

fn main() -> ExitCode {
    let config_path = match config_path_from_args("strata-proxy") {
        Ok(path) => path,
        Err(code) => return code,
    };
    let config = match Config::load(&config_path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strata-proxy: config error: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let listener = match strata_proxy::server::listener::take_listener(
        config.listen,
        config.require_socket_activation,
    ) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("strata-proxy: {err}");
            return ExitCode::FAILURE;
        }
    };
    init_logging();
    // Before the runtime serves anything: the first accepts may already need more than the
    // default soft limit (a socket unit hands over the connections queued in its backlog).
    raise_open_file_limit();
    // One thread: per request the proxy parses a little and copies between sockets, and a
    // multi-thread runtime spent more on cross-thread wakeups (futex, eventfd) than on that
    // work (ARCHITECTURE.md, `main.rs`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("strata-proxy: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let Ok(signals) = count_shutdown_signals() else {
            eprintln!("strata-proxy: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        match strata_proxy::run(Arc::new(config), listener, signals).await {
            Ok(()) => ExitCode::SUCCESS,
            // Refused by the supervisor: a different build or configuration.
            // Restarting cannot help, so the same status as a config error
            // (the units say RestartPreventExitStatus=78).
            Err(err @ strata_proxy::RunError::Refused(_)) => {
                eprintln!("strata-proxy: {err}");
                ExitCode::from(EXIT_CONFIG)
            }
            Err(err) => {
                eprintln!("strata-proxy: {err}");
                ExitCode::FAILURE
            }
        }
    })
}
