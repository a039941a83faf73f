//! The shared end-to-end test harness: real binaries against the fake Strata backend.
//!
//! Every test builds its own world and tears it down:
//!
//! - [`TempDir`]: a private 0700 directory (short path: Unix socket paths must stay under
//!   108 bytes), removed on drop.
//! - [`ConfigBuilder`] / [`ModelSpec`] → [`TestConfig`]: a config file, one fake profile per
//!   model and a private run directory for the sockets, all inside the `TempDir`.
//! - [`Daemon`]: a spawned binary with its stderr captured to a file (printed when the test
//!   fails), stopped by PID on drop. [`Supervisor`] wraps one for `strata-supervisor` and waits
//!   until it serves.
//! - [`ControlClient`] / [`ControlSession`]: the operator control socket (JSON lines).
//! - [`FakeProxy`]: a tokio client of the private supervisor socket speaking
//!   [`strata_protocol::wire`].
//! - [`holder::SocketHolder`]: one listening socket kept across proxy processes, like
//!   systemd's socket unit.
//! - [`FakeLog`]: the fake backend's JSON-lines event log (starts, pids, env keys), and the
//!   end-of-test check that no backend process of this test is left.
//! - [`poll_until`] and friends: bounded polling; tests never sleep to synchronise.
//! - [`binary`], [`daemon_command`], [`with_ulimit`], [`python()`], [`fake_strata_dir`],
//!   [`free_port`]: locating and running things.
//! - [`systemd::SdStack`]: the router under a private systemd (PID 1 of its own namespaces,
//!   root only) running test copies of the units in `contrib/`.
//! - `e2e-unix-client` (a binary of this crate, `env!("CARGO_BIN_EXE_e2e-unix-client")`): a
//!   raw Unix-socket client for acting as another process or user.
//!
//! Conventions: loopback only, ports from [`free_port`], every process stopped by PID (never by
//! name), and every wait bounded by a deadline that panics with what was awaited.
#![forbid(unsafe_code)]

pub mod accounting;
pub mod binaries;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fake_log;
pub mod holder;
pub mod http;
pub mod net;
pub mod poll;
pub mod procs;
pub mod proxy;
pub mod python;
pub mod stack;
pub mod supervisor;
pub mod systemd;
pub mod tempdir;

pub use binaries::{binary, daemon_command, with_ulimit, wrap_command};
pub use config::{A3B, ConfigBuilder, FLASH, ModelSpec, TestConfig};
pub use control::{ControlClient, ControlSession, OpReply, off_line, on_line};
pub use daemon::Daemon;
pub use fake_log::{FakeLog, StartEvent};
pub use net::free_port;
pub use poll::{DEADLINE, POLL_INTERVAL, poll_for, poll_for_async, poll_until, poll_until_async};
pub use proxy::{FakeProxy, LeaseId, LinkError, TicketPhase, Welcome};
pub use python::{fake_strata_dir, python};
pub use supervisor::{Supervisor, spawn_supervisor, supervisor_command, wait_supervisor_serving};
pub use tempdir::TempDir;

/// Whether the tests run inside a Nix build sandbox (`STRATA_TEST_IN_NIX_SANDBOX` is set).
/// Tests that cannot work there (none of the supervisor tests so far) skip themselves.
pub fn in_nix_sandbox() -> bool {
    std::env::var_os("STRATA_TEST_IN_NIX_SANDBOX").is_some_and(|v| !v.is_empty())
}

/// Whether the tests run as root (some facilities, such as real systemd units, need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
