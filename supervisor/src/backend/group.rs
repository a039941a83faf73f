//! The owned backend child and its process group.
//!
//! [`ChildGroup`] is the single owner of the spawned Strata process. The child is the leader of
//! its own process group (pgid == pid), so "the backend" is the whole group: Strata's engine
//! process and anything else it starts are grandchildren in the same group.
//!
//! Two rules keep group signals from ever hitting an unrelated process:
//! - The leader's exit is first *observed* with `waitid(WNOWAIT)`, which leaves it a zombie. As
//!   long as the zombie exists its pid, and so the pgid number, cannot be reused, so `killpg` is
//!   safe. Only then is it reaped.
//! - After the leader is reaped, the pgid number stays reserved while any other member lives, so
//!   signalling the group is still safe while members remain. (The only window is between the
//!   last member dying and a new process reusing the number *as a group id*, which needs a full
//!   pid wrap-around in between; callers only signal after seeing live members.)
//!
//! Group liveness counts zombies as gone: an orphaned grandchild that exited is re-parented to
//! PID 1 (systemd reaps it; a minimal container init may never do so), and a zombie holds no
//! memory. `kill(-pgid, 0) == ESRCH` is the fast path; otherwise `/proc` is scanned for a member
//! that is not a zombie.
//!
//! Dropping a `ChildGroup` whose leader was never reaped SIGKILLs the group and reaps the leader
//! (on a short-lived helper thread if it is not dead yet), so a forgotten or cancelled start can
//! never leave a loaded model behind.

use std::fmt;
use std::io;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

/// How the backend's main process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitInfo {
    /// It exited with this status code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
    /// It is gone but its status could not be read (another waiter reaped it, or it died of a
    /// signal `nix` cannot name).
    Unknown,
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitInfo::Code(code) => write!(f, "exit code {code}"),
            ExitInfo::Signal(sig) => match Signal::try_from(sig) {
                Ok(named) => write!(f, "killed by signal {sig} ({})", named.as_str()),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            ExitInfo::Unknown => f.write_str("exit status unknown"),
        }
    }
}

/// Where the group leader (the direct child) is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leader {
    Running,
    /// Exited, still a zombie: the pgid number is pinned.
    Exited(ExitInfo),
    /// Reaped: no zombie left; the pgid number is pinned only by other live members.
    Reaped(ExitInfo),
}

/// Whether anything of a process group is still alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupState {
    /// No process has this process group id.
    Gone,
    /// Only zombies are left (an unreaped leader, or orphans awaiting PID 1).
    OnlyZombies,
    /// At least one member is alive (or liveness could not be determined).
    Live,
}

impl GroupState {
    pub(crate) fn is_live(self) -> bool {
        self == GroupState::Live
    }
}

/// The spawned backend process, leader of its own process group.
#[derive(Debug)]
pub(crate) struct ChildGroup {
    pid: Pid,
    leader: Leader,
}

impl ChildGroup {
    /// Take ownership of a freshly spawned child that was put in its own group
    /// (`process_group(0)`), so its pgid equals its pid.
    pub(crate) fn adopt(pid: u32) -> Self {
        let raw = i32::try_from(pid).expect("Linux pids fit in i32");
        Self {
            pid: Pid::from_raw(raw),
            leader: Leader::Running,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        // Positive by construction (`adopt`).
        self.pid.as_raw().unsigned_abs()
    }

    pub(crate) fn is_reaped(&self) -> bool {
        matches!(self.leader, Leader::Reaped(_))
    }

    /// Non-blocking: has the leader exited? Does not reap it, so the pgid stays pinned.
    pub(crate) fn observe_exit(&mut self) -> Option<ExitInfo> {
        if let Leader::Exited(info) | Leader::Reaped(info) = self.leader {
            return Some(info);
        }
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.pid), flags) {
            Ok(WaitStatus::Exited(_, code)) => self.leader = Leader::Exited(ExitInfo::Code(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                self.leader = Leader::Exited(ExitInfo::Signal(sig as i32));
            }
            // StillAlive, or a stop/continue report we did not ask for.
            Ok(_) | Err(Errno::EINTR) => {}
            // The syscall succeeded but nix could not name the signal (a real-time signal).
            Err(Errno::EINVAL) => self.leader = Leader::Exited(ExitInfo::Unknown),
            // Someone else reaped it (SIGCHLD set to SIG_IGN, or a stray waitpid(-1)).
            Err(Errno::ECHILD) => self.leader = Leader::Reaped(ExitInfo::Unknown),
            Err(err) => tracing::warn!(pid = self.pid.as_raw(), %err, "waitid on backend failed"),
        }
        match self.leader {
            Leader::Exited(info) | Leader::Reaped(info) => Some(info),
            Leader::Running => None,
        }
    }

