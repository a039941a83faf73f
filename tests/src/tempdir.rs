//! [`TempDir`]: a private (0700) directory for one test, removed on drop.
//!
//! Names are short (`sr<pid>-<seq>-<tag>` under `std::env::temp_dir()`) because the sockets
//! live inside and a Unix socket path must stay under 108 bytes. Set `STRATA_TEST_KEEP_TMP=1`
//! to keep the directory of a failing test for inspection.
//!
//! Clones share the directory; it is removed when the last clone is dropped, so a reader such
//! as [`crate::FakeLog`] can keep it alive after the daemon that used it is gone.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A private temporary directory, removed (recursively) when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct TempDir {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
}

impl TempDir {
    /// Creates `TMP/sr<pid>-<seq>-<tag>` with mode 0700. `tag` (cut to 12 bytes) only helps a
    /// human find the directory of a given test.
    pub fn new(tag: &str) -> TempDir {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(12)
            .collect();
        let name = format!(
            "sr{}-{}-{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
        // The umask may have removed bits we want, never added any; be explicit anyway.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|err| panic!("cannot chmod {}: {err}", path.display()));
        TempDir {
            inner: Arc::new(Inner { path }),
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A path inside the directory.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.inner.path.join(relative)
    }

    /// Creates a subdirectory with exactly `mode` and returns its path.
    pub fn subdir(&self, name: &str, mode: u32) -> PathBuf {
        let path = self.inner.path.join(name);
        fs::DirBuilder::new()
            .mode(mode)
            .create(&path)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|err| panic!("cannot chmod {}: {err}", path.display()));
        path
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("STRATA_TEST_KEEP_TMP").is_some() {
            eprintln!("keeping {} (STRATA_TEST_KEEP_TMP)", self.path.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}
