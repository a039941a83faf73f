//! This process's own figures behind the standard `process_*` Prometheus
//! families (CPU time, memory, file descriptors, start time), read from
//! `/proc/self` when asked: each daemon reads its own, the supervisor for the
//! proxy to export. Any figure that cannot be read is absent rather than
//! zero.

use nix::sys::resource::{Resource, getrlimit};
use nix::unistd::{SysconfVar, sysconf};

/// One reading of this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessUsage {
    pub cpu_seconds: Option<f64>,
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

/// Reads this process's figures now.
pub fn own_process_usage() -> ProcessUsage {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let boot_time = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| boot_time_seconds(&text));
    let ticks = sysconf(SysconfVar::CLK_TCK).ok().flatten();
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten();
    let mut figures = stat
        .as_deref()
        .and_then(parse_stat)
        .map(|stat| stat.figures(ticks, page, boot_time))
        .unwrap_or_default();
    figures.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64);
    figures.max_fds = getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _hard)| soft);
    figures
}

/// The fields of `/proc/self/stat` used here, in their raw units.
#[derive(Debug, PartialEq)]
struct Stat {
    /// User and system CPU time, clock ticks.
    cpu_ticks: u64,
    /// Since boot, clock ticks.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

impl Stat {
    fn figures(&self, ticks: Option<i64>, page: Option<i64>, boot: Option<u64>) -> ProcessUsage {
        let ticks = ticks.filter(|t| *t > 0).map(|t| t as f64);
        ProcessUsage {
            cpu_seconds: ticks.map(|t| self.cpu_ticks as f64 / t),
            resident_memory_bytes: page
                .filter(|p| *p > 0)
                .map(|p| self.resident_pages * p as u64),
            virtual_memory_bytes: Some(self.virtual_bytes),
            start_time_seconds: ticks
                .zip(boot)
                .map(|(t, boot)| boot as f64 + self.start_ticks as f64 / t),
            ..ProcessUsage::default()
        }
    }
}

/// Parses `/proc/PID/stat` (proc(5)): fields counted after the command,
/// which is in parentheses and may itself hold spaces or parentheses.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // proc(5) numbers fields from 1; `rest` starts at field 3 (state).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The `btime` line of `/proc/stat`: boot time, seconds since the epoch.
fn boot_time_seconds(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_fields_are_counted_after_the_command() {
        // A command with a space and a parenthesis, as proc(5) allows.
        let text = "42 (strata (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 3 0 1000 8192000 300 18446744073709551615";
        let stat = parse_stat(text).unwrap();
        assert_eq!(
            stat,
            Stat {
                cpu_ticks: 300,
                start_ticks: 1000,
                virtual_bytes: 8_192_000,
                resident_pages: 300
            }
        );
        let figures = stat.figures(Some(100), Some(4096), Some(1_700_000_000));
        assert_eq!(figures.cpu_seconds, Some(3.0));
        assert_eq!(figures.resident_memory_bytes, Some(300 * 4096));
        assert_eq!(figures.start_time_seconds, Some(1_700_000_010.0));
        assert_eq!(parse_stat("42 (cut short) S 1"), None);
        assert_eq!(
            boot_time_seconds("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reads_its_own_figures() {
        let figures = own_process_usage();
        assert!(
            figures.resident_memory_bytes.is_some_and(|b| b > 0),
            "{figures:?}"
        );
        assert!(figures.open_fds.is_some_and(|n| n > 0), "{figures:?}");
        assert!(figures.max_fds.is_some_and(|n| n > 0), "{figures:?}");
        assert!(figures.cpu_seconds.is_some(), "{figures:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = figures.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
    }
}
