//! The supervisor's drain on SIGTERM, as a pure step.
//!
//! Like the spec's daemon: new proxies and new tickets are refused, and so
//! is a control operation that would load; accepted work keeps its routing
//! (queued tickets are still admitted and served, a load in progress
//! finishes). Once nothing is queued, leased or running, the backend stops.
//! `drain_ms` (0: no deadline) or a second signal ends the wait: accepted
//! work is then interrupted. Last, the records of tickets that ended
//! without a lease during the drain are waited for, briefly.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a stopping supervisor waits for the records of tickets that
/// ended without a lease during its drain (a proxy sends a ticket's
/// `Finish`, which carries its record, within milliseconds of its answer).
pub const RECORDS_GRACE: Duration = Duration::from_secs(2);

/// What the drain needs to know of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Tickets wait, leases are held or an operator operation runs.
    pub busy: bool,
    /// A load or stop runs.
    pub op_running: bool,
    /// A verified backend runs.
    pub backend_running: bool,
    /// Tickets whose `Finish` (with the record) has not arrived.
    pub open_records: usize,
}

/// What the engine does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainAction {
    /// Accepted work still runs: schedule it as usual.
    Serve,
    /// The deadline passed: interrupt accepted work (revoke and forget
    /// leases, fail waiting tickets, abort the operator, cancel a load),
    /// then step again.
    Force,
    /// A load or stop runs: wait for it, scheduling nothing else.
    Wait,
    /// Stop the backend.
    StopBackend,
    /// Wait for open records until then.
    WaitRecords { until: Instant },
    /// The drain is over; `missing_records` records never arrived.
    Finished { missing_records: usize },
}

#[derive(Debug)]
pub struct Drain {
    /// After this, accepted work is interrupted. None: wait for all of it.
    deadline: Option<Instant>,
    /// The deadline passed or a second signal came.
    forced: bool,
    /// Set once nothing runs but some records have not arrived.
    records_until: Option<Instant>,
    /// Who asked for the drain, answered when it is over.
    done: Option<oneshot::Sender<()>>,
}

impl Drain {
    /// A drain starting at `now`, answering `done` when it is over;
    /// `drain_ms` 0 is no deadline.
    pub fn new(drain_ms: u64, now: Instant, done: Option<oneshot::Sender<()>>) -> Drain {
        let limit = (drain_ms > 0).then(|| Duration::from_millis(drain_ms));
        Drain {
            deadline: limit.map(|limit| now + limit),
            forced: false,
            records_until: None,
            done,
        }
    }

    /// The drain is over ([`DrainAction::Finished`]): its requester learns.
    pub fn answer(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }

    /// Whether accepted work was interrupted (`drain_ms` ran out or a second
    /// signal came): backends are then killed, not stopped gracefully.
    pub fn is_forced(&self) -> bool {
        self.forced
    }

    /// A second signal: the deadline is now.
    pub fn force_now(&mut self, now: Instant) {
        self.deadline = Some(now);
    }

    pub fn step(&mut self, facts: &Facts, now: Instant) -> DrainAction {
        if !self.forced && self.deadline.is_some_and(|deadline| now >= deadline) {
            self.forced = true;
            return DrainAction::Force;
        }
        if facts.busy {
            return DrainAction::Serve;
        }
        if facts.op_running {
            return DrainAction::Wait;
        }
        if facts.backend_running {
            return DrainAction::StopBackend;
        }
        // A ticket failed or refused during the drain ends with its proxy's
        // `Finish`, which carries its record: stopping before it arrives
        // would lose the record.
        if facts.open_records > 0 {
            let until = *self.records_until.get_or_insert(now + RECORDS_GRACE);
            if now < until {
                return DrainAction::WaitRecords { until };
            }
        }
        DrainAction::Finished {
            missing_records: facts.open_records,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Facts = Facts {
        busy: false,
        op_running: false,
        backend_running: false,
        open_records: 0,
    };

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_drain_serves_then_stops_the_backend_then_finishes() {
        let t0 = Instant::now();
        // (facts, action), one step each, no deadline.
        let cases = [
            (Facts { busy: true, ..IDLE }, DrainAction::Serve),
            (
                Facts {
                    busy: true,
                    backend_running: true,
                    ..IDLE
                },
                DrainAction::Serve,
            ),
            (
                Facts {
                    op_running: true,
                    ..IDLE
                },
                DrainAction::Wait,
            ),
            (
                Facts {
                    backend_running: true,
                    ..IDLE
                },
                DrainAction::StopBackend,
            ),
            (IDLE, DrainAction::Finished { missing_records: 0 }),
        ];
        for (facts, expected) in cases {
            let mut drain = Drain::new(0, t0, None);
            assert_eq!(drain.step(&facts, t0 + secs(3600)), expected, "{facts:?}");
        }
    }

    #[test]
    fn the_deadline_forces_once_then_the_drain_goes_on() {
        let t0 = Instant::now();
        let mut drain = Drain::new(10_000, t0, None);
        let busy = Facts { busy: true, ..IDLE };
        assert_eq!(drain.step(&busy, t0 + secs(9)), DrainAction::Serve);
        assert_eq!(drain.step(&busy, t0 + secs(10)), DrainAction::Force);
        // Forced once; what is left is waited for as usual.
        assert_eq!(drain.step(&busy, t0 + secs(11)), DrainAction::Serve);
        let op = Facts {
            op_running: true,
            ..IDLE
        };
        assert_eq!(drain.step(&op, t0 + secs(12)), DrainAction::Wait);
    }

    #[test]
    fn a_second_signal_forces_a_drain_without_deadline() {
        let t0 = Instant::now();
        let mut drain = Drain::new(0, t0, None);
        let busy = Facts { busy: true, ..IDLE };
        assert_eq!(drain.step(&busy, t0 + secs(1000)), DrainAction::Serve);
        drain.force_now(t0 + secs(1001));
        assert_eq!(drain.step(&busy, t0 + secs(1001)), DrainAction::Force);
    }

    #[test]
    fn open_records_are_waited_for_during_the_grace_only() {
        let t0 = Instant::now();
        let mut drain = Drain::new(0, t0, None);
        let open = Facts {
            open_records: 2,
            ..IDLE
        };
        let until = t0 + RECORDS_GRACE;
        assert_eq!(drain.step(&open, t0), DrainAction::WaitRecords { until });
        // The grace counts from the first wait, not from each step.
        assert_eq!(
            drain.step(&open, t0 + secs(1)),
            DrainAction::WaitRecords { until }
        );
        assert_eq!(
            drain.step(&open, until),
            DrainAction::Finished { missing_records: 2 }
        );
        // Records that arrive in time end the wait at once.
        let mut drain = Drain::new(0, t0, None);
        assert_eq!(drain.step(&open, t0), DrainAction::WaitRecords { until });
        assert_eq!(
            drain.step(&IDLE, t0 + secs(1)),
            DrainAction::Finished { missing_records: 0 }
        );
    }
}
