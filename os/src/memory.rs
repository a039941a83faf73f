//! Handing the heap's free memory back to the kernel after a burst (the proxy's memory task).

/// Hands the heap's free memory back to the kernel (glibc's `malloc_trim(0)`, which also
/// releases free pages in the middle of the heap, not only at its top). glibc keeps freed
/// memory for reuse: after a burst of thousands of connections is over, the process would
/// otherwise stay at the burst's size. Costs a walk of the free lists (milliseconds for tens
/// of megabytes), so call it when a burst has ended, not per request. A no-op where the C
/// library is not glibc.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks and shrinks the allocator's own
    // free lists under the allocator's locks, and glibc documents it as callable at any time
    // from any thread.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed memory comes back: a 64 MiB heap of small blocks, freed, then trimmed, leaves
    /// the process's RSS near where it was before.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn released_memory_leaves_the_process() {
        fn rss_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        }
        // Small blocks (below the mmap threshold) from the main heap, with one block kept at
        // the end so that the free memory is not at the top of the heap (plain `free` would
        // return a free top by itself).
        let mut blocks: Vec<Vec<u8>> = (0..16_384).map(|n| vec![n as u8; 4096]).collect();
        let pin = vec![1u8; 4096];
        let grown = rss_kib();
        blocks.clear();
        blocks.shrink_to_fit();
        let freed = rss_kib();
        release_free_memory();
        let trimmed = rss_kib();
        drop(pin);
        assert!(
            trimmed + 32 * 1024 < grown && trimmed < freed,
            "RSS grown {grown} KiB, freed {freed} KiB, trimmed {trimmed} KiB"
        );
    }
}
