//! The router benchmark's parts (`cargo bench -p strata-e2e --bench router`, driven by
//! `tests/benches/router.rs`; results in `tests/benches/RESULTS.md`):
//!
//! - [`upstream`]: the fast fake Strata behind the `bench-upstream` binary (the backend
//!   contract, JSON and SSE in any [`wire::Shape`], HTTP/1.1 keep-alive or HTTP/1.0 + close).
//! - [`wire`]: the request and response bytes both sides agree on.
//! - [`load`]: the load generator's client connections and timed response readers.
//! - [`nginx`]: nginx as the reference proxy, when installed.
//! - [`procstat`]: CPU time and memory of the measured processes from procfs.
//! - [`report`]: percentiles, medians and the printed tables.
//!
//! The swap benchmark (`--bench swap`, `tests/benches/swap.rs`) shares [`build_daemons`].

pub mod load;
pub mod nginx;
pub mod procstat;
pub mod report;
pub mod upstream;
pub mod wire;

use std::path::Path;
use std::process::Command;

/// Builds the daemons in this bench's profile (a no-op when up to date), so the benchmark
/// never measures stale binaries.
pub fn build_daemons() -> Result<(), String> {
    if std::env::var_os("STRATA_TEST_BIN_DIR").is_some_and(|d| !d.is_empty()) {
        return Ok(());
    }
    let Some(cargo) = std::env::var_os("CARGO") else {
        eprintln!("CARGO is not set: using the daemons already built beside this binary");
        return Ok(());
    };
    let exe = std::env::current_exe().map_err(|err| format!("current_exe: {err}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected bench executable path")?;
    let target_dir = profile_dir
        .parent()
        .ok_or("unexpected bench executable path")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("unexpected bench executable path")?;
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--bins",
            "-p",
            "strata-supervisor",
            "-p",
            "strata-proxy",
        ])
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    eprintln!("building the daemons: {command:?}");
    let status = command
        .status()
        .map_err(|err| format!("run cargo build: {err}"))?;
    if !status.success() {
        return Err(format!("cargo build of the daemons failed: {status}"));
    }
    Ok(())
}
