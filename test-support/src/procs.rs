//! Process liveness and limits through procfs. A zombie counts as gone: it holds no memory, and
//! an orphan killed by its parent-death signal may stay a zombie of PID 1 forever in a container
//! whose init never reaps.

use std::path::Path;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// `(state, pgrp)` of a process from `/proc/PID/stat`, or `None` if there is no such process.
pub fn stat(pid: u32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything; count from the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    matches!(stat(pid), Some((state, _)) if !matches!(state, 'Z' | 'X' | 'x'))
}

/// The command line of `pid`, arguments joined by spaces.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// `(soft, hard)` open-file limit of `pid` from `/proc/PID/limits` (`None` for `unlimited` or
/// no such process).
pub fn open_file_limits(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    let mut values = line["Max open files".len()..].split_ascii_whitespace();
    Some((values.next()?.parse().ok()?, values.next()?.parse().ok()?))
}

/// The file descriptors `pid` has open (the entries of `/proc/PID/fd`), if it exists.
pub fn open_fds(pid: u32) -> Option<Vec<u32>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// Whether `pid` is alive (not a zombie) and its command line mentions `marker` (a path only
/// this test uses), so a recycled PID is never mistaken for one of this test's processes.
pub fn is_alive_with(pid: u32, marker: &Path) -> bool {
    is_alive(pid)
        && cmdline(pid).is_some_and(|line| line.contains(marker.to_string_lossy().as_ref()))
}

/// Whether any non-zombie process is in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    if killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
            .and_then(stat)
            .is_some_and(|(state, pgrp)| pgrp == pgid && !matches!(state, 'Z' | 'X' | 'x'))
    })
}

/// Sends `signal` to `pid`, ignoring a process that is already gone.
pub fn signal(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(raw), signal);
    }
}

/// Sends `signal` to process group `pgid`, ignoring a group that is already gone.
pub fn signal_group(pgid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pgid) {
        let _ = killpg(Pid::from_raw(raw), signal);
    }
}

/// Whether `pid` is a zombie (exited, not yet reaped by its parent).
pub fn is_zombie(pid: u32) -> bool {
    matches!(stat(pid), Some(('Z', _)))
}
