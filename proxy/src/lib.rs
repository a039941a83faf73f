//! `strata-proxy`: the HTTP front end clients talk to.
//!
//! - [`server::listener`]: adopt the systemd socket (or bind), before the runtime.
//! - [`link`]: the supervisor connection (leases, state, arrival numbers).
//! - `server`: accept loop, routing, drain (`accept`: backoff after a failed
//!   accept); `chat`: the chat request path;
//!   `models`, `health`: the read-only endpoints.
//! - [`observe`]: reads SSE and JSON responses as they pass, for accounting.
//! - `tasks`: request work that outlives its handler, tracked for the drain.
#![forbid(unsafe_code)]

mod app;
mod chat;
mod endpoints;
pub mod link;
pub mod observe;
mod reply;
mod response_body;
pub mod server;
mod upstream;

pub use server::{RunError, run};
