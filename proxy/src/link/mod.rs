//! The proxy's side of the private supervisor socket.
//!
//! One background task (`connection`) owns the socket: it connects, says
//! hello, keeps the latest [`LinkState`] in a watch channel, routes ticket
//! events to the request that enqueued, runs cache lookups the supervisor
//! asks for (`lookup`), and reconnects with backoff when the supervisor
//! restarts. Request handlers hold a cheap [`SupervisorLink`] handle.
//!
//! A routed request enqueues a ticket and gets two halves: [`TicketEvents`],
//! what the supervisor says about it (queued, admitted, granted, failed,
//! revoked), and [`TicketHandle`], how the request reports back (headers
//! received, and the one `Finish` with its record that ends the ticket or
//! its lease). The request's trace owns the handle and finishes it exactly
//! once, whichever way the request ends, so a ticket cannot outlive its
//! request.

mod connection;
mod handle;
mod lookup;
mod state;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use handle::DetachedSupervisor;
pub use handle::{SupervisorLink, TicketEvents, TicketHandle};
pub use state::{LeaseEnd, LinkState, Mismatch, RoutingView, TicketEvent};
