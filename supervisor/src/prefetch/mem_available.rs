//! `MemAvailable` from `/proc/meminfo`: the kernel's estimate of memory a
//! new workload can use without swapping, which the prefetch bound
//! (`prefetch_min_free_bytes`) is measured against.

/// The machine's `MemAvailable` in bytes; `None` where it cannot be read
/// (the prefetch is then skipped: an unbounded read is not worth the risk).
pub fn available_bytes() -> Option<u64> {
    parse_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo =
            "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(parse_available(meminfo), Some(20_480_000 * 1024));
        assert_eq!(parse_available("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_available("MemAvailable: many kB\n"), None);
        assert!(available_bytes().is_some_and(|bytes| bytes > 0));
    }
}
