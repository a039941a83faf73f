//! A weights file on disk for the prefetch tests and the swap benchmark: written whole (no
//! sparse blocks) and synced, so that `posix_fadvise(DONTNEED)` can make it cold, with its
//! page-cache residency read by `mincore`. Removed on drop.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use strata_os::page_cache;

pub struct WeightsFile {
    pub path: PathBuf,
    pub len: u64,
}

impl WeightsFile {
    /// `DIR/TAG-PID.weights` of `len` bytes (a whole number of MiB).
    pub fn create(dir: &Path, tag: &str, len: u64) -> WeightsFile {
        std::fs::create_dir_all(dir).expect("the weights directory");
        let path = dir.join(format!("{tag}-{}.weights", std::process::id()));
        let mut file = File::create(&path).expect("create the weights file");
        // Not zeros only, and every block written.
        let block: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        for _ in 0..len >> 20 {
            file.write_all(&block).expect("write the weights file");
        }
        file.sync_all().expect("sync the weights file");
        WeightsFile { path, len }
    }

    /// Bytes of the file in the page cache now.
    pub fn resident(&self) -> u64 {
        let file = File::open(&self.path).expect("open the weights file");
        page_cache::resident_bytes(&file, 0, self.len).expect("mincore")
    }

    /// Makes the file cold; false (said on stderr) where the file system keeps every page
    /// resident (tmpfs), so a cold file cannot be made.
    pub fn evict(&self) -> bool {
        page_cache::evict(&File::open(&self.path).expect("open the weights file"))
            .expect("posix_fadvise(DONTNEED)");
        let resident = self.resident();
        if resident > self.len / 10 {
            eprintln!(
                "skipped: {} stays resident after DONTNEED ({resident} of {} bytes; tmpfs?)",
                self.path.display(),
                self.len
            );
            return false;
        }
        true
    }
}

impl Drop for WeightsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
