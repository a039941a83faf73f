//! [`TempDir`]: a private (0700) directory for one test, removed on drop.
//!
//! Names are short (`sr<pid>-<seq>-<tag>` under `std::env::temp_dir()`) because the sockets
//! live inside and a Unix socket path must stay under 108 bytes. Set `STRATA_TEST_KEEP_TMP=1`
//! to keep the directory of a failing test for inspection.
//!
//! Clones share the directory; it is removed when the last clone is dropped, so a reader such
//! as strata-e2e's `FakeLog` can keep it alive after the daemon that used it is gone.

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
        let base = std::env::temp_dir();
        TempDir::create_in(&base, tag)
            .unwrap_or_else(|(path, err)| panic!("cannot create {}: {err}", path.display()))
    }

    /// Like [`TempDir::new`], in `base` instead of the usual temp dir (for a test that needs a
    /// particular place, such as `/tmp` whatever `TMPDIR` says).
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        TempDir::create_in(base, tag)
            .unwrap_or_else(|(path, err)| panic!("cannot create {}: {err}", path.display()))
    }

    /// Like [`TempDir::new`], but on `/dev/shm` when that is usable: a tmpfs makes `fsync` and
    /// `sync_data` nearly free, which tests that sync thousands of lines need (a disk-backed
    /// `/tmp` costs milliseconds a sync). Falls back to the usual temp dir.
    pub fn fast(tag: &str) -> TempDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir()
            && let Ok(dir) = TempDir::create_in(shm, tag)
        {
            return dir;
        }
        TempDir::new(tag)
    }

    fn create_in(base: &Path, tag: &str) -> Result<TempDir, (PathBuf, std::io::Error)> {
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
        let path = base.join(name);
        create_with_mode(&path, 0o700).map_err(|err| (path.clone(), err))?;
        Ok(TempDir {
            inner: Arc::new(Inner { path }),
        })
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
        create_with_mode(&path, mode)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
        path
    }

    /// Writes `contents` to the file `name` in the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.inner.path.join(name);
        fs::write(&path, contents)
            .unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
        path
    }
}

/// `mkdir` with `mode`, then `chmod` to exactly `mode`: the umask may have removed bits the
/// caller asked for (it never adds any).
fn create_with_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    fs::DirBuilder::new().mode(mode).create(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).inspect_err(|_| {
        let _ = fs::remove_dir(path);
    })
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
