//! How much of a model's weights is in the page cache, in bounded time.
//!
//! `mincore` costs in proportion to the pages it is asked about, resident or
//! not, holes of a sparse file included (12 to 20 ms a GiB of one core on
//! the 2-core test machine: 20 s for a 1 TiB sparse file). So a measurement
//! examines at most [`EXAMINE_AT_MOST`] bytes of weights: up to that size it
//! is exact; beyond it, each file gets a share of that budget in proportion
//! to its length, examined as evenly spread samples of [`SAMPLE`] bytes (or
//! one smaller sample in the middle of a file whose share is less), and its
//! resident bytes are the resident fraction of its samples times its length.
//! A file gets about one sample per `total / 1024` bytes of it, so a file read
//! from its start (as loads and the prefetch read: the prefetch in chunks
//! of [`SAMPLE`] bytes too) is estimated within a 1,024th of the total.

use std::fs::File;

use strata_os::page_cache;

use super::files::WeightsFile;

/// The bytes of weights one measurement examines at most: exact up to this
/// total, estimated beyond. At most about 0.2 s of one core on the test
/// machine (0.14 to 0.19 s measured for a 1 TiB sparse file).
pub(super) const EXAMINE_AT_MOST: u64 = 8 << 30;

/// One sample: the prefetch's chunk.
pub(super) const SAMPLE: u64 = 8 << 20;

/// The unit samples are placed and sized in.
const ALIGN: u64 = 4096;

/// What a measurement found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Residency {
    /// The files' total length.
    pub total: u64,
    /// Their resident bytes: exact, or estimated from samples.
    pub resident: u64,
    /// Every page was examined.
    pub exact: bool,
}

/// Measures `files` within [`EXAMINE_AT_MOST`]. A file that cannot be
/// opened counts as not resident.
pub(super) fn measure(files: &[WeightsFile]) -> Residency {
    measure_within(files, EXAMINE_AT_MOST)
}

fn measure_within(files: &[WeightsFile], budget: u64) -> Residency {
    let total: u64 = files.iter().map(|file| file.len).sum();
    let mut resident = 0u64;
    let mut exact = true;
    for file in files {
        let share = if total <= budget {
            file.len
        } else {
            (u128::from(budget) * u128::from(file.len) / u128::from(total)) as u64
        };
        let ranges = samples(file.len, share);
        let Ok(handle) = File::open(&file.path) else {
            continue;
        };
        let mut examined = 0u64;
        let mut found = 0u64;
        for &(offset, len) in &ranges {
            found += page_cache::resident_bytes(&handle, offset, len).unwrap_or(0);
            examined += len;
        }
        resident += if examined >= file.len {
            found
        } else {
            exact = false;
            (u128::from(found) * u128::from(file.len) / u128::from(examined.max(1))) as u64
        };
    }
    Residency {
        total,
        resident: resident.min(total),
        exact,
    }
}

