//! Bounded polling. Tests never sleep to synchronise: they poll a condition every
//! [`POLL_INTERVAL`] until it holds, and panic naming what they waited for once the deadline
//! passes. Deadlines are generous (a slow, loaded 2-core machine must pass); a passing poll
//! returns as soon as the condition holds, so they cost nothing.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often conditions are re-checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The default deadline for something that is expected to happen.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `cond` until it returns true; panics with `what` after `timeout`.
pub fn poll_until(timeout: Duration, what: impl Display, mut cond: impl FnMut() -> bool) {
    poll_for(timeout, what, || cond().then_some(()))
}

/// Polls `probe` until it returns `Some`; panics with `what` after `timeout`.
pub fn poll_for<T>(
    timeout: Duration,
    what: impl Display,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Deadline::after(timeout, what);
    loop {
        if let Some(value) = deadline.probe(&mut probe) {
            return value;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`poll_until`] for async tests: yields to the runtime between checks.
pub async fn poll_until_async(
    timeout: Duration,
    what: impl Display,
    mut cond: impl FnMut() -> bool,
) {
    poll_for_async(timeout, what, || cond().then_some(())).await
}

/// [`poll_for`] for async tests: yields to the runtime between checks.
pub async fn poll_for_async<T>(
    timeout: Duration,
    what: impl Display,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Deadline::after(timeout, what);
    loop {
        if let Some(value) = deadline.probe(&mut probe) {
            return value;
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// One poll's deadline and what it waits for, shared by the blocking and the async loop.
struct Deadline<W> {
    what: W,
    timeout: Duration,
    at: Instant,
}

impl<W: Display> Deadline<W> {
    fn after(timeout: Duration, what: W) -> Deadline<W> {
        Deadline {
            what,
            timeout,
            at: Instant::now() + timeout,
        }
    }

    /// Runs `probe` once; `None` means poll again. Panics naming what was awaited once the
    /// deadline has passed (after a last look, so a condition that holds just then counts).
    fn probe<T>(&self, probe: &mut impl FnMut() -> Option<T>) -> Option<T> {
        let value = probe();
        if value.is_none() && Instant::now() >= self.at {
            panic!(
                "timed out after {:?} waiting for {}",
                self.timeout, self.what
            );
        }
        value
    }
}
