//! The page cache, as the weights prefetch sees it: how much of a file is in memory already
//! (`mincore` over a read-only mapping), the hints that ask the kernel to read a range ahead
//! (`posix_fadvise(WILLNEED)`) or to drop a file's clean pages (`DONTNEED`, which the
//! benchmark and tests use to make a file cold without root), and the lowered priority the
//! prefetching thread runs at (idle I/O class, nice 19), so that it only uses the disk and the
//! CPU when nothing else wants them.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
use nix::libc;

/// Bytes mapped (and checked) at once: bounds the `mincore` vector to 256 KiB.
const WINDOW: u64 = 1 << 30;

fn page_size() -> u64 {
    // SAFETY: sysconf takes no pointers and only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// How many bytes of `file`'s range `offset..offset + len` are in the page cache, counted in
/// whole pages (a range that starts or ends inside a page counts all of it) and at most `len`.
/// Reads nothing and faults nothing in: the mapping is only asked which of its pages are
/// resident. The range must lie within the file.
pub fn resident_bytes(file: &File, offset: u64, len: u64) -> io::Result<u64> {
    let page = page_size();
    let start = offset / page * page;
    let end = offset.saturating_add(len);
    let mut resident = 0;
    let mut at = start;
    let mut vector = Vec::new();
    while at < end {
        let window = (end - at).min(WINDOW);
        let pages = window.div_ceil(page) as usize;
        vector.clear();
        vector.resize(pages, 0u8);
        resident += resident_pages(file, at, window as usize, &mut vector)? * page;
        at += window;
    }
    Ok(resident.min(len))
}

/// `mincore` of one window: the number of resident pages of `len` bytes at `offset`.
fn resident_pages(file: &File, offset: u64, len: usize, vector: &mut [u8]) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
    // SAFETY: a fresh read-only shared mapping of an open file; the kernel picks the address,
    // nothing reads or writes through it (mincore only inspects page tables and the page
    // cache), and it is unmapped below before the function returns, on every path.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            offset,
        )
    };
    if address == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `address..address + len` is the mapping made above and `vector` holds one byte
    // per page of it (the caller sized it with `len.div_ceil(page)`).
    let result = unsafe { libc::mincore(address, len, vector.as_mut_ptr()) };
    let error = (result != 0).then(io::Error::last_os_error);
    // SAFETY: unmaps exactly the mapping made above; nothing refers to it any more.
    unsafe {
        libc::munmap(address, len);
    }
    if let Some(error) = error {
        return Err(error);
    }
    Ok(vector.iter().filter(|byte| **byte & 1 == 1).count() as u64)
}

/// Asks the kernel to start reading `len` bytes at `offset` into the page cache
/// (`posix_fadvise(WILLNEED)`); returns at once.
pub fn will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    advise(file, offset, len, PosixFadviseAdvice::POSIX_FADV_WILLNEED)
}

/// Drops `file`'s clean pages from the page cache (`posix_fadvise(DONTNEED)` on the whole
/// file): how a benchmark or test makes a file cold. Dirty pages stay until written back, so
/// write the file with `sync_all` first. Needs no privilege.
pub fn evict(file: &File) -> io::Result<()> {
    advise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED)
}

fn advise(file: &File, offset: u64, len: u64, advice: PosixFadviseAdvice) -> io::Result<()> {
    let range = |value: u64| {
        libc::off_t::try_from(value)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range out of bounds"))
    };
    posix_fadvise(file, range(offset)?, range(len)?, advice).map_err(io::Error::from)
}

/// Lowers the calling thread's priority for background I/O: the idle I/O scheduling class
/// (its reads are served only when the disk has nothing else to do) and nice 19. Both apply
/// to this thread alone (Linux keeps them per thread), so call it at the start of a thread of
/// its own.
pub fn lower_thread_priority() -> io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: ioprio_set takes three integers and no pointers; with IOPRIO_WHO_PROCESS and a
    // thread ID it changes only that thread's I/O priority.
    let result = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setpriority takes integers only; PRIO_PROCESS with a thread ID changes that
    // thread's nice value on Linux.
    let result = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A file written and synced, evicted, then read: residency goes from (nearly) none to
    /// all of it. On a file system without a page cache of its own (tmpfs keeps every page
    /// resident), eviction cannot be seen, and the test says so and stops there.
    #[test]
    fn residency_follows_eviction_and_reads() {
        let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let path = dir.join(format!("page-cache-{}.bin", std::process::id()));
        let len: u64 = 8 << 20;
        {
            let mut file = File::create(&path).unwrap();
            file.write_all(&vec![7u8; len as usize]).unwrap();
            file.sync_all().unwrap();
        }
        let file = File::open(&path).unwrap();
        evict(&file).unwrap();
        let cold = resident_bytes(&file, 0, len).unwrap();
        if cold == len {
            eprintln!(
                "skipped: {} keeps every page resident (tmpfs?)",
                dir.display()
            );
            std::fs::remove_file(&path).unwrap();
            return;
        }
        assert!(
            cold < len / 4,
            "after eviction {cold} of {len} bytes resident"
        );
        let mut first_half = vec![0u8; (len / 2) as usize];
        (&file).read_exact(&mut first_half).unwrap();
        let half = resident_bytes(&file, 0, len / 2).unwrap();
        assert_eq!(half, len / 2, "the half that was read");
        (&file).read_to_end(&mut Vec::new()).unwrap();
        assert_eq!(resident_bytes(&file, 0, len).unwrap(), len);
        assert_eq!(resident_bytes(&file, 0, 0).unwrap(), 0);
        evict(&file).unwrap();
        assert!(resident_bytes(&file, 0, len).unwrap() < len / 4);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_thread_priority_can_be_lowered() {
        std::thread::spawn(|| {
            lower_thread_priority().unwrap();
            let status =
                std::fs::read_to_string(format!("/proc/self/task/{}/stat", nix::unistd::gettid()))
                    .unwrap();
            // Field 19 (after the parenthesised name) is the nice value.
            let after_name = &status[status.rfind(')').unwrap() + 2..];
            let nice: i64 = after_name.split(' ').nth(16).unwrap().parse().unwrap();
            assert_eq!(nice, 19, "{status}");
        })
        .join()
        .unwrap();
    }
}
