//! Helpers shared by the request-log writer tests (`accounting_writer`, `accounting_full_disk`):
//! private temporary directories, padded JSON test lines, reading a log file back, and bounded
//! polling.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Bound for anything a test waits for; a passing wait returns as soon as its condition holds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A private (0700) temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        Self::new_in(std::env::temp_dir(), tag)
    }

    /// Under `/dev/shm` (tmpfs: cheap `sync_data`) when usable, else the usual temp dir.
    pub fn fast(tag: &str) -> Self {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            let probe = Self::try_new_in(shm.to_path_buf(), tag);
            if let Some(dir) = probe {
                return dir;
            }
        }
        Self::new(tag)
    }

    fn new_in(base: PathBuf, tag: &str) -> Self {
        Self::try_new_in(base, tag).expect("create private temp dir")
    }

    fn try_new_in(base: PathBuf, tag: &str) -> Option<Self> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let path = base.join(format!(
            "strata-acct-test-{}-{}-{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::DirBuilder::new().mode(0o700).create(&path).ok()?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).ok()?;
        Some(Self(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A JSON object text of exactly `len` bytes carrying `seq`.
pub fn padded(seq: u64, len: usize) -> String {
    let head = format!("{{\"seq\":{seq},\"pad\":\"");
    let tail = "\"}";
    let pad = len
        .checked_sub(head.len() + tail.len())
        .expect("len too small");
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// The `seq` of every complete line of `path`; panics on a partial or non-JSON line.
pub fn file_seqs(path: &Path) -> Vec<u64> {
    let text = fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends in a partial line",
        path.display()
    );
    text.lines()
        .map(|l| {
            let value: Value = serde_json::from_str(l).expect("line is JSON");
            value["seq"].as_u64().expect("line has seq")
        })
        .collect()
}

/// Polls `done` until it holds; panics naming `what` after [`DEADLINE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}