    /// Reap the leader if it has exited (observed or not). Returns its exit once reaped.
    pub(crate) fn reap(&mut self) -> Option<ExitInfo> {
        if let Leader::Reaped(info) = self.leader {
            return Some(info);
        }
        let observed = self.observe_exit()?;
        let info = match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => ExitInfo::Code(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => ExitInfo::Signal(sig as i32),
            // Observed as exited, so a WNOHANG reap cannot find it running; keep the zombie
            // state and let the caller retry rather than guess.
            Ok(_) | Err(Errno::EINTR) => return None,
            // Reaped, but unnamed signal (EINVAL) or already reaped elsewhere (ECHILD).
            Err(_) => observed,
        };
        self.leader = Leader::Reaped(info);
        Some(info)
    }

    /// Send `signal` to the leader alone (the Strata server), which then stops the rest of its
    /// group itself.
    ///
    /// Callers send only while the leader is unreaped, so the pid cannot name another process.
    pub(crate) fn signal_leader(&self, signal: Signal) -> Result<(), Errno> {
        nix::sys::signal::kill(self.pid, signal)
    }

    /// Send `signal` to every member of the group.
    ///
    /// Callers send only while the leader is unreaped (pinned pgid) or after seeing live members.
    pub(crate) fn signal_group(&self, signal: Signal) -> Result<(), Errno> {
        killpg(self.pid, signal)
    }

    /// What is left of the group right now.
    pub(crate) fn group_state(&self) -> GroupState {
        group_state(self.pid)
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        if self.is_reaped() {
            return;
        }
        // Last resort, reached when a Backend is dropped without stop() or a start future is
        // dropped mid-way: nothing may outlive its owner and keep a model loaded. The unreaped
        // leader pins the pgid, so this SIGKILL cannot reach an unrelated group.
        let _ = self.signal_group(Signal::SIGKILL);
        if self.reap().is_some() {
            return;
        }
        // The kernel needs a moment to finish the killed process; wait for exactly this pid on a
        // helper thread instead of blocking the async runtime or leaving a zombie.
        let pid = self.pid;
        let spawned = std::thread::Builder::new()
            .name("backend-reaper".into())
            .spawn(move || while let Err(Errno::EINTR) = waitpid(pid, None) {});
        if let Err(err) = spawned {
            tracing::warn!(pid = pid.as_raw(), %err, "could not start a reaper thread; the killed backend stays a zombie");
        }
    }
}

/// What is left of process group `pgid` right now.
pub(crate) fn group_state(pgid: Pid) -> GroupState {
    match killpg(pgid, None) {
        Err(Errno::ESRCH) => GroupState::Gone,
        _ => match live_member_in_proc(pgid) {
            Ok(true) | Err(_) => GroupState::Live,
            Ok(false) => GroupState::OnlyZombies,
        },
    }
}

/// Scan `/proc` for a process in group `pgid` that is not a zombie (or being torn down).
fn live_member_in_proc(pgid: Pid) -> io::Result<bool> {
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // Processes vanish while we scan; a missing stat file just means "not a member".
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, pgrp)) = parse_stat(&stat)
            && pgrp == pgid.as_raw()
            && !matches!(state, 'Z' | 'X' | 'x')
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The processes of group `pgid` that are alive (not zombies), as far as
/// `/proc` shows them now.
pub(crate) fn live_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (state, pgrp) = parse_stat(&stat)?;
            (i64::from(pgrp) == i64::from(pgid) && !matches!(state, 'Z' | 'X' | 'x')).then_some(pid)
        })
        .collect()
}

/// `(state, pgrp)` from a `/proc/PID/stat` line. The command name is in parentheses and may
/// itself contain spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_info_messages_are_short_and_generic() {
        assert_eq!(ExitInfo::Code(3).to_string(), "exit code 3");
        assert_eq!(
            ExitInfo::Signal(9).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(ExitInfo::Signal(40).to_string(), "killed by signal 40");
        assert_eq!(ExitInfo::Unknown.to_string(), "exit status unknown");
    }

    #[test]
    fn parse_stat_handles_odd_command_names() {
        let line = "4242 (py (weird) name) S 1 4240 4240 0 -1 4194560 95 0 0 0";
        assert_eq!(parse_stat(line), Some(('S', 4240)));
        assert_eq!(parse_stat("12 (z) Z 1 12 12"), Some(('Z', 12)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_group_is_live_and_a_free_number_is_gone() {
        let own = nix::unistd::getpgrp();
        assert_eq!(group_state(own), GroupState::Live);
        // pid_max is at most 2^22 on Linux, so this group id cannot exist.
        assert_eq!(group_state(Pid::from_raw(i32::MAX - 1)), GroupState::Gone);
    }
}
