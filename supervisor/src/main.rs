//! `strata-supervisor CONFIG`: a thin binary around [`strata_supervisor::run`].
//!
//! The runtime is current-thread on purpose: the backend child's
//! parent-death signal is tied to the thread that spawned it, and the main
//! thread lives exactly as long as the process.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use strata_protocol::config::Config;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status for an invalid configuration (sysexits `EX_CONFIG`); the
/// systemd units do not restart on it.
const EXIT_CONFIG: u8 = 78;

fn usage() -> ExitCode {
    eprintln!("usage: strata-supervisor CONFIG");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config_path = match args.as_slice() {
        [flag] if flag == "--version" || flag == "-V" => {
            println!("strata-supervisor {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        [flag] if flag == "--help" || flag == "-h" => {
            println!("usage: strata-supervisor CONFIG");
            return ExitCode::SUCCESS;
        }
        [path] if !path.starts_with('-') => PathBuf::from(path),
        _ => return usage(),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match Config::load(&config_path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("strata-supervisor: config error: {err}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // Before the runtime, once tracing can report it (the backend inherits the raised limit).
    strata_protocol::os::raise_open_file_limit();
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
        let (signal_tx, signal_rx) = watch::channel(0u32);
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("strata-supervisor: cannot install signal handlers");
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
        match strata_supervisor::run(Arc::new(config), signal_rx).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("strata-supervisor: {err}");
                ExitCode::FAILURE
            }
        }
    })
}
