//! What crosses a process boundary.
//!
//! This crate alone knows the config schema and every message and document
//! that passes between the processes. Both daemons read the same config
//! file through [`config`] and talk through [`wire`]; operators
//! (`strata-ctl`) talk to the supervisor through [`control`]; an accounting
//! record is [`record`]'s (its identifiers [`ids`]'s, the totals the
//! supervisor keeps over records [`stats`]'s), a `/requests` page of them
//! [`page`]'s; the other documents the proxy serves over HTTP are
//! [`api`]'s.
#![forbid(unsafe_code)]

pub mod api;
pub mod control;
pub mod ids;
pub mod page;
pub mod record;
pub mod stats;
pub mod wire;

pub mod config;
