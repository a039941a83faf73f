//! The shared end-to-end test harness: real binaries against the fake Strata backend.
//!
//! The generic helpers (temp dirs, ports, polling, processes, the config builder) come from
//! `strata-test-support`, shared with the other crates' tests, and are re-exported here; this
//! crate adds what needs the product's types or talks to its daemons.
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
//! - [`document`]: the router's documents (`/metrics`, `/health`, `/v1/models`, error
//!   bodies, records, control events) read exactly as their `strata_protocol` types, so a
//!   renamed or missing field fails the test instead of reading as null.
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
//! - [`mod@bench`] and the `bench-upstream` binary: the router benchmark (`tests/benches/router.rs`).
//!
//! Conventions: loopback only, ports from [`free_port`], every process stopped by PID (never by
//! name), and every wait bounded by a deadline that panics with what was awaited.
#![forbid(unsafe_code)]

pub mod accounting;
pub mod bench;
pub mod config;
pub mod control;
pub mod document;
pub mod fake_log;
pub mod holder;
pub mod http;
pub mod proxy;
pub mod stack;
pub mod supervisor;
pub mod systemd;
pub mod weights;

// The helpers every crate's tests share live in strata-test-support; their modules are
// re-exported under their old names, so `strata_e2e::procs::...` and `crate::poll::...` keep
// working.
// (`python` names both the module and its function.)
pub use strata_test_support::{binaries, net, poll, procs, python, tempdir};

pub use config::{A3B, ConfigBuilder, FLASH, ModelSpec, TestConfig};
pub use control::{
    ControlClient, ControlSession, OpReply, Progress, child_pid, off_line, on_line, parse_done,
    parse_status,
};
pub use document::{alias_model, concrete_model, model_ids, read_exact, read_exact_str};
pub use fake_log::{FakeLog, StartEvent};
pub use proxy::{FakeProxy, LeaseId, LinkError, TicketPhase, Welcome};
pub use strata_test_support::{
    DEADLINE, Daemon, POLL_INTERVAL, TempDir, binary, daemon_command, fake_strata_dir, free_port,
    poll_for, poll_for_async, poll_until, poll_until_async, with_ulimit, wrap_command,
};
pub use supervisor::{Supervisor, spawn_supervisor, supervisor_command, wait_supervisor_serving};

/// Whether the tests run inside a Nix build sandbox (`STRATA_TEST_IN_NIX_SANDBOX` is set).
/// Tests that cannot work there (none of the supervisor tests so far) skip themselves.
pub fn in_nix_sandbox() -> bool {
    std::env::var_os("STRATA_TEST_IN_NIX_SANDBOX").is_some_and(|v| !v.is_empty())
}

/// Whether the tests run as root (some facilities, such as real systemd units, need it).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
