//! `strata-proxy CONFIG`: a thin binary around [`strata_proxy::run`].
//!
//! The listener is taken before the runtime exists: adopting a systemd
//! socket edits the environment, which is only sound while the process is
//! single-threaded.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use strata_protocol::config::Config;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status for an invalid configuration (sysexits `EX_CONFIG`).
const EXIT_CONFIG: u8 = 78;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config_path = match args.as_slice() {
        [flag] if flag == "--version" || flag == "-V" => {
            println!("strata-proxy {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        [flag] if flag == "--help" || flag == "-h" => {
            println!("usage: strata-proxy CONFIG");
            return ExitCode::SUCCESS;
        }
        [path] if !path.starts_with('-') => PathBuf::from(path),
        _ => {
            eprintln!("usage: strata-proxy CONFIG");
            return ExitCode::from(2);
        }
    };
    let config = match Config::load(&config_path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strata-proxy: config error: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let listener = match strata_proxy::listener::take_listener(
        config.listen,
        config.require_socket_activation,
    ) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("strata-proxy: {err}");
            return ExitCode::FAILURE;
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Before the runtime serves anything: the first accepts may already need more than the
    // default soft limit (a socket unit hands over the connections queued in its backlog).
    strata_protocol::os::raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
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
        let (signal_tx, signal_rx) = watch::channel(0u32);
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("strata-proxy: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                signal_tx.send_modify(|count| *count += 1);
            }
        });
        match strata_proxy::run(Arc::new(config), listener, signal_rx).await {
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
