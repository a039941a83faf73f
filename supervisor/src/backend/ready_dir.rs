//! The private per-start directory that holds the backend's ready file.
//!
//! Each start gets a fresh 0700 directory under the daemon's private directory, so a ready file
//! left by an earlier start (or written by anyone else) can never be mistaken for this one. The
//! directory is removed when the [`ReadyDir`] is dropped, which happens when the start finishes,
//! whether it succeeded (then on a blocking-pool thread, off the grant's path), failed, or its
//! future was dropped.

use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file name the backend is told to write (`--ready-file DIR/ready.json`).
const READY_FILE: &str = "ready.json";

/// Distinguishes starts within one daemon process.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A freshly created, private directory; removed on drop.
#[derive(Debug)]
pub(crate) struct ReadyDir {
    path: PathBuf,
}

impl ReadyDir {
    /// Create `PARENT/start-PID-SEQ-NANOS` with mode 0700.
    pub(crate) fn create(parent: &Path) -> io::Result<Self> {
        for _ in 0..8 {
            let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = parent.join(format!("start-{}-{seq}-{nanos:08x}", std::process::id()));
            // mkdir never follows a symlink in the last component and fails if the name exists,
            // so this directory is new and ours.
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let dir = Self { path };
                    // The umask can only remove bits from 0700, but a umask such as 0200 would
                    // leave a directory the backend cannot write into; set the mode exactly.
                    fs::set_permissions(&dir.path, Permissions::from_mode(0o700))?;
                    return Ok(dir);
                }
                // A leftover from an earlier daemon with the same pid: pick another name.
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no unused ready-file directory name",
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory, then drops `watch` (its inotify watch), on a blocking-pool
    /// thread, so that a verified start's grant does not wait for the file system.
    pub(crate) fn remove_in_background<W: Send + 'static>(self, watch: W) {
        tokio::task::spawn_blocking(move || {
            drop(self);
            drop(watch);
        });
    }

    /// Where the backend writes its ready file.
    pub(crate) fn ready_file(&self) -> PathBuf {
        self.path.join(READY_FILE)
    }
}

impl Drop for ReadyDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %self.path.display(), %err, "could not remove the backend ready-file directory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_private_and_removed_on_drop() {
        let parent = std::env::temp_dir().join(format!("ready-dir-test-{}", std::process::id()));
        fs::create_dir(&parent).unwrap();
        let a = ReadyDir::create(&parent).unwrap();
        let b = ReadyDir::create(&parent).unwrap();
        assert_ne!(a.path(), b.path());
        let mode = fs::metadata(a.path()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        assert_eq!(a.ready_file(), a.path().join("ready.json"));
        fs::write(a.ready_file(), b"{}").unwrap();
        let (pa, pb) = (a.path().to_owned(), b.path().to_owned());
        drop(a);
        drop(b);
        assert!(!pa.exists() && !pb.exists());
        fs::remove_dir(&parent).unwrap();
    }
}
