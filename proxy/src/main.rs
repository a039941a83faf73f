//! `strata-proxy CONFIG`: a thin binary around [`strata_proxy::run`].
//!
//! The listener is taken before the runtime exists: adopting a systemd
//! socket edits the environment, which is only sound while the process is
//! single-threaded.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use strata_os::{Daemon, EXIT_CONFIG};
use strata_protocol::config::Config;

fn main() -> ExitCode {
    let daemon = Daemon::new("strata-proxy");
    let config = match daemon.load_config(Config::load) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let listener = match strata_proxy::server::listener::take_listener(
        config.listen,
        config.require_socket_activation,
    ) {
        Ok(listener) => listener,
        Err(err) => return daemon.fail(ExitCode::FAILURE, err),
    };
    // `serve` raises the open-file limit before the runtime serves anything: the first accepts
    // may already need more than the default soft limit (a socket unit hands over the
    // connections queued in its backlog).
    // One thread: per request the proxy parses a little and copies between sockets, and a
    // multi-thread runtime spent more on cross-thread wakeups (futex, eventfd) than on that
    // work (ARCHITECTURE.md, `main.rs`).
    daemon.serve(async |signals| {
        match strata_proxy::run(Arc::new(config), listener, signals).await {
            Ok(()) => ExitCode::SUCCESS,
            // Refused by the supervisor: a different build or configuration.
            // Restarting cannot help, so the same status as a config error
            // (the units say RestartPreventExitStatus=78).
            Err(err @ strata_proxy::RunError::Refused(_)) => {
                daemon.fail(ExitCode::from(EXIT_CONFIG), err)
            }
            Err(err) => daemon.fail(ExitCode::FAILURE, err),
        }
    })
}
