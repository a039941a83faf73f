//! A daemon's start, done one way by `strata-supervisor` and `strata-proxy`: the command line,
//! the exit status for a bad config, logging, the open-file limit, the current-thread runtime
//! the shutdown-signal counter and the SIGHUP notice, around the daemon library's own `run`.
//!
//! [`Daemon`] holds only what both `main`s share, in two calls, so that what each daemon does
//! in between stays in its own `main`: the proxy adopts its listener after loading the config
//! and before [`Daemon::serve`] builds the runtime, while the process is still single-threaded.
//! The config itself is the caller's to load (this crate knows no config type), and so is the
//! exit status `run`'s outcome maps to.

use std::fmt::Display;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tokio::runtime::Runtime;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::log_output::init_logging;
use crate::raise_open_file_limit;

/// Exit status for an invalid configuration (sysexits `EX_CONFIG`); the systemd units do not
/// restart on it (`RestartPreventExitStatus=78`).
pub const EXIT_CONFIG: u8 = 78;

/// One daemon's start, named after its program for the lines it prints on stderr.
#[derive(Debug, Clone, Copy)]
pub struct Daemon {
    program: &'static str,
}

impl Daemon {
    pub const fn new(program: &'static str) -> Daemon {
        Daemon { program }
    }

    /// Reads the command line, `PROGRAM CONFIG`, and loads the config with `load`. `Err` is the
    /// exit status: after answering `--version`/`--help` (0) or printing the usage for anything
    /// else (2), or, when `load` fails, after printing `PROGRAM: config error: ERROR`,
    /// [`EXIT_CONFIG`].
    pub fn load_config<C, E: Display>(
        &self,
        load: impl FnOnce(&Path) -> Result<C, E>,
    ) -> Result<C, ExitCode> {
        let path = config_path_from_args(self.program)?;
        load(&path).map_err(|err| {
            self.fail(
                ExitCode::from(EXIT_CONFIG),
                format_args!("config error: {err}"),
            )
        })
    }

    /// Runs the daemon to its exit status: sets up logging, raises the open-file limit, builds
    /// a current-thread runtime and blocks this thread on `run`, given the counter of shutdown
    /// signals (taken inside the runtime). A runtime or signal handlers that cannot be set up
    /// are printed (`PROGRAM: cannot start the runtime: ERROR`, `PROGRAM: cannot install
    /// signal handlers`) and exit 1.
    ///
    /// The limit is raised before the runtime exists, once tracing can report it, so that the
    /// daemon serves nothing and spawns nothing under the default. The runtime runs on the
    /// caller's thread, the main thread: a child's parent-death signal is tied to the thread
    /// that spawned it ([`die_with_parent`](crate::die_with_parent)).
    pub fn serve(&self, run: impl AsyncFnOnce(watch::Receiver<u32>) -> ExitCode) -> ExitCode {
        init_logging();
        raise_open_file_limit();
        let runtime = match current_thread_runtime() {
            Ok(runtime) => runtime,
            Err(err) => {
                return self.fail(
                    ExitCode::FAILURE,
                    format_args!("cannot start the runtime: {err}"),
                );
            }
        };
        runtime.block_on(async move {
            let Ok(signals) = count_shutdown_signals() else {
                return self.fail(ExitCode::FAILURE, "cannot install signal handlers");
            };
            if explain_hangups().is_err() {
                return self.fail(ExitCode::FAILURE, "cannot install signal handlers");
            }
            run(signals).await
        })
    }

    /// Prints `PROGRAM: MESSAGE` on stderr and returns `code`.
    pub fn fail(&self, code: ExitCode, message: impl Display) -> ExitCode {
        eprintln!("{}: {message}", self.program);
        code
    }
}

/// A current-thread runtime with its IO and time drivers, the one every strata-router process
/// runs on (each `main` says why one thread).
pub fn current_thread_runtime() -> io::Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A daemon's command line, `PROGRAM CONFIG`: the config path, or the exit status after
/// answering `--version`/`--help` (0) or printing the usage for anything else (2).
fn config_path_from_args(program: &str) -> Result<PathBuf, ExitCode> {
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

/// Counts SIGTERM and SIGINT from now on: the daemons' `run` drains on the first and forces on
/// the second. Call it inside the runtime.
fn count_shutdown_signals() -> io::Result<watch::Receiver<u32>> {
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

/// What a daemon logs on SIGHUP, once per signal.
const HANGUP_NOTICE: &str = "SIGHUP ignored: the configuration is read only at start; \
                             restart the daemon to apply changes";

/// Catches SIGHUP from now on (its default action ends the process, which a `systemctl reload`
/// or a closed terminal would do to both daemons at once, without the SIGTERM drain) and logs,
/// once per signal, that the configuration is read only at start. Nothing else changes: the
/// daemons reload nothing, so the units have no `ExecReload=`. Call it inside the runtime.
fn explain_hangups() -> io::Result<()> {
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::warn!("{HANGUP_NOTICE}");
        }
    });
    Ok(())
}
