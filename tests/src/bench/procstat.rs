//! What the benchmark reads from procfs: CPU time (`utime + stime` of `/proc/PID/stat`, every
//! thread of the process, including exited ones), resident memory (`VmRSS`, `VmHWM` of
//! `/proc/PID/status`), and a process's children (for nginx's workers).

use std::time::Duration;

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

/// The fields after the command name of `/proc/PID/stat` (field 3, the state, is index 0).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_ascii_whitespace().map(str::to_owned).collect())
}

/// `utime + stime` of `pid` in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    // utime is field 14 and stime field 15 of proc(5); index = field - 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU ticks as time.
pub fn ticks_to_duration(ticks: u64) -> Duration {
    Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / clock_ticks_per_second())
}

/// The parent PID of `pid`.
pub fn ppid(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Every live process whose parent is `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|pid| ppid(*pid) == Some(parent))
        .collect();
    pids.sort_unstable();
    pids
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Resident set size in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// Peak resident set size in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM")
}

/// A named set of processes whose CPU time is measured together (a target's daemons).
#[derive(Debug, Clone)]
pub struct Probe {
    /// `(label, pid)`, e.g. `("proxy", 123)`.
    pub procs: Vec<(&'static str, u32)>,
}

impl Probe {
    /// CPU ticks of each process, in `procs` order (0 for one that is gone).
    pub fn ticks(&self) -> Vec<u64> {
        self.procs
            .iter()
            .map(|(_, pid)| cpu_ticks(*pid).unwrap_or(0))
            .collect()
    }

    /// Total VmRSS in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.procs
            .iter()
            .map(|(_, pid)| rss_kib(*pid).unwrap_or(0))
            .sum()
    }

    /// Total VmHWM in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.procs
            .iter()
            .map(|(_, pid)| peak_rss_kib(*pid).unwrap_or(0))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_some());
        assert!(rss_kib(me).unwrap() > 0);
        assert!(peak_rss_kib(me).unwrap() >= rss_kib(me).unwrap() / 2);
        assert_eq!(ppid(me), Some(std::os::unix::process::parent_id()));
        assert!(clock_ticks_per_second() >= 1);
    }
}
