//! What `strata-supervisor` and `strata-proxy` must agree on.
//!
//! This crate alone knows the config schema and every message that crosses
//! a process boundary. Both daemons read the same config file through
//! [`config`] and talk through [`wire`]; operators (`strata-ctl`) talk to
//! the supervisor through [`control`]; an accounting record is
//! [`record`]'s, a `/requests` page of them [`page`]'s; the other
//! documents the proxy serves over HTTP are [`api`]'s. The process setup
//! the daemons share is `strata-os`'s.
#![deny(unsafe_code)]

pub mod api;
pub mod control;
pub mod ids;
pub mod page;
pub mod record;
pub mod stats;
pub mod wire;

pub mod config;
