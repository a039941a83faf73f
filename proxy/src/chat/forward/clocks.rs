//! The forwarding loop's timers as one: the response deadline
//! (`response_ms`), the client stall limit and the keepalive clock share a
//! single sleep, armed at the earliest of them that may fire. The loop reads
//! the clock once per event and asks [`Clocks::due`] what, if anything, came
//! due then.
//!
//! The sleep is re-armed only when it fired or when an earlier time is
//! needed, never per chunk: a chunk only moves the stall and keepalive times
//! later, so a sleep set earlier fires early, finds nothing due and is set
//! again.

use std::pin::Pin;

use tokio::time::{Instant as TokioInstant, Sleep};

use super::outbox::Outbox;
use super::{Bounds, CLIENT_STALL_LIMIT, KEEPALIVE_INTERVAL};

/// What came due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// `response_ms` is up.
    Deadline,
    /// The client took nothing for [`CLIENT_STALL_LIMIT`] while something
    /// waited for it.
    Stall,
    /// The client is owed a keepalive comment.
    Keepalive,
}

pub struct Clocks {
    deadline: Option<TokioInstant>,
    /// Keepalives are on (wait-first SSE).
    keepalive: bool,
    /// When the first keepalive is due, until the client takes something.
    first_keepalive: TokioInstant,
    /// The stall limit counts from here until the client takes something.
    started: TokioInstant,
    sleep: Pin<Box<Sleep>>,
    /// What `sleep` is set to; `None`: nothing can come due.
    armed: Option<TokioInstant>,
}

impl Clocks {
    /// The clocks of a loop that starts at `now` within `bounds`.
    pub fn new(now: TokioInstant, bounds: &Bounds<'_>, out: &Outbox<'_>) -> Clocks {
        let mut clocks = Clocks {
            deadline: bounds.deadline.map(TokioInstant::from_std),
            keepalive: bounds.keepalive,
            first_keepalive: bounds
                .first_keepalive
                .map_or(now + KEEPALIVE_INTERVAL, TokioInstant::from_std),
            started: now,
            sleep: Box::pin(tokio::time::sleep_until(now)),
            armed: None,
        };
        clocks.armed = clocks.next(now, out);
        if let Some(at) = clocks.armed {
            clocks.sleep.as_mut().reset(at);
        }
        clocks
    }

    /// Resolves when the sleep fires; never if nothing can come due.
    pub async fn expired(&mut self) {
        match self.armed {
            Some(_) => self.sleep.as_mut().await,
            None => std::future::pending().await,
        }
    }

    /// What is due at `now`, given the state of the response (`out`).
    pub fn due(&self, now: TokioInstant, out: &Outbox<'_>) -> Option<Due> {
        let Timers {
            stall, keepalive, ..
        } = self.timers(out);
        if self.deadline.is_some_and(|at| at <= now) {
            Some(Due::Deadline)
        } else if out.in_hand() && stall <= now {
            Some(Due::Stall)
        } else if keepalive.is_some_and(|(at, may)| may && at <= now) {
            Some(Due::Keepalive)
        } else {
            None
        }
    }

    /// Sets the sleep for what may come due next, after an event at `now`.
    pub fn rearm(&mut self, now: TokioInstant, out: &Outbox<'_>) {
        let next = self.next(now, out);
        let fired = self.armed.is_some() && self.sleep.is_elapsed();
        let earlier = match (next, self.armed) {
            (Some(next), Some(armed)) => next < armed,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if fired || earlier {
            self.armed = next;
            if let Some(at) = next {
                self.sleep.as_mut().reset(at);
            }
        }
    }

    /// The earliest time something may come due: a timer that may fire now
    /// at its time, one that may not yet (the stall limit with nothing in
    /// hand, a keepalive inside a frame) at its time if that is still ahead
    /// (an early wake-up costs one look).
    fn next(&self, now: TokioInstant, out: &Outbox<'_>) -> Option<TokioInstant> {
        let Timers { stall, keepalive } = self.timers(out);
        let keepalive = keepalive.map_or((None, false), |(at, may)| (Some(at), may));
        [
            (self.deadline, true),
            (Some(stall), out.in_hand()),
            keepalive,
        ]
        .into_iter()
        .filter_map(|(at, may)| at.filter(|&at| may || at > now))
        .min()
    }

    fn timers(&self, out: &Outbox<'_>) -> Timers {
        let stall = out.last_progress.unwrap_or(self.started) + CLIENT_STALL_LIMIT;
        let keepalive = self.keepalive.then(|| {
            let at = out
                .last_progress
                .map_or(self.first_keepalive, |at| at + KEEPALIVE_INTERVAL);
            (at, !out.in_hand() && out.at_frame_boundary)
        });
        Timers { stall, keepalive }
    }
}

/// When the stall limit and the keepalive are due; the keepalive with
/// whether one may go out now (nothing in hand, at a frame boundary).
struct Timers {
    stall: TokioInstant,
    keepalive: Option<(TokioInstant, bool)>,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::link::TicketEvents;
    use crate::response_body::ProxyBody;

    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Clocks with a 30 s deadline and keepalives on, for a loop at `start`.
    fn clocks(start: TokioInstant, out: &Outbox<'_>) -> Clocks {
        let (_lease_tx, mut lease) = TicketEvents::detached();
        let bounds = Bounds {
            lease: &mut lease,
            deadline: Some((start + secs(30)).into_std()),
            keepalive: true,
            first_keepalive: None,
            idle: None,
        };
        Clocks::new(start, &bounds, out)
    }

