//! A daemon's start, done one way by `strata-supervisor` and `strata-proxy`: the command line,
//! logging, the exit status for a bad config and the shutdown-signal counter.

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Exit status for an invalid configuration (sysexits `EX_CONFIG`); the systemd units do not
/// restart on it (`RestartPreventExitStatus=78`).
pub const EXIT_CONFIG: u8 = 78;

/// A daemon's command line, `PROGRAM CONFIG`: the config path, or the exit status after
/// answering `--version`/`--help` (0) or printing the usage for anything else (2).
pub fn config_path_from_args(program: &str) -> Result<PathBuf, ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--version" || flag == "-V" => {
            println!("{program} {}", env!("CARGO_PKG_VERSION"));
            Err(ExitCode::SUCCESS)
        }
        [flag] if flag == "--help" || flag == "-h" => {
            println!("usage: {program} CONFIG");
            Err(ExitCode::SUCCESS)
        }
        [path] if !path.starts_with('-') => Ok(PathBuf::from(path)),
        _ => {
            eprintln!("usage: {program} CONFIG");
            Err(ExitCode::from(2))
        }
    }
}

/// Logs to stderr (colours only on a terminal) at the level `STRATA_LOG` names, `info`
/// without it.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

/// Counts SIGTERM and SIGINT from now on: the daemons' `run` drains on the first and forces on
/// the second. Call it inside the runtime.
pub fn count_shutdown_signals() -> io::Result<watch::Receiver<u32>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (count_tx, count_rx) = watch::channel(0u32);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            count_tx.send_modify(|count| *count += 1);
        }
    });
    Ok(count_rx)
}
