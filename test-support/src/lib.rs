//! What the tests of every crate in the workspace share, so each helper exists once:
//!
//! - [`TempDir`] ([`tempdir`]): a private 0700 directory with a short path (Unix socket paths
//!   must stay under 108 bytes), removed on drop; [`TempDir::fast`] puts it on a tmpfs.
//! - [`python()`], [`fake_strata_dir`], [`repo_root`] ([`mod@python`]): the interpreter for the
//!   fake backend and the launch helpers, and where the repository's files are.
//! - [`free_port`] and friends ([`net`]): loopback ports, and what the kernel says about a
//!   test's TCP connections.
//! - [`poll_until`] and friends ([`poll`]): bounded polling; tests never sleep to synchronise.
//! - [`procs`]: liveness, process groups and limits through procfs, and signals by PID.
//! - [`Running`] ([`running`]): a child process that is stopped by PID and reaped on drop;
//!   [`Daemon`] ([`spawned`]): one with its output captured in files.
//! - [`output_within`], [`run()`] ([`mod@run`]): a command run to completion with a deadline.
//! - [`binary`], [`daemon_command`], [`with_ulimit`], [`wrap_command`] ([`binaries`]): the
//!   workspace binaries and the commands that run them.
//! - [`ConfigBuilder`] / [`ModelSpec`] → [`TestConfig`] ([`config`]): a config for the fake
//!   Strata backend with one profile per model, as plain JSON.
//! - [`RECORD_FIELDS`], [`RECORD_REASONS`], [`record_json`] ([`record`]): the record schema's
//!   field and reason pins and a
//!   schema-valid record fixture.
//! - [`test_binary::undeclared_modules`]: the files a folder's one test binary forgets to
//!   declare as modules.
//!
//! It depends on neither strata-protocol nor any other workspace crate, so every crate can
//! use it as a dev-dependency without a cycle.
#![forbid(unsafe_code)]

pub mod binaries;
pub mod config;
pub mod net;
pub mod poll;
pub mod procs;
pub mod python;
pub mod record;
pub mod run;
pub mod running;
pub mod spawned;
pub mod tempdir;
pub mod test_binary;

pub use binaries::{binary, daemon_command, with_ulimit, wrap_command};
pub use config::{ConfigBuilder, DEFAULT_FAMILY, ModelSpec, TestConfig, fake_profile, write_json};
pub use net::{free_port, free_port_outside_ephemeral};
pub use poll::{DEADLINE, POLL_INTERVAL, poll_for, poll_for_async, poll_until, poll_until_async};
pub use python::{fake_strata_dir, python, repo_root};
pub use record::{RECORD_FIELDS, RECORD_REASONS, record_json};
pub use run::{output_within, run};
pub use running::Running;
pub use spawned::Daemon;
pub use tempdir::TempDir;
