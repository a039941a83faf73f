//! Wakes a waiter the moment an entry is created, written or renamed into a directory.
//!
//! The supervisor's readiness wait used to look for the backend's ready file every 50 ms, so a
//! model switch cost 25 ms on average between the file appearing and the first waiting request
//! being forwarded. An inotify watch on the private ready-file directory (created before the
//! spawn, so no event can be missed) reports the backend's `rename` or `close` at once. Callers
//! keep a poll as the fallback: every wake-up only means "look again", so a watch that cannot be
//! set up (instance limit, an odd filesystem) costs speed, never correctness.
//!
//! It lives here rather than in the supervisor because registering a descriptor with tokio is an
//! `unsafe` call (tokio cannot check that the descriptor stays open), and this crate is the one
//! place allowed an audited `unsafe` block (`lib.rs` lists them).

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// `AsyncFd` wants `AsRawFd`, which nix's `Inotify` only offers through `AsFd`.
struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// An inotify watch on one directory.
pub struct DirWatch {
    fd: AsyncFd<InotifyFd>,
}

impl DirWatch {
    /// Watch `dir` (not following a symlink; it must be a directory). Needs a tokio runtime
    /// with the IO driver.
    pub fn new(dir: &Path) -> io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        // A writer that renames a temp file into place shows up as MOVED_TO; CLOSE_WRITE and
        // CREATE cover one that writes the file in place.
        inotify.add_watch(
            dir,
            AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_CREATE
                | AddWatchFlags::IN_ONLYDIR
                | AddWatchFlags::IN_DONT_FOLLOW,
        )?;
        // SAFETY: the descriptor is owned by the `Inotify` moved into the `AsyncFd`, so it stays
        // open (and is not reused for another file) for as long as it is registered; it is
        // closed only when the `AsyncFd` drops, after deregistering.
        let fd = unsafe { AsyncFd::register_with_interest(InotifyFd(inotify), Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Self { fd })
    }

    /// Resolve when at least one event arrived since the last call (the events are drained; the
    /// caller looks at the directory again). After an unexpected error it never resolves,
    /// leaving the caller's poll in charge rather than spinning.
    pub async fn changed(&self) {
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                return std::future::pending().await;
            };
            match guard.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from)) {
                Ok(Ok(_events)) => return,
                Ok(Err(_)) => return std::future::pending().await,
                // Spurious readiness: `try_io` cleared it; wait again.
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use strata_test_support::tempdir::TempDir;

    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_rename_into_the_directory_wakes_the_watch() {
        let dir = TempDir::new("dir-watch");
        let watch = DirWatch::new(dir.path()).expect("inotify");
        let quiet = tokio::time::timeout(Duration::from_millis(20), watch.changed()).await;
        assert!(quiet.is_err(), "nothing happened yet");

        std::fs::write(dir.path().join("ready.json.tmp"), b"{}").unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("the write is reported");
        let quiet = tokio::time::timeout(Duration::from_millis(20), watch.changed()).await;
        assert!(quiet.is_err(), "the write's events were drained together");
        std::fs::rename(
            dir.path().join("ready.json.tmp"),
            dir.path().join("ready.json"),
        )
        .unwrap();
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("the rename is reported");
    }
}
