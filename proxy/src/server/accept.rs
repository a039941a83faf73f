//! What the accept loop does when `accept` fails: how long to wait before the next try, and
//! when to say so in the log.
//!
//! `accept` fails mostly when the process is out of descriptors (`EMFILE`, `ENFILE`), and then
//! the listener stays readable (the connections wait in the backlog), so retrying at once
//! would spin and log as fast as the loop runs. [`AcceptBackoff`] decides, as a pure function
//! of its state and the time it is given:
//!
//! - the wait: [`FIRST_DELAY`] after the first failure, doubling with each further failure up
//!   to [`MAX_DELAY`], none after a successful accept. The cap keeps the reaction to freed
//!   descriptors within half a second; at the cap a failing loop tries twice a second.
//! - the log: a failure is warned about at once unless a report was logged less than
//!   [`REPORT_INTERVAL`] ago; later failures are counted and reported together when the
//!   interval is up, as failing or as working again, whichever is true by then. The first
//!   success after a warning is reported at once. So every failure is counted in exactly one
//!   line, and the log gets at most about two lines per interval, also when accepts fail and
//!   succeed in turn (near the limit, each closed connection lets one accept succeed before the
//!   next fails). The counting is strata-os's [`WarnLimit`], the one the supervisor's request
//!   log uses too.

use strata_os::WarnLimit;
use tokio::time::{Duration, Instant};

/// The wait after the first failure of a streak.
const FIRST_DELAY: Duration = Duration::from_millis(10);

/// The longest wait between two attempts.
const MAX_DELAY: Duration = Duration::from_millis(500);

/// Minimum interval between two reports of failures.
const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// Backoff and log rate limit for accept failures; see the module docs.
#[derive(Debug)]
pub(crate) struct AcceptBackoff {
    /// The wait after the latest failure; zero while accepts succeed.
    delay: Duration,
    /// No accept before this (set after a failure, cleared by a success).
    retry_at: Option<Instant>,
    /// The failures: the first of a quiet spell reported at once, later ones counted into one
    /// line per [`REPORT_INTERVAL`].
    failures: WarnLimit<Instant>,
    /// A warning was logged and no line has said since that accepts work again.
    recovery_due: bool,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff {
            delay: Duration::ZERO,
            retry_at: None,
            failures: WarnLimit::new(REPORT_INTERVAL),
            recovery_due: false,
        }
    }
}

/// A log line to write, with the failures it counts (those since the previous line).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Report {
    /// Accepts fail: a warning.
    Failing { failures: u64 },
    /// Accepts work again.
    Recovered { failures: u64 },
}

impl AcceptBackoff {
    /// Records a failed accept at `now`; `Some` is a report to log now.
    pub(crate) fn failed(&mut self, now: Instant) -> Option<Report> {
        self.delay = if self.delay.is_zero() {
            FIRST_DELAY
        } else {
            (self.delay * 2).min(MAX_DELAY)
        };
        self.retry_at = Some(now + self.delay);
        let failures = self.failures.note(now)?;
        Some(self.line(failures))
    }

    /// Records a successful accept; `Some` is a report to log now.
    pub(crate) fn succeeded(&mut self) -> Option<Report> {
        self.delay = Duration::ZERO;
        self.retry_at = None;
        if !self.recovery_due {
            return None;
        }
        self.recovery_due = false;
        Some(Report::Recovered {
            failures: self.failures.take_unreported(),
        })
    }

    /// When the next accept may be tried; `None`: at once.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// When the failures not reported yet are due for a [`report`](Self::report).
    pub(crate) fn report_at(&self) -> Option<Instant> {
        self.failures.due_at()
    }

    /// Reports the failures not reported yet, as of `now`.
    pub(crate) fn report(&mut self, now: Instant) -> Report {
        let failures = self.failures.report(now);
        self.line(failures)
    }

