//! How a [`Plan`](crate::Plan)'s decisions are carried out, written once for
//! the engine and the simulator (`strata-sim`).
//!
//! Both keep the same books: the queue of tickets, the running load, the
//! leases. [`apply`] holds the rules every decision obeys against them, and
//! a [`Book`] is the caller's state with the few operations those rules
//! need; what an operation means beyond the books (a message to a proxy, a
//! simulated generation, a backend op) is the caller's:
//!
//! - a grant or a failure is for a ticket still waiting: the ticket is taken
//!   out of the queue first, and one that has gone (granted, failed or left
//!   since the view was taken, or named twice in a plan) is skipped;
//! - an admission joins the running load, so it needs one, and a ticket is
//!   told it was admitted only when the queue marked it;
//! - starting and cancelling a load, the idle unload and a cache lookup are
//!   the caller's operations, run as decided.

use crate::{Decision, Failure, SwitchReason, TicketKey};

/// The state a plan is applied to: the engine's parts, or the simulator's.
pub trait Book {
    /// A ticket taken out of the queue, with whatever the caller keeps of it.
    type Ticket;

    /// Takes a waiting or admitted ticket out of the queue; `None` if it is
    /// not there.
    fn take(&mut self, key: TicketKey) -> Option<Self::Ticket>;

    /// The load that tickets are admitted to now (its sequence number), if
    /// one is starting.
    fn loading(&self) -> Option<u64>;

    /// Marks a queued ticket admitted to load `load`; false if it is not
    /// queued.
    fn admit(&mut self, key: TicketKey, load: u64) -> bool;

    /// Ticket `key` was just admitted (by [`Book::admit`]).
    fn admitted(&mut self, key: TicketKey);

    /// Leases the serving backend to a ticket taken out of the queue.
    fn grant(&mut self, ticket: Self::Ticket);

    /// Ends a ticket taken out of the queue with `failure`.
    fn fail(&mut self, ticket: Self::Ticket, failure: Failure);

    /// Stops whatever runs and starts loading `model`; `reason` says why
    /// the serving model gives way (`None`: nothing was loaded).
    fn start_load(&mut self, model: String, reason: Option<SwitchReason>);

    /// The idle unload: stops the serving backend.
    fn unload(&mut self);

    /// Stops the running load, which nobody waits for.
    fn cancel_load(&mut self);

    /// Scores `keys` against the serving backend's cache.
    fn start_lookup(&mut self, keys: Vec<TicketKey>);
}

