//! What `strata-supervisor` and `strata-proxy` must agree on.
//!
//! This crate alone knows the config schema and the wire format of the
//! private supervisor socket. Both daemons read the same config file through
//! [`config`] and talk through [`wire`]; nothing else crosses the process
//! boundary. [`os`] holds the process setup both daemons share (the open-file
//! limit), so that it is done one way.
#![forbid(unsafe_code)]

pub mod ids;
pub mod os;
pub mod record;
pub mod wire;

pub mod config;
