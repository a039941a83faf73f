//! `strata-proxy`: the HTTP front end clients talk to.
//!
//! From the top down (no module imports one above it):
//! - [`server`]: the listening socket ([`server::listener`], taken before
//!   the runtime), the accept loop, routing and the drain, and the memory
//!   trimming after bursts.
//! - `chat`: the `POST /v1/chat/completions` path; `endpoints`: the other,
//!   read-only endpoints (`/v1/models`, `/health`, `/metrics`, `/requests`).
//! - `app`: the state every handler shares, with `tasks` (the request work
//!   that outlives its handler, which the drain waits for); `reply`: every
//!   router-made error reply and JSON response.
//! - [`link`]: the supervisor connection (tickets, leases, state, records);
//!   `upstream`: the backend HTTP/1 client and its pool; [`observe`]: reads
//!   SSE and JSON responses as they pass, for accounting;
//!   `response_body`: the client response body (whole, or a bounded
//!   channel).
#![forbid(unsafe_code)]

mod app;
mod chat;
mod endpoints;
pub mod link;
pub mod observe;
mod reply;
mod response_body;
pub mod server;
mod tasks;
mod upstream;

pub use server::{RunError, run};