    /// The line for a report of `failures`: failing or working again, whichever is true now.
    fn line(&mut self, failures: u64) -> Report {
        if self.retry_at.is_some() {
            self.recovery_due = true;
            Report::Failing { failures }
        } else {
            self.recovery_due = false;
            Report::Recovered { failures }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_doubles_to_the_cap_and_resets_after_a_success() {
        let start = Instant::now();
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.retry_at(), None);
        let mut now = start;
        let mut waits = Vec::new();
        for _ in 0..9 {
            backoff.failed(now);
            let retry_at = backoff.retry_at().expect("a wait after a failure");
            waits.push(retry_at - now);
            now = retry_at;
        }
        assert_eq!(
            waits,
            [10, 20, 40, 80, 160, 320, 500, 500, 500].map(ms).to_vec()
        );
        backoff.succeeded();
        assert_eq!(backoff.retry_at(), None);
        backoff.failed(now);
        assert_eq!(backoff.retry_at(), Some(now + FIRST_DELAY));
    }

    /// Failures retried as soon as the backoff allows, from `start` until before `end`, with
    /// the reports due in between made on time: (ms since `start`, report).
    fn fail_until(backoff: &mut AcceptBackoff, start: Instant, end: Instant) -> Vec<(u64, Report)> {
        let mut reports = Vec::new();
        loop {
            let next_try = backoff.retry_at().unwrap_or(start);
            let (now, report) = match backoff.report_at() {
                Some(at) if at <= next_try && at < end => (at, Some(backoff.report(at))),
                _ if next_try >= end => return reports,
                _ => (next_try, backoff.failed(next_try)),
            };
            if let Some(report) = report {
                reports.push(((now - start).as_millis() as u64, report));
            }
        }
    }

    #[test]
    fn continuous_failures_are_warned_first_then_summarised_once_per_interval() {
        let start = Instant::now();
        let mut backoff = AcceptBackoff::default();
        let reports = fail_until(&mut backoff, start, start + Duration::from_secs(35));
        // Failures at 0, 10, 30, 70, 150, 310, 630 ms, then every 500 ms.
        let failing = |failures| Report::Failing { failures };
        assert_eq!(
            reports,
            [
                (0, failing(1)),
                (10_000, failing(24)),
                (20_000, failing(20)),
                (30_000, failing(20)),
            ]
        );
        // Accepts work again: said at once, with the failures since the last warning.
        assert_eq!(
            backoff.succeeded(),
            Some(Report::Recovered { failures: 10 })
        );
        assert_eq!(backoff.report_at(), None);
        assert_eq!(backoff.succeeded(), None);
    }

    #[test]
    fn failures_after_a_quick_recovery_are_reported_when_the_interval_is_up() {
        let start = Instant::now();
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.failed(start), Some(Report::Failing { failures: 1 }));
        assert_eq!(backoff.succeeded(), Some(Report::Recovered { failures: 0 }));
        // Failing again within the interval: counted, not logged.
        for i in 1..=8 {
            assert_eq!(backoff.failed(start + ms(i * 100)), None);
        }
        assert_eq!(backoff.succeeded(), None);
        // Due 10 s after the warning; by then accepts work.
        assert_eq!(backoff.report_at(), Some(start + REPORT_INTERVAL));
        assert_eq!(
            backoff.report(start + REPORT_INTERVAL),
            Report::Recovered { failures: 8 }
        );
        assert_eq!(backoff.report_at(), None);
        // A failure long after is warned about at once again.
        let later = start + Duration::from_secs(60);
        assert_eq!(backoff.failed(later), Some(Report::Failing { failures: 1 }));
    }

    #[test]
    fn failing_and_succeeding_in_turn_logs_at_most_two_lines_per_interval() {
        let start = Instant::now();
        let mut backoff = AcceptBackoff::default();
        let mut lines = Vec::new();
        // Every 5 ms for 60 s an accept fails, then one succeeds; due reports are made.
        for i in 0..12_000 {
            let now = start + ms(i * 5);
            if let Some(at) = backoff.report_at()
                && at <= now
            {
                lines.push(backoff.report(now));
            }
            lines.extend(backoff.failed(now));
            lines.extend(backoff.succeeded());
        }
        assert!(lines.len() <= 2 * 6 + 1, "{} lines: {lines:?}", lines.len());
        let counted: u64 = lines
            .iter()
            .map(|line| match line {
                Report::Failing { failures } | Report::Recovered { failures } => failures,
            })
            .sum();
        let pending = backoff.report(start + Duration::from_secs(70));
        let Report::Recovered { failures } = pending else {
            panic!("{pending:?}");
        };
        assert_eq!(counted + failures, 12_000, "every failure counted once");
    }

    #[test]
    fn a_success_without_failures_reports_nothing() {
        let mut backoff = AcceptBackoff::default();
        assert_eq!(backoff.succeeded(), None);
        assert_eq!(backoff.report_at(), None);
    }
}
