//! Process setup done one way everywhere: the daemons' command line, logging,
//! exit status for a bad config, shutdown signals and open-file limit, and
//! the parent-death hook every spawned child gets, and [`dir_watch`] (inotify made async).
//!
//! Every client connection costs the proxy a descriptor (and one more while its request is
//! forwarded upstream), and wait-first mode invites thousands of idle waiting clients. The
//! usual soft limit of 1024 would make `accept` fail long before the machine is busy, while the
//! hard limit is the ceiling the operator chose (systemd's `LimitNOFILE=` in the units). So
//! each daemon raises its soft limit to the hard limit at start, in its synchronous `main`
//! before the runtime exists, and logs the limit it runs with.
// `unsafe` is denied except for the `pre_exec` hook in `die_with_parent`, the descriptor
// registration in `dir_watch` and the `malloc_trim` call in `release_free_memory`.
#![deny(unsafe_code)]

pub mod dir_watch;

use std::io::{self, IsTerminal};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{getpid, getppid};

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

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs the soft limit in force at info
/// (`open file limit: N`). A failure is logged at warn and is never fatal: the daemon runs
/// with the limit it has. Call it once tracing is set up.
pub fn raise_open_file_limit() {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(errno) => {
            tracing::warn!(error = %errno, "cannot read the open file limit");
            return;
        }
    };
    let soft = if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(errno) => {
                tracing::warn!(
                    error = %errno,
                    soft,
                    hard,
                    "cannot raise the open file limit to the hard limit"
                );
                soft
            }
        }
    } else {
        soft
    };
    tracing::info!("open file limit: {soft}");
}

/// Makes the child `command` spawns receive `signal` when its parent dies, and exit at once
/// instead if the parent is already gone by the time the hook runs (it died between `fork` and
/// `prctl`, so the signal would never come and the child would run unowned).
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process:
/// spawn from a thread that lives as long as the child should (the supervisor spawns its
/// backend on its main thread).
// The crate denies `unsafe_code`; this hook, `dir_watch`'s registration and
// `release_free_memory` are the exceptions.
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command, signal: Signal) {
    let parent = getpid();
    let hook = move || -> io::Result<()> {
        nix::sys::prctl::set_pdeathsig(signal)?;
        if getppid() != parent {
            // SAFETY: `_exit` is async-signal-safe and ends this forked child immediately,
            // without running atexit handlers or destructors that belong to the parent's state.
            unsafe { nix::libc::_exit(1) };
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // operations are allowed (the parent may have been multi-threaded, so locks and the
    // allocator can be in any state). It calls only prctl(2), getppid(2) and _exit(2), which are
    // raw syscalls; it allocates nothing (an error becomes `io::Error::from_raw_os_error`, no
    // heap) and captures only a `Pid` and a `Signal` copied before the fork.
    unsafe {
        command.pre_exec(hook);
    }
}

/// Hands the heap's free memory back to the kernel (glibc's `malloc_trim(0)`, which also
/// releases free pages in the middle of the heap, not only at its top). glibc keeps freed
/// memory for reuse: after a burst of thousands of connections is over, the process would
/// otherwise stay at the burst's size. Costs a walk of the free lists (milliseconds for tens
/// of megabytes), so call it when a burst has ended, not per request. A no-op where the C
/// library is not glibc.
// The crate denies `unsafe_code`; this call is the third audited exception.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks and shrinks the allocator's own
    // free lists under the allocator's locks, and glibc documents it as callable at any time
    // from any thread.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed memory comes back: a 64 MiB heap of small blocks, freed, then trimmed, leaves
    /// the process's RSS near where it was before.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn released_memory_leaves_the_process() {
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        }
        // Small blocks (below the mmap threshold) from the main heap, with one block kept at
        // the end so that the free memory is not at the top of the heap (plain `free` would
        // return a free top by itself).
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|n| vec![n as u8; 4096]).collect();
        let pin = vec![1u8; 4096];
        let grown = rss_kib();
        blocks.clear();
        blocks.shrink_to_fit();
        let freed = rss_kib();
        release_free_memory();
        let trimmed = rss_kib();
        drop(pin);
        assert!(
            trimmed + 32 * 1024 < grown && trimmed < freed,
            "RSS grown {grown} KiB, freed {freed} KiB, trimmed {trimmed} KiB"
        );
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Below the hard limit, but far above what the other tests of this process open.
        let lowered = hard.saturating_sub(1).max(1);
        setrlimit(Resource::RLIMIT_NOFILE, lowered, hard).unwrap();
        raise_open_file_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        // Idempotent at the hard limit.
        raise_open_file_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }
}
