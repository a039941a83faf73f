//! `POST /v1/chat/completions`: from request to forwarded response.
//!
//! The path, in order, as [`handle()`] runs it: start the trace (arrival),
//! read the body under the size limit (`read`), parse just the routing
//! fields (`request`) and resolve the model, enqueue a ticket in the
//! supervisor's one queue, whose first answer numbers the request, then
//! wait for the grant and send the request to the leased backend
//! (`admit`), and shape the response (`respond`) and forward its body
//! (`forward`). A request rejected before it has a ticket is numbered with
//! one `Arrive` round trip. Every failure is one [`error::ChatError`],
//! which decides what the client is told and the record's reason; every
//! exit finishes the request's [`trace::Trace`] exactly once, which also
//! ends the ticket.
//!
//! Streaming requests in wait-first mode are run by a task of their own
//! (`wait_first`): `200` and SSE headers once their first byte is ready or
//! their first keepalive is due, comments while they wait (`progress` says
//! what), and any failure after the headers as one `event: error` frame.
//! Other requests keep the backend's status and headers.
//!
//! The files depend one way: `handle` on `wait_first`, `respond`, `admit`
//! and the rest; `wait_first` on `respond`, `admit`, `forward` and
//! `progress`; `respond` on `admit`, `forward`, `trace` and `error`; no
//! file imports one above it.

mod admit;
mod error;
#[cfg(test)]
mod fake_backend;
mod forward;
mod handle;
mod progress;
mod read;
mod request;
mod respond;
pub(crate) mod trace;
mod wait_first;

pub use handle::handle;
