//! The engine: the one task that owns the Strata child and the one queue.
//!
//! Everything that can change which model is loaded or who is served next
//! goes through here as a [`Command`], processed in order by a single task
//! (`state::Engine`): tickets and their ends from every proxy, operator
//! `on`/`off`, cache scores, the maintenance tick, shutdown. Who goes next
//! is decided by [`strata_scheduler::decide`], a pure function of the engine's
//! state and `now`; the task applies its plan. Loads and stops run as child
//! tasks of the engine that report back with [`Command::OpFinished`]; while
//! one runs, no other load, switch or idle unload can start. That is the
//! "engine lock": it is held for the whole load, yet `status` and ticket
//! bookkeeping keep answering because the engine loop itself never blocks
//! on the backend.

mod backend_ops;
mod backend_slot;
mod clients;
mod command;
mod drain;
mod handle;
mod leases;
mod ledger;
mod now;
mod operator;
mod prediction;
#[cfg(test)]
mod prediction_tests;
mod queue;
mod report;
mod state;
#[cfg(test)]
mod tests;
mod watch;
mod watchdog;

pub use command::{Command, ControlOpId};
pub use handle::{EngineHandle, spawn};
pub use ledger::OpenTicket;
pub use strata_protocol::api::InFlightRequest;
pub use strata_scheduler::ConnId;

/// What the engine sends back to a control client during `on`/`off`: the
/// control socket's own event type. Exactly one `Done` per operation, last,
/// also for a cancelled operation (whose client is gone): it tells the
/// control layer the operation slot is free again.
pub use strata_protocol::control::ControlEvent;
/// The status document (`status`, and the fields of every `done`).
pub use strata_protocol::control::Status;
