//! Stopping the backend, two ways:
//!
//! - [`terminate`], the ordinary stop (swap, idle unload, `off`, drain, probe restart): SIGTERM
//!   to the Strata server process alone, so Strata runs its own shutdown (it cancels its
//!   requests, then tells its native engine `QUIT`, which is where the engine saves its state and
//!   frees pinned memory); up to `shutdown_ms` for the whole group to exit on its own; then
//!   SIGKILL to whatever is left of the group. A signal straight to the group would reach the
//!   engine before Strata could tell it `QUIT`.
//! - [`kill`], for a failed or cancelled start and a forced shutdown: SIGKILL to the group at
//!   once. A graceful stop in progress turns into this when its `hurry` flag is raised.
//!
//! Both reap the leader and confirm the group is gone with a bounded poll.

use std::fmt;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::cancel::{Cancel, CancelSignal};
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

/// The ordinary stop: SIGTERM to the server alone, up to `grace` for the group to exit, then
/// SIGKILL to the group; reap, confirm. Raising `hurry` (a forced shutdown) ends the grace at
/// once.
///
/// The leader stays an unreaped zombie until the group has settled, so every signal goes to a
/// pinned pid and pgid (see [`super::group`]).
pub(crate) async fn terminate(
    group: &mut ChildGroup,
    grace: Duration,
    hurry: Option<&CancelSignal>,
) -> StopReport {
    let started = Instant::now();
    let mut forced_kill = false;
    if group.observe_exit().is_none() {
        let _ = group.signal_leader(Signal::SIGTERM);
        let waited = async { poll_until(started + grace, || settled(group)).await };
        let settled_in_grace = match hurry {
            None => waited.await,
            Some(hurry) => tokio::select! {
                settled = waited => settled,
                () = Cancel(hurry).cancelled() => false,
            },
        };
        if !settled_in_grace {
            forced_kill = kill_group(group).await;
        }
    } else {
        // The server died on its own (or was never started properly): nothing is left that
        // could shut its engine down, so whatever survived it is killed.
        forced_kill = kill_group(group).await;
    }
    finish(group, started, forced_kill)
}

/// A failed or cancelled start, or a forced shutdown: SIGKILL to the group at once; reap,
/// confirm.
pub(crate) async fn kill(group: &mut ChildGroup) -> StopReport {
    let started = Instant::now();
    let forced_kill = kill_group(group).await;
    finish(group, started, forced_kill)
}

/// SIGKILL whatever lives in the group and wait (bounded) until it is gone; true if a signal was
/// sent.
async fn kill_group(group: &mut ChildGroup) -> bool {
    if group.is_reaped() {
        // The leader was reaped earlier (after it died on its own); only live members pin the
        // pgid, so the group is signalled only if some are seen.
        if !group.group_state().is_live() {
            return false;
        }
        let _ = group.signal_group(Signal::SIGKILL);
        poll_until(Instant::now() + KILL_WAIT, || {
            !group.group_state().is_live()
        })
        .await;
        return true;
    }
    if settled(group) {
        group.reap();
        return false;
    }
    let _ = group.signal_group(Signal::SIGKILL);
    poll_until(Instant::now() + KILL_WAIT, || settled(group)).await;
    group.reap();
    true
}

fn finish(group: &mut ChildGroup, started: Instant, forced_kill: bool) -> StopReport {
    if !group.is_reaped() && settled(group) {
        group.reap();
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