    /// Each timer comes due only in the state it belongs to: the keepalive
    /// with nothing in hand at a frame boundary, the stall limit with a
    /// chunk in hand, the deadline always; the deadline first when two are
    /// due.
    #[tokio::test(start_paused = true)]
    async fn each_timer_is_due_only_in_its_state() {
        let (tx, _client) = ProxyBody::channel();
        let mut out = Outbox::new(&tx, false);
        let start = TokioInstant::now();
        let clocks = clocks(start, &out);
        assert_eq!(clocks.due(start + secs(3), &out), None);
        assert_eq!(clocks.due(start + secs(4), &out), Some(Due::Keepalive));
        out.at_frame_boundary = false;
        assert_eq!(clocks.due(start + secs(4), &out), None, "inside a frame");
        out.at_frame_boundary = true;
        out.last_progress = Some(start + secs(2));
        assert_eq!(
            clocks.due(start + secs(4), &out),
            None,
            "counts from progress"
        );
        assert_eq!(clocks.due(start + secs(6), &out), Some(Due::Keepalive));
        out.pending = Some(bytes::Bytes::from_static(b"x"));
        assert_eq!(clocks.due(start + secs(6), &out), None, "a chunk in hand");
        out.last_progress = None;
        assert_eq!(clocks.due(start + secs(30), &out), Some(Due::Deadline));
        let (tx, _client) = ProxyBody::channel();
        let mut out = Outbox::new(&tx, false);
        out.pending = Some(bytes::Bytes::from_static(b"x"));
        let clocks = Clocks {
            deadline: None,
            ..self::clocks(start, &out)
        };
        assert_eq!(clocks.due(start + secs(59), &out), None);
        assert_eq!(
            clocks.due(start + CLIENT_STALL_LIMIT, &out),
            Some(Due::Stall)
        );
    }

    /// The sleep is not moved per chunk: progress only makes the timers
    /// later, so the sleep set earlier stays until it fires, and is then
    /// set for what is next.
    #[tokio::test(start_paused = true)]
    async fn the_sleep_is_set_again_only_when_it_fired_or_must_be_earlier() {
        let (tx, _client) = ProxyBody::channel();
        let mut out = Outbox::new(&tx, false);
        let start = TokioInstant::now();
        let mut clocks = clocks(start, &out);
        assert_eq!(clocks.armed, Some(start + secs(4)), "the first keepalive");
        out.last_progress = Some(start + secs(1));
        clocks.rearm(start + secs(1), &out);
        assert_eq!(clocks.armed, Some(start + secs(4)), "not moved by a chunk");
        clocks.expired().await;
        assert_eq!(start.elapsed(), secs(4));
        assert_eq!(clocks.due(start + secs(4), &out), None, "fired early");
        clocks.rearm(start + secs(4), &out);
        assert_eq!(clocks.armed, Some(start + secs(5)));
        // Inside a frame no keepalive may go out: only the deadline is
        // left once the keepalive time has passed.
        out.at_frame_boundary = false;
        clocks.expired().await;
        clocks.rearm(start + secs(5), &out);
        assert_eq!(clocks.armed, Some(start + secs(30)));
        // The frame ends with a chunk at 10 s: the keepalive at 14 s is
        // earlier than the sleep, which moves.
        out.at_frame_boundary = true;
        out.last_progress = Some(start + secs(10));
        clocks.rearm(start + secs(10), &out);
        assert_eq!(clocks.armed, Some(start + secs(14)));
    }
}
