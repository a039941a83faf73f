//! What `strata-supervisor` and `strata-proxy` must agree on.
//!
//! This crate alone knows the config schema and every message that crosses
//! a process boundary. Both daemons read the same config file through
//! [`config`] and talk through [`wire`]; operators (`strata-ctl`) talk to
//! the supervisor through [`control`]; an accounting record is
//! [`record`]'s, a `/requests` page of them [`page`]'s; the other
//! documents the proxy serves over HTTP are [`api`]'s. [`os`] holds the process setup both daemons share (the open-file
//! limit), so that it is done one way.
// `unsafe` is denied except for the `pre_exec` hook in `os::die_with_parent` and the
// descriptor registration in `os::dir_watch`.
#![deny(unsafe_code)]

pub mod api;
pub mod control;
pub mod ids;
pub mod os;
pub mod page;
pub mod record;
pub mod stats;
pub mod wire;

pub mod config;
