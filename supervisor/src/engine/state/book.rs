//! The engine as the [`Book`] a plan is applied to: [`strata_scheduler::apply`],
//! the function the simulator runs too, decides which tickets a decision
//! takes, admits or skips; what each step means here (a message to a proxy,
//! a ledger entry, a backend op) is below.

use strata_protocol::wire::{LeaseFailure, LoadPhase, SupervisorMessage};
use strata_scheduler::{Book, Failure, SwitchReason, TicketKey, Waiting};

use super::{Engine, Now};
use crate::engine::backend_slot::{CancelReason, StopReason};
use crate::engine::queue::TicketInfo;

/// The engine while it applies a plan made at `now`.
pub(super) struct EngineBook<'a> {
    pub(super) engine: &'a mut Engine,
    pub(super) now: Now,
}

impl Book for EngineBook<'_> {
    type Ticket = (Waiting, TicketInfo);

    fn take(&mut self, key: TicketKey) -> Option<Self::Ticket> {
        self.engine.queue.take(key)
    }

    fn loading(&self) -> Option<u64> {
        self.engine.slot.loading_seq()
    }

    fn admit(&mut self, key: TicketKey, load: u64) -> bool {
        self.engine.queue.admit(key, load)
    }

    fn admitted(&mut self, key: TicketKey) {
        let (engine, now) = (&mut *self.engine, self.now);
        engine.announce(key);
        engine.ledger.admitted(key, now.unix_ms);
        engine.send(key.0, SupervisorMessage::Admitted { ticket: key.1 });
        // A ticket that joins a load already waiting for readiness learns
        // where it stands, as the load's first tickets did.
        if let Some(elapsed_ms) = engine.slot.spawned_load_elapsed(now.at) {
            let typical_load_ms = engine
                .queue
                .get(key)
                .and_then(|ticket| engine.slot.typical_load_ms(&ticket.model));
            engine.send(
                key.0,
                SupervisorMessage::Progress {
                    ticket: key.1,
                    phase: LoadPhase::WaitingForReadiness,
                    elapsed_ms,
                    typical_load_ms,
                },
            );
        }
    }

    fn grant(&mut self, (ticket, info): Self::Ticket) {
        self.engine.grant(ticket, info, false, None, self.now);
    }

    fn fail(&mut self, (ticket, info): Self::Ticket, failure: Failure) {
        let failure = match failure {
            Failure::QueueTimeout => LeaseFailure::QueueTimeout,
            Failure::Cooldown => self
                .engine
                .slot
                .cooldown_failure(&ticket.model, self.now.at),
        };
        self.engine.failed(ticket.key, info, failure);
    }

    fn start_load(&mut self, model: String, reason: Option<SwitchReason>) {
        self.engine.start_load(&model, false, reason, self.now);
    }

    fn unload(&mut self) {
        self.engine.count_switch(SwitchReason::Idle);
        tracing::info!(
            model = self.engine.slot.selected(),
            reason = SwitchReason::Idle.as_str(),
            "idle: unloading"
        );
        self.engine.start_stop(StopReason::Idle, self.now);
    }

    fn cancel_load(&mut self) {
        self.engine.count_switch(SwitchReason::Abandoned);
        tracing::info!(
            model = self.engine.slot.loading_model(),
            reason = SwitchReason::Abandoned.as_str(),
            "nobody waits for the load any more: cancelling it"
        );
        self.engine.slot.cancel_load(CancelReason::Abandoned);
    }

    fn start_lookup(&mut self, keys: Vec<TicketKey>) {
        self.engine.start_lookup(keys, self.now);
    }
}
