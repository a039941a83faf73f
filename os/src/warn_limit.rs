//! The rate limit on one kind of warning that can repeat as fast as its cause (once per record
//! the request log cannot write, once per failed `accept`): the first occurrence is reported at
//! once, later ones at most once per interval, each report counting the occurrences since the
//! previous one. So a flood costs a few log lines, and no occurrence goes uncounted.
//!
//! [`WarnLimit`] is a pure function of its state and the instant it is given, so its users'
//! tests drive it with made-up instants. It is generic over the instant: the supervisor's
//! request-log thread passes `std::time::Instant`, the proxy's accept loop tokio's (whose clock
//! a test can pause).

use std::ops::Add;
use std::time::{Duration, Instant};

/// Rate limit for one kind of warning; see the module docs.
#[derive(Debug, Clone)]
pub struct WarnLimit<I = Instant> {
    /// The least time between two reports.
    interval: Duration,
    /// When the last report was made.
    reported_at: Option<I>,
    /// Occurrences not counted in any report yet.
    unreported: u64,
}

impl<I: Copy + Ord + Add<Duration, Output = I>> WarnLimit<I> {
    /// A limit of one report per `interval`, with nothing reported yet.
    pub const fn new(interval: Duration) -> Self {
        WarnLimit {
            interval,
            reported_at: None,
            unreported: 0,
        }
    }

    /// Counts one occurrence at `now`. If a report is due (none made yet, or the last one
    /// `interval` or longer ago), returns how many occurrences it reports (this one included)
    /// and the next interval starts at `now`; otherwise `None`, and the occurrence waits for the
    /// next report.
    pub fn note(&mut self, now: I) -> Option<u64> {
        self.unreported += 1;
        let due = self.reported_at.is_none_or(|at| now >= at + self.interval);
        due.then(|| self.report(now))
    }

    /// When the occurrences held back are due for a [`report`](Self::report); `None` when
    /// none is held back. A caller that wants them logged even if no further one comes waits
    /// for this.
    pub fn due_at(&self) -> Option<I> {
        if self.unreported == 0 {
            return None;
        }
        self.reported_at.map(|at| at + self.interval)
    }

    /// Reports the occurrences held back, as of `now`: returns their number (0 if there are
    /// none), and the next interval starts at `now`.
    pub fn report(&mut self, now: I) -> u64 {
        self.reported_at = Some(now);
        std::mem::take(&mut self.unreported)
    }

    /// Hands the occurrences held back to a line that is not a report of them (the accept
    /// loop's "accepts work again"): returns their number, and the interval runs on.
    pub fn take_unreported(&mut self) -> u64 {
        std::mem::take(&mut self.unreported)
    }

    /// Forgets the history: the next occurrence is reported at once.
    pub fn reset(&mut self) {
        *self = WarnLimit::new(self.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(60);

    #[test]
    fn the_first_is_reported_then_once_per_interval_with_counts() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let interval = INTERVAL.as_millis() as u64;
        let mut limit = WarnLimit::new(INTERVAL);
        // (time in ms, what note() returns)
        let steps = [
            (0, Some(1)),
            (1, None),
            (2, None),
            (interval - 1, None),
            // Due again: reports the three held back plus this one.
            (interval, Some(4)),
            (interval + 1, None),
            (3 * interval, Some(2)),
        ];
        for (ms, expected) in steps {
            assert_eq!(limit.note(at(ms)), expected, "at {ms} ms");
        }
        // A reset reports the next occurrence at once, whatever the interval.
        limit.note(at(3 * interval + 1));
        limit.reset();
        assert_eq!(limit.note(at(3 * interval + 2)), Some(1));
    }

    #[test]
    fn a_flood_is_held_to_one_report() {
        let now = Instant::now();
        let mut limit = WarnLimit::new(INTERVAL);
        let reports: Vec<u64> = (0..10_000).filter_map(|_| limit.note(now)).collect();
        assert_eq!(reports, vec![1]);
        assert_eq!(
            limit.note(now + INTERVAL),
            Some(10_000),
            "every held-back occurrence is counted in the next report"
        );
    }

    #[test]
    fn held_back_occurrences_are_due_one_interval_after_the_last_report() {
        let start = Instant::now();
        let mut limit = WarnLimit::new(INTERVAL);
        assert_eq!(limit.due_at(), None, "nothing happened");
        assert_eq!(limit.note(start), Some(1));
        assert_eq!(limit.due_at(), None, "nothing held back");
        let second = start + Duration::from_secs(1);
        assert_eq!(limit.note(second), None);
        assert_eq!(limit.due_at(), Some(start + INTERVAL));
        assert_eq!(limit.report(start + INTERVAL), 1);
        assert_eq!(limit.due_at(), None);
        // The report started a new interval.
        assert_eq!(limit.note(start + INTERVAL + Duration::from_secs(1)), None);
    }

    #[test]
    fn taking_the_held_back_count_leaves_the_interval_running() {
        let start = Instant::now();
        let mut limit = WarnLimit::new(INTERVAL);
        limit.note(start);
        limit.note(start + Duration::from_secs(1));
        limit.note(start + Duration::from_secs(2));
        assert_eq!(limit.take_unreported(), 2);
        assert_eq!(limit.due_at(), None);
        assert_eq!(limit.take_unreported(), 0);
        assert_eq!(limit.note(start + Duration::from_secs(3)), None);
        assert_eq!(limit.note(start + INTERVAL), Some(2));
    }

    /// The proxy's accept loop runs it on tokio's clock.
    #[test]
    fn tokio_instants_work_too() {
        let start = tokio::time::Instant::now();
        let mut limit = WarnLimit::new(INTERVAL);
        assert_eq!(limit.note(start), Some(1));
        assert_eq!(limit.note(start + INTERVAL / 2), None);
        assert_eq!(limit.due_at(), Some(start + INTERVAL));
    }
}
