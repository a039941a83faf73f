//! Stopping the backend: SIGTERM to the whole process group, up to `shutdown_ms` for every
//! member to exit, then SIGKILL to the group; the leader is reaped and the group is confirmed
//! gone with a bounded poll. The same path cleans up after every failed start.

use std::fmt;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::group::{ChildGroup, ExitInfo};

/// The longest poll interval while waiting for the group to exit. The first poll comes after
/// [`FIRST_POLL`] and each next one after twice as long, up to this: a backend that exits at
/// once on SIGTERM is seen within about a millisecond (a fixed 20 ms poll added 20 ms to every
/// swap), one that takes seconds costs no more wakeups than before.
const POLL: Duration = Duration::from_millis(20);
const FIRST_POLL: Duration = Duration::from_millis(1);
/// After SIGKILL the kernel still has to tear the processes down (freeing a large model's memory
/// can take a moment, and a process in uninterruptible sleep dies only when it wakes). Bounded
/// so a stuck driver cannot hang the supervisor; the report then says the group is not gone.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The outcome of stopping a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// The backend's pid (also its process group id).
    pub pid: u32,
    /// How the backend process ended; `None` if it could not be reaped within the bounded wait
    /// (it is then reaped in the background once the kernel lets it go).
    pub exit: Option<ExitInfo>,
    /// Whether SIGKILL had to be sent because something outlived `shutdown_ms` (or the backend
    /// had already died and left members of its group behind).
    pub forced_kill: bool,
    /// From the first signal to the end of the confirmation.
    pub elapsed: Duration,
    /// Whether no live process is left in the group (`kill(-pgid, 0)` fails with ESRCH, or only
    /// zombies awaiting their reaper remain). `false` means memory may still be held.
    pub group_gone: bool,
}

impl fmt::Display for StopReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group_gone && self.exit.is_some() {
            write!(f, "backend pid {} exited, memory released", self.pid)
        } else {
            write!(
                f,
                "backend pid {} was killed but its process group is not confirmed gone",
                self.pid
            )
        }
    }
}

/// Poll `done` (after [`FIRST_POLL`], doubling up to [`POLL`]) until it holds or `deadline`
/// passes; returns its last value.
async fn poll_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    let mut interval = FIRST_POLL;
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(interval.min(deadline - now)).await;
        interval = (interval * 2).min(POLL);
    }
}

/// Has the leader exited and no other member of its group survived?
fn settled(group: &mut ChildGroup) -> bool {
    group.observe_exit().is_some() && !group.group_state().is_live()
}

/// Stop the whole group: SIGTERM, `grace`, SIGKILL, reap, confirm.
///
/// The leader stays an unreaped zombie until the group has settled, so both signals go to a
/// pinned pgid (see [`super::group`]).
pub(crate) async fn terminate(group: &mut ChildGroup, grace: Duration) -> StopReport {
    let started = Instant::now();
    let mut forced_kill = false;

    if !group.is_reaped() {
        // Also sent when the leader already exited: stragglers get the same grace.
        let _ = group.signal_group(Signal::SIGTERM);
        if !poll_until(started + grace, || settled(group)).await {
            let _ = group.signal_group(Signal::SIGKILL);
            forced_kill = true;
            poll_until(Instant::now() + KILL_WAIT, || settled(group)).await;
        }
        group.reap();
    } else if group.group_state().is_live() {
        // The leader was reaped earlier (after it died on its own) and members survived it.
        // They pin the pgid while alive. Its server is gone, so nothing is left to shut down
        // gracefully.
        let _ = group.signal_group(Signal::SIGKILL);
        forced_kill = true;
        poll_until(Instant::now() + KILL_WAIT, || {
            !group.group_state().is_live()
        })
        .await;
    }

    let report = StopReport {
        pid: group.pid(),
        exit: group.reap(),
        forced_kill,
        elapsed: started.elapsed(),
        group_gone: group.is_reaped() && !group.group_state().is_live(),
    };
    // The benchmark's stop row reads this line.
    tracing::debug!(
        target: "strata::switch",
        pid = report.pid,
        stop_us = report.elapsed.as_micros() as u64,
        forced_kill,
        "backend group stopped"
    );
    if !report.group_gone {
        tracing::warn!(
            pid = report.pid,
            "backend process group still has live members after SIGKILL"
        );
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines() {
        let mut report = StopReport {
            pid: 48213,
            exit: Some(ExitInfo::Code(0)),
            forced_kill: false,
            elapsed: Duration::from_millis(300),
            group_gone: true,
        };
        assert_eq!(
            report.to_string(),
            "backend pid 48213 exited, memory released"
        );
        report.group_gone = false;
        assert_eq!(
            report.to_string(),
            "backend pid 48213 was killed but its process group is not confirmed gone"
        );
    }
}