/// Carries out one decision of a plan on `book` (see the module docs).
pub fn apply<B: Book>(book: &mut B, decision: Decision) {
    match decision {
        Decision::Grant(key) => {
            if let Some(ticket) = book.take(key) {
                book.grant(ticket);
            }
        }
        Decision::Admit(key) => {
            if let Some(load) = book.loading()
                && book.admit(key, load)
            {
                book.admitted(key);
            }
        }
        Decision::Fail(key, failure) => {
            if let Some(ticket) = book.take(key) {
                book.fail(ticket, failure);
            }
        }
        Decision::StartLoad { model, reason } => book.start_load(model, reason),
        Decision::Unload => book.unload(),
        Decision::CancelLoad => book.cancel_load(),
        Decision::StartLookup(keys) => book.start_lookup(keys),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A book that keeps a queue (ticket -> admitted to which load) and
    /// writes down every operation in order.
    #[derive(Default)]
    struct Journal {
        queue: BTreeMap<TicketKey, Option<u64>>,
        loading: Option<u64>,
        done: Vec<String>,
    }

    impl Journal {
        fn with(tickets: &[TicketKey], loading: Option<u64>) -> Journal {
            Journal {
                queue: tickets.iter().map(|key| (*key, None)).collect(),
                loading,
                done: Vec::new(),
            }
        }
    }

    impl Book for Journal {
        type Ticket = (TicketKey, Option<u64>);

        fn take(&mut self, key: TicketKey) -> Option<Self::Ticket> {
            self.queue.remove(&key).map(|load| (key, load))
        }

        fn loading(&self) -> Option<u64> {
            self.loading
        }

        fn admit(&mut self, key: TicketKey, load: u64) -> bool {
            self.queue
                .get_mut(&key)
                .map(|admitted| *admitted = Some(load))
                .is_some()
        }

        fn admitted(&mut self, key: TicketKey) {
            self.done.push(format!("admitted {key:?}"));
        }

        fn grant(&mut self, (key, load): Self::Ticket) {
            self.done.push(format!("grant {key:?} from load {load:?}"));
        }

        fn fail(&mut self, (key, _): Self::Ticket, failure: Failure) {
            self.done.push(format!("fail {key:?} {failure:?}"));
        }

        fn start_load(&mut self, model: String, reason: Option<SwitchReason>) {
            self.loading = Some(7);
            match reason {
                Some(reason) => self
                    .done
                    .push(format!("load {model} ({})", reason.as_str())),
                None => self.done.push(format!("load {model}")),
            }
        }

        fn unload(&mut self) {
            self.done.push("unload".to_owned());
        }

        fn cancel_load(&mut self) {
            self.loading = None;
            self.done.push("cancel".to_owned());
        }

        fn start_lookup(&mut self, keys: Vec<TicketKey>) {
            self.done.push(format!("lookup {keys:?}"));
        }
    }

    fn run(book: &mut Journal, decisions: Vec<Decision>) -> Vec<String> {
        for decision in decisions {
            apply(book, decision);
        }
        std::mem::take(&mut book.done)
    }

    #[test]
    fn a_grant_takes_its_ticket_out_of_the_queue_once() {
        let mut book = Journal::with(&[(1, 1), (1, 2)], None);
        let done = run(
            &mut book,
            vec![Decision::Grant((1, 1)), Decision::Grant((1, 1))],
        );
        assert_eq!(done, ["grant (1, 1) from load None"]);
        assert_eq!(book.queue.keys().collect::<Vec<_>>(), [&(1, 2)]);
    }

    #[test]
    fn a_decision_for_a_ticket_that_has_gone_does_nothing() {
        let mut book = Journal::with(&[], Some(3));
        let done = run(
            &mut book,
            vec![
                Decision::Grant((1, 1)),
                Decision::Admit((1, 1)),
                Decision::Fail((1, 1), Failure::QueueTimeout),
            ],
        );
        assert!(done.is_empty(), "{done:?}");
    }

    #[test]
    fn an_admission_joins_the_running_load_and_only_then_is_told() {
        let mut book = Journal::with(&[(1, 1), (2, 5)], Some(3));
        assert_eq!(
            run(&mut book, vec![Decision::Admit((1, 1))]),
            ["admitted (1, 1)"]
        );
        assert_eq!(book.queue[&(1, 1)], Some(3));

        // Without a load nothing is admitted.
        book.loading = None;
        assert!(run(&mut book, vec![Decision::Admit((2, 5))]).is_empty());
        assert_eq!(book.queue[&(2, 5)], None);
    }

    #[test]
    fn a_plan_that_starts_a_load_admits_to_it() {
        let mut book = Journal::with(&[(1, 1), (1, 2)], None);
        let done = run(
            &mut book,
            vec![
                Decision::StartLoad {
                    model: "b".to_owned(),
                    reason: Some(SwitchReason::GraceExpired),
                },
                Decision::Admit((1, 1)),
                Decision::Admit((1, 2)),
            ],
        );
        assert_eq!(
            done,
            [
                "load b (grace_expired)",
                "admitted (1, 1)",
                "admitted (1, 2)"
            ]
        );
        // An admitted ticket is still in the queue; a grant takes it with its load.
        apply(&mut book, Decision::Grant((1, 2)));
        assert_eq!(book.done, ["grant (1, 2) from load Some(7)"]);
    }

    #[test]
    fn a_failure_takes_its_ticket_and_says_why() {
        let mut book = Journal::with(&[(1, 1), (1, 2)], None);
        let done = run(
            &mut book,
            vec![
                Decision::Fail((1, 2), Failure::Cooldown),
                Decision::Fail((1, 1), Failure::QueueTimeout),
                Decision::Fail((1, 2), Failure::Cooldown),
            ],
        );
        assert_eq!(done, ["fail (1, 2) Cooldown", "fail (1, 1) QueueTimeout"]);
        assert!(book.queue.is_empty());
    }

    #[test]
    fn the_backend_decisions_are_the_books_operations_in_plan_order() {
        let mut book = Journal::with(&[(1, 1)], Some(3));
        let done = run(
            &mut book,
            vec![
                Decision::CancelLoad,
                Decision::Admit((1, 1)),
                Decision::StartLookup(vec![(1, 1)]),
                Decision::Unload,
            ],
        );
        assert_eq!(done, ["cancel", "lookup [(1, 1)]", "unload"]);
        assert_eq!(
            book.queue[&(1, 1)],
            None,
            "no load to join after the cancel"
        );
    }
}
