//! What `strata-supervisor` and `strata-proxy` must agree on.
//!
//! This crate alone knows the config schema and every message that crosses
//! a process boundary. Both daemons read the same config file through
//! [`config`] and talk through [`wire`]; operators (`strata-ctl`) talk to
//! the supervisor through [`control`]; accounting records and pages are
//! [`record`]'s. [`os`] holds the process setup both daemons share (the open-file
//! limit), so that it is done one way.
#![forbid(unsafe_code)]

pub mod control;
pub mod ids;
pub mod os;
pub mod record;
pub mod wire;

pub mod config;