/// The ranges (offset, length) to examine of a file of `len` bytes with a
/// share of `share` bytes: the whole file when the share covers it, else
/// `share / SAMPLE` samples (at least one, smaller when the share is),
/// one in the middle of each of as many equal stretches of the file.
fn samples(len: u64, share: u64) -> Vec<(u64, u64)> {
    let count = (share / SAMPLE).max(1);
    let size = (share / count).max(1).div_ceil(ALIGN) * ALIGN;
    if share >= len || count.saturating_mul(size) >= len {
        return vec![(0, len)];
    }
    let stretch = len / count;
    (0..count)
        .map(|index| {
            let offset = (index * stretch + (stretch - size) / 2) / ALIGN * ALIGN;
            (offset, size.min(len - offset))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::path::PathBuf;

    use super::*;
    use strata_test_support::TempDir;

    #[test]
    fn samples_cover_a_file_within_its_share_or_all_of_it() {
        assert_eq!(samples(0, 0), [(0, 0)]);
        assert_eq!(samples(100, 100), [(0, 100)]);
        assert_eq!(samples(100 << 20, 200 << 20), [(0, 100 << 20)]);
        // 1 TiB with the whole budget: 1,024 samples of 8 MiB, one in the middle of each GiB.
        let tib = 1u64 << 40;
        let spread = samples(tib, EXAMINE_AT_MOST);
        assert_eq!(spread.len(), 1024);
        assert!(spread.iter().all(|&(_, len)| len == SAMPLE));
        assert_eq!(spread[0].0, (512 << 20) - (4 << 20));
        assert_eq!(spread[1].0 - spread[0].0, 1 << 30);
        let end = spread.last().map(|&(offset, len)| offset + len).unwrap();
        assert!(end <= tib && tib - end < 1 << 30);
        // A share under one sample: one smaller sample in the middle, page-aligned.
        let one = samples(1 << 30, 10_000);
        assert_eq!(one, [(((1 << 29) - 6144) / ALIGN * ALIGN, 12288)]);
        // Never more than the share, plus a page per sample for the rounding.
        for (len, share) in [
            (1u64 << 40, 3 << 30),
            (7 << 30, (5 << 30) + 12345),
            (1 << 20, 1),
        ] {
            let ranges = samples(len, share);
            let examined: u64 = ranges.iter().map(|&(_, len)| len).sum();
            assert!(
                examined <= share + ranges.len() as u64 * ALIGN,
                "{len} {share}"
            );
            assert!(ranges.iter().all(|&(offset, size)| offset + size <= len));
            assert!(
                ranges
                    .windows(2)
                    .all(|pair| pair[0].0 + pair[0].1 <= pair[1].0)
            );
        }
    }

    /// A 1 TiB sparse file that nothing has read: the measurement returns,
    /// estimated from its samples, and finds nothing resident. (It used to
    /// ask `mincore` about every page: 20 s of a core; the times are in
    /// docs/backend.md#what-was-resident-at-a-load-start, not asserted here.)
    #[test]
    fn a_1_tib_sparse_file_is_measured_from_samples() {
        let dir = TempDir::new("weights-sparse");
        let path = dir.join("sparse.bin");
        let file = File::create(&path).unwrap();
        if let Err(err) = file.set_len(1 << 40) {
            eprintln!(
                "skipped: {} does not allow a 1 TiB sparse file ({err})",
                dir.path().display()
            );
            return;
        }
        drop(file);
        let files = [WeightsFile { path, len: 1 << 40 }];
        assert_eq!(
            measure(&files),
            Residency {
                total: 1 << 40,
                resident: 0,
                exact: false,
            }
        );
    }

    /// Weights within the budget are measured exactly: a freshly written
    /// file is all resident (its pages are in the cache, dirty or not).
    #[test]
    fn weights_within_the_budget_are_measured_exactly() {
        let dir = TempDir::new("weights-exact");
        let len = 3 * SAMPLE + 123;
        let path = dir.join("w.bin");
        fs_write(&path, len);
        let files = [WeightsFile { path, len }];
        assert_eq!(
            measure(&files),
            Residency {
                total: len,
                resident: len,
                exact: true,
            }
        );
    }

    /// Beyond the budget the estimate follows what was read: half of a
    /// cold file read, two samples, one in each half, say half. A file
    /// system that keeps every page resident (tmpfs) cannot show it: the
    /// test says so and stops.
    #[test]
    fn beyond_the_budget_the_samples_estimate_what_was_read() {
        let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let path = dir.join(format!("residency-{}.bin", std::process::id()));
        let len = 8 * SAMPLE;
        fs_write(&path, len);
        let file = File::open(&path).unwrap();
        page_cache::evict(&file).unwrap();
        let files = [WeightsFile {
            path: path.clone(),
            len,
        }];
        if measure(&files).resident > len / 4 {
            eprintln!(
                "skipped: {} keeps the pages resident (tmpfs?)",
                dir.display()
            );
            std::fs::remove_file(&path).unwrap();
            return;
        }
        let mut first_half = vec![0u8; (len / 2) as usize];
        (&file).read_exact(&mut first_half).unwrap();
        let estimate = measure_within(&files, 2 * SAMPLE);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            estimate,
            Residency {
                total: len,
                resident: len / 2,
                exact: false,
            }
        );
    }

    /// Writes `len` bytes to `path` and syncs them.
    fn fs_write(path: &std::path::Path, len: u64) {
        let mut file = File::create(path).unwrap();
        file.write_all(&vec![7u8; len as usize]).unwrap();
        file.sync_all().unwrap();
    }
}
